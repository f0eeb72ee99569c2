"""Adam on the parameters, with the cost's gradient from one `tape.backward()` sweep per iteration.

For problems with very many parameters, where the dense `nparam x nparam` normal equations and the
`(nworld, nsample, nsignal, nparam)` Jacobian of LM become the bottleneck. It needs far more
iterations than LM, and keeps initial states at their measured or estimated values. The step
Jacobians are finite differences either way (a lane per state coordinate and parameter; controls
are data and get none), so a rollout's cost grows with the parameter count in both. The tape's
rollout and backward pass are captured as one graph on the first iteration and replayed after.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from .. import optim
from .lm import Report
from .problem import Problem
from .result import SolverOutcome

OPTIONS = {"lr": 0.05}  # step, relative to each parameter's initial magnitude


def adam(prob: Problem, theta0: np.ndarray, lower: np.ndarray, upper: np.ndarray, *, maxiter: int, lr: float,
         report: Report) -> SolverOutcome:
  """Adam from `theta0` `(nstart, nparam)` within `[lower, upper]` `(nparam,)`, keeping each start's
  best iterate.

  First-order methods have no sharp stopping test: a start counts as converged when its best cost
  changed by less than 1e-3 (relative) over the last fifth of the iterations.
  """
  nstart = theta0.shape[0]
  dev = prob.scene.device
  scale = np.where(np.abs(theta0[0]) > 0, np.abs(theta0[0]), 1.0)
  # a strictly positive floor for quantities bounded at 0 (a zero mass makes the model singular)
  lo = np.where(np.isfinite(lower), lower + 1e-6 * scale, lower)
  arr = lambda a: wp.array(np.asarray(a, dtype=np.float32), dtype=float, device=dev)
  theta = prob.buffers.theta
  # eps 1e-12, not Adam's usual 1e-8: near the minimum of noise-free data the scaled gradients fall
  # below 1e-8, and a larger eps would shrink the steps there
  solver = optim.Adam(theta, arr(np.maximum(lo, -3e38)), arr(np.minimum(upper, 3e38)), scale=arr(scale), lr=lr,
                      eps=1e-12)
  theta.assign(theta0.astype(np.float32))
  best_f = np.full(nstart, np.inf)
  best_x = theta0.copy()
  hist = {"fun": [], "x": [], "lambda": []}
  before, nit, interrupted = None, 0, False
  for it in range(maxiter + 1):
    x = theta.numpy().astype(np.float64)
    f = prob.gradient()
    if it == 0:
      if not np.isfinite(f).any():
        raise FloatingPointError("every initial guess diverges (NaN/Inf state): check the model and the data")
      before = prob.samples(0)
    better = f < best_f
    best_f[better], best_x[better] = f[better], x[better]
    hist["fun"].append(f.copy())
    hist["x"].append(x.copy())
    hist["lambda"].append(np.full(nstart, lr))
    nit = it
    if it > 0 and report(it, float(f.min()), x[int(np.argmin(f))].copy()):
      interrupted = True
      break
    if it == maxiter:
      break
    solver.step(prob.buffers.theta_grad)
  if interrupted:
    done = np.zeros(nstart, bool)
    reason = np.array([f"stopped by the callback after {nit} Adam iterations"] * nstart, dtype=object)
  else:
    fun = np.array(hist["fun"])
    tail = max(1, (maxiter + 1) // 5)
    ref = np.min(fun[:-tail], axis=0) if fun.shape[0] > tail else fun[0]
    done = np.isfinite(best_f) & ((ref - best_f) <= 1e-3 * np.abs(best_f))
    reason = np.array([f"completed {maxiter} Adam iterations" + ("" if d else " (cost still decreasing)")
                       for d in done], dtype=object)
  return SolverOutcome(x=best_x, fun=best_f, history=hist, nit=nit, success=done, message=reason,
                       initial_signals=before, interrupted=interrupted)
