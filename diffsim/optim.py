"""What diffsim's optimizers share: one result shape, one callback and progress convention, one Adam.

Trajectory optimization (`diffsim.optimize_trajectory`) and system identification
(`diffsim.sysid.identify`) speak as scipy's minimizers do:

  - arguments `method`, `maxiter`, `callback`, `options` (solver settings such as Adam's `lr`), and
    `progress` (a tqdm bar, on by default);
  - a result with `x`, `fun`, `nit`, `success`, `message`, `history`, `time` (and `method`);
  - `callback(iterate)` with an `Iterate` (`nit`, `fun`, `x`) at every host check; returning True
    (or raising `StopIteration`, as scipy allows) stops the solver, which returns what it has.

`Adam` is the first-order update of both: bias-corrected moments on the device, the step counter on
the device too (a captured graph replays the current step), the result projected onto box bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import warp as wp

__all__ = ["OptimizeResult", "Iterate", "Adam", "adam_step", "progress_bar", "check_maxiter", "check_callback",
           "stop_requested"]


@dataclass(kw_only=True)
class OptimizeResult:
  """Fields every diffsim optimizer returns (scipy's `OptimizeResult` names).

  Attributes:
    x: the solution (its type and shape are the solver's: controls, or parameters by name).
    fun: its cost.
    nit: iterations run.
    success: whether the solver's convergence test held.
    message: why it stopped.
    history: cost (and more, per solver) at each iteration; row 0 is the initial guess.
    time: wall time, s.
    method: the solver's name.
  """

  x: Any
  fun: Any
  nit: int
  success: Any
  message: str
  history: Any
  time: float = 0.0
  method: str = ""


class Iterate:
  """What a `callback` receives at a host check: `nit`, `fun` and `x` (read on first access only,
  so a callback that does not look at `x` costs no transfer)."""

  def __init__(self, nit: int, fun, x=None, *, read_x: Callable[[], Any] | None = None):
    self.nit = int(nit)
    self.fun = fun
    self._x = x
    self._read_x = read_x

  @property
  def x(self):
    if self._x is None and self._read_x is not None:
      self._x = self._read_x()
    return self._x

  def __repr__(self) -> str:
    return f"Iterate(nit={self.nit}, fun={self.fun!r})"


def check_maxiter(maxiter, *, allow_zero: bool = False) -> int:
  """`maxiter` as an int, or a ValueError that says what is allowed."""
  low = 0 if allow_zero else 1
  if isinstance(maxiter, bool) or not isinstance(maxiter, (int, np.integer)) or maxiter < low:
    raise ValueError(f"maxiter must be an integer >= {low}, got {maxiter!r}")
  return int(maxiter)


def check_callback(callback) -> None:
  if callback is not None and not callable(callback):
    raise TypeError(f"callback must be callable, got {type(callback).__name__}")


def stop_requested(callback, iterate: Iterate) -> bool:
  """Calls `callback(iterate)`; True when it asks the solver to stop (returns True, or raises
  `StopIteration`)."""
  if callback is None:
    return False
  try:
    return bool(callback(iterate))
  except StopIteration:
    return True


def progress_bar(total: int, desc: str, enabled: bool):
  """The tqdm bar of a solver: cleared when done, redrawn at most twice a second."""
  from tqdm.auto import tqdm

  return tqdm(total=total, desc=desc, disable=not enabled, leave=False, dynamic_ncols=True, mininterval=0.5)


@wp.kernel
def adam_step(
  # In:
  lr: float,
  beta1: float,
  beta2: float,
  eps: float,
  step: wp.array[int],  # (1,) steps taken before this one
  grad: wp.array[float],  # (n,) d cost / d x
  scale: wp.array[float],  # (n or m,) typical magnitude, read as scale[i % m]: Adam works on x / scale
  lower: wp.array[float],  # (n or m,) read as lower[i % m]
  upper: wp.array[float],  # (n or m,)
  # Out:
  m_out: wp.array[float],  # (n,) first moment
  v_out: wp.array[float],  # (n,) second moment
  x_out: wp.array[float],  # (n,) updated in place
):
  i = wp.tid()
  g = grad[i]
  if not wp.isfinite(g):  # a diverged rollout's gradient: skip the coordinate this step
    g = 0.0
  s = scale[i % scale.shape[0]]
  g = g * s
  m = beta1 * m_out[i] + (1.0 - beta1) * g
  v = beta2 * v_out[i] + (1.0 - beta2) * g * g
  m_out[i] = m
  v_out[i] = v
  t = float(step[0] + 1)
  mhat = m / (1.0 - wp.pow(beta1, t))
  vhat = v / (1.0 - wp.pow(beta2, t))
  x = x_out[i] - lr * s * mhat / (wp.sqrt(vhat) + eps)
  x_out[i] = wp.clamp(x, lower[i % lower.shape[0]], upper[i % upper.shape[0]])


@wp.kernel
def _increment(counter: wp.array[int]):
  counter[0] += 1


class Adam:
  """Adam on a device array `x`, projected onto `[lower, upper]`; launches only (capturable).

  Args:
    x: the variables, any shape, contiguous float32; updated in place by `step`.
    lower, upper: bounds, the shape of `x`, or `(m,)` repeating along its flattened last axis
      (per-parameter bounds of `(nstart, nparam)` variables).
    scale: typical magnitude of each variable (`None`: 1), shaped like the bounds; `lr` is relative
      to it.
    lr: step size (in units of `scale`). betas, eps: Adam's moment decay rates and denominator floor.
  """

  def __init__(self, x: wp.array, lower: wp.array, upper: wp.array, *, scale: wp.array | None = None,
               lr: float = 0.05, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
    self.x = x
    dev = x.device
    self.lower, self.upper = lower.flatten(), upper.flatten()
    self.scale = scale.flatten() if scale is not None else wp.ones(1, dtype=float, device=dev)
    self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
    self.m = wp.zeros(x.size, dtype=float, device=dev)
    self.v = wp.zeros(x.size, dtype=float, device=dev)
    self.t = wp.zeros(1, dtype=int, device=dev)

  def reset(self) -> None:
    """Forgets the moments and the step count."""
    self.m.zero_()
    self.v.zero_()
    self.t.zero_()

  def step(self, grad: wp.array) -> None:
    """One update of `x` from `grad` (the shape of `x`)."""
    wp.launch(adam_step, dim=self.x.size, device=self.x.device,
              inputs=[self.lr, self.betas[0], self.betas[1], self.eps, self.t, grad.flatten(), self.scale,
                      self.lower, self.upper], outputs=[self.m, self.v, self.x.flatten()])
    wp.launch(_increment, dim=1, device=self.x.device, inputs=[self.t])
