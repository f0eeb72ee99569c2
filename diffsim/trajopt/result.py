"""`TrajectoryResult`: what `optimize_trajectory` returns (`diffsim.optim.OptimizeResult`'s fields and more)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import warp as wp

from ..optim import OptimizeResult
from ..rollout import Trajectory


@dataclass(kw_only=True)
class TrajectoryResult(OptimizeResult):
  """What a trajectory solver returns, in scipy's style.

  Attributes:
    x: `(nworld, nstep, nu)` float32 optimized controls (the best found per world).
    fun: `(nworld,)` cost of `x` per world.
    nit: iterations run.
    success: `(nworld,)` bool, the world met the convergence test before `maxiter` (L-BFGS:
      scipy's `success` for the stacked problem, the same in every world, as they share its line
      search); False where the world's best cost fell by less than `min_progress` of its initial
      cost (it did not leave its start).
    zero_gradient: `(nworld,)` bool, True where the world did not leave its start and the cost's
      gradient in the controls was zero there (a pusher that does not touch the object yet): no
      first-order step can move it; start from a contact-reaching warm start (`diffsim.trajopt`).
    reasons: `(nworld,)` tuple of str, why each world ended as it did: "converged", "not
      converged", "no progress from the start" or "zero gradient at the start, nothing moved".
    message: summary of the termination.
    history: `(nit + 1, nworld)` cost per iteration per world (row 0: the initial guess; Adam and
      L-BFGS: cost of the iterate; iLQR: cost after the iteration's line search).
    time: wall time, s.
    method: solver name.
    trajectory: `Trajectory` of `x` (device arrays owned by the result).
    ctrl: `wp.array3d[float]` `(nworld, nstep, nu)`: `x` on the device, for warm starts.
  """

  trajectory: Trajectory
  ctrl: wp.array = field(default=None, repr=False)
  zero_gradient: np.ndarray = field(default=None, repr=False)
  reasons: tuple = field(default=(), repr=False)

  def __repr__(self) -> str:
    return (f"TrajectoryResult(method={self.method!r}, nit={self.nit}, fun: median {np.median(self.fun):.4g} "
            f"best {np.min(self.fun):.4g}, success {int(self.success.sum())}/{self.success.size}, "
            f"message={self.message!r})")
