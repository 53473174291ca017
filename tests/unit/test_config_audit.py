"""The config audit: every ModelConfig field has a policy, the docs table is the policy table,
and a load refuses or warns about the fields this server does not honour."""

from __future__ import annotations

import logging
import re

import pytest

from tests.support import ROOT
from triton_core.config import parse_config_text, validate
from triton_core.config.audit import FIELDS, audit, field_paths, markdown_table, set_fields
from triton_core.errors import TritonError

BASE = """
name: "m"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def test_every_field_of_the_proto_has_a_policy_and_no_policy_is_stale():
    paths = list(field_paths())
    assert len(paths) > 150  # the walk reaches nested messages and map values
    assert set(paths) == set(FIELDS), set(paths) ^ set(FIELDS)


def test_the_docs_table_is_the_policy_table():
    page = (ROOT / "docs" / "model_config.md").read_text()
    generated = re.search(r"<!-- generated: begin -->\n(.*)<!-- generated: end -->", page, re.S)
    assert generated is not None
    assert generated.group(1) == markdown_table()


def test_set_fields_walks_repeated_messages_and_map_values():
    config = parse_config_text(
        BASE
        + 'parameters { key: "k" value { string_value: "v" } }\n'
        + "dynamic_batching { priority_levels: 2 default_priority_level: 1 "
        + "priority_queue_policy { key: 1 value { max_queue_size: 3 } } }",
        "test",
    )
    paths = list(set_fields(config))
    assert "input.dims" in paths and "parameters.string_value" in paths
    assert "dynamic_batching.priority_queue_policy.max_queue_size" in paths
    assert len(paths) == len(set(paths))


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ('ensemble_scheduling { step [ { model_name: "x" model_namespace: "ns" } ] }',
         "ensemble_scheduling.step.model_namespace"),
        ('instance_group [ { count: 1 profile: "0" } ]', "instance_group.profile"),
        ('model_operations { op_library_filename: "libop.so" }', "model_operations"),
        ('runtime: "libtriton_x.so"', "runtime"),
    ],
)  # fmt: skip
def test_refused_fields_fail_the_load_naming_the_field(extra, field):
    config = parse_config_text(BASE + extra, "test")
    with pytest.raises(TritonError) as info:
        audit(config, frozenset(), "python")
    assert f"model 'm': config field '{field}' is not supported" in info.value.message


def test_shape_tensors_are_refused():
    text = BASE.replace("dims: [ 4 ] }", "dims: [ 4 ] is_shape_tensor: true }", 1)
    with pytest.raises(TritonError, match=r"'input\.is_shape_tensor' is not supported: shape"):
        audit(parse_config_text(text, "test"))


def test_no_effect_fields_load_with_one_warning_per_section(caplog):
    config = parse_config_text(
        BASE
        + "optimization { cuda { graphs: true busy_wait_events: true } priority: PRIORITY_MAX }",
        "test",
    )
    with caplog.at_level(logging.WARNING, logger="triton_core.config.audit"):
        audit(config)
    messages = [record.getMessage() for record in caplog.records]
    assert any("'optimization.cuda' has no effect" in m for m in messages)
    assert any("'optimization.priority' has no effect" in m for m in messages)
    assert not any("optimization.cuda.graphs" in m for m in messages)


def test_backend_fields_need_a_backend_that_lists_them(caplog):
    config = parse_config_text(BASE + "optimization { graph { level: 1 } }", "test")
    with caplog.at_level(logging.WARNING, logger="triton_core.config.audit"):
        audit(config, frozenset({"optimization.graph"}), "onnxruntime")
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="triton_core.config.audit"):
        audit(config, frozenset(), "pytorch")
    assert "backend 'pytorch' does not support it" in caplog.records[0].getMessage()
    accelerator = (
        "optimization { execution_accelerators { cpu_execution_accelerator "
        '[ { name: "openvino" } ] } }'
    )
    with pytest.raises(TritonError, match=r"'optimization\.execution_accelerators' is not"):
        audit(parse_config_text(BASE + accelerator, "test"), frozenset(), "pytorch")


def test_image_formats_need_three_dims_as_triton_checks():
    text = BASE.replace("dims: [ 4 ] }", "dims: [ 4 ] format: FORMAT_NHWC }", 1)
    with pytest.raises(TritonError, match="model input NHWC/NCHW require 3 dims for m"):
        validate(parse_config_text(text, "test"))


def test_a_decoupled_model_with_the_response_cache_is_refused_as_triton():
    text = BASE + "model_transaction_policy { decoupled: true }\nresponse_cache { enable: true }"
    with pytest.raises(TritonError, match=r"with 'decoupled' transaction policy\. Please disable"):
        validate(parse_config_text(text, "test"))
