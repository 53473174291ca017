"""Polling instead of sleeping while a client waits on one request at a time (``stub-spin-us``).

Waking a sleeping process costs more than polling for a moment: a stub polls for its next
batch, and the server's event loop for the answer, only while the batch is all the server
has in flight; with more in flight, or with ``stub-spin-us=0``, both sleep. A context switch
count tells which happened: a stub that sleeps between batches switches out at least once
per batch.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from triton_core_python.process import StubProcess

from triton_core import InferenceRequest, Tensor
from triton_core.errors import Status, TritonError

pytestmark = pytest.mark.timeout(120)

#: a window far longer than the gap between two requests of an in-process loop, however
#: loaded the machine: the assertions below count on polls that find their message
WIDE_WINDOW_US = "10000"
REQUESTS = 200


def identity_request(value: int) -> InferenceRequest:
    return InferenceRequest("echo", {"INPUT0": Tensor("INPUT0", "INT32", np.array([value]))})


def context_switches(pid: int) -> int:
    """Times the process's main thread left its CPU. Both kinds: some virtual machines count
    a sleep in ``recv`` as a nonvoluntary switch."""
    total = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                total += int(line.split()[1])
    return total


def _write_echo(repo, write_model, models) -> None:
    config = models.IDENTITY_CONFIG.format(max_batch_size=0, dtype="TYPE_INT32", extra="")
    write_model(repo, "echo", models.IDENTITY, config)


async def _sequential(server, count: int) -> None:
    for value in range(count):
        response = await server.infer(identity_request(value))
        assert response.output("OUTPUT0").data.tolist() == [value]


async def test_a_stub_answering_one_request_at_a_time_polls_for_the_next_instead_of_sleeping(
    repo, write_model, models, make_server
):
    _write_echo(repo, write_model, models)
    options = {"python": {"stub-spin-us": WIDE_WINDOW_US}}
    async with make_server(repo, backend_options=options) as server:
        (instance,) = server.model("echo").pool.instances
        await _sequential(server, 20)  # the polling starts once batches come back to back
        before = context_switches(instance.pid)
        await _sequential(server, REQUESTS)
        switches = context_switches(instance.pid) - before
    # the stub's events thread and the odd preemption may switch; a sleep per batch would
    # be at least REQUESTS
    assert switches < REQUESTS // 2, switches


@pytest.mark.parametrize("setting", ["0", None])
async def test_a_stub_sleeps_between_batches_without_a_window_or_with_more_in_flight(
    repo, write_model, models, make_server, setting
):
    _write_echo(repo, write_model, models)
    spin = setting or WIDE_WINDOW_US
    async with make_server(repo, backend_options={"python": {"stub-spin-us": spin}}) as server:
        (instance,) = server.model("echo").pool.instances
        await _sequential(server, 20)
        before = context_switches(instance.pid)
        if setting == "0":
            await _sequential(server, REQUESTS)
        else:
            # two clients: the server has another request in flight, the stub must not
            # take a CPU from it by polling, so it sleeps whenever its queue is empty
            await asyncio.gather(*(_sequential(server, REQUESTS // 2) for _ in range(2)))
        switches = context_switches(instance.pid) - before
    if setting == "0":
        assert switches >= REQUESTS, switches
    else:
        # with two clients the queue is often empty for a moment: at least one sleep in
        # eight batches (runs measure one in three to one in four), where a polling stub
        # would hardly sleep at all
        assert switches >= REQUESTS // 8, switches


async def test_a_stub_sleeps_between_batches_of_big_tensors(repo, write_model, models, make_server):
    _write_echo(repo, write_model, models)
    big = np.arange(64 << 10, dtype=np.int32)  # 256 KiB: a wake-up is little beside it
    options = {"python": {"stub-spin-us": WIDE_WINDOW_US}}
    async with make_server(repo, backend_options=options) as server:
        (instance,) = server.model("echo").pool.instances
        await _sequential(server, 20)
        before = context_switches(instance.pid)
        for _ in range(REQUESTS // 4):
            request = InferenceRequest("echo", {"INPUT0": Tensor("INPUT0", "INT32", big)})
            response = await server.infer(request)
            assert np.array_equal(response.output("OUTPUT0").data, big)
        switches = context_switches(instance.pid) - before
    assert switches >= REQUESTS // 4, switches


async def test_only_the_stub_of_a_clients_batch_may_poll_not_one_called_through_bls(
    repo, write_model, models, make_server, monkeypatch
):
    """A BLS call's caller waits on it, and the caller's process or the server has the next
    thing to do: a second process polling beside them starves the server on two CPUs (BLS
    at c=1 ran at half speed). Context switches cannot tell it here (polling processes get
    preempted), so this reads what the server tells each stub."""
    _write_echo(repo, write_model, models)
    write_model(repo, "bls_echo", BLS_ECHO, BLS_ECHO_CONFIG)
    told: list[tuple[str, bool]] = []
    send = StubProcess._send_batch

    def recording(self, ident, batch, spin=False):
        told.append((self.settings.model_name, spin))
        return send(self, ident, batch, spin)

    monkeypatch.setattr(StubProcess, "_send_batch", recording)
    options = {"python": {"stub-spin-us": WIDE_WINDOW_US}}
    async with make_server(repo, backend_options=options) as server:
        for value in range(10):
            tensor = Tensor("INPUT0", "INT32", np.array([value]))
            response = await server.infer(InferenceRequest("bls_echo", {"INPUT0": tensor}))
            assert response.output("OUTPUT0").data.tolist() == [value]
        await _sequential(server, 10)
    assert told[:20] == [("bls_echo", True), ("echo", False)] * 10
    assert told[20:] == [("echo", True)] * 10


async def test_answers_found_by_polling_reach_their_requests_bls_and_streams_included(
    repo, write_model, models, make_server
):
    _write_echo(repo, write_model, models)
    write_model(repo, "repeat", models.REPEAT, models.REPEAT_CONFIG)
    write_model(repo, "bls_echo", BLS_ECHO, BLS_ECHO_CONFIG)
    options = {"python": {"stub-spin-us": WIDE_WINDOW_US}}
    async with make_server(repo, backend_options=options) as server:
        await _sequential(server, 50)
        for value in range(30):
            request = InferenceRequest(
                "bls_echo", {"INPUT0": Tensor("INPUT0", "INT32", np.array([value]))}
            )
            response = await server.infer(request)
            assert response.output("OUTPUT0").data.tolist() == [value]
            count = InferenceRequest("repeat", {"COUNT": Tensor("COUNT", "INT32", np.array([3]))})
            assert len([r async for r in server.infer_stream(count)]) == 4
        await _sequential(server, 50)


async def test_a_process_killed_while_the_server_polls_fails_its_request_and_is_replaced(
    repo, write_model, models, make_server
):
    write_model(repo, "proc", models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "1"))
    options = {"python": {"stub-spin-us": WIDE_WINDOW_US}}

    def action(value: int) -> InferenceRequest:
        return InferenceRequest("proc", {"ACTION": Tensor("ACTION", "INT32", np.array([value]))})

    async with make_server(repo, backend_options=options) as server:
        (instance,) = server.model("proc").pool.instances
        for _ in range(20):
            await server.infer(action(0))
        old_pid = instance.pid
        with pytest.raises(TritonError) as info:
            await server.infer(action(1))  # the model SIGKILLs its own process
        assert info.value.status is Status.UNAVAILABLE
        response = await server.infer(action(0))
        assert int(response.output("INFO").data[0]) == instance.pid != old_pid


@pytest.mark.parametrize(
    ("value", "expected"),
    [("-1", "expected an integer from 0"), ("10001", "at most 10000"), ("x", "an integer")],
)
async def test_a_window_out_of_bounds_is_refused(
    repo, write_model, models, make_server, value, expected
):
    _write_echo(repo, write_model, models)
    with pytest.raises(TritonError) as info:
        async with make_server(repo, backend_options={"python": {"stub-spin-us": value}}):
            pass
    assert f"stub-spin-us={value}" in info.value.message
    assert expected in info.value.message


BLS_ECHO = """
import triton_python_backend_utils as pb_utils


def echoed(request):
    tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
    result = pb_utils.InferenceRequest(
        model_name="echo", requested_output_names=["OUTPUT0"], inputs=[tensor]
    ).exec()
    if result.has_error():
        raise pb_utils.TritonModelException(result.error().message())
    return pb_utils.InferenceResponse(result.output_tensors())


class TritonPythonModel:
    def execute(self, requests):
        return [echoed(request) for request in requests]
"""
BLS_ECHO_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


async def test_after_answering_a_bls_call_the_server_polls_for_the_callers_batch_answer(
    repo, write_model, models, make_server, monkeypatch
):
    """Once a BLS call's answer is written and the caller's batch is all the server has to
    do, the caller's answer (or its next call) is the next thing to come: the loop polls
    for it instead of sleeping. Read from the polls the server makes, as above."""
    _write_echo(repo, write_model, models)
    write_model(repo, "bls_echo", BLS_ECHO, BLS_ECHO_CONFIG)
    polls: list[tuple[str, bool]] = []
    wait = StubProcess._wait_for_answer

    def recording(self, deadline, after_reply=False):
        polls.append((self.settings.model_name, after_reply))
        return wait(self, deadline, after_reply)

    monkeypatch.setattr(StubProcess, "_wait_for_answer", recording)
    options = {"python": {"stub-spin-us": WIDE_WINDOW_US}}
    async with make_server(repo, backend_options=options) as server:
        for value in range(10):
            tensor = Tensor("INPUT0", "INT32", np.array([value]))
            response = await server.infer(InferenceRequest("bls_echo", {"INPUT0": tensor}))
            assert response.output("OUTPUT0").data.tolist() == [value]
    after_replies = [model for model, after_reply in polls if after_reply]
    # only the caller is polled for; with a 10 ms window nearly every call's answer is
    # followed by a poll (one that ran out stops them until an answer comes in time again)
    assert set(after_replies) == {"bls_echo"}, polls
    assert len(after_replies) >= 5, polls


async def test_no_poll_after_a_bls_answer_without_a_window(
    repo, write_model, models, make_server, monkeypatch
):
    _write_echo(repo, write_model, models)
    write_model(repo, "bls_echo", BLS_ECHO, BLS_ECHO_CONFIG)
    polled: list[object] = []
    monkeypatch.setattr(StubProcess, "_wait_for_answer", lambda *args: polled.append(args))
    async with make_server(repo, backend_options={"python": {"stub-spin-us": "0"}}) as server:
        tensor = Tensor("INPUT0", "INT32", np.array([1]))
        response = await server.infer(InferenceRequest("bls_echo", {"INPUT0": tensor}))
        assert response.output("OUTPUT0").data.tolist() == [1]
    assert polled == []
