from __future__ import annotations

import pytest

from triton_core.config import config_to_json, normalize, parse_config_text, validate
from triton_core.errors import Status, TritonError

SIMPLE = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
dynamic_batching { priority_levels: 2 default_priority_level: 1
  priority_queue_policy { key: 2 value { default_timeout_microseconds: 100 } } }
version_policy { specific { versions: [ 1, 3 ] } }
"""


def test_parse_error_names_source_line_and_field():
    with pytest.raises(TritonError) as info:
        parse_config_text('name: "x"\nmax_batch_size: 4\nbogus_field: 1\n', "m/config.pbtxt")
    assert info.value.status is Status.INVALID_ARG
    message = info.value.message
    assert "m/config.pbtxt" in message and "3:" in message and "bogus_field" in message


def test_normalize_fills_triton_defaults():
    config = parse_config_text(
        'name: "m" max_batch_size: 4 dynamic_batching {} '
        'input [{name: "I" data_type: TYPE_FP32 dims: [1]}] '
        'output [{name: "O" data_type: TYPE_FP32 dims: [1]}]',
        "test",
    )
    normalize(config, default_cpu_instance_count=2)
    assert config.version_policy.latest.num_versions == 1
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    group = config.instance_group[0]
    assert (group.name, group.count, group.kind) == ("m_0", 2, group.KIND_CPU)
    assert config.optimization.input_pinned_memory.enable


def test_json_rendering_matches_triton():
    config = parse_config_text(SIMPLE, "test")
    normalize(config)
    rendered = config_to_json(config)
    assert rendered["max_batch_size"] == 8
    assert rendered["input"][0]["dims"] == [16]
    assert rendered["output"][0]["dims"] == [-1, 16]
    assert rendered["input"][0]["data_type"] == "TYPE_FP32"
    assert rendered["version_policy"]["specific"]["versions"] == [1, 3]
    batching = rendered["dynamic_batching"]
    assert batching["priority_levels"] == 2
    assert batching["max_queue_delay_microseconds"] == 0
    assert batching["priority_queue_policy"]["2"]["default_timeout_microseconds"] == 100
    assert "sequence_batching" not in rendered and "ensemble_scheduling" not in rendered
    assert rendered["instance_group"][0]["kind"] == "KIND_CPU"
    assert rendered["batch_input"] == [] and rendered["backend"] == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('max_batch_size: -1 input [{name: "I" data_type: TYPE_FP32 dims: [1]}]', "non-negative"),
        (
            'input [{name: "I" dims: [1]}] output [{name: "O" data_type: TYPE_FP32 dims: [1]}]',
            "input 'I' must specify 'data_type'",
        ),
        (
            'input [{name: "I" data_type: TYPE_FP32}] output [{name: "O" data_type: TYPE_FP32 '
            "dims: [1]}]",
            "input 'I' must specify 'dims'",
        ),
        ('input [{name: "I" data_type: TYPE_FP32 dims: [-2]}]', "invalid dimension -2"),
        (
            "max_batch_size: 0 dynamic_batching {} "
            'input [{name: "I" data_type: TYPE_FP32 dims: [1]}]',
            "requires 'max_batch_size'",
        ),
        (
            "max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] } "
            'input [{name: "I" data_type: TYPE_FP32 dims: [1]}]',
            "preferred_batch_size",
        ),
        (
            "instance_group [{ kind: KIND_GPU }] "
            'input [{name: "I" data_type: TYPE_FP32 dims: [1]}]',
            "no GPUs are available",
        ),
    ],
)
def test_invalid_configs_name_model_and_field(text, message):
    config = parse_config_text('name: "bad" ' + text, "test")
    normalize(config)
    with pytest.raises(TritonError) as info:
        validate(config)
    assert message in info.value.message
    assert "'bad'" in info.value.message
