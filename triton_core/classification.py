"""The classification extension: an output replaced by its top-K "value:index[:label]" strings."""

from __future__ import annotations

import numpy as np

from triton_core.errors import invalid_arg
from triton_core.types import Tensor


def classify(tensor: Tensor, count: int, labels: list[str] | None, *, batched: bool) -> Tensor:
    """Top-``count`` entries of each batch item (or of the whole tensor when not batched)."""
    if tensor.datatype == "BYTES":
        raise invalid_arg(f"classification is not supported for BYTES output '{tensor.name}'")
    data = tensor.data
    rows = data.reshape(data.shape[0], -1) if batched and data.ndim else data.reshape(1, -1)
    if tensor.datatype == "BF16":  # bit patterns: widen to float32 to compare values
        rows = (rows.astype(np.uint32) << 16).view(np.float32)
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
