#!/usr/bin/env bash
# diffsim on a fresh CUDA machine: installs it into a venv, runs the GPU tests and the benchmark
# suite at GPU sizes. Results land in $OUT (default benchmarks/results): *_cuda0.json (each
# benchmark rewrites its JSON after every row or problem, so a timeout loses only unfinished rows),
# cuda0.{json,md} (the determinism section) and gpu_*.txt (the last lines of each step's log; the
# whole log in gpu_*.log).
#
# Time budget: under 10 minutes (560 s). Every step has a timeout (s), plus 5 s for one that ignores SIGTERM:
#   install diffsim[dev] 80 | torch 25 | jax + mjx 15 | mujoco[sysid] 10 | CUDA check 10 |
#   GPU tests 60 | reach (tutorial 03, issue 3's bar) 45 | rollout, cart-pole + SO-101 40 | humanoid 20 |
#   analytic adjoint 30 | adjoint with contacts 25 | analytic Jacobians 20 | render 15 | determinism 20 |
#   mjx 25 | trajopt 20 | sysid 15
#   = 475 s + 17 x 5 s = 560 s at most; a step that times out loses only its own unfinished rows.
# Kernel compilation (the first use of each model on the GPU, cached in ~/.cache/warp for the later
# steps) counts inside these; with a warm cache the benchmarks get further.
#
# Packages come from PyPI, or offline from a folder of wheels: WHEELS=/path (with a setuptools wheel:
# pip builds the editable install from it). The venv (VENV, default ~/.venvs/diffsim-gpu, outside the work tree)
# sees the system's site-packages, so torch or jax already installed there are not fetched again;
# an existing venv is reused. JAX_CUDA=1 also installs jax[cuda12], so MJX runs on the GPU too
# (otherwise on the CPU; bench_mjx's jax_device field says which).
# SMOKE=1 runs every step on the CPU at tiny sizes with the current python (PYTHON=, else python3;
# no venv, no installs, no CUDA check; the tests are only collected), with 10x the timeouts for cold
# kernel compilation, and exits 1 if any step failed: a check of the script itself, run by
# tests/test_benchmarks.py, so that the one GPU run does not fail on a renamed flag or file.
# Usage: bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
VENV=${VENV:-$HOME/.venvs/diffsim-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PIP_DISABLE_PIP_VERSION_CHECK=1

SMOKE=${SMOKE:-0}
FAILED=()
step() {  # step SECONDS NAME COMMAND...: runs COMMAND with a timeout, logs to $OUT/gpu_NAME.{log,txt}
  local seconds=$1 name=$2 rc=0
  shift 2
  if [ "$SMOKE" = 1 ]; then seconds=$((seconds * 10)); fi  # cold CPU compilation, one thread
  echo "== $name (timeout ${seconds} s, ${SECONDS} s elapsed)"
  timeout -k 5 "$seconds" "$@" >"$OUT/gpu_$name.log" 2>&1 || rc=$?
  tail -n 12 "$OUT/gpu_$name.log" | tee "$OUT/gpu_$name.txt"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "== $name: timed out after ${seconds} s" | tee -a "$OUT/gpu_$name.txt"
  elif [ "$rc" -ne 0 ]; then
    echo "== $name: exit status $rc" | tee -a "$OUT/gpu_$name.txt"
  fi
  if [ "$rc" -ne 0 ]; then FAILED+=("$name"); fi
  return "$rc"
}

if [ "$SMOKE" = 1 ]; then
  DEV=cpu
  PY=${PYTHON:-$(command -v python3 || command -v python)}
  SIZES=(1 2); NSTEP=(--nstep 3); HNSTEP=(--nstep 3); DET=(--sizes 2 --nstep 3); MJX=(--sizes 1 --nstep 3 --repeats 1)
  ADJ=(--models cartpole --sizes 2 --nstep 3 --repeats 1); ADJC=(--models cartpole --sizes 2 --nstep 3 --repeats 1)
  LIN=(--models cartpole --nworld 2 --nstep 2 --repeats 1); RENDER=(--sizes 1 --resolutions 16x12 --nframe 2 --repeats 1)
  REACH=(--nworld 2 --duration 0.02 --timestep 0.01 --iters 1); TRAJOPT=(--quick --problems cartpole)
  SYSID=(--quick); TESTS=(--collect-only)
else
  DEV=cuda:0
  SIZES=(1 64 1024 2048); NSTEP=(--nstep 50); HNSTEP=(--nstep 20); DET=(--sizes 1024 --nstep 50); MJX=(--sizes 1 1024 --nstep 100)
  ADJ=(--models cartpole humanoid_no_contacts --sizes 1 1024 2048 --nstep 50 --lane-max-worlds 100000)
  ADJC=(--models humanoid_contacts --sizes 64 1024 --nstep 20 --repeats 2 --lane-max-worlds 100000)
  LIN=(--models cartpole so101 humanoid --nworld 1024 --nstep 10 --repeats 2)
  RENDER=(--models cartpole so101 --sizes 64 1024 --repeats 2)
  REACH=(); TRAJOPT=(); SYSID=(--repeats 1 --tests arm); TESTS=()
  # PEP 668: the system pip refuses installs, and bare `python` may not exist
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv --system-site-packages "$VENV" || {
      echo "could not create a venv at $VENV (Debian/Ubuntu: apt-get install python3-venv)"; exit 1; }
  fi
  PY=$VENV/bin/python
  PIP=("$PY" -m pip install -q)
  if [ -n "${WHEELS:-}" ]; then
    PIP+=(--no-index --find-links "$WHEELS")
  fi
  step 80 install "${PIP[@]}" -e ".[dev]" || { echo "diffsim did not install: nothing else can run"; exit 1; }
  # optional: the interop tests, the MJX row and the mujoco.sysid side skip (or report "skipped") without them
  step 25 torch "${PIP[@]}" -e ".[torch]" || true
  if [ "${JAX_CUDA:-0}" = 1 ]; then
    step 15 jax "${PIP[@]}" -e ".[jax]" "jax[cuda12]" mujoco-mjx || true
  else
    step 15 jax "${PIP[@]}" -e ".[jax]" mujoco-mjx || true
  fi
  step 10 sysid "${PIP[@]}" "mujoco[sysid]==4.0.0" || true

  step 10 cuda "$PY" -c "import warp as wp; wp.init(); assert wp.is_cuda_available(), 'no CUDA device'" || {
    echo "no CUDA device visible to Warp"; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt" 2>&1 || true
  cat "$OUT/gpu.txt"
fi

# GPU correctness first: tests/conftest.py runs the fixtures' scenes on DIFFSIM_TEST_DEVICE
DIFFSIM_TEST_DEVICE=$DEV step 60 tests "$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" tests/test_gradients.py \
  tests/test_adjoint.py tests/test_trajopt.py tests/test_interop_torch.py tests/test_interop_jax.py || true

# issue 3's bar at full size, right after the tests: 2,048 SO-101 worlds reach their targets (>= 95%
# within 1 cm; the tutorial's last line says how many)
step 45 reach "$PY" tutorials/03_so101_reach.py --device "$DEV" "${REACH[@]}" --out "$OUT" || true

# the benchmarks, each in its own process
step 40 rollout "$PY" -m benchmarks.bench_rollout --device "$DEV" --models cartpole so101 \
  --sizes "${SIZES[@]}" "${NSTEP[@]}" --out "$OUT" || true
step 20 humanoid "$PY" -m benchmarks.bench_rollout --device "$DEV" --models humanoid --sizes "${SIZES[@]}" \
  "${HNSTEP[@]}" --out "$OUT/humanoid" || true
# the analytic adjoint's gradient / forward beside the lanes (the lanes' worlds run in parallel on a GPU)
step 30 adjoint "$PY" -m benchmarks.bench_adjoint --device "$DEV" "${ADJ[@]}" --out "$OUT" || true
# the contact rows of the adjoint (a separate results folder: bench_adjoint rewrites its JSON), the
# analytic step Jacobians beside the lanes (iLQR's and sysid's linearization), the batched renderer
step 25 adjoint_contacts "$PY" -m benchmarks.bench_adjoint --device "$DEV" "${ADJC[@]}" --out "$OUT/contacts" || true
step 20 linearize "$PY" -m benchmarks.bench_linearize --device "$DEV" "${LIN[@]}" --out "$OUT" || true
step 15 render "$PY" -m benchmarks.bench_render --device "$DEV" "${RENDER[@]}" --out "$OUT" || true
step 20 determinism "$PY" -m benchmarks.run --device "$DEV" "${DET[@]}" --sections determinism --out "$OUT" || true
step 25 mjx "$PY" -m benchmarks.bench_mjx --device "$DEV" "${MJX[@]}" --out "$OUT" || true
# time to a cost threshold per solver, host traffic per iteration; sysid vs mujoco.sysid (its arm test first:
# issue 36's small problem, then bench_sysid's arm cases as far as the step gets)
step 20 trajopt "$PY" -m benchmarks.bench_trajopt --device "$DEV" "${TRAJOPT[@]}" --out "$OUT" || true
step 15 sysid_bench "$PY" -m benchmarks.bench_sysid --device "$DEV" "${SYSID[@]}" --out "$OUT" || true
echo "== done in ${SECONDS} s; failed: ${FAILED[*]:-none}"
if [ "$SMOKE" = 1 ] && [ "${#FAILED[@]}" -gt 0 ]; then exit 1; fi
