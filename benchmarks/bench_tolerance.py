"""The constraint solver's tolerance: diffsim's zero (every iteration) against 1e-12, side by side.

  python -m benchmarks.bench_tolerance [--device cpu] [--repeats 3] [--models ...] [--no-reach]

`SolverSettings.tolerance` is 0 so that every perturbation lane takes the same solver path. In
float32 a world's improvement rarely reaches exactly zero, so MJWarp's Newton solver then iterates
until its line search stalls, and often to the iteration limit, while its solution stopped changing
steps before. 1e-12 lies far below float32's resolution for these models: a world stops when another
iteration would not change its solution. Per model, for both tolerances:

  - solver iterations per world-step (mean and most), raw `mjw.step` over `nstep` steps;
  - captured forward and lane-linearization time (`nworld` worlds; the humanoid's lanes at 8 worlds,
    205 lanes each), the columns taking turns, medians and the ratio zero / 1e-12;
  - the tape gradient's error against float64 MuJoCo C (`check_gradients`, 2 worlds, lanes);
  - and tutorial 03's iLQR reach, whose solver budget is capped (4 iterations), at both.

1e-12 is not the default: MJWarp's stopping test is scaled by the mean inertia, and over MJWarp's
47 test models (`python -m benchmarks.bench_contact_gradients --tolerance 1e-12`) it changed the two
flex models' gradients and aloha_pot's forward pass. Writes `benchmarks/results/tolerance_<device>.{json,md}`.
"""

from __future__ import annotations

import argparse
import os

import mujoco
import mujoco_warp as mjw
import numpy as np
import warp as wp

import diffsim
from diffsim.scene import SolverSettings

from .bench_rollout import _alternate, _graph, controls
from .save import write_json, write_text

TOLERANCES = (0.0, 1e-12)


def _humanoid() -> mujoco.MjModel:
  return mujoco.MjModel.from_xml_path(os.path.join(os.path.dirname(mjw.__file__), "test_data", "humanoid",
                                                   "humanoid.xml"))


def _so101() -> mujoco.MjModel:
  return mujoco.MjModel.from_xml_path(diffsim.asset_path("so101", "so101_new_calib.xml"))


def _arm() -> mujoco.MjModel:
  from .bench_sysid import ARM_XML

  return mujoco.MjModel.from_xml_string(ARM_XML)


# name: (model, steps of the gradient check, lane worlds); the humanoid starts standing (keyframe 0)
MODELS = {
  "cartpole": (lambda: mujoco.MjModel.from_xml_path(diffsim.asset_path("cartpole.xml")), 100, None),
  "arm5": (_arm, 100, None),
  "so101": (_so101, 40, None),
  "humanoid": (_humanoid, 20, 8),
}


def _qpos0(mjm: mujoco.MjModel) -> np.ndarray:
  d = mujoco.MjData(mjm)
  if mjm.nkey:
    mujoco.mj_resetDataKeyframe(mjm, d, 0)
  return d.qpos.copy()


def solver_iterations(mjm: mujoco.MjModel, tolerance: float, nworld: int, nstep: int) -> tuple[float, int]:
  """Mean and most Newton iterations per world-step of raw `mjw.step` at `tolerance`."""
  m = mjw.put_model(mjm)
  m.opt.tolerance.fill_(tolerance)
  m.opt.warn_overflow = 0
  d0 = mujoco.MjData(mjm)
  d0.qpos[:] = _qpos0(mjm)
  d = mjw.put_data(mjm, d0, nworld=nworld)
  u = controls(mjm, nworld, nstep)
  niter = []
  for k in range(nstep):
    d.ctrl.assign(u[:, k])
    mjw.step(m, d)
    niter.append(d.solver_niter.numpy().copy())
  niter = np.array(niter)
  return float(niter.mean()), int(niter.max())


def bench_model(name: str, device: str, nworld: int, nstep: int, repeats: int) -> dict:
  make, grad_steps, lane_worlds = MODELS[name]
  mjm = make()
  row = {"model": name, "nworld": nworld, "nstep": nstep, "device": device, "lane_nworld": lane_worlds or nworld}
  fns = {}
  for tol in TOLERANCES:
    it_mean, it_max = solver_iterations(mjm, tol, 8, nstep)
    row[f"iterations_mean_{tol:g}"], row[f"iterations_max_{tol:g}"] = it_mean, it_max
    settings = SolverSettings(tolerance=tol)
    for what, n in (("fwd", nworld), ("lanes", lane_worlds or nworld)):
      scene = diffsim.Scene.from_xml(mjm, nworld=n, device=device, solver=settings)
      ctrl = wp.array(controls(mjm, n, nstep), dtype=float, device=scene.device)
      q0 = np.tile(_qpos0(mjm), (n, 1)).astype(np.float32)
      if what == "fwd":
        ro = diffsim.Rollout(scene, nstep, differentiable=False)
        run = lambda ro=ro, ctrl=ctrl, q0=q0: ro(ctrl, qpos0=q0)
      else:
        ro = diffsim.Rollout(scene, nstep, gradient="finite_difference")
        run = lambda ro=ro, ctrl=ctrl, q0=q0: ro(ctrl, qpos0=q0, linearize=True)
      run()
      fns[f"{what}_{tol:g}"] = _graph(scene.device, run)
    # gradient error against float64 MuJoCo C, lanes, default steps
    scene = diffsim.Scene.from_xml(mjm, nworld=2, device=device, solver=settings)
    u = controls(mjm, 1, grad_steps)[0]
    res = diffsim.check_gradients(scene, u, qpos0=_qpos0(mjm), wrt=("ctrl", "qvel0"), gradient="finite_difference")
    row[f"grad_err_{tol:g}"] = {k: float(v) for k, v in res.rel_err.items()}
  for f in fns.values():
    f()
  times = _alternate(fns, repeats)
  med = {k: float(np.median(v)) for k, v in times.items()}
  row.update({f"{k}_s": v for k, v in med.items()})
  zero, tiny = (f"{t:g}" for t in TOLERANCES)
  for what in ("fwd", "lanes"):
    row[f"{what}_speedup"] = float(np.median(np.array(times[f"{what}_{zero}"]) / np.array(times[f"{what}_{tiny}"])))
  return row


def reach_success(tolerance: float, device: str, nworld: int = 64, iters: int = 20) -> dict:
  """Tutorial 03's iLQR reach (SO-101, a capped budget of 4 solver iterations, 0.5 s at 10 ms) at
  `tolerance`: the fraction of worlds within 1 cm of their targets after `iters` iLQR iterations."""
  from .bench_trajopt import _tutorial

  tut = _tutorial("03_so101_reach")
  problem, targets = tut.reach_problem(nworld=nworld, duration=0.5, timestep=0.01, device=device, tolerance=tolerance)
  res = diffsim.optimize_trajectory(problem, "ilqr", maxiter=iters, progress=False)
  dist = np.linalg.norm(res.trajectory.sensordata.numpy()[:, -1, :3] - targets, axis=1)
  return {"tolerance": tolerance, "nworld": nworld, "iters": iters, "success": float(np.mean(dist < 0.01)),
          "median_mm": float(1000 * np.median(dist)), "time_s": res.time}


def table(rows: list[dict]) -> str:
  zero, tiny = (f"{t:g}" for t in TOLERANCES)
  lines = [f"| model | solver iterations per step, tol {zero} / {tiny} (mean, most) | "
           f"forward: tol {zero} / {tiny} time | "
           f"lanes: tol {zero} / {tiny} time | gradient error vs float64 C, tol {zero} | tol {tiny} |",
           "|---|---|---|---|---|---|"]
  err = lambda d: ", ".join(f"{k} {v:.1e}" for k, v in d.items())
  for r in rows:
    if "reach" in r:
      continue
    lines.append(
      f"| {r['model']} | {r[f'iterations_mean_{zero}']:.2f} ({r[f'iterations_max_{zero}']}) / "
      f"{r[f'iterations_mean_{tiny}']:.2f} ({r[f'iterations_max_{tiny}']}) | {r['fwd_speedup']:.2f}x "
      f"({r['nworld']} worlds) | {r['lanes_speedup']:.2f}x ({r['lane_nworld']} worlds) | "
      f"{err(r[f'grad_err_{zero}'])} | {err(r[f'grad_err_{tiny}'])} |")
  reach = [r for r in rows if "reach" in r]
  if reach:
    lines.append("")
    lines.append("With a capped budget (`SolverSettings(iterations=4)`), tutorial 03's iLQR reach, "
                 f"{reach[0]['reach'][0]['nworld']} worlds, {reach[0]['reach'][0]['iters']} iLQR iterations: "
                 + "; ".join(f"tolerance {x['tolerance']:g}: {100 * x['success']:.0f}% within 1 cm (median "
                             f"{x['median_mm']:.2f} mm, {x['time_s']:.0f} s)" for x in reach[0]["reach"])
                 + ".")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
  parser.add_argument("--nworld", type=int, default=64)
  parser.add_argument("--nstep", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--no-reach", action="store_true", help="skip the capped-budget iLQR reach (2 x 70 s on a CPU)")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  device = args.device or ("cuda:0" if wp.is_cuda_available() else "cpu")
  path = os.path.join(args.out, f"tolerance_{device.split(':')[0]}")
  rows = []
  for name in args.models:
    rows.append(bench_model(name, device, args.nworld, args.nstep, args.repeats))
    write_json(path + ".json", rows)
    print(table(rows[-1:]).splitlines()[-1], flush=True)
  if not args.no_reach:
    rows.append({"reach": [reach_success(t, device) for t in TOLERANCES]})
    write_json(path + ".json", rows)
  md = table(rows)
  write_text(path + ".md", md)
  print(md)
  return rows


if __name__ == "__main__":
  main()
