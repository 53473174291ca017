"""Where the files of a load request's override (``file:<path>`` parameters) are written.

As in Triton: the path is taken below the override's model folder, a leading ``/`` included
(``file:/1/model.py`` is ``1/model.py``); it is normalized, ``..`` and symlinks resolved, and
refused when the result is not inside that folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from triton_core.repository.remote import MAX_COMPONENT_BYTES


def override_file_path(folder: Path, key: str) -> Path:
    """The file ``file:<key>`` names below ``folder``; ValueError in Triton's words if none."""
    root = Path(os.path.realpath(folder))
    target = Path(os.path.realpath(root / key.lstrip("/")))
    if root not in target.parents:
        if target == root:
            raise ValueError(f"failed to open binary file for write {target}: Is a directory")
        raise ValueError(
            f"Invalid file parameter 'file:{key}' with normalized path '{target}' must stay "
            "within model directory."
        )
    if any(len(part.encode()) > MAX_COMPONENT_BYTES for part in target.relative_to(root).parts):
        raise ValueError(
            f"Invalid file parameter 'file:{key}': a path component is longer than 255 bytes"
        )
    return target
