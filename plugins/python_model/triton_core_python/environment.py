"""``EXECUTION_ENV_PATH``: the Python environment a model's stubs run in.

As in Triton, the parameter names an environment folder or a packed one (a conda-pack
``.tar.gz``), ``$$TRITON_MODEL_DIRECTORY`` standing for the model's folder. A packed
environment is unpacked once into a cache folder, keyed by the archive's path, size and
modification time (a changed archive is unpacked again, its old copy removed), and its
``bin/python3`` runs the stubs.

An archive is model-repository content, so it is unpacked defensively: members may not
leave the destination (no absolute paths, ``..`` or links pointing out: the tarfile
``data`` filter), devices and special files are refused, and the total size and member
count are bounded before anything is written.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import tempfile
import threading
from pathlib import Path

from triton_core import internal, invalid_arg

#: default bound on an unpacked environment's size (``execution-env-max-bytes``)
DEFAULT_MAX_BYTES = 32 << 30
#: members an archive may have (a conda environment has tens of thousands of files)
MAX_MEMBERS = 1_000_000
#: written into a finished unpacked copy; a copy without it is incomplete
_COMPLETE = ".triton_core_unpacked"

_lock = threading.Lock()


def default_cache_directory() -> Path:
    return Path(tempfile.gettempdir()) / "triton_core_python_envs"


def resolve(model: str, location: str, model_dir: Path, cache: Path, max_bytes: int) -> Path:
    """The environment folder for ``EXECUTION_ENV_PATH`` ``location`` (unpacked if needed)."""
    location = location.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir))
    path = Path(location)
    if path.is_dir():
        return path
    if not path.is_file():
        raise invalid_arg(f"model '{model}': EXECUTION_ENV_PATH '{location}' does not exist")
    with _lock:  # two models sharing one archive unpack it once
        return _unpacked(model, path.resolve(), cache, max_bytes)


def python_of(model: str, environment: Path, location: str) -> str:
    for name in ("bin/python3", "bin/python"):
        candidate = environment / name
        if candidate.exists():
            return str(candidate)
    raise invalid_arg(
        f"model '{model}': EXECUTION_ENV_PATH '{location}' has no bin/python3 (a conda-pack "
        "archive or an environment folder has one)"
    )


def _unpacked(model: str, archive: Path, cache: Path, max_bytes: int) -> Path:
    stat = archive.stat()
    key = hashlib.sha256(str(archive).encode()).hexdigest()[:16]
    target = cache / f"{key}-{stat.st_size}-{stat.st_mtime_ns}"
    if (target / _COMPLETE).is_file():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
    except OSError as exc:
        raise internal(
            f"model '{model}': cannot create the folder to unpack EXECUTION_ENV_PATH "
            f"'{archive}' in '{cache}' (--backend-config=python,execution-env-directory=...): "
            f"{exc}"
        ) from None
    try:
        _extract(model, archive, staging, max_bytes)
        (staging / _COMPLETE).write_text(str(archive))
        shutil.rmtree(target, ignore_errors=True)  # an incomplete earlier attempt
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    for stale in cache.glob(f"{key}-*"):
        if stale != target:  # copies of an earlier version of the archive
            shutil.rmtree(stale, ignore_errors=True)
    return target


def _extract(model: str, archive: Path, destination: Path, max_bytes: int) -> None:
    what = f"model '{model}': EXECUTION_ENV_PATH '{archive}'"
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = _checked_members(what, tar, max_bytes)
            tar.extractall(destination, members=members, filter="data")
    except tarfile.FilterError as exc:
        raise invalid_arg(f"{what}: refused to unpack: {exc}") from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise invalid_arg(f"{what} is not a readable .tar.gz archive: {exc}") from None


def _checked_members(what: str, tar: tarfile.TarFile, max_bytes: int) -> list[tarfile.TarInfo]:
    """The archive's members, refused before extraction when too many or too big."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        if len(members) >= MAX_MEMBERS:
            raise invalid_arg(f"{what} has more than {MAX_MEMBERS} files")
        total += member.size
        if total > max_bytes:
            raise invalid_arg(
                f"{what} unpacks to more than {max_bytes} bytes "
                "(--backend-config=python,execution-env-max-bytes=N raises the bound)"
            )
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise invalid_arg(f"{what}: refused to unpack '{member.name}': not a regular file")
        members.append(member)
    return members
