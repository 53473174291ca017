"""A model's ``model.py``: imported as Triton's stub imports it, its ``TritonPythonModel``
class found, and its exceptions described as Triton describes them; and the model's
``auto_complete_config``, run in the throwaway interpreter of Triton's auto-complete
(``python -m triton_core_python.stub --auto-complete MODEL_PY --result-fd K``).

Imports only the standard library and ``triton_python_backend_utils``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import triton_python_backend_utils as pb_utils


def load_model_module(model_path: str, python_based: bool = False) -> ModuleType:
    """Import ``<version>/model.py`` as Triton's stub does: module ``<version>.model`` of the
    package ``<version>`` (so ``from . import helper`` finds the model's other files), with
    the version folder and the model's folder on ``sys.path``. A Python-based backend's
    ``model.py`` (``python_based``) is module ``model``, with its folder on ``sys.path``."""
    path = Path(model_path)
    if path.suffix != ".py":
        raise ImportError(f"Model name must end with '.py'. Model name is \"{path.name}\".")
    if python_based:
        return _load_backend_module(path)
    version_dir, model_dir = path.parent, path.parent.parent
    for folder in (version_dir, model_dir):
        if str(folder) not in sys.path:
            sys.path.append(str(folder))
    sys.dont_write_bytecode = True  # leave the model repository as it is
    package = version_dir.name
    # The package is the version folder of this model, not a same-named folder that an
    # earlier sys.path entry (the working directory) may hold.
    spec = importlib.machinery.PathFinder.find_spec(package, [str(model_dir)])
    if spec is None:
        raise ImportError(f"cannot import {path}: no folder '{version_dir}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    if spec.loader is not None:
        spec.loader.exec_module(module)  # a version folder with an __init__.py
    return importlib.import_module(f"{package}.{path.stem}")


def _load_backend_module(path: Path) -> ModuleType:
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.append(folder)  # the backend's own modules (vLLM's ``utils``)
    sys.dont_write_bytecode = True
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def model_class(module: ModuleType, model_path: str) -> type:
    cls = getattr(module, "TritonPythonModel", None)
    if not isinstance(cls, type):
        raise AttributeError(f"{model_path} defines no class 'TritonPythonModel'")
    return cls


def describe_exception(exc: BaseException, model_dir: str | None = None) -> str:
    """``Type: message`` plus the model's own frames, innermost first (Triton's "At:")."""
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if model_dir is not None:
        frames = [frame for frame in frames if frame.filename.startswith(model_dir)]
    if frames:
        text += "\n\nAt:\n" + "".join(
            f"  {frame.filename}({frame.lineno}): {frame.name}\n" for frame in reversed(frames[-5:])
        )
    return text


def auto_complete(
    model_path: str, config: dict[str, Any], version_dir: str | None = None
) -> dict[str, Any]:
    """Run ``TritonPythonModel.auto_complete_config`` on ``config``; the completed dict.
    ``version_dir``: ``model_path`` is a Python-based backend's, completing that model."""
    pb_utils._model_dir = version_dir or str(Path(model_path).parent)
    module = load_model_module(model_path, python_based=version_dir is not None)
    cls = model_class(module, model_path)
    method = getattr(cls, "auto_complete_config", None)
    if method is None:
        return config
    result = method(pb_utils.ModelConfig(config))
    if not isinstance(result, pb_utils.ModelConfig):
        raise TypeError(
            f"auto_complete_config() must return the pb_utils.ModelConfig it was given, got "
            f"{type(result).__name__}"
        )
    return result.as_dict()


def run_auto_complete(model_path: str, result_fd: int, version_dir: str | None = None) -> int:
    """:func:`auto_complete` on the config JSON read from stdin; ``{"config": ...}`` or
    ``{"error": ...}`` written to descriptor ``result_fd``."""
    config = json.load(sys.stdin)
    try:
        outcome = {"config": auto_complete(model_path, config, version_dir)}
    except BaseException as exc:
        outcome = {"error": describe_exception(exc, str(Path(model_path).parent.parent))}
    data = json.dumps(outcome).encode()
    with os.fdopen(result_fd, "wb") as result:
        result.write(data)
    return 0
