"""Continuous batching of an LLM on the CPU: examples/llm_transformers behind the OpenAI
frontend, measured with NVIDIA's LLM benchmark client aiperf.

The example's tiny model (a Llama of 2 layers, hidden size 64, random weights; built in a
temporary folder, nothing downloaded; its tokenizer with ``--vocab-size`` tokens, 4096 by
default, trained on Python's reference manual) is served by ``triton-core serve --openai-port ...
--tokenizer ... --backend vllm`` in three configurations, one server after the other:

- ``batched``: ``max_batch_size: 16``, iterative sequences: requests join and leave the
  running batch at every step (the configuration under test)
- ``batched, no KV cache``: the same, each step running the whole sequences again
- ``one at a time``: ``max_batch_size: 1``: one request decodes, the others wait

Each is driven by aiperf (streamed chat completions, synthetic prompts of 32 tokens, every
answer exactly ``--output-tokens`` tokens: ``max_tokens`` with ``ignore_eos``; token counts
from the server's usage) at concurrency 1, 4 and 16, a bounded number of requests per cell
after a warm-up, ``--trials`` times. The table gets output tokens/s, time to first token
(p50, p99) and the inter-token latency (p50), each the median over the trials, and the load
average of the machine before the cell.

aiperf's TTFT is the time to the first chunk with text. A random model picks tokens
uniformly, so the share of tokens that are parts of a character (no text until the
character is whole) sets how many steps a first text takes: two thirds of the tests' 384
tokens are single bytes (a third of the picks are parts of a character), against about 3%
of 4096 here and 1% in real tokenizers.

The bar, on a 2-CPU machine: ``batched`` at c=16 serves at least 4x the output tokens/s of
c=1, with a TTFT p99 within 2x of c=1's.

aiperf is not a dependency of the project: install it in a virtual environment of its own
and name its command (or put it on PATH)::

    python3 -m venv /tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip install aiperf
    python bench/llm_continuous_batching.py --aiperf /tmp/aiperf-venv/bin/aiperf

``--client genai-perf`` measures with genai-perf instead, whose load comes from perf_analyzer
(C++, from shared/tools/setup-peer-tools.sh): it takes less of the two CPUs than aiperf's
Python workers, so the server has more of them. Its table goes to a section of its own::

    python3 -m venv /tmp/genai-venv && /tmp/genai-venv/bin/pip install genai-perf
    python bench/llm_continuous_batching.py --client genai-perf \
        --genai-perf /tmp/genai-venv/bin/genai-perf

aiperf reads the local tokenizer folder (an absolute path, which it loads as a local
folder); it runs without ``HF_HUB_OFFLINE``, under which aiperf 0.13 looks a folder up in
the hub's cache instead and fails. Each cell is a closed loop of ``--concurrency`` requests given
a request rate of 1000/s: a new request goes out at the next millisecond after one ends.
Without a rate (aiperf's concurrency-burst mode) aiperf 0.13's timing manager polls without
pause while all its slots are busy, which takes most of one of the machine's two CPUs from
the server; with a rate it sleeps between ticks. Results go to docs/benchmarks.md; run it on a quiet
machine (check ``uptime``): aiperf's own processes share the CPUs with the server.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    ROOT,
    ServerUnderTest,
    find_tool,
    format_table,
    free_port,
    host_description,
    replace_section,
    triton_core_command,
)

EXAMPLE = ROOT / "examples" / "llm_transformers"
#: (label, max_batch_size, model parameters)
CONFIGS = {
    "batched": ("batched (max_batch_size 16)", 16, {}),
    "no-cache": ("batched, no KV cache", 16, {"kv_cache": "false"}),
    "single": ("one at a time (max_batch_size 1)", 1, {}),
}
PROMPT_TOKENS = 32


def load_builder():
    spec = importlib.util.spec_from_file_location("build_model", EXAMPLE / "build_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def requests_for(concurrency: int, base: int) -> int:
    return max(base, 16 * concurrency)


def run_aiperf(
    aiperf: str, url: str, model: str, tokenizer: Path, concurrency: int, requests: int,
    output_tokens: int, folder: Path,
) -> dict:  # fmt: skip
    """One aiperf cell; its summary (profile_export_aiperf.json)."""
    command = [
        aiperf, "profile", "-m", model, "--url", url, "--endpoint-type", "chat", "--streaming",
        "--tokenizer", str(tokenizer), "--concurrency", str(concurrency),
        "--request-rate", "1000", "--arrival-pattern", "constant",
        "--request-count", str(requests), "--warmup-request-count", str(max(8, 2 * concurrency)),
        "--prompt-input-tokens-mean", str(PROMPT_TOKENS), "--prompt-input-tokens-stddev", "0",
        "--prompt-output-tokens-mean", str(output_tokens), "--prompt-output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--use-server-token-count", "--random-seed", "0",
        "--output-artifact-dir", str(folder), "--no-server-metrics", "--no-gpu-telemetry",
        "--ui-type", "none",
    ]  # fmt: skip
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    summary = folder / "profile_export_aiperf.json"
    if done.returncode != 0 or not summary.exists():
        raise RuntimeError(f"aiperf failed ({' '.join(command)}):\n{done.stdout[-3000:]}")
    return json.loads(summary.read_text())


def run_genai_perf(
    genai_perf: str, url: str, model: str, tokenizer: Path, concurrency: int, requests: int,
    output_tokens: int, folder: Path,
) -> dict:  # fmt: skip
    """One genai-perf cell; its summary (profile_export_genai_perf.json). genai-perf drives
    perf_analyzer (C++) in its OpenAI mode, found on PATH or among the peer tools."""
    perf_analyzer = find_tool("perf_analyzer")
    if perf_analyzer is None:
        raise RuntimeError("genai-perf needs perf_analyzer: run shared/tools/setup-peer-tools.sh")
    command = [
        genai_perf, "profile", "-m", model, "--url", url.removeprefix("http://"),
        "--endpoint-type", "chat", "--streaming", "--tokenizer", str(tokenizer),
        "--concurrency", str(concurrency), "--request-count", str(requests),
        "--warmup-request-count", str(max(8, 2 * concurrency)),
        "--synthetic-input-tokens-mean", str(PROMPT_TOKENS), "--synthetic-input-tokens-stddev", "0",
        "--output-tokens-mean", str(output_tokens), "--output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--random-seed", "0",
        "--artifact-dir", str(folder),
    ]  # fmt: skip
    env = dict(os.environ)
    env["PATH"] = f"{Path(perf_analyzer).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    found = list(folder.glob("*/profile_export_genai_perf.json"))
    if done.returncode != 0 or not found:
        raise RuntimeError(
            f"genai-perf failed ({' '.join(command)}):\n{(done.stdout + done.stderr)[-3000:]}"
        )
    return json.loads(found[0].read_text())


def run_client(
    args: argparse.Namespace, url: str, model: str, tokenizer: Path, concurrency: int,
    folder: Path,
) -> dict:  # fmt: skip
    """One cell with the chosen client: tokens/s, TTFT p50 and p99, ITL p50, requests,
    output tokens per answer.

    aiperf counts tokens from the server's usage. genai-perf counts them by tokenizing the
    answers' text again, which a random model's tokens do not survive (36 tokens for 32),
    so its tokens/s here is its request rate times the tokens each answer has
    (``ignore_eos``: exactly ``--output-tokens``), and its ITL is over its own counts."""
    requests = requests_for(concurrency, args.requests)
    if args.client == "aiperf":
        summary = run_aiperf(
            args.aiperf, url, model, tokenizer, concurrency, requests, args.output_tokens, folder
        )
        tokens_per_s = summary["output_token_throughput"]["avg"]
        osl = summary["output_sequence_length"]["avg"]
    else:
        summary = run_genai_perf(
            args.genai_perf, url, model, tokenizer, concurrency, requests, args.output_tokens,
            folder,
        )  # fmt: skip
        tokens_per_s = summary["request_throughput"]["avg"] * args.output_tokens
        osl = float(args.output_tokens)
    # both clients' summaries name these figures alike
    return {
        "tokens_per_s": tokens_per_s,
        "ttft_p50": summary["time_to_first_token"]["p50"],
        "ttft_p99": summary["time_to_first_token"]["p99"],
        "itl_p50": summary["inter_token_latency"]["p50"],
        "requests": summary["request_count"]["avg"],
        "osl": osl,
    }


def measure(args: argparse.Namespace, key: str, work: Path) -> dict[int, dict]:
    label, max_batch_size, parameters = CONFIGS[key]
    builder = load_builder()
    repository, tokenizer = builder.build(
        work / key,
        max_batch_size=max_batch_size,
        parameters={"torch_threads": str(args.torch_threads), **parameters},
        vocab_size=args.vocab_size,
    )
    openai_port = free_port()
    command = triton_core_command(
        repository, "--openai-port", str(openai_port), "--openai-address", "127.0.0.1",
        "--tokenizer", str(tokenizer), "--backend", "vllm",
    )  # fmt: skip
    server = ServerUnderTest(command, key, env={"HF_HUB_OFFLINE": "1"})
    results: dict[int, dict] = {}
    try:
        server.wait_ready()
        trials: dict[int, list[dict]] = {concurrency: [] for concurrency in args.concurrency}
        # the cells of a trial one after the other, so that the ratios to c=1 are taken
        # within one trial (the shared machine's speed drifts over minutes)
        for trial in range(args.trials):
            for concurrency in args.concurrency:
                load = os.getloadavg()[0]
                started = time.monotonic()
                cell = run_client(
                    args, f"http://127.0.0.1:{openai_port}", builder.MODEL_NAME, tokenizer,
                    concurrency, work / f"{key}-c{concurrency}-{trial}",
                )  # fmt: skip
                cell["load"] = load
                first = args.concurrency[0]
                base = cell if concurrency == first else trials[first][trial]
                cell["speedup"] = cell["tokens_per_s"] / base["tokens_per_s"]
                cell["ttft_p99_ratio"] = cell["ttft_p99"] / base["ttft_p99"]
                trials[concurrency].append(cell)
                print(
                    f"{label} c={concurrency}: {cell['tokens_per_s']:.0f} tokens/s "
                    f"({cell['speedup']:.2f}x), TTFT p50 {cell['ttft_p50']:.1f} ms p99 "
                    f"{cell['ttft_p99']:.1f} ms, ITL p50 {cell['itl_p50']:.2f} ms, "
                    f"{time.monotonic() - started:.0f} s, load {load:.2f}",
                    flush=True,
                )
        # each figure the median of the trials: a stall of the shared machine in one trial
        # does not make the row
        for concurrency, cells in trials.items():
            results[concurrency] = {
                name: statistics.median(cell[name] for cell in cells) for name in cells[0]
            }
    finally:
        server.stop()
    return results


def section(args: argparse.Namespace, results: dict[str, dict[int, dict]]) -> str:
    rows = []
    for key, cells in results.items():
        for concurrency, cell in cells.items():
            ratio = cell["speedup"]
            rows.append(
                [
                    CONFIGS[key][0],
                    str(concurrency),
                    f"{cell['tokens_per_s']:,.0f} ({ratio:.2f}x)",
                    f"{cell['ttft_p50']:.1f} / {cell['ttft_p99']:.1f}",
                    f"{cell['itl_p50']:.2f}",
                    f"{cell['requests']:.0f} x {cell['osl']:.0f}",
                    f"{cell['load']:.2f}",
                ]
            )
    table = format_table(
        [
            "server",
            "c",
            "output tokens/s (vs c=1)",
            "TTFT p50 / p99 (ms)",
            "ITL p50 (ms)",
            "requests x tokens",
            "load before",
        ],
        rows,
    )
    verdict = ""
    batched = results.get("batched", {})
    if 1 in batched and 16 in batched:
        speedup, ttft = batched[16]["speedup"], batched[16]["ttft_p99_ratio"]
        verdict = (
            f"\n\nBatched at c=16 against c=1: {speedup:.2f}x the output tokens/s (bar: 4x), "
            f"TTFT p99 {ttft:.2f}x (bar: within 2x)."
        )
        single = results.get("single", {})
        if 16 in single:
            verdict += (
                " Against one request at a time at c=16: "
                f"{batched[16]['tokens_per_s'] / single[16]['tokens_per_s']:.2f}x the output "
                f"tokens/s, TTFT p99 {batched[16]['ttft_p99']:.0f} ms against "
                f"{single[16]['ttft_p99']:.0f} ms."
            )
    if args.client == "aiperf":
        heading, client = "## Continuous batching of an LLM", "aiperf"
        counts = "server token counts"
    else:
        heading = "### The same, measured with genai-perf"
        client = "genai-perf (its load from perf_analyzer, in C++)"
        counts = "tokens/s from its request rate, its ITL over its own token counts"
    return (
        f"{heading}\n\n"
        f"examples/llm_transformers (a Llama of 2 layers, hidden 64, random weights, float32, "
        f"{args.torch_threads} torch thread, a tokenizer of {args.vocab_size} tokens) behind "
        f"the OpenAI frontend, driven by {client} "
        f"(streamed chat completions, {PROMPT_TOKENS}-token synthetic prompts before the chat "
        f"template, every answer {args.output_tokens} tokens with ignore_eos, {counts}); "
        f"client and server on one host ({host_description()}). "
        f"`bench/llm_continuous_batching.py --client {args.client}`: {args.trials} trials, "
        "each running the cells of a server one after the other; each figure is the median "
        "over the trials, the ratios to c=1 taken within each trial. The load average before "
        "the cells says how busy the shared machine was.\n\n" + table + verdict
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--aiperf",
        default=os.environ.get("AIPERF") or shutil.which("aiperf"),
        help="the aiperf command (default: $AIPERF, else aiperf on PATH)",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument(
        "--requests", type=int, default=96, help="requests per cell, at least 16 x concurrency"
    )
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument(
        "--vocab-size", type=int, default=4096, help="of the model's tokenizer (4096)"
    )
    parser.add_argument(
        "--trials", type=int, default=5, help="runs of each cell; the table has their medians"
    )
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument(
        "--client",
        choices=["aiperf", "genai-perf"],
        default="aiperf",
        help="the LLM benchmark client: aiperf (Python), or genai-perf (drives perf_analyzer)",
    )
    parser.add_argument(
        "--genai-perf",
        default=os.environ.get("GENAI_PERF") or shutil.which("genai-perf"),
        help="the genai-perf command (default: $GENAI_PERF, else genai-perf on PATH)",
    )
    args = parser.parse_args()
    if args.client == "aiperf" and not args.aiperf:
        parser.error("aiperf not found: install it in a venv of its own and pass --aiperf")
    if args.client == "genai-perf" and not args.genai_perf:
        parser.error("genai-perf not found: install it in a venv of its own and pass --genai-perf")
    with tempfile.TemporaryDirectory(prefix="llm-bench-") as work:
        results = {key: measure(args, key, Path(work)) for key in args.configs}
    text = section(args, results)
    print(text)
    if not args.no_write:
        marker = "llm-continuous-batching"
        replace_section(
            args.output, marker if args.client == "aiperf" else f"{marker}-genai-perf", text
        )


if __name__ == "__main__":
    main()
