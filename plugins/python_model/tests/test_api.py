"""Triton's ``triton_python_backend_utils`` API, called from real model.py files served by a
real ``triton-core serve`` process and driven by the stock tritonclient.

One model (``api``) answers a JSON report of what a pb_utils function gave it, chosen by
its ``WHAT`` input; the other models exist for it to load, call and reshape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import urllib.request
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from triton_core import InferenceRequest, Tensor
from triton_core.testing import ModelRepository, ServerProcess

pytestmark = pytest.mark.timeout(300)

API = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

NUMPY_TYPES = [np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16,
               np.int32, np.int64, np.float16, np.float32, np.float64, np.object_]


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        self.config = json.loads(args["model_config"])
        logger = pb_utils.Logger
        logger.log("api-log-info", logger.INFO)
        logger.log_warn("api-log-warn")
        logger.log_error("api-log-error")
        logger.log_verbose("api-log-verbose")
        logger.log("api-log-default-level")
        counters = pb_utils.MetricFamily(
            name="api_requests", description="Requests the api model saw",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.counters = counters
        self.counter = counters.Metric(labels={"model": args["model_name"], "version": "1"})
        gauge = pb_utils.MetricFamily.GAUGE
        self.gauges = pb_utils.MetricFamily("api_temperature", "A gauge", gauge)
        self.gauge = self.gauges.Metric(labels={"room": "lab"})
        self.histograms = pb_utils.MetricFamily(
            "api_latency_ms", "A histogram", pb_utils.MetricFamily.HISTOGRAM
        )
        self.histogram = self.histograms.Metric(labels={"stage": "pre"}, buckets=[1, 10, 100])

    def execute(self, requests):
        responses = []
        for request in requests:
            what = pb_utils.get_input_tensor_by_name(request, "WHAT").as_numpy()
            what = what.reshape(-1)[0].decode()
            try:
                result = getattr(self, "do_" + what)(request)
            except pb_utils.TritonModelException as exc:
                result = {"exception": str(exc)}
            data = np.array([json.dumps(result).encode()], dtype=np.object_)
            outputs = [pb_utils.Tensor("RESULT", data)]
            if "EXTRA" in request.requested_output_names():
                outputs.append(pb_utils.Tensor("EXTRA", np.array([7], np.int32)))
            responses.append(pb_utils.InferenceResponse(outputs, parameters={"what": what}))
        return responses

    def do_args(self, request):
        return {key: value for key, value in self.args.items() if key != "model_config"} | {
            "config_name": self.config["name"],
            "types": sorted({type(value).__name__ for value in self.args.values()}),
        }

    def do_model_dir(self, request):
        folder = pb_utils.get_model_dir()
        return {"dir": folder, "has_model_py": os.path.isfile(os.path.join(folder, "model.py"))}

    def do_types(self, request):
        return {
            "table": {k: np.dtype(v).name for k, v in pb_utils.TRITON_STRING_TO_NUMPY.items()},
            "fp16": np.dtype(pb_utils.triton_string_to_numpy("TYPE_FP16")).name,
            "numpy_to_triton": [pb_utils.numpy_to_triton_type(t) for t in NUMPY_TYPES],
            "triton_to_numpy": [
                np.dtype(pb_utils.triton_to_numpy_type(n)).name for n in range(1, 14)
            ],
            "bf16": pb_utils.triton_to_numpy_type(14),
        }

    def do_config(self, request):
        config = self.config
        return {
            "input": pb_utils.get_input_config_by_name(config, "WHAT")["data_type"],
            "output": pb_utils.get_output_config_by_name(config, "EXTRA")["dims"],
            "missing": pb_utils.get_input_config_by_name(config, "NOPE"),
            "decoupled": pb_utils.using_decoupled_model_transaction_policy(config),
        }

    def do_errors(self, request):
        names = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE",
                 "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED"]
        error = pb_utils.TritonError("plain")
        return {
            "codes": {name: int(getattr(pb_utils.TritonError, name)) for name in names},
            "default": [error.code(), error.message()],
            "exception": issubclass(pb_utils.TritonModelException, Exception),
        }

    def do_request(self, request):
        request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
        return {
            "id": request.request_id(),
            "correlation_id": request.correlation_id(),
            "flags": request.flags(),
            "timeout": request.timeout(),
            "parameters": json.loads(request.parameters()),
            "outputs": sorted(request.requested_output_names()),
            "cancelled": request.is_cancelled(),
            "sender_cancelled": request.get_response_sender().is_cancelled(),
            "model": [request.model_name(), request.model_version()],
        }

    def do_load(self, request):
        before = pb_utils.is_model_ready("target")
        pb_utils.load_model(model_name="target")
        ready = [pb_utils.is_model_ready("target"), pb_utils.is_model_ready("target", "1"),
                 pb_utils.is_model_ready("target", "7")]
        answer = self.call("target", np.array([3, 4], np.int32))
        pb_utils.unload_model("target")
        return {"before": before, "ready": ready, "answer": answer,
                "after": pb_utils.is_model_ready("target")}

    def do_load_files(self, request):
        repository = os.path.dirname(self.args["model_repository"])
        with open(os.path.join(repository, "target", "1", "model.py"), "rb") as source:
            files = {"file:1/model.py": source.read()}
        config = {
            "backend": "python", "max_batch_size": 0,
            "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [-1]}],
        }
        pb_utils.load_model("uploaded", config=json.dumps(config), files=files)
        answer = self.call("uploaded", np.array([5], np.int32))
        pb_utils.unload_model("uploaded", unload_dependents=False)
        return {"answer": answer}

    def do_load_errors(self, request):
        messages = []
        for name, config in (("target", "{not json"), ("no_such_model", "")):
            try:
                pb_utils.load_model(name, config=config)
                messages.append(None)
            except pb_utils.TritonModelException as exc:
                messages.append(str(exc))
        return {"messages": messages, "target_ready": pb_utils.is_model_ready("target")}

    def call(self, model, values):
        bls = pb_utils.InferenceRequest(
            model_name=model, requested_output_names=["OUTPUT0"],
            inputs=[pb_utils.Tensor("INPUT0", values)],
        )
        response = bls.exec()
        if response.has_error():
            return response.error().message()
        return pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy().tolist()

    def do_bls_parameters(self, request):
        bls = pb_utils.InferenceRequest(
            request_id="bls-1",
            correlation_id="sequence-a",
            inputs=[pb_utils.Tensor("INPUT0", np.array([1.5], np.float32))],
            requested_output_names=["OUTPUT0"],
            model_name="echo",
            model_version=1,
            flags=0,
            timeout=10_000_000,
            preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
            parameters={"a": 1, "b": "x", "c": True},
        )
        response = bls.exec(decoupled=False)
        output = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
        return {
            "error": response.error().message() if response.has_error() else None,
            "parameters": json.loads(response.parameters()),
            "output": output.as_numpy().tolist(),
            "correlation_id": bls.correlation_id(),
            "dtype": output.triton_dtype(),
            "cpu": output.is_cpu(),
            "name": output.name(),
            "shape": output.shape(),
        }

    def do_metrics(self, request):
        self.counter.increment(2)
        self.gauge.set(21.5)
        self.gauge.increment(-1.5)
        for value in (0.5, 5, 50, 500):
            self.histogram.observe(value)
        return {"counter": self.counter.value(), "gauge": self.gauge.value()}

    def do_metric_errors(self, request):
        family, gauge = pb_utils.MetricFamily, pb_utils.MetricFamily.GAUGE
        attempts = {
            "negative": lambda: self.counter.increment(-1),
            "counter_set": lambda: self.counter.set(1),
            "gauge_observe": lambda: self.gauge.observe(1),
            "histogram_value": lambda: self.histogram.value(),
            "reserved_name": lambda: family("nv_inference_mine", "x", gauge),
            "bad_name": lambda: family("bad name", "x", gauge),
            "other_kind": lambda: family("api_requests", "x", gauge),
            "buckets_on_counter": lambda: self.counters.Metric(labels={}, buckets=[1.0]),
            "no_buckets": lambda: self.histograms.Metric(labels={}),
            "bad_label": lambda: self.gauges.Metric(labels={"a-b": "x"}),
        }
        messages = {}
        for name, attempt in attempts.items():
            try:
                attempt()
                messages[name] = None
            except pb_utils.TritonModelException as exc:
                messages[name] = str(exc)
        return messages

    def do_metric_create(self, request):
        self.temporary_family = pb_utils.MetricFamily(
            "api_temporary", "Goes away", pb_utils.MetricFamily.COUNTER
        )
        self.temporary = self.temporary_family.Metric(labels={"k": "v"})
        self.temporary.increment(3)
        return {"value": self.temporary.value()}

    def do_metric_delete(self, request):
        del self.temporary, self.temporary_family
        return {}
"""

API_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "WHAT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "RESULT" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "EXTRA" data_type: TYPE_INT32 dims: [ 1 ] }
]
instance_group [ { name: "api_group" count: 1 kind: KIND_CPU } ]
"""

#: OUTPUT0 = INPUT0 * 2; request parameters come back as response parameters
TARGET = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", values * 2)
            parameters = json.loads(request.parameters())
            responses.append(pb_utils.InferenceResponse([out], parameters=parameters))
        return responses
"""

TARGET_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: {dtype} dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: {dtype} dims: [ -1 ] } ]
"""

#: the model sees the config reshape [2, 2] of dims [4], and answers in it
RESHAPE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            assert values.shape == (2, 2), values.shape
            answer = values.T if values[0, 0] != 99 else values.reshape(-1)[:3]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", answer)]))
        return responses
"""

RESHAPE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
"""

#: BF16 in, doubled in torch bfloat16 through DLPack, BF16 out; BITS: the input's bits
BF16 = """
import numpy as np
import torch
from torch.utils.dlpack import from_dlpack, to_dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            values = from_dlpack(tensor.to_dlpack())
            assert values.dtype == torch.bfloat16, values.dtype
            doubled = pb_utils.Tensor.from_dlpack("OUTPUT0", to_dlpack(values * 2))
            # as_numpy() of a BF16 tensor raises, as in Triton: its bits go as uint16
            bits = pb_utils.Tensor("BITS", values.view(torch.int16).numpy().view(np.uint16).copy())
            responses.append(pb_utils.InferenceResponse([doubled, bits]))
        return responses
"""

BF16_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_BF16 dims: [ -1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_BF16 dims: [ -1 ] },
  { name: "BITS" data_type: TYPE_BF16 dims: [ -1 ] }
]
"""


#: two instances that create the same gauge series: one series on /metrics, set by both
METERED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        gauge = pb_utils.MetricFamily.GAUGE
        family = pb_utils.MetricFamily("metered_instances", "Instances", gauge)
        self.metric = family.Metric(labels={"model": args["model_name"]})
        self.metric.increment(1)
        self.family = family

    def execute(self, requests):
        out = pb_utils.Tensor("OUTPUT0", np.array([self.metric.value()], np.float32))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

METERED_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("pb_api")
    repository = ModelRepository(root)
    for name, source, config in (
        ("api", API, API_CONFIG),
        ("target", TARGET, TARGET_CONFIG.replace("{dtype}", "TYPE_INT32")),
        ("echo", TARGET, TARGET_CONFIG.replace("{dtype}", "TYPE_FP32")),
        ("reshape", RESHAPE, RESHAPE_CONFIG),
        ("bf16", BF16, BF16_CONFIG),
        ("metered", METERED, METERED_CONFIG),
    ):
        repository.add_model(name, dedent(config), versions={1: {"model.py": dedent(source)}})
    process = ServerProcess(
        [root],
        "--model-control-mode=explicit",
        "--load-model=api",
        "--load-model=echo",
        "--load-model=reshape",
        "--load-model=bf16",
        "--log-verbose=1",
    )
    process.root = root  # type: ignore[attr-defined]
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0, process.log()[-3000:]


def ask(server, what: str, **options):
    """The api model's JSON report for ``what`` (and the whole result)."""
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("WHAT", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([what.encode()], dtype=np.object_))
    result = client.infer("api", [tensor], **options)
    return json.loads(result.as_numpy("RESULT")[0]), result


def scrape(server) -> str:
    with urllib.request.urlopen(f"{server.metrics_url}", timeout=10) as answer:
        return answer.read().decode()


def test_initialize_args_are_tritons(server):
    report, _ = ask(server, "args")
    assert report == {
        "model_instance_kind": "CPU",
        "model_instance_name": "api_group_0",
        "model_instance_device_id": "0",
        "model_repository": str(server.root / "api"),
        "model_version": "1",
        "model_name": "api",
        "config_name": "api",
        "types": ["str"],
    }


def test_get_model_dir_is_the_folder_of_model_py(server):
    report, _ = ask(server, "model_dir")
    assert report == {"dir": str(server.root / "api" / "1"), "has_model_py": True}


def test_type_helpers_match_tritons_tables(server):
    report, _ = ask(server, "types")
    assert report["table"] == {
        "TYPE_BOOL": "bool", "TYPE_UINT8": "uint8", "TYPE_UINT16": "uint16",
        "TYPE_UINT32": "uint32", "TYPE_UINT64": "uint64", "TYPE_INT8": "int8",
        "TYPE_INT16": "int16", "TYPE_INT32": "int32", "TYPE_INT64": "int64",
        "TYPE_FP16": "float16", "TYPE_FP32": "float32", "TYPE_FP64": "float64",
        "TYPE_STRING": "object",
    }  # fmt: skip
    assert report["fp16"] == "float16"
    assert report["numpy_to_triton"] == list(range(1, 14))
    assert report["triton_to_numpy"][0] == "bool" and report["triton_to_numpy"][-1] == "object"
    assert report["bf16"] is None


def test_config_helpers_read_the_model_config(server):
    report, _ = ask(server, "config")
    assert report == {"input": "TYPE_STRING", "output": [1], "missing": None, "decoupled": False}


def test_triton_error_codes(server):
    report, _ = ask(server, "errors")
    assert report["codes"] == {
        "UNKNOWN": 0, "INTERNAL": 1, "NOT_FOUND": 2, "INVALID_ARG": 3, "UNAVAILABLE": 4,
        "UNSUPPORTED": 5, "ALREADY_EXISTS": 6, "CANCELLED": 7,
    }  # fmt: skip
    assert report["default"] == [1, "plain"] and report["exception"] is True


def test_request_accessors_and_response_parameters(server):
    outputs = [httpclient.InferRequestedOutput("RESULT"), httpclient.InferRequestedOutput("EXTRA")]
    report, result = ask(
        server,
        "request",
        request_id="r-9",
        outputs=outputs,
        parameters={"temperature": 0.5, "mode": "fast"},
        timeout=5_000_000,
    )
    assert report == {
        "id": "r-9",
        "correlation_id": 0,
        "flags": 0,
        "timeout": 5_000_000,
        "parameters": {"temperature": 0.5, "mode": "fast"},
        "outputs": ["EXTRA", "RESULT"],
        "cancelled": False,
        "sender_cancelled": False,
        "model": ["api", 1],
    }
    assert result.as_numpy("EXTRA").tolist() == [7]
    assert result.get_response()["parameters"] == {"what": "request"}


def test_load_model_is_model_ready_and_unload_model(server):
    report, _ = ask(server, "load")
    assert report == {
        "before": False,
        "ready": [True, True, False],
        "answer": [6, 8],
        "after": False,
    }


def test_load_model_with_a_config_and_files(server):
    report, _ = ask(server, "load_files")
    assert report == {"answer": [10]}


def test_load_model_failures_raise_with_the_servers_message(server):
    report, _ = ask(server, "load_errors")
    bad_config, unknown = report["messages"]
    assert bad_config is not None and "target" in bad_config
    assert unknown is not None and "no_such_model" in unknown
    assert report["target_ready"] is False


def test_bls_request_options_and_response_parameters(server):
    report, _ = ask(server, "bls_parameters")
    assert report == {
        "error": None,
        "parameters": {"a": 1, "b": "x", "c": True},
        "output": [3.0],
        "correlation_id": "sequence-a",
        "dtype": 11,
        "cpu": True,
        "name": "OUTPUT0",
        "shape": [1],
    }


def test_logger_lines_reach_the_server_log_at_their_levels(server):
    log = server.log()
    for letter, text in (
        ("I", "api-log-info"),
        ("W", "api-log-warn"),
        ("E", "api-log-error"),
        ("I", "api-log-default-level"),
    ):
        # Triton quotes the message of a log line (JSON-escaped)
        assert re.search(rf"^{letter}\d{{4}} .*\] \"{text}\"$", log, re.MULTILINE), text
    assert "api-log-verbose" in log  # --log-verbose=1


def test_custom_metrics_reach_metrics_with_their_labels(server):
    report, _ = ask(server, "metrics")
    assert report == {"counter": 2.0, "gauge": 20.0}
    text = scrape(server)
    assert "# TYPE api_requests counter" in text
    assert 'api_requests{model="api",version="1"} 2' in text
    assert "# HELP api_temperature A gauge" in text
    assert 'api_temperature{room="lab"} 20' in text
    assert "# TYPE api_latency_ms histogram" in text
    # Triton's lines and their order
    assert (
        'api_latency_ms_count{stage="pre"} 4\n'
        'api_latency_ms_sum{stage="pre"} 555.5\n'
        'api_latency_ms_bucket{stage="pre",le="1"} 1\n'
        'api_latency_ms_bucket{stage="pre",le="10"} 2\n'
        'api_latency_ms_bucket{stage="pre",le="100"} 3\n'
        'api_latency_ms_bucket{stage="pre",le="+Inf"} 4\n'
    ) in text


def test_custom_metric_errors_are_tritons(server):
    report, _ = ask(server, "metric_errors")
    assert report["negative"] == (
        "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be "
        "incremented monotonically by non-negative values."
    )
    assert report["counter_set"] == (
        "Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set"
    )
    assert report["gauge_observe"] == (
        "Failed to observe metric value: TRITONSERVER_METRIC_KIND_GAUGE does not support Observe"
    )
    assert report["histogram_value"] == (
        "Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"
    )
    assert "reserved" in report["reserved_name"]
    assert "Invalid metric name 'nv_inference_mine'" in report["reserved_name"]
    assert "Invalid metric name 'bad name'" in report["bad_name"]
    assert "already exists with kind COUNTER" in report["other_kind"]
    assert report["buckets_on_counter"] == "Failed to create metric. Unexpected buckets found."
    assert report["no_buckets"] == "Failed to create metric. Missing required buckets."
    assert "invalid label name 'a-b'" in report["bad_label"]
    assert "nv_inference_mine" not in scrape(server)


def test_a_deleted_metric_leaves_metrics(server):
    report, _ = ask(server, "metric_create")
    assert report == {"value": 3.0}
    assert 'api_temporary{k="v"} 3' in scrape(server)
    ask(server, "metric_delete")
    deadline = time.monotonic() + 10
    while "api_temporary" in scrape(server):
        assert time.monotonic() < deadline, "the deleted metric stayed on /metrics"
        time.sleep(0.05)


def test_instances_share_a_series_which_leaves_metrics_when_the_model_unloads(server):
    client = httpclient.InferenceServerClient(server.http_url)
    client.load_model("metered")
    assert 'metered_instances{model="metered"} 2' in scrape(server)
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([0], dtype=np.float32))
    assert client.infer("metered", [tensor]).as_numpy("OUTPUT0").tolist() == [2.0]
    client.unload_model("metered")
    deadline = time.monotonic() + 10
    while "metered_instances" in scrape(server):
        assert time.monotonic() < deadline, "an unloaded model's metrics stayed on /metrics"
        time.sleep(0.05)


def test_config_reshape_applies_to_inputs_and_outputs(server):
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [4], "INT32")
    tensor.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.int32))
    result = client.infer("reshape", [tensor])
    assert result.get_output("OUTPUT0")["shape"] == [4]
    assert result.as_numpy("OUTPUT0").tolist() == [1, 3, 2, 4]
    tensor.set_data_from_numpy(np.array([99, 2, 3, 4], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("reshape", [tensor])
    assert "returned output 'OUTPUT0' with shape [3], which does not match its config reshape" in (
        info.value.message()
    )


def test_bf16_outputs_come_back_labelled_bf16(server):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [3], "BF16")
    tensor.set_data_from_numpy(np.array([1.5, -2.0, 0.25], dtype=ml_dtypes.bfloat16))
    result = client.infer("bf16", [tensor])
    for name in ("OUTPUT0", "BITS"):
        assert result.get_output(name)["datatype"] == "BF16"
    assert result.as_numpy("OUTPUT0").astype(np.float32).tolist() == [3.0, -4.0, 0.5]
    assert result.as_numpy("BITS").astype(np.float32).tolist() == [1.5, -2.0, 0.25]


LOGS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pb_utils.Logger.log("from execute", pb_utils.Logger.WARNING)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))])]
"""

LOGS_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


async def test_logger_records_carry_the_models_file_and_line(
    repo, write_model, make_server, caplog
):
    write_model(repo, "logs", LOGS, LOGS_CONFIG)
    with caplog.at_level(logging.INFO, logger="triton_core_python.model"):
        async with make_server(repo) as server:
            request = InferenceRequest("logs", {"IN": Tensor("IN", "INT32", np.array([1]))})
            await server.infer(request)
            deadline = time.monotonic() + 10
            while not [r for r in caplog.records if r.getMessage() == "from execute"]:
                assert time.monotonic() < deadline, "the model's log line never came"
                await asyncio.sleep(0.02)
    (record,) = [r for r in caplog.records if r.getMessage() == "from execute"]
    assert record.levelno == logging.WARNING
    assert (record.filename, record.lineno) == ("model.py", 8)  # as Triton's "model.py:8]"
    assert record.model_name == "logs" and record.model_instance == "logs_0_0"


MANAGER = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        ready = pb_utils.is_model_ready
        report = {"ready": ready("manager"), "unknown": ready("x")}
        for name, call in (("load", pb_utils.load_model), ("unload", pb_utils.unload_model)):
            try:
                call("manager")
                report[name] = None
            except pb_utils.TritonModelException as exc:
                report[name] = str(exc)
        out = pb_utils.Tensor("OUT", np.array([json.dumps(report).encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out])]
"""


MANAGER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


async def test_model_management_needs_explicit_mode_as_in_triton(repo, write_model, make_server):
    write_model(repo, "manager", MANAGER, MANAGER_CONFIG)
    async with make_server(repo) as server:
        request = InferenceRequest("manager", {"IN": Tensor("IN", "INT32", np.array([1]))})
        response = await server.infer(request)
    report = json.loads(response.output("OUT").data[0])
    refusal = "explicit model load / unload is not allowed if polling is enabled"
    assert report == {"ready": True, "unknown": False, "load": refusal, "unload": refusal}
