#!/usr/bin/env bash
# Install the server and its ONNX Runtime plugin into .venv, then serve examples/model_repository
# on HTTP :8000, gRPC :8001. Extra arguments go to `triton-core serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e . -e plugins/onnx
exec .venv/bin/triton-core serve --model-repository examples/model_repository "$@"
