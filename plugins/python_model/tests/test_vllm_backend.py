"""Triton's vLLM backend (triton-inference-server/vllm_backend's ``model.py`` and ``utils/``),
unchanged, as a Python-based backend on a GPU: a tiny random-weight Llama built here (no
download), its config completed by the backend, tokens streamed over gRPC and the OpenAI
frontend's chat completions.

Needs a CUDA GPU, ``vllm`` installed, and the backend's folder: ``VLLM_BACKEND_DIR``, else
Triton's ``/opt/tritonserver/backends/vllm`` (``scripts/gpu-check.sh`` fetches a copy where it
can). Skipped with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import shutil
from pathlib import Path

import numpy as np
import pytest

from triton_core.tensors.devices import gpu_count
from triton_core.testing import ServerProcess

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

BACKEND_DIR = Path(os.environ.get("VLLM_BACKEND_DIR", "/opt/tritonserver/backends/vllm"))


def _missing() -> str | None:
    if gpu_count() == 0:
        return "no CUDA device"
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed"
    if not (BACKEND_DIR / "model.py").is_file():
        return f"no vLLM backend at {BACKEND_DIR} (set VLLM_BACKEND_DIR)"
    return None


def tiny_llama(folder: Path) -> Path:
    """A 2-layer Llama with random weights and a byte-level tokenizer trained on a few
    sentences, saved as a Hugging Face folder vLLM loads."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"])
    text = ["the quick brown fox jumps over the lazy dog", "hello world, how are you today"]
    tokenizer.train_from_iterator(text * 50, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    )
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("vllm")
    backends = root / "backends"
    shutil.copytree(BACKEND_DIR, backends / "vllm")  # unchanged: copied as it is
    weights = tiny_llama(root / "tiny_llama")
    model = root / "models" / "tiny"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "vllm"\ninstance_group [ { count: 1 kind: KIND_MODEL } ]\n'
    )
    engine_args = {"model": str(weights), "gpu_memory_utilization": 0.2, "enforce_eager": True}
    (model / "1" / "model.json").write_text(json.dumps(engine_args))
    server = ServerProcess(
        [root / "models"],
        "--backend-directory", str(backends),
        "--openai-port", "0", "--tokenizer", str(weights),
        env={"HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    try:
        server.wait_ready(timeout=300)
        yield server
    finally:
        server.stop()


def test_tokens_stream_over_grpc(served):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(served.grpc_url)
    config = client.get_model_config("tiny", as_json=True)["config"]
    assert config["model_transaction_policy"]["decoupled"]  # the backend completed it
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        text = grpcclient.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"the quick brown"], dtype=np.object_))
        stream = grpcclient.InferInput("stream", [1], "BOOL")
        stream.set_data_from_numpy(np.array([True]))
        sampling = grpcclient.InferInput("sampling_parameters", [1], "BYTES")
        settings = {"max_tokens": 8, "min_tokens": 8, "temperature": 0}
        sampling.set_data_from_numpy(np.array([json.dumps(settings).encode()], dtype=np.object_))
        inputs = [text, stream, sampling]
        client.async_stream_infer("tiny", inputs, enable_empty_final_response=True)
        pieces = []
        while True:
            result, error = results.get(timeout=120)
            assert error is None
            response = result.get_response()
            if response.outputs:
                pieces.append(result.as_numpy("text_output")[0])
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
    assert len(pieces) >= 2  # streamed, not in one piece


def test_chat_completions_through_the_openai_frontend(served):
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{served.port('openai')}/v1", api_key="x")
    chunks = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=8,
        stream=True,
    )
    deltas = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices]
    assert len([delta for delta in deltas if delta]) >= 2
