"""Soak: load and unload a model hundreds of times while serving; resident memory must stay flat.

In-process, explicit control mode: each cycle loads the tiny ONNX MLP (and, every other
cycle, reloads it with another config), runs a few requests, and unloads it. Resident memory
is sampled as it goes; the report compares the end with the level after warm-up. Results go
to docs/benchmarks.md.

    python bench/model_churn.py [--cycles 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, format_table, replace_section
from triton_core import InferenceRequest, Server, ServerOptions, Tensor

CONFIG = {
    "backend": "onnxruntime",
    "max_batch_size": 4,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [64]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [10]}],
    "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
}


def resident_mib() -> float:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


async def churn(repo: Path, cycles: int, samples: list[tuple[int, float]]) -> None:
    options = ServerOptions([repo], model_control_mode="explicit")
    data = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    async with Server(options) as server:
        for cycle in range(cycles):
            await server.load_model("mlp")
            if cycle % 2:  # a reload with a different config, beside the serving version
                config = dict(CONFIG, max_batch_size=2 + cycle % 3)
                await server.load_model("mlp", config=json.dumps(config))
            for _ in range(5):
                request = InferenceRequest("mlp", {"INPUT0": Tensor("INPUT0", "FP32", data)})
                await server.infer(request)
            await server.unload_model("mlp")
            if cycle % 10 == 9:
                gc.collect()
                samples.append((cycle + 1, resident_mib()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    from triton_core_onnx.model_builders import mlp

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        mlp(repo / "mlp" / "1" / "model.onnx")
        samples: list[tuple[int, float]] = []
        started = time.perf_counter()
        asyncio.run(churn(repo, args.cycles, samples))
        elapsed = time.perf_counter() - started
    warm_index = min(len(samples) - 1, max(0, len(samples) // 5))
    warm_cycle, warm = samples[warm_index]
    last_cycle, last = samples[-1]
    growth = (last - warm) / warm * 100
    shown = samples[:: max(1, len(samples) // 10)]
    if shown[-1] != samples[-1]:
        shown.append(samples[-1])
    table = format_table(["after cycle", "resident MiB"], [[str(c), f"{m:.1f}"] for c, m in shown])
    text = (
        "## Model load/unload soak\n\n"
        f"{args.cycles} cycles of load, reload (every other cycle, with another config), "
        "5 requests and unload of the tiny ONNX MLP, in-process, explicit control mode "
        f"({elapsed:.0f} s, {elapsed / args.cycles * 1000:.0f} ms per cycle). Resident "
        f"memory after warm-up (cycle {warm_cycle}): {warm:.1f} MiB; after cycle "
        f"{last_cycle}: {last:.1f} MiB ({growth:+.1f}%).\n\n{table}"
    )
    replace_section(args.output, "model-churn", text)
    print(text)


if __name__ == "__main__":
    main()
