#!/usr/bin/env bash
# Install what the tests need into .venv (core, plugins, test tools) and run every test suite.
# Usage: scripts/test.sh [pytest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install -q)
"${PIP[@]}" --upgrade pip
# The CPU build of PyTorch, pinned in the same command as everything else: pinned alone first,
# the resolver of a later command may still replace it with a multi-GB CUDA build.
"${PIP[@]}" torch==2.13.0 -e '.[test]' -e 'plugins/onnx[testing]' -e plugins/repo_agents \
    -e plugins/torch -e 'plugins/python_model[testing]' -e tests/plugins/batch_strategy
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
