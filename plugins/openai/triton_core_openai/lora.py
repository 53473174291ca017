"""The LoRA adapters of a model in the vLLM convention, found as Triton's OpenAI frontend
finds them: in the version folder of the model's local repository, ``model.json`` (the vLLM
backend's engine arguments) says ``enable_lora``, and ``multi_lora.json`` maps each adapter's
name to its weights.

A model's adapters are one of:

- a tuple of names: a request may name only these; empty when ``enable_lora`` is not true;
- None, unknown: no local folder (a cloud repository, uploaded files), no readable
  ``model.json``, or a missing or malformed ``multi_lora.json`` (Triton logs and goes on).
  A request may then name any adapter, and the base model answers it (none is passed on).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger("triton_core_openai")

#: what is read of model.json or multi_lora.json: more is refused as malformed
MAX_FILE_BYTES = 1 << 20

_FILES = ("model.json", "multi_lora.json")


class FileProblem(ValueError):
    """A file that cannot be read as a bounded JSON document."""


def _read_json(path: Path) -> Any:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise FileProblem(error.strerror or str(error)) from error
    if len(data) > MAX_FILE_BYTES:
        raise FileProblem(f"it is larger than {MAX_FILE_BYTES} bytes")
    try:
        return json.loads(data)
    except ValueError as error:
        raise FileProblem(f"it is not JSON: {error}") from error


def read_loras(model: str, version_dir: Path) -> tuple[str, ...] | None:
    """The adapters of ``model`` whose version folder is ``version_dir`` (see above)."""
    try:
        settings = _read_json(version_dir / "model.json")
    except FileProblem:
        return None  # as Triton: not a vLLM model folder, nothing is known
    if not isinstance(settings, dict):
        return None
    if str(settings.get("enable_lora")).lower() != "true":
        return ()
    path = version_dir / "multi_lora.json"
    try:
        adapters = _read_json(path)
    except FileProblem as error:
        _warn(model, path, str(error))
        return None
    if not isinstance(adapters, dict):
        _warn(model, path, "it is not a JSON object of LoRA names and folders")
        return None
    return tuple(adapters)


def _warn(model: str, path: Path, problem: str) -> None:
    logger.warning(
        "model '%s' enables LoRA but its %s cannot be used (%s): any LoRA name is accepted "
        "and the base model answers",
        model,
        path,
        problem,
    )


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size, status.st_ino


class LoraCatalog:
    """Each model's adapters, read again only when its version folder or one of the two
    files changes (a reload, an edit), so that a request naming a LoRA costs two stats."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[object, ...], tuple[str, ...] | None]] = {}

    def adapters(self, model: str, version_dir: Path | None) -> tuple[str, ...] | None:
        if version_dir is None:
            self._known.pop(model, None)
            return None
        stamp = (version_dir, *(_stamp(version_dir / name) for name in _FILES))
        known = self._known.get(model)
        if known is None or known[0] != stamp:
            known = (stamp, read_loras(model, version_dir))
            self._known[model] = known
        return known[1]
