"""Tutorial 2: swing a cart-pole up from hanging with iLQR, Adam and L-BFGS on the same problem.

The pole hangs at angle 0 and must be upright (angle pi) and still at the end of the horizon; the
motor pushes the cart with at most 10 N (ctrl in [-1, 1]), so the controller must pump energy in
several swings. Each world starts from a slightly different hanging state. The three solvers start
from the same guess (no push) and read their gradients from the same differentiable rollout; iLQR
also uses the rollout's step Jacobians as its dynamics model.

  python tutorials/02_cartpole_swingup.py            # writes out/02_cartpole_swingup/ (plots, motion.gif, its
                                                     # last frame motion_last.png, trajectory.npz)
  diffsim view out/02_cartpole_swingup/trajectory.npz   # plays them in the browser (pip install "diffsim[view]")
  python tutorials/02_cartpole_swingup.py --test     # 2 worlds, fewer iterations; checks every swing-up
  python tutorials/02_cartpole_swingup.py --test --video --video-size 80x60   # ... and the video's last frame
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import diffsim
from diffsim.losses import CtrlCost, QposCost, QvelCost

# iterations each solver needs here (a few dozen for iLQR, hundreds for the first-order ones)
ITERS = {"ilqr": 40, "lbfgs": 150, "adam": 300}
# --test: the fewest with which every solver still gets both worlds upright
TEST_ITERS = {"ilqr": 30, "lbfgs": 60, "adam": 100}
OPTIONS = {"ilqr": {}, "lbfgs": {}, "adam": {"lr": 0.15}}


def swingup_problem(*, nworld: int, horizon: float, device=None) -> diffsim.TrajectoryProblem:
  """The swing-up: cart-pole worlds hanging with small initial angles, `horizon` s to get upright."""
  scene = diffsim.Scene.from_xml(diffsim.asset_path("cartpole.xml"), nworld=nworld, device=device)
  qpos0 = np.zeros((nworld, 2))
  qpos0[:, 1] = np.linspace(0.0, 0.1, nworld)  # rad; world 0 hangs exactly still
  cost = [
    QposCost([0.0, np.pi], running=0.0, terminal=[1.0, 100.0]),  # cart home, pole upright
    QvelCost(0.0, running=0.0, terminal=[1.0, 10.0]),  # and at rest
    CtrlCost(0.1),  # effort, per second
  ]
  return diffsim.TrajectoryProblem(scene, cost, horizon=round(horizon / scene.dt), qpos0=qpos0)


def pole_above_cart(video: str, *, rows: int, columns: int, size: tuple[int, int], gap: int = 2,
                    frame: int = -1) -> list[bool]:
  """Per tile of a frame of the video (default: the last): whether the pole's pixels (orange) lie
  above the cart's (blue)."""
  from PIL import Image

  with Image.open(video) as movie:
    movie.seek(frame % movie.n_frames)
    frame = np.asarray(movie.convert("RGB")).astype(int)
  width, height = size
  upright = []
  for tile in range(rows * columns):
    r, c = divmod(tile, columns)
    rgb = frame[r * (height + gap):r * (height + gap) + height, c * (width + gap):c * (width + gap) + width]
    red, green, blue = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    pole = np.nonzero((red > blue + 60) & (red > green + 20))[0]  # orange, lit or in shade; image rows
    cart = np.nonzero(blue > red + 60)[0]  # blue
    upright.append(bool(pole.size and cart.size and pole.mean() < cart.mean() - 0.05 * height))
  return upright


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda:0 if available, else cpu)")
  parser.add_argument("--iters", type=int, default=None, help=f"iterations of every solver (default: {ITERS})")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  parser.add_argument("--test", action="store_true", help="2 worlds, fewer iterations; checks each swing-up")
  parser.add_argument("--nworld", type=int, default=4)
  parser.add_argument("--horizon", type=float, default=2.0, help="s")
  diffsim.video.add_video_arguments(parser)
  args = parser.parse_args(argv)
  iters = {m: args.iters or n for m, n in ITERS.items()}
  if args.test:
    args.nworld = 2
    iters = {m: args.iters or n for m, n in TEST_ITERS.items()}

  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import warp as wp

  wp.config.log_level = wp.LOG_WARNING  # no kernel-loading logs between the results
  out = os.path.join(args.out, "02_cartpole_swingup")
  os.makedirs(out, exist_ok=True)
  video, video_size = diffsim.video.video_options(args, out)  # checked before anything runs
  problem = swingup_problem(nworld=args.nworld, horizon=args.horizon, device=args.device)
  results = {}
  for method in ("ilqr", "lbfgs", "adam"):
    results[method] = diffsim.optimize_trajectory(problem, method, maxiter=iters[method], progress=not args.test,
                                                  options=OPTIONS[method])

  fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
  summary = []
  for method, res in results.items():
    ax0.semilogy(np.median(res.history, axis=1), label=f"{method} ({res.time:.1f} s)")
    traj = res.trajectory.numpy()
    t = res.trajectory.time
    for w in range(problem.nworld):
      ax1.plot(t, traj["qpos"][w, :, 1], color=ax0.lines[-1].get_color(), lw=1, label=method if w == 0 else None)
    err = np.abs(traj["qpos"][:, -1, 1] - np.pi)
    summary.append(f"{method} {res.nit} it {res.time:.1f} s |angle - pi| max {err.max():.3f} rad "
                   f"|angvel| max {np.abs(traj['qvel'][:, -1, 1]).max():.3f} rad/s")
  ax0.set(xlabel="iteration", ylabel="median cost over worlds", title="cost")
  ax0.legend()
  ax1.axhline(np.pi, color="k", ls=":", lw=1)
  ax1.set(xlabel="time (s)", ylabel="pole angle (rad)", title="optimized motions (pi: upright)")
  ax1.legend()
  fig.tight_layout()
  path = os.path.join(out, "swingup.png")
  fig.savefig(path, dpi=120)
  plt.close(fig)
  if video:
    # one row per solver, one column per world: every optimized motion, played in real time
    qpos = np.concatenate([res.trajectory.qpos.numpy() for res in results.values()])
    errors = np.concatenate([np.abs(res.trajectory.qpos.numpy()[:, -1, 1] - np.pi) for res in results.values()])
    labels = [f"{method} world {w}" for method in results for w in range(problem.nworld)]
    diffsim.video.record(problem.scene, qpos, video, labels=labels, captions=[f"|angle-pi| {e:.2f}" for e in errors],
                         size=video_size, every=2, columns=problem.nworld, progress=not args.test,
                         still=os.path.join(out, "motion_last.png"))
    # the same worlds for `diffsim view out/02_cartpole_swingup/trajectory.npz` (pip install "diffsim[view]")
    diffsim.viewer.save_trajectory(os.path.join(out, "trajectory.npz"), problem.scene, qpos, labels=labels)
    path += f", {video}"
  print(f"02_cartpole_swingup: {problem.nworld} worlds, {problem.horizon} steps; " + "; ".join(summary)
        + f" (wrote {path})")
  if args.test:
    # every solver swung every world up: pole upright and nearly still at the end, in diffsim's
    # float32 simulation and with the same controls replayed open-loop in float64 MuJoCo C
    ok = True
    for res in results.values():
      for traj in (res.trajectory.numpy(), problem.replay_mujoco(res.x)):
        upright = np.abs(traj["qpos"][:, -1, 1] - np.pi) < 0.1
        ok &= bool(np.all(upright) and np.all(np.abs(traj["qvel"][:, -1, 1]) < 0.5))
    if video:
      # the video's last frame, as written: in every tile the pole (orange) stands above the cart (blue);
      # in the first, where every pole hangs, in none
      tiles = dict(rows=len(results), columns=problem.nworld, size=video_size)
      ok &= all(pole_above_cart(video, **tiles)) and not any(pole_above_cart(video, frame=0, **tiles))
    print("test", "passed" if ok else "FAILED")
    return 0 if ok else 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
