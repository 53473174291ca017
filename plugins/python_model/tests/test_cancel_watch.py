"""Cancellation told to the stub: a decoupled request's ``is_cancelled()`` is answered in the
model's process, with no question to the server, and still turns true once the client
stops waiting (the server sends ``CANCELLED`` with the request's watch token)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import numpy as np
import pytest

from triton_core import InferenceRequest, Tensor

pytestmark = pytest.mark.timeout(120)

#: each request: ASKS is_cancelled() calls, then one response with how many said True; then
#: (from a thread) responses every 10 ms until is_cancelled(), then a final with the count
POLLER = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def out(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            asks = int(pb_utils.get_input_tensor_by_name(request, "ASKS").as_numpy()[0])
            sender = request.get_response_sender()
            sender.send(out(sum(request.is_cancelled() for _ in range(asks))))
            threading.Thread(target=self.until_cancelled, args=(request, sender)).start()
        return None

    def until_cancelled(self, request, sender):
        deadline = time.monotonic() + 60
        sent = 0
        while not sender.is_cancelled() and time.monotonic() < deadline:
            sender.send(out(-1))
            sent += 1
            time.sleep(0.01)
        pb_utils.Logger.log_info(f"poller saw the cancel after {sent}: {request.is_cancelled()}")
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""
POLLER_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "ASKS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def asks(count: int) -> InferenceRequest:
    array = np.array([count], dtype=np.int32)
    return InferenceRequest("poller", {"ASKS": Tensor("ASKS", "INT32", array)})


async def test_is_cancelled_is_answered_in_the_stub_and_sees_the_cancel(
    repo, write_model, make_server, caplog
):
    write_model(repo, "poller", POLLER, POLLER_CONFIG)
    caplog.set_level(logging.INFO, logger="triton_core_python.model")
    async with make_server(repo) as server:
        (instance,) = server.model("poller").pool.instances
        stub = instance._stub
        for _ in range(3):
            stream = server.infer_stream(asks(200))
            async with contextlib.aclosing(stream) as responses:
                first = await anext(responses)
                assert int(first.output("OUT").data[0]) == 0  # 200 answers, none true
                await anext(responses)  # the thread polls too
            # leaving the stream early cancels the request: the thread sees it and ends
        assert stub.cancel_queries == 0
        for _ in range(600):
            if caplog.text.count("poller saw the cancel") == 3:
                break
            await asyncio.sleep(0.05)
        assert caplog.text.count("poller saw the cancel after") == 3
        assert caplog.text.count("after") == caplog.text.count(": True")
        assert stub.cancel_queries == 0


def test_watches_are_bounded_and_fall_back_to_asking(monkeypatch):
    import socket

    from triton_core_python import ipc, server_calls
    from triton_core_python.regions import MappedRegions
    from triton_core_python.shm import Arena

    monkeypatch.setattr(server_calls, "_MAX_WATCHED", 4)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    calls = server_calls.ServerCalls(
        ours, ipc.Memory(Arena(1 << 16)), MappedRegions(),
        encode_response=lambda packer, response: (), answer_readiness=lambda ident: None,
        exit_process=lambda code: None,
    )  # fmt: skip
    asked: list[int] = []
    monkeypatch.setattr(calls, "_ask", lambda kind, key: asked.append(key) or 1)
    try:
        calls.watch(1, 101)
        calls._told_cancelled(102)  # told before the batch that watches it arrived
        calls.watch(2, 102)
        assert (calls.is_cancelled(1), calls.is_cancelled(2), asked) == (False, True, [])
        calls.unwatch(2)  # its final response went out: the server knows
        assert calls.is_cancelled(2) and asked == [2]
        for key in range(3, 7):  # past the bound the oldest watch goes back to asking
            calls.watch(key, 100 + key)
        assert calls.is_cancelled(1) and asked == [2, 1]
        assert calls.is_cancelled(6) is False and asked == [2, 1]
        for token in range(200, 205):  # stale tokens fill the bound: nothing is trusted
            calls._told_cancelled(token)
        assert calls.is_cancelled(6) and asked == [2, 1, 6]
    finally:
        ours.close()
        theirs.close()
