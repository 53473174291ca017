"""LoRA adapters named as ``<model><separator><lora>``, listed and checked against the
model's ``multi_lora.json`` as Triton's OpenAI frontend does (Triton's ``tests/test_lora.py``
on vLLM). The model here answers with the ``lora_name`` the frontend passed it."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import openai
import pytest
from openai_fixtures import OpenAIServer, repository
from triton_core_openai.lora import MAX_FILE_BYTES, LoraCatalog, read_loras

SEPARATOR = "_lora_"
LORA_ECHO = Path(__file__).parent / "lora_models" / "lora_echo"
#: lora_echo's multi_lora.json lists doll and sheep
MODEL = "lora_echo"


def _lora_repository() -> Path:
    """lora_echo, and copies of it with Triton's other cases: ``lora_off`` (model.json without
    enable_lora, no multi_lora.json), ``no_model_json`` (nothing says what its LoRAs are),
    ``bad_list`` (a malformed multi_lora.json) and ``edited`` (rewritten by a test)."""
    names = ("lora_off", "no_model_json", "bad_list", "edited")
    root = repository((LORA_ECHO, MODEL), *((LORA_ECHO, name) for name in names))
    (root / "lora_off" / "1" / "model.json").write_text('{"model": "unsloth/gemma-2b"}')
    (root / "lora_off" / "1" / "multi_lora.json").unlink()
    (root / "no_model_json" / "1" / "model.json").unlink()
    (root / "bad_list" / "1" / "multi_lora.json").write_text('{"doll": ')
    (root / "edited" / "1" / "multi_lora.json").write_text('{"owl": "edited/1/owl"}')
    return root


def _server(tokenizer_model: str, root: Path, *flags: str) -> OpenAIServer:
    return OpenAIServer(
        [
            "--model-repository",
            str(root),
            "--tokenizer",
            tokenizer_model,
            "--backend",
            "vllm",
            *flags,
        ]
    )


@pytest.fixture(scope="module")
def lora_repository():
    return _lora_repository()


@pytest.fixture(scope="module")
def lora_server(tokenizer_model, lora_repository):
    with _server(tokenizer_model, lora_repository, "--lora-separator", SEPARATOR) as server:
        yield server


@pytest.fixture(scope="module")
def client(lora_server):
    return lora_server.get_client()


def _lora_passed(client: openai.OpenAI, model: str, chat: bool = False) -> str | None:
    """The lora_name the model was passed for a completion (or chat completion) of ``model``."""
    if chat:
        messages = [{"role": "user", "content": "What is machine learning?"}]
        answer = client.chat.completions.create(model=model, messages=messages)
        assert answer.model == model
        text = answer.choices[0].message.content
    else:
        completion = client.completions.create(model=model, prompt="What is machine learning?")
        assert completion.model == model
        text = completion.choices[0].text
    assert text is not None
    return json.loads(text)["lora_name"]


def _detail(error: pytest.ExceptionInfo[openai.APIStatusError]) -> tuple[int, str]:
    """The status and Triton's ``detail`` of an answer with an error."""
    return error.value.status_code, error.value.response.json()["detail"]


def test_models_are_listed_with_their_loras(client):
    assert [model.id for model in client.models.list()] == [
        "bad_list",
        "edited",
        f"edited{SEPARATOR}owl",
        MODEL,
        f"{MODEL}{SEPARATOR}doll",
        f"{MODEL}{SEPARATOR}sheep",
        "lora_off",
        "no_model_json",
    ]


def test_a_listed_lora_is_retrieved_and_an_unlisted_one_is_not_found(client):
    assert client.models.retrieve(f"{MODEL}{SEPARATOR}doll").id == f"{MODEL}{SEPARATOR}doll"
    with pytest.raises(openai.NotFoundError) as error:
        client.models.retrieve(f"{MODEL}{SEPARATOR}unknown")
    assert _detail(error) == (404, f"Unknown model: {MODEL}{SEPARATOR}unknown")


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
def test_a_listed_lora_is_passed_to_the_model(client, chat):
    assert _lora_passed(client, f"{MODEL}{SEPARATOR}doll", chat) == "doll"
    assert _lora_passed(client, f"{MODEL}{SEPARATOR}sheep", chat) == "sheep"
    assert _lora_passed(client, MODEL, chat) is None


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
@pytest.mark.parametrize(("model", "lora"), [(MODEL, "unknown"), ("lora_off", "sheep")])
def test_a_lora_the_model_does_not_list_is_refused(client, chat, model, lora):
    name = f"{model}{SEPARATOR}{lora}"
    with pytest.raises(openai.BadRequestError) as error:
        _lora_passed(client, name, chat)
    assert _detail(error) == (400, f"Unknown LoRA: {lora}; for model: {name}")


@pytest.mark.parametrize("model", ["no_model_json", "bad_list"])
def test_unknown_loras_are_accepted_and_the_base_model_answers(client, lora_server, model):
    assert _lora_passed(client, f"{model}{SEPARATOR}doll") is None
    if model == "bad_list":
        log = lora_server.process.log()
        assert "model 'bad_list' enables LoRA but its " in log
        assert "bad_list/1/multi_lora.json cannot be used (it is not JSON" in log


def test_an_edited_multi_lora_json_is_read_again(client, lora_repository):
    edited = lora_repository / "edited" / "1" / "multi_lora.json"
    edited.write_text('{"owl": "edited/1/owl", "lark": "edited/1/lark"}')
    listed = [model.id for model in client.models.list() if model.id.startswith("edited")]
    assert listed == ["edited", f"edited{SEPARATOR}owl", f"edited{SEPARATOR}lark"]
    assert _lora_passed(client, f"edited{SEPARATOR}lark") == "lark"


def test_without_a_separator_loras_are_neither_listed_nor_named(tokenizer_model, lora_repository):
    with _server(tokenizer_model, lora_repository) as server:
        client = server.get_client()
        assert f"{MODEL}{SEPARATOR}doll" not in [model.id for model in client.models.list()]
        name = f"{MODEL}{SEPARATOR}doll"
        with pytest.raises(openai.NotFoundError) as missing:
            client.models.retrieve(name)
        assert _detail(missing) == (404, f"Unknown model: {name}")
        with pytest.raises(openai.BadRequestError) as refused:
            _lora_passed(client, name)
        assert _detail(refused) == (400, f"Unknown model: {name}")


# -- reading the files (no server)


def _version(tmp_path: Path, model_json: object, multi_lora: str | None) -> Path:
    (tmp_path / "model.json").write_text(json.dumps(model_json))
    if multi_lora is not None:
        (tmp_path / "multi_lora.json").write_text(multi_lora)
    return tmp_path


@pytest.mark.parametrize(
    ("model_json", "multi_lora", "expected"),
    [
        ({"enable_lora": "True"}, '{"a": "x", "b": "y"}', ("a", "b")),
        ({"enable_lora": False}, '{"a": "x"}', ()),
        ({}, None, ()),
        ({"enable_lora": True}, None, None),
        ({"enable_lora": True}, '["a"]', None),
        (["enable_lora"], '{"a": "x"}', None),
    ],
)
def test_the_files_say_which_loras_a_model_has(tmp_path, model_json, multi_lora, expected):
    assert read_loras("m", _version(tmp_path, model_json, multi_lora)) == expected


def test_a_multi_lora_json_over_the_size_bound_is_not_read(tmp_path, caplog):
    oversized = '{"a": "' + "x" * MAX_FILE_BYTES + '"}'
    with caplog.at_level(logging.WARNING, logger="triton_core_openai"):
        assert read_loras("m", _version(tmp_path, {"enable_lora": True}, oversized)) is None
    assert f"it is larger than {MAX_FILE_BYTES} bytes" in caplog.text
    assert "model 'm' enables LoRA" in caplog.text


def test_the_catalog_reads_again_only_after_a_change(tmp_path):
    catalog = LoraCatalog()
    folder = _version(tmp_path, {"enable_lora": True}, '{"a": "x"}')
    assert catalog.adapters("m", folder) == ("a",)
    (folder / "multi_lora.json").write_text('{"b": "y"}')
    os.utime(folder / "multi_lora.json", ns=(1, 1))  # same size, other time: still seen
    assert catalog.adapters("m", folder) == ("b",)
    assert catalog.adapters("m", None) is None
