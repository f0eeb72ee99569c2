"""`BatchedLBFGS`, one L-BFGS per world, against scipy's L-BFGS-B on each world alone (numpy only)."""

import numpy as np
import pytest
from scipy.optimize import minimize, rosen, rosen_der

from diffsim.trajopt.batched_lbfgs import BatchedLBFGS


def _solve(fun, grad, x0, lower, upper, **kw):
  opt = BatchedLBFGS(lower, upper, **kw)
  trial, nev = opt.start(x0), 0
  while not opt.all_done and nev < 10000:
    trial = opt.tell(fun(trial), grad(trial))
    nev += 1
  return opt, nev


def test_rosenbrock_per_world_matches_scipy():
  """Bounded 3-d Rosenbrock (one minimum, at 1) from 12 starts: every world reaches it, in a number
  of iterations comparable to scipy's L-BFGS-B from the same start, and all worlds share each
  evaluation."""
  rng = np.random.default_rng(1)
  W, n = 12, 3
  x0 = rng.uniform(-1.2, 1.2, (W, n))
  lower, upper = np.full(n, -1.5), np.full(n, 1.5)
  fun = lambda X: np.array([rosen(x) for x in X])
  grad = lambda X: np.array([rosen_der(x) for x in X])
  opt, nev = _solve(fun, grad, x0, lower, upper, maxiter=500, ftol=1e-15, gtol=1e-9)
  assert opt.success.all(), opt.reason
  np.testing.assert_allclose(opt.x, 1.0, atol=1e-4)
  for w in range(W):
    ref = minimize(rosen, x0[w], jac=rosen_der, method="L-BFGS-B", bounds=list(zip(lower, upper)),
                   options={"ftol": 1e-15, "gtol": 1e-9, "maxiter": 500})
    assert ref.fun < 1e-8
    assert opt.nit[w] <= 2 * ref.nit + 10, (w, opt.nit[w], ref.nit)
  assert nev <= 3 * opt.nit.max()  # evaluations shared: a few per iteration of the slowest world


def test_bounds_active_at_the_solution():
  """A quadratic whose minimum lies outside the box: each world ends on its bound (the KKT point),
  with the free coordinates at their unconstrained minimum."""
  W, n = 4, 5
  c = np.linspace(-3, 3, W * n).reshape(W, n)
  fun = lambda X: 0.5 * ((X - c) ** 2 * np.arange(1, n + 1)).sum(axis=1)
  grad = lambda X: (X - c) * np.arange(1, n + 1)
  opt, _ = _solve(fun, grad, np.zeros((W, n)), -1.0, 1.0, maxiter=100, ftol=0.0, gtol=1e-10)
  assert opt.success.all(), opt.reason
  np.testing.assert_allclose(opt.x, np.clip(c, -1, 1), atol=1e-8)


def test_a_stalled_world_stops_alone():
  """World 0's cost is flat: it stops at once, and the others still converge (a shared line search
  would have stopped with it)."""
  W, n = 3, 4
  c = np.arange(W * n, dtype=float).reshape(W, n) / 4
  fun = lambda X: np.where(np.arange(W) == 0, 1.0, ((X - c) ** 2).sum(axis=1))
  grad = lambda X: np.where((np.arange(W) == 0)[:, None], 0.0, 2 * (X - c))
  opt, _ = _solve(fun, grad, np.zeros((W, n)), -np.inf, np.inf, maxiter=50, ftol=0.0, gtol=1e-9)
  assert opt.reason[0] == "projected gradient below gtol" and opt.nit[0] == 0
  np.testing.assert_allclose(opt.x[1:], c[1:], atol=1e-7)


def test_ftol_must_hold_on_consecutive_iterations():
  """`ftol_iters`: a world stops on the relative-decrease test only after that many accepted
  iterations in a row pass it (ftol=1 passes every decrease of a positive cost: the count is exact)."""
  W, n = 3, 5
  scale = np.arange(1, n + 1, dtype=float) ** 2
  fun = lambda X: 0.5 * ((X - 3.0) ** 2 * scale).sum(axis=1)
  grad = lambda X: (X - 3.0) * scale
  for k in (1, 2, 3):
    opt, _ = _solve(fun, grad, np.zeros((W, n)), -np.inf, np.inf, maxiter=50, ftol=1.0, gtol=1e-12, ftol_iters=k)
    assert (opt.nit == k).all() and set(opt.reason) == {"relative reduction of the cost below ftol"}, (k, opt.nit)
  with pytest.raises(ValueError, match="ftol_iters must be a positive integer"):
    BatchedLBFGS(-np.inf, np.inf, ftol_iters=0)


def test_non_finite_start_is_reported():
  opt = BatchedLBFGS(-np.inf, np.inf)
  opt.start(np.zeros((2, 3)))
  opt.tell(np.array([np.nan, 1.0]), np.ones((2, 3)))
  assert opt.state[0] == 1 and not opt.success[0] and "not finite" in opt.reason[0]


@pytest.mark.parametrize("line_search", ["nearest", 3])
def test_bad_line_search_option(cartpole, line_search):
  import diffsim
  from diffsim.losses import QposCost

  problem = diffsim.TrajectoryProblem(cartpole, QposCost(np.zeros(cartpole.nq), terminal=1.0), horizon=10)
  with pytest.raises(ValueError, match="lbfgs line_search must be one of"):
    diffsim.optimize_trajectory(problem, "lbfgs", options={"line_search": line_search})
