"""Per-request overhead on the tiny ONNX MLP (64 -> 256 -> 10), batch 1.

In one run, side by side: the server over HTTP JSON, HTTP binary and gRPC (our closed-loop
generator, and perf_analyzer when it is installed), in-process ``Server.infer``, raw
``onnxruntime`` ``session.run``, and a real Triton serving the same model through a Python
``model.py`` when ``tritonserver`` is installed (shared/tools/setup-peer-tools.sh). Results go
to docs/benchmarks.md.

    python bench/protocol_overhead.py [--seconds 5] [--concurrency 1,4,16] [--quick]
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
    run_loadgen,
    run_perf_analyzer,
    triton_core_command,
)
from triton_core import InferenceRequest, Server, ServerOptions, Tensor

INPUT = ["INPUT0:float32:1x64"]
PLAIN_CONFIG = """
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
"""
TRITON_CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
TRITON_MODEL_PY = """
import os, sys
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


def build_repositories(root: Path) -> tuple[Path, Path]:
    from triton_core_onnx.model_builders import mlp

    ours = root / "ours"
    mlp(ours / "mlp" / "1" / "model.onnx")  # no config: auto-completed (dynamic batching)
    mlp(ours / "mlp_plain" / "1" / "model.onnx")
    (ours / "mlp_plain" / "config.pbtxt").write_text(PLAIN_CONFIG)
    theirs = root / "triton"
    mlp(theirs / "mlp" / "1" / "model.onnx")
    (theirs / "mlp" / "config.pbtxt").write_text(TRITON_CONFIG)
    (theirs / "mlp" / "1" / "model.py").write_text(
        TRITON_MODEL_PY.format(site=str(PEER_TOOLS / "stub-site"))
    )
    return ours, theirs


async def in_process(repo: Path, model: str, concurrency: int, seconds: float) -> dict:
    from bench.loadgen import summarize

    data = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    async with Server(ServerOptions([repo])) as server:
        latencies: list[float] = []

        async def client(deadline: float, record: bool) -> None:
            perf = time.perf_counter
            while (start := perf()) < deadline:
                request = InferenceRequest(model, {"INPUT0": Tensor("INPUT0", "FP32", data)})
                await server.infer(request)
                if record:
                    latencies.append(perf() - start)

        warm_until = time.perf_counter() + 1
        await asyncio.gather(*(client(warm_until, False) for _ in range(concurrency)))
        started = time.perf_counter()
        await asyncio.gather(*(client(started + seconds, True) for _ in range(concurrency)))
        return summarize(latencies, time.perf_counter() - started)


def raw_onnxruntime(model_path: Path, seconds: float) -> dict:
    import onnxruntime as ort

    from bench.loadgen import summarize

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    feed = {"INPUT0": np.random.default_rng(0).random((1, 64), dtype=np.float32)}
    for _ in range(200):
        session.run(None, feed)
    latencies = []
    perf = time.perf_counter
    started = perf()
    deadline = started + seconds
    while (start := perf()) < deadline and len(latencies) < 5_000_000:
        session.run(None, feed)
        latencies.append(perf() - start)
    return summarize(latencies, perf() - started)


def cell(result: dict | None) -> str:
    if not result:
        return "-"
    return f"{result['throughput']:,.0f}/s, p50 {result['p50_us']:,.0f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--quick", action="store_true", help="2 s measurements, c=1,4")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    levels = [1, 4] if args.quick else [int(c) for c in args.concurrency.split(",")]
    perf_analyzer = find_tool("perf_analyzer")
    tritonserver = find_tool("tritonserver")

    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        ours_repo, triton_repo = build_repositories(Path(tmp))
        servers = [("triton-core", ServerUnderTest(triton_core_command(ours_repo), "ours"))]
        if tritonserver:
            command = [
                tritonserver, "--model-repository", str(triton_repo), "--http-port", "{http}",
                "--grpc-port", "{grpc}", "--metrics-port", "{metrics}", "--log-info=false",
            ]  # fmt: skip
            servers.append(
                ("Triton 2.51 (Python backend + ORT)", ServerUnderTest(command, "triton"))
            )
        try:
            for _, server in servers:
                server.wait_ready()
            for label, server in servers:
                models = ["mlp", "mlp_plain"] if server.label == "ours" else ["mlp"]
                for model in models:
                    name = f"{label} `{model}`"
                    for protocol in ("http-json", "http-binary", "grpc"):
                        url = server.grpc_url if protocol == "grpc" else server.http_url
                        results = [
                            run_loadgen(protocol, url, model, INPUT, c, seconds) for c in levels
                        ]
                        rows.append([name, f"{protocol} (loadgen)", *map(cell, results)])
                    if perf_analyzer:
                        for protocol in ("http", "grpc"):
                            url = server.grpc_url if protocol == "grpc" else server.http_url
                            results = [
                                run_perf_analyzer(perf_analyzer, protocol, url, model, c, seconds)
                                for c in levels
                            ]
                            rows.append([name, f"{protocol} (perf_analyzer)", *map(cell, results)])
        finally:
            for _, server in servers:
                server.stop()
        for model in ("mlp", "mlp_plain"):
            results = [asyncio.run(in_process(ours_repo, model, c, seconds)) for c in levels]
            rows.append([f"in-process `Server.infer` `{model}`", "none", *map(cell, results)])
        raw = raw_onnxruntime(ours_repo / "mlp" / "1" / "model.onnx", seconds)
        rows.append(["raw onnxruntime `session.run`", "none", cell(raw), *["" for _ in levels[1:]]])

    table = format_table(["server", "path", *[f"c={c}" for c in levels]], rows)
    note = (
        f"Tiny ONNX MLP 64->256->10, batch 1, {seconds:.0f} s per cell after 1 s warm-up, client "
        f"on the same host ({os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}). `mlp` is the auto-completed config (2 instances, "
        "dynamic batching); `mlp_plain` is 1 instance without batching, like the Triton model. "
        "loadgen = bench/loadgen.py (replays tritonclient-built requests from one asyncio "
        "process); perf_analyzer rows appear when it is installed."
    )
    replace_section(
        args.output, "protocol-overhead", f"## Per-request overhead\n\n{note}\n\n{table}"
    )
    print(table)


if __name__ == "__main__":
    main()
