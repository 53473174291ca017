"""BLS answers read by the waiting thread itself, from a reply channel (``replies.py``).

A thread that waits for its own BLS call (``exec()``, iterating ``exec(decoupled=True)``)
reads the answers from a socket of its own, so an answer wakes it alone instead of the
stub's events thread first. These tests check that the events thread stays asleep, and
that what the events socket guaranteed still holds: answers reach the right caller (threads,
several iterators, more calls than the pool holds), a dropped iterator's answers are freed,
a slow reader does not block the server, big tensors, messages that arrive meanwhile, a
process killed mid-call.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from triton_core_python import ipc, replies
from triton_core_python.replies import ReplyOutbox
from triton_core_python.shm import Arena

from triton_core import InferenceRequest, Tensor
from triton_core.errors import Status, TritonError

pytestmark = pytest.mark.timeout(120)

#: MODE 0: echo VALUE through a BLS call; 1: sum the responses of repeat(COUNT=VALUE[0]);
#: 2: 12 threads (more than the pool's channels) echo VALUE+i 5 times each; 3: two
#: iterators read interleaved; 4: drop 20 iterators of burst (16 KiB responses, in shared
#: memory) after their first response, then echo; 5: read a long stream of burst slowly (a
#: pause after its first response), with an echo call in its middle; 6: call
#: proc(ACTION=VALUE); 7: echo 50 times while a thread asks for a metric's value and logs.
#: TID: the native id of the stub's events thread.
CALLER = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def echo(values):
    tensor = pb_utils.Tensor("INPUT0", np.asarray(values, dtype=np.int32))
    result = pb_utils.InferenceRequest(
        model_name="echo", requested_output_names=["OUTPUT0"], inputs=[tensor]
    ).exec()
    if result.has_error():
        raise pb_utils.TritonModelException(result.error().message())
    return pb_utils.get_output_tensor_by_name(result, "OUTPUT0").as_numpy()


def repeat(count, model="repeat", width=1):
    tensors = [pb_utils.Tensor("COUNT", np.array([count], dtype=np.int32))]
    if model == "burst":
        tensors.append(pb_utils.Tensor("WIDTH", np.array([width], dtype=np.int32)))
    return pb_utils.InferenceRequest(
        model_name=model, requested_output_names=["OUT"], inputs=tensors
    ).exec(decoupled=True)


def values(responses):
    out = []
    for response in responses:
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        tensor = pb_utils.get_output_tensor_by_name(response, "OUT")
        if tensor is not None:
            out.append(int(tensor.as_numpy()[0]))
    return out


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            "caller_waits", "metric asked for while BLS calls wait", pb_utils.MetricFamily.GAUGE
        )
        self.metric = self.family.Metric(labels={"model": "caller"})

    def is_ready(self):  # asked of the process while its model thread waits
        return True

    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            out = np.asarray(getattr(self, f"mode{mode}")(value), dtype=np.int32).reshape(-1)
            events = next(t for t in threading.enumerate() if t.name == "stub-events")
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", out),
                pb_utils.Tensor("TID", np.array([events.native_id], dtype=np.int64)),
            ]))
        return responses

    def mode0(self, value):
        return echo(value)

    def mode1(self, value):
        return values(repeat(int(value[0])))

    def mode2(self, value):
        results = {}

        def work(index):
            results[index] = [int(echo(value + index * 100 + call)[0]) for call in range(5)]

        threads = [threading.Thread(target=work, args=(index,)) for index in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [item for index in range(12) for item in results[index]]

    def mode3(self, value):
        first, second = repeat(3), repeat(5)
        head = values([next(first)])
        return head + values(second) + values(first)

    def mode4(self, value):
        for _ in range(20):
            iterator = repeat(int(value[0]), "burst", width=4096)
            next(iterator)
            del iterator
        return echo(value)

    def mode5(self, value):
        iterator = repeat(int(value[0]), "burst")
        head = values([next(iterator)])
        time.sleep(1.0)  # the rest of the stream piles up
        middle = [int(echo([-7])[0])]
        rest = values(iterator)
        return [len(head + rest), sum(head + rest)] + middle

    def mode6(self, value):
        tensor = pb_utils.Tensor("ACTION", value.astype(np.int32))
        result = pb_utils.InferenceRequest(
            model_name="proc", requested_output_names=["INFO"], inputs=[tensor]
        ).exec()
        if result.has_error():
            return [-result.error().code()]
        return [1]

    def mode7(self, value):
        stop = threading.Event()
        asked = []

        def ask():
            while not stop.is_set():
                self.metric.set(len(asked))
                asked.append(self.metric.value())
                pb_utils.Logger.log_info(f"asked {len(asked)}")

        thread = threading.Thread(target=ask)
        thread.start()
        try:
            echoed = [int(echo(value + call)[0]) for call in range(50)]
        finally:
            stop.set()
            thread.join()
        return echoed + [len(asked)]
"""
#: a decoupled model that sends COUNT responses at once (OUT: WIDTH times the response's
#: index), then a flag-only final
BURST = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            width = pb_utils.get_input_tensor_by_name(request, "WIDTH")
            width = 1 if width is None else int(width.as_numpy()[0])
            sender = request.get_response_sender()
            for index in range(count):
                out = pb_utils.Tensor("OUT", np.full(width, index, dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""
CALLER_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "VALUE" data_type: TYPE_INT32 dims: [ -1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "TID" data_type: TYPE_INT64 dims: [ 1 ] }
]
"""


@pytest.fixture
def caller_repo(repo, write_model, models):
    write_model(
        repo, "echo", models.IDENTITY,
        models.IDENTITY_CONFIG.format(max_batch_size=0, dtype="TYPE_INT32", extra=""),
    )  # fmt: skip
    write_model(repo, "repeat", models.REPEAT, models.REPEAT_CONFIG)
    burst_config = models.REPEAT_CONFIG.replace("DELAY_MS", "WIDTH").replace(
        'name: "OUT" data_type: TYPE_INT32 dims: [ 1 ]',
        'name: "OUT" data_type: TYPE_INT32 dims: [ -1 ]',
    )
    write_model(repo, "burst", BURST, burst_config)
    write_model(repo, "proc", models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "1"))
    write_model(repo, "caller", CALLER, CALLER_CONFIG)
    return repo


def call(mode: int, value) -> InferenceRequest:
    array = np.asarray(value, dtype=np.int32).reshape(-1)
    return InferenceRequest(
        "caller",
        {
            "MODE": Tensor("MODE", "INT32", np.array([mode], dtype=np.int32)),
            "VALUE": Tensor("VALUE", "INT32", array),
        },
    )


async def ask(server, mode: int, value) -> list[int]:
    response = await server.infer(call(mode, value))
    return response.output("OUT").data.tolist()


def thread_switches(pid: int, tid: int) -> int:
    """Times one thread of a process left its CPU (both kinds, as test_polling counts)."""
    lines = Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
    return sum(int(line.split()[1]) for line in lines if line.split(":")[0].endswith("_switches"))


async def test_the_answers_of_exec_wake_the_waiting_thread_not_the_events_thread(
    caller_repo, make_server
):
    calls = 100
    async with make_server(caller_repo) as server:
        (instance,) = server.model("caller").pool.instances
        response = await server.infer(call(0, [1]))
        events_thread = int(response.output("TID").data[0])
        before = thread_switches(instance.pid, events_thread)
        for value in range(calls):
            assert await ask(server, 0, [value]) == [value]
            assert await ask(server, 1, [3]) == [0, 1, 2]
        switches = thread_switches(instance.pid, events_thread) - before
    # relayed, each call's answers would wake it at least once (calls * 2)
    assert switches < calls // 4, switches


async def test_threads_of_a_model_each_get_their_own_answers_past_the_pool(
    caller_repo, make_server
):
    async with make_server(caller_repo) as server:
        for base in (0, 1000):
            expected = [base + index * 100 + call for index in range(12) for call in range(5)]
            assert await ask(server, 2, [base]) == expected


async def test_iterators_read_interleaved_and_dropped_ones_free_their_answers(
    caller_repo, make_server
):
    async with make_server(caller_repo) as server:
        assert await ask(server, 3, [0]) == [0, 0, 1, 2, 3, 4, 1, 2]
        (instance,) = server.model("caller").pool.instances
        arena = instance._stub.memory.arena  # the server's: the blocks of BLS answers
        assert await ask(server, 4, [4]) == [4]
        assert await ask(server, 4, [4]) == [4]  # the drained channels serve again
        for _ in range(100):
            live = sum(segment.live for segment in arena._segments.values())
            if live == 0:
                break
            await asyncio.sleep(0.05)
        assert live == 0, "the dropped iterators' answers were not freed"
        assert len(instance._stub._replies) <= replies.POOL_LIMIT


async def test_a_slow_reader_of_a_long_stream_blocks_neither_the_server_nor_its_calls(
    caller_repo, make_server, monkeypatch
):
    """Answers that do not fit the channel's socket wait in the server's outbox: the model
    reads one response, makes another call meanwhile (which needs the server's loop), then
    reads the rest."""
    held = []
    flush = ReplyOutbox._flush

    def counting(self):
        held.append(len(self._held))
        flush(self)

    monkeypatch.setattr(ReplyOutbox, "_flush", counting)
    count = 8000  # the socket takes about 2,700 such answers
    async with make_server(caller_repo) as server:
        assert await ask(server, 5, [count]) == [count, count * (count - 1) // 2, -7]
    assert held, "the stream fit the socket: nothing was held"


async def test_big_tensors_come_back_through_shared_memory(caller_repo, make_server):
    big = np.arange(1 << 20, dtype=np.int32)  # 4 MiB
    async with make_server(caller_repo) as server:
        for shift in range(4):
            response = await server.infer(call(0, big + shift))
            assert np.array_equal(response.output("OUT").data, big + shift)


async def test_metric_answers_and_logs_go_on_while_the_model_thread_waits(caller_repo, make_server):
    async with make_server(caller_repo) as server:
        result = await ask(server, 7, [10])
    assert result[:50] == list(range(10, 60))
    assert result[50] > 0  # the thread's metric calls were answered meanwhile


async def test_batches_and_readiness_queries_arrive_while_the_model_thread_waits(
    caller_repo, make_server
):
    async with make_server(caller_repo) as server:
        # proc ACTION 2 is busy 0.3 s: the next batches reach the caller while it waits
        calls = [server.infer(call(6, [2])) for _ in range(3)]
        tasks = [asyncio.ensure_future(request) for request in calls]
        await asyncio.sleep(0.1)
        assert await server.check_model_ready("caller")
        for response in await asyncio.gather(*tasks):
            assert response.output("OUT").data.tolist() == [1]


async def test_a_caller_killed_while_it_waits_fails_its_request_and_is_replaced(
    caller_repo, make_server
):
    async with make_server(caller_repo) as server:
        (instance,) = server.model("caller").pool.instances
        old_pid = instance.pid
        waiting = asyncio.ensure_future(server.infer(call(6, [2])))
        await asyncio.sleep(0.1)  # the caller waits for proc's answer
        os.kill(old_pid, signal.SIGKILL)
        with pytest.raises(TritonError) as info:
            await waiting
        assert info.value.status is Status.UNAVAILABLE
        for _ in range(100):
            if instance.pid != old_pid:
                break
            await asyncio.sleep(0.05)
        assert await ask(server, 0, [5]) == [5]
        assert await ask(server, 1, [2]) == [0, 1]
        assert instance.pid != old_pid


async def test_a_callee_killed_mid_call_answers_the_waiting_thread_an_error(
    caller_repo, make_server
):
    async with make_server(caller_repo) as server:
        # proc ACTION 1 kills its own process: the BLS answer is UNAVAILABLE's error code
        (code,) = await ask(server, 6, [1])
        assert code < 0
        assert await ask(server, 6, [0]) == [1]  # proc is back
        assert await ask(server, 0, [3]) == [3]


async def test_an_outbox_holds_what_the_socket_cannot_take_and_sends_it_in_order():
    ours, theirs = ipc.channel_pair()
    memory = ipc.Memory(Arena(1 << 20))
    loop = asyncio.get_running_loop()
    outbox = ReplyOutbox(ipc.Channel(ours, memory, 2), loop)
    reader = ipc.Channel(theirs, ipc.Memory(Arena(1 << 20)), 2)
    count = 5000
    for index in range(count):  # far more than the socket holds: none of it blocks
        outbox.send(ipc.BLS_RESPONSE, index, (index == count - 1, None), None)
    assert outbox._held
    received = []
    while len(received) < count:
        message = reader.recv(nonblocking=True)
        if message is None:
            await asyncio.sleep(0)  # the loop's writer callback sends more
            continue
        received.append(message.ident)
    assert received == list(range(count))
    assert not outbox._held
    outbox.close()
    with pytest.raises(ipc.PeerClosed):
        outbox.send(ipc.BLS_RESPONSE, 0, (True, None), None)
    reader.close()
