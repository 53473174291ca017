"""The classification extension: an output replaced by its top-K "value:index[:label]" strings.

Triton's rules (2.7x): integer, FP32 and FP64 outputs only, each batch item of at most a
million elements; anything else answers INVALID_ARG in Triton's words.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from triton_core.errors import invalid_arg
from triton_core.types import Tensor

#: the datatypes Triton ranks (others: "class result not available ...")
_RANKED: Final = frozenset(
    ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64")
)
#: Triton's bound on the elements one batch item may have
MAX_CLASSIFICATION_ELEMENTS: Final = 1_000_000


def classify(tensor: Tensor, count: int, labels: list[str] | None, *, batched: bool) -> Tensor:
    """Top-``count`` entries of each batch item (or of the whole tensor when not batched)."""
    if tensor.datatype not in _RANKED:
        raise invalid_arg(
            f"class result not available for output due to unsupported type '{tensor.datatype}'"
        )
    data = tensor.data
    rows = data.reshape(data.shape[0], -1) if batched and data.ndim else data.reshape(1, -1)
    if rows.shape[1] > MAX_CLASSIFICATION_ELEMENTS:
        raise invalid_arg("classification output tensor too large")
    k = min(count, rows.shape[1])
    # stable descending order, so equal values keep index order as Triton's sort does
    order = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    result = np.empty((rows.shape[0], k), dtype=object)
    for row_index, row_order in enumerate(order):
        row = rows[row_index]
        for rank, index in enumerate(row_order):
            value = row[index]
            text = f"{_format_value(value)}:{index}"
            if labels is not None and index < len(labels):
                text += f":{labels[index]}"
            result[row_index, rank] = text.encode("utf-8")
    return Tensor(tensor.name, "BYTES", result if batched else result.reshape(k))


def _format_value(value: np.generic) -> str:
    if isinstance(value, np.floating):
        return f"{float(value):f}"
    return str(value.item() if isinstance(value, np.generic) else value)
