"""The trace extension on a real server: Triton's trace files (rate, count, levels, log
frequency), the settings API over HTTP and gRPC with tritonclient, ensemble and BLS child
traces."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.conftest import SIMPLE_CONFIG
from tests.support import ServerProcess, wait_until

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")
pytestmark = pytest.mark.timeout(180)

ENSEMBLE_CONFIG = """
platform: "ensemble"
max_batch_size: 8
input [{ name: "A" data_type: TYPE_INT32 dims: [ 16 ] }]
input [{ name: "B" data_type: TYPE_INT32 dims: [ 16 ] }]
output [{ name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }]
ensemble_scheduling {
  step [{
    model_name: "simple" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "SUM" }
  }]
}
"""

#: calls "simple" with the request's trace, as Triton's BLS tracing documents
BLS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="simple",
                requested_output_names=["OUTPUT0"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
                trace=request.trace(),
            )
            result = call.exec()
            if result.has_error():
                raise pb_utils.TritonModelException(result.error().message())
            out = pb_utils.get_output_tensor_by_name(result, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""

BLS_CONFIG = """
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }]
input [{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }]
"""

HTTP_ORDER = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "INFER_RESPONSE_COMPLETE",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]
GRPC_ORDER = [
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    *HTTP_ORDER[2:-2],
    "GRPC_SEND_START",
    "GRPC_SEND_END",
]


def build_repository(root: Path, *, python: bool = False) -> Path:
    simple = root / "simple"
    onnx_builders.add_sub(simple / "1" / "model.onnx", "INT32", 16)
    (simple / "config.pbtxt").write_text(SIMPLE_CONFIG.replace('label_filename: "labels.txt"', ""))
    (root / "ens" / "1").mkdir(parents=True)
    (root / "ens" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    if python:
        (root / "bls" / "1").mkdir(parents=True)
        (root / "bls" / "1" / "model.py").write_text(BLS_MODEL)
        (root / "bls" / "config.pbtxt").write_text(BLS_CONFIG)
    return root


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("trace_models"), python=True)


def inputs(module: Any, names: tuple[str, str] = ("INPUT0", "INPUT1")) -> list[Any]:
    values = np.arange(16, dtype=np.int32).reshape(1, 16)
    tensors = []
    for name in names:
        tensor = module.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(values)
        tensors.append(tensor)
    return tensors


def serve(repository: Path, trace_file: Path, *settings: str) -> ServerProcess:
    flags = ["--trace-config", f"triton,file={trace_file}"]
    for setting in settings:
        flags += ["--trace-config", setting]
    process = ServerProcess([repository], *flags)
    process.wait_ready()
    return process


def stop(process: ServerProcess) -> None:
    code = process.stop()
    assert code == 0, process.log()[-3000:]


def read_traces(path: Path) -> list[dict[str, Any]]:
    records = json.loads(path.read_text())
    assert isinstance(records, list)
    return records


def by_id(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each trace id: its header fields, its timestamps in file order, its tensor records."""
    traces: dict[int, dict[str, Any]] = {}
    for record in records:
        trace = traces.setdefault(record["id"], {"timestamps": [], "tensors": []})
        if "timestamps" in record:
            trace["timestamps"] += [(ts["name"], ts["ns"]) for ts in record["timestamps"]]
        elif "activity" in record:
            trace["tensors"].append(record)
        else:
            trace.update(record)
    return traces


def assert_in_order(timestamps: list[tuple[str, int]], expected: list[str]) -> None:
    assert [name for name, _ in timestamps] == expected
    times = [ns for _, ns in timestamps]
    assert times == sorted(times), timestamps


def test_http_and_grpc_traces_have_every_timestamp_in_order(
    repository: Path, tmp_path: Path
) -> None:
    trace_file = tmp_path / "trace.json"
    process = serve(repository, trace_file, "rate=1", "level=TIMESTAMPS")
    try:
        with httpclient.InferenceServerClient(process.http_url) as client:
            client.infer("simple", inputs(httpclient), request_id="http-1")
        with grpcclient.InferenceServerClient(process.grpc_url) as client:
            client.infer("simple", inputs(grpcclient))
        with httpclient.InferenceServerClient(process.http_url) as client:
            # a compressed body: answered by the falcon app
            client.infer("simple", inputs(httpclient), request_compression_algorithm="gzip")
    finally:
        stop(process)
    traces = by_id(read_traces(trace_file))
    assert sorted(traces) == [1, 2, 3]
    http, grpc = traces[1], traces[2]
    assert_in_order(traces[3]["timestamps"], HTTP_ORDER)
    assert (http["model_name"], http["model_version"], http["request_id"]) == (
        "simple",
        1,
        "http-1",
    )
    assert "request_id" not in grpc and "parent_id" not in grpc
    assert_in_order(http["timestamps"], HTTP_ORDER)
    assert_in_order(grpc["timestamps"], GRPC_ORDER)
    assert http["tensors"] == grpc["tensors"] == []


def test_grpcio_transport_traces_and_serves_the_settings(repository: Path, tmp_path: Path) -> None:
    trace_file = tmp_path / "grpcio.json"
    process = ServerProcess(
        [repository],
        "--grpc-transport",
        "grpcio",
        "--trace-config",
        f"triton,file={trace_file}",
        "--trace-config",
        "rate=1",
    )
    process.wait_ready()
    try:
        with grpcclient.InferenceServerClient(process.grpc_url) as client:
            client.infer("simple", inputs(grpcclient))  # level OFF: not traced
            client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
            client.infer("simple", inputs(grpcclient), request_id="g1")
    finally:
        stop(process)
    (trace,) = by_id(read_traces(trace_file)).values()
    assert trace["request_id"] == "g1"
    assert_in_order(trace["timestamps"], GRPC_ORDER)


def test_generate_requests_are_traced(repository: Path, tmp_path: Path) -> None:
    trace_file = tmp_path / "generate.json"
    process = serve(repository, trace_file, "rate=1", "level=TIMESTAMPS")
    body = json.dumps({"INPUT0": list(range(16)), "INPUT1": list(range(16))}).encode()
    try:
        for kind in ("generate", "generate_stream"):
            url = f"http://{process.http_url}/v2/models/simple/{kind}"
            request = urllib.request.Request(url, data=body, method="POST")
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert b"OUTPUT0" in answer.read()
    finally:
        stop(process)
    generate, stream = by_id(read_traces(trace_file)).values()
    assert_in_order(generate["timestamps"], HTTP_ORDER)
    assert_in_order(stream["timestamps"], HTTP_ORDER[:-2])


def test_grpc_stream_requests_are_traced(repository: Path, tmp_path: Path) -> None:
    trace_file = tmp_path / "stream.json"
    process = serve(repository, trace_file, "rate=1", "level=TIMESTAMPS")
    answers: list[Any] = []
    try:
        with grpcclient.InferenceServerClient(process.grpc_url) as client:
            client.start_stream(lambda result, error: answers.append(error or result))
            client.async_stream_infer("simple", inputs(grpcclient), request_id="s1")
            client.stop_stream()  # waits for the answer
    finally:
        stop(process)
    assert len(answers) == 1 and answers[0].get_response().id == "s1"
    (trace,) = by_id(read_traces(trace_file)).values()
    assert trace["request_id"] == "s1"
    assert_in_order(trace["timestamps"], [*GRPC_ORDER[:-2]])


def test_rate_samples_one_in_n_and_count_stops_and_writes_an_indexed_file(
    repository: Path, tmp_path: Path
) -> None:
    trace_file = tmp_path / "counted.json"
    process = serve(repository, trace_file, "rate=2", "count=3", "level=TIMESTAMPS")
    try:
        with httpclient.InferenceServerClient(process.http_url) as client:
            for index in range(10):
                client.infer("simple", inputs(httpclient), request_id=str(index))
            settings = client.get_trace_settings()
        assert settings["trace_count"] == "0"
        # the count reached 0 and every sampled trace was collected: written at once
        wait_until(lambda: (tmp_path / "counted.json.0").exists(), what="the trace file")
    finally:
        stop(process)
    traces = by_id(read_traces(tmp_path / "counted.json.0"))
    # 1 in 2: the 2nd, 4th and 6th requests, then no more
    assert [trace["request_id"] for trace in traces.values()] == ["1", "3", "5"]
    assert not trace_file.exists()


def test_tensors_level_records_inputs_and_outputs(repository: Path, tmp_path: Path) -> None:
    trace_file = tmp_path / "tensors.json"
    process = serve(repository, trace_file, "rate=1", "level=TENSORS")
    try:
        with httpclient.InferenceServerClient(process.http_url) as client:
            client.infer("simple", inputs(httpclient))
    finally:
        stop(process)
    (trace,) = by_id(read_traces(trace_file)).values()
    assert trace["timestamps"] == []  # TENSORS alone: no timestamps
    records = {(r["activity"], r["tensor"]["name"]): r["tensor"] for r in trace["tensors"]}
    values = ",".join(str(v) for v in range(16))
    doubled = ",".join(str(2 * v) for v in range(16))
    expected = {"data": values, "shape": "1,16", "dtype": "INT32"}
    assert records[("TENSOR_QUEUE_INPUT", "INPUT0")] == {"name": "INPUT0", **expected}
    assert records[("TENSOR_BACKEND_OUTPUT", "OUTPUT0")]["data"] == doubled
    assert set(records) == {
        ("TENSOR_QUEUE_INPUT", "INPUT0"),
        ("TENSOR_QUEUE_INPUT", "INPUT1"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT1"),
    }


def test_log_frequency_splits_traces_into_indexed_files(repository: Path, tmp_path: Path) -> None:
    trace_file = tmp_path / "split.json"
    process = serve(repository, trace_file, "rate=1", "level=TIMESTAMPS", "triton,log-frequency=2")
    try:
        with grpcclient.InferenceServerClient(process.grpc_url) as client:
            for index in range(5):
                client.infer("simple", inputs(grpcclient), request_id=str(index))
    finally:
        stop(process)
    files = sorted(path.name for path in tmp_path.iterdir())
    assert files == ["split.json.0", "split.json.1", "split.json.2"]
    ids = [
        [trace["request_id"] for trace in by_id(read_traces(tmp_path / name)).values()]
        for name in files
    ]
    assert ids == [["0", "1"], ["2", "3"], ["4"]]  # the last one at shutdown


def test_ensemble_and_bls_calls_get_child_traces(repository: Path, tmp_path: Path) -> None:
    trace_file = tmp_path / "children.json"
    process = serve(repository, trace_file, "rate=1", "level=TIMESTAMPS")
    try:
        with httpclient.InferenceServerClient(process.http_url) as client:
            client.infer("ens", inputs(httpclient, ("A", "B")))
            client.infer("bls", inputs(httpclient))
    finally:
        stop(process)
    traces = by_id(read_traces(trace_file))
    parents = {trace["model_name"]: trace for trace in traces.values() if "parent_id" not in trace}
    children = [trace for trace in traces.values() if "parent_id" in trace]
    assert set(parents) == {"ens", "bls"}
    assert sorted((traces[c["parent_id"]]["model_name"], c["model_name"]) for c in children) == [
        ("bls", "simple"),
        ("ens", "simple"),
    ]
    for child in children:
        names = [name for name, _ in child["timestamps"]]
        assert names == HTTP_ORDER[2:9]  # REQUEST_START ... REQUEST_END, no frontend
        parent = traces[child["parent_id"]]
        assert (
            dict(parent["timestamps"])["REQUEST_START"]
            <= dict(child["timestamps"])["REQUEST_START"]
        )


# -- the settings API, as Triton's L0_trace trace_endpoint_test drives it --------------------

INITIAL = {
    "trace_level": ["TIMESTAMPS"],
    "trace_rate": "1",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_mode": "triton",
}


@pytest.fixture(scope="module")
def settings_server(repository: Path, tmp_path_factory: pytest.TempPathFactory):
    trace_file = tmp_path_factory.mktemp("settings") / "global.log"
    process = serve(repository, trace_file, "rate=1", "level=TIMESTAMPS")
    try:
        yield process, {**INITIAL, "trace_file": str(trace_file)}
    finally:
        stop(process)


@pytest.fixture
def settings(settings_server: tuple[ServerProcess, dict[str, Any]]):
    process, initial = settings_server
    yield process, initial
    clear = {key: None for key in ("trace_level", "trace_rate", "trace_count", "log_frequency")}
    with httpclient.InferenceServerClient(process.http_url) as client:
        client.update_trace_settings(model_name="simple", settings=clear)
        client.update_trace_settings(settings=clear)
        assert client.get_trace_settings(model_name="simple") == initial


def grpc_settings(client: grpcclient.InferenceServerClient, **kwargs: Any) -> dict[str, Any]:
    response = client.get_trace_settings(as_json=True, **kwargs)
    return {key: value["value"] for key, value in response["settings"].items()}


def test_http_settings_get_update_and_clear(settings: tuple[ServerProcess, dict]) -> None:
    process, initial = settings
    with httpclient.InferenceServerClient(process.http_url) as client:
        assert client.get_trace_settings() == initial
        assert client.get_trace_settings(model_name="simple") == initial
        with pytest.raises(InferenceServerException, match="Request for unknown model : nope"):
            client.get_trace_settings(model_name="nope")
        with pytest.raises(InferenceServerException) as refused:
            client.update_trace_settings(model_name="simple", settings={"trace_file": "x.log"})
        assert refused.value.message() == (
            "trace file location can not be updated through network protocol"
        )
        # a model's own settings, then a global update reaches only the fields it left open
        client.update_trace_settings(
            model_name="simple", settings={"trace_rate": "12", "log_frequency": "34"}
        )
        updated = client.update_trace_settings(
            settings={"trace_rate": "56", "trace_count": "78", "trace_level": ["OFF"]}
        )
        assert updated == {
            **initial,
            "trace_rate": "56",
            "trace_count": "78",
            "trace_level": ["OFF"],
        }
        model = {**initial, "trace_level": ["OFF"], "trace_rate": "12", "trace_count": "78"}
        assert client.get_trace_settings(model_name="simple") == {**model, "log_frequency": "34"}
        # clearing falls back: the global to the start-up settings, the model to the global
        cleared = client.update_trace_settings(settings={"trace_rate": None, "trace_count": None})
        assert cleared == {**initial, "trace_level": ["OFF"]}
        model_cleared = client.update_trace_settings(
            model_name="simple", settings={"trace_rate": None, "trace_level": None}
        )
        assert model_cleared == {**initial, "trace_level": ["OFF"], "log_frequency": "34"}


@pytest.mark.parametrize(
    ("settings_update", "message"),
    [
        ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
        (
            {"trace_count": "10000000000"},
            "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: "
            "10000000000",
        ),
        ({"trace_count": "-2"}, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified"),
        ({"trace_level": ["LOUD"]}, "Unable to parse 'trace_level', got: LOUD"),
        ({"trace_colour": "red"}, "trace setting 'trace_colour' can not be updated"),
        ({"trace_rate": 5}, "attempt to access JSON non-string as string"),
    ],
)
def test_http_settings_refuse_bad_values(
    settings: tuple[ServerProcess, dict], settings_update: dict, message: str
) -> None:
    process, initial = settings
    with httpclient.InferenceServerClient(process.http_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.update_trace_settings(settings=settings_update)
        assert message in refused.value.message()
        assert refused.value.status() == "400"
        assert client.get_trace_settings() == initial


def test_grpc_settings_get_update_and_clear(settings: tuple[ServerProcess, dict]) -> None:
    process, initial = settings
    as_lists = {
        key: value if isinstance(value, list) else [value] for key, value in initial.items()
    }
    with grpcclient.InferenceServerClient(process.grpc_url) as client:
        assert grpc_settings(client) == as_lists
        assert grpc_settings(client, model_name="simple") == as_lists
        with pytest.raises(InferenceServerException) as unknown:
            client.get_trace_settings(model_name="nope")
        assert unknown.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert unknown.value.message() == "Request for unknown model : nope"
        response = client.update_trace_settings(
            settings={"trace_level": ["TIMESTAMPS", "TENSORS"]}, as_json=True
        )
        assert response["settings"]["trace_level"]["value"] == ["TIMESTAMPS", "TENSORS"]
        client.update_trace_settings(model_name="simple", settings={"trace_rate": "7"})
        model = grpc_settings(client, model_name="simple")
        assert model["trace_rate"] == ["7"] and model["trace_level"] == ["TIMESTAMPS", "TENSORS"]
        # no value clears, as Triton's SettingValue without values
        client.update_trace_settings(model_name="simple", settings={"trace_rate": None})
        assert grpc_settings(client, model_name="simple")["trace_rate"] == ["1"]
        with pytest.raises(InferenceServerException) as refused:
            client.update_trace_settings(settings={"trace_file": "x.log"})
        assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
        with pytest.raises(InferenceServerException, match="expect only 1 value for 'trace_rate'"):
            client.update_trace_settings(settings={"trace_rate": ["1", "2"]})


def test_metadata_lists_the_trace_extension(settings: tuple[ServerProcess, dict]) -> None:
    process, _ = settings
    with httpclient.InferenceServerClient(process.http_url) as client:
        assert "trace" in client.get_server_metadata()["extensions"]


def test_a_model_setting_traces_only_that_model(repository: Path, tmp_path: Path) -> None:
    """Tracing off globally, on for one model over the API: only its requests are traced."""
    trace_file = tmp_path / "model.json"
    process = serve(repository, trace_file, "rate=1")
    try:
        with httpclient.InferenceServerClient(process.http_url) as client:
            assert client.get_trace_settings()["trace_level"] == ["OFF"]
            client.infer("simple", inputs(httpclient))
            client.update_trace_settings(
                model_name="simple", settings={"trace_level": ["TIMESTAMPS"]}
            )
            # an untraced ensemble does not trace its step to "simple" either
            client.infer("ens", inputs(httpclient, ("A", "B")))
            client.infer("simple", inputs(httpclient), request_id="traced")
    finally:
        stop(process)
    traces = by_id(read_traces(trace_file))
    assert [(t["model_name"], t.get("request_id")) for t in traces.values()] == [
        ("simple", "traced")
    ]


def test_bad_trace_flags_stop_the_server_naming_them(repository: Path) -> None:
    for flags, message in [
        (["--trace-config", "level=LOUD"], "invalid value for trace level option: LOUD"),
        (["--trace-config", "mode=zipkin"], "invalid value for trace mode option: zipkin"),
        (["--trace-config", "triton,colour=red"], '\\"--trace-config triton,colour\\"'),
        (["--trace-config", "rate"], "--trace-config option format is"),
        (["--trace-rate", "-3"], '\\"--trace-rate\\"'),
    ]:
        process = ServerProcess([repository], *flags)
        try:
            code = process.process.wait(timeout=60)
        finally:
            process.stop()
        assert code != 0
        # log lines quote their message JSON-escaped, as Triton's
        assert message in process.log(), process.log()[-2000:]
