#!/usr/bin/env bash
# Installs diffsim on a fresh CUDA machine and runs the benchmark suite at GPU sizes (< 8 minutes: every step has a timeout).
# Results land in $OUT (default benchmarks/results): *_cuda0.json, cuda0.{json,md} and gpu_*.txt.
# Needs PyPI (or the wheels) for warp-lang, mujoco and mujoco-warp: the lent H200 image has none of them,
# reaches no index, and warp-lang's wheel (149 MB) is over what travels to it (64 MiB).
# Usage: bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python -m pip install -q -e ".[dev]"
python -m pip install -q "mujoco[sysid]==4.0.0" || true  # for bench_sysid's mujoco.sysid side
python -c "import warp as wp; wp.init(); assert wp.is_cuda_available(), 'no CUDA device'"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
# GPU correctness first: the gradient checks, on the GPU
DIFFSIM_TEST_DEVICE=cuda:0 timeout 80 python -m pytest -q -x tests/test_gradients.py 2>&1 | tail -5 | tee "$OUT/gpu_tests.txt" || true
# each benchmark writes its results when it ends: separate runs, so one timeout loses one table only
timeout 90 python -m benchmarks.bench_rollout --device cuda:0 --models cartpole so101 --sizes 1 64 1024 2048 --nstep 50 \
  --out "$OUT" 2>&1 | tail -12 | tee "$OUT/gpu_rollout.txt" || true
timeout 70 python -m benchmarks.bench_rollout --device cuda:0 --models humanoid --sizes 1 64 1024 2048 --nstep 20 \
  --out "$OUT/humanoid" 2>&1 | tail -8 | tee "$OUT/gpu_humanoid.txt" || true
timeout 40 python -m benchmarks.run --device cuda:0 --sizes 1024 --nstep 50 --sections determinism \
  --out "$OUT" 2>&1 | tail -4 | tee "$OUT/gpu_determinism.txt" || true
# issue 3's bar at full size: 2,048 SO-101 worlds reach their targets (>= 95% within 1 cm)
timeout 80 python tutorials/03_so101_reach.py --device cuda:0 --out "$OUT" 2>&1 | tail -3 | tee "$OUT/gpu_reach.txt" || true
# time to a cost threshold per solver, host traffic per iteration; sysid vs mujoco.sysid (1 and 64 trajectories)
timeout 50 python -m benchmarks.bench_trajopt --device cuda:0 --out "$OUT" 2>&1 | tail -12 | tee "$OUT/gpu_trajopt.txt" || true
timeout 50 python -m benchmarks.bench_sysid --device cuda:0 --repeats 1 --out "$OUT" 2>&1 | tail -6 | tee "$OUT/gpu_sysid.txt" || true
