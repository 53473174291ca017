"""TLS for the frontends: Triton's ``--grpc-use-ssl*`` flags, and the same for HTTP.

``--<p>-use-ssl`` serves TLS with ``--<p>-server-cert`` / ``--<p>-server-key`` (PEM files);
``--<p>-use-ssl-mutual`` (which implies ``--<p>-use-ssl``) also requires a client certificate
signed by ``--<p>-root-cert``. TLS 1.2 is the oldest version served. A handshake that does not
finish within the handshake timeout closes its connection.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

#: seconds a client has to finish its TLS handshake (asyncio's own default is 60)
DEFAULT_HANDSHAKE_TIMEOUT: Final = 10.0
#: TLS 1.2 ciphers: forward secret and AEAD only, as HTTP/2 requires (RFC 9113 9.2.2);
#: TLS 1.3 suites are all of that kind and are not affected
_TLS12_CIPHERS: Final = "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20"


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """One endpoint's TLS flags; ``flag_prefix`` (``--grpc``, ``--http``) names them in errors."""

    flag_prefix: str
    use_ssl: bool = False
    use_ssl_mutual: bool = False
    server_cert: str | None = None
    server_key: str | None = None
    root_cert: str | None = None
    #: seconds; None: the default, :data:`DEFAULT_HANDSHAKE_TIMEOUT`
    handshake_timeout: float | None = None

    @property
    def enabled(self) -> bool:
        return self.use_ssl or self.use_ssl_mutual

    @property
    def handshake_timeout_secs(self) -> float:
        return self.handshake_timeout or DEFAULT_HANDSHAKE_TIMEOUT

    def flag(self, name: str) -> str:
        return f"{self.flag_prefix}-{name}"

    def check(self) -> None:
        """Refuse inconsistent flags and unreadable files; raises ``ValueError`` naming them.

        Also warns when a flag has no effect as tritonserver accepts it (a root certificate
        without mutual TLS).
        """
        self._check_flags()
        if self.root_cert and not self.use_ssl_mutual:
            log.warning(
                "%s is used only with %s: client certificates are not requested",
                self.flag("root-cert"),
                self.flag("use-ssl-mutual"),
            )

    def _check_flags(self) -> None:
        files = {
            "server-cert": self.server_cert,
            "server-key": self.server_key,
            "root-cert": self.root_cert,
        }
        if not self.enabled:
            given = [self.flag(name) for name, path in files.items() if path]
            if self.handshake_timeout is not None:
                given.append(self.flag("ssl-handshake-timeout-secs"))
            if given:
                raise ValueError(
                    f"{', '.join(given)} given but {self.flag('use-ssl')} is false; "
                    f"add {self.flag('use-ssl')} (or {self.flag('use-ssl-mutual')})"
                )
            return
        for name in ("server-cert", "server-key"):
            if not files[name]:
                raise ValueError(f"{self.flag('use-ssl')} needs {self.flag(name)} (a PEM file)")
        if self.use_ssl_mutual and not self.root_cert:
            raise ValueError(
                f"{self.flag('use-ssl-mutual')} needs {self.flag('root-cert')} "
                "(the PEM certificate that client certificates must be signed by)"
            )
        if self.handshake_timeout is not None and not self.handshake_timeout > 0:
            raise ValueError(
                f"{self.flag('ssl-handshake-timeout-secs')} must be > 0, "
                f"got {self.handshake_timeout}"
            )
        for name, path in files.items():
            if path:
                _check_readable(self.flag(name), path)

    def server_context(self, alpn: list[str]) -> ssl.SSLContext | None:
        """The server's SSLContext (None when TLS is off); raises ``ValueError`` for bad files.

        ``alpn``: the application protocols offered, e.g. ``["h2"]``.
        """
        self._check_flags()
        if not self.enabled:
            return None
        assert self.server_cert and self.server_key  # check() made sure
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
        context.set_ciphers(_TLS12_CIPHERS)
        context.set_alpn_protocols(alpn)
        try:
            context.load_cert_chain(self.server_cert, self.server_key)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"{self.flag('server-cert')} '{self.server_cert}' and {self.flag('server-key')} "
                f"'{self.server_key}' are not a PEM certificate and its private key: {exc}"
            ) from exc
        if self.use_ssl_mutual:
            assert self.root_cert
            try:
                context.load_verify_locations(cafile=self.root_cert)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(
                    f"{self.flag('root-cert')} '{self.root_cert}' is not a PEM certificate: {exc}"
                ) from exc
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def pem_files(self) -> tuple[bytes, bytes, bytes | None]:
        """(certificate chain, private key, root certificate or None), read from the files."""
        assert self.server_cert and self.server_key
        root = Path(self.root_cert).read_bytes() if self.root_cert else None
        return Path(self.server_cert).read_bytes(), Path(self.server_key).read_bytes(), root


def _check_readable(flag: str, path: str) -> None:
    try:
        with open(path, "rb") as file:
            file.read(1)
    except OSError as exc:
        raise ValueError(f"{flag} '{path}' cannot be read: {exc.strerror or exc}") from exc
