"""Write a model repository from Python: configs from dicts or text, versions, extra files."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

from google.protobuf import json_format, text_format

from triton_core.protos import model_config_pb2

#: a file's content: bytes, text, a file to copy, or a function that writes the file at a path
#: (as the ONNX plugin's ``model_builders`` do)
FileContent: TypeAlias = bytes | str | Path | Callable[[Path], object]
#: a config: a dict in the ModelConfig's JSON form, config.pbtxt text, or the message itself
ConfigSource: TypeAlias = Mapping[str, Any] | str | model_config_pb2.ModelConfig


def render_config(config: ConfigSource) -> str:
    """The config.pbtxt text (protobuf text format) of a config.

    A dict uses the ModelConfig's field names (``max_batch_size`` or ``maxBatchSize``) and
    enum names (``"TYPE_FP32"``, ``"KIND_CPU"``); a field that ModelConfig does not have
    is a ``ParseError`` naming it, before any server sees the file.
    """
    if isinstance(config, str):
        return config
    if isinstance(config, Mapping):
        config = json_format.ParseDict(dict(config), model_config_pb2.ModelConfig())
    text: str = text_format.MessageToString(config)
    return text


class ModelRepository:
    """A model repository in Triton's layout under ``root``: ``<model>/config.pbtxt``,
    ``<model>/<version>/<files>`` and files beside the config (labels).

    It is path-like: pass it wherever a repository path goes.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def __fspath__(self) -> str:
        return str(self.root)

    def __str__(self) -> str:
        return str(self.root)

    def __repr__(self) -> str:
        return f"ModelRepository({str(self.root)!r})"

    def add_model(
        self,
        name: str,
        config: ConfigSource | None = None,
        *,
        versions: Mapping[int, Mapping[str, FileContent]] | None = None,
        files: Mapping[str, FileContent] | None = None,
    ) -> Path:
        """Write (or add to) model ``name``; return its folder.

        ``config`` None writes no config.pbtxt (the backend completes one from the model
        file); ``versions`` maps a version number to the files of that version folder,
        ``{1: {"model.onnx": onnx_bytes}}``; ``files`` go beside config.pbtxt
        (``{"labels.txt": "cat\\ndog\\n"}``).
        """
        model_dir = self.root / name
        model_dir.mkdir(parents=True, exist_ok=True)
        if config is not None:
            (model_dir / "config.pbtxt").write_text(render_config(config))
        for version, version_files in (versions or {}).items():
            self.add_version(name, version, version_files)
        _write_files(model_dir, files or {})
        return model_dir

    def add_version(self, name: str, version: int, files: Mapping[str, FileContent]) -> Path:
        """Write version folder ``<name>/<version>`` with ``files``; return it."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"model '{name}': a version is a number >= 0, got {version!r}")
        version_dir = self.root / name / str(version)
        version_dir.mkdir(parents=True, exist_ok=True)
        _write_files(version_dir, files)
        return version_dir

    def remove_model(self, name: str) -> None:
        shutil.rmtree(self.root / name)

    def remove_version(self, name: str, version: int) -> None:
        shutil.rmtree(self.root / name / str(version))


def _write_files(folder: Path, files: Mapping[str, FileContent]) -> None:
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        elif isinstance(content, Path):
            shutil.copyfile(content, path)
        elif callable(content):
            content(path)
        else:
            raise TypeError(
                f"file '{path}': content must be bytes, str, a Path or a function of the "
                f"path, not {type(content).__name__}"
            )
