"""Server CPU time per MiB of large tensors, triton-core next to Triton 2.51, same run.

Wall-clock GB/s on a shared machine swings with the other processes; the CPU time the server
(and the processes it started: Python model stubs) spends per MiB moved does much less, so
this is the measure to compare transports and changes by. Same identity models and stock
clients as bench/shm_bandwidth.py; CPU from /proc/<pid>/stat (utime + stime) before and after
a fixed number of requests, over the server's process tree.

    python bench/large_tensor_cpu.py [--transports http,grpc] [--sizes 1,16,64] [--requests 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ServerUnderTest, find_tool, triton_core_command
from bench.shm_bandwidth import MAX_MESSAGE, MIB, Transport, build_repositories


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every process below it (bounded walk)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending, seen = [pid], set()
    while pending and len(seen) < 1000:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue  # a process that ended meanwhile
    return total


def measure(server: ServerUnderTest, kind: str, size_mib: int, requests: int) -> str:
    transport = Transport(kind, server, "identity_py", size_mib)
    try:
        transport.check()
        transport.call()
        cpu_before, started = tree_cpu_seconds(server.process.pid), time.perf_counter()
        for _ in range(requests):
            transport.call()
        elapsed = time.perf_counter() - started
        cpu = tree_cpu_seconds(server.process.pid) - cpu_before
    finally:
        transport.close()
    moved = requests * size_mib
    return (
        f"{server.label:11} {kind:4} {size_mib:3} MiB: {2 * moved * MIB / elapsed / 1e9:6.3f} GB/s,"
        f" server {cpu * 1000 / moved:6.2f} ms CPU per MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transports", default="http,grpc")
    parser.add_argument("--sizes", default="1,16,64", help="MiB, comma-separated")
    parser.add_argument("--requests", type=int, default=8, help="per cell (x16 for 1 MiB)")
    parser.add_argument("--extra", default="", help="more triton-core flags, space-separated")
    args = parser.parse_args()
    tritonserver = find_tool("tritonserver")
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = build_repositories(Path(tmp))
        flags = [f"--http-max-input-size={MAX_MESSAGE}", f"--grpc-max-message-size={MAX_MESSAGE}"]
        command = triton_core_command(ours, *flags, *args.extra.split())
        servers = [ServerUnderTest(command, "triton-core")]
        if tritonserver:
            triton_command = [
                tritonserver, "--model-repository", str(theirs), "--http-port", "{http}",
                "--grpc-port", "{grpc}", "--metrics-port", "{metrics}", "--log-info=false",
                f"--backend-config=python,shm-default-byte-size={MAX_MESSAGE}",
            ]  # fmt: skip
            servers.append(ServerUnderTest(triton_command, "Triton 2.51"))
        try:
            for server in servers:
                server.wait_ready()
            for size in (int(text) for text in args.sizes.split(",")):
                count = args.requests * 16 if size == 1 else args.requests
                for kind in args.transports.split(","):
                    for server in servers:
                        print(measure(server, kind, size, count), flush=True)
        finally:
            for server in servers:
                server.stop()


if __name__ == "__main__":
    main()
