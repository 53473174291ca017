"""Cloud model repositories (``s3://``, ``gs://``, ``as://``) mirrored into a local cache.

fsspec does the talking (s3fs, gcsfs and adlfs are optional extras: ``triton-core[s3]`` ...),
with credentials from the usual environment variables. A model is copied to a folder of its
own under the cache root when it loads, and removed when it unloads or the server stops.
Object keys that would land outside that folder (``..``, absolute paths) are refused.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from triton_core.errors import TritonError, internal, invalid_arg
from triton_core.repository.layout import safe_model_name

logger = logging.getLogger(__name__)

SCHEMES = {"s3": "s3fs", "gs": "gcsfs", "as": "adlfs"}
#: the longest path component Linux filesystems allow, in bytes
MAX_COMPONENT_BYTES = 255


def is_remote(location: str | Path) -> bool:
    """True for ``s3://``, ``gs://`` and ``as://`` locations."""
    text = str(location)
    return any(text.startswith(f"{scheme}://") for scheme in SCHEMES)


@dataclass(frozen=True, slots=True)
class RemoteLocation:
    """A parsed repository URL: the fsspec protocol, its options, and the root path."""

    url: str
    protocol: str
    root: str
    options: dict[str, Any]


def parse_location(url: str) -> RemoteLocation:
    """Triton's URL forms.

    ``s3://bucket/path``, ``s3://host:port/bucket/path`` and ``s3://https://host:port/bucket/path``
    (an S3-compatible endpoint), ``gs://bucket/path``, ``as://account/container/path``.
    """
    scheme, _, rest = url.partition("://")
    if scheme not in SCHEMES:
        raise invalid_arg(f"unsupported repository location '{url}'")
    options: dict[str, Any] = {}
    if scheme == "s3":
        endpoint = None
        if rest.startswith(("http://", "https://")):
            protocol_prefix, _, rest = rest.partition("://")
            host, _, rest = rest.partition("/")
            endpoint = f"{protocol_prefix}://{host}"
        else:
            first, _, remainder = rest.partition("/")
            if ":" in first:  # host:port form
                endpoint, rest = f"http://{first}", remainder
        if endpoint:
            options["endpoint_url"] = endpoint
        return RemoteLocation(url, "s3", rest.strip("/"), options)
    if scheme == "as":
        account, _, rest = rest.partition("/")
        options["account_name"] = account
        return RemoteLocation(url, "abfs", rest.strip("/"), options)
    return RemoteLocation(url, "gcs", rest.strip("/"), options)


def check_relative_key(key: str, where: str) -> PurePosixPath:
    """A key below a model folder, refused when it could leave that folder."""
    path = PurePosixPath(key)
    if path.is_absolute() or any(part in ("..", "") for part in path.parts) or "\\" in key:
        raise invalid_arg(f"{where}: path '{key}' is not a relative path inside the model")
    for part in path.parts:
        if len(part.encode()) > MAX_COMPONENT_BYTES:
            raise invalid_arg(f"{where}: a path component is longer than 255 bytes")
    return path


class RemoteRepository:
    """One cloud repository: lists its models and copies them into a local cache folder."""

    def __init__(self, url: str, cache_root: Path | None = None) -> None:
        self.location = parse_location(url)
        self.url = url
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        base = cache_root or Path(tempfile.gettempdir()) / "triton-core-repositories"
        #: where models of this repository are copied; removed by close()
        self.local_root = base / digest
        self._fs = self._filesystem()

    def _filesystem(self) -> Any:
        try:
            import fsspec  # type: ignore[import-untyped]
        except ImportError:
            raise invalid_arg(
                f"repository {self.url} needs fsspec: pip install 'triton-core[{self._extra()}]'"
            ) from None
        try:
            return fsspec.filesystem(self.location.protocol, **self.location.options)
        except ImportError:
            raise invalid_arg(
                f"repository {self.url} needs {SCHEMES[self.url.split('://')[0]]}: "
                f"pip install 'triton-core[{self._extra()}]'"
            ) from None

    def _extra(self) -> str:
        return {"s3": "s3", "gs": "gcs", "as": "azure"}[self.url.split("://")[0]]

    def _remote(self, *parts: str) -> str:
        return "/".join(part for part in (self.location.root, *parts) if part)

    def list_models(self) -> list[str]:
        """Model folder names at the repository root."""
        try:
            self._fs.invalidate_cache()
            entries = self._fs.ls(self._remote(), detail=True)
        except FileNotFoundError:
            raise invalid_arg(f"model repository {self.url} does not exist") from None
        except Exception as exc:
            raise internal(f"failed to poll from model repository {self.url}: {exc}") from None
        names = []
        for entry in entries:
            if entry.get("type") != "directory":
                continue
            name = PurePosixPath(entry["name"]).name
            if safe_model_name(name) and not name.startswith("."):
                names.append(name)
        return sorted(names)

    def fetch_model(self, name: str) -> Path:
        """Copy one model folder into the cache (replacing an older copy); returns its path."""
        if not safe_model_name(name):
            raise invalid_arg(f"Request for unknown model: '{name}' is not found")
        target = self.local_root / name
        staging = self.local_root / f".{name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        prefix = self._remote(name)
        try:
            for key in self._fs.find(prefix):
                relative = check_relative_key(
                    key[len(prefix) :].lstrip("/"), f"model '{name}' in {self.url}"
                )
                destination = staging.joinpath(*relative.parts)
                destination.parent.mkdir(parents=True, exist_ok=True)
                self._fs.get_file(key, str(destination))
        except TritonError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        except Exception as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise internal(f"failed to copy model '{name}' from {self.url}: {exc}") from None
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        return target

    def fingerprint(self, name: str) -> tuple:
        """What changes when a model's files change (for poll mode): keys, sizes and times."""
        prefix = self._remote(name)
        details = self._fs.find(prefix, detail=True)
        return tuple(
            sorted(
                (key, info.get("size"), str(info.get("LastModified") or info.get("mtime") or ""))
                for key, info in details.items()
            )
        )

    def remove_model(self, name: str) -> None:
        if safe_model_name(name):
            shutil.rmtree(self.local_root / name, ignore_errors=True)

    def close(self) -> None:
        """Remove every local copy of this repository's models."""
        shutil.rmtree(self.local_root, ignore_errors=True)
