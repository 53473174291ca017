"""Beyond Triton's tests: the limits and switches this frontend adds, on a real server."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai_fixtures import MOCK_VLLM, OpenAIServer


@pytest.fixture(scope="module")
def guarded(model_repository, tokenizer_model):
    args = ["--model-repository", model_repository, "--tokenizer", tokenizer_model]
    args += ["--backend", "vllm", "--openai-api-key", "sekret", "--http-max-input-size", "4096"]
    args += ["--http-max-json-depth", "8"]
    with OpenAIServer(args) as server:
        yield server


def _chat(server, body, key="sekret"):
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(server.url_for("v1", "chat", "completions"), json=body, headers=headers)


def test_the_api_key_is_required_on_v1_routes(guarded):
    with pytest.raises(openai.AuthenticationError):
        guarded.get_client().models.list()  # the client sends "EMPTY"
    client = openai.OpenAI(base_url=guarded.url_for("v1"), api_key="sekret")
    assert [model.id for model in client.models.list()] == [MOCK_VLLM]
    assert httpx.get(guarded.url_for("health", "ready")).status_code == 200


def test_a_body_over_the_input_size_is_refused_with_an_openai_error(guarded):
    body = {"model": MOCK_VLLM, "messages": [{"role": "user", "content": "x" * 5000}]}
    answer = _chat(guarded, body)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "content_too_large"


def test_counts_and_nesting_are_bounded(guarded):
    messages = [{"role": "user", "content": "hi"}]
    answer = _chat(guarded, {"model": MOCK_VLLM, "messages": messages, "stop": ["a"] * 17})
    assert answer.status_code == 422
    assert "at most 16 items" in answer.json()["error"]["message"]
    deep: dict = {}
    for _ in range(10):
        deep = {"x": deep}
    answer = _chat(guarded, {"model": MOCK_VLLM, "messages": messages, "logit_bias": deep})
    assert answer.status_code == 400
    assert "--http-max-json-depth" in answer.json()["error"]["message"]


def test_malformed_json_and_unknown_fields(guarded):
    headers = {"Authorization": "Bearer sekret", "Content-Type": "application/json"}
    url = guarded.url_for("v1", "completions")
    answer = httpx.post(url, content=b"{not json", headers=headers)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["type"] == "json_invalid"
    answer = httpx.post(url, json={"model": MOCK_VLLM, "prompt": "x", "bogus": 1}, headers=headers)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["msg"] == "Extra inputs are not permitted"


def test_off_unless_its_port_is_given(model_repository, tmp_path):
    from triton_core.testing import ServerProcess

    with ServerProcess([model_repository], workdir=tmp_path) as process:
        process.wait_ready()
        assert "openai" not in process.ports
        assert process.stop() == 0
