"""Tutorial 4: the SO-101 arm throws; MJWarp and a custom gravity kernel share one tape.

The arm starts folded and at rest, swings for `--duration` seconds and releases an (imaginary) ball
at the end: the ball leaves at the gripper site's position and velocity, read from `framepos` and
`framelinvel` sensors of the rollout, and flies ballistically (`diffsim.kernels.integrate_gravity`)
for a fixed time. Each world has its own target on the floor. The landing error is a user-written
Warp kernel (`diffsim.losses.KernelCost`): `tape.backward()` carries its gradient through the flight
kernel into the sensors, and the rollout's adjoint carries it into the arm's controls, which Adam
updates. That adjoint is the analytic one wherever `diffsim.adjoint.analytic_coverage` covers the
model (`gradient="auto"`, see the README's "Gradients"), else the finite-difference lanes; the run
prints which it took and why (`problem.rollout.gradient`, `.gradient_reason`).

  python tutorials/04_so101_throw.py             # 64 worlds at the model's 2 ms step; writes out/04_so101_throw/
                                                 # (plots, motion.gif of the swings; --no-video: none)
  python tutorials/04_so101_throw.py --test      # 4 worlds, 10 ms steps; checks the landings
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import warp as wp

import diffsim
from diffsim.losses import CtrlRateCost, KernelCost

SITE = "gripperframe"
FOLDED = [0.0, -0.8, 0.8, 0.6, 0.0, 0.0]  # rad: the arm's start, low and pulled in
FLIGHT, FLIGHT_DT = 0.4, 0.01  # s


@wp.kernel
def _release(
  # In:
  sensordata: wp.array3d[float],  # (nworld, nstep + 1, ns)
  pos_adr: int,  # framepos of the site
  vel_adr: int,  # framelinvel of the site
  # Out:
  x_out: wp.array2d[wp.vec3],  # (nworld, nflight + 1) m
  v_out: wp.array2d[wp.vec3],  # m/s
):
  w = wp.tid()
  k = sensordata.shape[1] - 1  # the final state
  x_out[w, 0] = wp.vec3(sensordata[w, k, pos_adr], sensordata[w, k, pos_adr + 1], sensordata[w, k, pos_adr + 2])
  v_out[w, 0] = wp.vec3(sensordata[w, k, vel_adr], sensordata[w, k, vel_adr + 1], sensordata[w, k, vel_adr + 2])


@wp.kernel
def _landing_cost(
  # In:
  x: wp.array2d[wp.vec3],  # (nworld, nflight + 1) m
  target: wp.array[wp.vec3],  # (nworld,) m
  weight: float,
  # Out:
  cost_out: wp.array[float],  # (nworld,)
):
  w = wp.tid()
  d = x[w, x.shape[1] - 1] - target[w]
  cost_out[w] = 0.5 * weight * wp.dot(d, d)


class Flight:
  """The ball's flight after release; its buffers are allocated once, so solvers can capture it."""

  def __init__(self, scene, targets: np.ndarray, *, weight: float = 1e3):
    mjm = scene.mjm
    adr = {mjm.sensor(i).name: int(mjm.sensor_adr[i]) for i in range(mjm.nsensor)}
    self.pos_adr, self.vel_adr = adr[f"{SITE}_pos"], adr[f"{SITE}_linvel"]
    self.nstep = round(FLIGHT / FLIGHT_DT)
    n, dev = scene.nworld, scene.device
    self.x = wp.zeros((n, self.nstep + 1), dtype=wp.vec3, device=dev, requires_grad=True)
    self.v = wp.zeros((n, self.nstep + 1), dtype=wp.vec3, device=dev, requires_grad=True)
    self.target = wp.array(targets, dtype=wp.vec3, device=dev)
    self.weight = weight

  def cost(self, traj: diffsim.Trajectory, out: wp.array) -> None:
    """`KernelCost` function: release at the last row of `traj`, fly, and score the landing."""
    n, dev = traj.nworld, out.device
    wp.launch(_release, dim=n, inputs=[traj.sensordata, self.pos_adr, self.vel_adr], outputs=[self.x, self.v],
              device=dev)
    g = wp.vec3(0.0, 0.0, -9.81)
    for k in range(self.nstep):
      wp.launch(diffsim.kernels.integrate_gravity, dim=n, inputs=[g, FLIGHT_DT, self.x, self.v, k],
                outputs=[self.x, self.v], device=dev)
    wp.launch(_landing_cost, dim=n, inputs=[self.x, self.target, self.weight], outputs=[out], device=dev)


def throw_problem(*, nworld: int, duration: float, timestep: float | None, seed: int = 0, device=None,
                  gradient: str = "auto"):
  """Scene, problem and flight of the throw. Returns `(problem, flight, targets (nworld, 3))`."""
  spec = diffsim.losses.add_site_sensors(diffsim.asset_path("so101", "so101_new_calib.xml"), [SITE], linvel=True)
  if timestep:
    spec.option.timestep = timestep
  scene = diffsim.Scene.from_xml(spec, nworld=nworld, device=device, njmax=128,
                                 solver=diffsim.SolverSettings(iterations=4, ls_iterations=8))
  rng = np.random.default_rng(seed)
  # targets on the floor (z = 0, the arm's base plane), in front of the arm
  r, phi = rng.uniform(0.5, 0.8, nworld), rng.uniform(-0.5, 0.5, nworld)
  targets = np.column_stack([r * np.cos(phi), r * np.sin(phi), np.zeros(nworld)])
  flight = Flight(scene, targets)
  cost = [KernelCost(flight.cost, name="landing"), CtrlRateCost(1e-4)]
  problem = diffsim.TrajectoryProblem(scene, cost, horizon=round(duration / scene.dt), qpos0=FOLDED,
                                      ctrl_init=FOLDED, central=False, gradient=gradient)
  return problem, flight, targets


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda:0 if available, else cpu)")
  parser.add_argument("--iters", type=int, default=300, help="Adam iterations")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  parser.add_argument("--test", action="store_true", help="small and coarse; checks the landings")
  parser.add_argument("--nworld", type=int, default=64)
  parser.add_argument("--duration", type=float, default=0.4, help="s of swing before the release")
  parser.add_argument("--timestep", type=float, default=None, help="s (default: the model's, 0.002)")
  parser.add_argument("--lr", type=float, default=0.03, help="Adam step, rad")
  diffsim.video.add_video_arguments(parser)
  parser.add_argument("--gradient", default="auto", choices=("auto", "analytic", "finite_difference"),
                      help="how Adam's tape gradient is formed (default auto: the analytic adjoint where it covers)")
  args = parser.parse_args(argv)
  if args.test:
    args.nworld, args.timestep, args.iters = 4, 0.01, 80

  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  wp.config.log_level = wp.LOG_WARNING  # no kernel-loading logs between the results
  out = os.path.join(args.out, "04_so101_throw")
  os.makedirs(out, exist_ok=True)
  video, video_size = diffsim.video.video_options(args, out)  # checked before anything runs
  problem, flight, targets = throw_problem(nworld=args.nworld, duration=args.duration, timestep=args.timestep,
                                           device=args.device, gradient=args.gradient)
  res = diffsim.optimize_trajectory(problem, "adam", maxiter=args.iters, progress=not args.test,
                                    options={"lr": args.lr})
  # the flight of the returned controls (the cost's buffers hold the last evaluated one)
  out_cost = wp.zeros(problem.nworld, dtype=float, device=problem.scene.device)
  flight.cost(res.trajectory, out_cost)
  ball = flight.x.numpy()
  miss = np.linalg.norm(ball[:, -1] - targets, axis=1)
  site = res.trajectory.sensordata.numpy()[:, :, flight.pos_adr:flight.pos_adr + 3]
  speed = np.linalg.norm(res.trajectory.sensordata.numpy()[:, -1, flight.vel_adr:flight.vel_adr + 3], axis=1)
  # the same swing replayed open-loop in float64 MuJoCo C, the ball flown by the same semi-implicit Euler
  release = problem.replay_mujoco(res.x)["sensordata"][:, -1]
  x, v = release[:, flight.pos_adr:flight.pos_adr + 3], release[:, flight.vel_adr:flight.vel_adr + 3]
  for _ in range(flight.nstep):
    v = v + np.array([0.0, 0.0, -9.81]) * FLIGHT_DT
    x = x + v * FLIGHT_DT
  miss_c = np.linalg.norm(x - targets, axis=1)

  fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
  for w in range(min(args.nworld, 6)):
    horiz = lambda p: np.hypot(p[..., 0], p[..., 1])  # distance from the base axis
    line, = ax0.plot(horiz(site[w]), site[w, :, 2], lw=2)
    ax0.plot(horiz(ball[w]), ball[w, :, 2], lw=1, ls="--", color=line.get_color())
    ax0.plot(horiz(targets[w]), targets[w, 2], "x", color=line.get_color())
  ax0.set(xlabel="distance from the base axis (m)", ylabel="height (m)", aspect="equal",
          title="swing (solid), flight (dashed), target (x)")
  ax1.semilogy(np.median(res.history, axis=1), label="median")
  ax1.semilogy(np.max(res.history, axis=1), label="worst")
  ax1.set(xlabel="Adam iteration", ylabel="cost", title="cost over worlds")
  ax1.legend()
  fig.tight_layout()
  path = os.path.join(out, "throw.png")
  fig.savefig(path, dpi=120)
  plt.close(fig)
  if video:
    # the swings up to the release (the ball's flight is computed outside the model), at most 16 worlds
    shown = np.arange(min(args.nworld, 16))
    diffsim.video.record(problem.scene, res, video, worlds=shown, size=video_size,
                         every=max(1, round(1 / (50 * problem.scene.dt))),
                         captions=[f"lands {100 * miss[w]:.1f} cm off" for w in shown], progress=not args.test)
    path += f", {video}"
  print(f"Adam's gradient: {problem.rollout.gradient} ({problem.rollout.gradient_reason})")
  print(f"04_so101_throw: {args.nworld} worlds, {args.duration} s swing ({problem.horizon} steps of "
        f"{problem.scene.dt} s), release at {np.median(speed):.2f} m/s (median): landing error median "
        f"{100 * np.median(miss):.2f} cm, max {100 * miss.max():.2f} cm, {int(np.sum(miss < 0.02))}/{args.nworld} "
        f"within 2 cm, after {res.nit} Adam iterations ({problem.rollout.gradient} gradients) in {res.time:.1f} s; "
        f"replayed in MuJoCo C: median "
        f"{100 * np.median(miss_c):.2f} cm, max {100 * miss_c.max():.2f} cm (wrote {path})")
  if args.test:
    ok = max(miss.max(), miss_c.max()) < 0.02
    print("test", "passed" if ok else "FAILED")
    return 0 if ok else 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
