"""TensorRT vs ONNX Runtime (CUDA provider) vs PyTorch (CUDA) serving one ConvNet on a GPU.

The ResNet-like ConvNet (``triton_core_onnx.model_builders.convnet``, width 64, 3x64x64
images: compute-bound on a GPU) is served by each GPU backend that this machine has, one
KIND_GPU instance each, with dynamic batching up to 64: TensorRT from a plan built here with
TensorRT's builder (FP16), ONNX Runtime with its CUDA provider from the same ONNX file, and
PyTorch from a TorchScript module with the same layers. A closed-loop client
(bench/loadgen.py, gRPC) measures throughput and p50 latency at concurrency 1 and 64; the
bar is TensorRT >= 1.5 x ONNX Runtime CUDA throughput at c=64, as a ratio of one run.

A backend this machine lacks (tensorrt not installed, onnxruntime without CUDA, torch without
CUDA) is listed with the reason instead of a number. Results go to docs/benchmarks.md
(section ``gpu-backends``) and, with ``--json``, to a file.

    python bench/gpu_backends.py [--seconds 10] [--width 64] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from bench.common import (  # noqa: E402
    ROOT,
    ServerUnderTest,
    format_table,
    replace_section,
    run_loadgen,
    triton_core_command,
)

IMAGE = (3, 64, 64)
MAX_BATCH = 64
CONCURRENCIES = (1, 64)
#: backend label -> (model name, input name)
MODELS = {
    "TensorRT (FP16)": ("convnet_trt", "INPUT0"),
    "ONNX Runtime CUDA": ("convnet_ort", "INPUT0"),
    "PyTorch CUDA": ("convnet_torch", "x"),
}
BATCHING = f"dynamic_batching {{ max_queue_delay_microseconds: 200 }}\nmax_batch_size: {MAX_BATCH}"
GPU_GROUP = "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]"


def add_trt(repo: Path, onnx: Path) -> None:
    from triton_core_tensorrt.builders import build_engine

    profile = ((1, *IMAGE), (MAX_BATCH // 2, *IMAGE), (MAX_BATCH, *IMAGE))
    build_engine(onnx, repo / "convnet_trt" / "1" / "model.plan", {"INPUT0": [profile]}, fp16=True)
    config = f'backend: "tensorrt"\n{BATCHING}\n{GPU_GROUP}\n'
    (repo / "convnet_trt" / "config.pbtxt").write_text(config)


def add_ort(repo: Path, onnx: Path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeError("onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)")
    (repo / "convnet_ort" / "1").mkdir(parents=True)
    (repo / "convnet_ort" / "1" / "model.onnx").write_bytes(onnx.read_bytes())
    config = f'backend: "onnxruntime"\n{BATCHING}\n{GPU_GROUP}\n'
    (repo / "convnet_ort" / "config.pbtxt").write_text(config)


def add_torch(repo: Path, width: int) -> None:
    import torch
    from triton_core_torch import model_builders as mb

    if not torch.cuda.is_available():
        raise RuntimeError("torch has no CUDA device")
    module = mb.seeded(mb.ConvNet, width=width)
    mb.save(module, repo / "convnet_torch" / "1" / "model.pt", "script", (torch.zeros(2, *IMAGE),))
    dims = ", ".join(map(str, IMAGE))
    config = (
        f'backend: "pytorch"\n{BATCHING}\n{GPU_GROUP}\n'
        f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
    )
    (repo / "convnet_torch" / "config.pbtxt").write_text(config)


def build_repository(repo: Path, width: int) -> dict[str, str]:
    """Write every model this machine can serve; label -> why not, for the others."""
    from triton_core_onnx.model_builders import convnet

    onnx = convnet(repo.parent / "convnet.onnx", width=width, size=IMAGE[1])
    builders: dict[str, Callable[[], None]] = {
        "TensorRT (FP16)": lambda: add_trt(repo, onnx),
        "ONNX Runtime CUDA": lambda: add_ort(repo, onnx),
        "PyTorch CUDA": lambda: add_torch(repo, width),
    }
    missing = {}
    for label, build in builders.items():
        try:
            build()
        except Exception as exc:  # ImportError, no provider, no device, a failed build
            missing[label] = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
    return missing


def measure(
    server: ServerUnderTest, models: dict[str, tuple[str, str]], seconds: float
) -> dict[str, dict[int, dict]]:
    """label -> concurrency -> loadgen summary, for each of ``models`` on ``server``."""
    results: dict[str, dict[int, dict]] = {}
    for label, (model, input_name) in models.items():
        shape = "1x" + "x".join(map(str, IMAGE))
        results[label] = {
            c: run_loadgen(
                "grpc", server.grpc_url, model, [f"{input_name}:float32:{shape}"], c, seconds
            )
            for c in CONCURRENCIES
        }
    return results


def report(results: dict[str, dict[int, dict]], missing: dict[str, str], width: int) -> str:
    rows = []
    for label in MODELS:
        if label in missing:
            rows.append([label, "not run", "", "", "", missing[label]])
            continue
        one, many = results[label][1], results[label][64]
        rows.append(
            [
                label,
                f"{one['throughput']:.0f}",
                f"{one['p50_us'] / 1000:.2f}",
                f"{many['throughput']:.0f}",
                f"{many['p50_us'] / 1000:.2f}",
                "",
            ]
        )
    headers = ["backend", "c=1 infer/s", "c=1 p50 ms", "c=64 infer/s", "c=64 p50 ms", "note"]
    text = [
        "## GPU backends",
        "",
        f"ConvNet width {width}, 3x64x64 FP32 images, one KIND_GPU instance, dynamic batching "
        f"up to {MAX_BATCH}, gRPC closed loop (bench/gpu_backends.py).",
        "",
        format_table(headers, rows),
    ]
    trt, ort = results.get("TensorRT (FP16)"), results.get("ONNX Runtime CUDA")
    if trt and ort:
        ratio = trt[64]["throughput"] / max(ort[64]["throughput"], 1e-9)
        verdict = "meets" if ratio >= 1.5 else "misses"
        text += [
            "",
            f"TensorRT / ONNX Runtime CUDA at c=64: {ratio:.2f}x ({verdict} the 1.5x bar).",
        ]
    return "\n".join(text) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--width", type=int, default=64, help="ConvNet width (channels)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument(
        "--no-docs", action="store_true", help="print the section instead of writing docs"
    )
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        missing = build_repository(repo, args.width)
        results: dict[str, dict[int, dict]] = {}
        if len(missing) < len(MODELS):
            server = ServerUnderTest(triton_core_command(repo), "gpu-backends")
            try:
                server.wait_ready(timeout=300)
                served = {k: v for k, v in MODELS.items() if k not in missing}
                results = measure(server, served, args.seconds)
            finally:
                server.stop()
    section = report(results, missing, args.width)
    print(section)
    if args.json:
        args.json.write_text(json.dumps({"results": results, "missing": missing}, indent=2))
    if not args.no_docs:
        replace_section(ROOT / "docs" / "benchmarks.md", "gpu-backends", section)


if __name__ == "__main__":
    main()
