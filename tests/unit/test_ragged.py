"""Batch inputs of every kind, as Triton's model_config.proto describes them, and the joining
and scattering the framework kit does for ragged batches."""

from __future__ import annotations

import numpy as np
import pytest

from triton_core.config import parse_config_text
from triton_core.errors import TritonError
from triton_core.tensors.ragged import RaggedBatching, validate_batch_io
from triton_core.types import InferenceRequest, Tensor

CONFIG = """
name: "r"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1, -1 ] allow_ragged_batch: true }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
batch_input [ {{ kind: {kind} target_name: "B" data_type: TYPE_INT32 source_input: "IN" }} ]
batch_output [ {{ target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "IN" }} ]
"""


def _requests(*shapes: tuple[int, ...]) -> list[InferenceRequest]:
    return [
        InferenceRequest("r", {"IN": Tensor("IN", "FP32", np.ones(shape, np.float32))})
        for shape in shapes
    ]


def _batch_input(kind: str, *shapes: tuple[int, ...]) -> list[list]:
    ragged = RaggedBatching(parse_config_text(CONFIG.format(kind=kind), "test"))
    requests = _requests(*shapes)
    ragged.add_batch_inputs(requests)
    assert all(r.inputs["B"].data.dtype == np.int32 for r in requests)
    return [r.inputs["B"].data.tolist() for r in requests]


# Triton's example: a batch-2 request of shape [3, 1] and a batch-1 request of shape [2, 2]
SHAPES = ((2, 3, 1), (1, 2, 2))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("BATCH_ELEMENT_COUNT", [[6], [4]]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT", [[6], [10]]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", [[0, 6], [10]]),
        ("BATCH_ITEM_SHAPE", [[[3, 1], [3, 1]], [[2, 2]]]),
        ("BATCH_ITEM_SHAPE_FLATTEN", [[3, 1, 3, 1], [2, 2]]),
    ],
)
def test_each_request_gets_its_share_of_the_batch_input(kind, expected):
    assert _batch_input(kind, *SHAPES) == expected


def test_max_element_count_as_shape_gives_the_first_request_the_shape():
    ragged = RaggedBatching(
        parse_config_text(CONFIG.format(kind="BATCH_MAX_ELEMENT_COUNT_AS_SHAPE"), "test")
    )
    requests = _requests(*SHAPES)
    ragged.add_batch_inputs(requests)
    assert [r.inputs["B"].data.shape for r in requests] == [(6,), (0,)]


def test_join_flattens_ragged_inputs_and_scatter_cuts_outputs_back():
    ragged = RaggedBatching(parse_config_text(CONFIG.format(kind="BATCH_ELEMENT_COUNT"), "t"))
    requests = _requests((1, 2, 3), (1, 1, 4))
    ragged.add_batch_inputs(requests)
    joined = ragged.join(requests)
    assert joined["IN"].shape == (10,) and joined["B"].tolist() == [6, 4]
    pieces = ragged.scatter("OUT", np.arange(10, dtype=np.float32), requests)
    assert [p.shape for p in pieces] == [(1, 2, 3), (1, 1, 4)]
    assert pieces[1].reshape(-1).tolist() == [6, 7, 8, 9]
    with pytest.raises(TritonError, match="returned batch output 'OUT' with 9 elements"):
        ragged.scatter("OUT", np.arange(9, dtype=np.float32), requests)


def test_batch_inputs_need_batching():
    text = CONFIG.format(kind="BATCH_ELEMENT_COUNT").replace("max_batch_size: 8", "")
    with pytest.raises(TritonError, match="need max_batch_size > 0"):
        validate_batch_io(parse_config_text(text, "test"))
