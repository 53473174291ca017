"""Where models come from: local repository folders and cloud repositories.

A source lists its model names, gives a local folder for a model (a cloud source copies it
first), and fingerprints a model's files so poll mode can tell when they changed.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path

from triton_core.errors import internal, invalid_arg
from triton_core.repository.layout import is_within, safe_model_name, scan_models
from triton_core.repository.remote import MAX_COMPONENT_BYTES, RemoteRepository, is_remote


class ModelSource(ABC):
    """One ``--model-repository``."""

    #: as given on the command line, for messages
    location: str

    @abstractmethod
    def model_names(self) -> list[str]:
        """The models this repository holds (blocking I/O)."""

    @abstractmethod
    def materialize(self, name: str) -> tuple[Path, Path]:
        """``(model folder, root it must stay inside)`` on local disk (blocking I/O)."""

    @abstractmethod
    def fingerprint(self, name: str) -> object:
        """A value that changes when any of the model's files change (blocking I/O)."""

    def maps(self, name: str) -> bool:
        """Whether ``name`` is a mapped name (its config's name is not checked against it)."""
        return False

    def release(self, name: str) -> None:  # noqa: B027 - only cloud sources hold copies
        """The model was unloaded: drop what ``materialize`` made for it."""

    def close(self) -> None:  # noqa: B027 - only cloud sources hold copies
        """The server stops: drop every local copy."""


def check_name(name: str, location: str) -> None:
    """Names from clients: plain folder names of at most 255 bytes."""
    if len(name.encode()) > MAX_COMPONENT_BYTES:
        raise internal(
            f"failed to poll from model repository {location}: model name is longer than "
            f"{MAX_COMPONENT_BYTES} bytes"
        )
    if not safe_model_name(name):
        raise invalid_arg(f"Request for unknown model: '{name}' is not found")


class LocalSource(ModelSource):
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.location = str(root)

    def model_names(self) -> list[str]:
        if not self.root.is_dir():
            raise invalid_arg(f"model repository {self.root} is not a directory")
        return sorted(scan_models(self.root))

    def materialize(self, name: str) -> tuple[Path, Path]:
        check_name(name, self.location)
        return self._inside(name, self.root / name)

    def _inside(self, name: str, path: Path) -> tuple[Path, Path]:
        if not is_within(path, self.root):
            raise invalid_arg(f"model '{name}' resolves outside the model repository {self.root}")
        return path, self.root

    def fingerprint(self, name: str) -> object:
        return folder_fingerprint(self.root / name)


def folder_fingerprint(base: Path) -> object:
    """The relative paths, sizes and modification times of the files under ``base``."""
    entries = []
    for folder, _, files in os.walk(base, followlinks=False):
        for file in files:
            path = os.path.join(folder, file)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            entries.append((os.path.relpath(path, base), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))


class MappedSource(LocalSource):
    """A repository registered while serving, whose subfolders may be served under other
    names (Triton's RegisterModelRepository): ``mapping`` is model name -> subfolder.

    A mapped subfolder is served only under its mapped name; the others under their own.
    """

    def __init__(self, root: Path, mapping: dict[str, str]) -> None:
        super().__init__(root)
        self.mapping = dict(mapping)

    def model_names(self) -> list[str]:
        mapped = set(self.mapping.values())
        names = [name for name in super().model_names() if name not in mapped]
        names += [name for name, folder in self.mapping.items() if (self.root / folder).is_dir()]
        return sorted(names)

    def maps(self, name: str) -> bool:
        return name in self.mapping

    def folder(self, name: str) -> Path:
        return self.root / self.mapping.get(name, name)

    def materialize(self, name: str) -> tuple[Path, Path]:
        if name not in self.mapping:
            return super().materialize(name)
        return self._inside(name, self.folder(name))

    def fingerprint(self, name: str) -> object:
        return folder_fingerprint(self.folder(name))


class RemoteSource(ModelSource):
    def __init__(self, url: str, cache_root: Path | None = None) -> None:
        self.repository = RemoteRepository(url, cache_root)
        self.location = url

    def model_names(self) -> list[str]:
        return self.repository.list_models()

    def materialize(self, name: str) -> tuple[Path, Path]:
        check_name(name, self.location)
        path = self.repository.fetch_model(name)
        return path, self.repository.local_root

    def fingerprint(self, name: str) -> object:
        return self.repository.fingerprint(name)

    def release(self, name: str) -> None:
        self.repository.remove_model(name)

    def close(self) -> None:
        self.repository.close()


def open_source(location: str | Path, cache_root: Path | None = None) -> ModelSource:
    if is_remote(location):
        return RemoteSource(str(location), cache_root)
    return LocalSource(Path(location))
