"""TLS flags: what they build (real certificates from trustme), what they refuse and why."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest
import trustme

from triton_core.frontends.tls import DEFAULT_HANDSHAKE_TIMEOUT, TlsOptions


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("pem")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    paths = {name: str(folder / f"{name}.pem") for name in ("cert", "key", "root", "junk")}
    leaf.cert_chain_pems[0].write_to_path(paths["cert"])
    leaf.private_key_pem.write_to_path(paths["key"])
    ca.cert_pem.write_to_path(paths["root"])
    Path(paths["junk"]).write_text("not a PEM file\n")
    return paths


def served(files: dict[str, str], prefix: str = "--grpc", **flags: object) -> TlsOptions:
    """TLS options with the server certificate and key of ``files``, and ``flags``."""
    settings = {"server_cert": files["cert"], "server_key": files["key"], **flags}
    return TlsOptions(prefix, **settings)  # type: ignore[arg-type]


def test_off_by_default() -> None:
    options = TlsOptions("--grpc")
    assert not options.enabled and options.server_context(["h2"]) is None
    assert options.handshake_timeout_secs == DEFAULT_HANDSHAKE_TIMEOUT


def test_server_context(files: dict[str, str]) -> None:
    context = served(files, use_ssl=True).server_context(["h2"])
    assert context is not None
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE
    assert context.options & ssl.OP_NO_RENEGOTIATION and context.options & ssl.OP_NO_COMPRESSION
    # TLS 1.2 suites are ephemeral-key AEAD only
    tls12 = [c for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 and all(c["aead"] and c["kea"] in ("kx-ecdhe", "kx-dhe") for c in tls12)


def test_mutual_requires_client_certificates(files: dict[str, str]) -> None:
    options = served(files, "--http", use_ssl_mutual=True, root_cert=files["root"])
    assert options.enabled  # mutual implies TLS, as tritonserver
    context = options.server_context(["http/1.1"])
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    assert len(context.get_ca_certs()) == 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"use_ssl": True, "server_key": "K"}, "--grpc-use-ssl needs --grpc-server-cert"),
        ({"use_ssl": True, "server_cert": "C"}, "--grpc-use-ssl needs --grpc-server-key"),
        (
            {"use_ssl_mutual": True, "server_cert": "C", "server_key": "K"},
            "--grpc-use-ssl-mutual needs --grpc-root-cert",
        ),
        ({"server_cert": "C"}, "--grpc-server-cert given but --grpc-use-ssl is false"),
        (
            {"root_cert": "R", "handshake_timeout": 3.0},
            "--grpc-root-cert, --grpc-ssl-handshake-timeout-secs given but --grpc-use-ssl is false",
        ),
        (
            {"use_ssl": True, "server_cert": "C", "server_key": "K", "handshake_timeout": 0.0},
            "--grpc-ssl-handshake-timeout-secs must be > 0, got 0.0",
        ),
    ],
)
def test_inconsistent_flags(
    files: dict[str, str], settings: dict[str, object], message: str
) -> None:
    names = {"C": files["cert"], "K": files["key"], "R": files["root"]}
    settings = {key: names.get(value, value) for key, value in settings.items()}  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="^" + message):
        TlsOptions("--grpc", **settings).check()  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", ["cert", "key"])
def test_unreadable_file_names_flag_and_file(files: dict[str, str], flag: str) -> None:
    paths = {"cert": files["cert"], "key": files["key"], flag: "/nonexistent/x.pem"}
    options = TlsOptions("--http", use_ssl=True, server_cert=paths["cert"], server_key=paths["key"])
    with pytest.raises(
        ValueError, match=f"^--http-server-{flag} '/nonexistent/x.pem' cannot be read"
    ):
        options.check()


def test_files_that_are_not_pem(files: dict[str, str]) -> None:
    bad_key = TlsOptions(
        "--http", use_ssl=True, server_cert=files["cert"], server_key=files["junk"]
    )
    with pytest.raises(ValueError, match="are not a PEM certificate and its private key"):
        bad_key.server_context(["http/1.1"])
    bad_root = served(files, "--http", use_ssl_mutual=True, root_cert=files["junk"])
    with pytest.raises(ValueError, match=f"^--http-root-cert '{files['junk']}' is not a PEM"):
        bad_root.server_context(["http/1.1"])


def test_root_cert_without_mutual_is_accepted_with_a_warning(
    files: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """tritonserver accepts it (its own tests pass it); it has no effect, and says so."""
    options = served(files, use_ssl=True, root_cert=files["root"])
    with caplog.at_level(logging.WARNING):
        options.check()
    assert "--grpc-root-cert is used only with --grpc-use-ssl-mutual" in caplog.text
    context = options.server_context(["h2"])
    assert context is not None and context.verify_mode == ssl.CERT_NONE
