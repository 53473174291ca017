"""Large tensors: GB/s through an identity model over HTTP binary, gRPC and system shared memory.

In one run, side by side: triton-core and a real Triton 2.51 (when ``tritonserver`` is
installed, shared/tools/setup-peer-tools.sh) serving the same identity ``model.py`` (Triton
2.51 here has only its Python backend), triton-core also serving an ONNX identity (no
model.py); 1, 16 and 64 MiB FP32 tensors in and out, one request at a time (the stock
tritonclient, as an application would send them); and this machine's memcpy bandwidth
(a numpy copy of 16 MiB) as the limit. GB/s counts the bytes in plus the bytes out.

With system shared memory, the client writes its input into a region once and names an
output region (as ``perf_analyzer --shared-memory system`` does): each request then moves
the tensors only between the regions and the model, and the answer carries metadata only.

The bar (issue 14): 16 MiB in+out through system shared memory reaches at least 0.4 of
memcpy bandwidth, and each transport is at least as fast as Triton's on the same transport.

    python bench/shm_bandwidth.py [--seconds 3] [--rounds 3] [--quick]

Run it only on a quiet machine (check ``uptime``); results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    PEER_TOOLS,
    ROOT,
    ServerUnderTest,
    find_tool,
    format_table,
    replace_section,
    triton_core_command,
)

MIB = 1 << 20
SIZES_MIB = (1, 16, 64)
TRANSPORTS = ("http", "grpc", "shm")
#: room for a 64 MiB tensor plus its request around it, on both servers
MAX_MESSAGE = 1 << 28

IDENTITY_PY = """
import sys

try:
    import numpy  # noqa: F401
except ImportError:  # Triton's Python stub: numpy lives in the peer-tools site
    sys.path.insert(0, {site!r})
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", values)]))
        return responses
"""
CONFIG = """
{engine}
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def build_repositories(root: Path) -> tuple[Path, Path]:
    from triton_core_onnx.model_builders import no_batch_identity

    ours, theirs = root / "ours", root / "triton"
    identity_py = IDENTITY_PY.format(site=str(PEER_TOOLS / "stub-site"))
    for repo in (ours, theirs):
        (repo / "identity_py" / "1").mkdir(parents=True)
        (repo / "identity_py" / "1" / "model.py").write_text(identity_py)
        (repo / "identity_py" / "config.pbtxt").write_text(
            CONFIG.format(engine='backend: "python"')
        )
    no_batch_identity(ours / "identity_onnx" / "1" / "model.onnx", "FP32", (-1,))
    (ours / "identity_onnx" / "config.pbtxt").write_text(
        CONFIG.format(engine='platform: "onnxruntime_onnx"')
    )
    return ours, theirs


def memcpy_gbps(seconds: float) -> float:
    """This machine's copy bandwidth: bytes copied per second, 16 MiB at a time."""
    source = np.ones(16 * MIB // 4, np.float32)
    target = np.empty_like(source)
    for _ in range(20):
        np.copyto(target, source)
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        np.copyto(target, source)
        count += 1
    return count * source.nbytes / (time.perf_counter() - started) / 1e9


class Transport:
    """One client of one server: ``call()`` sends one request of ``size_mib`` in and out."""

    def __init__(self, kind: str, server: ServerUnderTest, model: str, size_mib: int) -> None:
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient

        self.kind = kind
        self.size = size_mib * MIB
        self.regions: list = []
        values = np.random.default_rng(0).random(self.size // 4, dtype=np.float32)
        module = grpcclient if kind == "grpc" else httpclient
        if kind == "grpc":
            self.client = grpcclient.InferenceServerClient(server.grpc_url)
        else:
            self.client = httpclient.InferenceServerClient(
                server.http_url, connection_timeout=300, network_timeout=300
            )
        tensor = module.InferInput("INPUT0", [values.size], "FP32")
        if kind == "grpc":
            output = module.InferRequestedOutput("OUTPUT0")
        else:  # binary for HTTP; tritonclient asks shm outputs with binary_data false
            output = module.InferRequestedOutput("OUTPUT0", binary_data=kind == "http")
        if kind == "shm":
            in_name, out_name = self._region(values), self._region(None)
            tensor.set_shared_memory(in_name, self.size)
            output.set_shared_memory(out_name, self.size)
        else:
            tensor.set_data_from_numpy(values)
        self.expected = values
        self.model, self.inputs, self.outputs = model, [tensor], [output]

    def _region(self, values: np.ndarray | None) -> str:
        import tritonclient.utils.shared_memory as shm

        name = f"tcshm_bench_{uuid.uuid4().hex[:10]}"
        handle = shm.create_shared_memory_region(name, f"/{name}", self.size)
        if values is not None:
            shm.set_shared_memory_region(handle, [values])
        self.regions.append((name, handle))
        self.client.register_system_shared_memory(name, f"/{name}", self.size)
        return name

    def call(self) -> None:
        result = self.client.infer(self.model, self.inputs, outputs=self.outputs)
        if self.kind != "shm":
            result.as_numpy("OUTPUT0")  # the client holds the output, as an application would

    def check(self) -> None:
        """The answer is right (once, outside the timing)."""
        import tritonclient.utils.shared_memory as shm

        result = self.client.infer(self.model, self.inputs, outputs=self.outputs)
        if self.kind == "shm":
            got = shm.get_contents_as_numpy(self.regions[1][1], np.float32, [self.size // 4])
        else:
            got = result.as_numpy("OUTPUT0")
        if not np.array_equal(got, self.expected):
            raise RuntimeError(f"{self.kind}: wrong output from {self.model}")

    def close(self) -> None:
        import tritonclient.utils.shared_memory as shm

        for name, handle in self.regions:
            self.client.unregister_system_shared_memory(name)
            shm.destroy_shared_memory_region(handle)
        self.client.close()


def measure(call: Callable[[], None], seconds: float, moved: int) -> float:
    """GB/s of ``moved`` bytes per call, calling for ``seconds`` after two warm-up calls."""
    call()
    call()
    count = 0
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds or count < 3:
        call()
        count += 1
        if count >= 100_000:
            break
    return count * moved / elapsed / 1e9


def run_cell(
    server: ServerUnderTest, model: str, kind: str, size_mib: int, seconds: float
) -> float:
    transport = Transport(kind, server, model, size_mib)
    try:
        transport.check()
        return measure(transport.call, seconds, 2 * transport.size)
    except Exception as exc:  # a failed cell is reported as 0, with why
        print(f"{server.label} {model} {kind} {size_mib} MiB failed: {exc}", flush=True)
        return 0.0
    finally:
        transport.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds, best kept")
    parser.add_argument("--quick", action="store_true", help="1 s cells, one round")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    rounds = 1 if args.quick else args.rounds
    tritonserver = find_tool("tritonserver")

    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = build_repositories(Path(tmp))
        servers = {
            "triton-core": ServerUnderTest(
                triton_core_command(
                    ours, "--allow-client-shm=true", f"--http-max-input-size={MAX_MESSAGE}",
                    f"--grpc-max-message-size={MAX_MESSAGE}",
                ),
                "triton-core",
            )
        }  # fmt: skip
        if tritonserver:
            servers["Triton 2.51"] = ServerUnderTest(
                [
                    tritonserver, "--model-repository", str(theirs), "--http-port", "{http}",
                    "--grpc-port", "{grpc}", "--metrics-port", "{metrics}", "--log-info=false",
                    f"--backend-config=python,shm-default-byte-size={MAX_MESSAGE}",
                ],
                "triton",
            )  # fmt: skip
        rows_of = [("triton-core", "identity_py"), ("triton-core", "identity_onnx")]
        if tritonserver:
            rows_of.append(("Triton 2.51", "identity_py"))
        best: dict[tuple[str, str, str, int], float] = {}
        #: every round's value, to pair the servers' cells of one round
        every: dict[tuple[str, str, str, int], list[float]] = {}
        limit = 0.0
        try:
            for server in servers.values():
                server.wait_ready()
            for _ in range(rounds):
                limit = max(limit, memcpy_gbps(seconds))
                for size in SIZES_MIB:
                    for kind in TRANSPORTS:
                        for label, model in rows_of:
                            value = run_cell(servers[label], model, kind, size, seconds)
                            key = (label, model, kind, size)
                            best[key] = max(best.get(key, 0.0), value)
                            every.setdefault(key, []).append(value)
                            print(
                                f"{label} {model} {kind} {size} MiB: {value:.2f} GB/s", flush=True
                            )
        finally:
            for server in servers.values():
                server.stop()

    rows = []
    for label, model in rows_of:
        for kind in TRANSPORTS:
            cells = [f"{best[(label, model, kind, size)]:.2f}" for size in SIZES_MIB]
            rows.append([label, f"`{model}`", kind, *cells])
    table = format_table(
        ["server", "model", "transport", *[f"{size} MiB in+out, GB/s" for size in SIZES_MIB]],
        rows,
    )
    verdicts = [bar_shm(best, limit)]
    if tritonserver:
        verdicts += [bar_versus_triton(best, every, kind) for kind in TRANSPORTS]
    note = (
        f"Identity models, FP32 tensors of 1, 16 and 64 MiB in and out, one request at a time "
        f"from the stock tritonclient (HTTP: the binary tensor extension), best of {rounds} "
        f"round(s) of {seconds:.1f} s per cell, servers on the same host "
        f"({os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}). GB/s counts the bytes in plus the bytes out. "
        f"memcpy (numpy copy of 16 MiB) on this machine: **{limit:.2f} GB/s**. With system "
        "shared memory the input is written into its region once and the answer names an "
        "output region, as `perf_analyzer --shared-memory system` does."
    )
    replace_section(
        args.output,
        "shm-bandwidth",
        f"## Large tensors: HTTP, gRPC and system shared memory\n\n{note}\n\n{table}\n\n"
        + "\n".join(f"- {line}" for line in verdicts),
    )
    print(table)
    print("\n".join(verdicts))


def bar_shm(best: dict[tuple[str, str, str, int], float], limit: float) -> str:
    ratios = {
        model: best[("triton-core", model, "shm", 16)] / limit if limit else 0.0
        for model in ("identity_py", "identity_onnx")
    }
    text = ", ".join(f"`{model}` {ratio:.2f}" for model, ratio in ratios.items())
    verdict = "met" if max(ratios.values()) >= 0.4 else "NOT met"
    return f"16 MiB through system shared memory / memcpy: {text} (bar 0.4: {verdict})"


def bar_versus_triton(
    best: dict[tuple[str, str, str, int], float],
    every: dict[tuple[str, str, str, int], list[float]],
    kind: str,
) -> str:
    """Best against best, and the ratios of the cells measured one after the other in each
    round (what noise on a shared machine moves least), as their median and range."""
    ratios = []
    for size in SIZES_MIB:
        theirs = best[("Triton 2.51", "identity_py", kind, size)]
        mine = best[("triton-core", "identity_py", kind, size)]
        if not theirs:
            ratios.append(f"{size} MiB -")
            continue
        paired = sorted(
            m / t
            for m, t in zip(
                every[("triton-core", "identity_py", kind, size)],
                every[("Triton 2.51", "identity_py", kind, size)],
                strict=True,
            )
            if t
        )
        rounds = (
            f" (per round {statistics.median(paired):.2f}x, {paired[0]:.2f}-{paired[-1]:.2f}x)"
            if len(paired) > 1
            else ""
        )
        ratios.append(f"{size} MiB {mine / theirs:.2f}x{rounds}")
    return f"{kind}, same model.py, triton-core / Triton 2.51, best of rounds: " + ", ".join(ratios)


if __name__ == "__main__":
    main()
