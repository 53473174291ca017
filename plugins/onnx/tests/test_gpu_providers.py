"""GPU execution providers from Triton's ``gpu_execution_accelerator`` config: the options
built on any machine, the load failure without the provider, and the providers on a GPU."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from triton_core_onnx.providers import (
    TENSORRT_PARAMETERS,
    GpuProviders,
    cuda_options,
    gpu_providers,
    tensorrt_options,
)

from triton_core import Status, TritonError

AVAILABLE = ort.get_available_providers()
HAS_TENSORRT = "TensorrtExecutionProvider" in AVAILABLE
HAS_CUDA = "CUDAExecutionProvider" in AVAILABLE


def accelerators(*entries: str) -> str:
    listed = ", ".join(entries)
    return f"optimization {{ execution_accelerators {{ gpu_execution_accelerator [ {listed} ] }} }}"


def tensorrt(**parameters: str) -> str:
    params = " ".join(f'parameters {{ key: "{k}" value: "{v}" }}' for k, v in parameters.items())
    return f'{{ name: "tensorrt" {params} }}'


def test_triton_parameter_names_map_to_ort_options():
    options = tensorrt_options(
        "m",
        {
            "precision_mode": "FP16",
            "max_workspace_size_bytes": "1073741824",
            "trt_engine_cache_enable": "true",
            "trt_engine_cache_path": "/tmp/trt-cache",
            "trt_builder_optimization_level": "3",
        },
    )
    assert options == {
        "trt_fp16_enable": "True",
        "trt_max_workspace_size": "1073741824",
        "trt_engine_cache_enable": "True",
        "trt_engine_cache_path": "/tmp/trt-cache",
        "trt_builder_optimization_level": "3",
    }


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("FP32", {}), ("BF16", {"trt_bf16_enable": "True"}), ("INT8", {"trt_int8_enable": "True"})],
)
def test_precision_modes(mode, expected):
    assert tensorrt_options("m", {"precision_mode": mode}) == expected


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({"precision_mode": "FP8"}, "model 'm': unsupported precision mode 'FP8' is requested"),
        (
            {"trt_fp16": "1"},
            "model 'm': unknown parameter 'trt_fp16' is provided for TensorRT Execution "
            "Accelerator",
        ),
        (
            {"trt_engine_cache_enable": "maybe"},
            "model 'm': TensorRT Execution Accelerator parameter 'trt_engine_cache_enable' "
            "is 'maybe', expected 1/0 or true/false",
        ),
        (
            {"max_workspace_size_bytes": "1GB"},
            "model 'm': TensorRT Execution Accelerator parameter 'max_workspace_size_bytes' "
            "is '1GB', expected an integer >= 0",
        ),
    ],
)
def test_bad_tensorrt_parameters_are_named(parameters, expected):
    with pytest.raises(TritonError) as info:
        tensorrt_options("m", parameters)
    assert info.value.status is Status.INVALID_ARG
    assert info.value.message == expected


def test_every_triton_parameter_has_an_ort_key():
    assert all(key.startswith("trt_") for key, _ in TENSORRT_PARAMETERS.values())
    assert {"max_workspace_size_bytes", "trt_engine_cache_enable", "trt_engine_cache_path"} <= (
        set(TENSORRT_PARAMETERS)
    )


def test_cuda_parameters_pass_through_and_booleans_are_checked():
    assert cuda_options("m", {"cudnn_conv_use_max_workspace": "1", "gpu_mem_limit": "4"}) == {
        "cudnn_conv_use_max_workspace": "1",
        "gpu_mem_limit": "4",
    }
    with pytest.raises(TritonError, match="'do_copy_in_default_stream' is 'x'"):
        cuda_options("m", {"do_copy_in_default_stream": "x"})


def test_providers_per_device_put_tensorrt_first(make_config):
    config = make_config(
        accelerators(
            tensorrt(precision_mode="FP16"),
            '{ name: "cuda" parameters { key: "cudnn_conv_algo_search" value: "HEURISTIC" } }',
        )
    )
    providers = gpu_providers(config, "m", {"gpu_mem_limit": "1024"})
    assert providers == GpuProviders(
        tensorrt={"trt_fp16_enable": "True"},
        cuda={"gpu_mem_limit": "1024", "cudnn_conv_algo_search": "HEURISTIC"},
    )
    assert providers.for_device(1) == [
        ("TensorrtExecutionProvider", {"trt_fp16_enable": "True", "device_id": "1"}),
        (
            "CUDAExecutionProvider",
            {"gpu_mem_limit": "1024", "cudnn_conv_algo_search": "HEURISTIC", "device_id": "1"},
        ),
    ]


def test_an_unknown_accelerator_is_refused_in_tritons_words(make_config):
    with pytest.raises(TritonError) as info:
        gpu_providers(make_config(accelerators('{ name: "openvino" }')), "m", {})
    assert info.value.message == "model 'm': unknown Execution Accelerator 'openvino' is requested"


@pytest.mark.skipif(HAS_TENSORRT, reason="checks the failure without the TensorRT provider")
def test_tensorrt_without_the_provider_fails_naming_the_accelerator(
    builders, model_file, load, specs
):
    builders.mlp(model_file)
    model = load(accelerators(tensorrt(precision_mode="FP16")))
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.gpu(0))
    assert info.value.status is Status.INVALID_ARG
    assert "gpu_execution_accelerator 'tensorrt' needs onnxruntime's TensorRT execution " in (
        info.value.message
    )
    # CPU instances of the same model do not need it
    assert model.create_instance(specs.cpu()).session.get_providers() == ["CPUExecutionProvider"]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_TENSORRT, reason="onnxruntime has no TensorrtExecutionProvider here")
def test_tensorrt_provider_matches_cpu(
    builders, model_file, load, specs, instances_agree, tmp_path
):
    builders.convnet(model_file, width=16)
    cache = tmp_path / "trt-cache"
    model = load(
        accelerators(
            tensorrt(
                precision_mode="FP16",
                trt_engine_cache_enable="true",
                trt_engine_cache_path=str(cache),
            )
        )
        + '\ninstance_group [ { name: "m" kind: KIND_GPU count: 1 gpus: [ 0 ] } ]'
    )
    gpu = model.create_instance(specs.gpu(0))
    assert gpu.session.get_providers()[0] == "TensorrtExecutionProvider"
    cpu = model.create_instance(specs.cpu())
    x = np.random.default_rng(0).standard_normal((4, 3, 64, 64)).astype(np.float32)
    instances_agree(gpu, cpu, x, 5e-2)
    assert any(cache.iterdir()), "trt_engine_cache_enable wrote no engine"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="onnxruntime has no CUDAExecutionProvider here")
def test_cuda_instance_runs_through_an_io_binding(
    builders, model_file, load, specs, instances_agree
):
    builders.convnet(model_file, width=8)
    model = load('instance_group [ { name: "m" kind: KIND_GPU count: 1 gpus: [ 0 ] } ]')
    gpu = model.create_instance(specs.gpu(0))
    assert gpu._io_binding
    cpu = model.create_instance(specs.cpu())
    x = np.random.default_rng(1).standard_normal((3, 3, 64, 64)).astype(np.float32)
    instances_agree(gpu, cpu, x, 1e-3)


@pytest.mark.skipif(HAS_CUDA, reason="checks onnxruntime without its CUDA provider")
def test_where_gpus_are_a_config_without_instance_groups_loads_on_the_cpu(
    tmp_path, monkeypatch, builders
):
    """Where the machine has GPUs but onnxruntime is its CPU build, a model without
    instance groups gets KIND_CPU (``runs_on_gpus``), not a KIND_GPU instance that cannot
    load; an explicit KIND_GPU still fails, naming the missing provider."""
    from triton_core_onnx import plugin

    import triton_core.server.core as core
    from triton_core.testing import InProcessServer, plugin_manager

    monkeypatch.setattr(core, "gpu_count", lambda: 1)
    builders.add_sub(tmp_path / "auto" / "1" / "model.onnx")
    builders.add_sub(tmp_path / "gpu" / "1" / "model.onnx")
    (tmp_path / "gpu" / "config.pbtxt").write_text("instance_group [{ kind: KIND_GPU }]\n")
    plugins = plugin_manager([("onnx", plugin)])
    with InProcessServer([tmp_path], plugins, exit_on_error=False) as served:
        group = served.server.model_config("auto").instance_group[0]
        assert group.kind == group.KIND_CPU and served.server.model_ready("auto")
        assert not served.server.model_ready("gpu")
