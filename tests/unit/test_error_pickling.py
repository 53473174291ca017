"""A TritonError survives pickling (Ray, multiprocessing) with its status, message and reason."""

from __future__ import annotations

import pickle

from triton_core import Status, TritonError


def test_a_triton_error_is_rebuilt_whole_from_a_pickle() -> None:
    error = TritonError(Status.NOT_FOUND, "Request for unknown model: 'x' is not found")
    error.reason = "REJECTED"
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TritonError
    assert copy.status is Status.NOT_FOUND
    assert copy.message == str(copy) == error.message
    assert copy.failure_reason == "REJECTED"
