"""load_model / create_instance / execute through the backend contract."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
import torch

from triton_core.errors import Status, TritonError
from triton_core.tensors.dtypes import NUMPY_DTYPES

HAS_CUDA = torch.cuda.is_available()

NUMERIC = (
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16",
)  # fmt: skip


def config(datatype: str = "FP32", dims: str = "[ 3 ]", max_batch_size: int = 8) -> str:
    name = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    return f"""
      max_batch_size: {max_batch_size}
      input [ {{ name: "INPUT__0" data_type: {name} dims: {dims} }} ]
      output [ {{ name: "OUTPUT__0" data_type: {name} dims: {dims} }} ]
    """


def sample(datatype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if datatype == "BOOL":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if datatype == "BF16":
        bits = np.array([0x3F80, 0x4000, 0xBF80, 0x3F00, 0x0000, 0x7F80], dtype=np.uint16)
        return bits[rng.integers(0, len(bits), shape)]
    dtype = NUMPY_DTYPES[datatype]
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("datatype", NUMERIC)
def test_identity_every_numeric_datatype_without_a_copy(
    builders, model_file, instance, make_request, datatype
):
    builders.save(builders.Identity(), model_file, "script")
    inst = instance(config(datatype), auto_complete=False)
    x = sample(datatype, (2, 3))
    x.setflags(write=False)  # as the frontends hand request bodies over
    (response,) = inst.execute([make_request({"INPUT__0": (datatype, x)})])
    assert response.error is None
    out = response.output("OUTPUT__0")
    assert out.datatype == datatype
    assert out.data.dtype == NUMPY_DTYPES[datatype]
    np.testing.assert_array_equal(out.data, x)
    # Identity returns its input tensor: numpy -> torch -> numpy shared one buffer.
    assert np.shares_memory(out.data, x)


@pytest.mark.parametrize("fmt", ["script", "trace", "export"])
def test_three_requests_run_as_one_forward_and_split(
    builders, model_file, export_file, instance, make_request, fmt
):
    probe = builders.BatchProbe(builders.seeded(builders.Mlp, in_features=4, out_features=2))
    path = export_file if fmt == "export" else model_file
    builders.save(probe, path, fmt, (torch.zeros(2, 4),))
    text = """
      max_batch_size: 8
      input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
      output [
        { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] },
        { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 1 ] }
      ]
    """
    inst = instance(text, auto_complete=False, path=path)
    x = np.arange(24, dtype=np.float32).reshape(6, 4) / 10
    requests = [
        make_request({"x": ("FP32", x[:1])}),
        make_request({"x": ("FP32", x[1:4])}),
        make_request({"x": ("FP32", x[4:])}, outputs=["OUTPUT__1"]),
    ]
    responses = inst.execute(requests)
    expected = probe(torch.from_numpy(x))[0].detach().numpy()
    assert [r.error for r in responses] == [None, None, None]
    np.testing.assert_allclose(responses[0].output("OUTPUT__0").data, expected[:1], rtol=1e-5)
    np.testing.assert_allclose(responses[1].output("OUTPUT__0").data, expected[1:4], rtol=1e-5)
    assert [t.name for t in responses[2].outputs] == ["OUTPUT__1"]
    for response, rows in zip(responses, (1, 3, 2), strict=True):
        sizes = response.output("OUTPUT__1").data
        assert sizes.shape == (rows, 1)
        assert (sizes == 6).all()  # every request saw the one forward of batch 6


def test_inputs_bound_by_forward_argument_names(builders, model_file, instance, make_request):
    builders.save(builders.AddSub(), model_file, "script")
    inst = instance(
        """
        max_batch_size: 4
        input [
          { name: "y" data_type: TYPE_INT32 dims: [ 2 ] },
          { name: "x" data_type: TYPE_INT32 dims: [ 2 ] }
        ]
        output [
          { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 2 ] },
          { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 2 ] }
        ]
        """,
        auto_complete=False,
    )
    x = np.array([[10, 20]], dtype=np.int32)
    y = np.array([[1, 2]], dtype=np.int32)
    (response,) = inst.execute([make_request({"x": ("INT32", x), "y": ("INT32", y)})])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, x + y)
    np.testing.assert_array_equal(response.output("OUTPUT__1").data, x - y)


def test_inputs_in_config_order_when_names_follow_no_convention(
    builders, model_file, instance, make_request, caplog
):
    builders.save(builders.AddSub(), model_file, "script")
    with caplog.at_level(logging.WARNING):
        inst = instance(
            """
            max_batch_size: 4
            input [
              { name: "first" data_type: TYPE_FP32 dims: [ 1 ] },
              { name: "second" data_type: TYPE_FP32 dims: [ 1 ] }
            ]
            output [
              { name: "sum" data_type: TYPE_FP32 dims: [ 1 ] },
              { name: "difference" data_type: TYPE_FP32 dims: [ 1 ] }
            ]
            """,
            auto_complete=False,
        )
    assert "config order" in caplog.text
    a = np.array([[5.0]], dtype=np.float32)
    b = np.array([[3.0]], dtype=np.float32)
    (response,) = inst.execute([make_request({"second": ("FP32", b), "first": ("FP32", a)})])
    assert response.output("sum").data[0, 0] == 8.0
    assert response.output("difference").data[0, 0] == 2.0


def test_dict_outputs_bound_by_name(builders, model_file, instance, make_request):
    builders.save(builders.DictOutputs(), model_file, "script")
    inst = instance(
        """
        max_batch_size: 4
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [
          { name: "scaled" data_type: TYPE_FP32 dims: [ 2 ] },
          { name: "sum" data_type: TYPE_FP32 dims: [ 1 ] }
        ]
        """,
        auto_complete=False,
    )
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    (response,) = inst.execute([make_request({"x": ("FP32", x)})])
    np.testing.assert_array_equal(response.output("scaled").data, 2 * x)
    np.testing.assert_array_equal(response.output("sum").data, [[3.0], [7.0]])


def test_dict_output_with_an_unknown_name_fails_naming_the_keys(
    builders, model_file, instance, make_request
):
    builders.save(builders.DictOutputs(), model_file, "script")
    inst = instance(
        """
        max_batch_size: 4
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "total" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """,
        auto_complete=False,
    )
    with pytest.raises(TritonError) as info:
        inst.execute([make_request({"x": ("FP32", np.ones((1, 2), np.float32))})])
    assert "'total'" in info.value.message and "sum, scaled" in info.value.message


def test_two_inputs_of_different_datatypes(builders, export_file, instance, make_request):
    example = (torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.int64))
    builders.save(builders.Mixed(), export_file, "export", example)
    inst = instance(path=export_file)
    x = np.full((2, 4), 1.5, dtype=np.float32)
    y = np.arange(8, dtype=np.int64).reshape(2, 4)
    (response,) = inst.execute([make_request({"x": ("FP32", x), "y": ("INT64", y)})])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, x * y)


def test_list_of_strings_in_and_out(builders, model_file, instance, make_request):
    builders.save(builders.Strings(), model_file, "script")
    inst = instance(
        """
        max_batch_size: 4
        input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] reshape: { shape: [ ] } } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ 1 ] reshape: { shape: [ ] } } ]
        """,
        auto_complete=False,
    )
    words = np.array([b"caf\xc3\xa9", b"ab"], dtype=object)  # as validate() reshapes [2, 1]
    words2 = np.array([b"x"], dtype=object)
    responses = inst.execute(
        [make_request({"text": ("BYTES", words)}), make_request({"text": ("BYTES", words2)})]
    )
    out = responses[0].output("OUTPUT__0").data
    assert out.shape == (2, 1)
    # TorchScript's str.upper() changes ASCII letters only.
    assert out.ravel().tolist() == ["CAF\u00e9".encode(), b"AB"]
    assert responses[1].output("OUTPUT__0").data.ravel().tolist() == [b"X"]


def test_bytes_input_for_a_tensor_argument_fails_the_load(builders, model_file, load, specs):
    builders.save(builders.Identity(), model_file, "script")
    model = load(config("BYTES"), auto_complete=False)
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.cpu())
    message = info.value.message
    assert info.value.status == Status.INVALID_ARG
    assert "'INPUT__0'" in message and "TYPE_STRING" in message and "List[str]" in message


def test_config_inputs_that_do_not_match_fail_naming_both(builders, model_file, load, specs):
    builders.save(builders.AddSub(), model_file, "script")
    model = load(config("FP32"), auto_complete=False)
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.cpu())
    message = info.value.message
    assert "1 input(s) (INPUT__0)" in message and "forward(x: Tensor, y: Tensor)" in message

    model = load(
        """
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] },
                { name: "INPUT__5" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """,
        auto_complete=False,
    )
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.cpu())
    assert "'INPUT__5' refers to argument 5" in info.value.message


def test_output_index_beyond_the_tuple_fails_the_load(builders, model_file, load, specs):
    builders.save(builders.AddSub(), model_file, "script")
    model = load(
        """
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] },
                { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT__2" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """,
        auto_complete=False,
    )
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.cpu())
    assert "'OUTPUT__2' refers to output 2" in info.value.message
    assert "returns 2 output(s)" in info.value.message


def test_export_config_datatype_mismatch_fails_the_load(builders, export_file, load, specs):
    builders.save(builders.Identity(), export_file, "export", (torch.zeros(2, 3),))
    model = load(config("FP64"), auto_complete=False, path=export_file)
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.cpu())
    message = info.value.message
    assert "'INPUT__0'" in message and "TYPE_FP64" in message and "TYPE_FP32" in message


def test_forward_raising_fails_the_request_and_the_instance_keeps_working(
    builders, model_file, instance, make_request
):
    builders.save(builders.Raising(), model_file, "script")
    inst = instance(config("FP32"), auto_complete=False)
    bad = np.array([[-1.0, 0.0, 0.0]], dtype=np.float32)
    with pytest.raises(TritonError) as info:
        inst.execute([make_request({"INPUT__0": ("FP32", bad)})])
    assert info.value.status == Status.INTERNAL
    assert "model 'm'" in info.value.message
    assert "negative input rejected by the model" in info.value.message
    good = np.zeros((1, 3), dtype=np.float32)
    (response,) = inst.execute([make_request({"INPUT__0": ("FP32", good)})])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, good + 1)


def test_output_datatype_mismatch_is_reported(builders, model_file, instance, make_request):
    builders.save(builders.Identity(), model_file, "script")
    inst = instance(
        """
        max_batch_size: 4
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP16 dims: [ 3 ] } ]
        """,
        auto_complete=False,
    )
    with pytest.raises(TritonError) as info:
        inst.execute([make_request({"INPUT__0": ("FP32", np.zeros((1, 3), np.float32))})])
    message = info.value.message
    assert "TYPE_FP16" in message and "TYPE_FP32" in message and "'OUTPUT__0'" in message


def test_export_program_guards_reject_what_the_config_lets_through(
    builders, export_file, instance, make_request
):
    # x and y share a dynamic width: dims [-1] lets mismatched widths past the core's checks,
    # and the program's own guard rejects them with PyTorch's message.
    width = torch.export.Dim("width", min=1, max=64)
    batch = torch.export.Dim("batch", min=1, max=64)
    shapes = ({0: batch, 1: width}, {0: batch, 1: width})
    program = torch.export.export(
        builders.AddSub(), (torch.zeros(2, 3), torch.zeros(2, 3)), dynamic_shapes=shapes
    )
    torch.export.save(program, str(export_file))
    inst = instance(path=export_file)
    good = make_request({"x": ("FP32", np.ones((1, 4), np.float32)),
                         "y": ("FP32", np.ones((1, 4), np.float32))})  # fmt: skip
    (response,) = inst.execute([good])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, np.full((1, 4), 2.0))
    bad = make_request({"x": ("FP32", np.ones((1, 4), np.float32)),
                        "y": ("FP32", np.ones((1, 5), np.float32))})  # fmt: skip
    with pytest.raises(TritonError) as info:
        inst.execute([bad])
    assert info.value.status == Status.INVALID_ARG
    assert "model 'm'" in info.value.message
    assert "y.size()[1] == x.size()[1]" in info.value.message
    (response,) = inst.execute([good])  # still serving


def test_max_batch_size_beyond_the_programs_batch_bound_fails_the_load(
    builders, export_file, load, specs
):
    program = torch.export.export(
        builders.Identity(),
        (torch.zeros(2, 3),),
        dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=3)},),
    )
    torch.export.save(program, str(export_file))
    model = load(config("FP32"), auto_complete=False, path=export_file)
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.cpu())
    assert "max_batch_size 8" in info.value.message and "3" in info.value.message


def test_thread_count_per_instance_thread(builders, model_file, load, specs, make_request):
    builders.save(builders.Identity(), model_file, "script")
    text = (
        config("FP32")
        + """
      parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "1" } }
    """
    )
    model = load(text, auto_complete=False)
    assert model.settings.intra_op_threads == 1 and not model.settings.default_threads
    inst = model.create_instance(specs.cpu())
    seen = {}

    def run() -> None:
        inst.execute([make_request({"INPUT__0": ("FP32", np.zeros((1, 3), np.float32))})])
        seen["threads"] = torch.get_num_threads()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen["threads"] == 1


def test_default_threads_split_the_cpus_between_instances(builders, model_file, load, monkeypatch):
    from triton_core_torch import settings

    builders.save(builders.Identity(), model_file, "script")
    text = config("FP32") + 'instance_group [ { name: "m" kind: KIND_CPU count: 2 } ]'
    for cpus, expected in ((1, 1), (2, 1), (4, 1), (9, 4), (16, 7)):
        monkeypatch.setattr(settings, "available_cpus", lambda cpus=cpus: cpus)
        model = load(text, auto_complete=False)
        assert model.settings.default_threads
        assert model.settings.intra_op_threads == expected, cpus
    # one instance: every CPU but the frontends' one
    monkeypatch.setattr(settings, "available_cpus", lambda: 16)
    assert settings.default_intra_op_threads(1) == 15


def test_meaningless_parameters_are_ignored_with_a_warning(builders, export_file, load, caplog):
    builders.save(builders.Identity(), export_file, "export", (torch.zeros(2, 3),))
    text = """
      parameters { key: "ENABLE_NVFUSER" value { string_value: "true" } }
      parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "true" } }
      parameters { key: "ENABLE_CACHE_CLEANING" value { string_value: "true" } }
    """
    with caplog.at_level(logging.WARNING):
        load(text, path=export_file)
    for key in ("ENABLE_NVFUSER", "DISABLE_OPTIMIZED_EXECUTION", "ENABLE_CACHE_CLEANING"):
        assert key in caplog.text


def test_bad_parameter_values_fail_the_load(builders, model_file, load):
    builders.save(builders.Identity(), model_file, "script")
    with pytest.raises(TritonError) as info:
        load(
            config("FP32") + 'parameters { key: "INFERENCE_MODE" value { string_value: "maybe" } }',
            auto_complete=False,
        )
    assert "'INFERENCE_MODE'" in info.value.message and "'maybe'" in info.value.message


@pytest.mark.parametrize("fmt", ["script", "export"])
def test_no_grad_mode_and_optimized_execution_off(
    builders, model_file, export_file, instance, make_request, fmt
):
    path = export_file if fmt == "export" else model_file
    builders.save(builders.seeded(builders.Mlp, in_features=3), path, fmt, (torch.zeros(2, 3),))
    text = """
      max_batch_size: 8
      input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
      output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
      parameters { key: "INFERENCE_MODE" value { string_value: "false" } }
      parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "true" } }
    """
    inst = instance(text, auto_complete=False, path=path)
    (response,) = inst.execute([make_request({"x": ("FP32", np.ones((2, 3), np.float32))})])
    assert response.output("OUTPUT__0").data.shape == (2, 10)


@pytest.mark.parametrize("inference_mode", [True, False])
def test_thread_started_sets_the_grad_mode_once_on_that_thread(
    builders, model_file, instance, make_request, inference_mode
):
    builders.save(builders.Identity(), model_file, "script")
    extra = (
        ""
        if inference_mode
        else ('parameters { key: "INFERENCE_MODE" value { string_value: "false" } }')
    )
    inst = instance(config("FP32") + extra, auto_complete=False)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    seen = {}

    def instance_thread() -> None:
        inst.thread_started()  # as the server's instance pool calls it
        seen["inference"] = torch.is_inference_mode_enabled()
        seen["grad"] = torch.is_grad_enabled()
        (response,) = inst.execute([make_request({"INPUT__0": ("FP32", x)})])
        seen["out"] = response.output("OUTPUT__0").data

    thread = threading.Thread(target=instance_thread)
    thread.start()
    thread.join()
    assert seen["inference"] is inference_mode
    assert seen["grad"] is False
    np.testing.assert_array_equal(seen["out"], x)
    # other threads keep their modes, and execute on them sets the mode per call
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    (response,) = inst.execute([make_request({"INPUT__0": ("FP32", x)})])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, x)
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()


def test_weight_sharing_loads_once_per_device(builders, model_file, load, specs):
    builders.save(builders.Identity(), model_file, "script")
    text = config("FP32") + (
        'parameters { key: "ENABLE_WEIGHT_SHARING" value { string_value: "true" } }'
    )
    model = load(text, auto_complete=False)
    a = model.create_instance(specs.cpu(0))
    b = model.create_instance(specs.cpu(1))
    assert a._loaded is b._loaded
    a.finalize()
    b.finalize()
    model.finalize()


@pytest.mark.skipif(HAS_CUDA, reason="checks the failure without CUDA")
def test_gpu_instance_without_cuda_fails_clearly(builders, model_file, load, specs):
    builders.save(builders.Identity(), model_file, "script")
    model = load(config("FP32"), auto_complete=False)
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.gpu(0))
    message = info.value.message
    assert info.value.status == Status.INVALID_ARG
    assert "'m'" in message and "KIND_GPU" in message and "KIND_CPU" in message


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="torch sees no CUDA device")
@pytest.mark.parametrize("fmt", ["script", "export"])
def test_gpu_instance_matches_cpu(
    builders, model_file, export_file, load, specs, make_request, fmt
):
    path = export_file if fmt == "export" else model_file
    mlp = builders.seeded(builders.Mlp, in_features=16)
    builders.save(mlp, path, fmt, (torch.zeros(2, 16),))
    model = load(
        """
        max_batch_size: 8
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
        instance_group [ { name: "m" kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
        """,
        auto_complete=False,
        path=path,
    )
    gpu = model.create_instance(specs.gpu(0))
    assert gpu.device == torch.device("cuda", 0)
    cpu = model.create_instance(specs.cpu())
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    requests = [make_request({"x": ("FP32", x[:1])}), make_request({"x": ("FP32", x[1:])})]
    on_gpu = [r.output("OUTPUT__0").data for r in gpu.execute(requests)]
    on_cpu = [r.output("OUTPUT__0").data for r in cpu.execute(requests)]
    for a, b in zip(on_gpu, on_cpu, strict=True):
        assert isinstance(a, np.ndarray)
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="torch sees no CUDA device")
@pytest.mark.parametrize("datatype", ["FP16", "BF16", "BOOL", "INT64"])
def test_gpu_identity_datatypes(builders, model_file, load, specs, make_request, datatype):
    builders.save(builders.Identity(), model_file, "script")
    model = load(
        config(datatype) + 'instance_group [ { name: "m" kind: KIND_GPU count: 2 gpus: [ 0 ] } ]',
        auto_complete=False,
    )
    inst = model.create_instance(specs.gpu(0))
    x = sample(datatype, (4, 3))
    (response,) = inst.execute([make_request({"INPUT__0": (datatype, x)})])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, x)


def _on_instance_thread(inst, call):  # type: ignore[no-untyped-def]
    """``call()`` on a thread set up as the server's instance pool sets one up."""
    outcome: dict = {}

    def run() -> None:
        inst.thread_started()
        try:
            outcome["value"] = call()
        except TritonError as error:
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return outcome


def _outcome(call):  # type: ignore[no-untyped-def]
    try:
        return {"value": call()}
    except TritonError as error:
        return {"error": error}


@pytest.mark.parametrize(
    ("model", "output_type", "inputs", "outputs"),
    [
        ("Identity", "TYPE_FP32", {"INPUT__0": np.ones((2, 3), np.float32)}, None),
        ("Identity", "TYPE_FP32", {"INPUT__0": np.ones((1, 3), np.float32)}, ["OUTPUT__0"]),
        ("Identity", "TYPE_FP32", {"INPUT__0": np.ones((1, 3), np.float32)}, ["nope"]),
        ("Identity", "TYPE_FP32", {"other": np.ones((1, 3), np.float32)}, None),
        ("Identity", "TYPE_FP16", {"INPUT__0": np.ones((1, 3), np.float32)}, None),
        ("Raising", "TYPE_FP32", {"INPUT__0": -np.ones((1, 3), np.float32)}, None),
        ("Raising", "TYPE_FP32", {"INPUT__0": np.zeros((1, 3), np.float32)}, None),
    ],
    ids=["plain", "output-named", "unknown-output", "wrong-input", "dtype", "raises", "ok"],
)
def test_a_single_request_on_the_instance_thread_answers_as_the_general_path(
    builders, model_file, instance, make_request, model, output_type, inputs, outputs
):
    """One request through a one-in, one-out model takes a shorter path on the instance's
    thread; its answers and errors are the general path's."""
    builders.save(getattr(builders, model)(), model_file, "script")
    inst = instance(
        f"""
        max_batch_size: 4
        input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] }} ]
        output [ {{ name: "OUTPUT__0" data_type: {output_type} dims: [ 3 ] }} ]
        """,
        auto_complete=False,
    )
    assert inst._single is not None

    def call():  # type: ignore[no-untyped-def]
        request = make_request({name: ("FP32", data) for name, data in inputs.items()}, outputs)
        return inst.execute([request])

    general_names = inst._output_names
    runs = []
    inst._output_names = lambda request: runs.append(1) or general_names(request)
    fast = _on_instance_thread(inst, call)
    took_general_path = bool(runs)
    general = _outcome(call)
    assert runs, "off the instance thread the general path runs"
    assert took_general_path is (outputs == ["nope"] or "other" in inputs)
    assert fast.keys() == general.keys()
    if "error" in general:
        assert (fast["error"].status, fast["error"].message) == (
            general["error"].status,
            general["error"].message,
        )
        return
    (fast_response,), (general_response,) = fast["value"], general["value"]
    assert [(t.name, t.datatype) for t in fast_response.outputs] == [
        (t.name, t.datatype) for t in general_response.outputs
    ]
    for a, b in zip(fast_response.outputs, general_response.outputs, strict=True):
        np.testing.assert_array_equal(a.data, b.data)


def test_moving_an_exported_program_to_a_device_leaves_the_cpu_instances_program(
    builders, export_file, load, specs, make_request
):
    """The move to a GPU rewrites the program it is given; the program the model keeps for
    its CPU instances stays on the CPU (seen here with the meta device, which any machine
    has)."""
    mlp = builders.seeded(builders.Mlp, in_features=16)
    builders.save(mlp, export_file, "export", (torch.zeros(2, 16),))
    model = load(
        """
        max_batch_size: 8
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
        """,
        auto_complete=False,
        path=export_file,
    )
    moved = model.load(torch.device("meta"))
    assert all(t.device.type == "meta" for t in moved.owner.state_dict().values())
    cpu = model.create_instance(specs.cpu())
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    (answer,) = cpu.execute([make_request({"x": ("FP32", x)})])
    expected = mlp(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(answer.output("OUTPUT__0").data, expected, rtol=1e-4, atol=1e-5)
