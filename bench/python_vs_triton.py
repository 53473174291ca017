"""Python models against Triton 2.51's Python backend, side by side, with CPU per request.

Both servers run at once on the same ``model.py`` files; every cell alternates perf_analyzer
windows between them, round after round (the first server of a round alternates too), so a
slow spell of a shared machine falls on both. Cells:

* ``mlp_py``: the tiny ONNX MLP in a ``model.py`` (onnxruntime, one thread), batch 1, at
  c=1, 4 and 16 over HTTP (binary tensors) and gRPC;
* ``bls_py``: a ``model.py`` that runs ``mlp_py`` through a BLS call (c=1 and 4);
* ``stream_py``: a decoupled ``model.py`` that sends 8 small responses per request over a
  gRPC stream (perf_analyzer ``--streaming``): responses per second;
* ``identity_py``: 1 MiB and 16 MiB FP32 tensors in and out (c=2).

For each window it reads the processes' CPU time from /proc: the server process, its
event-loop thread apart (triton-core), the stub processes, and perf_analyzer itself, each
divided by the requests the server counted (``/v2/models/<model>/stats``).

    python bench/python_vs_triton.py [--seconds 3] [--rounds 3] [--quick] [--cells mlp,bls]

Needs perf_analyzer and tritonserver (shared/tools/setup-peer-tools.sh). Run it on a quiet
machine (``uptime``); results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    PEER_TOOLS,
    ROOT,
    ServerUnderTest,
    find_tool,
    format_table,
    host_description,
    replace_section,
    run_perf_analyzer,
    triton_core_command,
)
from bench.python_model import MODEL_PY, PYTHON_CONFIG
from bench.shm_bandwidth import CONFIG as IDENTITY_CONFIG
from bench.shm_bandwidth import IDENTITY_PY

#: Triton's stub ignores PYTHONPATH: its numpy comes from the peer tools' site
PRELUDE = """
import sys

try:
    import numpy
except ImportError:
    sys.path.insert(0, {site!r})
"""
BLS_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inner = pb_utils.InferenceRequest(
                model_name="mlp_py",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
            )
            result = inner.exec()
            if result.has_error():
                raise pb_utils.TritonModelException(result.error().message())
            output = pb_utils.get_output_tensor_by_name(result, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse([output]))
        return responses
"""
STREAM_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            for step in range({count}):
                out = pb_utils.Tensor("OUT", value + np.int32(step))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=FINAL)
        return None
"""
STREAM_RESPONSES = 8
STREAM_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
MIB_FLOATS = (1 << 20) // 4


@dataclass(frozen=True)
class Cell:
    """One measurement: a model at a concurrency over a protocol, with perf_analyzer flags."""

    group: str
    model: str
    protocol: str
    concurrency: int
    extra: tuple[str, ...] = ()
    label: str = ""
    #: responses per request (decoupled): the rate is reported in responses
    responses: int = 1

    @property
    def name(self) -> str:
        return self.label or f"{self.model}, {self.protocol}, c={self.concurrency}"


@dataclass
class Window:
    rate: float
    p50_us: float
    #: CPU microseconds per request: name -> value
    cpu: dict[str, float] = field(default_factory=dict)


def build_repository(root: Path) -> Path:
    """One repository both servers load (Triton's Python stub finds onnxruntime through the
    peer tools' site)."""
    from triton_core_onnx.model_builders import mlp

    models = {
        "mlp_py": (MODEL_PY.format(site=str(PEER_TOOLS / "stub-site")), PYTHON_CONFIG),
        "bls_py": (BLS_PY, PYTHON_CONFIG),
        "stream_py": (STREAM_PY.format(count=STREAM_RESPONSES), STREAM_CONFIG),
    }
    prelude = PRELUDE.format(site=str(PEER_TOOLS / "stub-site"))
    for name, (source, config) in models.items():
        (root / name / "1").mkdir(parents=True)
        text = source if name == "mlp_py" else prelude + source
        (root / name / "1" / "model.py").write_text(text)
        (root / name / "config.pbtxt").write_text(config)
    identity = root / "identity_py"  # as bench/shm_bandwidth.py serves it
    (identity / "1").mkdir(parents=True)
    (identity / "1" / "model.py").write_text(IDENTITY_PY.format(site=str(PEER_TOOLS / "stub-site")))
    (identity / "config.pbtxt").write_text(IDENTITY_CONFIG.format(engine='backend: "python"'))
    mlp(root / "mlp_py" / "1" / "model.onnx")
    return root


def cells(groups: set[str]) -> list[Cell]:
    chosen: list[Cell] = []
    if "mlp" in groups:
        for concurrency in (1, 4, 16):
            for protocol in ("http", "grpc"):
                chosen.append(Cell("mlp", "mlp_py", protocol, concurrency))
    if "bls" in groups:
        for concurrency in (1, 4):
            chosen.append(Cell("bls", "bls_py", "grpc", concurrency))
    if "stream" in groups:
        for concurrency in (1, 4):
            chosen.append(
                Cell(
                    "stream", "stream_py", "grpc", concurrency, ("--streaming",),
                    f"stream_py ({STREAM_RESPONSES} responses), grpc stream, c={concurrency}",
                    STREAM_RESPONSES,
                )
            )  # fmt: skip
    if "large" in groups:
        for mib in (1, 16):
            for protocol in ("http", "grpc"):
                chosen.append(
                    Cell(
                        "large", "identity_py", protocol, 2,
                        ("--shape", f"INPUT0:{mib * MIB_FLOATS}"),
                        f"identity_py {mib} MiB, {protocol}, c=2",
                    )
                )  # fmt: skip
    return chosen


# -- CPU time from /proc ------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(path: str) -> list[str] | None:
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after its last ')'
    return text[text.rindex(")") + 2 :].split()


def _cpu(path: str) -> float:
    fields = _stat_fields(path)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / _TICK


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(f"/proc/{entry}/stat")
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry))
    return found


def cpu_snapshot(pid: int, loop_thread: bool) -> dict[str, float]:
    """CPU seconds so far: the server, its event loop (the main thread), its stubs."""
    snapshot = {"server": _cpu(f"/proc/{pid}/stat")}
    if loop_thread:
        snapshot["event loop"] = _cpu(f"/proc/{pid}/task/{pid}/stat")
    snapshot["stubs"] = sum(_cpu(f"/proc/{child}/stat") for child in _children(pid))
    return snapshot


def success_count(server: ServerUnderTest, model: str) -> int:
    url = f"http://{server.http_url}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        stats = json.load(reply)
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


def measure(perf_analyzer: str, server: ServerUnderTest, cell: Cell, seconds: float, ours: bool):
    url = server.grpc_url if cell.protocol == "grpc" else server.http_url
    pid = server.process.pid
    before = cpu_snapshot(pid, ours)
    client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    count_before = success_count(server, cell.model)
    result = run_perf_analyzer(
        perf_analyzer, cell.protocol, url, cell.model, cell.concurrency, seconds, cell.extra
    )
    requests = max(1, success_count(server, cell.model) - count_before)
    client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = cpu_snapshot(pid, ours)
    if result is None:
        return None
    cpu = {name: (after[name] - before[name]) / requests * 1e6 for name in after}
    cpu["client"] = (
        (client_after.ru_utime - client_before.ru_utime)
        + (client_after.ru_stime - client_before.ru_stime)
    ) / requests * 1e6  # fmt: skip
    rate = result["throughput"]
    if cell.responses > 1:
        row = result["row"]
        rate = float(row.get("Response Throughput") or rate * cell.responses)
    return Window(rate, result["p50_us"], cpu)


def median_or_zero(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def summarize(cell: Cell, ours: list[Window], theirs: list[Window]) -> list[str]:
    ratios = [a.rate / b.rate for a, b in zip(ours, theirs, strict=False) if b.rate]

    def cpu(windows: list[Window], *names: str) -> str:
        parts = []
        for name in names:
            values = [w.cpu.get(name, 0.0) for w in windows]
            parts.append(f"{median_or_zero(values):.0f}")
        return " / ".join(parts)

    unit = " responses/s" if cell.responses > 1 else "/s"
    return [
        cell.name,
        f"{median_or_zero([w.rate for w in ours]):,.0f}{unit}",
        f"{median_or_zero([w.rate for w in theirs]):,.0f}{unit}",
        ", ".join(f"{r:.2f}" for r in ratios),
        f"**{median_or_zero(ratios):.2f}x**",
        f"{median_or_zero([w.p50_us for w in ours]):,.0f} / "
        f"{median_or_zero([w.p50_us for w in theirs]):,.0f}",
        cpu(ours, "server", "event loop", "stubs", "client"),
        cpu(theirs, "server", "stubs", "client"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1.5 s windows, 2 rounds")
    parser.add_argument("--cells", default="mlp,bls,stream,large")
    parser.add_argument("--extra-flags", default="", help="more `serve` flags for triton-core")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    seconds, rounds = (1.5, 2) if args.quick else (args.seconds, args.rounds)
    perf_analyzer, tritonserver = find_tool("perf_analyzer"), find_tool("tritonserver")
    if perf_analyzer is None or tritonserver is None:
        sys.exit("needs perf_analyzer and tritonserver: run shared/tools/setup-peer-tools.sh")
    chosen = cells(set(args.cells.split(",")))
    windows: dict[tuple[str, bool], list[Window]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-pyvs-") as tmp:
        repo = build_repository(Path(tmp) / "models")
        ours = ServerUnderTest(triton_core_command(repo, *args.extra_flags.split()), "ours")
        triton = ServerUnderTest(
            [
                tritonserver, "--model-repository", str(repo), "--http-port", "{http}",
                "--grpc-port", "{grpc}", "--metrics-port", "{metrics}", "--log-info=false",
            ],
            "triton",
        )  # fmt: skip
        try:
            ours.wait_ready()
            triton.wait_ready()
            for index in range(rounds):
                for cell in chosen:
                    order = [(ours, True), (triton, False)]
                    if index % 2:
                        order.reverse()
                    for server, is_ours in order:
                        window = measure(perf_analyzer, server, cell, seconds, is_ours)
                        if window is not None:
                            windows.setdefault((cell.name, is_ours), []).append(window)
                        print(cell.name, "ours" if is_ours else "triton", window, flush=True)
        finally:
            ours.stop()
            triton.stop()
    rows = [
        summarize(cell, windows.get((cell.name, True), []), windows.get((cell.name, False), []))
        for cell in chosen
    ]
    table = format_table(
        ["cell", "triton-core (median)", "Triton 2.51 (median)", "ratio per round",
         "median ratio", "p50 us, ours / Triton",
         "CPU us per request, ours: server / its event loop / stubs / client",
         "CPU us per request, Triton: server / stubs / client"],
        rows,
    )  # fmt: skip
    print(table)
    if args.no_write:
        return
    content = (
        f"bench/python_vs_triton.py: both servers up at once on the same `model.py` files, "
        f"perf_analyzer windows of {seconds:.1f} s alternating between them, {rounds} rounds "
        f"({host_description()}). CPU per request from /proc over each window, divided by the "
        "requests the server counted; `stubs` are the model processes; the client is "
        "perf_analyzer.\n\n" + table + "\n"
    )
    replace_section(args.output, "python-vs-triton", content)


if __name__ == "__main__":
    main()
