#!/usr/bin/env bash
# Installs diffsim on a fresh CUDA machine and runs the benchmark suite at GPU sizes (< 8 minutes: every step has a timeout).
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
DIFFSIM_TEST_DEVICE=cuda:0 timeout 100 python -m pytest -q -x tests/test_gradients.py 2>&1 | tail -5 | tee "$OUT/gpu_tests.txt" || true
timeout 150 python -m benchmarks.run --device cuda:0 --sizes 1 64 1024 2048 --nstep 50 --sections rollout determinism \
  --out "$OUT" 2>&1 | tee "$OUT/gpu_bench.txt" || true
# issue 3's bar at full size: 2,048 SO-101 worlds reach their targets (>= 95% within 1 cm)
timeout 90 python tutorials/03_so101_reach.py --device cuda:0 --out "$OUT" 2>&1 | tail -3 | tee "$OUT/gpu_reach.txt" || true
# time to a cost threshold per solver, host traffic per iteration; sysid vs mujoco.sysid (1 and 64 trajectories)
timeout 60 python -m benchmarks.bench_trajopt --device cuda:0 --out "$OUT" 2>&1 | tail -12 | tee "$OUT/gpu_trajopt.txt" || true
timeout 60 python -m benchmarks.bench_sysid --device cuda:0 --repeats 1 --out "$OUT" 2>&1 | tail -6 | tee "$OUT/gpu_sysid.txt" || true
