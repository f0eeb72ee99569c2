"""Tutorial 3: the SO-101 arm reaches 2,048 targets from 2,048 initial configurations at once.

Each world is its own problem: the arm starts at rest in a random configuration and must bring its
end-effector site (`gripperframe`) to a random reachable target within `--duration` seconds. The six
actuators are position servos (ctrl is a joint-angle target, bounded by the joint range). iLQR
solves all worlds together; the site enters the cost through a `framepos` sensor, whose Jacobians
the rollout forms along with the dynamics'. iLQR needs whole step Jacobians (`linearize=True`):
the analytic step forms them where it covers the model, as here (one reverse sweep per velocity
row, no perturbed worlds; `Rollout.jacobian`), else the finite-difference lanes do (the run prints
which, and what a tape gradient would take).

  python tutorials/03_so101_reach.py              # 2,048 worlds, 0.5 s in 2 ms steps; writes out/03_so101_reach/
  python tutorials/03_so101_reach.py --nworld 64  # full horizon, 64 worlds: minutes on a CPU
  python tutorials/03_so101_reach.py --test       # 20 worlds, 10 ms steps; checks >= 95% within 1 cm (no video)

The issue's bar on a CPU (tests/test_tutorials_trajopt.py runs it): 2,048 worlds at a reduced
horizon, targets within 0.25 rad per joint of the start, >= 95% within 1 cm (on the lanes the
linearization would step 19 lanes x 2,048 = 39k MJWarp worlds):

  python tutorials/03_so101_reach.py --duration 0.15 --timestep 0.01 --iters 5 --target-spread 0.25 \
      --min-success 0.95

The full-size problem (0.5 s in 2 ms steps, targets anywhere in the middle of the joint ranges,
self-collision on) puts every one of 64 worlds within 1 cm after 40 iterations; with 2,048 worlds
an iteration takes minutes on a CPU: the full-size run is for a GPU (`benchmarks/gpu_check.sh`
runs it). The run prints what it reached and how long it took; the README's "Trajectory
optimization" section states what a 2-core CPU measured.
"""

from __future__ import annotations

import argparse
import os
import sys

import mujoco
import numpy as np

import diffsim
from diffsim.losses import CtrlRateCost, QposCost, QvelCost, SiteCost

SITE = "gripperframe"


def sample_configurations(mjm: mujoco.MjModel, n: int, rng: np.random.Generator, frac: float = 0.5) -> np.ndarray:
  """`n` joint configurations from the middle `frac` of each joint's range, free of self-contact."""
  lo, hi = mjm.jnt_range[:, 0], mjm.jnt_range[:, 1]
  mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
  d = mujoco.MjData(mjm)
  out = []
  while len(out) < n:
    q = mid + frac * half * rng.uniform(-1.0, 1.0, mjm.nq)
    d.qpos[:] = q
    mujoco.mj_forward(mjm, d)
    if d.ncon == 0:
      out.append(q)
  return np.array(out)


def site_positions(mjm: mujoco.MjModel, qpos: np.ndarray) -> np.ndarray:
  """World position of the end-effector site for each configuration, `(n, 3)` m (MuJoCo C)."""
  d = mujoco.MjData(mjm)
  sid = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_SITE, SITE)
  out = []
  for q in qpos:
    d.qpos[:] = q
    mujoco.mj_kinematics(mjm, d)
    out.append(d.site_xpos[sid].copy())
  return np.array(out)


def reach_problem(*, nworld: int, duration: float, timestep: float | None, seed: int = 0, device=None,
                  target_spread: float | None = None, contacts: bool = True, tolerance: float = 0.0):
  """Scene, problem and targets of the reach. Returns `(problem, targets (nworld, 3))`.

  Targets are the site positions of random configurations; with `target_spread` (rad), of the
  start configuration moved by up to that much per joint (reachable within a short horizon).
  `contacts=False` turns self-collision off. `tolerance`: the constraint solver's (default 0: every
  lane runs the whole budget of 4 iterations; `benchmarks/bench_tolerance.py` compares 1e-12).
  """
  spec = diffsim.losses.add_site_sensors(diffsim.asset_path("so101", "so101_new_calib.xml"), [SITE])
  if timestep:
    spec.option.timestep = timestep
  if not contacts:
    spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
  mjm = spec.compile()
  rng = np.random.default_rng(seed)
  qpos0 = sample_configurations(mjm, nworld, rng)
  if target_spread is None:
    qtarget = sample_configurations(mjm, nworld, rng)
  else:
    qtarget = np.clip(qpos0 + rng.uniform(-target_spread, target_spread, qpos0.shape), *mjm.jnt_range.T)
  targets = site_positions(mjm, qtarget)
  # Newton converges on these constraints (joint friction and limits, a few self-contacts when the
  # arm folds) in a few iterations; every perturbation lane runs all of them (tolerance 0)
  scene = diffsim.Scene.from_xml(spec, nworld=nworld, device=device, njmax=128 if contacts else 32,
                                 solver=diffsim.SolverSettings(iterations=4, ls_iterations=8, tolerance=tolerance))
  lo, hi = mjm.jnt_range[:, 0], mjm.jnt_range[:, 1]
  cost = [
    SiteCost(SITE, targets, running=0.0, terminal=1e4),  # 1 cm off costs 0.5
    QvelCost(0.0, running=0.0, terminal=1.0),  # arrive (nearly) at rest
    # smooth servo targets: without a price on changing them, the local model would fix any error
    # in the last step, with gains too large to trust
    CtrlRateCost(1e-2),
    QposCost(0.5 * (lo + hi), running=1.0),  # posture: away from the joint limits, arm unfolded
  ]
  # forward differences (where the lanes form the Jacobians): half the lanes of central ones; the
  # servo targets start at the start pose, one row per world (nworld, 1, nu) held for every step
  problem = diffsim.TrajectoryProblem(scene, cost, horizon=round(duration / scene.dt), qpos0=qpos0,
                                      ctrl_init=qpos0[:, None], central=False)
  return problem, targets


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda:0 if available, else cpu)")
  parser.add_argument("--iters", type=int, default=40, help="iLQR iterations")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  parser.add_argument("--test", action="store_true", help="reduced size and timestep; checks the success rate")
  parser.add_argument("--nworld", type=int, default=2048)
  parser.add_argument("--duration", type=float, default=0.5, help="s")
  parser.add_argument("--timestep", type=float, default=None, help="s (default: the model's, 0.002)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--target-spread", type=float, default=None,
                      help="rad: targets near the start configuration (default: anywhere in the workspace)")
  parser.add_argument("--no-contacts", action="store_true", help="turn self-collision off")
  parser.add_argument("--min-success", type=float, default=None,
                      help="fail (exit 1) below this fraction of worlds within 1 cm")
  parser.add_argument("--video-worlds", type=int, default=16, help="worlds shown in the video (default 16)")
  diffsim.video.add_video_arguments(parser)
  args = parser.parse_args(argv)
  if args.test:
    args.nworld, args.timestep, args.iters, args.min_success = 20, 0.01, 20, 0.95

  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import warp as wp

  wp.config.log_level = wp.LOG_WARNING  # no kernel-loading logs between the results
  out = os.path.join(args.out, "03_so101_reach")
  os.makedirs(out, exist_ok=True)
  video, video_size = diffsim.video.video_options(args, out)  # checked before anything runs
  problem, targets = reach_problem(nworld=args.nworld, duration=args.duration, timestep=args.timestep,
                                   seed=args.seed, device=args.device, target_spread=args.target_spread,
                                   contacts=not args.no_contacts)
  res = diffsim.optimize_trajectory(problem, "ilqr", maxiter=args.iters, progress=not args.test)
  site = res.trajectory.sensordata.numpy()[:, :, :3]  # the framepos sensor, (nworld, nstep + 1, 3)
  dist = np.linalg.norm(site[:, -1] - targets, axis=1)
  success = float(np.mean(dist < 0.01))
  # the same controls replayed open-loop in float64 MuJoCo C: the plan must not rely on float32 MJWarp
  dist_c = np.linalg.norm(problem.replay_mujoco(res.x)["sensordata"][:, -1, :3] - targets, axis=1)
  success_c = float(np.mean(dist_c < 0.01))

  fig = plt.figure(figsize=(12, 4.5))
  ax0 = fig.add_subplot(1, 3, 1)
  ax0.hist(np.log10(np.maximum(dist, 1e-6)), bins=40)
  ax0.axvline(-2, color="k", ls=":")
  ax0.set(xlabel="log10 final distance to target (m)", ylabel="worlds", title=f"{100 * success:.1f}% within 1 cm")
  ax1 = fig.add_subplot(1, 3, 2)
  ax1.semilogy(np.median(res.history, axis=1), label="median")
  ax1.semilogy(np.percentile(res.history, 95, axis=1), label="95th percentile")
  ax1.set(xlabel="iLQR iteration", ylabel="cost", title="cost over worlds")
  ax1.legend()
  ax2 = fig.add_subplot(1, 3, 3, projection="3d")
  for w in range(min(args.nworld, 8)):
    line, = ax2.plot(*site[w].T, lw=1)
    ax2.scatter(*site[w, 0], color=line.get_color(), marker="o", s=10)
    ax2.scatter(*targets[w], color=line.get_color(), marker="x", s=30)
  ax2.set(xlabel="x (m)", ylabel="y (m)", zlabel="z (m)", title="end effector (o start, x target)")
  fig.tight_layout()
  path = os.path.join(out, "reach.png")
  fig.savefig(path, dpi=120)
  plt.close(fig)
  if video:
    # the first worlds' reaches in real time (at most 50 frames a second), each captioned with its final miss
    shown = np.arange(min(args.nworld, args.video_worlds))
    every = max(1, round(1 / (50 * problem.scene.dt)))
    diffsim.video.record(problem.scene, res, video, worlds=shown, size=video_size, every=every,
                         captions=[f"miss {1000 * dist[w]:.1f} mm" for w in shown], progress=not args.test)
    path += f", {video}"
  ro = problem.rollout
  how = "the analytic step's" if ro.jacobian == "analytic" else f"finite-difference lanes ({ro.fd.nlane} per world)"
  print(f"iLQR's step Jacobians: {how} ({ro.jacobian_reason}); a tape gradient (Adam, L-BFGS) "
        f"would take: {ro.gradient} ({ro.gradient_reason})")
  print(f"03_so101_reach: {args.nworld} worlds, {args.duration} s ({problem.horizon} steps of {problem.scene.dt} s): "
        f"{100 * success:.1f}% within 1 cm (median {1000 * np.median(dist):.2f} mm, max {1000 * dist.max():.1f} mm) "
        f"after {res.nit} iLQR iterations in {res.time:.1f} s; replayed in MuJoCo C: {100 * success_c:.1f}% "
        f"(median {1000 * np.median(dist_c):.2f} mm) (wrote {path})")
  if args.min_success is not None:
    ok = min(success, success_c) >= args.min_success
    print("test", "passed" if ok else "FAILED")
    return 0 if ok else 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
