"""Auto-complete, config checks, profile choice and buffer plans on recorded descriptions."""

from __future__ import annotations

import dataclasses

import pytest
from triton_core_tensorrt.description import (
    EngineDescription,
    ProfileDescription,
    TensorDescription,
)
from triton_core_tensorrt.planning import (
    auto_complete,
    binding_plan,
    check_config,
    choose_profile,
    deserialize_error,
    resolve_output_shape,
    served_outputs,
)

from triton_core import DataType, Status, TritonError


def tensors(section):
    return [(t.name, DataType.Name(t.data_type), list(t.dims)) for t in section]


def completed(description, config):
    auto_complete(config, description, "m")
    return config


# -- auto-complete ---------------------------------------------------------------------------


def test_an_empty_config_is_completed_from_the_engine(describe, make_config):
    config = completed(describe("convnet"), make_config())
    assert tensors(config.input) == [("INPUT0", "TYPE_FP32", [3, 64, 64])]
    assert tensors(config.output) == [("OUTPUT0", "TYPE_FP32", [10])]
    # the profile's largest batch, not the kit's default of 4 (as Triton's TensorRT backend)
    assert config.max_batch_size == 64
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"


def test_max_batch_size_comes_from_the_profiles_the_instance_groups_use(describe, make_config):
    mlp = describe("mlp_two_profiles")
    assert completed(mlp, make_config()).max_batch_size == 16
    one = 'instance_group [ { kind: KIND_GPU profile: [ "1" ] } ]'
    assert completed(mlp, make_config(one)).max_batch_size == 128
    both = 'instance_group [ { profile: [ "0" ] }, { profile: [ "1" ] } ]'
    assert completed(mlp, make_config(both)).max_batch_size == 128


def test_a_profile_the_engine_lacks_is_refused(describe, make_config):
    with pytest.raises(TritonError) as info:
        completed(
            describe("mlp_two_profiles"), make_config('instance_group [ { profile: ["2"] } ]')
        )
    assert info.value.message == (
        "unable to autofill for 'm', configuration specified invalid profile 2 . "
        "Number of profiles supported by TensorRT engine: 2"
    )


def test_a_larger_max_batch_size_than_the_engine_takes_is_refused(describe, make_config):
    with pytest.raises(TritonError) as info:
        completed(describe("mlp_two_profiles"), make_config("max_batch_size: 32"))
    assert info.value.message == (
        "autofill failed for model 'm': configuration specified max-batch 32 but TensorRT "
        "engine only supports max-batch 16"
    )


def test_full_rank_dims_in_the_config_mean_no_batching(describe, make_config):
    config = completed(
        describe("mlp_two_profiles"),
        make_config('input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 64 ] } ]'),
    )
    assert config.max_batch_size == 0
    assert config.WhichOneof("scheduling_choice") is None
    assert tensors(config.output) == [("OUTPUT0", "TYPE_FP32", [-1, 10])]


def test_contradicting_dims_are_refused(describe, make_config):
    text = """
        input [ { name: "INPUT0" dims: [ -1, 64 ] } ]
        output [ { name: "OUTPUT0" dims: [ 10 ] } ]
    """
    with pytest.raises(TritonError) as info:
        completed(describe("mlp_two_profiles"), make_config(text))
    assert "contradicting each other in terms of whether batching is supported" in (
        info.value.message
    )


def test_a_listed_tensor_gets_what_it_leaves_out(describe, make_config):
    config = completed(describe("convnet"), make_config('output [ { name: "OUTPUT0" } ]'))
    assert tensors(config.output) == [("OUTPUT0", "TYPE_FP32", [10])]
    assert tensors(config.input) == [("INPUT0", "TYPE_FP32", [3, 64, 64])]


def test_a_tensor_the_engine_lacks_is_named(describe, make_config):
    with pytest.raises(TritonError) as info:
        completed(describe("convnet"), make_config('input [ { name: "images" } ]'))
    assert info.value.status is Status.INVALID_ARG
    assert info.value.message == (
        "model 'm': the config lists input 'images', which the TensorRT engine does not "
        "have (its inputs: INPUT0)"
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"dtype": "FP8"}, "output 'OUTPUT0' has TensorRT type FP8, which has no Triton datatype"),
        ({"format": "CHW32"}, "output 'OUTPUT0' uses the CHW32 I/O format"),
        ({"is_shape_tensor": True}, "output 'OUTPUT0' is a shape tensor"),
    ],
)
def test_tensors_this_backend_cannot_serve_are_refused(describe, make_config, change, expected):
    convnet = describe("convnet")
    output = dataclasses.replace(convnet.outputs["OUTPUT0"], **change)
    description = dataclasses.replace(convnet, tensors=(convnet.inputs["INPUT0"], output))
    with pytest.raises(TritonError) as info:
        completed(description, make_config())
    assert info.value.status is Status.UNSUPPORTED
    assert expected in info.value.message


# -- checks at load --------------------------------------------------------------------------


def test_a_completed_config_passes_the_load_checks(describe, make_config):
    convnet = describe("convnet")
    check_config(completed(convnet, make_config()), convnet, "m")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'input [ { name: "INPUT0" data_type: TYPE_FP16 dims: [3, 64, 64] } ]',
            "input 'INPUT0' data-type is TYPE_FP16 in the config but TYPE_FP32 in the "
            "TensorRT engine",
        ),
        (
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [3, 32, 32] } ]',
            "input 'INPUT0' has dims [3, 32, 32] in the config",
        ),
        ("max_batch_size: 65", "configuration specified max-batch 65 but TensorRT engine"),
        ("input: []", "the TensorRT engine's input 'INPUT0' is missing from the config"),
    ],
)
def test_a_config_the_engine_contradicts_fails_to_load(describe, make_config, text, expected):
    convnet = describe("convnet")
    config = completed(convnet, make_config())
    override = make_config(text)
    if "input" in text:
        del config.input[:]
        config.input.extend(override.input)
    if override.max_batch_size:
        config.max_batch_size = override.max_batch_size
    with pytest.raises(TritonError) as info:
        check_config(config, convnet, "m")
    assert info.value.status is Status.INVALID_ARG
    assert expected in info.value.message


# -- profile choice and shape checks per batch --------------------------------------------------


@pytest.mark.parametrize(("batch", "profile"), [(1, 0), (8, 0), (16, 0), (17, 1), (128, 1)])
def test_the_nearest_profile_that_holds_the_batch_is_chosen(describe, batch, profile):
    chosen = choose_profile("m", describe("mlp_two_profiles"), (0, 1), {"INPUT0": (batch, 64)})
    assert chosen == profile


def test_a_batch_outside_every_profile_is_a_400_naming_input_and_bounds(describe):
    with pytest.raises(TritonError) as info:
        choose_profile("m", describe("mlp_two_profiles"), (0, 1), {"INPUT0": (129, 64)})
    assert info.value.status is Status.INVALID_ARG
    assert "failed to find any Optimization Profile among [ [0] [1]]" in info.value.message
    assert "input 'INPUT0'" in info.value.message


def test_an_instance_only_uses_its_own_profiles(describe):
    with pytest.raises(TritonError) as info:
        choose_profile("m", describe("mlp_two_profiles"), (1,), {"INPUT0": (4, 64)})
    assert info.value.message == (
        "model 'm' input 'INPUT0': model expected the shape of dimension 0 to be between 16 "
        "and 128 but received 4 (shape [4, 64], profile bounds [16, 64] to [128, 64])"
    )


def test_a_wrong_image_size_names_the_dimension(describe):
    with pytest.raises(TritonError) as info:
        choose_profile("m", describe("convnet"), (0,), {"INPUT0": (2, 3, 32, 64)})
    assert "shape of dimension 2 to be between 64 and 64 but received 32" in info.value.message


def test_a_wrong_rank_is_named(describe):
    with pytest.raises(TritonError) as info:
        choose_profile("m", describe("convnet"), (0,), {"INPUT0": (2, 3, 64)})
    assert "model expected 4 dimensions but received 3 dimensions" in info.value.message


def test_output_shapes_must_be_resolved():
    assert resolve_output_shape("m", "OUTPUT0", [4, 10]) == (4, 10)
    with pytest.raises(TritonError) as info:
        resolve_output_shape("m", "OUTPUT0", [-1, 10])
    assert "shape of output 'OUTPUT0' unresolved ([-1, 10])" in info.value.message


# -- buffers ---------------------------------------------------------------------------------


def test_buffers_hold_the_largest_shape_of_the_instances_profiles(describe):
    sizes = {b.name: (b.is_input, b.nbytes) for b in binding_plan("m", describe("convnet"), (0,))}
    assert sizes == {"INPUT0": (True, 64 * 3 * 64 * 64 * 4), "OUTPUT0": (False, 64 * 10 * 4)}
    mlp = describe("mlp_two_profiles")
    assert {b.name: b.nbytes for b in binding_plan("m", mlp, (0,))} == {
        "INPUT0": 16 * 64 * 4,
        "OUTPUT0": 16 * 10 * 4,
    }
    assert {b.name: b.nbytes for b in binding_plan("m", mlp, (0, 1))} == {
        "INPUT0": 128 * 64 * 4,
        "OUTPUT0": 128 * 10 * 4,
    }


def test_a_data_dependent_output_cannot_be_planned(describe):
    convnet = describe("convnet")
    profile = dataclasses.replace(convnet.profiles[0], max_outputs={"OUTPUT0": (-1, 10)})
    with pytest.raises(TritonError) as info:
        binding_plan("m", dataclasses.replace(convnet, profiles=(profile,)), (0,))
    assert info.value.status is Status.UNSUPPORTED
    assert "largest shape of output 'OUTPUT0' in profile 0 is unknown" in info.value.message


# -- engines from elsewhere --------------------------------------------------------------------

#: TensorRT's own log lines for a plan from another version and from another GPU
OTHER_VERSION = (
    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization assertion "
    "stdVersionRead == kSERIALIZATION_VERSION failed.Version tag does not match. Note: "
    "Current Version: 239, Serialized Engine Version: 236)"
)
OTHER_GPU = (
    "IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file is "
    "generated on an incompatible device, expecting compute 8.6 got compute 9.0, please "
    "rebuild.)"
)


def test_an_engine_from_another_tensorrt_version_says_so():
    error = deserialize_error("m", "/r/m/1/model.plan", [OTHER_VERSION], "10.13.0", (9, 0))
    assert error.status is Status.INVALID_ARG
    assert error.message.startswith(
        "unable to load model 'm': unable to create TensorRT engine from '/r/m/1/model.plan': "
        "the engine was built with another TensorRT version (this server has TensorRT 10.13.0)"
    )
    assert "Serialized Engine Version: 236" in error.message


def test_an_engine_from_another_gpu_says_so():
    error = deserialize_error("m", "model.plan", [OTHER_GPU], "10.13.0", (9, 0))
    assert "the engine was built for another GPU (this device has compute capability 9.0)" in (
        error.message
    )


def test_an_unreadable_engine_says_tensorrt_could_not_read_it():
    error = deserialize_error("m", "model.plan", [], "10.13.0", None)
    assert error.message.endswith("TensorRT could not deserialize the engine")


# -- the description's JSON form ---------------------------------------------------------------


def test_descriptions_round_trip_through_json(describe):
    for name in ("convnet", "mlp_two_profiles"):
        description = describe(name)
        assert EngineDescription.from_json(description.to_json()) == description
        assert all(isinstance(t, TensorDescription) for t in description.tensors)


def test_an_unknown_description_format_is_refused(describe):
    text = describe("convnet").to_json().replace('"format": 1', '"format": 2')
    with pytest.raises(ValueError, match="format 2"):
        EngineDescription.from_json(text)


# -- sequences ---------------------------------------------------------------------------------


def with_sequence_tensors(description: EngineDescription) -> EngineDescription:
    """The MLP engine plus a START control input and an implicit state in and out."""
    extra = (
        TensorDescription("START", "INPUT", "INT32", (-1, 1)),
        TensorDescription("STATE_IN", "INPUT", "FLOAT", (-1, 4)),
        TensorDescription("STATE_OUT", "OUTPUT", "FLOAT", (-1, 4)),
    )
    profiles = tuple(
        dataclasses.replace(
            p,
            inputs={
                **p.inputs,
                "START": ((1, 1), (8, 1), (16, 1)),
                "STATE_IN": ((1, 4), (8, 4), (16, 4)),
            },
        )
        for p in description.profiles
    )
    return dataclasses.replace(description, tensors=description.tensors + extra, profiles=profiles)


SEQUENCE = """
sequence_batching {
  control_input [ {
    name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ]
  } ]
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [4] } ]
}
"""


def test_sequence_tensors_stay_out_of_input_and_output(describe, make_config):
    description = with_sequence_tensors(describe("mlp_two_profiles"))
    config = completed(description, make_config(SEQUENCE))
    assert [t.name for t in config.input] == ["INPUT0"]
    assert [t.name for t in config.output] == ["OUTPUT0"]
    assert config.WhichOneof("scheduling_choice") == "sequence_batching"
    check_config(config, description, "m")  # START and STATE_IN are fed, not missing
    assert served_outputs(config, "m") == {"OUTPUT0": "FP32", "STATE_OUT": "FP32"}


def test_a_static_batch_one_engine_gets_max_batch_size_one(make_config):
    shape = (1, 3, 224, 224)
    description = EngineDescription(
        tensors=(
            TensorDescription("images", "INPUT", "HALF", shape),
            TensorDescription("logits", "OUTPUT", "HALF", (1, 1000)),
        ),
        profiles=(ProfileDescription({"images": (shape, shape, shape)}, {"logits": (1, 1000)}),),
    )
    config = completed(description, make_config())
    # Triton reads the first dim as the batch: kMAX of profile 0 is 1
    assert config.max_batch_size == 1
    assert config.WhichOneof("scheduling_choice") is None
    assert tensors(config.input) == [("images", "TYPE_FP16", [3, 224, 224])]
    check_config(config, description, "m")
    assert choose_profile("m", description, (0,), {"images": shape}) == 0
