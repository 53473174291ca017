"""The layer the tests serve: 3 features to 2, as a model file and as arrays."""

from __future__ import annotations

import numpy as np
import pytest
from triton_core_example_numpy.linear import LinearLayer


@pytest.fixture(scope="session")
def layer() -> LinearLayer:
    weight = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=np.float32)
    return LinearLayer("x", "y", weight, np.array([0.5, -1.0], dtype=np.float32))


@pytest.fixture(scope="session")
def model_file(layer: LinearLayer) -> dict[str, str]:
    """A version folder's files: ``{1: model_file}`` in ``add_model(versions=...)``."""
    return {"model.json": layer.to_json()}
