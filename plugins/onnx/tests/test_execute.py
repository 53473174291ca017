"""load_model / create_instance / execute through the backend contract."""

from __future__ import annotations

import numpy as np
import pytest

from triton_core.errors import Status, TritonError
from triton_core.tensors.dtypes import NUMPY_DTYPES

IDENTITY_DATATYPES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "BYTES",
)


def sample(datatype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values of a wire datatype as the server holds them (BF16: uint16 bits, BYTES: bytes)."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if datatype == "BYTES":
        words = [b"", b"abc", "caf\u00e9".encode(), b"a\x00b", b"\xe2\x82\xac"]
        array = np.empty(count, dtype=object)
        array[:] = [words[int(i)] + str(seed).encode() for i in rng.integers(0, len(words), count)]
        return array.reshape(shape)
    if datatype == "BOOL":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if datatype == "BF16":
        # bfloat16 bits of a few exact values (1.0, 2.0, -1.0, 0.5 ...)
        bits = np.array([0x3F80, 0x4000, 0xBF80, 0x3F00, 0x0000, 0x7F80], dtype=np.uint16)
        return bits[rng.integers(0, len(bits), shape)]
    dtype = NUMPY_DTYPES[datatype]
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def as_bytes(array: np.ndarray) -> list:
    return [item.encode() if isinstance(item, str) else item for item in array.ravel().tolist()]


def assert_same(datatype: str, got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    if datatype == "BYTES":
        assert got.dtype == object
        assert as_bytes(got) == as_bytes(expected)
    else:
        assert got.dtype == NUMPY_DTYPES[datatype]
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("datatype", IDENTITY_DATATYPES)
def test_identity_every_datatype(builders, model_file, instance, make_request, datatype):
    builders.identity(model_file, datatype, dims=(3,))
    inst = instance()
    x = sample(datatype, (2, 3))
    (response,) = inst.execute([make_request({"INPUT0": (datatype, x)})])
    assert response.error is None
    out = response.output("OUTPUT0")
    assert out.datatype == datatype
    assert_same(datatype, out.data, x)


@pytest.mark.parametrize("datatype", ["FP32", "FP16", "BF16", "BYTES"])
def test_batch_of_three_requests_splits(builders, model_file, instance, make_request, datatype):
    builders.identity(model_file, datatype, dims=(-1,))
    inst = instance()
    inputs = [sample(datatype, (n, 4), seed=n) for n in (1, 3, 2)]
    calls = spy_runs(inst)
    responses = inst.execute([make_request({"INPUT0": (datatype, x)}) for x in inputs])
    assert len(calls) == 1  # one session run for the whole batch
    assert len(responses) == 3
    for response, x in zip(responses, inputs, strict=True):
        assert response.error is None
        assert_same(datatype, response.output("OUTPUT0").data, x)


def test_batch_outputs_are_views_of_one_run(builders, model_file, instance, make_request):
    builders.add_sub(model_file, "FP32", dims=4)
    inst = instance()
    pairs = [
        (sample("FP32", (n, 4), seed=n), sample("FP32", (n, 4), seed=10 + n)) for n in (2, 1, 3)
    ]
    responses = inst.execute(
        [make_request({"INPUT0": ("FP32", a), "INPUT1": ("FP32", b)}) for a, b in pairs]
    )
    sums = [r.output("OUTPUT0").data for r in responses]
    for (a, b), response in zip(pairs, responses, strict=True):
        np.testing.assert_allclose(response.output("OUTPUT0").data, a + b, rtol=1e-6)
        np.testing.assert_allclose(response.output("OUTPUT1").data, a - b, rtol=1e-6)
    # split without copies: every piece is a view on the same batch output
    assert sums[0].base is not None and sums[0].base is sums[1].base is sums[2].base


def test_single_request_inputs_are_not_copied(builders, model_file, instance, make_request):
    builders.add_sub(model_file, "INT32", dims=4)
    inst = instance()
    a = np.arange(8, dtype=np.int32).reshape(2, 4)
    calls = spy_runs(inst)
    inst.execute([make_request({"INPUT0": ("INT32", a), "INPUT1": ("INT32", a)})])
    assert calls[0][1]["INPUT0"] is a


def spy_runs(inst) -> list[tuple[list[str], dict]]:
    """Record (output names, feeds) of every session run (plain or OrtValue) on an instance."""
    calls: list[tuple[list[str], dict]] = []
    session = inst.session
    for method in ("run", "run_with_ort_values"):
        real = getattr(session, method)

        def spy(names, feeds, run_options=None, _real=real):
            calls.append((list(names), dict(feeds)))
            return _real(names, feeds, run_options)

        setattr(session, method, spy)
    return calls


def test_requested_output_subset(builders, model_file, instance, make_request):
    builders.add_sub(model_file, "FP32", dims=4)
    inst = instance()
    a, b = sample("FP32", (2, 4)), sample("FP32", (2, 4), seed=1)
    calls = spy_runs(inst)
    (response,) = inst.execute(
        [make_request({"INPUT0": ("FP32", a), "INPUT1": ("FP32", b)}, outputs=["OUTPUT1"])]
    )
    assert calls[0][0] == ["OUTPUT1"]
    assert [t.name for t in response.outputs] == ["OUTPUT1"]
    np.testing.assert_allclose(response.outputs[0].data, a - b, rtol=1e-6)


def test_batch_asks_ort_for_the_union_of_requested_outputs(
    builders, model_file, instance, make_request
):
    builders.add_sub(model_file, "FP32", dims=4)
    inst = instance()
    data = [(sample("FP32", (1, 4), seed=i), sample("FP32", (1, 4), seed=9 + i)) for i in range(3)]
    calls = spy_runs(inst)
    wanted = [["OUTPUT1"], ["OUTPUT1"], ["OUTPUT1", "OUTPUT1"]]
    responses = inst.execute(
        [
            make_request({"INPUT0": ("FP32", a), "INPUT1": ("FP32", b)}, outputs=w)
            for (a, b), w in zip(data, wanted, strict=True)
        ]
    )
    assert calls[0][0] == ["OUTPUT1"]
    assert [[t.name for t in r.outputs] for r in responses] == wanted

    calls.clear()
    responses = inst.execute(
        [
            make_request({"INPUT0": ("FP32", a), "INPUT1": ("FP32", b)}, outputs=w)
            for (a, b), w in zip(data, [["OUTPUT1"], None, ["OUTPUT0"]], strict=True)
        ]
    )
    assert calls[0][0] == ["OUTPUT0", "OUTPUT1"]
    assert [[t.name for t in r.outputs] for r in responses] == [
        ["OUTPUT1"],
        ["OUTPUT0", "OUTPUT1"],
        ["OUTPUT0"],
    ]


def test_unknown_output(builders, model_file, instance, make_request):
    builders.add_sub(model_file, "FP32", dims=4)
    inst = instance()
    a = sample("FP32", (1, 4))
    good = make_request({"INPUT0": ("FP32", a), "INPUT1": ("FP32", a)})
    bad = make_request({"INPUT0": ("FP32", a), "INPUT1": ("FP32", a)}, outputs=["NOPE"])
    with pytest.raises(TritonError) as info:
        inst.execute([bad])
    assert info.value.status is Status.INVALID_ARG and "NOPE" in info.value.message
    # in a batch only the bad request fails
    responses = inst.execute([good, bad, good])
    assert responses[0].error is None and responses[2].error is None
    assert responses[1].error is not None and "NOPE" in responses[1].error.message


def test_ort_error_becomes_internal(builders, model_file, instance, make_request):
    builders.mlp(model_file, in_features=8)
    inst = instance()
    with pytest.raises(TritonError) as info:
        inst.execute([make_request({"INPUT0": ("FP32", np.zeros((1, 5), np.float32))})])
    assert info.value.status is Status.INTERNAL
    assert info.value.message.startswith("onnxruntime error for model 'm': ")


def test_non_utf8_bytes_are_refused(builders, model_file, instance, make_request):
    builders.identity(model_file, "BYTES", dims=(1,))
    inst = instance()
    x = np.empty((1, 1), dtype=object)
    x[0, 0] = b"\xff\xfe"
    with pytest.raises(TritonError) as info:
        inst.execute([make_request({"INPUT0": ("BYTES", x)})])
    assert info.value.status is Status.INVALID_ARG and "UTF-8" in info.value.message


def test_no_batching_model_runs_requests_one_by_one(builders, model_file, instance, make_request):
    builders.no_batch_identity(model_file, "FP32", dims=(4,))
    inst = instance()
    xs = [sample("FP32", (4,), seed=i) for i in range(3)]
    calls = spy_runs(inst)
    responses = inst.execute([make_request({"INPUT0": ("FP32", x)}) for x in xs])
    assert len(calls) == 3
    for response, x in zip(responses, xs, strict=True):
        np.testing.assert_array_equal(response.output("OUTPUT0").data, x)


def test_requests_with_different_shapes_still_answered(
    builders, model_file, instance, make_request
):
    builders.identity(model_file, "FP32", dims=(-1,))
    inst = instance()
    xs = [sample("FP32", (1, 2)), sample("FP32", (2, 5), seed=1)]
    responses = inst.execute([make_request({"INPUT0": ("FP32", x)}) for x in xs])
    for response, x in zip(responses, xs, strict=True):
        np.testing.assert_array_equal(response.output("OUTPUT0").data, x)


def test_scalar_items_are_reshaped(model_file, instance, make_request):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Neg", ["X"], ["Y"])],
        "scalar",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, model_file)
    inst = instance()  # auto-complete: dims [1] + reshape []
    xs = [np.array([[1.0], [2.0]], np.float32), np.array([[3.0]], np.float32)]
    responses = inst.execute([make_request({"X": ("FP32", x)}) for x in xs])
    for response, x in zip(responses, xs, strict=True):
        np.testing.assert_array_equal(response.output("Y").data, -x)


def test_folder_model(builders, model_dir, load, specs, make_request):
    folder = model_dir / "1" / "model.onnx"
    builders.identity(folder / "model.onnx", "INT32", dims=(2,))
    inst = load(model_path=folder).create_instance(specs.cpu())
    x = np.array([[1, 2]], np.int32)
    (response,) = inst.execute([make_request({"INPUT0": ("INT32", x)})])
    np.testing.assert_array_equal(response.output("OUTPUT0").data, x)


# -- load-time checks --------------------------------------------------------------------------


def test_load_missing_file(model_file, load):
    with pytest.raises(TritonError) as info:
        load("max_batch_size: 1", auto_complete=False)
    assert info.value.status is Status.UNAVAILABLE


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (
            'input [ { name: "INPUT0" data_type: TYPE_FP64 dims: [ 3 ] } ]'
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]',
            ["'INPUT0'", "TYPE_FP64", "TYPE_FP32"],
        ),
        (
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]'
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] } ]',
            ["'OUT'", "OUTPUT0"],
        ),
        (
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ]'
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]',
            ["'IN'", "INPUT0"],
        ),
        ('output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]', ["INPUT0"]),
    ],
)
def test_load_checks_config_against_session(builders, model_file, load, specs, text, parts):
    builders.identity(model_file, "FP32", dims=(3,))
    model = load("max_batch_size: 4 " + text, auto_complete=False)
    with pytest.raises(TritonError) as info:
        model.create_instance(specs.cpu())
    assert info.value.status is Status.INVALID_ARG
    for part in ["'m'", *parts]:
        assert part in info.value.message


def test_finalize_releases_the_session(builders, model_file, instance):
    builders.mlp(model_file)
    inst = instance()
    inst.finalize()
    with pytest.raises(TritonError):
        _ = inst.session
