"""Tutorial 8 (work in progress): the SO-101 pushes the pick scene's cube to a target in each world.

Each world has its own target on a ring 5-15 cm from the cube's start, in the directions the arm
can push along with its jaw pad held upright (60-300 degrees from +x: not straight away from the
base, which needs more reach than the arm has at floor height), and its own arm start: the pad
4 cm above the point behind the cube. The scene is tutorial 09's (`push_scene`): the cube touches
the floor and the jaw pads only, and the noslip solver is off, so the analytic adjoint covers the
whole model (pyramidal cones, box contacts) and L-BFGS takes exact tape gradients.

Cost: the cube's `block_pos` (framepos) sensor at the end, x and y (`--weight` per m^2), plus a
price on changing the servo targets (`CtrlRateCost`). Shaping: the controls start from a scripted
plan (inverse kinematics: lower the pad behind the cube, then slide it along the push direction
past the target; of `--candidates` such plans that push 0-10 cm past it, the one whose MJWarp
rollout brings the cube nearest), which puts every pad at the cube with the right side; without it the
first-order solvers see a zero gradient (the cube at rest does not feel a pad that misses it).
Success is judged in float64 MuJoCo C: each world's plan replayed open-loop with `mj_step`, the
cube within 2 cm of its target.

Status: the issue's bar (>= 90% of worlds within 2 cm) is NOT met, and there is no `--test` yet.
Measured on 4 worlds (2-core CPU, 0.8 s in 2 ms steps): L-BFGS on the analytic adjoint and iLQR on
the lanes each bring 2 of 4 pushes within 2 cm in C (from a single scripted plan; 14 L-BFGS
iterations, 75 s; 10 iLQR iterations, 63 s); on other targets 0-1 of 4. What blocks it: the pad
(1.6 cm wide) pushes the 4 cm cube at a point, so the cube turns and the pad slides off its face
(the cube's path curves away from the push direction), and the hopping of a sliding box on this
floor (see tutorial 09) makes the final position jump with small changes of the plan; L-BFGS then
stops after a few iterations on a line search that finds no decrease.

  python tutorials/08_so101_push.py --nworld 4 --method lbfgs --iters 40
  python tutorials/08_so101_push.py --nworld 4 --method ilqr --iters 10
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import mujoco
import numpy as np

import diffsim
from diffsim.losses import CtrlRateCost, SensorCost

CUBE = np.array([0.3, 0.0])  # m, the cube's start in the pick scene
BACK = 0.02 + 0.00525 + 0.004  # m, from the cube's center to the pad's center before the push
PAD_Z = 0.01  # m, the pad's center above the floor while pushing
DOWN, PUSH = 0.15, 0.5  # s, lowering the pad, then sliding it


def _push_scene():
  """Tutorial 09's `push_scene` (the same file's function, loaded by path)."""
  here = os.path.dirname(os.path.abspath(__file__))
  spec = importlib.util.spec_from_file_location("tutorial_09", os.path.join(here, "09_sysid_push_friction.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.push_scene(1.0, 0.1, 0)


class PadIK:
  """Inverse kinematics of the fixed jaw pad: its center at a point, upright, its face normal along
  the push direction (MuJoCo C kinematics, scipy least squares)."""

  def __init__(self, mjm: mujoco.MjModel):
    self.mjm, self.d = mjm, mujoco.MjData(mjm)
    self.pad = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_GEOM, "fixed_jaw_pad")
    self.lo, self.hi = mjm.jnt_range[:6, 0] + 1e-3, mjm.jnt_range[:6, 1] - 1e-3

  def __call__(self, point, u, q0) -> tuple[np.ndarray, float]:
    """Joint angles `(6,)` and the position error (m)."""
    from scipy.optimize import least_squares

    d = self.d

    def residual(q):
      d.qpos[:6] = q
      mujoco.mj_kinematics(self.mjm, d)
      rot = d.geom_xmat[self.pad].reshape(3, 3)
      return np.concatenate([10.0 * (d.geom_xpos[self.pad] - point), rot[:, 2] - [0.0, 0.0, 1.0],
                             0.5 * (rot[:, 0] - [u[0], u[1], 0.0]), [0.1 * q[5]]])

    sol = least_squares(residual, np.clip(q0, self.lo, self.hi), bounds=(self.lo, self.hi))
    return sol.x, float(np.abs(sol.fun[:3]).max() / 10.0)


def scripted_plans(ik: PadIK, target: np.ndarray, nstep: int, dt: float, extra) -> tuple[np.ndarray, np.ndarray]:
  """Warm-start candidates: the arm start `(6,)` and servo targets `(len(extra), nstep, 6)` that lower
  the pad behind the cube and slide it towards `target` (x, y), past it by each of `extra` (m: the
  servos lag behind their targets, and how far the cube goes depends on that lag)."""
  offset = target - CUBE
  dist = float(np.linalg.norm(offset))
  u = offset / dist
  behind = np.array([*(CUBE - BACK * u), PAD_Z])
  # the wrist roll that turns the pad towards u: the best of a few starting guesses
  q_behind = min((ik(behind, u, np.array([0.0, 0.9, -1.0, 1.6, roll, 0.0])) for roll in (0.0, 1.5, -1.5, 2.7, -2.7)),
                 key=lambda r: r[1])[0]
  q_start = ik(behind + [0.0, 0.0, 0.04], u, q_behind)[0]
  longest = dist + max(extra)
  nline = 17
  line = [q_behind]
  for s in np.linspace(0.0, 1.0, nline)[1:]:
    line.append(ik(behind + np.array([*(s * longest * u), 0.0]), u, line[-1])[0])
  line = np.array(line)
  ctrl = np.zeros((len(extra), nstep, 6))
  for c, e in enumerate(extra):
    frac = (dist + e) / longest
    for k in range(nstep):
      t = k * dt
      if t < DOWN:
        ctrl[c, k] = q_start + (q_behind - q_start) * (0.5 - 0.5 * np.cos(np.pi * t / DOWN))
      else:
        x = (nline - 1) * frac * (0.5 - 0.5 * np.cos(np.pi * min((t - DOWN) / PUSH, 1.0)))
        j = min(int(x), nline - 2)
        ctrl[c, k] = line[j] + (line[j + 1] - line[j]) * (x - j)
  return q_start, ctrl


def pick_plans(spec, qpos0: np.ndarray, plans: np.ndarray, targets: np.ndarray, device) -> np.ndarray:
  """The candidate `(nworld, ncand, nstep, nu)` of each world whose MJWarp rollout ends with the cube
  nearest its target: one batched forward rollout, `nworld * ncand` worlds."""
  import warp as wp

  nworld, ncand, nstep, nu = plans.shape
  scene = diffsim.Scene.from_xml(spec, nworld=nworld * ncand, device=device, njmax=128)
  ctrl = wp.array(plans.reshape(-1, nstep, nu).astype(np.float32), dtype=float, device=scene.device)
  traj = diffsim.rollout(scene, ctrl, qpos0=np.repeat(qpos0, ncand, axis=0))
  cube = traj.qpos.numpy()[:, -1, 6:8].reshape(nworld, ncand, 2)
  best = np.argmin(np.linalg.norm(cube - targets[:, None], axis=2), axis=1)
  return plans[np.arange(nworld), best]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda:0 if available, else cpu)")
  parser.add_argument("--method", default="lbfgs", choices=("lbfgs", "adam", "ilqr"))
  parser.add_argument("--iters", type=int, default=40)
  parser.add_argument("--nworld", type=int, default=64)
  parser.add_argument("--duration", type=float, default=0.8, help="s")
  parser.add_argument("--weight", type=float, default=1e4, help="terminal weight on the cube's x, y (1/m^2)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--candidates", type=int, default=6,
                      help="scripted plans per world, pushing 0-10 cm past the target; MJWarp picks the best")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  args = parser.parse_args(argv)

  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import warp as wp

  wp.config.log_level = wp.LOG_WARNING
  spec = _push_scene()
  mjm = spec.compile()
  ik = PadIK(mjm)
  nstep = int(round(args.duration / mjm.opt.timestep))
  rng = np.random.default_rng(args.seed)
  angle = rng.uniform(np.radians(60), np.radians(300), args.nworld)
  dist = rng.uniform(0.05, 0.15, args.nworld)
  targets = CUBE + dist[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
  # the cube at rest on the floor (MuJoCo C), the same in every world
  d = mujoco.MjData(mjm)
  d.qpos[:6], d.qpos[6:9], d.qpos[9:13] = [0.0, -1.5, 1.5, 0.0, 0.0, 0.0], [*CUBE, 0.02], [1, 0, 0, 0]
  d.ctrl[:] = d.qpos[:6]
  for _ in range(300):
    mujoco.mj_step(mjm, d)
  qpos0 = np.tile(d.qpos, (args.nworld, 1))
  extra = np.linspace(0.0, 0.1, args.candidates)
  plans = np.zeros((args.nworld, extra.size, nstep, 6))
  for w in range(args.nworld):
    qpos0[w, :6], plans[w] = scripted_plans(ik, targets[w], nstep, mjm.opt.timestep, extra)
  ctrl0 = pick_plans(spec, qpos0, plans, targets, args.device) if extra.size > 1 else plans[:, 0]

  scene = diffsim.Scene.from_xml(spec, nworld=args.nworld, device=args.device, njmax=128)
  target3 = np.concatenate([targets, np.full((args.nworld, 1), 0.02)], axis=1)
  cost = [SensorCost("block_pos", target3, terminal=[args.weight, args.weight, 0.0]), CtrlRateCost(1e-3)]
  problem = diffsim.TrajectoryProblem(scene, cost, horizon=nstep, qpos0=qpos0, ctrl_init=ctrl0, central=False)
  cube = slice(int(mjm.sensor_adr[mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_SENSOR, "block_pos")]), None)

  def judge(ctrl):
    """Cube paths `(nworld, nstep + 1, 3)` replayed in float64 MuJoCo C, and the final x-y errors (m)."""
    path = problem.replay_mujoco(ctrl)["sensordata"][:, :, cube][:, :, :3]
    return path, np.linalg.norm(path[:, -1, :2] - targets, axis=1)

  _, err0 = judge(ctrl0)
  res = diffsim.optimize_trajectory(problem, args.method, maxiter=args.iters, ftol=1e-15, progress=True)
  path, err = judge(res.x)
  success = float(np.mean(err < 0.02))
  derivative = ("step Jacobians from the lanes" if args.method == "ilqr"
                else f"{problem.rollout.gradient} tape gradients")

  out = os.path.join(args.out, "08_so101_push")
  os.makedirs(out, exist_ok=True)
  fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.5))
  for w in range(args.nworld):
    line, = ax0.plot(path[w, :, 0], path[w, :, 1], lw=1)
    ax0.plot(*targets[w], "x", color=line.get_color())
  ax0.plot(*CUBE, "ks")
  ax0.set(xlabel="x (m)", ylabel="y (m)", title="cube paths in MuJoCo C (x: targets)", aspect="equal")
  ax1.bar(np.arange(args.nworld) - 0.2, 100 * err0, 0.4, label="scripted plan")
  ax1.bar(np.arange(args.nworld) + 0.2, 100 * err, 0.4, label=args.method)
  ax1.axhline(2.0, color="k", ls=":")
  ax1.set(xlabel="world", ylabel="final error in C (cm)", title=f"{100 * success:.0f}% within 2 cm")
  ax1.legend()
  fig.tight_layout()
  figure = os.path.join(out, "push.png")
  fig.savefig(figure, dpi=120)
  plt.close(fig)
  print(f"scripted plan, replayed in C: {100 * np.mean(err0 < 0.02):.0f}% within 2 cm, errors (cm) "
        f"{np.round(100 * err0, 2).tolist()}")
  print(f"08_so101_push: {args.nworld} worlds, {args.method} ({derivative}), {res.nit} iterations in "
        f"{res.time:.1f} s: replayed in MuJoCo C {100 * success:.0f}% within 2 cm, errors (cm) "
        f"{np.round(100 * err, 2).tolist()} (wrote {figure})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
