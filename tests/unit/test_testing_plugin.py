"""triton_core.testing: the repository writer, the in-process and process servers, the helpers."""

from __future__ import annotations

import ast
import json
import re
import tomllib

import ml_dtypes
import numpy as np
import pytest
from google.protobuf import json_format, text_format

from tests.plugins import numpy_backend
from tests.support import ROOT
from triton_core import Status, TritonError
from triton_core.protos import model_config_pb2
from triton_core.testing import (
    ModelRepository,
    ServerProcess,
    grpc_inputs,
    http_inputs,
    inference_request,
    render_config,
)

pytest_plugins = ["pytester"]


def add_sub_config(max_batch_size: int = 8) -> dict:
    tensor = {"data_type": "TYPE_INT32", "dims": [4]}
    return {
        "backend": "numpy",
        "max_batch_size": max_batch_size,
        "parameters": {"kind": {"string_value": "add_sub"}},
        "input": [{"name": f"INPUT{i}", **tensor} for i in range(2)],
        "output": [{"name": f"OUTPUT{i}", **tensor} for i in range(2)],
    }


@pytest.fixture
def triton_plugins():
    return [("numpy", numpy_backend)]


@pytest.fixture
def model_repository(model_repository: ModelRepository) -> ModelRepository:
    model_repository.add_model("add_sub", add_sub_config(), versions={1: {"model.npy": b""}})
    return model_repository


def test_a_config_dict_is_written_as_the_protobuf_text_of_model_config():
    text = render_config(add_sub_config())
    parsed = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert (parsed.backend, parsed.max_batch_size) == ("numpy", 8)
    assert parsed.parameters["kind"].string_value == "add_sub"
    assert [(t.name, t.data_type, list(t.dims)) for t in parsed.output] == [
        (f"OUTPUT{i}", model_config_pb2.TYPE_INT32, [4]) for i in range(2)
    ]


def test_a_field_model_config_lacks_is_refused_by_name():
    with pytest.raises(json_format.ParseError, match="max_batch"):
        render_config({"backend": "numpy", "max_batch": 8})


def test_the_writer_lays_out_versions_files_and_raw_configs(tmp_path):
    repository = ModelRepository(tmp_path / "repo")
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\n")
    written = []
    model_dir = repository.add_model(
        "m",
        'backend: "numpy"\n',
        versions={1: {"model.npy": b"\x01"}, 3: {"sub/model.npy": lambda p: written.append(p)}},
        files={"labels.txt": labels, "notes.txt": "text"},
    )
    assert model_dir == tmp_path / "repo" / "m"
    assert (model_dir / "config.pbtxt").read_text() == 'backend: "numpy"\n'
    assert (model_dir / "1" / "model.npy").read_bytes() == b"\x01"
    assert written == [model_dir / "3" / "sub" / "model.npy"]
    assert (model_dir / "labels.txt").read_text() == "a\nb\n"
    repository.add_model("auto", versions={2: {"model.npy": b""}})
    assert not (tmp_path / "repo" / "auto" / "config.pbtxt").exists()
    with pytest.raises(ValueError, match=r"'m'.*version"):
        repository.add_version("m", -1, {})
    repository.remove_version("m", 1)
    assert sorted(p.name for p in model_dir.iterdir()) == ["3", "config.pbtxt", "labels.txt",
                                                           "notes.txt"]  # fmt: skip


def test_the_in_process_server_answers_plain_tests(triton_server):
    a = np.arange(8, dtype=np.int32).reshape(2, 4)
    response = triton_server.infer(inference_request("add_sub", {"INPUT0": a, "INPUT1": a}))
    np.testing.assert_array_equal(response.output("OUTPUT0").data, a + a)
    assert triton_server.server.model_ready("add_sub")


async def test_the_in_process_server_answers_async_tests_on_their_own_loop(triton_server):
    a = np.ones((1, 4), dtype=np.int32)
    request = inference_request("add_sub", {"INPUT0": a, "INPUT1": a}, outputs=["OUTPUT1"])
    response = await triton_server.ainfer(request)
    assert [tensor.name for tensor in response.outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(response.output("OUTPUT1").data, a - a)


def test_in_process_errors_arrive_as_triton_errors(triton_server):
    with pytest.raises(TritonError) as info:
        triton_server.infer(inference_request("nope", {"INPUT0": np.ones((1, 4), np.int32)}))
    assert info.value.status is Status.NOT_FOUND and "unknown model: 'nope'" in info.value.message


def test_the_factory_takes_server_options(triton_server_factory, model_repository):
    server = triton_server_factory(model_control_mode="explicit")
    assert not server.server.model_ready("add_sub")
    server.run(server.server.load_model("add_sub"))
    assert server.server.model_ready("add_sub")


def test_input_helpers_name_and_type_each_input():
    a = np.zeros((2, 3), np.float16)
    text = np.array([[b"x"]], dtype=object)
    (http_a, http_text) = http_inputs({"A": a, "T": text})
    assert (http_a.name(), http_a.datatype(), http_a.shape()) == ("A", "FP16", [2, 3])
    assert http_text.datatype() == "BYTES"
    (grpc_b, grpc_c) = grpc_inputs(
        {"B": np.zeros(2, ml_dtypes.bfloat16), "C": ("UINT8", np.zeros((1, 1), np.uint8))}
    )
    assert (grpc_b.datatype(), grpc_b.shape()) == ("BF16", [2])
    assert (grpc_c.datatype(), grpc_c.shape()) == ("UINT8", [1, 1])
    request = inference_request("m", {"A": a, "B": ("BF16", np.zeros(2, np.uint16))})
    assert [(t.datatype, t.shape) for t in request.inputs.values()] == [
        ("FP16", (2, 3)),
        ("BF16", (2,)),
    ]
    with pytest.raises(ValueError, match="input 'C'"):
        http_inputs({"C": np.zeros(2, np.complex64)})


def test_a_serve_process_answers_the_stock_clients(
    triton_process, triton_http_client, triton_grpc_client
):
    a = np.arange(4, dtype=np.int32).reshape(1, 4)
    result = triton_http_client.infer("add_sub", http_inputs({"INPUT0": a, "INPUT1": a}))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
    result = triton_grpc_client.infer("add_sub", grpc_inputs({"INPUT0": a, "INPUT1": a}))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 0)
    ports = json.loads(triton_process.ports_path.read_text())
    assert ports == triton_process.ports
    assert len(set(ports.values())) == 3 and 0 not in ports.values()
    # the log names the ports the system chose, not the 0 that was asked for
    log = triton_process.log()
    assert f"Started HTTPService at 127.0.0.1:{ports['http']}" in log
    assert f"Started GRPCInferenceService at 127.0.0.1:{ports['grpc']}" in log
    assert f"Started Metrics Service at 127.0.0.1:{ports['metrics']}" in log


def test_processes_side_by_side_get_their_own_ports(triton_process_factory):
    first = triton_process_factory("--grpc-transport", "grpcio")
    second = triton_process_factory()
    assert not set(first.ports.values()) & set(second.ports.values())
    with second.grpc_client() as client:
        assert client.is_model_ready("add_sub")
    with first.grpc_client() as client:
        assert client.is_model_ready("add_sub")


def test_a_process_that_cannot_start_raises_with_its_log(model_repository, tmp_path):
    model_repository.add_model("broken", {"backend": "no_such_backend"})
    process = ServerProcess([model_repository], plugins=[numpy_backend], workdir=tmp_path / "p")
    with pytest.raises(RuntimeError, match="exited with 1 before listening") as info:
        process.wait_ready()
    assert re.search("no_such_backend", str(info.value))
    assert process.stop() == 1


def test_no_plugin_test_imports_the_core_tests():
    """Plugins are tested as a third party tests them: with triton_core.testing."""
    offenders = []
    for path in sorted((ROOT / "plugins").glob("*/tests/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                for name in names
                if name == "tests" or name.startswith("tests.")
            ]
    assert not offenders, offenders


def documented_files() -> dict[str, str]:
    """The guide's Python blocks that start with ``# <path>.py``, by that path."""
    guide = (ROOT / "docs" / "writing_plugins.md").read_text()
    blocks = re.findall(r"^```python\n# (\S+\.py)\n(.*?)^```", guide, re.MULTILINE | re.DOTALL)
    return dict(blocks)


#: a project without pytest-asyncio, and projects with it in each mode
ASYNCIO_SETTINGS = [
    ("-p", "no:asyncio"),
    ("-o", "asyncio_mode=strict"),
    ("-o", "asyncio_mode=auto"),
]


@pytest.mark.parametrize("asyncio_setting", ASYNCIO_SETTINGS, ids=lambda s: " ".join(s))
def test_the_guides_plugin_and_test_recipe_pass_as_pasted(pytester, asyncio_setting):
    files = documented_files()
    assert set(files) == {"triton_core_mybackend/plugin.py", "tests/test_doubler.py"}
    for path, source in files.items():
        (pytester.path / path).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / path).write_text(source)
    # -p: idempotent where the pytest11 entry point is installed, needed where it is not
    result = pytester.runpytest_subprocess("-p", "triton_core.testing", *asyncio_setting)
    result.assert_outcomes(passed=2)


def test_the_entry_point_names_the_plugin_as_its_module():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"triton_core.testing": "triton_core.testing"}
    assert "tritonclient[http,grpc]>=2.50" in project["optional-dependencies"]["testing"]


def test_a_process_that_exits_badly_fails_its_test_at_teardown(pytester):
    pytester.makepyfile(
        """
        def test_killed(triton_process_factory):
            process = triton_process_factory("--strict-readiness=false")
            process.process.kill()
            process.process.wait()
        """
    )
    result = pytester.runpytest_subprocess("-p", "triton_core.testing")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*exit code -9*"])


def test_an_in_process_start_that_fails_raises_the_load_error(
    model_repository, triton_server_factory
):
    model_repository.add_model("broken", {"backend": "no_such_backend"})
    with pytest.raises(TritonError, match="no_such_backend") as info:
        triton_server_factory()
    assert "failed to load all models" in info.value.message
    assert triton_server_factory(exit_on_error=False).server.model_ready("add_sub")
