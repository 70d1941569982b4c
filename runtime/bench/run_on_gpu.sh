#!/usr/bin/env bash
# Runs the GPU benchmark from the repository root on a machine with a GPU, passing its
# arguments on (see `--help`). The lms binary is built beforehand where cargo is
# (`cargo build --release`), and fixtures/data comes from fixtures/fetch-onnx-testdata.sh;
# on the device tool, carry target/release/lms and fixtures/data/onnx/light.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
exec python3 runtime/bench/gpu_benchmark.py "$@"
