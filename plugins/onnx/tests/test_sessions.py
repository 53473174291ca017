"""Session settings: thread defaults, config parameters, graph level, providers (CPU/GPU)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from triton_core_onnx import plugin
from triton_core_onnx import settings as ort_settings
from triton_core_onnx.backend import OnnxRuntimeBackend

from triton_core.errors import Status, TritonError
from triton_core.plugins.registry import BackendRegistry

HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()

GROUPS = """
instance_group [ {{ name: "m" kind: KIND_CPU count: {count} }} ]
"""


def options_of(inst) -> ort.SessionOptions:
    return inst.session.get_session_options()


def config_entry(options: ort.SessionOptions, key: str) -> str | None:
    try:
        return options.get_session_config_entry(key)
    except RuntimeError:  # ORT raises for a key that was never set
        return None


def test_plugin_registers_the_backend():
    registry = BackendRegistry()
    plugin.triton_register_backends(registry)
    registration = registry.get("onnxruntime")
    assert registration is not None and registration.value is OnnxRuntimeBackend
    assert registry.backend_for_platform("onnxruntime_onnx") == "onnxruntime"
    assert OnnxRuntimeBackend.default_model_filename == "model.onnx"
    assert OnnxRuntimeBackend.default_cpu_instance_count == 2


def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    points = [ep for ep in entry_points(group="triton_core") if ep.name == "onnx"]
    if not points:
        pytest.skip("triton-core-onnx is not installed (pip install -e plugins/onnx)")
    assert points[0].value == "triton_core_onnx.plugin"
    assert points[0].load() is plugin


@pytest.mark.parametrize(("cpus", "count", "threads"), [(8, 2, 4), (8, 3, 2), (2, 4, 1), (1, 1, 1)])
def test_thread_defaults_share_the_cpus(
    builders, model_file, instance, monkeypatch, cpus, count, threads
):
    builders.mlp(model_file)
    monkeypatch.setattr(ort_settings, "_available_cpus", lambda: cpus)
    inst = instance(GROUPS.format(count=count))
    options = options_of(inst)
    assert options.intra_op_num_threads == threads
    assert options.inter_op_num_threads == 1
    assert config_entry(options, "session.intra_op.allow_spinning") == "0"
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def test_instance_count_over_groups(builders, model_file, load, monkeypatch):
    builders.mlp(model_file)
    monkeypatch.setattr(ort_settings, "_available_cpus", lambda: 12)
    model = load(
        """
        instance_group [
          { name: "a" kind: KIND_CPU count: 2 },
          { name: "b" kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }
        ]
        """
    )
    assert model.instance_count == 6
    assert model.settings.intra_op_threads == 2


def test_config_parameters_are_applied(builders, model_file, instance):
    builders.mlp(model_file)
    inst = instance(
        """
        parameters { key: "intra_op_thread_count" value: { string_value: "3" } }
        parameters { key: "inter_op_thread_count" value: { string_value: "2" } }
        parameters { key: "execution_mode" value: { string_value: "1" } }
        parameters { key: "enable_mem_arena" value: { string_value: "0" } }
        parameters { key: "enable_mem_pattern" value: { string_value: "false" } }
        parameters {
          key: "session.use_device_allocator_for_initializers" value: { string_value: "1" }
        }
        optimization { graph { level: 1 } }
        """
    )
    options = options_of(inst)
    assert options.intra_op_num_threads == 3
    assert options.inter_op_num_threads == 2
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.enable_cpu_mem_arena is False
    assert options.enable_mem_pattern is False
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert config_entry(options, "session.use_device_allocator_for_initializers") == "1"
    # an explicit thread count leaves ORT's spinning default alone
    assert config_entry(options, "session.intra_op.allow_spinning") is None


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (-1, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
        (0, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        (1, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
        (2, ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
    ],
)
def test_graph_optimization_level(builders, model_file, instance, level, expected):
    builders.mlp(model_file)
    inst = instance(f"optimization {{ graph {{ level: {level} }} }}")
    assert options_of(inst).graph_optimization_level == expected


def test_arena_shrinkage_is_a_run_option(builders, model_file, instance, make_request):
    builders.mlp(model_file, in_features=4)
    key = "memory.enable_memory_arena_shrinkage"
    inst = instance(f'parameters {{ key: "{key}" value: {{ string_value: "cpu:0" }} }}')
    assert inst._run_options.get_run_config_entry(key) == "cpu:0"
    (response,) = inst.execute([make_request({"INPUT0": ("FP32", np.ones((2, 4), np.float32))})])
    assert response.output("OUTPUT0").data.shape == (2, 10)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("execution_mode", "2"),
        ("intra_op_thread_count", "many"),
        ("inter_op_thread_count", "-1"),
        ("enable_mem_arena", "maybe"),
        ("enable_mem_pattern", ""),
    ],
)
def test_invalid_parameters_fail_the_load(builders, model_file, load, key, value):
    builders.mlp(model_file)
    with pytest.raises(TritonError) as info:
        load(f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}')
    assert info.value.status is Status.INVALID_ARG
    assert "'m'" in info.value.message and key in info.value.message


def test_unsupported_accelerator(builders, model_file, load):
    builders.mlp(model_file)
    with pytest.raises(TritonError) as info:
        load(
            "optimization { execution_accelerators {"
            ' cpu_execution_accelerator [ { name: "openvino" } ] } }'
        )
    assert info.value.status is Status.UNSUPPORTED and "openvino" in info.value.message


def test_cpu_instances_use_only_the_cpu_provider(builders, model_file, instance):
    builders.mlp(model_file)
    assert instance().session.get_providers() == ["CPUExecutionProvider"]


@pytest.mark.skipif(HAS_CUDA, reason="checks the failure without a CUDA provider")
def test_gpu_instance_without_cuda_fails_clearly(builders, model_file, load, specs):
    builders.mlp(model_file)
    model = load()
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.gpu(0))
    message = info.value.message
    assert "'m'" in message and "CUDA execution provider is not available" in message


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="onnxruntime has no CUDAExecutionProvider here")
def test_gpu_instance_matches_cpu(builders, model_file, load, specs, instances_agree):
    builders.mlp(model_file, in_features=16)
    model = load(
        """
        parameters { key: "gpu_mem_limit" value: { string_value: "1073741824" } }
        instance_group [ { name: "m" kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
        """
    )
    gpu = model.create_instance(specs.gpu(0))
    assert gpu.session.get_providers()[0] == "CUDAExecutionProvider"
    assert gpu.session.get_provider_options()["CUDAExecutionProvider"]["device_id"] == "0"
    cpu = model.create_instance(specs.cpu())
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    instances_agree(gpu, cpu, x, 1e-3)
