#!/usr/bin/env bash
# Run every GPU-marked test of the project and the GPU backends benchmark on a machine with a
# CUDA GPU, in under 8 minutes (plus up to 5 to install vllm where it can): TensorRT, ONNX
# Runtime's CUDA and TensorRT providers, PyTorch on CUDA, the TensorRT plugin's device memory,
# GPU metrics through NVML.
#
# Usage:
#   scripts/gpu-check.sh [--wheelhouse DIR] [--seconds N] [--no-bench] [--dry-run]
#   scripts/gpu-check.sh --download DIR     (on a machine with PyPI, to carry DIR to one without)
#
# Also Triton's vLLM backend (its model.py unchanged, a Python-based backend) with a tiny
# model built on the spot, where vllm installs (it is not in the --download wheelhouse).
#
# It makes a virtual environment (.venv-gpu) that sees the system's packages, so a GPU image's
# torch, cuda-python, onnx and nvidia-ml-py are used as they are, installs the project and its
# plugins editable, then what the tests need: from PyPI, or with --wheelhouse only from DIR
# (a machine without network). The GPU extras (tensorrt, onnxruntime-gpu, cuda-python) are
# tried one by one and their tests skip with a reason where one cannot be installed.
#
# --download DIR fetches the wheels of what the tests need for Python 3.12 on x86-64 Linux
# into DIR (about 45 MB), without the GPU extras: tensorrt's libraries are an sdist that
# downloads from NVIDIA's own index at install time, and onnxruntime-gpu is over 250 MB.
# For a GPU machine that reaches no registry:
#   here:  scripts/gpu-check.sh --download .whl
#   there: scripts/gpu-check.sh --wheelhouse .whl      (with .whl carried along)
#
# --dry-run prints each step instead of running it. Results: the test log, a JUnit XML file
# and the benchmark's JSON go to $OUT when it is set (else to gpu-check-results/), and the
# benchmark rewrites its section of docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELHOUSE=""
DOWNLOAD=""
SECONDS_PER_POINT=8
BENCH=1
DRY_RUN=0
while [ $# -gt 0 ]; do
    case "$1" in
        --wheelhouse) WHEELHOUSE=$2; shift 2 ;;
        --download) DOWNLOAD=$2; shift 2 ;;
        --seconds) SECONDS_PER_POINT=$2; shift 2 ;;
        --no-bench) BENCH=0; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h | --help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

# What the GPU tests need beyond a GPU image's own packages (torch, onnx, onnxruntime, numpy).
REQUIREMENTS=(
    "pluggy>=1.5" "protobuf>=6.33.5,<7" "grpcio>=1.81.1" "hpack>=4.0" "falcon>=4.0"
    "uvloop>=0.19" "httptools>=0.6.3" "orjson>=3.10"
    "prometheus-client>=0.20" "importlib-metadata>=7.0" "nvidia-ml-py>=12.535"
    "pytest>=8" "pytest-asyncio>=0.24" "pytest-timeout>=2.3" "tritonclient[http,grpc]>=2.50"
)
# Tried one at a time: each may be missing where the machine cannot fetch it.
GPU_EXTRAS=("cuda-python>=12.6" "onnxruntime-gpu>=1.18" "tensorrt>=10")
# The project's distributions, installed editable without their dependencies.
PROJECT=(. plugins/onnx plugins/torch plugins/tensorrt plugins/python_model
    plugins/repo_agents tests/plugins/batch_strategy)

run() {
    echo "+ $*"
    if [ "$DRY_RUN" = 0 ]; then
        "$@"
    fi
}

if [ -n "$DOWNLOAD" ]; then
    run "${PYTHON:-python3}" -m pip download -q -d "$DOWNLOAD" --only-binary=:all: \
        --python-version 3.12 --implementation cp --abi cp312 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 "${REQUIREMENTS[@]}"
    run du -sh "$DOWNLOAD"
    echo "gpu-check: carry $DOWNLOAD and run: scripts/gpu-check.sh --wheelhouse $DOWNLOAD"
    echo "gpu-check: drop wheels the GPU image already has (numpy, torch ...) to save room"
    exit 0
fi

STARTED=$(date +%s)
RESULTS=${OUT:-gpu-check-results}
mkdir -p "$RESULTS"
# The e2e tests import tests.support, and their servers the test plugins under tests/.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
    # The GPU image's Python holds torch with CUDA; else whatever python3 is.
    if [ -x /opt/torch/.venv/bin/python3 ]; then PYTHON=/opt/torch/.venv/bin/python3; else PYTHON=python3; fi
fi
VENV=${GPU_VENV:-.venv-gpu}
PIP_SOURCE=()
if [ -n "$WHEELHOUSE" ]; then
    PIP_SOURCE=(--no-index --find-links "$WHEELHOUSE")
fi

echo "== the machine"
run nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || true
[ -x "$VENV/bin/python" ] || run "$PYTHON" -m venv --system-site-packages "$VENV"
PY=$VENV/bin/python
# --system-site-packages sees the base interpreter's packages, not those of a venv the new
# one was made from (the GPU image's Python is such a venv): a .pth file names them
if [ "$DRY_RUN" = 0 ]; then
    "$PYTHON" -c 'import site; print("\n".join(site.getsitepackages()))' \
        >"$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gpu-check-parent.pth"
fi
PIP=("$PY" -m pip install -q --disable-pip-version-check "${PIP_SOURCE[@]}")

echo "== install"
EDITABLE=()
for path in "${PROJECT[@]}"; do EDITABLE+=(-e "$path"); done
run "${PIP[@]}" --no-build-isolation --no-deps "${EDITABLE[@]}"
run "${PIP[@]}" "${REQUIREMENTS[@]}"
for extra in "${GPU_EXTRAS[@]}"; do
    if ! run timeout 90 "${PIP[@]}" "$extra"; then
        echo "gpu-check: could not install $extra; its tests skip with the reason"
    fi
done
# Triton's vLLM backend, unchanged, as a Python-based backend: vllm, the OpenAI frontend
# plugin and what its test builds a tiny model with; the backend's own files from
# VLLM_BACKEND_DIR, Triton's /opt/tritonserver/backends/vllm, or a clone of vllm_backend.
if run timeout 300 "${PIP[@]}" vllm openai transformers tokenizers; then
    run "${PIP[@]}" --no-build-isolation --no-deps -e plugins/openai
    if [ -z "${VLLM_BACKEND_DIR:-}" ] && [ ! -f /opt/tritonserver/backends/vllm/model.py ]; then
        if run timeout 60 git clone -q --depth 1 \
            https://github.com/triton-inference-server/vllm_backend "$RESULTS/vllm_backend"; then
            export VLLM_BACKEND_DIR="$PWD/$RESULTS/vllm_backend/src"
        fi
    fi
else
    echo "gpu-check: could not install vllm; the vLLM backend's test skips with the reason"
fi
run "$PY" - <<'EOF' || true
import importlib.util
found = {m: importlib.util.find_spec(m) is not None for m in ("tensorrt", "torch", "cuda", "vllm")}
print("installed:", found)
import onnxruntime
print("onnxruntime", onnxruntime.__version__, onnxruntime.get_available_providers())
import torch
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available())
EOF

echo "== every GPU-marked test"
# The files that mark tests gpu, found rather than listed, so new ones run too; only they
# are collected, so the CPU suites' own dependencies (moto, hypothesis ...) are not needed.
mapfile -t GPU_TESTS < <(grep -rl --include='test_*.py' 'pytest.mark.gpu' tests plugins examples | sort)
printf '  %s\n' "${GPU_TESTS[@]}"
status=0
run timeout 330 "$PY" -m pytest -m gpu -rs -v -p no:cacheprovider \
    --junitxml "$RESULTS/gpu-tests.xml" "${GPU_TESTS[@]}" 2>&1 | tee "$RESULTS/gpu-tests.log" \
    || status=$?

if [ "$BENCH" = 1 ]; then
    echo "== benchmark: TensorRT vs ONNX Runtime CUDA vs PyTorch CUDA"
    run timeout 150 "$PY" bench/gpu_backends.py --seconds "$SECONDS_PER_POINT" \
        --json "$RESULTS/gpu-backends.json" || status=$?
    run cp docs/benchmarks.md "$RESULTS/benchmarks.md" || true
fi
echo "gpu-check: finished in $(($(date +%s) - STARTED)) s with status $status"
exit "$status"
