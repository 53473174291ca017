"""PyTorch models through the server, next to calling the same module directly in-process.

Two measurements, in one run:

1. **Batching throughput**: a small convolutional network (``ConvNet(width=64)``, 316 MFLOP
   per 3x64x64 image) with dynamic batching, in each instance layout (``--layouts``: 1 x 1
   thread, the plugin's default on 2 CPUs, which leaves a core to the frontends and the
   client; 2 x 1; 1 x 2), served to 32 concurrent closed-loop clients (HTTP binary and gRPC),
   against the same TorchScript file called directly in this process on exactly the batches
   the dynamic batcher formed (their sizes come from the model's statistics,
   ``/v2/models/<name>/stats`` ``batch_stats``), and at batch 1. Served and direct windows
   alternate for ``--rounds`` rounds and the best window of each counts, so that load from
   other processes on a shared machine hurts neither side alone. The bar: served >= 0.8 x
   direct on the formed batches.
2. **Per-request overhead at batch 1**: the MLP 64->256->10 as TorchScript and as ONNX (same
   shape), one instance with one thread and no batching, concurrency 1; added = served p50
   latency - direct call p50 latency, per backend (torch and ONNX windows alternate). Also
   in-process: what each backend's ``execute`` adds around its framework call.

Results go to docs/benchmarks.md (section ``torch``).

    python bench/torch_overhead.py [--seconds 3] [--rounds 3] [--layouts 1x1,2x1,1x2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    ROOT,
    ServerUnderTest,
    format_table,
    replace_section,
    run_loadgen,
    triton_core_command,
)

IMAGE = (3, 64, 64)
CONCURRENCY = 32
MAX_BATCH = 32
PROTOCOLS = ("http-binary", "grpc")


def mlp_weight_kib(hidden: int, inputs: int = 64, outputs: int = 10) -> int:
    """FP32 weights and biases of the MLP ``inputs -> hidden -> outputs``, in KiB."""
    return (inputs * hidden + hidden + hidden * outputs + outputs) * 4 // 1024


#: hidden widths of wider ONNX MLPs: 1536 takes about as long per call as the TorchScript
#: MLP; 2048 has 0.6 MiB of weights, more than a per-core L2 cache of 512 KiB
WIDE_HIDDEN = (1536, 2048)
#: the batch-1 models: served name, input name, label
MLPS = {
    "torch": ("mlp_torch", "x", "TorchScript MLP"),
    "onnx": ("mlp_onnx", "INPUT0", "ONNX MLP"),
    **{
        f"onnx_{h}": (f"mlp_onnx_{h}", "INPUT0", f"ONNX MLP, hidden {h} ({mlp_weight_kib(h)} KiB)")
        for h in WIDE_HIDDEN
    },
}

CONVNET_CONFIG = """
backend: "pytorch"
max_batch_size: {max_batch}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] }} ]
dynamic_batching {{ }}
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
"""
TORCH_MLP_CONFIG = """
backend: "pytorch"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "1" } }
"""
EXPORT_MLP_CONFIG = TORCH_MLP_CONFIG + 'default_model_filename: "model.pt2"\n'
ONNX_MLP_CONFIG = """
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
"""


def build_repository(root: Path, width: int, layouts: list[tuple[int, int]]) -> Path:
    """``convnet_<instances>x<threads>`` per layout, and the MLP as TorchScript, .pt2 and ONNX."""
    import torch
    from triton_core_onnx.model_builders import mlp as onnx_mlp
    from triton_core_torch import model_builders as mb

    dims = ", ".join(map(str, IMAGE))
    example = (torch.zeros(2, *IMAGE),)
    convnet = mb.seeded(mb.ConvNet, width=width)
    for instances, threads in layouts:
        name = f"convnet_{instances}x{threads}"
        mb.save(convnet, root / name / "1" / "model.pt", "script", example)
        config = CONVNET_CONFIG.format(max_batch=MAX_BATCH, dims=dims, instances=instances)
        config += (
            f'parameters {{ key: "INTRA_OP_THREAD_COUNT" value {{ string_value: "{threads}" }} }}\n'
        )
        (root / name / "config.pbtxt").write_text(config)
    mb.save(mb.seeded(mb.Mlp), root / "mlp_torch" / "1" / "model.pt", "script", example)
    (root / "mlp_torch" / "config.pbtxt").write_text(TORCH_MLP_CONFIG)
    mlp_example = (torch.zeros(2, 64),)
    mb.save(mb.seeded(mb.Mlp), root / "mlp_export" / "1" / "model.pt2", "export", mlp_example)
    (root / "mlp_export" / "config.pbtxt").write_text(EXPORT_MLP_CONFIG)
    onnx_mlp(root / "mlp_onnx" / "1" / "model.onnx")
    (root / "mlp_onnx" / "config.pbtxt").write_text(ONNX_MLP_CONFIG)
    for hidden in WIDE_HIDDEN:
        onnx_mlp(root / f"mlp_onnx_{hidden}" / "1" / "model.onnx", hidden=hidden)
        (root / f"mlp_onnx_{hidden}" / "config.pbtxt").write_text(ONNX_MLP_CONFIG)
    return root


# -- the batches the server formed ----------------------------------------------------------------


def model_stats(http_url: str, model: str) -> dict:
    """The model's entry of the statistics extension (``/v2/models/<name>/stats``)."""
    with urllib.request.urlopen(f"http://{http_url}/v2/models/{model}/stats", timeout=10) as r:
        return json.loads(r.read())["model_stats"][0]


def batch_counts(http_url: str, model: str) -> dict[int, int]:
    """Executions so far by batch size, from the statistics extension."""
    stats = model_stats(http_url, model)
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


Timings = dict[str, tuple[int, int]]


def timings(http_url: str, model: str) -> Timings:
    """(count, ns) of the statistics' request success time and execute (compute_infer) time."""
    stats = model_stats(http_url, model)["inference_stats"]
    return {key: (stats[key]["count"], stats[key]["ns"]) for key in ("success", "compute_infer")}


def mean_us(after: Timings, before: Timings, key: str) -> float:
    count = after[key][0] - before[key][0]
    return (after[key][1] - before[key][1]) / max(1, count) / 1000


def difference(after: dict[int, int], before: dict[int, int]) -> dict[int, int]:
    return {b: n - before.get(b, 0) for b, n in after.items() if n > before.get(b, 0)}


# -- direct calls ---------------------------------------------------------------------------------


class Direct:
    """The TorchScript file loaded in this process, called as the server's instances would.

    ``callers`` threads (one per served instance, each with its own module and ``threads``
    intra-op threads) call ``module(x)`` at the same time, as the instances do under load.
    """

    def __init__(self, path: Path, threads: int, callers: int = 1) -> None:
        import torch

        self.torch = torch
        self.path = path
        self.threads = threads
        self.callers = callers
        self.modules: list[object] = []
        self.rng = np.random.default_rng(0)

    def _fresh_modules(self) -> None:
        # A module per measured size: TorchScript's profiling executor specialises on the
        # shapes it has seen, and one that saw many runs slower. A fresh one is the best case
        # for the direct side (the served model sees every batch size the batcher forms).
        torch = self.torch
        self.modules = [
            torch.jit.load(str(self.path), map_location="cpu").eval() for _ in range(self.callers)
        ]

    def _loop(self, index: int, x: object, seconds: float, times: list[float]) -> None:
        torch = self.torch
        torch.get_num_threads()  # per-thread OpenMP state first, as the instances do
        torch.set_num_threads(self.threads)
        module = self.modules[index]
        with torch.inference_mode():
            for _ in range(5):  # past the profiling executor's first, profiled calls
                module(x)
            perf = time.perf_counter
            deadline = perf() + seconds
            while (start := perf()) < deadline and len(times) < 1_000_000:
                module(x)
                times.append(perf() - start)

    def seconds_per_batch(self, shape: tuple[int, ...], seconds: float) -> tuple[float, float]:
        """Mean and p50 seconds per call at ``shape`` (all callers at once, fresh modules)."""
        self._fresh_modules()
        x = self.torch.from_numpy(self.rng.random(shape, dtype=np.float32))
        times: list[float] = []
        workers = [
            threading.Thread(target=self._loop, args=(i, x, seconds, times))
            for i in range(self.callers)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return float(np.mean(times)), float(np.median(times))

    def mix_throughput(self, counts: dict[int, int], seconds: float) -> float:
        """Images per second running the batches in ``counts`` back to back."""
        total_images = sum(b * n for b, n in counts.items())
        # The sizes that make up 95% of the executions are measured; the rest (a long tail of
        # rare sizes) take the time of the nearest measured size, scaled per image.
        ordered = sorted(counts, key=lambda b: -counts[b])
        covered, measured = 0, []
        for size in ordered:
            measured.append(size)
            covered += counts[size]
            if covered >= 0.95 * sum(counts.values()) or len(measured) == 8:
                break
        window = max(0.3, seconds / len(measured))
        # Mean call time, as the served side is a throughput over its window too.
        per_batch = {b: self.seconds_per_batch((b, *IMAGE), window)[0] for b in measured}
        total_time = 0.0
        for size, n in counts.items():
            nearest = min(measured, key=lambda m: abs(m - size))
            total_time += n * per_batch[nearest] * size / nearest
        # The callers run batches side by side, as the instances do.
        return self.callers * total_images / total_time


def direct_latency(path: Path, seconds: float) -> float:
    """p50 seconds of ``module(x)`` at batch 1 for the MLP (1 thread)."""
    return Direct(path, 1).seconds_per_batch((1, 64), seconds)[1]


def backend_overhead(repo: Path, backend: str, seconds: float) -> tuple[float, float]:
    """In-process: median ``execute([request])`` time and median model-call time, batch 1.

    The difference is what the backend plugin adds per request around the framework call
    (input wrapping, output conversion, response objects); the frontends and the scheduler
    are the same for every backend.
    """
    from google.protobuf import text_format

    from triton_core.backends.contract import InstanceSpec, ModelContext
    from triton_core.protos import model_config_pb2
    from triton_core.types import InferenceRequest, Tensor

    name = f"mlp_{backend}"
    config = text_format.Parse(
        (repo / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )
    config.name = name
    config.instance_group[0].name = name
    if backend in ("torch", "export"):
        from triton_core_torch.backend import PyTorchBackend as backend_class

        filename, input_name = ("model.pt" if backend == "torch" else "model.pt2"), "x"
    else:
        from triton_core_onnx.backend import OnnxRuntimeBackend as backend_class

        filename, input_name = "model.onnx", "INPUT0"
    version = repo / name / "1"
    context = ModelContext(name, 1, config, repo / name, version, version / filename)
    instance = (
        backend_class()
        .load_model(context)
        .create_instance(InstanceSpec(f"{name}_0", "CPU", 0, name))
    )
    data = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    data.setflags(write=False)  # as the frontends deliver request bodies
    request = InferenceRequest(name, {input_name: Tensor(input_name, "FP32", data)})
    if backend in ("torch", "export"):
        import torch

        # TorchScript: the module's forward; torch.export: the program's module() as users
        # call it (the plugin runs the program's graph once a shape passed its checks)
        forward = instance._forward if backend == "torch" else instance._loaded.owner
        x = torch.from_numpy(data)

        def call() -> None:
            with torch.inference_mode():  # entered per call: the framework call as users make it
                forward(x)
    else:
        session = instance.session
        feed = {input_name: data}

        def call() -> None:
            session.run(None, feed)

    def median(fn) -> float:  # type: ignore[no-untyped-def]
        for _ in range(200):
            fn()
        times = []
        perf = time.perf_counter
        deadline = perf() + seconds
        while (start := perf()) < deadline and len(times) < 1_000_000:
            fn()
            times.append(perf() - start)
        return float(np.median(times))

    def on_instance_thread() -> None:
        # as the server runs it: on a thread of its own, set up by thread_started()
        instance.thread_started()
        measured.append(median(lambda: instance.execute([request])))

    measured: list[float] = []
    thread = threading.Thread(target=on_instance_thread)
    thread.start()
    thread.join()
    model = median(call)
    instance.finalize()
    return measured[0], model


def direct_onnx_latency(path: Path, seconds: float) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {"INPUT0": np.random.default_rng(0).random((1, 64), dtype=np.float32)}
    for _ in range(500):
        session.run(None, feed)
    times: list[float] = []
    perf = time.perf_counter
    deadline = perf() + seconds
    while (start := perf()) < deadline and len(times) < 2_000_000:
        session.run(None, feed)
        times.append(perf() - start)
    return float(np.median(times))


# -- report ---------------------------------------------------------------------------------------


def share(counts: dict[int, int], top: int = 5) -> str:
    """``"16: 30%, 15: 20% ..."``: the batch sizes that served most requests."""
    images = {b: b * n for b, n in counts.items()}
    total = sum(images.values()) or 1
    common = sorted(images.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{b}: {100 * n / total:.0f}%" for b, n in common)


def layout(text: str) -> tuple[int, int]:
    """``"2x1"`` -> 2 instances x 1 intra-op thread."""
    instances, threads = text.lower().split("x")
    return int(instances), int(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement window")
    parser.add_argument("--rounds", type=int, default=3, help="served/direct alternations")
    parser.add_argument("--width", type=int, default=64, help="ConvNet width (channels)")
    parser.add_argument(
        "--layouts",
        default="1x1,2x1,1x2",
        help="convnet instance layouts, INSTANCESxTHREADS, comma-separated",
    )
    parser.add_argument("--quick", action="store_true", help="2 s windows, 2 rounds")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    rounds = 2 if args.quick else args.rounds
    layouts = [layout(text) for text in args.layouts.split(",")]
    cpus = len(os.sched_getaffinity(0))
    image_input = f"x:float32:1x{'x'.join(map(str, IMAGE))}"

    keys = [(lay, p) for lay in layouts for p in PROTOCOLS]
    served: dict[tuple, list[float]] = {k: [] for k in keys}
    direct_mix: dict[tuple, list[float]] = {k: [] for k in keys}
    formed: dict[tuple, dict[int, int]] = {k: {} for k in keys}
    direct_one: dict[tuple[int, int], list[float]] = {lay: [] for lay in layouts}
    latency: dict[tuple[str, str], list[float]] = {}
    #: per window: (mean request time in the server, mean execute time), from the statistics
    in_server: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_repository(Path(tmp), args.width, layouts)
        directs = {
            (n, t): Direct(repo / f"convnet_{n}x{t}" / "1" / "model.pt", t, n) for n, t in layouts
        }
        server = ServerUnderTest(triton_core_command(repo), "torch")
        try:
            server.wait_ready()
            for _ in range(rounds):
                for lay, protocol in keys:
                    name = f"convnet_{lay[0]}x{lay[1]}"
                    url = server.grpc_url if protocol == "grpc" else server.http_url
                    before = batch_counts(server.http_url, name)
                    result = run_loadgen(protocol, url, name, [image_input], CONCURRENCY, seconds)
                    # The loadgen's 1 s warm-up is in the counts too: same batches, more of them.
                    counts = difference(batch_counts(server.http_url, name), before)
                    served[(lay, protocol)].append(result["throughput"])
                    for size, n in counts.items():
                        formed[(lay, protocol)][size] = formed[(lay, protocol)].get(size, 0) + n
                    # The server is idle now: the same batches, called directly.
                    direct_mix[(lay, protocol)].append(directs[lay].mix_throughput(counts, seconds))
                for lay, direct in directs.items():
                    mean, _ = direct.seconds_per_batch((1, *IMAGE), seconds / 2)
                    direct_one[lay].append(direct.callers / mean)
            for _ in range(rounds):  # torch and onnx alternate: both see the same noise
                for protocol in PROTOCOLS:
                    url = server.grpc_url if protocol == "grpc" else server.http_url
                    for backend, (model, name, _) in MLPS.items():
                        before_times = timings(server.http_url, model)
                        result = run_loadgen(
                            protocol, url, model, [f"{name}:float32:1x64"], 1, seconds
                        )
                        after_times = timings(server.http_url, model)
                        latency.setdefault((backend, protocol), []).append(result["p50_us"])
                        in_server.setdefault((backend, protocol), []).append(
                            (
                                mean_us(after_times, before_times, "success"),
                                mean_us(after_times, before_times, "compute_infer"),
                            )
                        )
        finally:
            server.stop()
        wrapper = {
            backend: backend_overhead(repo, backend, 1.0) for backend in ("torch", "export", "onnx")
        }
        mlp_torch = min(direct_latency(repo / "mlp_torch" / "1" / "model.pt", 1) for _ in range(2))
        direct = {"torch": mlp_torch}
        for backend in [b for b in MLPS if b != "torch"]:
            path = repo / MLPS[backend][0] / "1" / "model.onnx"
            direct[backend] = min(direct_onnx_latency(path, 1) for _ in range(2))
        torch_version = directs[layouts[0]].torch.__version__

    # -- tables ------------------------------------------------------------------------------
    rows = []
    verdicts = []
    for lay, protocol in keys:
        best_served = max(served[(lay, protocol)])
        best_direct = max(direct_mix[(lay, protocol)])
        ratio = best_served / best_direct
        per_round = [
            s / d for s, d in zip(served[(lay, protocol)], direct_mix[(lay, protocol)], strict=True)
        ]
        counts = formed[(lay, protocol)]
        mean_batch = sum(b * n for b, n in counts.items()) / max(1, sum(counts.values()))
        rows.append([
            f"{lay[0]} x {lay[1]}", protocol, f"{best_served:,.0f} img/s",
            f"{best_direct:,.0f} img/s", f"{max(direct_one[lay]):,.0f} img/s",
            f"{mean_batch:.1f} ({share(counts)})",
            f"**{ratio:.2f}** ({', '.join(f'{r:.2f}' for r in per_round)})",
            "yes" if ratio >= 0.8 else "no",
        ])  # fmt: skip
        verdicts.append(f"{lay[0]}x{lay[1]} {protocol} {ratio:.2f}")
    batching_table = format_table(
        ["instances x threads", "protocol (c=32)", "served", "direct, same batches",
         "direct, batch 1", "mean batch (share of images)", "ratio (per round)", ">= 0.8"],
        rows,
    )  # fmt: skip

    overhead_rows = []
    added = {}
    for backend, direct_s in direct.items():
        for protocol in PROTOCOLS:
            p50 = min(latency[(backend, protocol)])
            added[(backend, protocol)] = p50 - direct_s * 1e6
            # the window with the best p50: what its requests spent inside the server
            best = latency[(backend, protocol)].index(p50)
            request_us, execute_us = in_server[(backend, protocol)][best]
            overhead_rows.append([
                MLPS[backend][2], protocol,
                f"{p50:,.0f} us", f"{direct_s * 1e6:,.1f} us",
                f"{added[(backend, protocol)]:,.0f} us", f"{execute_us:,.0f} us",
                f"{request_us - execute_us:,.0f} us",
            ])  # fmt: skip
    overhead_table = format_table(
        ["model", "protocol", "served p50, c=1", "direct p50", "added per request",
         "`execute` in the server (mean)", "in the server around `execute` (mean)"],
        overhead_rows,
    )  # fmt: skip

    # per round, torch's added minus an ONNX model's (same direct baselines): paired
    def gaps(onnx: str) -> dict[str, list[float]]:
        return {
            p: [
                t - o - (direct["torch"] - direct[onnx]) * 1e6
                for t, o in zip(latency[("torch", p)], latency[(onnx, p)], strict=True)
            ]
            for p in PROTOCOLS
        }

    wrapper_labels = {
        "torch": "pytorch (TorchScript): `module.forward(x)`",
        "export": "pytorch (torch.export): `program.module()(x)`",
        "onnx": "onnxruntime: `session.run(None, feed)`",
    }
    wrapper_table = format_table(
        [
            "backend: framework call",
            "`execute([request])`",
            "framework call alone",
            "added by the plugin",
        ],
        [
            [
                wrapper_labels[backend],
                f"{execute * 1e6:,.1f} us",
                f"{model * 1e6:,.1f} us",
                f"{(execute - model) * 1e6:,.1f} us",
            ]
            for backend, (execute, model) in wrapper.items()
        ],
    )
    overhead_verdict = "; ".join(
        f"{p}: " + ", ".join(f"{b} {added[(b, p)]:,.0f} us" for b in MLPS) for p in PROTOCOLS
    )

    def gap_verdict(onnx: str) -> str:
        return "; ".join(
            f"{p}: median {np.median(g):+,.0f} us ({', '.join(f'{x:+,.0f}' for x in g)})"
            for p, g in gaps(onnx).items()
        )

    note = (
        f"{cpus} CPUs ({platform.processor() or platform.machine()}), Python "
        f"{platform.python_version()}, torch {torch_version}; load generator bench/loadgen.py "
        f"on the same host. `ConvNet(width={args.width})` scripted to TorchScript, 3x64x64 FP32 "
        f"images (48 KiB per request), max_batch_size {MAX_BATCH}, `dynamic_batching {{ }}`, "
        f"per instance layout. {rounds} rounds of {seconds:g} s windows (after 1 s warm-up), "
        f'served and direct alternating; best window of each. "Direct, same batches" runs '
        f"the batch sizes the server formed in that window (from `batch_stats`) back to back "
        f"through `module(x)` under `torch.inference_mode()`, from as many threads as "
        f"instances with the same intra-op threads (mean call time per size, a freshly "
        f"loaded module per size)."
    )
    text = (
        f"## PyTorch backend\n\n{note}\n\n{batching_table}\n\n"
        f"Ratios: {', '.join(verdicts)}. Served images share the CPUs with the frontends and "
        f"the load generator, direct ones do not: the ratio falls where compute threads and "
        f"frontend work compete for cores. 1 x 1 is the plugin's default layout on 2 CPUs "
        f"(one CPU left to the frontends); the other layouts give both CPUs to compute.\n\n"
        f"### Per-request overhead at batch 1\n\nMLP 64->256->10 as TorchScript and as ONNX, "
        f"and wider ONNX MLPs: hidden {WIDE_HIDDEN[0]}, whose direct call takes about as long "
        f"as the TorchScript MLP's, and hidden {WIDE_HIDDEN[1]}, whose weights are more than "
        f"a per-core L2 cache of 512 KiB. 1 instance, 1 thread, no batching, c=1, best of "
        f"{rounds} alternating windows; added = served p50 - direct p50 ({overhead_verdict}). "
        f"Torch's added minus an ONNX model's, window by window against the same direct "
        f"times: "
        + "; ".join(f"{MLPS[b][2]}: {gap_verdict(b)}" for b in MLPS if b != "torch")
        + ". The last two columns come from the model's statistics in the best window: the "
        f"backend's `execute` as the server timed it (framework call and plugin, on the "
        f"instance thread, between other processes' work), and the rest of the request's "
        f"time in the server (validation, the hand-over to the instance thread and back, "
        f"finishing the response), which is the same code for every backend.\n\n"
        f"{overhead_table}\n\n"
        f"What each backend's `execute` does around its framework call, measured in-process "
        f"at batch 1 on an instance's own thread (median of 1 s). The torch.export program's "
        f"`module()` checks its inputs and passes them through pytree specs on every call; "
        f"the plugin does that once per input shapes and then runs the program's graph, so "
        f"its `execute` takes less than the call users make:\n\n{wrapper_table}"
    )
    replace_section(args.output, "torch", text)
    print(text)


if __name__ == "__main__":
    main()
