"""The latency Ray Serve adds: the tiny ONNX MLP through Serve's proxy and handle vs directly.

In one run, on one host: ``triton-core serve`` answering HTTP binary requests directly, the
same repository behind Ray Serve (one replica by default, Serve's HTTP proxy on loopback)
answering the same requests, and Python callers through the deployment's handle
(``handle.infer.remote``) next to in-process ``Server.infer``. At c=1 the difference of the
medians is what the Ray path costs per request: the proxy's hop to the replica and back,
and Ray's serialization. Results go to docs/benchmarks.md (section ``ray-serve``).

    pip install 'triton-core[ray]'
    python bench/ray_serve.py [--seconds 5] [--concurrency 1] [--replicas 1] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Ray's services on loopback: without clusters Ray keeps a loopback node address (the
# variable's name is historical); read when ray is imported, so set before
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from bench.common import (
    ROOT,
    ServerUnderTest,
    format_table,
    free_port,
    replace_section,
    run_loadgen,
    triton_core_command,
)
from bench.loadgen import summarize
from bench.protocol_overhead import PLAIN_CONFIG, cell, in_process
from triton_core import InferenceRequest, Tensor

INPUT = ["INPUT0:float32:1x64"]
#: 1 instance, no batching: each request runs on its own, so the paths differ only in transport
MODEL = "mlp_plain"
WARM_UP_SECS = 1.0


def build_repository(root: Path) -> Path:
    from triton_core_onnx.model_builders import mlp

    mlp(root / MODEL / "1" / "model.onnx")
    (root / MODEL / "config.pbtxt").write_text(PLAIN_CONFIG)
    return root


def mlp_request() -> InferenceRequest:
    data = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    return InferenceRequest(MODEL, {"INPUT0": Tensor("INPUT0", "FP32", data)})


def sequential(call, seconds: float) -> dict:
    """``call()`` back to back (c=1) for ``seconds`` after a warm-up."""
    warm_until = time.perf_counter() + WARM_UP_SECS
    while time.perf_counter() < warm_until:
        call()
    latencies = []
    started = time.perf_counter()
    end = started + seconds
    while (before := time.perf_counter()) < end:
        call()
        latencies.append(time.perf_counter() - before)
    return summarize(latencies, time.perf_counter() - started)


def wait_ready(url: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"Ray Serve at {url} not ready in {timeout:.0f}s")


def measure_ray(repository: Path, levels: list[int], seconds: float, replicas: int) -> dict:
    """HTTP through Serve's proxy at each concurrency, and the handle at c=1."""
    import ray
    from ray import serve

    import triton_core.ray as triton_ray

    temp_dir = tempfile.mkdtemp(prefix="bench-ray-")
    ray.init(
        address="local",
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=temp_dir,
        log_to_driver=False,
    )
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        application = triton_ray.deployment(
            str(repository),
            num_replicas=replicas,
            ray_actor_options={"num_cpus": 0},
            max_ongoing_requests=max(levels) * 2,
        )
        handle = serve.run(application, name="bench", route_prefix="/")
        url = f"127.0.0.1:{port}"
        wait_ready(url)
        http = [run_loadgen("http-binary", url, MODEL, INPUT, c, seconds) for c in levels]
        request = mlp_request()
        by_handle = sequential(lambda: handle.infer.remote(request).result(timeout_s=60), seconds)
        return {"http": http, "handle": by_handle}
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def added(through: dict, direct: dict) -> str:
    return f"{(through['p50_us'] - direct['p50_us']) / 1000:+.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1", help="comma-separated levels (HTTP)")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]

    with tempfile.TemporaryDirectory(prefix="bench-ray-models-") as tmp:
        repository = build_repository(Path(tmp))
        server = ServerUnderTest(triton_core_command(repository), "direct")
        try:
            server.wait_ready()
            direct = [
                run_loadgen("http-binary", server.http_url, MODEL, INPUT, c, args.seconds)
                for c in levels
            ]
        finally:
            server.stop()
        local = asyncio.run(in_process(repository, MODEL, 1, args.seconds))
        through_ray = measure_ray(repository, levels, args.seconds, args.replicas)

    rows = [
        ["triton-core serve, HTTP binary", *map(cell, direct), ""],
        [
            f"Ray Serve proxy ({args.replicas} replica(s)), HTTP binary",
            *map(cell, through_ray["http"]),
            added(through_ray["http"][0], direct[0]),
        ],
        ["in-process `Server.infer`", cell(local), *["" for _ in levels[1:]], ""],
        [
            "Ray Serve handle `infer.remote`",
            cell(through_ray["handle"]),
            *["" for _ in levels[1:]],
            added(through_ray["handle"], local),
        ],
    ]
    table = format_table(["path", *[f"c={c}" for c in levels], f"added p50 at c={levels[0]}"], rows)
    note = (
        f"Tiny ONNX MLP 64->256->10, batch 1, 1 instance, {args.seconds:.0f} s per cell after "
        f"warm-up; client, Ray (a local loopback cluster) and servers on one host "
        f"({os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}). HTTP: bench/loadgen.py; handle and in-process: "
        "sequential calls from one Python process. The added latency compares medians."
    )
    if not args.no_write:
        replace_section(args.output, "ray-serve", f"## Ray Serve\n\n{note}\n\n{table}")
    print(table)


if __name__ == "__main__":
    main()
