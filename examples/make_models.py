"""Build the example Triton model repository with small ONNX models.

Layout written to ``--output`` (default: ``model_repository`` next to this script)::

    simple/config.pbtxt          add/sub model like Triton's "simple" example
    simple/1/model.onnx
    mlp/1/model.onnx             tiny MLP 64->256->10, no config.pbtxt (auto-completed)
    identity_bytes/config.pbtxt  BYTES (ONNX string) identity
    identity_bytes/1/model.onnx

Requires the ``onnx`` package; nothing is downloaded.  The output is deterministic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "model_repository"

# Triton's own "simple" example uses INT32, which onnxruntime's CPU Add/Sub support.
SIMPLE_DATATYPE = "INT32"

SIMPLE_CONFIG = """\
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {{
    name: "INPUT0"
    data_type: TYPE_{dt}
    dims: [ 16 ]
  }},
  {{
    name: "INPUT1"
    data_type: TYPE_{dt}
    dims: [ 16 ]
  }}
]
output [
  {{
    name: "OUTPUT0"
    data_type: TYPE_{dt}
    dims: [ 16 ]
  }},
  {{
    name: "OUTPUT1"
    data_type: TYPE_{dt}
    dims: [ 16 ]
  }}
]
"""

IDENTITY_BYTES_CONFIG = """\
name: "identity_bytes"
backend: "onnxruntime"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]
"""


def _builders() -> ModuleType:
    try:
        from triton_core_onnx import model_builders
    except ImportError:
        # Running from a source checkout without the ONNX plugin installed.
        sys.path.insert(0, str(HERE.parent / "plugins" / "onnx"))
        from triton_core_onnx import model_builders
    return model_builders


def build(output: Path) -> list[Path]:
    """Write the example repository under ``output`` and return the files written."""
    mb = _builders()
    written: list[Path] = []

    simple = output / "simple"
    written.append(mb.add_sub(simple / "1" / "model.onnx", SIMPLE_DATATYPE, dims=16))
    (simple / "config.pbtxt").write_text(SIMPLE_CONFIG.format(dt=SIMPLE_DATATYPE))
    written.append(simple / "config.pbtxt")

    written.append(mb.mlp(output / "mlp" / "1" / "model.onnx"))

    identity_bytes = output / "identity_bytes"
    written.append(mb.identity(identity_bytes / "1" / "model.onnx", "BYTES", dims=(-1,)))
    (identity_bytes / "config.pbtxt").write_text(IDENTITY_BYTES_CONFIG)
    written.append(identity_bytes / "config.pbtxt")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"model repository directory to write (default: {DEFAULT_OUTPUT})",
    )
    args = parser.parse_args(argv)
    for path in build(args.output):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
