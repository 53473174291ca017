"""What ``--workers`` sums: statistics through their JSON form, Prometheus text, and the
control channel's framing and errors (real Unix sockets, real threads)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from triton_core.observability.statistics import ExecutionTimes, ModelStatistics
from triton_core.workers.control import (
    MAX_MESSAGE_BYTES,
    ControlServer,
    WorkerError,
    WorkerGone,
    ask,
    peer_pids,
    socket_path,
)
from triton_core.workers.merge import statistics_to_json, sum_expositions, sum_statistics
from triton_core.workers.supervisor import worker_count


def _served(requests: int, batch_size: int = 1) -> ModelStatistics:
    stats = ModelStatistics("m", 1, latency_buckets_ms=(1.0, 10.0))
    for _ in range(requests):
        stats.record_execution(batch_size, [0], ExecutionTimes(10, 1, 2, 3))
        stats.record_success(5_000_000)
        stats.record_dispatch("max_queue_delay")
    stats.record_failure(7, "BACKEND")
    return stats


def test_statistics_of_two_workers_add_field_by_field() -> None:
    one, other = _served(3), _served(4, batch_size=2)
    other.last_inference_ms = one.last_inference_ms + 1000
    (total,) = sum_statistics([one], [[statistics_to_json(other)]])
    assert total.inference_count == 3 + 8
    assert total.execution_count == 7
    assert (total.success.count, total.success.ns) == (7, 7 * 5_000_000)
    assert (total.fail.count, total.fail.ns) == (2, 14)
    assert total.failures["BACKEND"] == 2
    assert total.compute_infer.count == 7 and total.compute_infer.ns == 7 * 2
    assert sorted(total.batches) == [1, 2]
    assert total.batches[1].compute_output.count == 3
    assert total.batches[2].compute_output.count == 4
    assert total.batch_size_histogram == {1: 3, 2: 4}
    assert total.dispatch_reasons == {"max_queue_delay": 7}
    assert total.last_inference_ms == other.last_inference_ms
    assert total.request_latency_ms is not None
    assert total.request_latency_ms.counts == [0, 7, 0]
    # the worker's own objects are left as they were
    assert one.inference_count == 3


def test_stream_histograms_of_two_workers_add_bucket_by_bucket() -> None:
    one, other = _served(1), _served(1)
    for stats, gaps in ((one, (3_000_000,)), (other, (3_000_000, 30_000_000))):
        for gap in gaps:
            stats.record_response_interval(gap)
        stats.record_responses(len(gaps) + 1)
    (total,) = sum_statistics([one], [[statistics_to_json(other)]])
    assert total.response_interval_ms is not None and total.responses_per_request is not None
    assert total.response_interval_ms.cumulative()[-1] == ("+Inf", 3)
    assert total.response_interval_ms.sum == 36.0
    assert total.responses_per_request.sum == 5
    assert sum(total.responses_per_request.counts) == 2


def test_a_version_only_another_worker_serves_is_included() -> None:
    mine = _served(1)
    theirs = ModelStatistics("n", 2)
    theirs.inference_count = 5
    merged = sum_statistics([mine], [[statistics_to_json(theirs)]])
    assert [(s.name, s.version, s.inference_count) for s in merged] == [("m", 1, 1), ("n", 2, 5)]


EXPOSITION = """# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{{model="m",version="1"}} {count}
# HELP nv_inference_request_duration_us Cumulative inference request duration
# TYPE nv_inference_request_duration_us histogram
nv_inference_request_duration_us_bucket{{model="m",version="1",le="100.0"}} {count}
nv_inference_request_duration_us_bucket{{model="m",version="1",le="+Inf"}} {count}
nv_inference_request_duration_us_count{{model="m",version="1"}} {count}
nv_inference_request_duration_us_sum{{model="m",version="1"}} 2.5
# HELP nv_cache_util Cache utilization [0.0 - 1.0]
# TYPE nv_cache_util gauge
nv_cache_util {util}
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization {cpu}
"""


def test_expositions_sum_per_series_and_keep_host_metrics_once() -> None:
    local = EXPOSITION.format(count=3, util=0.5, cpu=0.25).encode()
    other = EXPOSITION.format(count=4, util=0.1, cpu=0.75).encode()
    text = sum_expositions(local, [other]).decode()
    assert 'nv_inference_count{model="m",version="1"} 7\n' in text
    assert 'nv_inference_request_duration_us_bucket{model="m",version="1",le="+Inf"} 7\n' in text
    assert 'nv_inference_request_duration_us_count{model="m",version="1"} 7\n' in text
    assert 'nv_inference_request_duration_us_sum{model="m",version="1"} 5\n' in text
    assert "nv_cache_util 0.3\n" in text  # the mean of the workers' fractions
    assert "nv_cpu_utilization 0.25\n" in text  # the host's, once
    assert text.count("# TYPE nv_inference_count counter") == 1
    # families stay in order, HELP and TYPE before their samples
    lines = text.splitlines()
    assert lines[0].startswith("# HELP nv_inference_count")
    assert lines.index("# TYPE nv_cpu_utilization gauge") < lines.index("nv_cpu_utilization 0.25")


def test_a_series_one_worker_lacks_is_that_of_the_others() -> None:
    local = b'# TYPE a counter\na{model="x"} 1\n'
    other = b'# TYPE a counter\na{model="y"} 2\n# TYPE b gauge\nb 3\n'
    text = sum_expositions(local, [other]).decode()
    assert text == '# TYPE a counter\na{model="x"} 1\na{model="y"} 2\n# TYPE b gauge\nb 3\n'


def test_worker_count_takes_a_number_or_auto() -> None:
    assert worker_count("3") == 3
    assert worker_count("auto") == len(os.sched_getaffinity(0))
    for bad in ("0", "-1", "two", "2000"):
        with pytest.raises(ValueError, match="--workers"):
            worker_count(bad)


@pytest.fixture
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # short: a Unix socket path has at most 107 bytes
    return Path(os.fspath(tmp_path_factory.mktemp("wk")))


def test_a_control_request_is_answered_and_errors_name_the_worker(folder: Path) -> None:
    def answer(request: dict) -> dict:
        if request["op"] == "fail":
            raise ValueError("no such thing")
        return {"echo": request["value"]}

    server = ControlServer(folder, answer)
    server.start()
    try:
        pid = os.getpid()
        assert ask(folder, pid, {"op": "echo", "value": "x" * 100_000}, 5.0) == {
            "echo": "x" * 100_000
        }
        with pytest.raises(WorkerError, match=rf"worker {pid}: no such thing"):
            ask(folder, pid, {"op": "fail"}, 5.0)
        assert peer_pids(folder, pid + 1) == [pid]
        assert peer_pids(folder, pid) == []
    finally:
        server.close()
    with pytest.raises(WorkerGone, match=rf"worker {os.getpid()} has exited"):
        ask(folder, os.getpid(), {"op": "echo"}, 5.0)


def test_a_worker_that_does_not_answer_times_out_naming_it(folder: Path) -> None:
    # a socket that accepts (the backlog) but never answers
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.fspath(socket_path(folder, 4242)))
    listener.listen(1)
    try:
        with pytest.raises(WorkerError, match=r"worker 4242 did not answer 'ready' within 0\.2s"):
            ask(folder, 4242, {"op": "ready"}, 0.2)
    finally:
        listener.close()


def test_an_oversized_message_is_refused_before_it_is_read(folder: Path) -> None:
    server = ControlServer(folder, lambda request: {})
    server.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5.0)
            sock.connect(os.fspath(server.path))
            sock.sendall((MAX_MESSAGE_BYTES + 1).to_bytes(4, "big"))
            assert sock.recv(16) == b""  # closed without reading or allocating it
    finally:
        server.close()


def test_serve_refuses_a_bad_worker_count_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from triton_core.cli import main

    assert main(["serve", "--model-repository", str(tmp_path), "--workers", "0"]) == 2
    assert "--workers must be between 1 and 1024, got 0" in capsys.readouterr().err


def test_serve_refuses_client_shared_memory_with_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from triton_core.cli import main

    argv = ["serve", "--model-repository", str(tmp_path), "--workers", "2"]
    assert main([*argv, "--allow-client-shm=true"]) == 2
    assert "--allow-client-shm=true cannot be used with --workers 2" in capsys.readouterr().err
