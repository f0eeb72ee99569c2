"""Rollout and gradient throughput, side by side in one run.

For each model and world count it measures, in one process:
  - forward world-steps/s of a diffsim rollout launched from Python (eager) and replayed from a
    captured graph, and of raw `mujoco_warp.step` replayed from a graph (diffsim's overhead);
  - gradient cost: time of forward + Jacobians + backward (captured) divided by the captured
    forward time, and that ratio divided by the number of perturbation lanes (how close the
    finite-difference adjoint comes to its own lower bound of one MJWarp step per lane);
  - `mujoco.rollout` (MuJoCo C, float64) with all CPU threads on the same model and controls;
  - the one-time kernel compilation (first call), reported apart.

Run: `python -m benchmarks.bench_rollout [--device cpu] [--sizes 1 64 1024] [--nstep 50]`.
Prints a Markdown table and writes `benchmarks/results/rollout_<device>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import mujoco
import numpy as np
import warp as wp

import diffsim

MODELS = {
  "cartpole": lambda: diffsim.asset_path("cartpole.xml"),
  "so101": lambda: diffsim.asset_path("so101", "so101_new_calib.xml"),
}


def _time(fn, repeats: int) -> float:
  """Median wall time of `fn` (s), after the caller's warm-up."""
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    wp.synchronize()
    times.append(time.perf_counter() - t)
  return float(np.median(times))


@wp.kernel
def _final_qpos_loss(qpos: wp.array3d[float], nstep: int, loss: wp.array[float]):
  w, i = wp.tid()
  wp.atomic_add(loss, 0, qpos[w, nstep, i] * qpos[w, nstep, i])


def bench_case(model: str, nworld: int, nstep: int, device: str, repeats: int) -> dict:
  import mujoco.rollout
  import mujoco_warp as mjw

  t0 = time.perf_counter()
  scene = diffsim.Scene.from_xml(MODELS[model](), nworld=nworld, device=device)
  rng = np.random.default_rng(0)
  lo, hi = scene.mjm.actuator_ctrlrange.T
  u = (lo + (hi - lo) * rng.uniform(0.3, 0.7, (nworld, nstep, scene.nu))).astype(np.float32)
  ctrl = wp.array(u, dtype=float, device=scene.device, requires_grad=True)

  fwd = diffsim.Rollout(scene, nstep, differentiable=False)
  fwd(ctrl)
  wp.synchronize()
  compile_s = time.perf_counter() - t0
  eager = _time(lambda: fwd(ctrl), repeats)
  with wp.ScopedCapture(device=scene.device) as cap:
    fwd(ctrl)
  captured = _time(lambda: wp.capture_launch(cap.graph), repeats)

  data = scene.data(1)
  with wp.ScopedCapture(device=scene.device) as raw_cap:
    for _ in range(nstep):
      mjw.step(scene.model, data)
  raw = _time(lambda: wp.capture_launch(raw_cap.graph), repeats)

  grad_ro = diffsim.Rollout(scene, nstep)
  loss = wp.zeros(1, dtype=float, device=scene.device, requires_grad=True)

  def gradient():
    loss.zero_()
    ctrl.grad.zero_()
    tape = wp.Tape()
    with tape:
      traj = grad_ro(ctrl)
      wp.launch(_final_qpos_loss, dim=(nworld, scene.nq), inputs=[traj.qpos, nstep], outputs=[loss],
                device=scene.device)
    tape.backward(loss)

  t1 = time.perf_counter()
  gradient()
  wp.synchronize()
  compile_s += time.perf_counter() - t1
  with wp.ScopedCapture(device=scene.device) as grad_cap:
    gradient()
  grad = _time(lambda: wp.capture_launch(grad_cap.graph), repeats)

  # MuJoCo C, float64, all threads
  mjm = scene.mjm
  nthread = os.cpu_count() or 1
  datas = [mujoco.MjData(mjm) for _ in range(nthread)]
  state0 = np.zeros((nworld, mujoco.mj_stateSize(mjm, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
  mujoco.mj_getState(mjm, datas[0], state0[0], mujoco.mjtState.mjSTATE_FULLPHYSICS)
  state0[:] = state0[0]
  u64 = u.astype(np.float64)
  mujoco.rollout.rollout(mjm, datas, state0, u64)
  c_time = _time(lambda: mujoco.rollout.rollout(mjm, datas, state0, u64), repeats)

  ws = nworld * nstep
  return {
    "model": model, "nworld": nworld, "nstep": nstep, "device": str(scene.device), "nlane": grad_ro.fd.nlane,
    "fwd_eager_wsps": ws / eager, "fwd_captured_wsps": ws / captured, "mjw_step_captured_wsps": ws / raw,
    "mujoco_rollout_wsps": ws / c_time, "mujoco_rollout_nthread": nthread,
    "grad_s": grad, "fwd_s": captured, "grad_over_fwd": grad / captured,
    "grad_over_fwd_per_lane": grad / captured / grad_ro.fd.nlane,
    "diffsim_overhead": raw / captured, "compile_s": compile_s,
  }


def bench_determinism(model: str, nworld: int, nstep: int, device: str, repeats: int) -> dict:
  """Captured forward and gradient time with `diffsim.set_deterministic` off and on."""
  out = {"model": model, "nworld": nworld, "nstep": nstep}
  for flag in (False, True):
    diffsim.set_deterministic(flag)
    try:
      row = bench_case(model, nworld, nstep, device, repeats)
    finally:
      diffsim.set_deterministic(False)
    key = "on" if flag else "off"
    out[f"fwd_s_{key}"], out[f"grad_s_{key}"], out["device"] = row["fwd_s"], row["grad_s"], row["device"]
  out["fwd_cost"] = out["fwd_s_on"] / out["fwd_s_off"]
  out["grad_cost"] = out["grad_s_on"] / out["grad_s_off"]
  return out


def table(rows: list[dict]) -> str:
  head = ("| model | worlds | steps | fwd eager (ws/s) | fwd captured (ws/s) | raw mjw.step (ws/s) | mujoco.rollout "
          "(ws/s) | captured / mujoco.rollout | grad / fwd | grad / fwd / lanes | lanes | compile (s) |")
  lines = [head, "|" + "---|" * 12]
  for r in rows:
    lines.append(
      f"| {r['model']} | {r['nworld']} | {r['nstep']} | {r['fwd_eager_wsps']:.3g} | {r['fwd_captured_wsps']:.3g} | "
      f"{r['mjw_step_captured_wsps']:.3g} | {r['mujoco_rollout_wsps']:.3g} | "
      f"{r['fwd_captured_wsps'] / r['mujoco_rollout_wsps']:.2f} | {r['grad_over_fwd']:.1f} | "
      f"{r['grad_over_fwd_per_lane']:.2f} | {r['nlane']} | {r['compile_s']:.1f} |")
  return "\n".join(lines)


def write_json(path: str, payload) -> None:
  """Writes to a temporary file, then renames: an interrupted run leaves the old results intact."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(payload, f, indent=1)
  os.replace(tmp, path)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
  parser.add_argument("--sizes", nargs="+", type=int, default=[1, 64, 1024], help="world counts")
  parser.add_argument("--nstep", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  from tqdm import tqdm

  cases = [(m, n) for m in args.models for n in args.sizes]
  rows = [bench_case(m, n, args.nstep, args.device, args.repeats) for m, n in tqdm(cases, desc="benchmarks")]
  print(table(rows))
  device = rows[0]["device"].replace(":", "") if rows else "none"
  write_json(os.path.join(args.out, f"rollout_{device}.json"), {"argv": sys.argv[1:], "rows": rows})
  return rows


if __name__ == "__main__":
  main()
