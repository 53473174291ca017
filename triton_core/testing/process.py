"""``triton-core serve`` as a real process on ports the system picks, for end-to-end tests.

The server binds port 0 for each endpoint and writes the ports it got to a file
(``--ports-file``) once every endpoint listens. Picking a free port in the test and passing
it to the server is racy: another process can take the port between the test's check and
the server's bind. Here the port is never free: the server holds it from the bind on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from triton_core.plugins.manager import NO_AUTOLOAD_ENV, PLUGINS_ENV

if TYPE_CHECKING:
    import tritonclient.grpc
    import tritonclient.http

#: how often the waits look again while the process runs (they end at once when it exits)
_POLL_SECONDS = 0.05


def plugin_module_names(plugins: Iterable[ModuleType | str]) -> list[str]:
    return [plugin if isinstance(plugin, str) else plugin.__name__ for plugin in plugins]


class ServerProcess:
    """``triton-core serve`` over ``repositories`` on loopback, started at construction.

    ``args`` are further ``serve`` flags. ``plugins`` (modules or module paths): register
    exactly these with entry-point autoload off, as the in-process fixtures do; empty: the
    installed plugins. The process imports what the test can (``sys.path`` is passed on).
    Its output goes to ``log_path`` (see :meth:`log`); :meth:`stop` returns its exit code.
    """

    def __init__(
        self,
        repositories: Iterable[os.PathLike[str] | str],
        *args: str,
        plugins: Iterable[ModuleType | str] = (),
        env: Mapping[str, str] | None = None,
        cwd: os.PathLike[str] | str | None = None,
        workdir: os.PathLike[str] | str | None = None,
    ) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="triton-core-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ports_path = self.workdir / "ports.json"
        self.ports_path.unlink(missing_ok=True)
        self.log_path = self.workdir / "server.log"
        self._ports: dict[str, int] | None = None
        command = [sys.executable, "-m", "triton_core", "serve"]
        for repository in repositories:
            command += ["--model-repository", os.fspath(repository)]
        command += [
            "--http-address", "127.0.0.1", "--http-port", "0",
            "--grpc-address", "127.0.0.1", "--grpc-port", "0",
            "--metrics-port", "0",
            "--ports-file", str(self.ports_path),
            *args,
        ]  # fmt: skip
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=_child_env(plugin_module_names(plugins), env or {}),
        )

    # -- where it listens ----------------------------------------------------------------------

    @property
    def ports(self) -> dict[str, int]:
        """``{"http": port, "grpc": port, "metrics": port}``, waiting until the server
        listens; endpoints turned off are absent."""
        if self._ports is None:
            self._ports = self._wait_for_ports()
        return self._ports

    def _wait_for_ports(self, timeout: float = 120.0) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        while not self.ports_path.exists():
            if self._exited_within(_POLL_SECONDS):
                raise RuntimeError(
                    f"server exited with {self.process.returncode} before listening:\n"
                    f"{self.log()[-4000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not listening after {timeout}s:\n{self.log()[-4000:]}")
        ports: dict[str, int] = json.loads(self.ports_path.read_text())
        return ports

    def _exited_within(self, seconds: float) -> bool:
        try:
            self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def port(self, endpoint: str) -> int:
        """The port of an endpoint by its key: ``http``, ``grpc``, ``metrics``, or one a
        frontend plugin reports (``Frontend.ports``)."""
        try:
            return self.ports[endpoint]
        except KeyError:
            raise LookupError(f"the server has no {endpoint} endpoint (turned off)") from None

    @property
    def http_port(self) -> int:
        return self.port("http")

    @property
    def grpc_port(self) -> int:
        return self.port("grpc")

    @property
    def metrics_port(self) -> int:
        return self.port("metrics")

    @property
    def http_url(self) -> str:
        """``127.0.0.1:<port>``, as tritonclient takes it."""
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    # -- lifecycle -----------------------------------------------------------------------------

    def wait_ready(self, timeout: float = 60.0, path: str = "/v2/health/ready") -> None:
        """Wait until HTTP ``path`` answers 200 (a server without HTTP: until it listens)."""
        deadline = time.monotonic() + timeout
        if self._ports is None:
            self._ports = self._wait_for_ports(timeout)
        if "http" not in self._ports:
            return
        url = f"http://{self.http_url}{path}"
        while time.monotonic() < deadline:
            if _answers_ok(url):
                return
            if self._exited_within(_POLL_SECONDS):
                raise RuntimeError(
                    f"server exited with {self.process.returncode}:\n{self.log()[-4000:]}"
                )
        raise TimeoutError(f"{url} not 200 after {timeout}s:\n{self.log()[-4000:]}")

    def log(self) -> str:
        """Everything the server wrote so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    @property
    def stopped(self) -> bool:
        return self._log.closed

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait up to ``timeout`` (then SIGKILL); the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- the stock clients ---------------------------------------------------------------------

    def http_client(self, **options: Any) -> tritonclient.http.InferenceServerClient:
        """A ``tritonclient.http.InferenceServerClient`` on this server; close it after."""
        import tritonclient.http

        return tritonclient.http.InferenceServerClient(self.http_url, **options)

    def grpc_client(self, **options: Any) -> tritonclient.grpc.InferenceServerClient:
        """A ``tritonclient.grpc.InferenceServerClient`` on this server; close it after."""
        import tritonclient.grpc

        return tritonclient.grpc.InferenceServerClient(self.grpc_url, **options)


def _child_env(plugins: list[str], extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    # the server imports what the test imports: plugin modules beside the tests included
    paths = [env.get("PYTHONPATH", ""), *(entry for entry in sys.path if entry)]
    env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    if plugins:
        env[PLUGINS_ENV] = ",".join(plugins)
        env[NO_AUTOLOAD_ENV] = "1"
    env.update(extra)
    return env


def _answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as reply:
            status: int = reply.status
            return status == 200
    except OSError:
        return False
