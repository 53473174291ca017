"""Sequence batching end to end: a real server process driven by the stock tritonclient.

Stateful numpy models (``tests.plugins.numpy_backend`` through ``TRITON_CORE_PLUGINS``) cover
both strategies and both correlation-ID kinds over HTTP, gRPC and a gRPC stream; an ONNX
accumulator covers implicit state through the ONNX Runtime plugin.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")

NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}

START = '{ name: "START" control { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } }'
END = '{ name: "END" control { kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] } }'
READY = '{ name: "READY" control { kind: CONTROL_SEQUENCE_READY bool_false_true: [false, true] } }'
CORRID = '{{ name: "CORRID" control {{ kind: CONTROL_SEQUENCE_CORRID data_type: {type} }} }}'


def write_model(repo: Path, name: str, sequence_batching: str, max_batch_size: int = 4) -> None:
    """A numpy ``accumulate`` model: OUTPUT0 is the running sum of INPUT0 over a sequence."""
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.npy").write_bytes(b"")
    (model_dir / "config.pbtxt").write_text(
        f"""
backend: "numpy"
max_batch_size: {max_batch_size}
parameters {{ key: "kind" value {{ string_value: "accumulate" }} }}
parameters {{ key: "sleep_ms" value {{ string_value: "5" }} }}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
sequence_batching {{ {sequence_batching} }}
"""
    )


def controls(corrid_type: str) -> str:
    return f"control_input [ {START}, {END}, {READY}, {CORRID.format(type=corrid_type)} ]"


ONNX_STATE_CONFIG = f"""
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
sequence_batching {{
  control_input [ {START} ]
  state [ {{
    input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 4 ]
  }} ]
}}
"""


@pytest.fixture(scope="module")
def sequence_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("sequence_models")
    write_model(repo, "direct_int", controls("TYPE_UINT64"))
    write_model(repo, "direct_str", controls("TYPE_STRING"))
    write_model(
        repo, "oldest_int", "oldest { max_candidate_sequences: 8 } " + controls("TYPE_INT64")
    )
    write_model(
        repo, "oldest_str", "oldest { max_candidate_sequences: 8 } " + controls("TYPE_STRING")
    )
    write_model(repo, "idle", "max_sequence_idle_microseconds: 300000 " + controls("TYPE_UINT64"))
    write_model(repo, "bad", "oldest { preferred_batch_size: [ 16 ] } " + controls("TYPE_UINT64"))
    onnx_builders.sequence_accumulate(repo / "onnx_state" / "1" / "model.onnx")
    (repo / "onnx_state" / "config.pbtxt").write_text(ONNX_STATE_CONFIG)
    process = ServerProcess(
        [repo], "--exit-on-error=false", "--strict-readiness=false", env=NUMPY_PLUGIN
    )
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def tensor(module, value: int, name: str = "INPUT0", rows: int = 1):  # type: ignore[no-untyped-def]
    data = np.full((rows, 4), value, dtype=np.int32)
    infer_input = module.InferInput(name, [rows, 4], "INT32")
    infer_input.set_data_from_numpy(data)
    return [infer_input]


def run_interleaved(client, module, model: str, ids, steps: int = 4) -> dict:  # type: ignore[no-untyped-def]
    """Sequences advance in turns, one request each; returns each sequence's running sums."""
    sums: dict = {cid: [] for cid in ids}
    for step in range(steps):
        for offset, cid in enumerate(ids):
            result = client.infer(
                model,
                tensor(module, offset + 1),
                sequence_id=cid,
                sequence_start=step == 0,
                sequence_end=step == steps - 1,
            )
            sums[cid].append(int(result.as_numpy("OUTPUT0")[0][0]))
    return sums


@pytest.mark.parametrize("model", ["direct_int", "oldest_int", "direct_str", "oldest_str"])
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_interleaved_sequences_keep_their_own_sums(sequence_server, model, module):
    url = sequence_server.http_url if module is httpclient else sequence_server.grpc_url
    client = module.InferenceServerClient(url)
    ids = [f"{model}-a", f"{model}-b", f"{model}-c"] if model.endswith("str") else [41, 42, 43]
    sums = run_interleaved(client, module, model, ids)
    assert sums == {cid: [(i + 1) * k for k in range(1, 5)] for i, cid in enumerate(ids)}


def test_sequences_on_one_grpc_stream_run_in_order(sequence_server):
    client = grpcclient.InferenceServerClient(sequence_server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for step in range(5):
            for cid in (7, 8):
                client.async_stream_infer(
                    "direct_int",
                    tensor(grpcclient, cid),
                    request_id=f"{cid}-{step}",
                    sequence_id=cid,
                    sequence_start=step == 0,
                    sequence_end=step == 4,
                )
        answers = {}
        for _ in range(10):
            result, error = results.get(timeout=60)
            assert error is None, error
            answers[result.get_response().id] = int(result.as_numpy("OUTPUT0")[0][0])
    finally:
        client.stop_stream()
    assert answers == {f"{cid}-{step}": cid * (step + 1) for cid in (7, 8) for step in range(5)}


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_sequence_errors_are_tritons(sequence_server, module):
    url = sequence_server.http_url if module is httpclient else sequence_server.grpc_url
    client = module.InferenceServerClient(url)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("direct_int", tensor(module, 1), sequence_id=999)
    assert (
        "inference request for sequence 999 to model 'direct_int' must specify the START flag "
        "on the first request of the sequence"
    ) in raised.value.message()
    with pytest.raises(InferenceServerException, match="batch-size 1 due to requirements"):
        client.infer("direct_int", tensor(module, 1, rows=2), sequence_id=5, sequence_start=True)
    with pytest.raises(InferenceServerException, match="non-zero or non-empty correlation ID"):
        client.infer("direct_int", tensor(module, 1))
    with pytest.raises(InferenceServerException, match="has a string correlation ID"):
        client.infer("direct_int", tensor(module, 1), sequence_id="text", sequence_start=True)


def test_idle_sequences_expire(sequence_server):
    client = httpclient.InferenceServerClient(sequence_server.http_url)
    client.infer("idle", tensor(httpclient, 1), sequence_id=1, sequence_start=True)
    assert client.infer("idle", tensor(httpclient, 2), sequence_id=1).as_numpy("OUTPUT0")[0][0] == 3
    time.sleep(1.0)  # more than max_sequence_idle_microseconds (0.3 s)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        client.infer("idle", tensor(httpclient, 1), sequence_id=1)
    result = client.infer("idle", tensor(httpclient, 5), sequence_id=1, sequence_start=True)
    assert result.as_numpy("OUTPUT0")[0][0] == 5


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_onnx_model_keeps_implicit_state(sequence_server, module):
    url = sequence_server.http_url if module is httpclient else sequence_server.grpc_url
    client = module.InferenceServerClient(url)
    cid = 11 if module is httpclient else 12
    sums = []
    for step, value in enumerate([3, 4, 5]):
        result = client.infer(
            "onnx_state",
            tensor(module, value, "INPUT"),
            sequence_id=cid,
            sequence_start=step == 0,
            sequence_end=step == 2,
        )
        assert result.as_numpy("OUTPUT_STATE") is None  # the state stays in the server
        sums.append(result.as_numpy("OUTPUT").tolist())
    assert sums == [[[3] * 4], [[7] * 4], [[12] * 4]]


def test_invalid_sequence_config_fails_its_load_naming_the_field(sequence_server):
    client = httpclient.InferenceServerClient(sequence_server.http_url)
    assert not client.is_model_ready("bad")
    assert client.is_model_ready("direct_int")
    log = sequence_server.log()
    assert "model 'bad': sequence_batching oldest 'preferred_batch_size' 16" in log
