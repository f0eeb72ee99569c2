"""scipy's L-BFGS-B on all worlds' controls stacked, one graph replay per function evaluation."""

from __future__ import annotations

import time

import numpy as np
import warp as wp

from .. import optim
from .solver import Solver


class LBFGSSolver(Solver):
  """scipy's L-BFGS-B on all worlds' controls stacked (their costs summed).

  Worlds are independent, so the summed cost's gradient is each world's own gradient; the line
  search and curvature pairs are shared, which suits small problems. An evaluation is one graph
  replay between one upload of the controls and one read of cost and gradient; per world, the best
  controls evaluated are returned.
  """

  method = "lbfgs"
  defaults = {"maxcor": 10, "gtol": 1e-8}
  default_maxiter = 500

  def __init__(self, problem, options, capacity, capture):
    super().__init__(problem, options, capacity, capture)
    # gradient then cost per world, so one read brings both
    self.packed = wp.zeros(problem.ctrl.size + problem.nworld, dtype=float, device=problem.scene.device)

  def stages(self):
    return [(self.evaluate, 1)]

  def evaluate(self) -> None:
    problem = self.problem
    trajectory, tape = self.gradient()
    self.record(self.cost, problem.ctrl, trajectory)
    nctrl = problem.ctrl.size
    wp.copy(self.packed, problem.ctrl.grad.flatten(), count=nctrl)
    wp.copy(self.packed, self.cost, dest_offset=nctrl, count=problem.nworld)
    tape.zero()

  def run(self, ctrl0, *, maxiter, ftol, progress, log_every, callback=None):
    from scipy.optimize import Bounds, minimize

    t0 = time.perf_counter()
    problem = self.problem
    problem.refresh_constants()
    self.start(ctrl0)
    shape, nctrl = problem.ctrl.shape, problem.ctrl.size
    x0 = ctrl0.numpy().astype(np.float64).ravel()
    last = {}
    history = []

    def fun(x):
      problem.ctrl.assign(x.reshape(shape).astype(np.float32))
      self.step()
      packed = self.packed.numpy().astype(np.float64)  # the one host read of the evaluation
      cost = packed[nctrl:]
      last["x"], last["cost"] = x.copy(), cost
      last["best"] = np.fmin(last.get("best", cost), cost)  # as `record` keeps it on the device
      return float(cost.sum()), packed[:nctrl]

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
