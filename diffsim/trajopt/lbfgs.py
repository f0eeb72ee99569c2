"""L-BFGS on every world's controls, one graph replay per function evaluation: scipy's L-BFGS-B on
all worlds' controls stacked (`line_search="shared"`, the default) or one L-BFGS per world
(`batched_lbfgs.BatchedLBFGS`, `"per_world"`)."""

from __future__ import annotations

import time

import numpy as np
import warp as wp

from .. import optim
from .batched_lbfgs import BatchedLBFGS
from .solver import Solver

LINE_SEARCHES = ("per_world", "shared")


class LBFGSSolver(Solver):
  """L-BFGS on every world's controls.

  `options["line_search"]`: `"shared"` (default) runs scipy's L-BFGS-B on all worlds' controls
  stacked (their costs summed): worlds are independent, so the summed cost's gradient is each
  world's own, but one step length serves them all, and a world on a float32 plateau can end the
  search for every world. `"per_world"` runs one L-BFGS per world, each with its own curvature pairs,
  Armijo line search and stopping test (`BatchedLBFGS`, `ftol` on two accepted iterations in a row),
  all worlds evaluated together. Measured on the 2-core CPU: tutorial 8's push at 4 worlds (40
  iterations), shared stopped after 6 iterations (replayed in C 0.15-1.43 cm), per world ran 35
  (0.02-0.83 cm, 3 of 4 worlds' costs lower); tutorial 2's cart-pole (4 worlds, 150 iterations), shared
  reached costs 0.12-0.18, per world 0.12-0.16 (with scipy's single `ftol` test one world stopped at
  0.45). An
  evaluation is one graph replay between one upload of the controls and one read of cost and
  gradient; per world, the best controls evaluated are returned.
  """

  method = "lbfgs"
  defaults = {"maxcor": 10, "gtol": 1e-8, "line_search": "shared"}
  default_maxiter = 500

  def __init__(self, problem, options, capacity, capture):
    super().__init__(problem, options, capacity, capture)
    # gradient then cost per world, so one read brings both
    self.packed = wp.zeros(problem.ctrl.size + problem.nworld, dtype=float, device=problem.scene.device)
    self.keeps_start_gradient = True

  def stages(self):
    return [(self.evaluate, 1)]

  def evaluate(self) -> None:
    problem = self.problem
    trajectory, tape = self.gradient()
    self.record(self.cost, problem.ctrl, trajectory)
    self.keep_start_gradient()
    nctrl = problem.ctrl.size
    wp.copy(self.packed, problem.ctrl.grad.flatten(), count=nctrl)
    wp.copy(self.packed, self.cost, dest_offset=nctrl, count=problem.nworld)
    tape.zero()

  def _evaluate_at(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cost `(nworld,)` and gradient `(nworld, nctrl / nworld)` at the controls `x` (float64)."""
    problem = self.problem
    problem.ctrl.assign(x.reshape(problem.ctrl.shape).astype(np.float32))
    self.step()
    packed = self.packed.numpy().astype(np.float64)  # the one host read of the evaluation
    nctrl = problem.ctrl.size
    return packed[nctrl:], packed[:nctrl].reshape(problem.nworld, -1)

  def run(self, ctrl0, *, maxiter, ftol, progress, log_every, callback=None):
    if self.options["line_search"] == "per_world":
      return self._run_per_world(ctrl0, maxiter=maxiter, ftol=ftol, progress=progress, log_every=log_every,
                                 callback=callback)
    return self._run_shared(ctrl0, maxiter=maxiter, ftol=ftol, progress=progress, log_every=log_every,
                            callback=callback)

  def _run_per_world(self, ctrl0, *, maxiter, ftol, progress, log_every, callback=None):
    t0 = time.perf_counter()
    problem = self.problem
    problem.refresh_constants()
    self.start(ctrl0)
    W = problem.nworld
    lower = problem.ctrl_lo_np.reshape(W, -1).astype(np.float64)
    upper = problem.ctrl_hi_np.reshape(W, -1).astype(np.float64)
    opt = BatchedLBFGS(lower, upper, maxcor=self.options["maxcor"], maxiter=maxiter, ftol=ftol,
                       gtol=self.options["gtol"])
    trial = opt.start(ctrl0.numpy().astype(np.float64).reshape(W, -1))
    history, nit = [], 0
    with optim.progress_bar(maxiter, self.method, progress) as bar:
      for _ in range(20 * maxiter + 1):  # evaluations, as scipy's maxfun
        trial = opt.tell(*self._evaluate_at(trial))
        new = int(opt.nit.max()) > nit  # an iteration of the furthest world: a history row, a check
        if not history or new:
          history.append(opt.f.copy())  # each world's accepted cost
        nit = int(opt.nit.max())
        if new and (nit % log_every == 0 or opt.all_done):
          bar.set_postfix_str(f"best {np.nanmin(opt.f):.4g}  median {np.nanmedian(opt.f):.4g}  "
                              f"done {int(opt.ndone)}/{W}", refresh=False)
          bar.update(nit - bar.n)
          if optim.stop_requested(callback, optim.Iterate(nit, self.read_best(), read_x=self.read_best_ctrl)):
            break
        if opt.all_done:
          break
    reasons = sorted(set(opt.reason))
    message = (f"L-BFGS per world: {int(opt.success.sum())} of {W} worlds converged; "
               + "; ".join(f"{r} ({int((opt.reason == r).sum())})" for r in reasons))
    return self.finish(nit, opt.success.copy(), t0, maxiter, message, history=np.array(history))

  def _run_shared(self, ctrl0, *, maxiter, ftol, progress, log_every, callback=None):
    from scipy.optimize import Bounds, minimize

    t0 = time.perf_counter()
    problem = self.problem
    problem.refresh_constants()
    self.start(ctrl0)
    x0 = ctrl0.numpy().astype(np.float64).ravel()
    last = {}
    history = []

    def fun(x):
      cost, grad = self._evaluate_at(x)
      last["x"], last["cost"] = x.copy(), cost
      last["best"] = np.fmin(last.get("best", cost), cost)  # as `record` keeps it on the device
      return float(cost.sum()), grad.ravel()

    bar = optim.progress_bar(maxiter, self.method, progress)

    def on_iteration(xk):
      if not np.array_equal(xk, last.get("x")):
        fun(xk)
      history.append(last["cost"])
      if len(history) % log_every == 0:
        cost = last["cost"]
        bar.set_postfix_str(f"best {np.nanmin(cost):.4g}  median {np.nanmedian(cost):.4g}", refresh=False)
        iterate = optim.Iterate(len(history) - 1, last["best"].copy(), read_x=self.read_best_ctrl)
        if optim.stop_requested(callback, iterate):
          raise StopIteration  # scipy >= 1.11 ends the minimization and returns its result
      bar.update(1)

    try:
      fun(x0)
      history.append(last["cost"])
      res = minimize(fun, x0, jac=True, method="L-BFGS-B",
                     bounds=Bounds(problem.ctrl_lo_np.ravel(), problem.ctrl_hi_np.ravel()), callback=on_iteration,
                     options={"maxiter": maxiter, "ftol": ftol, "gtol": self.options["gtol"],
                              "maxcor": self.options["maxcor"], "maxfun": 20 * maxiter})
    finally:
      bar.close()
    return self.finish(len(history) - 1, np.full(problem.nworld, bool(res.success)), t0, maxiter,
                       f"L-BFGS-B: {res.message}", history=np.array(history))
