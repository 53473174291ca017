"""Shared pieces of the benchmarks: servers as processes, perf_analyzer, result tables."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER_TOOLS = Path(os.environ.get("PEER_TOOLS", Path.home() / ".cache" / "peer-tools"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_tool(name: str) -> str | None:
    """A tool on PATH, or installed by shared/tools/setup-peer-tools.sh."""
    found = shutil.which(name)
    if found:
        return found
    candidate = PEER_TOOLS / "bin" / name
    return str(candidate) if candidate.exists() else None


class ServerUnderTest:
    """A server process (ours or a real Triton) on free loopback ports."""

    def __init__(self, command: list[str], label: str, env: dict[str, str] | None = None):
        self.label = label
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.http_url = f"127.0.0.1:{self.http_port}"
        self.grpc_url = f"127.0.0.1:{self.grpc_port}"
        full = [
            part.format(http=self.http_port, grpc=self.grpc_port, metrics=self.metrics_port)
            for part in command
        ]
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{label}-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            full, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.label} exited:\n{Path(self.log.name).read_text()[-3000:]}"
                )
            try:
                url = f"http://{self.http_url}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.label} not ready in {timeout}s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def triton_core_command(repo: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "triton_core", "serve", "--model-repository", str(repo),
        "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
        "--http-port", "{http}", "--grpc-port", "{grpc}", "--metrics-port", "{metrics}",
        "--log-info=false", *extra,
    ]  # fmt: skip


def run_loadgen(
    protocol: str, url: str, model: str, inputs: list[str], concurrency: int, seconds: float
) -> dict:
    """One closed-loop measurement in a separate process (bench/loadgen.py)."""
    command = [
        sys.executable, str(ROOT / "bench" / "loadgen.py"), "--protocol", protocol, "--url", url,
        "--model", model, "--concurrency", str(concurrency), "--seconds", str(seconds),
    ]  # fmt: skip
    for spec in inputs:
        command += ["--input", spec]
    output = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    if output.returncode != 0:
        raise RuntimeError(f"loadgen failed: {output.stderr[-2000:]}")
    return json.loads(output.stdout.strip().splitlines()[-1])


def run_perf_analyzer(
    tool: str,
    protocol: str,
    url: str,
    model: str,
    concurrency: int,
    seconds: float,
    extra: tuple[str, ...] = (),
) -> dict | None:
    """perf_analyzer at one concurrency; None when it fails (its output is printed).

    ``extra``: more perf_analyzer arguments (``--shape``, ``--streaming`` ...)."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as report:
        command = [
            tool, "-m", model, "-u", url, "-i", protocol, "--concurrency-range",
            f"{concurrency}:{concurrency}", "--measurement-interval", str(int(seconds * 1000)),
            "-f", report.name, "--max-trials", "4", "--stability-percentage", "50", *extra,
        ]  # fmt: skip
        output = subprocess.run(command, capture_output=True, text=True, timeout=seconds * 12 + 120)
        if output.returncode != 0:
            print(f"perf_analyzer failed ({' '.join(command)}):\n{output.stdout[-1500:]}")
            return None
        with open(report.name, newline="") as handle:
            rows = list(csv.DictReader(handle))
    if not rows:
        return None
    row = rows[0]
    return {
        "row": row,
        "throughput": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
    }


def host_description() -> str:
    """``N CPUs, <processor>, Python X.Y.Z``: the machine a result was measured on."""
    import platform

    processor = platform.processor() or platform.machine()
    return f"{os.cpu_count()} CPUs, {processor}, Python {platform.python_version()}"


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def replace_section(path: Path, marker: str, content: str) -> None:
    """Rewrite the part of ``path`` between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    begin, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{begin}\n{content.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
