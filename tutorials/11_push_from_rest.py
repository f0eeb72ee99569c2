"""Tutorial 11: a capsule pusher, at rest and clear of a free box, pushes it to a target per world.

The plan starts out of contact: the pusher (two slide joints, a vertical capsule) stands 5 cm
behind the box and the cost is on the box's final position only (plus a tiny price on force). At
rest the box feels nothing the pusher does, so the gradient of the cost in the controls is zero
and a first-order solver cannot leave the start: `optimize_trajectory` says so per world
(`result.zero_gradient`, `success` False, the message names the zero gradient). iLQR does not
reach the box either: out of contact its step Jacobians couple nothing of the pusher to the box
(the analytic step's exactly, the lanes' within a step of micrometres).

The strategy, a contact-reaching warm start (`diffsim.trajopt`'s docstring):
  1. a cheap first stage, `problem.with_cost(cost + reach)`, where `reach` is a running
     `QposCost` that draws the pusher's joints to a point 1 cm inside the box's face opposite the
     target (on the line from the target through the box's center): its gradient is never zero,
     the pusher comes to the box and pushes it part of the way (L-BFGS, 30 iterations: with 20 the 60-degree
     world's Adam plan landed on either side of a knife edge, 0.04 or 2.6 cm off in C, as float32
     rounding in the adjoint changed);
  2. the real cost alone from that plan (`warm_start=first, shift=0`): now in contact, the
     analytic gradient is informative (Adam, 200 iterations of 0.5 N).
Success is judged in float64 MuJoCo C: each world's plan replayed open-loop with `mj_step` from
the same start, the box within 2 cm of its target. Measured: see the README's trajectory
optimization section.

  python tutorials/11_push_from_rest.py                   # 4 worlds, the warm start, then Adam
  python tutorials/11_push_from_rest.py --stage2 lbfgs    # L-BFGS in the second stage
  python tutorials/11_push_from_rest.py --no-warm-start   # the zero gradient: nothing moves
  python tutorials/11_push_from_rest.py --test            # checks every world within 2 cm in C
"""

from __future__ import annotations

import argparse
import os
import sys

import mujoco
import numpy as np

import diffsim
from diffsim.losses import CtrlCost, QposCost, SensorCost

XML = """
<mujoco model="capsule_push">
  <option timestep="0.005" cone="elliptic"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" friction="0.5"/>
    <body name="pusher" pos="0 0 0.03">
      <joint name="px" type="slide" axis="1 0 0" damping="2"/>
      <joint name="py" type="slide" axis="0 1 0" damping="2"/>
      <geom name="pusher" type="capsule" fromto="0 0 -0.02 0 0 0.02" size="0.02" mass="0.3" contype="2"
            conaffinity="2"/>
    </body>
    <body name="box" pos="0.12 0 0.03">
      <freejoint/>
      <geom name="box" type="box" size="0.05 0.05 0.03" mass="0.5" friction="0.5" contype="3" conaffinity="3"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="fx" joint="px" ctrlrange="-10 10"/>
    <motor name="fy" joint="py" ctrlrange="-10 10"/>
  </actuator>
  <sensor><framepos name="box_pos" objtype="body" objname="box"/></sensor>
</mujoco>"""
HALF, RADIUS = 0.05, 0.02  # m, the box's half width and the capsule's radius
INTO = 0.01  # m, how far the first stage draws the pusher's center into the box's face
HORIZON = 120  # steps of 5 ms
ANGLES = np.radians([0.0, 30.0, -30.0, 60.0])  # push directions per world (cycled)
DISTANCES = np.array([0.10, 0.10, 0.12, 0.08])  # m


def push_problem(nworld: int, device=None):
  """`(problem, targets, reach)`: the push in every world from rest (box settled in C, the pusher at
  the origin 5 cm behind it); `targets (nworld, 2)` m; `reach` the first stage's extra cost term."""
  mjm = mujoco.MjModel.from_xml_string(XML)
  d = mujoco.MjData(mjm)
  for _ in range(100):  # the box settles on the floor
    mujoco.mj_step(mjm, d)
  qpos0 = d.qpos.copy()
  qpos0[:2] = 0.0
  box = qpos0[2:4]
  angle = np.resize(ANGLES, nworld)
  direction = np.stack([np.cos(angle), np.sin(angle)], axis=1)
  targets = box + np.resize(DISTANCES, nworld)[:, None] * direction
  scene = diffsim.Scene.from_xml(XML, nworld=nworld, device=device)
  target3 = np.concatenate([targets, np.full((nworld, 1), qpos0[4])], axis=1)
  cost = [SensorCost("box_pos", target3, terminal=[1e3, 1e3, 0.0]), CtrlCost(1e-4)]
  problem = diffsim.TrajectoryProblem(scene, cost, horizon=HORIZON, qpos0=qpos0)
  # where the line from the target through the box's center leaves the box, plus the capsule's
  # radius, less INTO: the pusher's center just inside the face it must push
  ray = HALF / np.max(np.abs(direction), axis=1)
  point = box - (ray + RADIUS - INTO)[:, None] * direction
  reach = QposCost(point, joints=["px", "py"], running=100.0)
  return problem, targets, reach


def box_errors(problem, targets, ctrl) -> tuple[np.ndarray, np.ndarray]:
  """The box's paths `(nworld, nstep + 1, 2)` and final errors `(nworld,)` (m), `ctrl` replayed in C."""
  path = problem.replay_mujoco(ctrl)["qpos"][:, :, 2:4]
  return path, np.linalg.norm(path[:, -1] - targets, axis=1)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda:0 if available, else cpu)")
  parser.add_argument("--nworld", type=int, default=4)
  parser.add_argument("--stage2", default="adam", choices=("adam", "lbfgs", "ilqr"), help="the second stage's solver")
  parser.add_argument("--iters", type=int, default=None, help="second-stage iterations (adam 200, lbfgs 80, ilqr 10)")
  parser.add_argument("--reach-iters", type=int, default=30, help="first-stage L-BFGS iterations")
  parser.add_argument("--no-warm-start", action="store_true", help="the real cost from rest (zero gradient)")
  parser.add_argument("--test", action="store_true", help="4 worlds; checks every world within 2 cm in C")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  args = parser.parse_args(argv)
  if args.test:
    args.nworld = 4

  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import warp as wp

  wp.config.log_level = wp.LOG_WARNING
  problem, targets, reach = push_problem(args.nworld, device=args.device)
  iters = args.iters or {"adam": 200, "lbfgs": 80, "ilqr": 10}[args.stage2]
  options = {"lr": 0.5} if args.stage2 == "adam" else None
  first, seconds = None, 0.0
  if not args.no_warm_start:
    first = diffsim.optimize_trajectory(problem.with_cost(problem.cost.terms + [reach]), "lbfgs",
                                        maxiter=args.reach_iters, progress=False)
    seconds += first.time
    _, err1 = box_errors(problem, targets, first.x)
    print(f"stage 1 (reach, L-BFGS, {first.nit} iterations, {first.time:.1f} s): errors in C (cm) "
          f"{np.round(100 * err1, 2).tolist()}")
  res = diffsim.optimize_trajectory(problem, args.stage2, maxiter=iters, ftol=1e-12, warm_start=first, shift=0,
                                    options=options, progress=False)
  seconds += res.time
  path, err = box_errors(problem, targets, res.x)
  success = float(np.mean(err < 0.02))

  out = os.path.join(args.out, "11_push_from_rest")
  os.makedirs(out, exist_ok=True)
  fig, ax = plt.subplots(figsize=(5.5, 4.5))
  pusher = res.trajectory.qpos.numpy()[:, :, :2]
  for w in range(args.nworld):
    line, = ax.plot(path[w, :, 0], path[w, :, 1], lw=1.5)
    ax.plot(pusher[w, :, 0], pusher[w, :, 1], ":", color=line.get_color(), lw=1)
    ax.plot(*targets[w], "x", color=line.get_color())
  ax.set(xlabel="x (m)", ylabel="y (m)", aspect="equal",
         title=f"box paths in C (dotted: pusher), {100 * success:.0f}% within 2 cm")
  fig.tight_layout()
  figure = os.path.join(out, "push.png")
  tmp = figure + ".tmp.png"
  fig.savefig(tmp, dpi=120)
  os.replace(tmp, figure)
  plt.close(fig)
  strategy = "no warm start" if args.no_warm_start else "contact-reaching warm start"
  print(f"11_push_from_rest: {args.nworld} worlds, {strategy}, {args.stage2} ({res.nit} iterations), "
        f"{seconds:.1f} s: replayed in MuJoCo C {100 * success:.0f}% within 2 cm, errors (cm) "
        f"{np.round(100 * err, 2).tolist()}; success {res.success.tolist()}, zero gradient at the start "
        f"{res.zero_gradient.tolist()} (wrote {figure})")
  if args.test:
    if success < 1.0:
      print(f"test FAILED: {100 * success:.0f}% of worlds within 2 cm in MuJoCo C")
      return 1
    print("test passed")
  return 0


if __name__ == "__main__":
  sys.exit(main())
