"""Python models: the tiny ONNX MLP wrapped in a Triton ``model.py``, side by side.

In one run: the same ``model.py`` (onnxruntime, one thread) served by triton-core's python
backend (event-driven instances under SCHED_BATCH, the default; ``stub-policy=normal``;
``instance-thread=yes``, the core's worker-thread path), the same ONNX file through
triton-core's ONNX plugin, and a real Triton 2.51 serving that ``model.py`` when
``tritonserver`` is installed
(shared/tools/setup-peer-tools.sh); perf_analyzer over HTTP (binary) and gRPC. Then
in-process: ``Server.infer`` on the python model, and the model's ``execute`` called
directly (the floor: onnxruntime plus pb_utils objects, no server, no process boundary).
Last, a CPU-bound pure-Python model with one and two instances (in-process, c=4): two
processes should give about twice the throughput of one on a 2-core host.

    python bench/python_model.py [--seconds 3] [--concurrency 1,4] [--quick]

Run it only on a quiet machine (check ``uptime``); results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Imported up front: the in-process measurements must run the code that was there at the start.
from bench.common import (
    PEER_TOOLS,
    ROOT,
    ServerUnderTest,
    find_tool,
    format_table,
    replace_section,
    run_perf_analyzer,
    triton_core_command,
)
from triton_core import InferenceRequest, Server, ServerOptions, Tensor

MODEL_PY = """
import os
import sys

try:
    import onnxruntime as ort
except ImportError:  # Triton's Python stub: onnxruntime lives in the peer-tools site
    sys.path.insert(0, {site!r})
    import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            y = self.session.run(None, {{"INPUT0": x}})[0]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
"""
PYTHON_CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
ONNX_CONFIG = """
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
"""
#: ~1 ms of pure-Python work per request: only processes make two instances faster
BUSY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = 0
            for i in range(20000):
                total += i * i
            out = np.array([[total % 1000]], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
"""
BUSY_CONFIG = """
backend: "python"
max_batch_size: 1
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
"""


def build_repositories(root: Path) -> tuple[Path, Path]:
    from triton_core_onnx.model_builders import mlp

    model_py = MODEL_PY.format(site=str(PEER_TOOLS / "stub-site"))
    ours = root / "ours"
    mlp(ours / "mlp_py" / "1" / "model.onnx")
    (ours / "mlp_py" / "1" / "model.py").write_text(model_py)
    (ours / "mlp_py" / "config.pbtxt").write_text(PYTHON_CONFIG)
    mlp(ours / "mlp_onnx" / "1" / "model.onnx")
    (ours / "mlp_onnx" / "config.pbtxt").write_text(ONNX_CONFIG)
    for count in (1, 2):
        busy = ours / f"busy_x{count}"
        (busy / "1").mkdir(parents=True)
        (busy / "1" / "model.py").write_text(BUSY_PY)
        (busy / "config.pbtxt").write_text(BUSY_CONFIG.format(count=count))
    theirs = root / "triton"
    mlp(theirs / "mlp_py" / "1" / "model.onnx")
    (theirs / "mlp_py" / "1" / "model.py").write_text(model_py)
    (theirs / "mlp_py" / "config.pbtxt").write_text(PYTHON_CONFIG)
    return ours, theirs


async def in_process(
    repo: Path, model: str, inputs: dict[str, Tensor], concurrency: int, seconds: float
) -> dict:
    from bench.loadgen import summarize

    async with Server(ServerOptions([repo])) as server:
        latencies: list[float] = []

        async def client(deadline: float, record: bool) -> None:
            perf = time.perf_counter
            while (start := perf()) < deadline:
                await server.infer(InferenceRequest(model, dict(inputs)))
                if record:
                    latencies.append(perf() - start)

        warm_until = time.perf_counter() + 1
        await asyncio.gather(*(client(warm_until, False) for _ in range(concurrency)))
        started = time.perf_counter()
        await asyncio.gather(*(client(started + seconds, True) for _ in range(concurrency)))
        return summarize(latencies, time.perf_counter() - started)


def execute_in_process(model_dir: Path, seconds: float) -> dict:
    """The model's own ``execute``, called in this process (no server, no stub)."""
    import triton_python_backend_utils as pb_utils
    from triton_core_python.model_module import load_model_module

    from bench.loadgen import summarize

    module = load_model_module(str(model_dir / "1" / "model.py"))
    model = module.TritonPythonModel()
    model.initialize({"model_repository": str(model_dir), "model_version": "1"})
    x = np.random.default_rng(0).random((1, 64), dtype=np.float32)

    def call() -> None:
        tensor = pb_utils.Tensor._of("INPUT0", "FP32", x)
        request = pb_utils.InferenceRequest._received(
            0, "", 0, 0, None, ["OUTPUT0"], [tensor], 0, "mlp_py", 1, False
        )
        model.execute([request])

    for _ in range(500):
        call()
    latencies = []
    perf = time.perf_counter
    started = perf()
    while (start := perf()) < started + seconds and len(latencies) < 5_000_000:
        call()
        latencies.append(perf() - start)
    return summarize(latencies, perf() - started)


def against_triton(
    ours: Path, theirs: Path, perf_analyzer: str, tritonserver: str, rounds: int, seconds: float
) -> tuple[str, str]:
    """The bar's comparison: both servers up at once, perf_analyzer windows at c=4 alternating
    between them for ``rounds`` rounds (so that a slow spell of a shared machine hits both).

    Returns (table, verdict)."""
    servers = {
        "triton-core": ServerUnderTest(triton_core_command(ours), "ours"),
        "Triton 2.51": ServerUnderTest(
            [
                tritonserver, "--model-repository", str(theirs), "--http-port", "{http}",
                "--grpc-port", "{grpc}", "--metrics-port", "{metrics}", "--log-info=false",
            ],
            "triton",
        ),
    }  # fmt: skip
    windows: dict[tuple[str, str], list[float]] = {}
    try:
        for server in servers.values():
            server.wait_ready()
        for _ in range(rounds):
            for protocol in ("http", "grpc"):
                for name, server in servers.items():
                    url = server.grpc_url if protocol == "grpc" else server.http_url
                    result = run_perf_analyzer(perf_analyzer, protocol, url, "mlp_py", 4, seconds)
                    windows.setdefault((name, protocol), []).append(
                        result["throughput"] if result else 0.0
                    )
    finally:
        for server in servers.values():
            server.stop()
    rows = []
    verdicts = []
    for protocol in ("http", "grpc"):
        mine, theirs_ = windows[("triton-core", protocol)], windows[("Triton 2.51", protocol)]
        per_round = [a / b for a, b in zip(mine, theirs_, strict=True) if b]
        best = max(mine) / max(theirs_) if max(theirs_) else 0.0
        median = float(np.median(per_round)) if per_round else 0.0
        rows.append([
            protocol, ", ".join(f"{x:,.0f}" for x in mine),
            ", ".join(f"{x:,.0f}" for x in theirs_),
            ", ".join(f"{r:.2f}" for r in per_round), f"**{median:.2f}**", f"{best:.2f}",
        ])  # fmt: skip
        verdicts.append(f"{protocol} median {median:.2f}x, best/best {best:.2f}x")
    table = format_table(
        ["protocol", "triton-core, infer/s per window", "Triton 2.51, infer/s per window",
         "ratio per round", "median ratio", "best / best"],
        rows,
    )  # fmt: skip
    return table, "; ".join(verdicts)


def cell(result: dict | None) -> str:
    if not result:
        return "-"
    return f"{result['throughput']:,.0f}/s, p50 {result['p50_us']:,.0f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--quick", action="store_true", help="1.5 s measurements")
    parser.add_argument(
        "--rounds", type=int, default=4, help="alternating windows against Triton at c=4"
    )
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    seconds = 1.5 if args.quick else args.seconds
    levels = [int(c) for c in args.concurrency.split(",")]
    perf_analyzer = find_tool("perf_analyzer")
    tritonserver = find_tool("tritonserver")
    if perf_analyzer is None:
        print("perf_analyzer not found: only in-process rows will be measured")

    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = build_repositories(Path(tmp))
        servers = [
            ("triton-core, python backend", "mlp_py", triton_core_command(ours)),
            (
                "triton-core, python backend, stub-policy=normal",
                "mlp_py",
                triton_core_command(ours, "--backend-config=python,stub-policy=normal"),
            ),
            (
                "triton-core, python backend, instance-thread=yes",
                "mlp_py",
                triton_core_command(ours, "--backend-config=python,instance-thread=yes"),
            ),
            ("triton-core, ONNX plugin (no model.py)", "mlp_onnx", triton_core_command(ours)),
        ]
        if tritonserver:
            servers.append(
                (
                    "Triton 2.51, python backend",
                    "mlp_py",
                    [
                        tritonserver, "--model-repository", str(theirs), "--http-port", "{http}",
                        "--grpc-port", "{grpc}", "--metrics-port", "{metrics}",
                        "--log-info=false",
                    ],
                )
            )  # fmt: skip
        if perf_analyzer:
            for label, model, command in servers:
                server = ServerUnderTest(command, "bench")
                try:
                    server.wait_ready()
                    for protocol in ("http", "grpc"):
                        url = server.grpc_url if protocol == "grpc" else server.http_url
                        results = [
                            run_perf_analyzer(perf_analyzer, protocol, url, model, c, seconds)
                            for c in levels
                        ]
                        rows.append([label, f"{protocol} (perf_analyzer)", *map(cell, results)])
                        print(rows[-1], flush=True)
                finally:
                    server.stop()

        versus = None
        if perf_analyzer and tritonserver:
            versus = against_triton(
                ours, theirs, perf_analyzer, tritonserver, 2 if args.quick else args.rounds, seconds
            )
            print(versus[0], flush=True)

        x = {"INPUT0": Tensor("INPUT0", "FP32", np.zeros((1, 64), np.float32))}
        results = [asyncio.run(in_process(ours, "mlp_py", x, c, seconds)) for c in levels]
        rows.append(["in-process `Server.infer`, python backend", "none", *map(cell, results)])
        raw = execute_in_process(ours / "mlp_py", seconds)
        blank = ["" for _ in levels[1:]]
        rows.append(["`TritonPythonModel.execute` called in-process", "none", cell(raw), *blank])

        busy_in = {"IN": Tensor("IN", "INT32", np.zeros((1, 1), np.int32))}
        scaling = {
            count: asyncio.run(in_process(ours, f"busy_x{count}", busy_in, 4, seconds))
            for count in (1, 2)
        }

    table = format_table(["server", "path", *[f"c={c}" for c in levels]], rows)
    one, two = scaling[1]["throughput"], scaling[2]["throughput"]
    scaling_text = (
        f"CPU-bound pure-Python model (~1 ms per request), in-process `Server.infer` at c=4: "
        f"1 instance {one:,.0f}/s, 2 instances {two:,.0f}/s ({two / one:.2f}x)."
    )
    note = (
        f"Tiny ONNX MLP 64->256->10 in a Triton `model.py` (onnxruntime, one thread), batch 1, "
        f"{seconds:.1f} s per cell, perf_analyzer on the same host ({os.cpu_count()} CPUs, "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}). "
        "One instance everywhere; perf_analyzer's HTTP is the binary tensor extension."
    )
    reading = (
        "How to read it: the python backend's rows differ from the ONNX plugin's by the model's "
        "process boundary (shared memory, two socket messages per batch, the stub's Python "
        "work; the stub holds the next batch in its socket while one runs, so under load it "
        "goes from one to the next without waiting for the server); `stub-policy=normal` lets "
        "a woken stub preempt the server's event loop (the "
        "default, SCHED_BATCH, makes it wait for a CPU); `instance-thread=yes` adds the core's "
        "worker-thread hop and GIL hand-over per batch, which the default event-driven "
        "instances avoid. The ONNX plugin rows, with no model.py at all, are the ceiling: "
        "the same frontends and scheduler without the process boundary."
    )
    versus_text = ""
    if versus is not None:
        versus_text = (
            "\n\n### Against Triton 2.51 at c=4, alternating\n\nBoth servers up at once, the "
            f"same model.py; perf_analyzer windows of {seconds:.1f} s alternate between them, "
            f"HTTP (binary) and gRPC, so that a slow spell of the machine falls on both "
            f"({versus[1]}). The table above measures each server once, one after the other, "
            f"so a slow spell can fall on either; this one is the comparison with Triton."
            f"\n\n{versus[0]}"
        )
    replace_section(
        args.output,
        "python-model",
        f"## Python models (model.py)\n\n{note}\n\n{table}\n\n{scaling_text}\n\n{reading}"
        f"{versus_text}",
    )
    print(table)
    print(scaling_text)


if __name__ == "__main__":
    main()
