"""Fixtures for the Python model backend: Triton-style model.py files the tests write.

Every model here is written the way Triton users write them (``import
triton_python_backend_utils as pb_utils``, ``class TritonPythonModel``), so the tests show
that such files run unchanged.
"""

from __future__ import annotations

import contextlib
import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from triton_core.plugins.manager import create_plugin_manager
from triton_core.server.core import Server, ServerOptions
from triton_core.testing import ServerProcess

ADD_SUB = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0, out_1 = (
                in_0.as_numpy() + in_1.as_numpy(),
                in_0.as_numpy() - in_1.as_numpy(),
            )
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(self.output1_dtype))
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[out_tensor_0, out_tensor_1])
            )
        return responses

    def finalize(self):
        print("Cleaning up...")
"""

ADD_SUB_CONFIG = """
backend: "python"
max_batch_size: {max_batch_size}
input [
  {{ name: "INPUT0" data_type: {dtype} dims: [ 4 ] }},
  {{ name: "INPUT1" data_type: {dtype} dims: [ 4 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: {dtype} dims: [ 4 ] }},
  {{ name: "OUTPUT1" data_type: {dtype} dims: [ 4 ] }}
]
{extra}
"""

#: BYTES in, BYTES out: each element wrapped in <>, and its length
STRINGS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            wrapped = np.array([b"<" + item + b">" for item in text.reshape(-1)], dtype=np.object_)
            lengths = np.array([len(item) for item in text.reshape(-1)], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("WRAPPED", wrapped.reshape(text.shape)),
                pb_utils.Tensor("LENGTH", lengths.reshape(text.shape)),
            ]))
        return responses
"""

STRINGS_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [
  { name: "WRAPPED" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "LENGTH" data_type: TYPE_INT32 dims: [ -1 ] }
]
"""

#: OUTPUTi = INPUTi for every input; request parameters echoed as response parameters
IDENTITY = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.names = [tensor["name"] for tensor in config["input"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for name in self.names:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    output_name = name.replace("INPUT", "OUTPUT")
                    outputs.append(pb_utils.Tensor(output_name, tensor.as_numpy()))
            parameters = json.loads(request.parameters())
            responses.append(pb_utils.InferenceResponse(outputs, parameters=parameters))
        return responses
"""

IDENTITY_CONFIG = """
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: {dtype} dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ -1 ] }} ]
{extra}
"""

#: answers COUNT times, DELAY_MS apart, from a thread; flag-only final; stops when cancelled
REPEAT = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            count = pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()
            count = int(count.reshape(-1)[0])
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            delay = 0 if delay is None else int(delay.as_numpy().reshape(-1)[0])
            sender = request.get_response_sender()
            thread = threading.Thread(
                target=self.answer, args=(sender, request.request_id(), count, delay / 1000)
            )
            thread.start()
            self.threads.append(thread)
        return None

    def answer(self, sender, request_id, count, delay):
        for index in range(count):
            if sender.is_cancelled():
                message = f"request '{request_id}' was cancelled after {index} responses"
                pb_utils.Logger.log_warn(message)
                break
            time.sleep(delay)
            out = pb_utils.Tensor("OUT", np.array([index], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse([out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""

REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "DELAY_MS" data_type: TYPE_INT32 dims: [ 1 ] optional: true }
]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: MODE 0: fine; 1: raise ValueError; 2: TritonError response (INVALID_ARG); 3: raise
#: TritonError (UNAVAILABLE); 4: return a wrong number of responses
FAILING = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy().reshape(-1)[0])
            if mode == 1:
                raise ValueError("boom from the model")
            if mode == 3:
                raise pb_utils.TritonError("try later", pb_utils.TritonError.UNAVAILABLE)
            if mode == 4:
                return []
            if mode == 2:
                error = pb_utils.TritonError(
                    "bad MODE for this request", pb_utils.TritonError.INVALID_ARG
                )
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            out = pb_utils.Tensor("OUT", np.array([mode], np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

FAILING_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: ACTION 0: answer the process id; 1: kill its own process (SIGKILL) mid-request;
#: 2: busy for SECONDS (to overlap instances), answering (pid, start, end)
PROCESS = """
import os
import signal
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            action = pb_utils.get_input_tensor_by_name(request, "ACTION").as_numpy()
            action = int(action.reshape(-1)[0])
            if action == 3:  # die a moment later, with the next request sent meanwhile
                time.sleep(0.2)
            if action in (1, 3):
                os.kill(os.getpid(), signal.SIGKILL)
            if action == 4:  # hang, for execute_timeout_secs
                time.sleep(600)
            start = time.time()
            if action == 2:
                deadline = time.monotonic() + 0.3
                while time.monotonic() < deadline:
                    pass
            info = np.array([os.getpid(), start, time.time()], dtype=np.float64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("INFO", info)]))
        return responses
"""

PROCESS_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "ACTION" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "INFO" data_type: TYPE_FP64 dims: [ 3 ] } ]
instance_group [ { count: {count} kind: KIND_CPU } ]
"""


def _write_model(repo: Path, name: str, source: str, config: str, version: int = 1) -> Path:
    """``<repo>/<name>/config.pbtxt`` and ``<repo>/<name>/<version>/model.py``."""
    model_dir = repo / name
    (model_dir / str(version)).mkdir(parents=True, exist_ok=True)
    (model_dir / str(version) / "model.py").write_text(textwrap.dedent(source))
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(config))
    return model_dir


@pytest.fixture
def write_model() -> Callable[..., Path]:
    """``write_model(repo, name, source, config, version=1)`` -> the model's folder."""
    return _write_model


@pytest.fixture(scope="session")
def models() -> SimpleNamespace:
    """The model sources and configs above, by name."""
    return SimpleNamespace(**{name: value for name, value in globals().items() if name.isupper()})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "models"
    path.mkdir()
    return path


@contextlib.contextmanager
def _serving(root: Path, *args: str) -> Iterator[ServerProcess]:
    process = ServerProcess([root], *args)
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0, process.log()[-3000:]


@pytest.fixture(scope="session")
def serve() -> Callable[..., contextlib.AbstractContextManager[ServerProcess]]:
    """``with serve(root, *flags) as process``: a real ``triton-core serve`` of ``root``,
    ready; it must exit cleanly at the end (its log says why not)."""
    return _serving


@pytest.fixture
def make_server() -> Callable[..., Server]:
    """``make_server(repo, **options)``: an in-process server with installed plugins only."""

    def make(repo: Path, **options: object) -> Server:
        plugins = create_plugin_manager(autoload=True)
        return Server(ServerOptions([repo], **options), plugins)  # type: ignore[arg-type]

    return make


def child_processes() -> list[int]:
    """Live (not zombie) children of this process."""
    me = os.getpid()
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            children.append(int(entry))
    return children


def shm_entries() -> set[str]:
    """Entries of /dev/shm that a Triton-like Python backend could have left."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return set()
    # a real tritonserver's Python backend (another process on this machine, e.g. a
    # benchmark's) names its regions with this prefix; this server never does
    tritons = "triton_python_backend_shm_region_"
    return {
        name
        for name in os.listdir(shm)
        if ("triton" in name or "python" in name) and not name.startswith(tritons)
    }


@pytest.fixture(scope="session")
def list_shm() -> Callable[[], set[str]]:
    """``list_shm()``: the /dev/shm entries a Python backend could have left."""
    return shm_entries


@pytest.fixture
def no_leftovers():
    """Checks that a test leaves no new child processes and no new /dev/shm entries."""
    shm_before = shm_entries()
    children_before = set(child_processes())
    yield
    assert shm_entries() - shm_before == set()
    assert set(child_processes()) - children_before == set()
