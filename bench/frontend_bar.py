"""The frontends' speed bar: triton-core with its default flags against a real Triton 2.51.

Both servers up at once, serving the tiny ONNX MLP (ours through the ONNX plugin, one
instance; Triton through a Python ``model.py`` calling onnxruntime, as in
bench/protocol_overhead.py). Windows alternate between the two servers, round after round,
at each concurrency, with two load generators:

- perf_analyzer (HTTP binary and gRPC), Triton's own;
- h2load (Debian's nghttp2-client), which costs the machine little CPU: HTTP/1.1 with a fixed
  JSON body, and HTTP/2 with a fixed framed gRPC ``ModelInfer`` message.

The ratio of each round is ours over Triton's in neighbouring windows; the table gives the
median of the rounds. Results go to docs/benchmarks.md.

    python bench/frontend_bar.py [--seconds 3] [--rounds 3] [--concurrency 4,16]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    ROOT,
    ServerUnderTest,
    find_tool,
    format_table,
    replace_section,
    run_perf_analyzer,
    triton_core_command,
)
from bench.protocol_overhead import build_repositories

#: ours' model, Triton's model
MODELS = ("mlp_plain", "mlp")


def json_body(model_input: np.ndarray) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": list(model_input.shape),
                    "datatype": "FP32",
                    "data": model_input.reshape(-1).tolist(),
                }
            ]
        }
    ).encode()


def grpc_body(model: str, model_input: np.ndarray) -> bytes:
    """A ModelInfer message as it travels: the 5-byte prefix and the serialized request."""
    from triton_core.protos import grpc_service_pb2 as pb

    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32")
    tensor.shape.extend(model_input.shape)
    request.raw_input_contents.append(model_input.tobytes())
    message = request.SerializeToString()
    return b"\x00" + len(message).to_bytes(4, "big") + message


_RATE = re.compile(r"finished in [\d.]+m?s, ([\d.]+) req/s")
_DONE = re.compile(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed")


def run_h2load(
    tool: str, url: str, body: Path, headers: list[str], concurrency: int, seconds: float, h1: bool
) -> float | None:
    """Requests per second of one h2load window; None when any request failed."""
    command = [
        tool, "-c", str(concurrency), "-m", "1", "-t", "1", "-D", f"{int(seconds * 1000)}ms",
        "--warm-up-time", "1", "-d", str(body), url,
    ]  # fmt: skip
    for header in headers:
        command += ["-H", header]
    if h1:
        command.append("--h1")
    output = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    rate, done = _RATE.search(output.stdout), _DONE.search(output.stdout)
    if output.returncode != 0 or rate is None or done is None or int(done.group(2)):
        print(f"h2load failed ({' '.join(command)}):\n{output.stdout[-1500:]}{output.stderr}")
        return None
    return float(rate.group(1))


def successes(server: ServerUnderTest, model: str) -> int:
    """The model's successful inferences, from the statistics extension."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_url)
    stats = client.get_inference_statistics(model)["model_stats"]
    return sum(int(entry["inference_stats"]["success"]["count"]) for entry in stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="4,16")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    perf_analyzer, h2load, tritonserver = (
        find_tool(name) for name in ("perf_analyzer", "h2load", "tritonserver")
    )
    if not (perf_analyzer and h2load and tritonserver):
        sys.exit("needs perf_analyzer, tritonserver (setup-peer-tools.sh) and h2load")
    model_input = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        ours_repo, triton_repo = build_repositories(Path(tmp))
        ours = ServerUnderTest(triton_core_command(ours_repo), "ours")
        command = [
            tritonserver, "--model-repository", str(triton_repo), "--http-port", "{http}",
            "--grpc-port", "{grpc}", "--metrics-port", "{metrics}", "--log-info=false",
        ]  # fmt: skip
        triton = ServerUnderTest(command, "triton")
        bodies = {}
        for server, model in ((ours, MODELS[0]), (triton, MODELS[1])):
            bodies[server.label, "json"] = Path(tmp) / f"{server.label}.json"
            bodies[server.label, "json"].write_bytes(json_body(model_input))
            bodies[server.label, "grpc"] = Path(tmp) / f"{server.label}.grpc"
            bodies[server.label, "grpc"].write_bytes(grpc_body(model, model_input))

        def window(kind: str, server: ServerUnderTest, concurrency: int) -> float | None:
            model = MODELS[0] if server is ours else MODELS[1]
            if kind in ("http", "grpc"):
                url = server.grpc_url if kind == "grpc" else server.http_url
                result = run_perf_analyzer(
                    perf_analyzer, kind, url, model, concurrency, args.seconds
                )
                return result["throughput"] if result else None
            if kind == "h2load http-json":
                url = f"http://{server.http_url}/v2/models/{model}/infer"
                headers = ["content-type: application/json"]
                body = bodies[server.label, "json"]
                return run_h2load(h2load, url, body, headers, concurrency, args.seconds, True)
            url = f"http://{server.grpc_url}/inference.GRPCInferenceService/ModelInfer"
            headers = ["content-type: application/grpc", "te: trailers"]
            # h2load counts HTTP 200s; the statistics confirm every call really succeeded
            before = successes(server, model)
            rate = run_h2load(
                h2load, url, bodies[server.label, "grpc"], headers, concurrency, args.seconds, False
            )
            if rate is not None and successes(server, model) - before < rate * args.seconds:
                print(f"h2load grpc: {server.label} answered fewer successes than requests")
                return None
            return rate

        kinds = ["http", "grpc", "h2load http-json", "h2load grpc"]
        results: dict[tuple[str, int], list[tuple[float, float]]] = {}
        try:
            ours.wait_ready()
            triton.wait_ready()
            for _ in range(args.rounds):
                for kind in kinds:
                    for concurrency in levels:
                        pair = [window(kind, server, concurrency) for server in (ours, triton)]
                        if None not in pair:
                            results.setdefault((kind, concurrency), []).append(tuple(pair))
        finally:
            ours.stop()
            triton.stop()
    write_results(args, levels, kinds, results)


def median_ratio(pairs: list[tuple[float, float]]) -> float:
    return statistics.median(ours / theirs for ours, theirs in pairs)


def write_results(
    args: argparse.Namespace,
    levels: list[int],
    kinds: list[str],
    results: dict[tuple[str, int], list[tuple[float, float]]],
) -> None:
    rows = []
    for kind in kinds:
        for concurrency in levels:
            pairs = results.get((kind, concurrency), [])
            if not pairs:
                rows.append([kind, str(concurrency), "-", "-", "-", "-"])
                continue
            rows.append(
                [
                    kind,
                    str(concurrency),
                    f"{statistics.median(p[0] for p in pairs):,.0f}/s",
                    f"{statistics.median(p[1] for p in pairs):,.0f}/s",
                    ", ".join(f"{ours / theirs:.2f}" for ours, theirs in pairs),
                    f"{median_ratio(pairs):.2f}x",
                ]
            )
    table = format_table(
        ["load", "c", "triton-core", "Triton 2.51", "ratio per round", "median ratio"], rows
    )
    text = (
        "## The frontends' bar against Triton 2.51\n\n"
        f"bench/frontend_bar.py: triton-core with its default flags (`mlp_plain`, ONNX plugin, "
        f"1 instance) and Triton 2.51 (`mlp`, Python backend + onnxruntime) up at once; "
        f"{args.seconds:.0f} s windows alternating between them, {args.rounds} rounds; "
        f"perf_analyzer (HTTP binary, gRPC) and h2load (`--h1` with a fixed JSON body; HTTP/2 "
        f"with a fixed framed gRPC message), each window one connection per concurrent "
        f"request ({platform.machine()}, {len(os.sched_getaffinity(0))} CPUs).\n\n"
        f"{table}\n"
    )
    print(text)
    replace_section(args.output, "frontend-bar", text)


if __name__ == "__main__":
    main()
