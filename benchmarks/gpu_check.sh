#!/usr/bin/env bash
# Installs diffsim on a fresh CUDA machine and runs the benchmark suite at GPU sizes (< 8 minutes).
# Results land in $OUT (default benchmarks/results): cuda0.json and cuda0.md.
# Usage: bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python -m pip install -q -e ".[dev]"
python -c "import warp as wp; wp.init(); assert wp.is_cuda_available(), 'no CUDA device'"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
# GPU correctness first: the gradient checks, on the GPU
DIFFSIM_TEST_DEVICE=cuda:0 timeout 180 python -m pytest -q -x tests/test_gradients.py 2>&1 | tail -5 | tee "$OUT/gpu_tests.txt"
timeout 300 python -m benchmarks.run --device cuda:0 --sizes 1 64 1024 2048 --nstep 50 --sections rollout determinism \
  --out "$OUT" 2>&1 | tee "$OUT/gpu_bench.txt"
