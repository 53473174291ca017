"""Starting a stub process, and how it ended.

:class:`StubSettings` is what a stub needs to serve one instance. :func:`launch` makes its
shared memory and the socket pairs of its control and events channels, and starts it: with
the server's interpreter, or with an ``EXECUTION_ENV_PATH`` environment's, which a bootstrap
makes import this package and ``triton_python_backend_utils`` from their files
(:func:`stub_command`, which the auto-complete's throwaway interpreter uses too).
:func:`exit_description` says how the process ended; :class:`StubDied` is what a batch gets
when it did.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triton_core import internal, unavailable
from triton_core_python import ipc
from triton_core_python.shm import Arena, SharedMemoryError

_PACKAGE = Path(__file__).resolve().parent
_UTILS = _PACKAGE.parent / "triton_python_backend_utils.py"

#: how another interpreter (EXECUTION_ENV_PATH) starts a stub: it imports this package and
#: pb_utils from their files, so that none of the server's other packages shadow its own
_BOOTSTRAP = f"""
import importlib.util, sys
for name, path, package in (
    ("triton_core_python", {str(_PACKAGE / "__init__.py")!r}, [{str(_PACKAGE)!r}]),
    ("triton_python_backend_utils", {str(_UTILS)!r}, None),
):
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=package)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
from triton_core_python.stub import main
sys.exit(main(sys.argv[1:]))
"""


def stub_command(python: str, *arguments: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start a stub with ``python``."""
    env = dict(os.environ)
    if python == sys.executable:
        # the server's own interpreter finds this distribution where the server did
        paths = [str(_PACKAGE.parent), *filter(None, [env.get("PYTHONPATH")])]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return [python, "-m", "triton_core_python.stub", *arguments], env
    # an environment's own programs and libraries first, as its activation would do
    prefix = Path(python).parent.parent
    env["PATH"] = os.pathsep.join(filter(None, [str(prefix / "bin"), env.get("PATH")]))
    if (prefix / "lib").is_dir():
        libraries = [str(prefix / "lib"), env.get("LD_LIBRARY_PATH")]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, libraries))
    return [python, "-c", _BOOTSTRAP, *arguments], env


@dataclass(frozen=True, slots=True)
class StubSettings:
    """What a stub needs to serve one instance (sent in ``INIT``)."""

    model_name: str
    model_version: int
    instance_name: str
    model_path: Path
    model_dir: Path
    decoupled: bool
    output_names: tuple[str, ...]
    #: the ``args`` of ``initialize`` (all strings, as Triton passes them)
    args: dict[str, str]
    python: str = sys.executable
    shm_size: int = 1 << 20
    shm_directory: str | None = None
    #: the stub's scheduling policy: "batch" (SCHED_BATCH) or "normal"
    policy: str = "batch"
    #: outputs the config declares BF16: the model's uint16 arrays hold their bits
    bf16_outputs: frozenset[str] = frozenset()
    #: config ``reshape``: input name -> view of the client's dims as the model's shape
    input_reshapes: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    #: config ``reshape``: output name -> view of the model's shape as the config's dims
    output_reshapes: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    #: the instance group's ``host_policy``: the CPUs the process runs on (None: any)
    cpus: frozenset[int] | None = None
    #: how long the stub polls for the next batch after an answer (0: it sleeps at once)
    spin_us: int = 0
    #: a Python-based backend's model (``model_path`` is the backend's): its version folder
    version_dir: Path | None = None

    def init_body(self) -> dict[str, Any]:
        """The body of ``INIT``: what the stub's model needs (the rest starts the process)."""
        return {
            "model_name": self.model_name,
            "model_version": self.model_version,
            "instance_name": self.instance_name,
            "model_path": str(self.model_path),
            "model_dir": str(self.model_dir),
            "version_dir": None if self.version_dir is None else str(self.version_dir),
            "decoupled": self.decoupled,
            "output_names": list(self.output_names),
            "args": dict(self.args),
        }


class StubDied(Exception):
    """The stub process ended. ``sent``: whether the batch had reached it."""

    def __init__(self, sent: bool, description: str = "ended") -> None:
        super().__init__(f"the stub process {description}")
        self.sent = sent
        #: how it ended, e.g. "was killed by signal 9 (SIGKILL)"
        self.description = description


def launch(
    settings: StubSettings,
) -> tuple[subprocess.Popen[bytes], ipc.Memory, socket.socket, socket.socket]:
    """Start a stub: its process, its shared memory, and the server's ends of its control and
    events sockets. Raises :class:`TritonError` when shared memory cannot be had or the
    process does not start."""
    arena = Arena(settings.shm_size, settings.shm_directory)
    try:
        # fail the load now, with the message, if shared memory cannot be had at all
        segment, _ = arena.alloc(1)
        arena.free(segment.id)
    except SharedMemoryError as exc:
        arena.close()
        raise unavailable(
            f"model '{settings.model_name}' instance '{settings.instance_name}': {exc}"
        ) from None
    memory = ipc.Memory(arena)
    control, control_theirs = ipc.channel_pair()
    events, events_theirs = ipc.channel_pair()
    arguments = [
        "--instance", f"{settings.model_name}/{settings.instance_name}",
        "--control-fd", str(control_theirs.fileno()),
        "--events-fd", str(events_theirs.fileno()),
        "--shm-size", str(settings.shm_size),
        "--policy", settings.policy,
        "--spin-us", str(settings.spin_us),
    ]  # fmt: skip
    if settings.shm_directory:
        arguments += ["--shm-directory", settings.shm_directory]
    if settings.cpus is not None:
        arguments += ["--cpus", ",".join(map(str, sorted(settings.cpus)))]
    command, env = stub_command(settings.python, *arguments)
    try:
        process = subprocess.Popen(
            command,
            pass_fds=(control_theirs.fileno(), events_theirs.fileno()),
            stdin=subprocess.DEVNULL,
            env=env,
            # its own session: a Ctrl-C at the terminal reaches the server, which then
            # finalizes its stubs, instead of killing them first
            start_new_session=True,
        )
    except OSError as exc:
        for sock in (control, events):
            sock.close()
        memory.close()
        raise internal(
            f"cannot start the Python process of model '{settings.model_name}' instance "
            f"'{settings.instance_name}' ({settings.python}): {exc}"
        ) from None
    finally:
        control_theirs.close()
        events_theirs.close()
    return process, memory, control, events


def exit_description(process: subprocess.Popen[bytes] | None, wait: float = 1.0) -> str:
    """How ``process`` ended: "was killed by signal 9 (SIGKILL)", "exited with status 1";
    "ended" when it has not within ``wait`` seconds (0: no wait)."""
    if process is None:
        return "did not start"
    try:
        code = process.wait(wait) if wait > 0 else process.poll()
    except subprocess.TimeoutExpired:
        code = None
    if code is None:
        return "ended"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-code} ({name})"
    return f"exited with status {code}"
