"""``--model-config-name`` and ``--model-load-retry-count`` on a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent

import pytest
import tritonclient.http as httpclient

from tests.support import ServerProcess, refused_start_log, serve_until_done

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")
pytest.importorskip("triton_core_python")

#: a Python model whose initialize fails until it has been tried ``attempts_needed`` times
FLAKY_MODEL = """
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], "attempts")
        with open(path, "a") as handle:
            handle.write("x")
        needed = int(os.path.basename(args["model_repository"]).rsplit("_", 1)[1])
        if os.path.getsize(path) < needed:
            raise RuntimeError("not this time")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "IN")])
            for r in requests
        ]
"""
FLAKY_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


def _add_flaky(root: Path, attempts_needed: int) -> Path:
    model = root / f"flaky_{attempts_needed}"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(dedent(FLAKY_MODEL))
    (model / "config.pbtxt").write_text(FLAKY_CONFIG)
    return model


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    root = tmp_path_factory.mktemp("repository_flags")
    for name in ("custom", "plain"):
        onnx_builders.add_sub(root / name / "1" / "model.onnx", "FP32", 4)
        (root / name / "config.pbtxt").write_text(
            'backend: "onnxruntime"\nmax_batch_size: 8\nparameters { key: "from" '
            'value { string_value: "config.pbtxt" } }\n'
        )
    (root / "custom" / "configs").mkdir()
    (root / "custom" / "configs" / "h100.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 2\nparameters { key: "from" '
        'value { string_value: "configs/h100.pbtxt" } }\n'
    )
    (root / "plain" / "configs").mkdir()
    (root / "plain" / "configs" / "a100.pbtxt").write_text("this is not read\n")
    _add_flaky(root, 2)
    _add_flaky(root, 4)
    process = ServerProcess(
        [root],
        "--model-config-name", "h100",
        "--model-load-retry-count", "2",
        "--exit-on-error", "false",
        "--strict-readiness", "false",
    )  # fmt: skip
    for running in serve_until_done(process):
        yield running, root


def test_model_config_name_selects_configs_name_pbtxt_where_it_exists(server: tuple) -> None:
    process, _ = server
    client = httpclient.InferenceServerClient(process.http_url)
    try:
        custom = client.get_model_config("custom")
        assert custom["max_batch_size"] == 2
        assert custom["parameters"]["from"]["string_value"] == "configs/h100.pbtxt"
        plain = client.get_model_config("plain")
        assert plain["max_batch_size"] == 8
        assert plain["parameters"]["from"]["string_value"] == "config.pbtxt"
    finally:
        client.close()


def test_a_failed_load_is_retried_model_load_retry_count_times(server: tuple) -> None:
    process, root = server
    client = httpclient.InferenceServerClient(process.http_url)
    try:
        # needs a second attempt: loads with two retries allowed
        assert client.is_model_ready("flaky_2")
        assert (root / "flaky_2" / "attempts").read_text() == "xx"
        # needs a fourth: fails after the first try and two retries
        assert not client.is_model_ready("flaky_4")
        assert (root / "flaky_4" / "attempts").read_text() == "xxx"
    finally:
        client.close()
    assert "failed to load 'flaky_4' version 1 (attempt 2 of 3), trying again" in process.log()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model-config-name", "../x"], "argument --model-config-name: must be a file name"),
        (["--model-load-retry-count", "-1"], "argument --model-load-retry-count: must be at"),
    ],
)
def test_what_cannot_be_honoured_is_refused(tmp_path: Path, flags: list[str], message: str) -> None:
    assert message in refused_start_log([tmp_path], *flags)
