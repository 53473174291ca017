"""Sample tensors for every datatype, in the forms tritonclient sends and returns."""

from __future__ import annotations

import numpy as np
from tritonclient.utils import triton_to_np_dtype


def sample(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    count = int(np.prod(shape))
    if datatype == "BYTES":
        values = [f"v{i}\x00é".encode() for i in range(count)]
        return np.array(values, dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return (np.arange(count) % 2 == 0).reshape(shape)
    if datatype == "BF16":  # tritonclient carries BF16 as ml_dtypes.bfloat16
        return (np.arange(count, dtype=np.float32).reshape(shape) - 2).astype(
            triton_to_np_dtype("BF16")
        )
    values = np.arange(count) - (0 if datatype.startswith("U") else 2)
    return values.astype(triton_to_np_dtype(datatype)).reshape(shape)


def as_bytes(array: np.ndarray) -> np.ndarray:
    """JSON BYTES outputs come back as str: compare them as utf-8 bytes."""
    return np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(array)
