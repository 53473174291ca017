"""Build the example's model folder: ``model.py`` and its ``config.pbtxt`` with a Hugging Face
causal language model, and the tokenizer for the OpenAI frontend's ``--tokenizer``.

    python examples/llm_transformers/build_model.py OUTPUT [--max-batch-size 16] [--from FOLDER]
        [--name tiny_llm] [--vocab-size 384]

writes::

    OUTPUT/models/tiny_llm/config.pbtxt
    OUTPUT/models/tiny_llm/1/model.py
    OUTPUT/models/tiny_llm/1/hf/          the transformers model and its tokenizer
    OUTPUT/tokenizer/                     the same tokenizer, for --tokenizer

Without ``--from`` the model is a tiny one made here: a byte-level BPE tokenizer trained on a
few sentences (saved with a chat template) and a Llama of 2 layers, hidden size 64, with
random weights (seeded, so every build is the same). Nothing is downloaded.

The default vocabulary (384) is two thirds single bytes: a third of the tokens a random model
picks are parts of a character, which carry no text until the character is whole. A larger
``--vocab-size`` trains the tokenizer on Python's reference manual (``pydoc_data``, in every
Python) as well; at 4096 about 3% of the tokens are parts of a character, close to what real
tokenizers have (Llama 2: 256 byte tokens of 32,000). ``--from``
copies a model folder that ``save_pretrained`` wrote (weights, config, tokenizer) instead.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL_NAME = "tiny_llm"

#: ChatML turns; a message's content is a string or a list of text parts (as the OpenAI
#: frontend passes them)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] %}{% for part in message['content'] %}{{ part['text'] }}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "What is machine learning?",
    "Machine learning finds patterns in data and uses them to predict new outcomes.",
    "The weather in Dallas, Texas is hot in the summer.",
    "Hello world! A tiny language model writes a few tokens at a time.",
    "Triton serves models over HTTP and gRPC; clients stream the answers token by token.",
    "Continuous batching lets requests join and leave the running batch at every step.",
]


#: the vocabulary :data:`CORPUS` alone can fill
SMALL_VOCABULARY = 384


def training_text(vocab_size: int) -> list[str]:
    """:data:`CORPUS`, and for a vocabulary larger than it fills, Python's reference manual."""
    if vocab_size <= SMALL_VOCABULARY:
        return CORPUS
    from pydoc_data.topics import topics

    return CORPUS + [topics[key] for key in sorted(topics)]


def build_tokenizer(folder: Path, vocab_size: int = SMALL_VOCABULARY) -> Path:
    """A byte-level BPE tokenizer (any text round-trips) trained on :func:`training_text`,
    saved to ``folder`` as transformers saves one, with :data:`CHAT_TEMPLATE`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(vocab_size), trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(folder)
    return folder


def build_model(folder: Path, *, layers: int = 2, hidden: int = 64, seed: int = 0) -> Path:
    """A Llama with random weights for the tokenizer in ``folder``, saved beside it."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        initializer_range=0.3,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    return folder


def config_text(max_batch_size: int = 16, parameters: dict[str, str] | None = None) -> str:
    """``config.pbtxt`` with ``max_batch_size`` (1: one request at a time) and ``parameters``
    (``hf_model``, ``torch_threads``, ``step_log``) added."""
    lines = (HERE / "config.pbtxt").read_text().splitlines()
    lines = [
        f"max_batch_size: {max_batch_size}" if line.startswith("max_batch_size:") else line
        for line in lines
    ]
    for key, value in (parameters or {}).items():
        lines = [line for line in lines if not line.startswith(f'parameters {{ key: "{key}"')]
        lines.append(f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}')
    return "\n".join(lines) + "\n"


def build(
    output: Path,
    *,
    max_batch_size: int = 16,
    source: Path | None = None,
    parameters: dict[str, str] | None = None,
    name: str = MODEL_NAME,
    vocab_size: int = SMALL_VOCABULARY,
) -> tuple[Path, Path]:
    """The model repository and the tokenizer folder, written under ``output``."""
    repository = output / "models"
    version = repository / name / "1"
    weights = version / "hf"
    weights.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "model.py", version / "model.py")
    (repository / name / "config.pbtxt").write_text(config_text(max_batch_size, parameters))
    if source is None:
        build_tokenizer(weights, vocab_size)
        build_model(weights)
    else:
        shutil.copytree(source, weights, dirs_exist_ok=True)
    tokenizer = output / "tokenizer"
    tokenizer.mkdir(parents=True, exist_ok=True)
    for path in weights.iterdir():
        if path.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(path, tokenizer / path.name)
    return repository, tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--name", default=MODEL_NAME, help=f"the model's name ({MODEL_NAME})")
    parser.add_argument("--max-batch-size", type=int, default=16, help="1: one request at a time")
    parser.add_argument(
        "--from", dest="source", type=Path, help="a save_pretrained folder to serve instead"
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=SMALL_VOCABULARY,
        help=f"the made tokenizer's vocabulary ({SMALL_VOCABULARY})",
    )
    args = parser.parse_args()
    repository, tokenizer = build(
        args.output,
        max_batch_size=args.max_batch_size,
        source=args.source,
        name=args.name,
        vocab_size=args.vocab_size,
    )
    print(
        f"triton-core serve --model-repository {repository} --openai-port 9000 "
        f"--tokenizer {tokenizer} --backend vllm"
    )


if __name__ == "__main__":
    main()
