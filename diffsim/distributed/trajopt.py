"""Trajectory optimization sharded over a `Cluster`'s workers: each shard runs its own solver.

The worlds of a `TrajectoryProblem` are independent problems, so a worker builds the problem of its
contiguous slice of worlds (`make_problem(worlds, device)`, once; the problem keeps its solvers and
their captured graphs for the next call) and runs `diffsim.optimize_trajectory` on it; the driver
gathers one `TrajectoryResult` with the fields and shapes one process returns. Nothing crosses while
the solvers iterate: a call sends the solver settings (and a warm start) and receives each shard's
controls, costs, history and trajectory.

iLQR and Adam work per world (per-world line search, regularization, moments and convergence
test), so their results equal one process's, world by world. L-BFGS does not: scipy's L-BFGS-B runs
on the stacked controls of the worlds it is given, with one line search for all of them, so each
shard's worlds share theirs and the results differ from one process's by design (each shard's L-BFGS
still minimizes its worlds' summed cost).
"""

from __future__ import annotations

import time

import numpy as np

from .cluster import Cluster, Worker, check_workers, local_cores, register_job, shards

__all__ = ["optimize_trajectory", "run_optimize_trajectory"]


def optimize_trajectory(make_problem, nworld: int, method: str = "ilqr", *, maxiter: int | None = None,
                        ftol: float | None = None, warm_start=None, shift: int = 1, log_every: int | None = None,
                        capture: bool = True, options: dict | None = None, workers: int | None = None,
                        address: str | None = None, device: str | None = None, timeout: float = 60.0):
  """`diffsim.optimize_trajectory` of `nworld` independent worlds on `workers` Ray workers; a cluster
  for one call.

  For repeated calls (warm starts, receding horizon) hold a `Cluster` and call
  `cluster.optimize_trajectory(...)` (same arguments, less the cluster's): the workers keep their
  problems and solver graphs between calls.

  Args:
    make_problem: a picklable function `(worlds: range, device: str) -> diffsim.TrajectoryProblem`
      that builds the problem of the worlds `worlds` (global indices, e.g. to slice per-world initial
      states and targets) with `nworld=len(worlds)` on `device`. Module-level, or a
      `functools.partial` of one; defined in a script, it is pickled by value.
    nworld: worlds in all (>= workers).
    method: `"ilqr"` (default), `"adam"` or `"lbfgs"` (see the module note: L-BFGS shards differ
      from one process).
    maxiter, ftol, shift, log_every, capture, options: as `diffsim.optimize_trajectory` (None: its
      default). No progress bar and no callback: the shards run in other processes.
    warm_start: a previous `TrajectoryResult` or controls `(nworld, nstep, nu)` (array-like).
    workers: Ray workers (>= 1, <= nworld); default: one per CPU core (or, at `address`, per CPU or
      GPU of the cluster), at most `nworld`.
    address, device, timeout: see `Cluster`.

  Returns:
    A `TrajectoryResult`: `x` `(nworld, nstep, nu)`, `fun` and `success` `(nworld,)` gathered in world
    order; `nit` the most iterations any shard ran; `history` `(nit + 1, nworld)` (a shard that
    stopped earlier repeats its last row); `message` the worlds that converged and each shard's
    message; `trajectory` and `ctrl` Warp arrays on the driver's CPU; `time` the call's wall time.

  Raises:
    ImportError, ValueError (bad input, `workers < 1`, more workers than worlds), ConnectionError,
    WorkerError: see `Cluster`; the solver's own errors with the shard named.
  """
  nworld = _check_nworld(nworld)
  check_workers(workers, nworld)
  _check_method(method)
  if workers is None:
    workers = min(local_cores(), nworld) if address is None else None
  with Cluster(workers, address, device=device, timeout=timeout) as cluster:
    return run_optimize_trajectory(cluster, make_problem, nworld, method, maxiter=maxiter, ftol=ftol,
                                   warm_start=warm_start, shift=shift, log_every=log_every, capture=capture,
                                   options=options, workers=min(cluster.workers, nworld))


def _check_nworld(nworld) -> int:
  if isinstance(nworld, bool) or not isinstance(nworld, (int, np.integer)) or nworld < 1:
    raise ValueError(f"nworld must be an integer >= 1, got {nworld!r}")
  return int(nworld)


def _check_method(method) -> str:
  from ..trajopt import METHODS

  if not isinstance(method, str) or method.lower() not in METHODS:
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
  return method.lower()


def run_optimize_trajectory(cluster: Cluster, make_problem, nworld: int, method: str = "ilqr", *,
                            maxiter: int | None = None, ftol: float | None = None, warm_start=None, shift: int = 1,
                            log_every: int | None = None, capture: bool = True, options: dict | None = None,
                            workers: int | None = None):
  """`optimize_trajectory` on a held cluster (`Cluster.optimize_trajectory`); `workers`: use the first
  `workers` of them (default: all)."""
  import warp as wp

  from ..rollout import Trajectory
  from ..trajopt import TrajectoryResult

  t0 = time.perf_counter()
  nworld = _check_nworld(nworld)
  method = _check_method(method)
  nshard = cluster.use(workers, nworld)
  if not callable(make_problem):
    raise TypeError(f"make_problem must be a function (worlds, device) -> TrajectoryProblem, got "
                    f"{type(make_problem).__name__}")
  if warm_start is not None:
    warm_start = np.asarray(getattr(warm_start, "x", warm_start), dtype=np.float32)
    if warm_start.ndim != 3 or warm_start.shape[0] != nworld:
      raise ValueError(f"warm_start must be a TrajectoryResult or controls (nworld={nworld}, nstep, nu), got shape "
                       f"{warm_start.shape}")
  kwargs = {k: v for k, v in dict(maxiter=maxiter, ftol=ftol, shift=shift, log_every=log_every, capture=capture,
                                   options=options).items() if v is not None}
  factory = cluster.ship(make_problem, "make_problem")
  parts = shards(nworld, nshard)
  args = [(factory, w, method, kwargs, None if warm_start is None else warm_start[w.start:w.stop]) for w in parts]
  labels = [f"worlds {w.start}-{w.stop - 1}" for w in parts]
  outs = cluster.map(_trajopt_shard, args, what=f"optimize_trajectory ({method})", labels=labels)

  nit = max(o["nit"] for o in outs)
  # a shard that stopped early keeps its last costs, as a converged world's do in one process
  history = np.concatenate([np.concatenate([o["history"], np.repeat(o["history"][-1:], nit - o["nit"], axis=0)])
                            for o in outs], axis=1)
  success = np.concatenate([o["success"] for o in outs])
  per_shard = "; ".join(f"{label}: {o['message']}" for label, o in zip(labels, outs))
  message = f"converged in {int(success.sum())} of {nworld} worlds on {len(outs)} workers ({per_shard})"
  x = np.concatenate([o["x"] for o in outs])
  host = lambda a: wp.array(a, dtype=float, device="cpu")
  ctrl = host(x)
  traj = {k: np.concatenate([o["trajectory"][k] for o in outs]) for k in ("qpos", "qvel", "act", "sensordata")}
  trajectory = Trajectory(qpos=host(traj["qpos"]), qvel=host(traj["qvel"]), act=host(traj["act"]),
                          sensordata=host(traj["sensordata"]), ctrl=ctrl, dt=outs[0]["dt"])
  return TrajectoryResult(x=x, fun=np.concatenate([o["fun"] for o in outs]), nit=nit, history=history,
                          success=success, message=message, trajectory=trajectory, method=method,
                          time=time.perf_counter() - t0, ctrl=ctrl)


register_job("optimize_trajectory", run_optimize_trajectory)  # `Cluster.optimize_trajectory`


# -- the worker side --------------------------------------------------------------------------------


def _trajopt_shard(worker: Worker, factory, worlds: range, method: str, kwargs: dict, warm_start) -> dict:
  import diffsim

  make_problem = worker.resolve(factory)

  def build():
    problem = make_problem(worlds, worker.device)
    if not isinstance(problem, diffsim.TrajectoryProblem) or problem.nworld != len(worlds):
      raise ValueError(f"make_problem(worlds, device) must return a diffsim.TrajectoryProblem with nworld="
                       f"len(worlds)={len(worlds)}, got {problem!r}")
    return problem

  problem = worker.cached(("trajopt", factory.token, worlds.start, worlds.stop), build)
  res = diffsim.optimize_trajectory(problem, method, warm_start=warm_start, progress=False, **kwargs)
  traj = res.trajectory
  return {"x": res.x, "fun": res.fun, "nit": res.nit, "history": res.history, "success": res.success,
          "message": res.message, "dt": traj.dt,
          "trajectory": {k: getattr(traj, k).numpy() for k in ("qpos", "qvel", "act", "sensordata")}}
