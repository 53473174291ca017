"""The checksum agent: model files must match the digests the config lists."""

from __future__ import annotations

import hashlib
from pathlib import Path

from triton_core import (
    AgentAction,
    AgentModel,
    RepositoryAgent,
    TritonError,
    invalid_arg,
    is_within,
    unsupported,
)

#: algorithm names as written in keys (case-insensitive) -> hashlib names
ALGORITHMS = {"MD5": "md5", "SHA256": "sha256", "SHA-256": "sha256"}
_CHUNK = 1 << 20


class ChecksumAgent(RepositoryAgent):
    """Acts on LOAD: every ``<ALGO>:<path>`` parameter must match the file's digest."""

    def act(self, action: AgentAction, model: AgentModel) -> Path | None:
        if action is not AgentAction.LOAD:
            return None
        for key, expected in model.parameters.items():
            algorithm, path = self._parse(key)
            actual = self._digest(model, algorithm, path)
            if actual != expected.lower():
                raise invalid_arg(
                    f"Mismatched {algorithm} hash for file {path}, expect: {expected}, "
                    f"got: {actual}"
                )
        return None

    @staticmethod
    def _parse(key: str) -> tuple[str, str]:
        name, sep, path = key.partition(":")
        if not sep or not name or not path:
            raise invalid_arg(f"failed to parse key: {key}")
        algorithm = name.upper()
        if algorithm not in ALGORITHMS:
            raise TritonError(
                unsupported("").status,
                f"unsupported hash algorithm '{name}' in key '{key}' (supported: MD5, SHA256)",
            )
        return ("SHA256" if ALGORITHMS[algorithm] == "sha256" else algorithm), path

    @staticmethod
    def _digest(model: AgentModel, algorithm: str, path: str) -> str:
        target = model.location / path
        if Path(path).is_absolute() or not is_within(target, model.location):
            raise invalid_arg(
                f"checksum for model '{model.name}': file '{path}' is outside the model folder"
            )
        digest = hashlib.new(ALGORITHMS[algorithm])
        try:
            with open(target, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
        except OSError as exc:
            raise invalid_arg(
                f"checksum for model '{model.name}': cannot read file '{path}': {exc.strerror}"
            ) from None
        return digest.hexdigest()
