"""Rollout and gradient throughput, side by side in one run.

For each model and world count it measures, in one process:
  - forward world-steps/s of a diffsim rollout launched from Python (eager) and replayed from a
    captured graph, and of raw `mujoco_warp.step` replayed from a graph (diffsim's overhead);
  - gradient cost: time of forward + Jacobians + backward (captured) divided by the captured
    forward time, and that ratio divided by the number of perturbation lanes (how close the
    finite-difference adjoint comes to its own lower bound of one MJWarp step per lane);
  - `mujoco.rollout` (MuJoCo C, float64) with all CPU threads on the same model and controls;
  - the one-time kernel compilation (first call), reported apart.
Models: cart-pole, the SO-101 arm, and MJWarp's test humanoid (contact-rich). Gradients that would
need more than `--grad-max-worlds` MJWarp worlds (default 40,000 on CPU) are skipped.

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

def _humanoid() -> str:
  """MJWarp's test humanoid: 27 dofs, 21 motors, contact-rich (feet and body on the floor)."""
  import mujoco_warp

  return os.path.join(os.path.dirname(mujoco_warp.__file__), "test_data", "humanoid", "humanoid.xml")


MODELS = {
  "cartpole": lambda: diffsim.asset_path("cartpole.xml"),
  "so101": lambda: diffsim.asset_path("so101", "so101_new_calib.xml"),
  "humanoid": _humanoid,
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


def bench_case(model: str, nworld: int, nstep: int, device: str, repeats: int,
               grad_max_worlds: int | None = None) -> dict:
  """One row. The gradient is skipped (None) where its `nlane * nworld` MJWarp worlds exceed
  `grad_max_worlds` (memory and time on small machines)."""
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

  nlane = 1 + 2 * (scene.nx + scene.nu)  # central differences over the state and the controls
  grad_ro = None
  if grad_max_worlds is None or nlane * nworld <= grad_max_worlds:
    grad_ro = diffsim.Rollout(scene, nstep)  # allocates the nlane * nworld MJWarp worlds
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

  grad = None
  if grad_ro is not None:
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
    "model": model, "nworld": nworld, "nstep": nstep, "device": str(scene.device), "nlane": nlane,
    "fwd_eager_wsps": ws / eager, "fwd_captured_wsps": ws / captured, "mjw_step_captured_wsps": ws / raw,
    "mujoco_rollout_wsps": ws / c_time, "mujoco_rollout_nthread": nthread,
    "grad_s": grad, "fwd_s": captured, "grad_over_fwd": None if grad is None else grad / captured,
    "grad_over_fwd_per_lane": None if grad is None else grad / captured / nlane,
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


def _fmt(x, spec: str) -> str:
  return "skipped" if x is None else format(x, spec)


def table(rows: list[dict]) -> str:
  head = ("| model | worlds | steps | fwd eager (ws/s) | fwd captured (ws/s) | raw mjw.step (ws/s) | mujoco.rollout "
          "(ws/s) | captured / mujoco.rollout | grad / fwd | grad / fwd / lanes | lanes | compile (s) |")
  lines = [head, "|" + "---|" * 12]
  for r in rows:
    lines.append(
      f"| {r['model']} | {r['nworld']} | {r['nstep']} | {r['fwd_eager_wsps']:.3g} | {r['fwd_captured_wsps']:.3g} | "
      f"{r['mjw_step_captured_wsps']:.3g} | {r['mujoco_rollout_wsps']:.3g} | "
      f"{r['fwd_captured_wsps'] / r['mujoco_rollout_wsps']:.2f} | {_fmt(r['grad_over_fwd'], '.1f')} | "
      f"{_fmt(r['grad_over_fwd_per_lane'], '.2f')} | {r['nlane']} | {r['compile_s']:.1f} |")
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
  parser.add_argument("--grad-max-worlds", type=int, default=None,
                      help="skip gradients needing more MJWarp worlds (lanes x worlds); default: 40,000 on CPU")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  from tqdm import tqdm

  cap = args.grad_max_worlds
  if cap is None and wp.get_device(args.device).is_cpu:
    cap = 40_000
  cases = [(m, n) for m in args.models for n in args.sizes]
  rows = [bench_case(m, n, args.nstep, args.device, args.repeats, cap) for m, n in tqdm(cases, desc="benchmarks")]
  print(table(rows))
  device = rows[0]["device"].replace(":", "") if rows else "none"
  write_json(os.path.join(args.out, f"rollout_{device}.json"), {"argv": sys.argv[1:], "rows": rows})
  return rows


if __name__ == "__main__":
  main()
