"""Property-based fuzzing of config parsing: text, JSON (a client's load override), checks.

Whatever the text, parsing, normalising and validating a config end in a config or a
TritonError that says what was wrong; never another exception. Examples are bounded so the
suite stays fast; what they find becomes a regression test below.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triton_core.config import (
    ModelConfig,
    config_from_json,
    config_to_json,
    normalize,
    parse_config_text,
    validate,
)
from triton_core.errors import TritonError
from triton_core.protos.model_config_pb2 import DataType, ModelInstanceGroup

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: pieces of config text that parse, to combine into texts that get deeper than random bytes
FRAGMENTS = (
    'name: "m"',
    'backend: "onnxruntime"',
    'platform: "ensemble"',
    "max_batch_size: 8",
    "max_batch_size: -1",
    'input [ { name: "I" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]',
    'output [ { name: "O" data_type: TYPE_INT32 dims: [ 2 ] } ]',
    'input { name: "S" data_type: TYPE_INT64 dims: [ 1 ] is_shape_tensor: true }',
    "dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }",
    "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
    "sequence_batching { max_sequence_idle_microseconds: 5000000 }",
    'sequence_batching { control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START'
    " fp32_false_true: [ 0, 1 ] } ] } ] }",
    "sequence_batching { oldest { max_candidate_sequences: 4 } }",
    "instance_group [ { count: 2 kind: KIND_CPU } ]",
    "instance_group [ { kind: KIND_GPU gpus: [ 0, 7 ] } ]",
    "version_policy { specific { versions: [ 1, 3 ] } }",
    'parameters { key: "k" value { string_value: "v" } }',
    'ensemble_scheduling { step [ { model_name: "a" model_version: -1 input_map { key: "x"'
    ' value: "y" } } ] }',
    "response_cache { enable: true }",
    "model_transaction_policy { decoupled: true }",
)


def _parse_checked(text: str) -> None:
    try:
        config = parse_config_text(text, "fuzz")
        normalize(config)
        validate(config)
        config_to_json(config)
    except TritonError as error:
        assert error.message


@FUZZ
@given(st.text(max_size=400))
def test_any_text_is_a_config_or_a_clear_error(text):
    _parse_checked(text)


@FUZZ
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12), st.text(max_size=20))
def test_combinations_of_valid_fragments_are_checked_without_surprises(fragments, noise):
    _parse_checked("\n".join(fragments))
    _parse_checked("\n".join(fragments) + noise)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
_config_keys = st.sampled_from(
    [
        "name",
        "max_batch_size",
        "input",
        "output",
        "dynamic_batching",
        "sequence_batching",
        "instance_group",
        "parameters",
        "version_policy",
        "platform",
    ]
)


@FUZZ
@given(st.dictionaries(_config_keys, _json_values, max_size=6))
def test_a_clients_json_override_is_a_config_or_a_clear_error(document):
    try:
        config = config_from_json(json.dumps(document))
        normalize(config)
        validate(config)
    except TritonError as error:
        assert error.message


_dims = st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=5)


@st.composite
def configs(draw: st.DrawFn) -> ModelConfig:
    """Structurally valid protos with field values anywhere in their types' ranges."""
    config = ModelConfig(name=draw(st.text(max_size=8)))
    config.max_batch_size = draw(st.integers(min_value=-(2**31), max_value=2**31 - 1))
    for repeated in (config.input, config.output):
        for _ in range(draw(st.integers(0, 3))):
            tensor = repeated.add(name=draw(st.sampled_from(["", "A", "B"])))
            tensor.data_type = draw(st.sampled_from(list(DataType.values())))
            tensor.dims.extend(draw(_dims))
    if draw(st.booleans()):
        batching = config.dynamic_batching
        batching.preferred_batch_size.extend(draw(st.lists(st.integers(-5, 2**31 - 1), max_size=4)))
        batching.priority_levels = draw(st.integers(0, 2**32 - 1))
        batching.default_priority_level = draw(st.integers(0, 2**32 - 1))
    if draw(st.booleans()):
        group = config.instance_group.add(count=draw(st.integers(-(2**31), 2**31 - 1)))
        group.kind = draw(st.sampled_from(list(ModelInstanceGroup.Kind.values())))
        group.gpus.extend(draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3)))
    if draw(st.booleans()):
        config.sequence_batching.max_sequence_idle_microseconds = draw(st.integers(0, 2**64 - 1))
    return config


@FUZZ
@given(configs(), st.integers(0, 8))
def test_any_field_values_normalise_and_validate_or_fail_clearly(config, gpu_count):
    try:
        normalize(config, gpu_count=gpu_count)
        validate(config, gpu_count=gpu_count)
        config_to_json(config)
    except TritonError as error:
        assert error.message


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,  # nesting deeper than Python's recursion limit
        '{"parameters":' * 5_000,
        '{"max_batch_size": 1e30}',
        '{"input": [{"dims": [1e400]}]}',
        '{"name": 1e999}',
    ],
)
def test_hostile_json_overrides_are_refused_with_a_message(text):
    with pytest.raises(TritonError, match="failed to parse model configuration"):
        config_from_json(text)
