"""L-BFGS for many independent problems at once: each world its own curvature pairs and line search.

scipy's L-BFGS-B, given every world's controls stacked, solves one problem: its curvature pairs
mix the worlds and its line search takes one step length for all of them, so one world on a float32
plateau, or far from its minimum, stops or slows the others (tutorial 8's push at 4 worlds stopped
after 4-7 iterations). Worlds are independent, so `BatchedLBFGS` runs one L-BFGS per world, in
numpy over all worlds together, and asks for one evaluation of every world's cost and gradient at
a time (one rollout and backward pass for all): a world in its line search sends a trial point, a
world that accepted one sends the first trial of its next iteration, a finished world its own point.

Per world, per iteration:
  - direction: the two-loop recursion over the last `maxcor` pairs `(s, y)` with `s^T y > 0`,
    scaled by `s^T y / y^T y` of the newest, on the free variables (not at a bound the gradient
    pushes against); steepest descent where it is not a descent direction (and the pairs dropped);
  - step: backtracking along the projected path `clip(x + a d, lower, upper)` from `a = 1`
    (without pairs: `1 / |d|`, L-BFGS-B's first step) until the Armijo condition
    `f(x_a) <= f(x) + c1 g^T (x_a - x)` holds, each retry at the minimizer of the quadratic
    through `f(x)`, its slope and `f(x_a)`, kept within [0.1, 0.5] of the last step;
  - stop: the projected gradient's largest entry at most `gtol`, or a relative decrease
    `(f_old - f) / max(|f_old|, |f|, 1)` at most `ftol` (scipy's test) on `ftol_iters` (2) accepted
    iterations in a row, or `maxls` failed retries. One tiny decrease is no convergence on a rough
    float32 cost, where a backtracked step can land on a plateau far from the minimum: with scipy's
    single test, tutorial 2's cart-pole (4 worlds, 150 iterations) stopped one world at cost 0.45;
    with two in a row every world ends at 0.12-0.16 (the stacked scipy search: 0.12-0.18), and
    tutorial 8's push at 4 worlds ends at the same or lower costs (0.02-0.83 cm in C).

This is a projected L-BFGS, not L-BFGS-B's Cauchy point and subspace minimization: the same
iterates away from the bounds, and on them the free-variable direction projected back.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BatchedLBFGS"]

SEARCHING, DONE = 0, 1


class BatchedLBFGS:
  """The state of one L-BFGS per world (see the module docstring).

  Use: `trial = opt.start(x0)`, then repeatedly `trial = opt.tell(f, g)` with the cost `(W,)` and
  gradient `(W, n)` at `trial` until `opt.all_done`. `opt.x`, `opt.f` hold each world's accepted
  iterate; `opt.nit` `(W,)` its iterations; `opt.reason` `(W,)` why it stopped.

  Args:
    lower, upper: `(W, n)` or `(n,)` bounds (may be infinite).
    maxcor: curvature pairs kept per world.
    maxiter: iterations per world.
    ftol, gtol: stopping tests (scipy's meaning; `ftol` must hold on `ftol_iters` accepted iterations
      in a row, see the module docstring).
    maxls: backtracking retries per iteration before a world stops.
    c1: Armijo's constant.
    ftol_iters: accepted iterations in a row whose relative decrease is at most `ftol` before a
      world stops (1: scipy's test).
  """

  def __init__(self, lower, upper, *, maxcor: int = 10, maxiter: int = 100, ftol: float = 2.2e-9,
               gtol: float = 1e-5, maxls: int = 20, c1: float = 1e-4, ftol_iters: int = 2):
    if not isinstance(ftol_iters, (int, np.integer)) or ftol_iters < 1:
      raise ValueError(f"ftol_iters must be a positive integer, got {ftol_iters!r}")
    self.lower, self.upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    self.m, self.maxiter, self.ftol, self.gtol, self.maxls, self.c1 = int(maxcor), int(maxiter), ftol, gtol, \
      int(maxls), c1
    self.ftol_iters = int(ftol_iters)

  # -- public -----------------------------------------------------------------------------------------

  def start(self, x0: np.ndarray) -> np.ndarray:
    """Begins at `x0` `(W, n)`; returns the first points to evaluate (`x0`, projected)."""
    x0 = np.clip(np.asarray(x0, np.float64), self.lower, self.upper)
    W, n = x0.shape
    self.x, self.trial = x0.copy(), x0.copy()
    self.f, self.g = np.full(W, np.inf), np.zeros((W, n))
    self.S, self.Y = np.zeros((W, self.m, n)), np.zeros((W, self.m, n))  # newest pair first
    self.npair = np.zeros(W, int)
    self.d, self.alpha, self.slope = np.zeros((W, n)), np.zeros(W), np.zeros(W)
    self.retries = np.zeros(W, int)
    self.nsmall = np.zeros(W, int)
    self.nit = np.zeros(W, int)
    self.state = np.full(W, SEARCHING)
    self.reason = np.array(["running"] * W, dtype=object)
    self.success = np.zeros(W, bool)
    self._first = True
    return self.trial.copy()

  @property
  def ndone(self) -> int:
    """Worlds that stopped."""
    return int((self.state == DONE).sum())

  @property
  def all_done(self) -> bool:
    return self.ndone == len(self.state)

  def tell(self, f: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The cost `(W,)` and gradient `(W, n)` at the last points returned; returns the next ones."""
    f, g = np.asarray(f, np.float64), np.asarray(g, np.float64)
    if self._first:
      self._first = False
      self.f, self.g = f.copy(), g.copy()
      bad = ~np.isfinite(f) | ~np.isfinite(g).all(axis=1)
      self._finish(bad, "the cost or its gradient is not finite at the start", False)
      self._finish(~bad & (self._pgnorm(np.arange(len(f))) <= self.gtol), "projected gradient below gtol", True)
      self._begin_iteration(self.state == SEARCHING)
      return self.trial.copy()
    run = self.state == SEARCHING
    step = self.trial - self.x
    dec = f <= self.f + self.c1 * np.einsum("wn,wn->w", self.g, step)
    ok = run & np.isfinite(f) & np.isfinite(g).all(axis=1) & dec
    if ok.any():
      self._accept(ok, f, g)
    retry = run & ~ok
    if retry.any():
      self._backtrack(retry, f)
    self.trial[self.state == DONE] = self.x[self.state == DONE]
    return self.trial.copy()

  # -- steps ------------------------------------------------------------------------------------------

  def _pgnorm(self, w: np.ndarray) -> np.ndarray:
    """`(len(w),)` largest entry of the projected gradient of worlds `w` (scipy's `pgtol` measure)."""
    x, g = self.x[w], self.g[w]
    pg = np.clip(x - g, self._lo(w), self._hi(w)) - x
    return np.abs(pg).max(axis=1, initial=0.0)

  def _free(self, w: np.ndarray) -> np.ndarray:
    """`(len(w), n)` 1 where a variable is free to move along descent (not held by a bound)."""
    x, g = self.x[w], self.g[w]
    held = ((x <= self._lo(w)) & (g > 0)) | ((x >= self._hi(w)) & (g < 0))
    return (~held).astype(np.float64)

  def _direction(self, w: np.ndarray) -> np.ndarray:
    """The two-loop recursion for worlds `w` (indices) on their free variables."""
    free = self._free(w)
    q = self.g[w] * free
    S, Y, k = self.S[w] * free[:, None], self.Y[w] * free[:, None], self.npair[w]
    sy = np.einsum("wmn,wmn->wm", S, Y)
    valid = (np.arange(self.m)[None, :] < k[:, None]) & (sy > 0)
    rho = np.where(valid, 1.0 / np.where(valid, sy, 1.0), 0.0)
    a = np.zeros((len(w), self.m))
    for i in range(self.m):  # newest first
      a[:, i] = rho[:, i] * np.einsum("wn,wn->w", S[:, i], q)
      q -= a[:, i, None] * Y[:, i]
    yy = np.einsum("wn,wn->w", Y[:, 0], Y[:, 0])
    gamma = np.where(valid[:, 0] & (yy > 0), sy[:, 0] / np.where(yy > 0, yy, 1.0), 1.0)
    r = gamma[:, None] * q
    for i in reversed(range(self.m)):
      b = rho[:, i] * np.einsum("wn,wn->w", Y[:, i], r)
      r += S[:, i] * (a[:, i] - b)[:, None]
    return -r * free

  def _begin_iteration(self, w_mask: np.ndarray) -> None:
    """A new direction and first trial for the worlds in `w_mask`."""
    w = np.flatnonzero(w_mask)
    if not len(w):
      return
    d = self._direction(w)
    slope = np.einsum("wn,wn->w", self.g[w], d)
    steep = ~(slope < 0)  # no descent (round-off in the pairs): steepest descent, pairs dropped
    if steep.any():
      d[steep] = -self.g[w[steep]] * self._free(w[steep])
      self.npair[w[steep]] = 0
      slope[steep] = np.einsum("wn,wn->w", self.g[w[steep]], d[steep])
    self.d[w], self.slope[w] = d, slope
    # the first step of a world without pairs: 1 / |d| (L-BFGS-B's), else the quasi-Newton step
    dnorm = np.linalg.norm(d, axis=1)
    self.alpha[w] = np.where(self.npair[w] == 0, 1.0 / np.maximum(dnorm, 1e-300), 1.0)
    self.alpha[w] = np.minimum(self.alpha[w], 1.0)
    self.retries[w] = 0
    self.trial[w] = np.clip(self.x[w] + self.alpha[w, None] * d, self._lo(w), self._hi(w))

  def _lo(self, w):
    return np.broadcast_to(self.lower, self.x.shape)[w]

  def _hi(self, w):
    return np.broadcast_to(self.upper, self.x.shape)[w]

  def _accept(self, ok: np.ndarray, f: np.ndarray, g: np.ndarray) -> None:
    w = np.flatnonzero(ok)
    s, y = self.trial[w] - self.x[w], g[w] - self.g[w]
    sy = np.einsum("wn,wn->w", s, y)
    keep = sy > 1e-10 * np.einsum("wn,wn->w", y, y)  # curvature: else the pair is skipped
    kw = w[keep]
    self.S[kw] = np.concatenate([s[keep, None], self.S[kw, :-1]], axis=1)
    self.Y[kw] = np.concatenate([y[keep, None], self.Y[kw, :-1]], axis=1)
    self.npair[kw] = np.minimum(self.npair[kw] + 1, self.m)
    f_old = self.f[w].copy()
    self.x[w], self.f[w], self.g[w] = self.trial[w], f[w], g[w]
    self.nit[w] += 1
    small = np.zeros(len(self.f), bool)
    small[w] = (f_old - f[w]) <= self.ftol * np.maximum(np.maximum(np.abs(f_old), np.abs(f[w])), 1.0)
    self.nsmall[w] = np.where(small[w], self.nsmall[w] + 1, 0)
    self._finish(small & (self.nsmall >= self.ftol_iters), "relative reduction of the cost below ftol", True)
    grad = np.zeros(len(self.f), bool)
    grad[w] = self._pgnorm(w) <= self.gtol
    self._finish(grad & (self.state == SEARCHING), "projected gradient below gtol", True)
    last = np.zeros(len(self.f), bool)
    last[w] = self.nit[w] >= self.maxiter
    self._finish(last & (self.state == SEARCHING), "maximum number of iterations reached", False)
    self._begin_iteration(ok & (self.state == SEARCHING))

  def _backtrack(self, retry: np.ndarray, f: np.ndarray) -> None:
    w = np.flatnonzero(retry)
    self.retries[w] += 1
    out = self.retries[w] > self.maxls
    if out.any():
      stop = np.zeros(len(self.f), bool)
      stop[w[out]] = True
      # a failed search with pairs starts again from steepest descent once; without, the world stops
      again = stop & (self.npair > 0)
      self.npair[again] = 0
      self._begin_iteration(again)
      self._finish(stop & ~again, "the line search found no lower cost (float32 resolution, or a kink)", False)
      w = w[~out]
    if not len(w):
      return
    a, ft = self.alpha[w], f[w]
    # minimizer of the quadratic through f(x) (slope along d) and f at the trial, within [0.1, 0.5] a
    curv = ft - self.f[w] - self.slope[w] * a
    quad = np.where(np.isfinite(ft) & (curv > 0), -self.slope[w] * a * a / (2.0 * np.where(curv > 0, curv, 1.0)),
                    0.5 * a)
    self.alpha[w] = np.clip(quad, 0.1 * a, 0.5 * a)
    self.trial[w] = np.clip(self.x[w] + self.alpha[w, None] * self.d[w], self._lo(w), self._hi(w))

  def _finish(self, mask: np.ndarray, reason: str, success: bool) -> None:
    mask = mask & (self.state == SEARCHING)
    self.state[mask] = DONE
    self.reason[mask] = reason
    self.success[mask] = success
