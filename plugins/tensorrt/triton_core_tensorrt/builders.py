"""Build TensorRT engines from ONNX models with TensorRT's builder (GPU tests, benchmarks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from triton_core_tensorrt.runtime import import_tensorrt

#: input name -> one (min, opt, max) shape triple per optimization profile
ProfileShapes = Mapping[str, Sequence[tuple[Sequence[int], Sequence[int], Sequence[int]]]]


def build_engine(
    onnx_path: Path,
    plan_path: Path,
    profiles: ProfileShapes,
    *,
    fp16: bool = False,
    workspace_bytes: int = 1 << 30,
) -> Path:
    """Parse ``onnx_path``, add the optimization profiles and write the serialized engine."""
    trt = import_tensorrt(onnx_path.name)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_path.read_bytes()):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError(f"TensorRT could not parse {onnx_path}: {'; '.join(errors)}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    count = max((len(ranges) for ranges in profiles.values()), default=0)
    for index in range(count):
        profile = builder.create_optimization_profile()
        for name, ranges in profiles.items():
            lo, opt, hi = ranges[index]
            profile.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError(f"TensorRT could not build an engine from {onnx_path}")
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    plan_path.write_bytes(bytes(serialized))
    return plan_path
