"""``--buffer-manager-thread-count``: a batch's large inputs are gathered by the copy threads,
with the same result as numpy's concatenate; without threads they are gathered inline."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from triton_core.tensors import buffer_manager


@pytest.fixture
def copy_threads() -> Iterator[None]:
    buffer_manager.set_thread_count(2)
    try:
        yield
    finally:
        buffer_manager.set_thread_count(0)


def _copiers() -> int:
    return sum(thread.name.startswith("buffer-manager") for thread in threading.enumerate())


def test_large_gathers_run_on_the_copy_threads_and_equal_numpy(copy_threads: None) -> None:
    rng = np.random.default_rng(5)
    parts = [rng.standard_normal((rows, 512, 64)).astype(np.float32) for rows in (1, 3, 2, 4)]
    joined = buffer_manager.gather(parts)
    np.testing.assert_array_equal(joined, np.concatenate(parts, axis=0))
    assert joined.dtype == np.float32 and joined.flags.c_contiguous
    assert 1 <= _copiers() <= 2
    strings = [np.array([[b"a" * 40_000] * 20]), np.array([[b"b" * 9] * 20])]
    assert buffer_manager.gather(strings).tolist() == np.concatenate(strings).tolist()


def test_parts_that_do_not_join_fail_as_numpy_says(copy_threads: None) -> None:
    big = np.zeros((2, 1 << 18), np.float32)
    with pytest.raises(ValueError, match="dimension"):
        buffer_manager.gather([big, np.zeros((2, 5), np.float32)])


def test_without_copy_threads_gathers_run_inline() -> None:
    assert buffer_manager.threads() is None
    for thread in threading.enumerate():  # copy threads of earlier tests still ending
        if thread.name.startswith("buffer-manager"):
            thread.join(timeout=10)
    parts = [np.ones((4, 1 << 18), np.float32), np.zeros((4, 1 << 18), np.float32)]
    assert _copiers() == 0
    np.testing.assert_array_equal(buffer_manager.gather(parts), np.concatenate(parts))
    assert _copiers() == 0
    with pytest.raises(ValueError, match="must not be negative"):
        buffer_manager.set_thread_count(-1)
