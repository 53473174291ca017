"""triton-core's ``python`` backend: Triton's ``model.py`` files, one process per instance.

Importing this package imports nothing of the server: the stub processes import
``triton_core_python.stub`` (and ``triton_python_backend_utils``) with numpy only.
"""

from __future__ import annotations

__version__ = "0.1.0"
