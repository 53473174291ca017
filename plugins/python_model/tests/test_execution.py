"""How ``execute`` runs, as Triton's Python backend runs it: the stub's ``sys.argv``,
``async def execute`` on decoupled models (concurrent, BLS awaited, exceptions logged), and
the response sender's rules on decoupled and non-decoupled models. Real ``triton-core
serve`` process, stock tritonclient."""

from __future__ import annotations

import json
import queue
import time
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from triton_core.testing import ModelRepository, ServerProcess

pytestmark = pytest.mark.timeout(300)

#: answers its process's sys.argv, as JSON
ARGV = """
import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = pb_utils.Tensor("OUT", np.array([json.dumps(sys.argv).encode()], np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

ARGV_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

#: a model that is not decoupled answering through its response sender, by MODE:
#: 1 sends (value 1) and the final flag, returns None; 2 sends value 2 once execute has
#: returned; 3 sends only the final flag; 4 sends twice; 5 sends value 1 then returns
#: value 0; 6 returns value 0 and sends once execute has returned (which must fail: logged)
SENDER = """
import sys
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def answer(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        returned = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            response = None
            if mode == 1:
                sender.send(answer(1), FINAL)
            elif mode == 2:
                self.after_return(lambda sender=sender: sender.send(answer(2), FINAL))
            elif mode == 3:
                sender.send(flags=FINAL)
            elif mode == 4:
                sender.send(answer(1))
                sender.send(answer(1))
            elif mode == 5:
                sender.send(answer(1), FINAL)
                response = answer(0)
            elif mode == 6:
                self.after_return(lambda sender=sender: self.send_late(sender))
                response = answer(0)
            returned.append(response)
        return returned

    def send_late(self, sender):
        try:
            sender.send(answer(2), FINAL)
        except pb_utils.TritonModelException as exc:
            pb_utils.Logger.log_info(f"late send refused: {exc}")

    def after_return(self, action):
        # run once the main thread has left execute: a send after execute returned
        main = threading.main_thread().ident
        code = type(self).execute.__code__

        def in_execute():
            frame = sys._current_frames().get(main)
            while frame is not None:
                if frame.f_code is code:
                    return True
                frame = frame.f_back
            return False

        def run():
            deadline = time.monotonic() + 60
            while in_execute() and time.monotonic() < deadline:
                time.sleep(0.001)
            action()

        threading.Thread(target=run, daemon=True).start()
"""

INT32_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: decoupled, returns responses from execute (an error in Triton); IN 1 first sends its
#: own response with the final flag, so that only that one reaches the client
RETURNS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            if int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0]) == 1:
                out = pb_utils.Tensor("OUT", np.array([1], np.int32))
                request.get_response_sender().send(
                    pb_utils.InferenceResponse([out]),
                    pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        out = pb_utils.Tensor("OUT", np.array([0], np.int32))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

#: decoupled coroutine: answers once IN requests with that same IN are in flight together
#: (so only concurrent executes answer at all); a negative IN raises after closing the sender
GATE = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.rounds = {}

    async def execute(self, requests):
        for request in requests:
            size = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            if size < 0:
                request.get_response_sender().send(
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                )
                raise ValueError("wait_secs cannot be negative")
            arrived = self.rounds.setdefault(size, [0, asyncio.Event()])
            arrived[0] += 1
            if arrived[0] == size:
                arrived[1].set()
            await asyncio.wait_for(arrived[1].wait(), 60)
            out = pb_utils.Tensor("OUT", np.array([size], np.int32))
            request.get_response_sender().send(
                pb_utils.InferenceResponse([out]), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
"""

#: decoupled coroutine that forwards each request to ``gate`` with a decoupled BLS call
BLS_GATE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            bls = pb_utils.InferenceRequest(
                model_name="gate",
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT"],
            )
            sender = request.get_response_sender()
            for response in await bls.async_exec(decoupled=True):
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

#: not decoupled: polls is_cancelled() inside execute until the client cancels its call
CANCEL = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pb_utils.Logger.log_info("cancel: polling")
        deadline = time.monotonic() + 60
        while not requests[0].is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        pb_utils.Logger.log_info(f"cancel: is_cancelled() {requests[0].is_cancelled()}")
        error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
        return [pb_utils.InferenceResponse(error=error) for _ in requests]
"""

#: decoupled: sends 0, waits until its request is cancelled, then sends 1 with the final flag
UNTIL_CANCELLED = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def answer(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        sender = requests[0].get_response_sender()
        sender.send(answer(0))
        deadline = time.monotonic() + 60
        while not requests[0].is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        cancelled = int(requests[0].is_cancelled())
        sender.send(answer(cancelled), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

#: cancels its decoupled BLS call to until_cancelled after the first response and reads on:
#: answers the values received, or the error that ended the call
BLS_CANCEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        bls = pb_utils.InferenceRequest(
            model_name="until_cancelled",
            inputs=[pb_utils.get_input_tensor_by_name(requests[0], "IN")],
            requested_output_names=["OUT"],
        )
        responses = bls.exec(decoupled=True)
        values = [int(next(responses).output_tensors()[0].as_numpy()[0])]
        responses.cancel()
        for response in responses:
            if response.has_error():
                return [pb_utils.InferenceResponse(error=response.error())]
            values.append(int(response.output_tensors()[0].as_numpy()[0]))
        out = pb_utils.Tensor("OUT", np.array(values, np.int32))
        return [pb_utils.InferenceResponse([out])]
"""

BLS_CANCEL_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""

DECOUPLED_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = ModelRepository(tmp_path_factory.mktemp("execution"))
    for name, source, config in (
        ("argv", ARGV, ARGV_CONFIG),
        ("sender", SENDER, INT32_CONFIG),
        ("returns", RETURNS, DECOUPLED_CONFIG),
        ("gate", GATE, DECOUPLED_CONFIG),
        ("bls_gate", BLS_GATE, DECOUPLED_CONFIG),
        ("cancel", CANCEL, INT32_CONFIG),
        ("until_cancelled", UNTIL_CANCELLED, DECOUPLED_CONFIG),
        ("bls_cancel", BLS_CANCEL, BLS_CANCEL_CONFIG),
    ):
        repository.add_model(name, dedent(config), versions={1: {"model.py": dedent(source)}})
    with ServerProcess([repository.root]) as process:
        process.wait_ready()
        yield process


def int_input(value: int) -> list[grpcclient.InferInput]:
    return [
        grpcclient.InferInput("IN", [1], "INT32").set_data_from_numpy(np.array([value], np.int32))
    ]


def stream(server, model: str, values: list[int], expected: int) -> list[tuple]:
    """``expected`` (result, error) pairs of a gRPC stream that sent one request per value."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for value in values:
            client.async_stream_infer(model, int_input(value))
        return [results.get(timeout=60) for _ in range(expected)]
    finally:
        client.stop_stream(cancel_requests=True)


def wait_for_log(server, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in server.log():
        assert time.monotonic() < deadline, server.log()[-3000:]
        time.sleep(0.05)


def test_the_model_sees_an_empty_command_line_as_in_triton(server):
    # unittest.main() or argparse in a model must not see the stub's own options
    result = grpcclient.InferenceServerClient(server.grpc_url).infer("argv", int_input(0))
    assert json.loads(result.as_numpy("OUT")[0]) == [""]


def sender_answer(server, mode: int) -> int:
    result = grpcclient.InferenceServerClient(server.grpc_url).infer("sender", int_input(mode))
    return int(result.as_numpy("OUT")[0])


def test_a_non_decoupled_model_answers_through_its_sender_before_or_after_returning(server):
    assert sender_answer(server, 1) == 1
    assert sender_answer(server, 2) == 2


def test_a_non_decoupled_final_flag_before_a_response_is_tritons_error(server):
    with pytest.raises(InferenceServerException) as info:
        sender_answer(server, 3)
    assert (
        "Unable to send response. Non-decoupled model cannot send complete final before "
        "sending a response." in info.value.message()
    )


def test_a_non_decoupled_request_keeps_the_response_it_sent_when_execute_then_fails(server):
    # the second send raises in execute; the first response had reached the client (on a
    # unary call Triton's frontend then fails with "expected a single response, got 2")
    ((result, error),) = stream(server, "sender", [4], 1)
    assert error is None and int(result.as_numpy("OUT")[0]) == 1
    # returning a response for a request already answered raises too
    assert sender_answer(server, 5) == 1


def test_a_returned_response_closes_the_sender(server):
    assert sender_answer(server, 6) == 0
    wait_for_log(
        server,
        "late send refused: Unable to send response. Non-decoupled model cannot send more than "
        "one response.",
    )


def test_a_decoupled_execute_that_returns_responses_fails_its_open_requests(server):
    ((result, error),) = stream(server, "returns", [0], 1)
    assert result is None
    assert (
        "is using the decoupled mode and the execute function must return None." in error.message()
    )
    # a request answered before execute returned keeps its response, and gets no error
    results = stream(server, "returns", [1, 0], 2)
    assert int(results[0][0].as_numpy("OUT")[0]) == 1
    assert results[1][0] is None and "must return None" in results[1][1].message()


def test_decoupled_coroutines_run_concurrently(server):
    # each execute answers only once all three are in flight at once
    results = stream(server, "gate", [3, 3, 3], 3)
    assert [error for _, error in results] == [None] * 3


def test_decoupled_bls_awaited_in_coroutines_leaves_the_loop_to_the_others(server):
    # awaiting async_exec(decoupled=True) waits for the first response without holding the
    # loop, so the other coroutines start their BLS calls meanwhile
    results = stream(server, "bls_gate", [2, 2], 2)
    assert [error for _, error in results] == [None] * 2


def test_a_decoupled_coroutines_exception_is_logged(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: None)
    try:
        client.async_stream_infer("gate", int_input(-1))
        wait_for_log(server, "ValueError: wait_secs cannot be negative")
    finally:
        client.stop_stream(cancel_requests=True)


def test_a_cancelled_unary_call_reaches_is_cancelled_during_execute(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    call = client.async_infer("cancel", int_input(0), callback=lambda result, error: None)
    wait_for_log(server, "cancel: polling")
    call.cancel()
    wait_for_log(server, "cancel: is_cancelled() True")


def test_a_cancelled_decoupled_bls_call_goes_on_until_its_model_stops(server):
    # as Triton's: the called model sees is_cancelled() and its responses still arrive
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer("bls_cancel", int_input(0))
    assert result.as_numpy("OUT").tolist() == [0, 1]
