"""``--model-namespacing`` on a real server, as Triton's L0_model_namespacing: one model name in
two repositories, each ensemble calling the model of its own repository, a request by an
ambiguous name refused."""

from __future__ import annotations

import re
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.test_statistics import NUMPY_PLUGIN
from tests.support import ServerProcess, serve_until_done, write_numpy_model

ENSEMBLE = """
name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "A" data_type: TYPE_INT32 dims: [ 4 ] }}, {{ name: "B" data_type: TYPE_INT32 dims: [ 4 ] }} ]
output [ {{ name: "RESULT" data_type: TYPE_INT32 dims: [ 4 ] }} ]
ensemble_scheduling {{ step [ {{
  model_name: "composing_model" model_version: -1
  input_map {{ key: "INPUT0" value: "A" }} input_map {{ key: "INPUT1" value: "B" }}
  output_map {{ key: "OUTPUT0" value: "RESULT" }}
}} ] }}
"""  # noqa: E501


def _ensemble(repo: Path, name: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(ENSEMBLE.format(name=name))


@pytest.fixture(scope="module")
def repositories(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("namespacing")
    addsub, identity = root / "addsub_repo", root / "identity_repo"
    # the same name in both repositories, computing different things
    write_numpy_model(addsub, "composing_model", kind="add_sub")
    write_numpy_model(identity, "composing_model", kind="identity")
    _ensemble(addsub, "ensemble_addsub")
    _ensemble(identity, "ensemble_identity")
    _ensemble(addsub, "twin_ensemble")
    _ensemble(identity, "twin_ensemble")
    write_numpy_model(identity, "only_here", kind="add_sub")
    return addsub, identity


def _namespaced(repositories: tuple[Path, ...], *flags: str) -> ServerProcess:
    return ServerProcess(list(repositories), "--model-namespacing=true", *flags, env=NUMPY_PLUGIN)


@pytest.fixture(scope="module")
def server(repositories: tuple[Path, Path]) -> Iterator[ServerProcess]:
    yield from serve_until_done(_namespaced(repositories))


def _infer(client: httpclient.InferenceServerClient, model: str, names=("A", "B")) -> np.ndarray:
    a = np.arange(4, dtype=np.int32).reshape(1, 4)
    inputs = []
    for name in names:
        tensor = httpclient.InferInput(name, [1, 4], "INT32")
        tensor.set_data_from_numpy(a * 10 if name in ("B", "INPUT1") else a)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    return result.as_numpy(result.get_response()["outputs"][0]["name"])


def test_each_ensemble_calls_the_model_of_its_own_repository(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_server_ready()
        a = np.arange(4, dtype=np.int32).reshape(1, 4)
        np.testing.assert_array_equal(_infer(client, "ensemble_addsub"), a + a * 10)
        np.testing.assert_array_equal(_infer(client, "ensemble_identity"), a)
        # a name in one repository only is served as ever
        only = _infer(client, "only_here", names=("INPUT0", "INPUT1"))
        np.testing.assert_array_equal(only, a + a * 10)
    finally:
        client.close()


@pytest.mark.parametrize("model", ["composing_model", "twin_ensemble"])
def test_a_request_by_an_ambiguous_name_is_refused(server: ServerProcess, model: str) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        with pytest.raises(InferenceServerException) as info:
            _infer(client, model)
        assert info.value.status() == "400"
        assert info.value.message() == (
            f"There are 2 identifiers of model '{model}' in global map, model namespace must "
            "be provided to resolve ambiguity."
        )
        index = [entry["name"] for entry in client.get_model_repository_index()]
        assert index.count(model) == 2
    finally:
        client.close()


def test_metrics_carry_the_namespace(server: ServerProcess, repositories: tuple) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        _infer(client, "ensemble_addsub")
    finally:
        client.close()
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    counts = {
        match["namespace"]: int(match["count"])
        for match in re.finditer(
            r'^nv_inference_count\{model="composing_model",namespace="(?P<namespace>[^"]+)",'
            r'version="1"\} (?P<count>\d+)',
            text,
            re.MULTILINE,
        )
    }
    addsub, identity = (str(repo) for repo in repositories)
    assert set(counts) == {addsub, identity}
    assert counts[addsub] >= 1


def test_without_namespacing_a_name_in_two_repositories_fails_its_load(
    repositories: tuple[Path, Path],
) -> None:
    with ServerProcess(list(repositories), "--exit-on-error=false", env=NUMPY_PLUGIN) as process:
        process.wait_ready(path="/v2/health/live")
        client = httpclient.InferenceServerClient(process.http_url)
        try:
            assert not client.is_model_ready("composing_model")
            assert client.is_model_ready("only_here")
        finally:
            client.close()
    assert "'composing_model' appears in more than one model repository" in process.log()


def test_explicit_mode_loads_and_unloads_by_name_in_every_namespace(
    repositories: tuple[Path, Path],
) -> None:
    flags = ("--model-control-mode", "explicit", "--load-model", "only_here")
    with _namespaced(repositories, *flags) as process:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        try:

            def ready_composing() -> list[str]:
                return [
                    entry.get("state", "")
                    for entry in client.get_model_repository_index()
                    if entry["name"] == "composing_model"
                ]

            assert ready_composing() == ["", ""]
            client.load_model("ensemble_addsub")
            # the ensemble loaded the composing model of its own repository only
            assert sorted(ready_composing()) == ["", "READY"]
            a = np.arange(4, dtype=np.int32).reshape(1, 4)
            np.testing.assert_array_equal(_infer(client, "ensemble_addsub"), a + a * 10)
            client.load_model("composing_model")  # the name: the model in each repository
            assert ready_composing() == ["READY", "READY"]
            client.load_model("ensemble_identity")
            np.testing.assert_array_equal(_infer(client, "ensemble_identity"), a)
            client.unload_model("composing_model")
            assert "READY" not in ready_composing()
        finally:
            client.close()


def _wait_for_answer(
    client: httpclient.InferenceServerClient,
    model: str,
    expected: np.ndarray,
    names: tuple[str, str] = ("A", "B"),
) -> None:
    """Poll mode applies changes on its own schedule: ask until the answer is ``expected``."""
    deadline = time.monotonic() + 60
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = _infer(client, model, names)
            if np.array_equal(last, expected):
                return
        except InferenceServerException as error:
            last = error
        time.sleep(0.2)
    raise AssertionError(f"{model} did not answer {expected} within 60 s; last: {last}")


def _two_repositories(root: Path) -> tuple[Path, Path]:
    """composing_model in two repositories, each with an ensemble calling it."""
    addsub, identity = root / "addsub_repo", root / "identity_repo"
    write_numpy_model(addsub, "composing_model", kind="add_sub")
    write_numpy_model(identity, "composing_model", kind="identity")
    _ensemble(addsub, "ensemble_addsub")
    _ensemble(identity, "ensemble_identity")
    return addsub, identity


def test_poll_mode_resolves_ensemble_steps_again_when_a_name_moves(tmp_path: Path) -> None:
    """Triton's test_dynamic_resolution: take one repository's composing model away, then
    bring it back."""
    addsub, identity = _two_repositories(tmp_path)
    a = np.arange(4, dtype=np.int32).reshape(1, 4)
    flags = ("--model-control-mode", "poll", "--repository-poll-secs", "0.5")
    with _namespaced((addsub, identity), *flags) as process:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        try:
            np.testing.assert_array_equal(_infer(client, "ensemble_addsub"), a + a * 10)
            shutil.move(addsub / "composing_model", tmp_path / "moved_away")
            # both ensembles now call the only composing model left
            _wait_for_answer(client, "ensemble_addsub", a)
            _wait_for_answer(client, "composing_model", a, names=("INPUT0", "INPUT1"))
            np.testing.assert_array_equal(_infer(client, "ensemble_identity"), a)
            shutil.move(tmp_path / "moved_away", addsub / "composing_model")
            _wait_for_answer(client, "ensemble_addsub", a + a * 10)
            with pytest.raises(InferenceServerException, match="resolve ambiguity"):
                _infer(client, "composing_model", names=("INPUT0", "INPUT1"))
            np.testing.assert_array_equal(_infer(client, "ensemble_identity"), a)
        finally:
            client.close()


def test_explicit_loads_resolve_ensemble_steps_again_when_a_name_moves(tmp_path: Path) -> None:
    """Triton's test_dynamic_resolution in explicit mode: each load looks at the repositories
    again, as Triton polls them for a load request."""
    addsub, identity = _two_repositories(tmp_path)
    a = np.arange(4, dtype=np.int32).reshape(1, 4)
    with _namespaced((addsub, identity), "--model-control-mode", "explicit") as process:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        try:
            shutil.move(addsub / "composing_model", tmp_path / "moved_away")
            for model in ("ensemble_addsub", "ensemble_identity"):
                client.load_model(model)
            # both ensembles call the only composing model left
            np.testing.assert_array_equal(_infer(client, "ensemble_addsub"), a)
            np.testing.assert_array_equal(_infer(client, "ensemble_identity"), a)
            shutil.move(tmp_path / "moved_away", addsub / "composing_model")
            client.load_model("ensemble_addsub")
            np.testing.assert_array_equal(_infer(client, "ensemble_addsub"), a + a * 10)
            np.testing.assert_array_equal(_infer(client, "ensemble_identity"), a)
            with pytest.raises(InferenceServerException, match="resolve ambiguity"):
                _infer(client, "composing_model", names=("INPUT0", "INPUT1"))
        finally:
            client.close()
