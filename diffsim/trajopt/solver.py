"""The host loop every trajectory solver shares, and the kernels that keep each world's best iterate.

An iteration is a list of stages `(fn, repeats)`; each stage is captured once as a graph
(`diffsim.graph.Replay`) and replayed, so an iteration is a few graph launches and no host copy.
The host reads the best cost per world only every `log_every` iterations.
"""

from __future__ import annotations

import time

import numpy as np
import warp as wp

from .. import optim
from ..graph import Replay
from ..rollout import Trajectory
from .result import TrajectoryResult


@wp.kernel
def sum_cost(cost: wp.array[float], total: wp.array[float]):
  """`total[0] += sum(cost)`: the scalar a tape differentiates (worlds are independent)."""
  world = wp.tid()
  wp.atomic_add(total, 0, cost[world])


@wp.kernel
def increment(counter: wp.array[int]):
  counter[0] = counter[0] + 1


@wp.kernel
def _start_gradient(
  # In:
  done: wp.array[int],  # (1,) 1 once the start's gradient is kept
  grad: wp.array2d[float],  # (nworld, nstep * nu)
  # Out:
  grad0_out: wp.array[float],  # (nworld,) largest |gradient| entry at the start
):
  world = wp.tid()
  if done[0] != 0:
    return
  g = float(0.0)
  for i in range(grad.shape[1]):
    g = wp.max(g, wp.abs(grad[world, i]))
  grad0_out[world] = g


@wp.kernel
def _set_flag(flag: wp.array[int]):
  flag[0] = 1


@wp.kernel
def copy_where(
  # In:
  take: wp.array[int],  # (nworld,)
  src: wp.array3d[float],  # (nworld, ...)
  # Out:
  dst: wp.array3d[float],
):
  world, row, col = wp.tid()
  if take[world] != 0:
    dst[world, row, col] = src[world, row, col]


@wp.func
def _keep_better(world: int, cost: float, best_out: wp.array[float], better_out: wp.array[int]):
  better_out[world] = 0
  if cost < best_out[world]:  # False for NaN
    best_out[world] = cost
    better_out[world] = 1


@wp.kernel
def take_better(
  # In:
  cost: wp.array[float],  # (nworld,)
  # Out:
  best_out: wp.array[float],  # (nworld,) lowest cost so far
  better_out: wp.array[int],  # (nworld,) 1 where cost improved on best
):
  world = wp.tid()
  _keep_better(world, cost[world], best_out, better_out)


@wp.kernel
def _record_best(
  # In:
  row: wp.array[int],  # (1,) history row to write
  cost: wp.array[float],  # (nworld,)
  # Out:
  history_out: wp.array2d[float],  # (capacity, nworld)
  best_out: wp.array[float],  # (nworld,) lowest cost so far
  better_out: wp.array[int],  # (nworld,) 1 where cost improved on best
):
  world = wp.tid()
  history_out[row[0], world] = cost[world]
  _keep_better(world, cost[world], best_out, better_out)


class Solver:
  """Buffers, captured stages and the host loop shared by the solvers.

  A solver defines `stages()`, the launches of one iteration, and may extend `start`, `read_best`,
  `converged` and `finish`. History row `iterations[0]` holds the cost after that many iterations;
  `record` writes it and keeps each world's best controls and their trajectory, which the result
  returns (no extra rollout).

  Args:
    problem: the `TrajectoryProblem`.
    options: the method's options, defaults filled in (see `optimize_trajectory`).
    capacity: history rows, `maxiter + 1` of the longest run this solver serves.
    capture: replay the stages as captured graphs.

  Attributes:
    iterations: `(1,)` int, iterations taken, on the device (the history row written next).
    history: `(capacity, nworld)` cost per iteration.
    best, best_ctrl, best_trajectory: each world's lowest cost so far, its controls and trajectory.
    better: `(nworld,)` int, 1 where the last recorded cost improved on the best.
    cost, total: `(nworld,)` cost of the iterate and `(1,)` its sum, with gradients.
  """

  method = ""
  extra_evals = 0  # evaluations beyond the iterations (Adam evaluates before it steps)
  defaults: dict = {}  # options and their default values
  default_maxiter = 100

  def __init__(self, problem, options: dict, capacity: int, capture: bool):
    self.problem = problem
    self.options = options
    self.capacity = capacity
    self.capture = capture
    self._replay = None  # the iteration's stages, captured on the first step
    self.min_progress = 1e-4  # relative cost decrease below which a world did not leave its start
    scene, nworld, nstep = problem.scene, problem.nworld, problem.horizon

    def zeros(*shape, dtype=float, grad=False):
      return wp.zeros(shape, dtype=dtype, device=scene.device, requires_grad=grad)

    self.iterations = zeros(1, dtype=int)
    self.history = zeros(capacity, nworld)
    self.best = zeros(nworld)
    self.better = zeros(nworld, dtype=int)
    self.best_ctrl = zeros(*problem.ctrl.shape)
    self.best_trajectory = Trajectory(zeros(nworld, nstep + 1, scene.nq), zeros(nworld, nstep + 1, scene.nv),
                                      zeros(nworld, nstep + 1, scene.na), zeros(nworld, nstep + 1, scene.nsensordata),
                                      self.best_ctrl, scene.dt)
    self.cost = zeros(nworld, grad=True)
    self.total = zeros(1, grad=True)
    # the largest |gradient| entry per world at the start, kept by solvers that take tape gradients
    # (`keep_start_gradient`) for `finish`'s zero-gradient test, which else runs a rollout of its own
    self.grad0 = zeros(nworld)
    self._grad0_done = zeros(1, dtype=int)
    self.keeps_start_gradient = False

  def launch(self, kernel, dim, inputs, outputs=()) -> None:
    wp.launch(kernel, dim=dim, inputs=inputs, outputs=list(outputs), device=self.problem.scene.device)

  def stages(self) -> list:
    """The launches of one iteration, `[(fn, repeats)]`."""
    raise NotImplementedError

  def step(self) -> None:
    """Advances every world by one iteration with launches only (no host copies)."""
    if self._replay is None:
      self._replay = Replay(self.problem.scene.device, self.stages(), self.capture)
    self._replay()

  def record(self, cost: wp.array, ctrl: wp.array, trajectory: Trajectory) -> None:
    """History row `iterations[0]` = cost; where it beats the best so far, keep controls and trajectory."""
    self.launch(_record_best, self.problem.nworld, [self.iterations, cost], [self.history, self.best, self.better])
    self.launch(copy_where, ctrl.shape, [self.better, ctrl], [self.best_ctrl])
    best = self.best_trajectory
    for src, dst in ((trajectory.qpos, best.qpos), (trajectory.qvel, best.qvel), (trajectory.act, best.act),
                     (trajectory.sensordata, best.sensordata)):
      if dst.size:
        self.launch(copy_where, dst.shape, [self.better, src], [dst])

  def gradient(self) -> tuple[Trajectory, wp.Tape]:
    """Cost of `problem.ctrl` in `self.cost` and its gradient in `problem.ctrl.grad` (a differentiable
    rollout). Returns the trajectory and the tape, which the caller zeroes once the gradient is used."""
    problem = self.problem
    problem.ctrl.grad.zero_()
    self.total.zero_()
    tape = wp.Tape()
    with tape:
      trajectory = problem.run(problem.ctrl)
      problem.cost.evaluate(trajectory, self.cost)
      self.launch(sum_cost, problem.nworld, [self.cost], [self.total])
    tape.backward(loss=self.total)
    return trajectory, tape

  def keep_start_gradient(self) -> None:
    """Keeps the largest |entry| of `problem.ctrl.grad` per world in `grad0`, at the first evaluation
    after `start` only (a device flag: the launches are captured and replayed every evaluation)."""
    problem = self.problem
    grad = problem.ctrl.grad.reshape((problem.nworld, -1))
    self.launch(_start_gradient, problem.nworld, [self._grad0_done, grad], [self.grad0])
    self.launch(_set_flag, 1, [self._grad0_done])

  def start(self, ctrl0: wp.array) -> None:
    """Resets the iterate to `ctrl0` and forgets the best so far."""
    self._ctrl0 = ctrl0  # for the zero-gradient test of `finish`
    wp.copy(self.problem.ctrl, ctrl0)
    wp.copy(self.best_ctrl, ctrl0)
    self.iterations.zero_()
    self.best.fill_(np.inf)
    self._grad0_done.zero_()

  def read_best(self) -> np.ndarray:
    """The best cost per world `(nworld,)` float64: one device-to-host copy."""
    return self.best.numpy().astype(np.float64)

  def read_best_ctrl(self) -> np.ndarray:
    """The best controls per world `(nworld, nstep, nu)` float32 (a copy)."""
    return self.best_ctrl.numpy().copy()

  def converged(self, nit: int, best: np.ndarray, ftol: float) -> np.ndarray:
    """Worlds whose best cost fell by at most `ftol` (relative) over the last `patience` iterations."""
    patience = self.options.get("patience", 1)
    old = [b for i, b in self._snapshots if i <= nit - patience]
    if not old:
      return np.zeros(best.shape, bool)
    return (old[-1] - best) <= ftol * np.maximum(np.abs(old[-1]), 1e-12)

  def run(self, ctrl0: wp.array, *, maxiter: int, ftol: float, progress: bool, log_every: int,
          callback=None) -> TrajectoryResult:
    """Iterates from `ctrl0` until every world converged, `maxiter`, or `callback` asks to stop."""
    t0 = time.perf_counter()
    self.problem.refresh_constants()
    self.start(ctrl0)
    nworld = self.problem.nworld
    self._snapshots = []  # (iteration, best cost per world) at each check
    done = np.zeros(nworld, bool)
    nit = -self.extra_evals
    with optim.progress_bar(maxiter, self.method, progress) as bar:
      while nit < maxiter:
        self.step()
        nit += 1
        if nit > 0 and (nit % log_every == 0 or nit == maxiter):
          # the loop's only host read, every log_every iterations: the best cost per world (and
          # iLQR's convergence status), a few bytes per world
          best = self.read_best()
          done = self.converged(nit, best, ftol)
          self._snapshots.append((nit, best))
          bar.set_postfix_str(f"best {np.nanmin(best):.4g}  median {np.nanmedian(best):.4g}  "
                              f"converged {int(done.sum())}/{nworld}", refresh=False)
          bar.update(nit - bar.n)
          if done.all() or optim.stop_requested(callback, optim.Iterate(nit, best, read_x=self.read_best_ctrl)):
            break
    return self.finish(max(nit, 0), done, t0, maxiter)

  def finish(self, nit: int, done: np.ndarray, t0: float, maxiter: int, message: str | None = None,
             history: np.ndarray | None = None) -> TrajectoryResult:
    """The result: the best controls and trajectory per world (device copies), their cost and history."""
    if history is None:
      history = self.history.numpy()[:nit + 1].astype(np.float64)
    x = wp.clone(self.best_ctrl)
    best = self.best_trajectory
    trajectory = Trajectory(*[wp.clone(a) for a in (best.qpos, best.qvel, best.act, best.sensordata)], x,
                            self.problem.scene.dt)
    if message is None:
      message = (f"converged in all {done.size} worlds (relative cost decrease below ftol)" if done.all() else
                 f"maximum number of iterations ({maxiter}) reached; converged in {int(done.sum())} of "
                 f"{done.size} worlds")
    fun = self.best.numpy().astype(np.float64)
    success = done.copy()
    reasons = np.where(done, "converged", "not converged").astype(object)
    zero = np.zeros(done.size, bool)
    if len(history):
      # a stop test on the relative decrease reads a flat start as convergence (a pusher's force on an
      # object held by static friction barely changes the cost): no real progress is no success
      start = np.asarray(history[0], np.float64)
      stalled = (start - fun) <= self.min_progress * np.maximum(np.abs(start), 1e-12)
      if stalled.any():
        zero = stalled & self._zero_gradient(start)
        success &= ~stalled
        reasons[stalled] = "no progress from the start"
        reasons[zero] = "zero gradient at the start, nothing moved"
        message += (f"; no progress from the start in {int(stalled.sum())} of {stalled.size} worlds (worlds "
                    f"{_first(np.flatnonzero(stalled))}: cost fell by less than {self.min_progress:g} of its "
                    "initial value), not counted as converged")
        if zero.any():
          message += (f"; in {int(zero.sum())} of them (worlds {_first(np.flatnonzero(zero))}) the gradient was "
                      "zero at the start and nothing moved (a contact not yet made: the object does not feel "
                      "a pusher that misses it): start from a contact-reaching warm start (see diffsim.trajopt: "
                      "problem.with_cost(cost + a term that draws the pusher to the object), then warm_start=)")
        if (stalled & ~zero).any():
          message += (". Unless the start was already optimal, the gradient there is nearly flat (an object at "
                      "rest under static friction): try method='ilqr', a warm start, or a shaping cost term "
                      "that draws the pusher to the object")
    return TrajectoryResult(x=x.numpy(), fun=fun, nit=nit, history=history, success=success, message=message,
                            trajectory=trajectory, method=self.method, time=time.perf_counter() - t0, ctrl=x,
                            zero_gradient=zero, reasons=tuple(reasons))

  def _zero_gradient(self, start: np.ndarray) -> np.ndarray:
    """`(nworld,)` bool: the tape gradient of the cost in the controls at the start was zero (every
    entry at most 1e-9 of the start's cost, float32 noise), for a result with stalled worlds. From
    `grad0` where the solver kept it (one host read), else one rollout and backward pass launched
    from Python (iLQR), which leaves `problem.ctrl` at the start."""
    problem = self.problem
    if self.keeps_start_gradient and self._grad0_done.numpy()[0]:
      grad = self.grad0.numpy().astype(np.float64)
    else:
      wp.copy(problem.ctrl, self._ctrl0)
      _, tape = self.gradient()
      grad = np.abs(problem.ctrl.grad.numpy()).reshape(problem.nworld, -1).max(axis=1)
      tape.zero()
    return grad <= 1e-9 * np.maximum(np.abs(start), 1e-30)


def _first(worlds: np.ndarray, n: int = 5) -> str:
  """The first `n` world indices, as text."""
  text = ", ".join(str(int(w)) for w in worlds[:n])
  return text + (", ..." if len(worlds) > n else "")
