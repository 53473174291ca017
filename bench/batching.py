"""Dynamic batching on a compute-heavier ONNX MLP: the server next to raw onnxruntime.

In one run: raw ``onnxruntime`` ``session.run`` at several batch sizes (its best is the bar),
the server with dynamic batching at concurrency 64 (gRPC and HTTP binary through
bench/loadgen.py, and in-process ``Server.infer``), and a latency/throughput table over
``max_queue_delay_microseconds``. Results go to the ``batching`` section of
docs/benchmarks.md.

    python bench/batching.py [--seconds 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Imported up front: the in-process measurements must run the code that was there at the start.
from bench.common import (
    ROOT,
    ServerUnderTest,
    format_table,
    replace_section,
    run_loadgen,
    triton_core_command,
)
from bench.loadgen import summarize
from triton_core import InferenceRequest, Server, ServerOptions, Tensor

#: FP32 MLPs FEATURES -> HIDDEN -> FEATURES: one batch-32 run takes about 1 ms on one core
#: of the reference machine, then a heavier one where compute outweighs per-request work
MODELS = ("1024x2048", "2048x8192")
MAX_BATCH = 64
RAW_BATCH_SIZES = (1, 8, 16, 32, 64, 128)
DELAYS_US = (0, 100, 500, 1000, 2000, 5000)
HEADLINE_CONCURRENCY = 64
TABLE_CONCURRENCY = (8, 64)
#: the lighter frontend, so that the table shows the batcher more than the protocol
TABLE_PROTOCOL = "http-binary"

#: what the tables show, independent of one run's numbers
READING = """How to read it: at c=64 a closed loop with one instance settles into batches of about
32 (half the clients wait while the other half's batch runs), so "same batch" is the batcher's
own cost and "at its best" adds the batch sizes that 64 clients cannot reach. In-process, the
batcher and the backend keep most of raw onnxruntime's throughput at that batch size when the
model does enough work per row (the 2048->8192 MLP). Over the network, every request also pays
its frontend's Python work on the same two cores as onnxruntime's threads and the load
generator. With the ~1 ms model that work, not batching, bounds throughput: the batches are
about as full as 64 clients allow, and what is left is each request's frontend and client
CPU on the cores onnxruntime also needs. The delay table shows the other trade-off: with
`preferred_batch_size` left at max_batch_size (64) and only 8 clients, a queue delay only adds
latency, because the batch it waits for can never fill."""

CONFIG = """
backend: "onnxruntime"
max_batch_size: {max_batch}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
dynamic_batching {{ max_queue_delay_microseconds: {delay} }}
"""


def build_repository(
    root: Path, features: int, hidden: int, instances: int, delays: tuple[int, ...]
) -> Path:
    """One model per queue delay (``mlp_d<us>``), each with its own copy of the ONNX file."""
    from triton_core_onnx.model_builders import wide_mlp

    for delay in delays:
        model = root / f"mlp_d{delay}"
        wide_mlp(model / "1" / "model.onnx", features=features, hidden=hidden, layers=2)
        (model / "config.pbtxt").write_text(
            CONFIG.format(max_batch=MAX_BATCH, features=features, instances=instances, delay=delay)
        )
    return root


def raw_session(model_path: Path):  # type: ignore[no-untyped-def]
    """An ORT session with every core for its own threads: raw onnxruntime at its best."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def raw_onnxruntime(session, features: int, seconds: float) -> dict[int, dict]:  # type: ignore[no-untyped-def]
    """``session.run`` in a loop at each batch size, ``seconds`` each."""
    rng = np.random.default_rng(0)
    results = {}
    perf = time.perf_counter
    for batch in RAW_BATCH_SIZES:
        feed = {"INPUT0": rng.random((batch, features), dtype=np.float32)}
        for _ in range(5):
            session.run(None, feed)
        latencies: list[float] = []
        started = perf()
        deadline = started + seconds
        while (start := perf()) < deadline and len(latencies) < 1_000_000:
            session.run(None, feed)
            latencies.append(perf() - start)
        summary = summarize(latencies, perf() - started)
        summary["rows_per_s"] = summary["throughput"] * batch
        results[batch] = summary
    return results


async def in_process(repo: Path, model: str, features: int, concurrency: int, seconds: float):  # type: ignore[no-untyped-def]
    """Closed loop on ``Server.infer``: the batcher and backend without any network."""
    data = np.random.default_rng(0).random((1, features), dtype=np.float32)
    async with Server(ServerOptions([repo])) as server:
        latencies: list[float] = []

        async def client(deadline: float, record: bool) -> None:
            perf = time.perf_counter
            for _ in range(1_000_000):
                start = perf()
                if start >= deadline:
                    return
                request = InferenceRequest(model, {"INPUT0": Tensor("INPUT0", "FP32", data)})
                await server.infer(request)
                if record:
                    latencies.append(perf() - start)

        warm_until = time.perf_counter() + 1
        await asyncio.gather(*(client(warm_until, False) for _ in range(concurrency)))
        before = _counts(server.model(model).statistics)
        started = time.perf_counter()
        await asyncio.gather(*(client(started + seconds, True) for _ in range(concurrency)))
        result = summarize(latencies, time.perf_counter() - started)
        result["mean_batch"] = _mean_batch(before, _counts(server.model(model).statistics))
        return result


def _counts(statistics) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    return statistics.inference_count, statistics.execution_count


def _mean_batch(before: tuple[int, int], after: tuple[int, int]) -> float:
    executions = after[1] - before[1]
    return (after[0] - before[0]) / executions if executions else 0.0


def server_counts(server: ServerUnderTest, model: str) -> tuple[int, int]:
    url = f"http://{server.http_url}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        entry = json.loads(reply.read())["model_stats"][0]
    return entry["inference_count"], entry["execution_count"]


def measure(server: ServerUnderTest, protocol: str, model: str, features: int,
            concurrency: int, seconds: float) -> dict:  # fmt: skip
    url = server.grpc_url if protocol == "grpc" else server.http_url
    before = server_counts(server, model)
    result = run_loadgen(protocol, url, model, [f"INPUT0:float32:1x{features}"], concurrency,
                         seconds)  # fmt: skip
    result["mean_batch"] = _mean_batch(before, server_counts(server, model))
    return result


def cell(result: dict) -> str:
    return (
        f"{result['throughput']:,.0f}/s, p50 {result['p50_us'] / 1000:,.1f} ms, "
        f"p99 {result['p99_us'] / 1000:,.1f} ms, batch {result['mean_batch']:.1f}"
    )


def run_model(features: int, hidden: int, instances: int, seconds: float, rounds: int,
              delays: tuple[int, ...]) -> tuple[list[list[str]], list[list[str]], str]:  # fmt: skip
    """Raw onnxruntime, the server at c=64 and (when ``delays``) the delay table for one MLP.

    Raw and served windows alternate for ``rounds`` rounds and the best window of each is
    kept, so that a neighbour's burst on a shared machine does not decide the ratio.
    """
    label = f"MLP {features}->{hidden}->{features}"
    served = [("grpc", "server, grpc"), ("http-binary", "server, http-binary"),
              ("in-process", "in-process `Server.infer`")]  # fmt: skip
    best: dict[str, dict] = {}
    raw_best: dict[int, dict] = {}
    per_round: dict[str, list[str]] = {name: [] for name, _ in served}
    table: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repository(Path(tmp) / "served", features, hidden, instances, delays or (0,))
        alone = build_repository(Path(tmp) / "in_process", features, hidden, instances, (0,))
        session = raw_session(repo / "mlp_d0" / "1" / "model.onnx")
        server = ServerUnderTest(triton_core_command(repo), "batching")
        try:
            server.wait_ready()
            for round_ in range(rounds):
                raw = raw_onnxruntime(session, features, seconds / 2)
                for batch, result in raw.items():
                    if (
                        batch not in raw_best
                        or result["rows_per_s"] > raw_best[batch]["rows_per_s"]
                    ):
                        raw_best[batch] = result
                raw_round = max(r["rows_per_s"] for r in raw.values())
                for name, _ in served:
                    if name == "in-process":
                        result = asyncio.run(
                            in_process(alone, "mlp_d0", features, HEADLINE_CONCURRENCY, seconds)
                        )
                    else:
                        result = measure(server, name, "mlp_d0", features, HEADLINE_CONCURRENCY,
                                         seconds)  # fmt: skip
                    per_round[name].append(f"{result['throughput'] / raw_round:.2f}")
                    if name not in best or result["throughput"] > best[name]["throughput"]:
                        best[name] = result
                ratios = ", ".join(f"{n} {per_round[n][-1]}" for n, _ in served)
                print(f"{label} round {round_ + 1}: raw {raw_round:,.0f} rows/s; {ratios}")
            for delay in delays:
                row = [f"{delay}"]
                for concurrency in TABLE_CONCURRENCY:
                    model = f"mlp_d{delay}"
                    result = measure(server, TABLE_PROTOCOL, model, features, concurrency, seconds)
                    row.append(cell(result))
                table.append(row)
                print(row, flush=True)
        finally:
            server.stop()
    best_batch = max(raw_best, key=lambda b: raw_best[b]["rows_per_s"])
    top = raw_best[best_batch]["rows_per_s"]
    rows = []
    for name, what in served:
        result = best[name]
        # the batcher's own efficiency: raw onnxruntime at the batch size the server formed
        same = min(raw_best, key=lambda b: abs(b - result["mean_batch"]))
        against_same = result["throughput"] / raw_best[same]["rows_per_s"]
        rows.append([label, f"{what}, c={HEADLINE_CONCURRENCY}", cell(result),
                     f"**{result['throughput'] / top:.2f}** ({', '.join(per_round[name])})",
                     f"{against_same:.2f} (batch {same})"])  # fmt: skip
    for batch, r in raw_best.items():
        rows.append([label, f"raw onnxruntime, batch {batch}",
                     f"{r['rows_per_s']:,.0f} rows/s, {r['mean_us'] / 1000:,.2f} ms per run",
                     f"{r['rows_per_s'] / top:.2f}", ""])  # fmt: skip
    note = (
        f"{label}: one batch-32 `session.run` takes {raw_best[32]['mean_us'] / 1000:.2f} ms; "
        f"raw onnxruntime is best at batch {best_batch}"
    )
    return rows, table, note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--quick", action="store_true", help="1.5 s cells, fewer delays")
    parser.add_argument("--rounds", type=int, default=3, help="raw/served alternations")
    parser.add_argument(
        "--model", action="append", metavar="FEATURESxHIDDEN",
        help=f"MLP sizes (repeatable); the first gets the delay table (default {MODELS})",
    )  # fmt: skip
    parser.add_argument("--instances", type=int, default=1, help="ORT instances per model")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    seconds = 1.5 if args.quick else args.seconds
    delays = (0, 1000) if args.quick else DELAYS_US
    rounds = 1 if args.quick else args.rounds
    models = [tuple(int(v) for v in m.split("x")) for m in (args.model or MODELS)]

    rows: list[list[str]] = []
    notes: list[str] = []
    table: list[list[str]] = []
    for index, (features, hidden) in enumerate(models):
        model_rows, model_table, note = run_model(
            features, hidden, args.instances, seconds, rounds, delays if index == 0 else ()
        )
        rows += model_rows
        notes.append(note)
        table = table or model_table
    first = f"MLP {models[0][0]}->{models[0][1]}->{models[0][0]}"
    note = (
        "FP32 two-layer MLPs (`wide_mlp`: features -> hidden -> features), batch-1 requests. "
        f"Server: {args.instances} ORT instance(s) sharing the cores' ORT threads (on 2 cores "
        "a second instance only halves each session's threads and keeps batches smaller), "
        f"max_batch_size {MAX_BATCH}, dynamic batching with no queue delay; clients are "
        "bench/loadgen.py in another process on the same host, or in-process. Raw onnxruntime: "
        "one session using every core, `session.run` in a loop. Raw and served windows "
        f"alternate for {rounds} round(s); each row shows its best window. ratio = best served "
        "throughput / best raw onnxruntime throughput at its best batch size (per round in "
        "brackets); same batch: against raw onnxruntime at the measured batch size nearest the "
        "server's mean batch, which is what the batcher itself costs. batch = mean executed "
        "batch size. "
        f"{seconds:g} s per served cell after 1 s warm-up; {os.cpu_count()} CPUs, "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}.\n\n"
        + "\n".join(f"- {n}" for n in notes)
    )
    content = (
        f"## Dynamic batching\n\n{note}\n\n"
        + format_table(
            ["model", "what", "throughput", "ratio to raw at its best", "ratio to raw, same batch"],
            rows,
        )
        + f"\n\nQueue delay against latency and throughput ({first}, {TABLE_PROTOCOL}, batch-1 "
        "requests):"
        "\n\n"
        + format_table(
            ["max_queue_delay_microseconds", *[f"c={c}" for c in TABLE_CONCURRENCY]], table
        )
    )
    content += "\n\n" + READING
    replace_section(args.output, "batching", content)
    print(content)


if __name__ == "__main__":
    main()
