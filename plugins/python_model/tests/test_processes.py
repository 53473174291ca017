"""Instances as processes: parallel instances, a process killed mid-request, clean shutdown."""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import pytest

from triton_core import InferenceRequest, Tensor
from triton_core.errors import Status, TritonError

pytestmark = pytest.mark.timeout(120)


def action(value: int) -> InferenceRequest:
    return InferenceRequest("proc", {"ACTION": Tensor("ACTION", "INT32", np.array([value]))})


def instances(server, model: str = "proc") -> list:
    return server.model(model).pool.instances


async def test_two_instances_run_in_two_processes_at_once(
    repo, write_model, models, make_server, no_leftovers
):
    write_model(repo, "proc", models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "2"))
    async with make_server(repo) as server:
        pids = {instance.pid for instance in instances(server)}
        assert len(pids) == 2 and os.getpid() not in pids
        first, second = await asyncio.gather(server.infer(action(2)), server.infer(action(2)))
        (pid1, start1, end1), (pid2, start2, end2) = (
            first.output("INFO").data.tolist(),
            second.output("INFO").data.tolist(),
        )
        assert {int(pid1), int(pid2)} == pids
        # each busy-loops for 0.3 s: the two executions overlapped in time
        assert start1 < end2 and start2 < end1


async def test_a_killed_process_fails_its_request_and_the_model_keeps_serving(
    repo, write_model, models, make_server, no_leftovers
):
    write_model(repo, "proc", models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "1"))
    async with make_server(repo) as server:
        (instance,) = instances(server)
        old_pid = instance.pid
        with pytest.raises(TritonError) as info:
            await server.infer(action(1))  # the model SIGKILLs its own process
        assert info.value.status is Status.UNAVAILABLE
        message = info.value.message
        assert "killed by signal 9 (SIGKILL)" in message
        assert "proc" in message and "restarting" in message
        assert "/dev/shm" not in message and "memfd" not in message
        # the next request runs on a new process
        response = await server.infer(action(0))
        new_pid = int(response.output("INFO").data[0])
        assert new_pid != old_pid and new_pid == instance.pid
        assert instance.restarts == 1
        assert server.model_ready("proc")


async def test_requests_on_one_instance_run_in_turn_and_the_statistics_time_each(
    repo, write_model, models, make_server, no_leftovers
):
    """The second request waits in the process while the first runs: the statistics count
    that as queue time, and each execution as the time the model really took."""
    write_model(repo, "proc", models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "1"))
    async with make_server(repo) as server:
        first, second = await asyncio.gather(server.infer(action(2)), server.infer(action(2)))
        (_, _, end1), (_, start2, _) = sorted(
            (first.output("INFO").data.tolist(), second.output("INFO").data.tolist()),
            key=lambda info: info[1],
        )
        assert end1 <= start2  # one process: one after the other
        (stats,) = server.statistics("proc")
        assert stats.compute_infer.count == 2
        per_execution = stats.compute_infer.ns / 2 / 1e9
        assert 0.29 <= per_execution < 0.45  # each busy-loops 0.3 s
        assert stats.queue.ns / 1e9 >= 0.25  # the second waited for the first


async def test_a_process_killed_with_a_second_batch_waiting_fails_both_clearly(
    repo, write_model, models, make_server, no_leftovers
):
    write_model(repo, "proc", models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "1"))
    async with make_server(repo) as server:
        outcomes = await asyncio.gather(
            server.infer(action(3)), server.infer(action(0)), return_exceptions=True
        )
        for outcome in outcomes:
            assert isinstance(outcome, TritonError), outcome
            assert outcome.status is Status.UNAVAILABLE
            assert "killed by signal 9 (SIGKILL)" in outcome.message
        response = await server.infer(action(0))
        assert int(response.output("INFO").data[0]) == instances(server)[0].pid


async def test_a_process_killed_while_idle_is_restarted(
    repo, write_model, models, make_server, no_leftovers
):
    write_model(repo, "proc", models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "1"))
    async with make_server(repo) as server:
        (instance,) = instances(server)
        old_pid = instance.pid
        os.kill(old_pid, signal.SIGKILL)
        for _ in range(200):  # bounded: the restart is noticed from the closed socket
            if instance.restarts:
                break
            await asyncio.sleep(0.05)
        # whether or not the restart finished yet, the next request succeeds
        response = await server.infer(action(0))
        assert int(response.output("INFO").data[0]) not in (0, old_pid)


async def test_a_killed_decoupled_model_ends_its_streams_with_an_error(
    repo, write_model, models, make_server, no_leftovers
):
    write_model(repo, "repeat", models.REPEAT, models.REPEAT_CONFIG)
    async with make_server(repo) as server:
        (instance,) = instances(server, "repeat")
        sent = InferenceRequest(
            "repeat",
            {
                "COUNT": Tensor("COUNT", "INT32", np.array([1000])),
                "DELAY_MS": Tensor("DELAY_MS", "INT32", np.array([10])),
            },
        )
        stream = server.infer_stream(sent)
        await stream.__anext__()
        os.kill(instance.pid, signal.SIGKILL)
        with pytest.raises(TritonError) as info:
            async for _ in stream:
                pass
        assert info.value.status is Status.UNAVAILABLE
        assert "killed by signal 9" in info.value.message or "ended" in info.value.message
        again = InferenceRequest("repeat", {"COUNT": Tensor("COUNT", "INT32", np.array([2]))})
        responses = [r async for r in server.infer_stream(again)]
        assert len(responses) == 3


async def test_shutdown_finalizes_and_leaves_no_processes(
    repo, write_model, models, make_server, no_leftovers, capfd
):
    write_model(
        repo, "add_sub", models.ADD_SUB,
        models.ADD_SUB_CONFIG.format(
            max_batch_size=0, dtype="TYPE_FP32",
            extra="instance_group [ { count: 2 kind: KIND_CPU } ]",
        ),
    )  # fmt: skip
    async with make_server(repo) as server:
        pids = [instance.pid for instance in instances(server, "add_sub")]
        x = Tensor("INPUT0", "FP32", np.ones(4, np.float32))
        y = Tensor("INPUT1", "FP32", np.ones(4, np.float32))
        await server.infer(InferenceRequest("add_sub", {"INPUT0": x, "INPUT1": y}))
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid)
    # finalize() ran in each process
    assert capfd.readouterr().out.count("Cleaning up...") == 2


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def test_worker_thread_mode_serves_and_restarts(
    repo, write_model, models, make_server, no_leftovers
):
    write_model(repo, "proc", models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "1"))
    write_model(repo, "repeat", models.REPEAT, models.REPEAT_CONFIG)
    options = {"python": {"instance-thread": "yes"}}
    async with make_server(repo, backend_options=options) as server:
        (instance,) = instances(server)
        assert not instance.event_driven
        assert int((await server.infer(action(0))).output("INFO").data[0]) == instance.pid
        with pytest.raises(TritonError) as info:
            await server.infer(action(1))
        assert info.value.status is Status.UNAVAILABLE
        assert "killed by signal 9 (SIGKILL)" in info.value.message
        assert int((await server.infer(action(0))).output("INFO").data[0]) == instance.pid
        sent = InferenceRequest("repeat", {"COUNT": Tensor("COUNT", "INT32", np.array([2]))})
        assert len([r async for r in server.infer_stream(sent)]) == 3


@pytest.mark.parametrize(("setting", "policy"), [(None, "SCHED_BATCH"), ("normal", "SCHED_OTHER")])
async def test_stubs_run_under_the_batch_policy_unless_told_otherwise(
    repo, write_model, models, make_server, setting, policy
):
    write_model(repo, "proc", models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "1"))
    options = {"python": {"stub-policy": setting}} if setting else {}
    async with make_server(repo, backend_options=options) as server:
        (instance,) = instances(server)
        assert os.sched_getscheduler(instance.pid) == getattr(os, policy)


@pytest.mark.parametrize("thread_mode", [False, True])
async def test_an_execute_past_its_timeout_kills_the_process_and_the_next_runs_on_a_new_one(
    repo, write_model, models, make_server, no_leftovers, thread_mode
):
    config = models.PROCESS_CONFIG.replace("{count}", "1") + (
        'parameters { key: "execute_timeout_secs" value { string_value: "1" } }\n'
    )
    write_model(repo, "proc", models.PROCESS, config)
    options = {"python": {"instance-thread": "yes"}} if thread_mode else {}
    async with make_server(repo, backend_options=options) as server:
        (instance,) = instances(server)
        assert instance.event_driven is not thread_mode
        old_pid = instance.pid
        with pytest.raises(TritonError) as info:
            await server.infer(action(4))  # sleeps 600 s in the model
        assert info.value.status is Status.UNAVAILABLE
        assert "instance 'proc_0_0' did not finish executing within execute_timeout_secs=1" in (
            info.value.message
        )
        # interrupt() killed the process; once its death ended the call, the instance is
        # healthy again and the next request runs on a new process
        for _ in range(6000):  # bounded: 60 s at most
            if server.models.is_ready("proc"):
                break
            await asyncio.sleep(0.01)
        response = await server.infer(action(0))
        assert int(response.output("INFO").data[0]) == instance.pid != old_pid


FREE_MEMORY_MODEL = """
import os

import c_python_backend_utils as c_utils
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        free = c_utils.shared_memory.free_memory()
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("FREE", np.array([free, os.getpid()], dtype=np.int64))]
            )
            for _ in requests
        ]
"""
FREE_MEMORY_CONFIG = """
backend: "python"
input [{ name: "IN", data_type: TYPE_INT32, dims: [1] }]
output [{ name: "FREE", data_type: TYPE_INT64, dims: [2] }]
instance_group [{ kind: KIND_CPU, count: 1 }]
"""


async def test_c_python_backend_utils_free_memory_is_the_same_after_a_restart(
    repo, write_model, make_server, no_leftovers
):
    """Triton's QA restart test: the stub's free shared memory, read through Triton's
    c_python_backend_utils, is what a fresh process has, before and after a kill."""
    write_model(repo, "free", FREE_MEMORY_MODEL, FREE_MEMORY_CONFIG)
    request = InferenceRequest("free", {"IN": Tensor("IN", "INT32", np.array([0], np.int32))})
    async with make_server(repo) as server:
        (instance,) = instances(server, "free")
        before, old_pid = (await server.infer(request)).output("FREE").data.tolist()
        assert before > 0
        os.kill(old_pid, signal.SIGKILL)
        for _ in range(200):  # bounded: the restart is noticed from the closed socket
            if instance.restarts:
                break
            await asyncio.sleep(0.05)
        after, new_pid = (await server.infer(request)).output("FREE").data.tolist()
        assert new_pid != old_pid
        assert after == before
