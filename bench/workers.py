"""``serve --workers 2`` against one worker, on a compute-bound Python model, in one run.

Each request costs a few milliseconds of single-threaded numpy work in ``model.py`` (BLAS held
to one thread, so one worker cannot use a second core through numpy itself). Three servers,
measured one after the other at the same concurrency (c=16 by default), HTTP (binary) and
gRPC, with perf_analyzer (or bench/loadgen.py when perf_analyzer is not installed):

- ``--workers 1``, one model instance: one process
- ``--workers 2``, one instance in each worker: the configuration under test
- ``--workers 1``, two instances: the same processes for the model without a second server,
  the comparison that says whether workers or instances are the better tool

The bar: ``--workers 2`` serves at least 1.6x the throughput of ``--workers 1`` at c=16 on a
2-core host. The ratio is taken between rows of this one run.

    python bench/workers.py [--seconds 5] [--concurrency 16] [--work-ms 4]

Run it only on a quiet machine (check ``uptime``); results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    ROOT,
    ServerUnderTest,
    find_tool,
    format_table,
    host_description,
    replace_section,
    run_loadgen,
    run_perf_analyzer,
    triton_core_command,
)
from bench.frontend_bar import grpc_body, run_h2load, successes

#: the loads measured: perf_analyzer over HTTP and gRPC, and h2load's gRPC with one
#: connection per concurrent request (the kernel hands each connection to one worker)
LOADS = ("http", "grpc", "grpc-conns")
LOAD_TITLES = {
    "http": "HTTP",
    "grpc": "gRPC",
    "grpc-conns": "gRPC (h2load)",
}

MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

# {rounds} rounds of a 128x128 matrix product: a few ms of one core per request
WEIGHTS = np.random.default_rng(0).random((128, 128))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            state = np.resize(x.astype(np.float64), (128, 128))
            for _ in range({rounds}):
                state = np.tanh(state @ WEIGHTS / 128.0)
            out = state[0, : x.shape[-1]].astype(np.float32).reshape(x.shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""

CONFIG = """
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, 16 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {instances} }} ]
"""

#: one BLAS thread per process: a worker's compute is one core, as the bar assumes
SINGLE_THREADED = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}

SETUPS = (
    ("--workers 1, 1 instance", 1, 1),
    ("--workers 2, 1 instance each", 2, 1),
    ("--workers 1, 2 instances", 1, 2),
)


def calibrate_rounds(work_ms: float) -> int:
    """Rounds of the model's loop that take about ``work_ms`` here (one thread)."""
    for key, value in SINGLE_THREADED.items():
        os.environ.setdefault(key, value)
    import numpy as np

    weights = np.random.default_rng(0).random((128, 128))
    state = np.ones((128, 128))
    rounds = 200
    started = time.perf_counter()
    for _ in range(rounds):
        state = np.tanh(state @ weights / 128.0)
    per_round_ms = (time.perf_counter() - started) * 1000 / rounds
    return max(1, round(work_ms / per_round_ms))


def write_repository(root: Path, rounds: int, instances: int) -> Path:
    model = root / f"compute_{instances}" / "compute"
    (model / "1").mkdir(parents=True, exist_ok=True)  # setups may share a repository
    (model / "1" / "model.py").write_text(MODEL_PY.format(rounds=rounds))
    (model / "config.pbtxt").write_text(CONFIG.format(instances=instances))
    return model.parent


def measure_h2load_grpc(
    server: ServerUnderTest, body: Path, concurrency: int, seconds: float
) -> float:
    """gRPC with one connection per concurrent request (h2load); 0 when not measured."""
    h2load = find_tool("h2load")
    if h2load is None:
        return 0.0
    url = f"http://{server.grpc_url}/inference.GRPCInferenceService/ModelInfer"
    headers = ["content-type: application/grpc", "te: trailers"]
    before = successes(server, "compute")
    rate = run_h2load(h2load, url, body, headers, concurrency, seconds, False)
    # h2load counts HTTP 200s; the statistics confirm every call really succeeded
    if rate is None or successes(server, "compute") - before < rate * seconds:
        return 0.0
    return rate


def measure(server: ServerUnderTest, protocol: str, concurrency: int, seconds: float) -> float:
    perf_analyzer = find_tool("perf_analyzer")
    url = server.http_url if protocol == "http" else server.grpc_url
    if perf_analyzer is not None:
        result = run_perf_analyzer(perf_analyzer, protocol, url, "compute", concurrency, seconds)
        if result is not None:
            return float(result["throughput"])
    loadgen_protocol = "http-binary" if protocol == "http" else "grpc"
    result = run_loadgen(
        loadgen_protocol, url, "compute", ["INPUT0:float32:1x16"], concurrency, seconds
    )
    return float(result["throughput"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--work-ms", type=float, default=4.0, help="model time per request")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    rounds = calibrate_rounds(args.work_ms)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as folder:
        body = Path(folder) / "infer.grpc"
        body.write_bytes(grpc_body("compute", np.ones((1, 16), np.float32)))
        for label, workers, instances in SETUPS:
            repo = write_repository(Path(folder), rounds, instances)
            command = triton_core_command(repo, "--workers", str(workers))
            server = ServerUnderTest(command, f"workers{workers}-x{instances}", SINGLE_THREADED)
            try:
                server.wait_ready()
                results[label] = {
                    protocol: measure(server, protocol, args.concurrency, args.seconds)
                    for protocol in ("http", "grpc")
                }
                results[label]["grpc-conns"] = measure_h2load_grpc(
                    server, body, args.concurrency, args.seconds
                )
            finally:
                server.stop()
            print(label, results[label], flush=True)
    write_results(args, rounds, results)


def _cell(rate: float, base: float) -> str:
    if not rate or not base:
        return "not measured"
    return f"{rate:,.0f}/s ({rate / base:.2f}x)"


def write_results(
    args: argparse.Namespace, rounds: int, results: dict[str, dict[str, float]]
) -> None:
    one = results[SETUPS[0][0]]
    rows = [
        [
            label,
            *(_cell(values[p], one[p]) for p in LOADS),
        ]
        for label, values in results.items()
    ]
    titles = [f"{LOAD_TITLES[p]} c={args.concurrency}" for p in LOADS]
    table = format_table(["server", *titles], rows)
    two = results[SETUPS[1][0]]
    judged = [p for p in LOADS if one[p]]
    worst = min(two[p] / one[p] for p in judged)
    verdict = "meets" if worst >= 1.6 else "does not meet"
    note = (
        f"A Python model doing about {args.work_ms:g} ms of one-threaded numpy work per request "
        f"({rounds} rounds of a 128x128 product), batch 1, c={args.concurrency}, "
        f"{args.seconds:g} s per cell, the load generator on the same host "
        f"({host_description()}). Ratios against `--workers 1` in this run."
    )
    reading = (
        f"`--workers 2` against one worker: {worst:.2f}x at worst over the three loads, "
        f"which {verdict} the bar of 1.6x. "
        "The last row is the other way to use a "
        "second core for a Python model: a second instance (a second stub process) under one "
        "server. Workers pay for a whole server each (its own model copies, see "
        "docs/scale-out.md); they win "
        "where one server's event loop is the limit (many small requests, ONNX/PyTorch models "
        "whose per-request Python work in the server dominates)."
    )
    section = f"## Workers (`serve --workers`)\n\n{note}\n\n{table}\n\n{reading}"
    replace_section(args.output, "workers", section)
    print(table)


if __name__ == "__main__":
    main()
