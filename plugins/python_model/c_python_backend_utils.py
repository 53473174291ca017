"""Triton's ``c_python_backend_utils``, the extension module behind pb_utils, as far as models
import it directly: ``c_python_backend_utils.shared_memory.free_memory()``, the bytes of the
model process's shared memory not in use (Triton's QA compares it before and after a stub
restarts). Everything else of pb_utils is available here under the same names, as in
Triton, where pb_utils re-exports this module's classes.
"""

from __future__ import annotations

import triton_python_backend_utils as _pb_utils
from triton_python_backend_utils import *  # noqa: F403


class SharedMemory:
    """The model process's shared memory, as Triton's ``SharedMemoryManager`` binding."""

    def free_memory(self) -> int:
        """Bytes of the process's shared-memory segments not held by a message in flight;
        0 outside a model process."""
        runtime = _pb_utils._runtime
        if runtime is None:
            return 0
        return int(runtime.memory.arena.free_bytes())


shared_memory = SharedMemory()
