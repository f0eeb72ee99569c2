"""Push: a capsule pusher moves a free box to 4 targets; iLQR (analytic step Jacobians, lanes) vs scipy.

  python -m benchmarks.bench_push [--device cpu] [--nworld 64] [--repeats 1] [--out benchmarks/results]

The model (`PUSH_XML`, its own MJCF): a vertical capsule (radius 1 cm) on actuated planar x/y
slides, driven by velocity servos (`kv` 20 N s/m, ctrlrange +-0.5 m/s, forcerange +-10 N), and a
free 5 cm box (0.2 kg) on a plane; elliptic cones, friction 0.5, Euler, timestep 0.005 s, 120
steps (0.6 s). The capsule touches the box only (not the floor). Targets: 4 box goals 10-15 cm from
the box's start in 4 directions (`GOALS`); world `w` pushes to goal `w % 4`, the box's start
jittered by up to 3 mm per world (seeded). Two starts, both at rest with zero controls:
  - `touching`: the capsule against the box's face opposite the goal (0.2 mm into it);
  - `rest`: the same line, 2 cm out of contact: the box's position has zero gradient with
    respect to every control at the start (no contact row), which first-order solvers cannot leave.

Cost, per world (`diffsim.losses`' convention): `1/2 W |p_T - g|^2` on the box's final x, y
(`W` = 1e4 / m^2, a `framepos` sensor) plus `dt sum_k 1/2 C |u_k|^2` (`C` = 1e-2 s/m^2 per second).

Solvers, from the same zero controls:
  - `ilqr (analytic)`: `optimize_trajectory(method="ilqr")` on the default rollout, whose
    `jacobian="auto"` forms the step Jacobians from the analytic step (`Rollout.jacobian`);
  - `ilqr (lanes)`: the same problem with `TrajectoryProblem(..., jacobian="finite_difference",
    central=False)` (forward differences, `1 + nx + nu` lanes per world);
  - `scipy L-BFGS-B (C, FD)`: `scipy.optimize.minimize(method="L-BFGS-B")` per world on float64
    MuJoCo C, the same cost, its gradient by forward differences over the 240 controls (step
    `FD_EPS`), every evaluation one `mujoco.rollout.rollout` call of the nominal and all 240
    perturbed control sequences (`--threads` MjData), the control range as box bounds, at most
    `--lbfgs-evals` (50) evaluations per world: on this non-smooth cost its line search mostly ends
    ABNORMAL after many evaluations, which then add time and no accuracy.

Every plan is judged by replaying it open-loop in float64 MuJoCo C (`problem.replay_mujoco`):
fraction of worlds with the box within 2 cm of its goal, median and max distance. Times: wall time
to the final answer; diffsim's after a warm-up call that compiles kernels and captures graphs
(reported apart). `ratio`: iLQR time / scipy time on the same start and targets. Writes
`<out>/push_<device>.json` and `.md` (atomically, `benchmarks/save.py`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import mujoco
import numpy as np
import warp as wp

import diffsim
from diffsim.losses import CtrlCost, SensorCost

from .save import write_json, write_text

PUSH_XML = """
<mujoco model="capsule_push">
  <option timestep="0.005" cone="elliptic"/>
  <default>
    <geom friction="0.5 0.005 0.0001"/>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1" contype="1" conaffinity="1"/>
    <body name="pusher" pos="0 0 0">
      <joint name="px" type="slide" axis="1 0 0"/>
      <joint name="py" type="slide" axis="0 1 0"/>
      <geom name="finger" type="capsule" fromto="0 0 0.01 0 0 0.04" size="0.01" mass="0.5" contype="2"
            conaffinity="0"/>
    </body>
    <body name="box" pos="0 0 0.025">
      <freejoint name="box"/>
      <geom name="box" type="box" size="0.025 0.025 0.025" mass="0.2" contype="1" conaffinity="3"/>
    </body>
  </worldbody>
  <actuator>
    <velocity name="vx" joint="px" kv="20" ctrlrange="-0.5 0.5" forcerange="-10 10"/>
    <velocity name="vy" joint="py" kv="20" ctrlrange="-0.5 0.5" forcerange="-10 10"/>
  </actuator>
  <sensor>
    <framepos name="box_pos" objtype="body" objname="box"/>
  </sensor>
</mujoco>
"""
HALF, RADIUS = 0.025, 0.01  # m, the box's half side and the capsule's radius
# (angle deg, distance m) of the 4 goals from the box's start
GOALS = ((0.0, 0.12), (100.0, 0.10), (200.0, 0.15), (290.0, 0.13))
STARTS = {"touching": -0.0002, "rest": 0.02}  # m, the capsule's gap to the box (negative: into it)
WEIGHT, CTRL_WEIGHT = 1e4, 1e-2  # terminal 1/m^2 on the box's x, y; control s/m^2 per second
FD_EPS = 1e-6  # m/s, scipy's forward-difference step on a control
ITERS = {"ilqr": 30, "lbfgs": 200, "lbfgs_evals": 50}  # maxiter per solver; scipy's maxfun per world
JITTER = 0.003  # m, per-world box start perturbation


def _gap_line(c: np.ndarray, u: np.ndarray, gap: float) -> np.ndarray:
  """The capsule's center `(2,)` on the line from the box's center `c` along `-u`, `gap` m from the
  (axis-aligned) box's boundary: bisection on the point-to-square distance."""
  dist = lambda t: np.linalg.norm(np.maximum(np.abs(-t * u) - HALF, 0.0)) - RADIUS
  lo, hi = 0.0, 1.0
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if dist(mid) < gap else (lo, mid)
  return c - 0.5 * (lo + hi) * u


def push_case(nworld: int, start: str, *, seed: int = 0):
  """`(qpos0 (nworld, nq), goals (nworld, 2))` for `start` in `STARTS`; the box settled in MuJoCo C."""
  mjm = mujoco.MjModel.from_xml_string(PUSH_XML)
  d = mujoco.MjData(mjm)
  d.qpos[:2] = 0.5  # the pusher out of the way while the box settles
  for _ in range(100):
    mujoco.mj_step(mjm, d)
  settled = d.qpos.copy()
  rng = np.random.default_rng(seed)
  qpos0, goals = np.tile(settled, (nworld, 1)), np.zeros((nworld, 2))
  for w in range(nworld):
    angle, dist = GOALS[w % len(GOALS)]
    u = np.array([np.cos(np.radians(angle)), np.sin(np.radians(angle))])
    box = settled[2:4] + rng.uniform(-JITTER, JITTER, 2)
    qpos0[w, 2:4] = box
    qpos0[w, :2] = _gap_line(box, u, STARTS[start])
    goals[w] = settled[2:4] + dist * u  # the goal does not move with the jitter
  return qpos0, goals


def push_problem(nworld: int, start: str, device, *, jacobian: str = "auto", seed: int = 0):
  """`(problem, goals (nworld, 2))`: the push as a `diffsim.TrajectoryProblem` from zero controls."""
  qpos0, goals = push_case(nworld, start, seed=seed)
  scene = diffsim.Scene.from_xml(PUSH_XML, nworld=nworld, device=device)
  nstep = 120
  target = np.concatenate([goals, np.full((nworld, 1), HALF)], axis=1)
  cost = [SensorCost("box_pos", target, terminal=[WEIGHT, WEIGHT, 0.0]), CtrlCost(CTRL_WEIGHT)]
  # the lanes with forward differences (half their lanes; iLQR needs no more)
  problem = diffsim.TrajectoryProblem(scene, cost, horizon=nstep, qpos0=qpos0, jacobian=jacobian,
                                      central=jacobian == "auto")
  return problem, goals


def judge(problem, goals: np.ndarray, ctrl) -> np.ndarray:
  """Distances `(nworld,)` m of the box's final x, y to its goal, `ctrl` replayed open-loop in float64 C."""
  qpos = problem.replay_mujoco(ctrl)["qpos"]
  return np.linalg.norm(qpos[:, -1, 2:4] - goals, axis=1)


def run_ilqr(problem, repeats: int) -> dict:
  """iLQR from zero controls: warm-up (one iteration), then `repeats` timed runs; the first run's plan."""
  maxiter = ITERS["ilqr"]
  t = time.perf_counter()
  # maxiter as the timed run's: a solver is cached for runs up to maxiter + 1 iterations
  diffsim.optimize_trajectory(problem, "ilqr", maxiter=maxiter, progress=False, callback=lambda it: True)
  warmup = time.perf_counter() - t
  walls, results = [], []
  for _ in range(repeats):
    t = time.perf_counter()
    results.append(diffsim.optimize_trajectory(problem, "ilqr", maxiter=maxiter, progress=False))
    walls.append(time.perf_counter() - t)
  res = results[0]
  return {"x": res.x, "wall_s": float(np.median(walls)), "wall_runs_s": walls, "warmup_s": warmup, "nit": int(res.nit),
          "cost_median": float(np.median(res.fun)), "message": str(res.message),
          "stalled": int(np.sum(~np.asarray(res.success)))}


class ScipyPush:
  """The push of one world on float64 MuJoCo C: cost and forward-difference gradient over the controls,
  every evaluation one batched `mujoco.rollout.rollout` of `1 + nstep * nu` control sequences."""

  def __init__(self, mjm: mujoco.MjModel, nstep: int, threads: int):
    from mujoco import rollout

    self.mjm, self.nstep, self.nu = mjm, nstep, mjm.nu
    self.datas = [mujoco.MjData(mjm) for _ in range(threads)]
    self.rollout = rollout.rollout
    self.spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    self.nstate = mujoco.mj_stateSize(mjm, self.spec)
    n = 1 + nstep * self.nu
    self.batch = np.zeros((n, nstep, self.nu))
    self.state = np.zeros((n, nstep, self.nstate))
    self.sensordata = np.zeros((n, nstep, mjm.nsensordata))
    self.nfev = 0

  def set_world(self, qpos0: np.ndarray, goal: np.ndarray) -> None:
    d = self.datas[0]
    mujoco.mj_resetData(self.mjm, d)
    d.qpos[:] = qpos0
    self.x0 = np.zeros(self.nstate)
    mujoco.mj_getState(self.mjm, d, self.x0, self.spec)
    self.goal = goal

  def _costs(self, ctrl: np.ndarray) -> np.ndarray:
    """`(n,)` costs of the control sequences `ctrl (n, nstep, nu)`."""
    n = ctrl.shape[0]
    self.rollout(self.mjm, self.datas, self.x0, ctrl, state=self.state[:n], sensordata=self.sensordata[:n],
                 skip_checks=False)
    self.nfev += n
    box = self.state[:n, -1, 1 + 2:1 + 4]  # state: time, then qpos (pusher x, y; box x, y, z, quat)
    dt = self.mjm.opt.timestep
    return (0.5 * WEIGHT * np.sum((box - self.goal) ** 2, axis=1)
            + dt * 0.5 * CTRL_WEIGHT * np.sum(ctrl.reshape(n, -1) ** 2, axis=1))

  def fun_grad(self, x: np.ndarray) -> tuple[float, np.ndarray]:
    ctrl = x.reshape(self.nstep, self.nu)
    self.batch[:] = ctrl
    idx = np.arange(x.size)
    # forward differences, stepping into the box bounds' inside at the upper bound
    step = np.where(x + FD_EPS > self.hi, -FD_EPS, FD_EPS)
    flat = self.batch.reshape(len(self.batch), -1)
    flat[1 + idx, idx] += step
    costs = self._costs(self.batch)
    return float(costs[0]), (costs[1:] - costs[0]) / step


def run_scipy(problem, threads: int) -> dict:
  """scipy L-BFGS-B per world from zero controls, on float64 MuJoCo C (see `ScipyPush`)."""
  from scipy.optimize import minimize

  mjm = mujoco.MjModel.from_xml_string(PUSH_XML)
  nstep, nu = problem.horizon, mjm.nu
  push = ScipyPush(mjm, nstep, threads)
  lo, hi = problem.ctrl_lo_np.astype(np.float64), problem.ctrl_hi_np.astype(np.float64)
  qpos0, goals = problem.qpos0.numpy().astype(np.float64), problem.goals
  # warm-up: the rollout module's first call
  push.set_world(qpos0[0], goals[0])
  push.hi = hi[0].ravel()
  push.fun_grad(np.zeros(nstep * nu))
  push.nfev = 0
  x = np.zeros((problem.nworld, nstep, nu))
  nit, fun, ok = [], [], []
  t = time.perf_counter()
  for w in range(problem.nworld):
    push.set_world(qpos0[w], goals[w])
    push.hi = hi[w].ravel()
    res = minimize(push.fun_grad, np.zeros(nstep * nu), jac=True, method="L-BFGS-B",
                   bounds=list(zip(lo[w].ravel(), hi[w].ravel())),
                   options={"maxiter": ITERS["lbfgs"], "maxfun": ITERS["lbfgs_evals"]})
    x[w] = res.x.reshape(nstep, nu)
    nit.append(int(res.nit))
    fun.append(float(res.fun))
    ok.append(bool(res.success))
  wall = time.perf_counter() - t
  return {"x": x, "wall_s": wall, "wall_runs_s": [wall], "warmup_s": 0.0, "nit": int(np.max(nit)),
          "nit_median": float(np.median(nit)), "cost_median": float(np.median(fun)),
          "rollouts": push.nfev, "evals": push.nfev // (1 + nstep * nu),
          "message": f"{sum(ok)}/{len(ok)} worlds scipy success", "stalled": len(ok) - sum(ok)}


def bench_start(start: str, nworld: int, device, repeats: int, threads: int, solvers) -> list[dict]:
  rows = []
  for solver in solvers:
    jacobian = "finite_difference" if solver == "ilqr_lanes" else "auto"
    problem, goals = push_problem(nworld, start, device, jacobian=jacobian)
    problem.goals = goals
    print(f"bench_push: {start}, {solver}, {nworld} worlds", flush=True)
    r = run_scipy(problem, threads) if solver == "scipy" else run_ilqr(problem, repeats)
    err = judge(problem, goals, r.pop("x"))
    rows.append({
      "start": start, "solver": solver, "nworld": nworld, "horizon": problem.horizon, "dt": problem.scene.dt,
      "device": str(problem.scene.device),
      "derivatives": ("float64 C forward differences" if solver == "scipy" else
                      f"{problem.rollout.jacobian} step Jacobians ({problem.rollout.nlane} MJWarp worlds per world)"),
      "jacobian_reason": None if solver == "scipy" else problem.rollout.jacobian_reason,
      "threads": threads if solver == "scipy" else None,
      "success_2cm": float(np.mean(err < 0.02)), "median_cm": float(100 * np.median(err)),
      "max_cm": float(100 * np.max(err)), "errors_cm": (100 * err).round(3).tolist(), **r,
    })
  scipy_s = next((r["wall_s"] for r in rows if r["solver"] == "scipy"), None)
  for r in rows:
    r["ratio_to_scipy"] = None if scipy_s is None else r["wall_s"] / scipy_s
  return rows


NAMES = {"ilqr": "iLQR, analytic Jacobians", "ilqr_lanes": "iLQR, FD lanes", "scipy": "scipy L-BFGS-B (C, FD)"}


def table(rows: list[dict]) -> str:
  head = "| start | solver | worlds | within 2 cm (C) | median / max (cm) | iters | time | warm-up | time / scipy |"
  lines = [head, "|" + "---|" * (head.count("|") - 1)]
  for r in rows:
    ratio = "-" if r["ratio_to_scipy"] is None else f"{r['ratio_to_scipy']:.2f}x"
    lines.append(f"| {r['start']} | {NAMES[r['solver']]} | {r['nworld']} | {100 * r['success_2cm']:.0f}% | "
                 f"{r['median_cm']:.2f} / {r['max_cm']:.2f} | {r['nit']} | {r['wall_s']:.1f} s | "
                 f"{r['warmup_s']:.1f} s | {ratio} |")
  if rows:
    lines += ["", f"Capsule pusher, free box, 4 goals 10-15 cm away, elliptic cones, dt {rows[0]['dt']}, "
              f"{rows[0]['horizon']} steps, from zero controls; plans replayed open-loop in float64 MuJoCo C. "
              f"Device {rows[0]['device']}; scipy per world on {rows[-1].get('threads') or 1} thread(s). "
              "Time: wall to the final answer (diffsim's warm-up apart)."]
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None)
  parser.add_argument("--nworld", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=1, help="timed runs of each iLQR (median reported)")
  parser.add_argument("--threads", type=int, default=1, help="MjData threads of scipy's batched rollouts")
  parser.add_argument("--starts", nargs="+", default=list(STARTS), choices=list(STARTS))
  parser.add_argument("--solvers", nargs="+", default=list(NAMES), choices=list(NAMES))
  parser.add_argument("--ilqr-iters", type=int, default=ITERS["ilqr"])
  parser.add_argument("--lbfgs-iters", type=int, default=ITERS["lbfgs"])
  parser.add_argument("--lbfgs-evals", type=int, default=ITERS["lbfgs_evals"],
                      help="scipy's maxfun per world (each evaluation 1 + nstep * nu C rollouts)")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  ITERS.update(ilqr=args.ilqr_iters, lbfgs=args.lbfgs_iters, lbfgs_evals=args.lbfgs_evals)
  wp.config.log_level = wp.LOG_WARNING
  device = wp.get_device(args.device)
  rows = []
  name = f"push_{str(device).replace(':', '')}"
  for start in args.starts:
    rows += bench_start(start, args.nworld, device, max(args.repeats, 1), args.threads, args.solvers)
    # after every start: a run stopped by a timeout keeps what it finished
    write_json(os.path.join(args.out, name + ".json"),
               {"argv": sys.argv[1:] if argv is None else list(argv), "iters": dict(ITERS), "rows": rows})
    write_text(os.path.join(args.out, name + ".md"), table(rows))
  print(table(rows))
  return rows


if __name__ == "__main__":
  main()
