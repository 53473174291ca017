#!/usr/bin/env bash
# Install what the tests need into .venv (core, plugins, test tools) and run every test suite.
# Usage: scripts/test.sh [pytest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]' -e 'plugins/onnx[testing]' -e plugins/repo_agents
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
