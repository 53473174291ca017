"""The example's tiny model, built once per session (nothing is downloaded), and one
``triton-core serve`` with it behind the KServe and OpenAI frontends."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# the tests' helpers, and the OpenAI plugin's test fixtures (OpenAIServer)
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2] / "plugins" / "openai" / "tests"))

from llm_fixtures import StepLog, build_model  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def offline():
    """The model is built here and loaded from files: nothing may ask the hub (the server
    processes inherit it)."""
    saved = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update(dict.fromkeys(saved, "1"))
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """(repository, tokenizer folder, step log) of the tiny model, max_batch_size 16."""
    folder = tmp_path_factory.mktemp("llm")
    step_log = folder / "steps.jsonl"
    repository, tokenizer = build_model.build(folder, parameters={"step_log": str(step_log)})
    return repository, tokenizer, StepLog(step_log)


@pytest.fixture(scope="session")
def llm_server(tiny_model):
    """The tiny model behind ``triton-core serve`` with the OpenAI frontend on
    (``--backend vllm``: the model speaks the vLLM backend's convention)."""
    from openai_fixtures import OpenAIServer

    repository, tokenizer, _ = tiny_model
    args = ["--model-repository", str(repository), "--tokenizer", str(tokenizer)]
    with OpenAIServer([*args, "--backend", "vllm"]) as server:
        yield server
