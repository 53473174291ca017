"""``--http-thread-count``, ``--sagemaker-thread-count`` and ``--grpc-infer-thread-count`` on
real servers: large requests are decoded (gRPC: inflated) on the listener's own threads, at
most that many, which the system shows by name; small requests never start one."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.e2e.test_cloud_endpoints import call
from tests.support import ServerProcess, refused_start_log, write_numpy_model

NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}
#: elements per input: JSON of them is far above the 64 KiB decoded on the event loop
LARGE = 20_000


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("thread_flags")
    write_numpy_model(repo, "wide", kind="add_sub", dims=(LARGE,))
    write_numpy_model(repo, "small", kind="add_sub")
    return repo


def threads_named(process: ServerProcess, name: str) -> int:
    """Threads of the server whose system name is ``name`` (what ``top -H`` shows)."""
    tasks = Path(f"/proc/{process.process.pid}/task")
    count = 0
    for task in tasks.iterdir():
        try:
            count += (task / "comm").read_text().strip() == name
        except OSError:  # the thread ended meanwhile
            continue
    return count


def _inputs(module, elements: int, binary: bool = False) -> list:  # type: ignore[no-untyped-def]
    values = np.arange(elements, dtype=np.int32).reshape(1, elements)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [1, elements], "INT32")
        if module is httpclient:
            tensor.set_data_from_numpy(values, binary_data=binary)
        else:
            tensor.set_data_from_numpy(values)
        inputs.append(tensor)
    return inputs


def _http_infer_concurrently(process: ServerProcess, model: str, elements: int, n: int) -> None:
    def one(_: int) -> None:
        client = httpclient.InferenceServerClient(process.http_url)
        try:
            result = client.infer(model, _inputs(httpclient, elements))
            assert result.as_numpy("OUTPUT0")[0, -1] == 2 * (elements - 1)
        finally:
            client.close()

    with ThreadPoolExecutor(n) as pool:
        list(pool.map(one, range(n)))


def test_http_thread_count_bounds_the_threads_that_decode_large_requests(
    repository: Path,
) -> None:
    with ServerProcess([repository], "--http-thread-count", "1", env=NUMPY_PLUGIN) as process:
        process.wait_ready()
        _http_infer_concurrently(process, "small", 4, 4)
        assert threads_named(process, "http-decode") == 0  # small bodies stay on the loop
        _http_infer_concurrently(process, "wide", LARGE, 6)
        assert threads_named(process, "http-decode") == 1
    with ServerProcess([repository], "--http-thread-count", "3", env=NUMPY_PLUGIN) as process:
        process.wait_ready()
        _http_infer_concurrently(process, "wide", LARGE, 8)
        assert 1 <= threads_named(process, "http-decode") <= 3


CLOUD = {
    "sagemaker": (
        ("--allow-sagemaker", "--sagemaker-port", "0", "--sagemaker-address", "127.0.0.1",
         "--sagemaker-thread-count", "1"),
        {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "wide"},
        "/invocations",
        "sagemaker-infer",
    ),
    "vertex_ai": (
        ("--allow-vertex-ai", "--vertex-ai-port", "0", "--vertex-ai-address", "127.0.0.1",
         "--vertex-ai-thread-count", "1", "--vertex-ai-default-model", "wide"),
        {"AIP_PREDICT_ROUTE": "/v1/predict", "AIP_HEALTH_ROUTE": "/v1/health"},
        "/v1/predict",
        "vertex-ai-infer",
    ),
}  # fmt: skip


@pytest.mark.parametrize("endpoint", sorted(CLOUD))
def test_cloud_thread_counts_give_their_listener_threads_of_its_own(
    repository: Path, endpoint: str
) -> None:
    flags, env, path, thread_name = CLOUD[endpoint]
    with ServerProcess([repository], *flags, env={**NUMPY_PLUGIN, **env}) as process:
        process.wait_ready()
        values = list(range(LARGE))
        body = json.dumps(
            {
                "inputs": [
                    {"name": n, "shape": [1, LARGE], "datatype": "INT32", "data": values}
                    for n in ("INPUT0", "INPUT1")
                ]
            }
        ).encode()
        for _ in range(3):
            answer = call(process.ports[endpoint], "POST", path, body)
            assert answer.status == 200, answer.body[:300]
        assert threads_named(process, thread_name) == 1
        assert threads_named(process, "http-decode") == 0  # not the HTTP endpoint's


def test_grpc_infer_thread_count_bounds_the_threads_that_inflate_requests(
    repository: Path,
) -> None:
    with ServerProcess([repository], "--grpc-infer-thread-count", "2", env=NUMPY_PLUGIN) as process:
        process.wait_ready()
        client = grpcclient.InferenceServerClient(process.grpc_url)
        try:
            client.infer("small", _inputs(grpcclient, 4))
            assert threads_named(process, "grpc-infer") == 0  # nothing to inflate
            for _ in range(4):
                result = client.infer(
                    "wide", _inputs(grpcclient, LARGE), compression_algorithm="gzip"
                )
                assert result.as_numpy("OUTPUT0")[0, -1] == 2 * (LARGE - 1)
        finally:
            client.close()
        assert 1 <= threads_named(process, "grpc-infer") <= 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--http-thread-count", "0"), "argument --http-thread-count: must be at least 1, got 0"),
        (
            ("--sagemaker-thread-count", "0"),
            "argument --sagemaker-thread-count: must be at least 1",
        ),
        (
            ("--grpc-infer-thread-count", "1"),
            "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.",
        ),
        (
            ("--grpc-infer-thread-count", "129"),
            "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.",
        ),
        (
            ("--grpc-infer-thread-count", "4", "--grpc-transport", "grpcio"),
            "--grpc-infer-thread-count applies to --grpc-transport http2 only",
        ),
        (
            ("--grpc-infer-allocation-pool-size", "4", "--grpc-transport", "grpcio"),
            "--grpc-infer-allocation-pool-size applies to --grpc-transport http2 only",
        ),
        (
            ("--grpc-infer-allocation-pool-size", "-1"),
            "argument --grpc-infer-allocation-pool-size: must be at least 0, got -1",
        ),
        (
            ("--grpc-max-response-pool-size", "0"),
            "Error: --grpc-max-response-pool-size must be greater than 0.",
        ),
    ],
)
def test_a_bad_thread_count_is_refused_naming_the_flag(
    repository: Path, flags: tuple[str, ...], message: str
) -> None:
    assert message in refused_start_log([repository], *flags)


def test_buffer_manager_threads_gather_large_batches(tmp_path: Path) -> None:
    """Three 1 MiB requests batched together: their inputs are gathered by the copy threads
    (with --buffer-manager-thread-count) or inline (without), with the same answers."""
    builders = pytest.importorskip("triton_core_onnx.model_builders")
    width = 1 << 18  # FP32: 1 MiB a request
    model = tmp_path / "gathered"
    (model / "1").mkdir(parents=True)
    builders.identity(model / "1" / "model.onnx", "FP32", (width,))
    (model / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        "dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 5000000 }\n"
    )
    for flags, copiers in ((("--buffer-manager-thread-count", "2"), (1, 2)), ((), (0, 0))):
        with ServerProcess([tmp_path], *flags) as process:
            process.wait_ready()

            def one(row: int) -> None:
                values = np.full((1, width), row, dtype=np.float32)
                tensor = httpclient.InferInput("INPUT0", [1, width], "FP32")
                tensor.set_data_from_numpy(values)
                client = httpclient.InferenceServerClient(process.http_url)
                try:
                    result = client.infer("gathered", [tensor])
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
                finally:
                    client.close()

            with ThreadPoolExecutor(3) as pool:
                list(pool.map(one, range(3)))
            client = process.http_client()
            try:
                stats = client.get_inference_statistics("gathered")["model_stats"][0]
            finally:
                client.close()
            assert [b["batch_size"] for b in stats["batch_stats"]] == [3]  # one batch of 3
            low, high = copiers
            assert low <= threads_named(process, "buffer-manager") <= high
