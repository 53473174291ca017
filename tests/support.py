"""Helpers for the tests: repository writers and a real server process."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from triton_core import testing
from triton_core.plugins.manager import PluginManager
from triton_core.server.core import Server, ServerOptions
from triton_core.testing import plugin_manager

ROOT = Path(__file__).resolve().parents[1]


def write_numpy_model(
    repo: Path,
    name: str,
    *,
    kind: str = "identity",
    max_batch_size: int = 8,
    dims: tuple[int, ...] = (4,),
    datatype: str = "TYPE_INT32",
    versions: tuple[int, ...] = (1,),
    extra: str = "",
) -> Path:
    """A model of the numpy test backend (see tests/plugins/numpy_backend.py)."""
    model_dir = repo / name
    for version in versions:
        (model_dir / str(version)).mkdir(parents=True, exist_ok=True)
        (model_dir / str(version) / "model.npy").write_bytes(b"")
    dims_text = ", ".join(str(d) for d in dims)
    tensors = "\n".join(
        f'{kind_}[{{ name: "{prefix}{i}" data_type: {datatype} dims: [ {dims_text} ] }}]'
        for kind_, prefix in (("input ", "INPUT"), ("output ", "OUTPUT"))
        for i in range(2)
    )
    (model_dir / "config.pbtxt").write_text(
        f'backend: "numpy"\nmax_batch_size: {max_batch_size}\n'
        f'parameters {{ key: "kind" value {{ string_value: "{kind}" }} }}\n{tensors}\n{extra}\n'
    )
    return model_dir


def numpy_plugins() -> PluginManager:
    from tests.plugins import numpy_backend

    return plugin_manager([("numpy", numpy_backend)])


def numpy_server(repo: Path, **options) -> Server:  # type: ignore[no-untyped-def]
    return Server(ServerOptions([repo], **options), numpy_plugins())


def free_port() -> int:
    """A port that was free a moment ago: racy, for servers that cannot bind port 0 and
    report it; retry on a bind failure (see S3Server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: how often the waits below look again
POLL_SECONDS = 0.01

T = TypeVar("T")
#: what a wait is for, in its failure: text, or a callable that gives it then
What = str | Callable[[], str]


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, what: What = "") -> T:
    """``predicate()`` once it is true; fail naming ``what`` after ``timeout`` seconds
    (a callable ``what`` is called then, e.g. for the end of a log).

    For ordering a test on something the code under test does (a thread, a process): bounded
    in time and in the number of looks.
    """
    for _ in range(_looks(timeout)):
        if value := predicate():
            return value
        time.sleep(POLL_SECONDS)
    return _last_look(predicate, timeout, what)


async def wait_until_async(predicate: Callable[[], T], timeout: float = 30.0, what: What = "") -> T:
    """:func:`wait_until` on an event loop: the loop runs while it waits."""
    for _ in range(_looks(timeout)):
        if value := predicate():
            return value
        await asyncio.sleep(POLL_SECONDS)
    return _last_look(predicate, timeout, what)


async def stays_true_async(predicate: Callable[[], object], seconds: float) -> bool:
    """Whether ``predicate()`` is true at every look for ``seconds`` (that something does
    not happen: a held producer stays held)."""
    for _ in range(_looks(seconds)):
        if not predicate():
            return False
        await asyncio.sleep(POLL_SECONDS)
    return bool(predicate())


def _looks(timeout: float) -> int:
    return max(1, int(timeout / POLL_SECONDS))


def _last_look(predicate: Callable[[], T], timeout: float, what: What) -> T:
    if value := predicate():
        return value
    described = what() if callable(what) else what
    raise AssertionError(f"timed out after {timeout} s waiting for {described or 'the condition'}")


class ServerProcess(testing.ServerProcess):
    """``triton-core serve`` on ports it binds itself, run from the repository root (so that
    ``TRITON_CORE_PLUGINS=tests.plugins...`` imports the test plugins)."""

    def __init__(self, repos: list[Path], *args: str, env: dict[str, str] | None = None):
        super().__init__(repos, *args, env=env, cwd=ROOT)


def refused_start_log(repos: list[Path], *args: str) -> str:
    """The output of a ``serve`` that must refuse its flags: it exits with code 2 at once."""
    process = ServerProcess(repos, *args)
    code = process.process.wait(timeout=60)
    process.stop()
    assert code == 2, process.log()[-4000:]
    return process.log()


def serve_until_done(process: ServerProcess) -> Iterator[ServerProcess]:
    """For fixtures: ``process`` once ready, then stopped, checking that it stopped cleanly."""
    try:
        process.wait_ready()
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()[-4000:]


def explicit_mode_server(repo: Path, *args: str) -> Iterator[ServerProcess]:
    """A server in explicit model-control mode that loads nothing at start (tests load
    their models through the client); it must exit cleanly when the test is done."""
    process = ServerProcess([repo], "--model-control-mode=explicit", *args)
    try:
        process.wait_ready(timeout=120, path="/v2/health/live")
        yield process
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def write_stream_model(
    repo: Path,
    name: str,
    *,
    count: int = 3,
    delay_ms: int = 10,
    finish: str = "flag",
    out_dtype: str = "int32",
) -> Path:
    """A decoupled model of the stream test backend (tests/plugins/stream_backend.py)."""
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.stream").write_bytes(b"")
    (model_dir / "config.pbtxt").write_text(
        f"""backend: "stream"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters {{ key: "count" value {{ string_value: "{count}" }} }}
parameters {{ key: "delay_ms" value {{ string_value: "{delay_ms}" }} }}
parameters {{ key: "finish" value {{ string_value: "{finish}" }} }}
parameters {{ key: "out_dtype" value {{ string_value: "{out_dtype}" }} }}
"""
    )
    return model_dir


def write_broken_distribution(root: Path) -> Path:
    """An installed distribution at ``root`` (put it on ``sys.path``) whose ``triton_core``
    entry point ``broken`` fails to import (ModuleNotFoundError)."""
    root.mkdir(parents=True)
    (root / "broken_plugin_module.py").write_text("import a_module_that_is_not_installed\n")
    info = root / "triton_core_broken-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: triton-core-broken\nVersion: 0.3\n"
    )
    (info / "entry_points.txt").write_text("[triton_core]\nbroken = broken_plugin_module\n")
    return root


class S3Server:
    """A real S3-compatible server (moto in server mode) on a free loopback port."""

    CREDENTIALS = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }

    #: moto cannot report a port it bound itself: take a free one, and another if it is gone
    ATTEMPTS = 3

    def __init__(self) -> None:
        for _ in range(self.ATTEMPTS):
            self.port = free_port()
            self.endpoint = f"http://127.0.0.1:{self.port}"
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, **self.CREDENTIALS},
            )
            if self._answers_within(30.0):
                return
        raise RuntimeError(f"moto server did not start in {self.ATTEMPTS} attempts")

    def _answers_within(self, seconds: float) -> bool:
        """Whether it answers; False (and stopped) when it exits first, as on a taken port."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.endpoint, timeout=1):
                    return True
            except urllib.error.HTTPError:
                return True  # answering, even if with an error status
            except OSError:
                try:
                    self.process.wait(0.1)
                    return False
                except subprocess.TimeoutExpired:
                    continue
        self.stop()
        return False

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def upload_tree(self, bucket: str, prefix: str, folder: Path) -> None:
        client = self.client()
        existing = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
        if bucket not in existing:
            client.create_bucket(Bucket=bucket)
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                key = f"{prefix}/{path.relative_to(folder).as_posix()}".lstrip("/")
                client.upload_file(str(path), bucket, key)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
