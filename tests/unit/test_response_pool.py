"""The response pool of ``--grpc-max-response-pool-size`` and the stream sender that uses it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.plugins import stream_backend
from tests.plugins.stream_backend import read_progress
from tests.support import stays_true_async, wait_until_async
from triton_core import InferenceRequest, InferenceResponse, Tensor
from triton_core.backends.streaming import ResponsePool, StreamSender
from triton_core.plugins.manager import create_plugin_manager
from triton_core.server.core import Server, ServerOptions

#: how long a producer that must wait is watched before it counts as waiting
WAITING_SECS = 0.3
#: how long a producer that may go on is given to do so
GOES_ON_SECS = 10.0


def in_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def assert_waits(thread: threading.Thread) -> None:
    thread.join(WAITING_SECS)
    assert thread.is_alive(), "the producer went on while the pool was full"


def assert_goes_on(thread: threading.Thread) -> None:
    thread.join(GOES_ON_SECS)
    assert not thread.is_alive(), "the producer still waits"


def test_n_credits_pass_and_the_next_waits_for_a_release() -> None:
    pool = ResponsePool(3)
    for _ in range(3):
        pool.acquire()
    assert pool.held == 3
    fourth = in_thread(pool.acquire)
    assert_waits(fourth)
    pool.release()
    assert_goes_on(fourth)
    assert pool.held == 3


def test_close_wakes_every_waiter_and_nobody_waits_after() -> None:
    pool = ResponsePool(1)
    pool.acquire()
    waiters = [in_thread(pool.acquire) for _ in range(3)]
    for waiter in waiters:
        assert_waits(waiter)
    pool.close()
    for waiter in waiters:
        assert_goes_on(waiter)
    assert_goes_on(in_thread(pool.acquire))
    assert pool.has_room()


def test_room_callbacks_run_once_what_is_held_fits() -> None:
    pool = ResponsePool(2)
    for _ in range(3):
        pool.take()  # a producer on the event loop never waits: one over the limit
    called: list[str] = []
    pool.when_room(lambda: called.append("room"))
    assert called == []
    pool.release()
    assert called == ["room"]
    pool.when_room(lambda: called.append("at once"))
    assert called == ["room", "at once"]


def test_a_pool_holds_at_least_one_response() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ResponsePool(0)


def out(value: int) -> InferenceResponse:
    return InferenceResponse(outputs=[Tensor("OUT", "INT32", np.array([value], np.int32))])


def sender_for(pool: ResponsePool) -> StreamSender:
    request = InferenceRequest("m", {}, id="r")
    sender = StreamSender(
        asyncio.get_running_loop(), request, lambda req, resp, instance: resp, 1, pool
    )
    request.response_sender = sender
    return sender


async def test_sends_off_the_loop_wait_while_the_pool_is_full() -> None:
    pool = ResponsePool(2)
    sender = sender_for(pool)
    sent: list[int] = []

    def model() -> None:
        for index in range(5):
            sender.send(out(index))
            sent.append(index)
        sender.send(final=True)

    thread = in_thread(model)
    stream = sender.responses()
    received = []
    async for response in stream:
        # what the model has sent never runs more than the pool ahead of what was consumed
        assert len(sent) <= len(received) + 2
        received.append(response)
        pool.release()
    await asyncio.to_thread(assert_goes_on, thread)
    assert [int(r.output("OUT").data[0]) for r in received[:5]] == [0, 1, 2, 3, 4]
    assert received[-1].final and not received[-1].outputs


async def test_a_full_pool_holds_the_model_until_a_release() -> None:
    pool = ResponsePool(2)
    sender = sender_for(pool)
    third_sent = threading.Event()

    def model() -> None:
        for index in range(3):
            sender.send(out(index))
        third_sent.set()

    thread = in_thread(model)
    assert not await asyncio.to_thread(third_sent.wait, WAITING_SECS)
    assert pool.held == 2
    pool.release()
    await asyncio.to_thread(assert_goes_on, thread)
    assert third_sent.is_set()


async def test_cancel_wakes_a_waiting_model_which_sees_it() -> None:
    pool = ResponsePool(1)
    sender = sender_for(pool)
    seen: list[bool] = []

    def model() -> None:
        sender.send(out(0))
        sender.send(out(1))  # waits: nobody writes
        seen.append(sender.is_cancelled())
        sender.send(out(2))  # a closed pool never holds a model again
        sender.send(final=True)

    thread = in_thread(model)
    await asyncio.to_thread(assert_waits, thread)
    sender.cancel()
    await asyncio.to_thread(assert_goes_on, thread)
    assert seen == [True]


async def test_sends_on_the_loop_and_a_flag_only_final_never_wait() -> None:
    pool = ResponsePool(1)
    sender = sender_for(pool)
    for index in range(4):
        sender.send(out(index))  # on the event loop: must not block it
    assert pool.held == 4 and not pool.has_room()
    final = in_thread(lambda: sender.send(final=True))
    await asyncio.to_thread(assert_goes_on, final)
    received = [response async for response in sender.responses()]
    assert len(received) == 5 and received[-1].final


async def test_room_awaits_a_release_on_the_loop() -> None:
    pool = ResponsePool(1)
    pool.take()
    pool.take()
    waiting = asyncio.ensure_future(pool.room())
    await asyncio.sleep(0)
    assert not waiting.done()
    pool.release()
    await asyncio.wait_for(waiting, GOES_ON_SECS)


def write_counting_ensemble(repo: Path, progress_dir: Path) -> None:
    """``steps``: an ensemble whose one step is the stream backend's decoupled model, which
    answers COUNT times and records its returned sends in ``progress_dir``."""
    (repo / "counter" / "1").mkdir(parents=True)
    (repo / "counter" / "1" / "model.stream").write_bytes(b"")
    (repo / "counter" / "config.pbtxt").write_text(
        f"""backend: "stream"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters {{ key: "delay_ms" value {{ string_value: "0" }} }}
parameters {{ key: "progress_dir" value {{ string_value: "{progress_dir}" }} }}
"""
    )
    (repo / "steps" / "1").mkdir(parents=True)
    (repo / "steps" / "config.pbtxt").write_text(
        """platform: "ensemble"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "counter" model_version: -1
  input_map { key: "COUNT" value: "N" } output_map { key: "OUT" value: "OUT" } } ] }
"""
    )


async def test_an_ensemble_holds_its_decoupled_step_back(tmp_path: Path) -> None:
    repo, progress_dir = tmp_path / "models", tmp_path / "progress"
    progress_dir.mkdir()
    write_counting_ensemble(repo, progress_dir)
    plugins = create_plugin_manager(autoload=False, extra_plugins=[("stream", stream_backend)])

    def sent() -> int:
        return int(read_progress(progress_dir, "e", "sent") or 0)

    async with Server(ServerOptions([repo]), plugins) as server:
        pool = ResponsePool(2)
        count = np.array([12], np.int32)
        request = InferenceRequest("steps", {"N": Tensor("N", "INT32", count)}, id="e")
        async with contextlib.aclosing(server.infer_stream(request, pool=pool)) as responses:
            received = [await anext(responses)]
            # nothing released: 2 wait in the ensemble's pool (and one more, sent by the
            # ensemble, holds it back) and 2 in its step's
            await wait_until_async(lambda: sent() >= 4, what="4 sends")
            assert await stays_true_async(lambda: sent() == 4, WAITING_SECS)
            for released in range(1, 4):
                pool.release()
                await wait_until_async(lambda released=released: sent() >= 4 + released)
                assert sent() == 4 + released
            pool.close()  # the caller no longer holds anything back
            received += [response async for response in responses]
    assert [int(r.output("OUT").data[0]) for r in received[:12]] == list(range(12))
    assert received[-1].final and read_progress(progress_dir, "e", "ended") == "finished"


async def test_cancel_listeners_run_once_and_at_once_when_added_late() -> None:
    sender = sender_for(ResponsePool(2))
    heard: list[str] = []
    sender.on_cancel = lambda: heard.append("scheduler")
    sender.add_cancel_listener(lambda: heard.append("first"))
    sender.add_cancel_listener(lambda: heard.append("second"))
    sender.cancel()
    sender.cancel()  # a second cancel tells nobody again
    assert heard == ["scheduler", "first", "second"] and sender.is_cancelled()
    sender.add_cancel_listener(lambda: heard.append("late"))
    assert heard[-1] == "late"
