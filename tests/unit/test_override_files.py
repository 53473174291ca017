"""Where a load request's ``file:`` overrides land: below the model folder, as Triton places
them (Triton 2.51 accepts ``/1/model.py``, ``1//model.py``, ``1/../1/model.py``, ``/etc/passwd``
below the folder, and refuses what normalizes outside it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from triton_core.repository.overrides import override_file_path


@pytest.mark.parametrize(
    ("key", "inside"),
    [
        ("1/model.py", "1/model.py"),
        ("/1/model.py", "1/model.py"),
        ("//1/model.py", "1/model.py"),
        ("1//model.py", "1/model.py"),
        ("1/./model.py", "1/model.py"),
        ("1/../1/model.py", "1/model.py"),
        ("/etc/passwd", "etc/passwd"),
    ],
)
def test_paths_are_taken_below_the_model_folder(tmp_path: Path, key: str, inside: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    assert override_file_path(folder, key) == folder.resolve() / inside


@pytest.mark.parametrize("key", ["../escape.py", "../../escape.py", "1/../../x.py", "/../x.py"])
def test_paths_that_normalize_outside_are_refused(tmp_path: Path, key: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(ValueError) as info:
        override_file_path(folder, key)
    assert f"Invalid file parameter 'file:{key}' with normalized path '" in str(info.value)
    assert "' must stay within model directory." in str(info.value)


def test_a_symlink_out_of_the_folder_is_followed_and_refused(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    (folder / "1").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, folder / "1" / "link")
    with pytest.raises(ValueError, match="must stay within model directory"):
        override_file_path(folder, "1/link/model.py")


def test_the_folder_itself_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Is a directory"):
        override_file_path(tmp_path, "/")
