"""TLS on the real server: gRPC (both transports) with Triton's flags, HTTPS, mutual TLS.

Certificates are real ones made by ``trustme``: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate from the same CA, and one from a CA the server does not trust.
Clients are the stock tritonclient (gRPC and HTTP), raw sockets for the hostile cases.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import trustme
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_numpy_model

NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}
TRANSPORTS = ("http2", "grpcio")
#: the servers' TLS handshake timeout, seconds (short, so that the stalled-client test is quick)
HANDSHAKE_S = 2
#: bound on any wait in these tests, seconds (generous: the host is shared)
WAIT_S = 30


@dataclass(frozen=True)
class Certs:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    stranger_cert: str  # signed by a CA the server does not trust
    stranger_key: str


def write_leaf(leaf: trustme.LeafCert, folder: Path, name: str) -> tuple[str, str]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    folder = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.crt"))
    server = write_leaf(ca.issue_cert("127.0.0.1", "localhost"), folder, "server")
    client = write_leaf(ca.issue_cert("client.example"), folder, "client")
    stranger = write_leaf(trustme.CA().issue_cert("client.example"), folder, "stranger")
    return Certs(str(folder / "ca.crt"), *server, *client, *stranger)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("tls_models")
    write_numpy_model(repo, "simple")
    return repo


def tls_flags(prefix: str, certs: Certs, mutual: bool) -> list[str]:
    flags = [f"--{prefix}-use-ssl-mutual" if mutual else f"--{prefix}-use-ssl"]
    flags += [
        f"--{prefix}-server-cert",
        certs.server_cert,
        f"--{prefix}-server-key",
        certs.server_key,
    ]
    if mutual:
        flags += [f"--{prefix}-root-cert", certs.ca]
    return [*flags, f"--{prefix}-ssl-handshake-timeout-secs", str(HANDSHAKE_S)]


def client_context(certs: Certs, with_cert: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certs.ca)
    if with_cert:
        context.load_cert_chain(certs.client_cert, certs.client_key)
    return context


def wait_ready_tls(process: ServerProcess, context: ssl.SSLContext) -> None:
    deadline = time.monotonic() + WAIT_S * 2
    while time.monotonic() < deadline:
        if process.process.poll() is not None:
            raise RuntimeError(f"server exited:\n{process.log()[-4000:]}")
        try:
            url = f"https://{process.http_url}/v2/health/ready"
            with urllib.request.urlopen(url, timeout=2, context=context) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"server not ready over HTTPS:\n{process.log()[-4000:]}")


def start(repo: Path, certs: Certs, transport: str, mutual: bool) -> ServerProcess:
    flags = tls_flags("grpc", certs, mutual) + tls_flags("http", certs, mutual)
    process = ServerProcess([repo], "--grpc-transport", transport, *flags, env=NUMPY_PLUGIN)
    try:
        wait_ready_tls(process, client_context(certs))
    except Exception:
        process.stop()
        raise
    return process


@pytest.fixture(scope="module", params=TRANSPORTS)
def one_way(request, repo, certs):
    """gRPC and HTTPS with server certificates only."""
    process = start(repo, certs, request.param, mutual=False)
    yield process
    assert process.stop() == 0, process.log()[-4000:]


@pytest.fixture(scope="module", params=TRANSPORTS)
def mutual(request, repo, certs):
    """gRPC and HTTPS that require client certificates signed by the CA."""
    process = start(repo, certs, request.param, mutual=True)
    yield process
    assert process.stop() == 0, process.log()[-4000:]


def inputs(module):
    data = np.arange(8, dtype=np.int32).reshape(2, 4)
    tensors = [module.InferInput(name, [2, 4], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(data)
    return data, tensors


def grpc_client(process: ServerProcess, certs: Certs, cert: tuple[str, str] | None = None):
    key, chain = (cert[1], cert[0]) if cert else (None, None)
    return grpcclient.InferenceServerClient(
        process.grpc_url,
        ssl=True,
        root_certificates=certs.ca,
        private_key=key,
        certificate_chain=chain,
    )


def http_client(process: ServerProcess, certs: Certs, cert: tuple[str, str] | None = None):
    options = {"ca_certs": certs.ca}
    if cert:
        options.update(certfile=cert[0], keyfile=cert[1])
    return httpclient.InferenceServerClient(
        process.http_url, ssl=True, ssl_options=options, network_timeout=WAIT_S
    )


def assert_serves(client, module) -> None:
    assert client.is_server_live() and client.is_model_ready("simple")
    data, tensors = inputs(module)
    result = client.infer("simple", tensors)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), data)


# -- one-way TLS ---------------------------------------------------------------------------------


def test_grpc_over_tls(one_way, certs):
    client = grpc_client(one_way, certs)
    assert_serves(client, grpcclient)
    client.close()


def test_https(one_way, certs):
    client = http_client(one_way, certs)
    assert_serves(client, httpclient)  # infer by the protocol's own fast path, over TLS
    client.close()


@contextlib.contextmanager
def tls_connection(address: tuple[str, int], context: ssl.SSLContext) -> Iterator[ssl.SSLSocket]:
    with (
        socket.create_connection(address, timeout=WAIT_S) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        yield tls


def test_tls_is_1_2_or_newer_with_alpn(one_way, certs):
    context = client_context(certs, with_cert=False)
    context.set_alpn_protocols(["h2", "http/1.1"])
    for port, protocol in ((one_way.grpc_port, "h2"), (one_way.http_port, "http/1.1")):
        with tls_connection(("127.0.0.1", port), context) as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            assert tls.selected_alpn_protocol() == protocol


def tls11_context(certs: Certs) -> ssl.SSLContext:
    """A client that speaks only TLS 1.1 (which this host's OpenSSL still can, when asked)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("ALL:@SECLEVEL=0")
    context.load_verify_locations(certs.ca)
    return context


def test_tls_1_1_is_refused(one_way, certs):
    # the control: a server that allows TLS 1.1 does complete this client's handshake
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certs.server_cert, certs.server_key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server_context.minimum_version = ssl.TLSVersion.TLSv1_1
    server_context.set_ciphers("ALL:@SECLEVEL=0")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        accepted: list[str | None] = []
        thread = threading.Thread(
            target=lambda: accepted.append(handshake(listener, server_context))
        )
        thread.start()
        with tls_connection(listener.getsockname(), tls11_context(certs)) as tls:
            assert tls.version() == "TLSv1.1"
        thread.join(WAIT_S)
    assert accepted == ["TLSv1.1"]
    for port in (one_way.grpc_port, one_way.http_port):
        with pytest.raises(ssl.SSLError), tls_connection(("127.0.0.1", port), tls11_context(certs)):
            pass


def handshake(listener: socket.socket, context: ssl.SSLContext) -> str | None:
    listener.settimeout(WAIT_S)
    conn, _ = listener.accept()
    with context.wrap_socket(conn, server_side=True) as tls:
        return tls.version()


def test_plaintext_grpc_client_is_refused(one_way):
    client = grpcclient.InferenceServerClient(one_way.grpc_url)
    with pytest.raises(InferenceServerException) as caught:
        client.is_server_live(client_timeout=WAIT_S)
    assert caught.value.status() == "StatusCode.UNAVAILABLE"
    client.close()


def read_until_closed(sock: socket.socket, deadline: float) -> bytes:
    data = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    raise TimeoutError("the server kept the connection open")


def test_plain_http_to_https_gets_no_http_answer(one_way):
    with socket.create_connection(("127.0.0.1", one_way.http_port), timeout=WAIT_S) as sock:
        sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = read_until_closed(sock, time.monotonic() + WAIT_S)
    assert not answer.startswith(b"HTTP/")  # a TLS alert at most, then closed


def test_metrics_stay_plain_http(one_way):
    with urllib.request.urlopen(one_way.metrics_url, timeout=WAIT_S) as reply:
        assert reply.status == 200 and b"nv_inference_request_success" in reply.read()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


STALLED = 100  # connections per port that never start their handshake


def test_stalled_handshakes_are_closed_and_do_not_block_others(one_way, certs, capsys):
    """Clients that connect and send nothing hold a slot only until the handshake timeout."""
    before = rss_kib(one_way.process.pid)
    opened = time.monotonic()
    stalled = [
        socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        for port in (one_way.grpc_port, one_way.http_port)
        for _ in range(STALLED)
    ]
    try:
        # the loop is not blocked: real clients are served while the stalled ones wait
        grpc_client(one_way, certs).is_server_live()
        assert http_client(one_way, certs).is_server_live()
        during = rss_kib(one_way.process.pid)
        deadline = opened + HANDSHAKE_S + WAIT_S
        for sock in stalled:
            assert read_until_closed(sock, deadline) == b""
        closed_after = time.monotonic() - opened
    finally:
        for sock in stalled:
            sock.close()
    with capsys.disabled():
        print(
            f"\n{2 * STALLED} stalled handshakes: all closed after {closed_after:.1f}s "
            f"(timeout {HANDSHAKE_S}s); server RSS {before} KiB -> {during} KiB with them open"
        )
    assert closed_after >= HANDSHAKE_S * 0.5  # closed by the timeout, not at once
    assert during - before < 64 * 1024  # KiB: a stalled handshake costs little


# -- mutual TLS ----------------------------------------------------------------------------------


def test_mutual_tls_with_a_client_certificate(mutual, certs):
    cert = (certs.client_cert, certs.client_key)
    grpc = grpc_client(mutual, certs, cert)
    assert_serves(grpc, grpcclient)
    grpc.close()
    http = http_client(mutual, certs, cert)
    assert_serves(http, httpclient)
    http.close()


@pytest.mark.parametrize("who", ["no certificate", "untrusted certificate"])
def test_mutual_tls_refuses_other_clients(mutual, certs, who):
    cert = None if who == "no certificate" else (certs.stranger_cert, certs.stranger_key)
    client = grpc_client(mutual, certs, cert)
    with pytest.raises(InferenceServerException) as caught:
        client.is_server_live(client_timeout=WAIT_S)
    assert caught.value.status() == "StatusCode.UNAVAILABLE"
    client.close()
    context = client_context(certs, with_cert=False)
    if cert:
        context.load_cert_chain(*cert)
    url = f"https://{mutual.http_url}/v2/health/live"
    with pytest.raises(OSError):  # ssl.SSLError or a reset: the handshake fails
        urllib.request.urlopen(url, timeout=WAIT_S, context=context).close()


# -- refused at start ----------------------------------------------------------------------------


def refused_start(repo: Path, *args: str) -> str:
    with ServerProcess([repo], *args, env=NUMPY_PLUGIN) as process:
        assert process.process.wait(WAIT_S * 2) != 0
        return process.log()


@pytest.mark.parametrize("prefix", ["grpc", "http"])
def test_missing_file_names_flag_and_file(repo, certs, prefix):
    missing = str(Path(certs.ca).parent / "absent.key")
    log = refused_start(
        repo,
        f"--{prefix}-use-ssl",
        f"--{prefix}-server-cert", certs.server_cert,
        f"--{prefix}-server-key", missing,
    )  # fmt: skip
    assert f"--{prefix}-server-key '{missing}' cannot be read" in log


def test_inconsistent_flags_are_refused(repo, certs):
    log = refused_start(repo, "--grpc-use-ssl-mutual", "--grpc-server-cert", certs.server_cert,
                        "--grpc-server-key", certs.server_key)  # fmt: skip
    assert "--grpc-use-ssl-mutual needs --grpc-root-cert" in log
    log = refused_start(repo, "--http-server-cert", certs.server_cert)
    assert "--http-server-cert given but --http-use-ssl is false" in log


def test_a_key_that_is_not_a_key_is_refused(repo, certs):
    log = refused_start(repo, "--grpc-use-ssl", "--grpc-server-cert", certs.server_cert,
                        "--grpc-server-key", certs.ca)  # fmt: skip
    assert f"--grpc-server-key '{certs.ca}' are not a PEM certificate and its private key" in log
