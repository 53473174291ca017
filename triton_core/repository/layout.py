"""Triton's repository layout: model folders, numeric version folders, and path safety.

Names that come from clients are only ever looked up among names found by scanning, and every
folder used must resolve inside its repository root, so a name or a symlink cannot reach
elsewhere on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

from triton_core.errors import invalid_arg
from triton_core.protos.model_config_pb2 import ModelVersionPolicy


def is_within(path: Path, root: Path) -> bool:
    """True when ``path`` (symlinks resolved) is ``root`` or inside it."""
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def safe_model_name(name: str) -> bool:
    """A model name that is a plain folder name (no separator, no dot-segment). A backslash
    is an ordinary character of a POSIX name, as in Triton (whose Python backend then
    refuses it in the names of its processes)."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


#: what C's isspace() takes for white space, which Triton trims off a name before its check
_C_WHITESPACE = " \t\n\v\f\r"


def load_name_problem(name: str) -> str | None:
    """Triton's (2.7x) check of the name a load request gives, in its words, or None.

    Only a name that trims to nothing, to ``..`` or holds a ``/`` fails it; other names a
    repository cannot hold (``.``, too long) fail the load as "failed to poll" instead.
    """
    trimmed = name.strip(_C_WHITESPACE)
    if not trimmed:
        return "Model name cannot be empty. Please enter a valid name to deploy."
    if trimmed == ".." or "/" in trimmed:
        return f"invalid model name '{name}', model name must not contain path traversal characters"
    return None


def scan_models(root: Path) -> dict[str, Path]:
    """Model folders directly under ``root`` (hidden folders skipped), by name."""
    models: dict[str, Path] = {}
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            models[entry.name] = Path(entry.path)
    return models


def version_folders(model_dir: Path, root: Path) -> dict[int, Path]:
    """Numeric version folders of a model; names starting with "0" are not versions.

    A version folder that resolves outside ``root`` raises INVALID_ARG.
    """
    versions: dict[int, Path] = {}
    with os.scandir(model_dir) as entries:
        for entry in entries:
            name = entry.name
            if not name.isdigit() or name.startswith("0") or not entry.is_dir():
                continue
            path = Path(entry.path)
            if not is_within(path, root):
                raise invalid_arg(
                    f"version folder '{name}' of model '{model_dir.name}' resolves outside the "
                    f"model repository {root}"
                )
            versions[int(name)] = path
    return versions


def select_versions(policy: ModelVersionPolicy, available: list[int], model: str) -> list[int]:
    """Versions a version policy selects, ascending. Raises when it selects none."""
    available = sorted(available)
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        selected = available
    elif choice == "specific":
        wanted = set(policy.specific.versions)
        selected = [v for v in available if v in wanted]
        missing = sorted(wanted - set(available))
        if missing:
            raise invalid_arg(
                f"model '{model}': version policy names version(s) {missing} that have no "
                "version folder"
            )
    else:
        count = policy.latest.num_versions if choice == "latest" else 1
        selected = available[-max(count, 1) :] if available else []
    if not selected:
        raise invalid_arg(f"model '{model}' has no version folder that its version policy selects")
    return selected
