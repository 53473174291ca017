"""Ensembles of ONNX models in a real server process, driven by tritonclient."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")


def onnx_config(inputs: dict[str, str], outputs: dict[str, str]) -> str:
    """A composing model's config: FP32 tensors by name -> dims."""
    text = 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for name, dims in tensors.items():
            text += f'{kind} [{{ name: "{name}" data_type: TYPE_FP32 dims: [ {dims} ] }}]\n'
    return text


ADD_SUB = onnx_config({"INPUT0": "4", "INPUT1": "4"}, {"OUTPUT0": "4", "OUTPUT1": "4"})


def ensemble(
    inputs: dict[str, str],
    outputs: dict[str, str],
    steps: list[tuple[str, dict[str, str], dict[str, str]]],
    datatype: str = "TYPE_FP32",
) -> str:
    text = 'platform: "ensemble"\nmax_batch_size: 8\n'
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for name, dims in tensors.items():
            text += f'{kind} [{{ name: "{name}" data_type: {datatype} dims: [ {dims} ] }}]\n'
    text += "ensemble_scheduling {\n"
    for model, input_map, output_map in steps:
        maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in input_map.items())
        maps += " " + " ".join(
            f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in output_map.items()
        )
        text += f'  step [{{ model_name: "{model}" model_version: -1 {maps} }}]\n'
    return text + "}\n"


def write(root: Path, name: str, config: str) -> None:
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(config)


#: pre -> (left, right in parallel) -> post: OUT0 = 3X + Y, OUT1 = X - Y, TWO_Y = 2Y
DAG = ensemble(
    {"X": "4", "Y": "4"},
    {"OUT0": "4", "OUT1": "4", "TWO_Y": "4"},
    [
        ("e_pre", {"INPUT0": "X", "INPUT1": "Y"}, {"OUTPUT0": "S", "OUTPUT1": "D"}),
        ("e_left", {"INPUT0": "S", "INPUT1": "D"}, {"OUTPUT0": "TWO_X", "OUTPUT1": "TWO_Y"}),
        ("e_right", {"INPUT0": "S"}, {"OUTPUT0": "S_COPY"}),
        ("e_post", {"INPUT0": "TWO_X", "INPUT1": "S_COPY"}, {"OUTPUT0": "OUT0", "OUTPUT1": "OUT1"}),
    ],
)

ADD_SUB_STEP = [("e_pre", {"INPUT0": "X", "INPUT1": "Y"}, {"OUTPUT0": "O0", "OUTPUT1": "O1"})]
PAIR = {"X": "4", "Y": "4"}
OUTS = {"O0": "4", "O1": "4"}
PASS = ({"X": "X", "Y": "Y"}, {"O0": "O0", "O1": "O1"})

#: each fails its own load; the message must name the culprit
INVALID = {
    "bad_unknown": (
        ensemble(PAIR, OUTS, [("does_not_exist", *PASS)]),
        "names 'does_not_exist', which is not in the model repository",
    ),
    "bad_cycle_a": (
        ensemble(PAIR, OUTS, [("bad_cycle_b", *PASS)]),
        "circular dependency between ensembles: bad_cycle_a -> bad_cycle_b -> bad_cycle_a",
    ),
    "bad_cycle_b": (ensemble(PAIR, OUTS, [("bad_cycle_a", *PASS)]), "circular dependency"),
    "bad_dtype": (
        ensemble(PAIR, OUTS, ADD_SUB_STEP, datatype="TYPE_INT32"),
        "ensemble tensor 'X' has inconsistent 'data_type': TYPE_INT32 from ensemble "
        "'bad_dtype' input 'X', but TYPE_FP32 from model 'e_pre' input 'INPUT0'",
    ),
    "bad_shape": (
        ensemble({"X": "5", "Y": "5"}, OUTS, ADD_SUB_STEP),
        "ensemble tensor 'X' has inconsistent 'dims': [-1,5] from ensemble 'bad_shape' input "
        "'X', but [-1,4] from model 'e_pre' input 'INPUT0'",
    ),
    "bad_unmapped": (
        ensemble({**PAIR, "Z": "4"}, OUTS, ADD_SUB_STEP),
        "ensemble input 'Z' for ensemble 'bad_unmapped' is not used: no step's 'input_map' "
        "reads it",
    ),
    "bad_member": (
        ensemble(PAIR, OUTS, [("broken", {"INPUT0": "X", "INPUT1": "Y"}, PASS[1])]),
        "ensemble 'bad_member' depends on 'broken' which has no loaded version",
    ),
}


def build_repository(root: Path) -> Path:
    for name in ("e_pre", "e_left", "e_post", "broken"):
        write(root, name, ADD_SUB)
        onnx_builders.add_sub(root / name / "1" / "model.onnx", "FP32", 4)
    (root / "broken" / "1" / "model.onnx").write_bytes(b"this is not an onnx model")
    write(root, "e_right", onnx_config({"INPUT0": "-1"}, {"OUTPUT0": "-1"}))
    onnx_builders.identity(root / "e_right" / "1" / "model.onnx", "FP32", (-1,))
    write(root, "e_mlp", onnx_config({"INPUT0": "64"}, {"OUTPUT0": "10"}))
    onnx_builders.mlp(root / "e_mlp" / "1" / "model.onnx")
    write(root, "dag", DAG)
    write(
        root,
        "mlp_chain",  # the identity's -1 dims match the 64 features
        ensemble(
            {"FEATURES": "64"},
            {"SCORES": "10"},
            [
                ("e_right", {"INPUT0": "FEATURES"}, {"OUTPUT0": "COPY"}),
                ("e_mlp", {"INPUT0": "COPY"}, {"OUTPUT0": "SCORES"}),
            ],
        ),
    )
    for name, (config, _) in INVALID.items():
        write(root, name, config)
    return root


@pytest.fixture(scope="module")
def ensemble_server(tmp_path_factory: pytest.TempPathFactory):
    repo = build_repository(tmp_path_factory.mktemp("ensembles"))
    process = ServerProcess([repo], "--exit-on-error=false")
    try:
        process.wait_ready(path="/v2/health/live")
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()[-4000:]


def http_inputs(x: np.ndarray, y: np.ndarray) -> list[httpclient.InferInput]:
    inputs = []
    for name, value in (("X", x), ("Y", y)):
        tensor = httpclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value, binary_data=True)
        inputs.append(tensor)
    return inputs


def test_the_dag_computes_its_outputs_over_http(ensemble_server):
    client = httpclient.InferenceServerClient(ensemble_server.http_url)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    y = np.full((2, 4), 0.5, dtype=np.float32)
    result = client.infer("dag", http_inputs(x, y))
    np.testing.assert_allclose(result.as_numpy("OUT0"), 3 * x + y)
    np.testing.assert_allclose(result.as_numpy("OUT1"), x - y)
    np.testing.assert_allclose(result.as_numpy("TWO_Y"), 2 * y)
    only = client.infer("dag", http_inputs(x, y), outputs=[httpclient.InferRequestedOutput("OUT1")])
    assert [o["name"] for o in only.get_response()["outputs"]] == ["OUT1"]
    metadata = client.get_model_metadata("dag")
    assert metadata["platform"] == "ensemble"
    assert [t["name"] for t in metadata["outputs"]] == ["OUT0", "OUT1", "TWO_Y"]
    assert client.is_model_ready("dag")


def test_the_dag_over_grpc_and_its_statistics(ensemble_server):
    client = grpcclient.InferenceServerClient(ensemble_server.grpc_url)
    x = np.ones((1, 4), dtype=np.float32)
    y = np.full((1, 4), 2.0, dtype=np.float32)
    inputs = []
    for name, value in (("X", x), ("Y", y)):
        tensor = grpcclient.InferInput(name, [1, 4], "FP32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    before = client.get_inference_statistics("e_post", as_json=True)["model_stats"][0]
    result = client.infer("dag", inputs)
    np.testing.assert_allclose(result.as_numpy("OUT0"), 3 * x + y)
    stats = client.get_inference_statistics("dag", as_json=True)["model_stats"][0]
    assert int(stats["inference_stats"]["success"].get("count", 0)) >= 1
    after = client.get_inference_statistics("e_post", as_json=True)["model_stats"][0]
    assert int(after["inference_stats"]["success"].get("count", 0)) == (
        int(before["inference_stats"]["success"].get("count", 0)) + 1
    )


def test_a_chain_into_an_mlp_matches_the_mlp_alone(ensemble_server):
    client = httpclient.InferenceServerClient(ensemble_server.http_url)
    features = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    through = httpclient.InferInput("FEATURES", [3, 64], "FP32")
    through.set_data_from_numpy(features)
    direct = httpclient.InferInput("INPUT0", [3, 64], "FP32")
    direct.set_data_from_numpy(features)
    scores = client.infer("mlp_chain", [through]).as_numpy("SCORES")
    expected = client.infer("e_mlp", [direct]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(scores, expected, rtol=1e-6)


def test_a_bad_request_names_the_ensemble(ensemble_server):
    client = httpclient.InferenceServerClient(ensemble_server.http_url)
    bad = np.ones((1, 3), dtype=np.float32)
    with pytest.raises(InferenceServerException) as info:
        client.infer("dag", http_inputs(bad, bad))
    assert info.value.status() == "400"
    assert "unexpected shape for input 'X' for model 'dag'" in info.value.message()


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_ensembles_fail_their_load_naming_the_culprit(ensemble_server, name):
    client = httpclient.InferenceServerClient(ensemble_server.http_url)
    assert not client.is_model_ready(name)
    message = INVALID[name][1]
    assert f"failed to load '{name}'" in ensemble_server.log()
    assert message in ensemble_server.log()
    with pytest.raises(InferenceServerException) as info:
        client.infer(name, http_inputs(np.ones((1, 4), np.float32), np.ones((1, 4), np.float32)))
    assert "has no available versions" in info.value.message()


def test_an_ensemble_whose_member_fails_is_not_ready_and_the_rest_serve(ensemble_server):
    client = httpclient.InferenceServerClient(ensemble_server.http_url)
    assert not client.is_model_ready("broken")
    assert not client.is_model_ready("bad_member")
    assert "Model 'broken' loading failed with error" in ensemble_server.log()
    assert not client.is_server_ready()  # strict readiness: some models failed
    assert client.is_model_ready("dag") and client.is_model_ready("mlp_chain")


def ready_models(client: httpclient.InferenceServerClient) -> set[str]:
    return {e["name"] for e in client.get_model_repository_index() if e.get("state") == "READY"}


def test_load_model_of_an_ensemble_at_start_loads_its_members(tmp_path):
    """Explicit mode, ``--load-model dag``: the models its steps call load with it (Triton
    does the same); unloading it with its dependents unloads them again."""
    repo = build_repository(tmp_path / "models")
    process = ServerProcess([repo], "--model-control-mode=explicit", "--load-model", "dag")
    try:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        assert ready_models(client) == {"dag", "e_pre", "e_left", "e_right", "e_post"}
        x, y = np.ones((1, 4), np.float32), np.full((1, 4), 2, np.float32)
        result = client.infer("dag", http_inputs(x, y))
        np.testing.assert_allclose(result.as_numpy("OUT0"), 3 * x + y)
        client.unload_model("dag", unload_dependents=True)
        assert not ready_models(client)
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def test_ensemble_statistics_are_tritons_sums_of_its_steps(tmp_path: Path) -> None:
    # Triton 2.51 (an ensemble of two identity models, measured): one execution per request,
    # inference_count by batch size, compute times the sums of the steps', batch_stats too
    for name in ("first", "second"):
        write(tmp_path, name, onnx_config({"INPUT0": "4"}, {"OUTPUT0": "4"}))
        onnx_builders.identity(tmp_path / name / "1" / "model.onnx", "FP32", (4,))
    chain = ensemble(
        {"IN": "4"},
        {"OUT": "4"},
        [
            ("first", {"INPUT0": "IN"}, {"OUTPUT0": "MID"}),
            ("second", {"INPUT0": "MID"}, {"OUTPUT0": "OUT"}),
        ],
    )
    write(tmp_path, "chain", chain)
    with ServerProcess([tmp_path]) as process:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        try:
            for rows in (1, 1, 1, 3):
                tensor = httpclient.InferInput("IN", [rows, 4], "FP32")
                values = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
                tensor.set_data_from_numpy(values)
                result = client.infer("chain", [tensor])
                np.testing.assert_array_equal(result.as_numpy("OUT"), values)
            stats = {
                name: client.get_inference_statistics(name)["model_stats"][0]
                for name in ("chain", "first", "second")
            }
        finally:
            client.close()
    chain_stats = stats["chain"]
    assert (chain_stats["inference_count"], chain_stats["execution_count"]) == (6, 4)
    inference = chain_stats["inference_stats"]
    for kind in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert inference[kind]["count"] == 4, kind
    for kind in ("compute_input", "compute_infer", "compute_output"):
        steps = sum(stats[name]["inference_stats"][kind]["ns"] for name in ("first", "second"))
        assert inference[kind]["ns"] == steps, kind
    batches = {batch["batch_size"]: batch for batch in chain_stats["batch_stats"]}
    assert sorted(batches) == [1, 3]
    assert batches[1]["compute_infer"]["count"] == 3 and batches[3]["compute_infer"]["count"] == 1
    assert (
        sum(b["compute_infer"]["ns"] for b in batches.values()) == inference["compute_infer"]["ns"]
    )
