"""Models that fail outside ``execute``: the messages Triton's server log carries for them
(its QA greps these), from a real ``triton-core serve``."""

from __future__ import annotations

import pytest

from triton_core.testing import ServerProcess

pytestmark = pytest.mark.timeout(120)

CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: a BLS call from ``initialize`` or ``finalize``, as qa/python_models/bls_*_error make
BLS_IN = """
import numpy as np
import triton_python_backend_utils as pb_utils


def call():
    request = pb_utils.InferenceRequest(
        model_name="other", inputs=[pb_utils.Tensor("IN", np.array([1], np.int32))],
        requested_output_names=["OUT"],
    )
    request.exec(decoupled=True)


class TritonPythonModel:
    def initialize(self, args):
        if {in_initialize}:
            call()

    def execute(self, requests):
        return [None for _ in requests]

    def finalize(self):
        call()
"""

#: the process is killed in initialize, as an out-of-memory killer would (qa init_exit)
KILLED_IN_INITIALIZE = """
import os
import signal


class TritonPythonModel:
    def initialize(self, args):
        os.kill(os.getpid(), signal.SIGKILL)

    def execute(self, requests):
        return []
"""

BLS_OUTSIDE_EXECUTE = "TritonModelException: BLS is only supported during the 'execute' function."


def _failed_start_log(repo) -> str:
    """The log of a server that must fail to start (a model fails to load)."""
    process = ServerProcess([repo])
    try:
        with pytest.raises(RuntimeError):
            process.wait_ready()
    finally:
        process.stop()
    return process.log()


def test_bls_in_initialize_fails_the_load_with_tritons_message(repo, write_model):
    write_model(repo, "bls_init_error", BLS_IN.format(in_initialize=True), CONFIG)
    assert BLS_OUTSIDE_EXECUTE in _failed_start_log(repo)


def test_bls_in_finalize_raises_tritons_message_at_unload(repo, write_model, serve):
    write_model(repo, "bls_finalize_error", BLS_IN.format(in_initialize=False), CONFIG)
    with serve(repo) as process:
        pass
    assert BLS_OUTSIDE_EXECUTE in process.log()


def test_a_missing_model_file_is_reported_in_tritons_words(repo, write_model):
    model_dir = write_model(repo, "non_existent_model", "", CONFIG)
    (model_dir / "1" / "model.py").unlink()
    expected = (
        "Failed to preinitialize Python stub: Python model file not found in "
        f"'{model_dir / '1' / 'model.py'}'"
    )
    assert expected in _failed_start_log(repo)


def test_a_process_killed_in_initialize_is_not_healthy_and_not_restarted(repo, write_model):
    write_model(repo, "init_exit", KILLED_IN_INITIALIZE, CONFIG)
    log = _failed_start_log(repo)
    assert "Stub process 'init_exit_0_0' is not healthy." in log
    assert "restarting it" not in log
    assert "Traceback" not in log
