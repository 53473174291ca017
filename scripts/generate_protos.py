#!/usr/bin/env python3
"""Regenerate the Python protobuf/gRPC modules in ``triton_core/protos``.

Runs ``grpc_tools.protoc`` on every ``*.proto`` file there, then rewrites the
generated modules so that

* their descriptors live in the private pool ``triton_core.protos._pool.POOL``
  instead of protobuf's default pool (tritonclient registers the same file
  names there, and both must be importable in one process);
* cross-file imports (``import model_config_pb2 as ...``) become package
  imports (``from triton_core.protos import model_config_pb2 as ...``);
* message classes report their real module path (``triton_core.protos.X``).

The protobuf gencode runtime-version check emitted by protoc is kept as is.

Usage: ``python scripts/generate_protos.py`` (from any directory).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = REPO_ROOT / "triton_core" / "protos"
PACKAGE = "triton_core.protos"
POOL_IMPORT = f"from {PACKAGE}._pool import POOL"


def run_protoc(protos: list[Path]) -> None:
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={PROTO_DIR}",
        f"--pyi_out={PROTO_DIR}",
        f"--grpc_python_out={PROTO_DIR}",
        *[p.name for p in protos],
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_DIR)


def fix_imports(text: str, modules: set[str]) -> str:
    """Turn ``import foo_pb2 as x`` of sibling modules into package imports."""

    def repl(m: re.Match[str]) -> str:
        if m.group(2) not in modules:
            return m.group(0)
        return f"{m.group(1)}from {PACKAGE} import {m.group(2)} as {m.group(3)}"

    return re.sub(r"^(\s*)import (\w+) as (\w+)$", repl, text, flags=re.M)


def fix_pb2(path: Path, modules: set[str]) -> None:
    text = fix_imports(path.read_text(), modules)
    if "_descriptor_pool.Default()" not in text:
        raise SystemExit(f"{path.name}: no _descriptor_pool.Default() to replace")
    text = text.replace("_descriptor_pool.Default()", "POOL")
    # Import the private pool right after the descriptor_pool import.
    anchor = "from google.protobuf import descriptor_pool as _descriptor_pool\n"
    if anchor not in text:
        raise SystemExit(f"{path.name}: descriptor_pool import not found")
    text = text.replace(anchor, anchor + POOL_IMPORT + "\n", 1)
    # Give generated classes their importable module path.
    text = re.sub(
        r"(_builder\.BuildTopDescriptorsAndMessages\(DESCRIPTOR, )'(\w+)'",
        lambda m: f"{m.group(1)}'{PACKAGE}.{m.group(2)}'",
        text,
    )
    path.write_text(text)


def fix_plain(path: Path, modules: set[str]) -> None:
    path.write_text(fix_imports(path.read_text(), modules))


def main() -> int:
    protos = sorted(PROTO_DIR.glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files in {PROTO_DIR}")
    run_protoc(protos)
    modules = {f"{p.stem}_pb2" for p in protos} | {f"{p.stem}_pb2_grpc" for p in protos}
    for proto in protos:
        fix_pb2(PROTO_DIR / f"{proto.stem}_pb2.py", modules)
        fix_plain(PROTO_DIR / f"{proto.stem}_pb2.pyi", modules)
        grpc_mod = PROTO_DIR / f"{proto.stem}_pb2_grpc.py"
        if not re.search(r"^service ", proto.read_text(), flags=re.M):
            grpc_mod.unlink(missing_ok=True)  # no services: nothing useful in it
        elif grpc_mod.exists():
            fix_plain(grpc_mod, modules)
    for path in sorted(PROTO_DIR.glob("*_pb2*.py*")):
        print(path.relative_to(REPO_ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
