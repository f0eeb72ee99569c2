"""Dense per-world linear algebra of the iLQR gains: Cholesky factor and solve, and the box QP.

Each function works on one world's block `a[world, :n, :n]` of a per-world scratch array (one thread
per world; `n` is the number of controls, a handful).
"""

from __future__ import annotations

import warp as wp

BOXQP_ITERATIONS = 20  # projected Newton steps
BOXQP_LINESEARCH = 12  # Armijo backtracking steps of each


@wp.func
def cholesky(world: int, n: int, a: wp.array3d[float], factor: wp.array3d[float]) -> int:
  """Lower Cholesky factor of `a[world, :n, :n]` into `factor`; returns 0 if `a` is not positive definite."""
  ok = int(1)
  for j in range(n):
    diag = float(a[world, j, j])
    for p in range(j):
      diag -= factor[world, j, p] * factor[world, j, p]
    if not (diag > 0.0) or not wp.isfinite(diag):
      ok = 0
      diag = 1.0
    d = wp.sqrt(diag)
    factor[world, j, j] = d
    for i in range(j + 1, n):
      t = float(a[world, i, j])
      for p in range(j):
        t -= factor[world, i, p] * factor[world, j, p]
      factor[world, i, j] = t / d
  return ok


@wp.func
def cholesky_solve(world: int, n: int, col0: int, col1: int, factor: wp.array3d[float], rhs: wp.array3d[float]):
  """Solves `L L^T x = rhs[world, :n, c]` in place for columns `col0 <= c < col1`."""
  for c in range(col0, col1):
    for i in range(n):
      s = float(rhs[world, i, c])
      for p in range(i):
        s -= factor[world, i, p] * rhs[world, p, c]
      rhs[world, i, c] = s / factor[world, i, i]
    for back in range(n):
      i = n - 1 - back
      s = float(rhs[world, i, c])
      for p in range(i + 1, n):
        s -= factor[world, p, i] * rhs[world, p, c]
      rhs[world, i, c] = s / factor[world, i, i]


@wp.func
def _qp_value(world: int, n: int, hessian: wp.array3d[float], linear: wp.array2d[float], x: wp.array3d[float],
              col: int) -> float:
  """`x^T hessian x / 2 + linear^T x` for `x = x[world, :n, col]`."""
  value = float(0.0)
  for i in range(n):
    hx = float(0.0)
    for j in range(n):
      hx += hessian[world, i, j] * x[world, j, col]
    value += x[world, i, col] * (0.5 * hx + linear[world, i])
  return value


@wp.func
def _free_factor(world: int, n: int, hessian: wp.array3d[float], clamped: wp.array2d[int],
                 free_block: wp.array3d[float], factor: wp.array3d[float]):
  """Cholesky factor of `hessian` with clamped rows and columns replaced by the identity."""
  for i in range(n):
    for j in range(n):
      held = clamped[world, i] != 0 or clamped[world, j] != 0
      free_block[world, i, j] = wp.where(held, wp.where(i == j, 1.0, 0.0), hessian[world, i, j])
  cholesky(world, n, free_block, factor)  # a principal block of a positive definite matrix, bordered by the identity


@wp.func
def _clamp_state(world: int, step: int, n: int, hessian: wp.array3d[float], linear: wp.array2d[float],
                 ctrl: wp.array3d[float], ctrl_lo: wp.array3d[float], ctrl_hi: wp.array3d[float],
                 columns: wp.array3d[float], clamped: wp.array2d[int]) -> int:
  """Gradient of the QP at `x = columns[:, 0]` into `columns[:, 1]`, and the controls held at a
  bound with the gradient pushing outward into `clamped`; returns the number of free controls."""
  nfree = int(0)
  for i in range(n):
    g = float(linear[world, i])
    for j in range(n):
      g += hessian[world, i, j] * columns[world, j, 0]
    columns[world, i, 1] = g
    x = columns[world, i, 0]
    held = (x <= ctrl_lo[world, step, i] - ctrl[world, step, i] and g > 0.0) or (
      x >= ctrl_hi[world, step, i] - ctrl[world, step, i] and g < 0.0)
    clamped[world, i] = int(held)
    nfree += 1 - int(held)
  return nfree


@wp.func
def box_qp(
  world: int, step: int, n: int,
  hessian: wp.array3d[float],  # (nworld, nu, nu) positive definite
  linear: wp.array2d[float],  # (nworld, nu)
  ctrl: wp.array3d[float],  # (nworld, nstep, nu) nominal controls
  ctrl_lo: wp.array3d[float],
  ctrl_hi: wp.array3d[float],
  free_block: wp.array3d[float],  # (nworld, nu, nu) scratch
  factor: wp.array3d[float],  # (nworld, nu, nu) out: Cholesky factor of hessian's free block
  columns: wp.array3d[float],  # (nworld, nu, 4) scratch columns: x, gradient, direction, trial
  clamped: wp.array2d[int],  # (nworld, nu) out: controls held at a bound at the solution
  x_out: wp.array3d[float],  # (nworld, nstep, nu) in: warm start, out: the solution
):
  """min `x^T hessian x / 2 + linear^T x` s.t. `ctrl_lo <= ctrl + x <= ctrl_hi` at `step`: projected Newton
  (Tassa et al. 2014, Algorithm 3). Leaves in `factor` the factor of `hessian`'s free block."""
  for i in range(n):
    columns[world, i, 0] = wp.clamp(x_out[world, step, i], ctrl_lo[world, step, i] - ctrl[world, step, i],
                                    ctrl_hi[world, step, i] - ctrl[world, step, i])
  value = _qp_value(world, n, hessian, linear, columns, 0)
  for _iteration in range(BOXQP_ITERATIONS):
    if _clamp_state(world, step, n, hessian, linear, ctrl, ctrl_lo, ctrl_hi, columns, clamped) == 0:
      break
    # Newton step on the free controls, the clamped ones held
    _free_factor(world, n, hessian, clamped, free_block, factor)
    for i in range(n):
      if clamped[world, i] != 0:
        columns[world, i, 2] = columns[world, i, 0]
      else:
        t = float(-linear[world, i])
        for j in range(n):
          if clamped[world, j] != 0:
            t -= hessian[world, i, j] * columns[world, j, 0]
        columns[world, i, 2] = t
    cholesky_solve(world, n, 2, 3, factor, columns)
    slope = float(0.0)  # direction . gradient
    for i in range(n):
      columns[world, i, 2] = columns[world, i, 2] - columns[world, i, 0]
      slope += columns[world, i, 2] * columns[world, i, 1]
    if slope >= -1.0e-12 * wp.max(wp.abs(value), 1.0e-12):
      break
    # projected Armijo search along the direction
    length = float(1.0)
    accepted = int(0)
    trial = float(0.0)
    for _backtrack in range(BOXQP_LINESEARCH):
      for i in range(n):
        columns[world, i, 3] = wp.clamp(columns[world, i, 0] + length * columns[world, i, 2],
                                        ctrl_lo[world, step, i] - ctrl[world, step, i],
                                        ctrl_hi[world, step, i] - ctrl[world, step, i])
      trial = _qp_value(world, n, hessian, linear, columns, 3)
      if (trial - value) / (length * slope) >= 0.1:
        accepted = 1
        break
      length *= 0.6
    if accepted == 0:
      break
    for i in range(n):
      columns[world, i, 0] = columns[world, i, 3]
    improvement = value - trial
    value = trial
    if improvement < 1.0e-8 * wp.max(wp.abs(value), 1.0e-12):
      break
  # clamped set and free-block factor at the solution, for the feedback gains
  _clamp_state(world, step, n, hessian, linear, ctrl, ctrl_lo, ctrl_hi, columns, clamped)
  for i in range(n):
    x_out[world, step, i] = columns[world, i, 0]
  _free_factor(world, n, hessian, clamped, free_block, factor)
