"""--memory-trim-threshold: freed memory stays for reuse (glibc), and a bad value is refused."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from triton_core.tensors import allocator

GLIBC = platform.libc_ver()[0] == "glibc"

#: in a fresh process: allocate and free 20 MiB, then report the resident bytes that freeing
#: gave back; with "child", a process started from there (as a Python model stub) reports
_PROBE = """
import subprocess, sys
from triton_core.tensors import allocator
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
if sys.argv[1] != "0":
    assert allocator.keep_freed_memory(int(sys.argv[1]))
if sys.argv[2:] == ["child"]:
    sys.exit(subprocess.run([sys.executable, "-c", PROBE, "0"]).returncode)
block = bytearray(20 << 20)  # zero-filled: every page touched
before = resident()
del block
print(before - resident())
"""


def freed_and_returned(trim_threshold: int, *extra: str) -> int:
    """Bytes the probe process (or its child) gave back to the system when it freed 20 MiB."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    probe = f"PROBE = {_PROBE!r}\n{_PROBE}"
    output = subprocess.run(
        [sys.executable, "-c", probe, str(trim_threshold), *extra],
        capture_output=True, text=True, timeout=60, env=env, check=True,
    )  # fmt: skip
    return int(output.stdout.strip())


@pytest.mark.skipif(not GLIBC, reason="the threshold applies to glibc's malloc only")
def test_freed_large_blocks_stay_for_reuse_with_the_threshold() -> None:
    assert freed_and_returned(0) >= 16 << 20  # glibc's default: an mmap, unmapped when freed
    assert freed_and_returned(256 << 20) < 4 << 20  # kept on the heap for the next tensor
    assert freed_and_returned(256 << 20, "child") < 4 << 20  # and in processes it starts


def test_zero_leaves_the_allocator_as_it_is() -> None:
    assert allocator.keep_freed_memory(0) is False


def test_a_negative_threshold_is_refused_at_start(tmp_path) -> None:
    output = subprocess.run(
        [sys.executable, "-m", "triton_core", "serve", "--model-repository", str(tmp_path),
         "--memory-trim-threshold=-1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert output.returncode == 2
    assert "--memory-trim-threshold must not be negative" in output.stderr + output.stdout
