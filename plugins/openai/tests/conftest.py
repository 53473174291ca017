"""Triton's ``python/openai/tests/conftest.py`` on triton-core: the same fixtures, with a
local tokenizer and mock models instead of the hub's Llama 3.1 on vLLM or TensorRT-LLM
(see ``openai_fixtures.py``)."""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest

# the ported tests import their helpers as Triton's import tests.utils
sys.path.insert(0, str(Path(__file__).parent))

from openai_fixtures import (
    MOCK_VLLM,
    OpenAIServer,
    TestClient,
    build_tokenizer,
    setup_fastapi_app,
    setup_server,
    vllm_repository,
)


def pytest_configure(config):
    config.addinivalue_line("markers", "openai: mark test to run with OpenAI server (subprocess)")


#: Triton's tests that cannot run here, by name (and parameters), with the reason
SKIPPED = {
    "test_chat_completions_custom_tokenizer": (
        "downloads Llama 3.1's tokenizer with `hf download` and compares it with the hub's "
        "copy: nothing may be downloaded here (every other test uses a locally built one)"
    ),
    "test_embeddings_defaults": (
        "compares with the embedding of the real all-MiniLM-L6-v2 on vLLM (a GPU model whose "
        "weights are not here); the mock's embedding differs"
    ),
    "test_embeddings_parameters": (
        "compares with the embedding of the real all-MiniLM-L6-v2 on vLLM (a GPU model whose "
        "weights are not here); the mock's embedding differs"
    ),
    "TestContentLengthValidation": (
        "a unit test of Triton's FastAPI middleware; here a malformed Content-Length is "
        "refused by the HTTP protocol's parser before any app (400, 'Invalid HTTP request "
        "received.'), which tests/unit cover"
    ),
}

#: Triton's tests of messages that triton-core's core words differently (expected to fail)
DIFFERENT = {
    "test_non_explicit_mode_load_model_error": (
        "core start-up message: '--load-model needs --model-control-mode=explicit'"
    ),
    "test_explicit_mode_load_all_models_and_specific_model_error": (
        "core start-up message: '--load-model=* must be the only --load-model'"
    ),
    "test_explicit_mode_load_nonexistent_model_error": (
        "core start-up message: 'Poll failed for model directory ...: model not found in any "
        "model repository'"
    ),
    "test_explicit_mode_load_invalid_model_name_error": (
        "core start-up messages for path-like model names differ from tritonserver's"
    ),
}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if item.path.parent != here:
            continue
        # Triton's async tests share class-scoped clients: one event loop for them all
        if inspect.iscoroutinefunction(getattr(item, "function", None)):
            item.add_marker(pytest.mark.asyncio(loop_scope="session"), append=False)
        name = item.name.split("[")[0]
        reason = SKIPPED.get(name) or (item.cls and SKIPPED.get(item.cls.__name__))
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
        if name in DIFFERENT:
            item.add_marker(pytest.mark.xfail(reason=DIFFERENT[name], strict=True))


@pytest.fixture(scope="session")
def tool_call_parser():
    return os.environ.get("TEST_TOOL_CALL_PARSER", "llama3")


@pytest.fixture(scope="session")
def backend():
    # the request convention of the mock model (Triton infers vllm or tensorrtllm from
    # what is installed)
    return "vllm"


@pytest.fixture(scope="session")
def model():
    return MOCK_VLLM


@pytest.fixture(scope="session")
def model_repository():
    return str(vllm_repository())


@pytest.fixture(scope="session")
def tokenizer_model(tmp_path_factory):
    return str(build_tokenizer(tmp_path_factory.mktemp("tokenizer")))


@pytest.fixture(scope="session")
def prompt():
    return "What is machine learning?"


@pytest.fixture(scope="session")
def messages(prompt):
    return [{"role": "user", "content": prompt}]


@pytest.fixture(scope="session")
def input(prompt):
    return prompt


@pytest.fixture(scope="module")
def server(model_repository: str, tokenizer_model: str, backend: str, tool_call_parser: str):
    args = [
        "--model-repository",
        model_repository,
        "--tokenizer",
        tokenizer_model,
        "--backend",
        backend,
        "--tool-call-parser",
        tool_call_parser,
    ]
    args += ["--enable-kserve-frontends"]
    with OpenAIServer(args) as openai_server:
        yield openai_server


@pytest.fixture(scope="class")
def fastapi_client_class_scope(model_repository: str, tokenizer_model: str, backend: str):
    server = setup_server(model_repository=model_repository)
    app = setup_fastapi_app(tokenizer=tokenizer_model, server=server, backend=backend)
    with TestClient(app) as test_client:
        yield test_client
    server.stop()
