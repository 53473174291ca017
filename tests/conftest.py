"""Shared fixtures: model repositories written by the tests, servers in-process and as processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support import write_numpy_model  # noqa: E402


@pytest.fixture
def numpy_repo(tmp_path: Path) -> Path:
    """A repository with numpy-backend models: add_sub (batching) and identity (no batching)."""
    repo = tmp_path / "models"
    write_numpy_model(repo, "add_sub", kind="add_sub", max_batch_size=8)
    write_numpy_model(repo, "identity", kind="identity", max_batch_size=0, dims=(4,))
    return repo
