"""iLQR's backward pass: the Riccati recursion with regularized, box-constrained gains, one thread per world.

With the step Jacobians `[A B]` of the nominal rollout and the cost's local model (`cost.py`), the
value function `V(x) ~ vx^T dx + dx^T vxx dx / 2` is carried from the final state backward. At
each step the Q function's expansion

  qx = gx + A^T vx,   qu = gu + B^T vx,   qxx = lxx + A^T vxx A,   quu = luu + B^T vxx B,   qux = lux + B^T vxx A

gives the feedforward `kff` (a box QP on the controls' bounds) and the feedback `kfb` on the
controls left free (Tassa, Mansard, Todorov 2014); the value update uses the unregularized Q
(Tassa, Erez, Todorov 2012, eq. 11). A `CtrlRateCost` augments the state with the previous control
(`x~ = [x, u_prev]`, `A~ = [[A, 0], [0, 0]]`, `B~ = [B; I]`, `nxa = nx + nu`).
"""

from __future__ import annotations

import warp as wp

from .boxqp import box_qp, cholesky, cholesky_solve
from .cost import CostChannels, add_curvature, add_terminal_control_curvature


@wp.struct
class Value:
  """The value function's expansion at the step being solved, per world."""

  vx: wp.array2d[float]  # (nworld, nxa)
  vxx: wp.array3d[float]  # (nworld, nxa, nxa)


@wp.struct
class QTerms:
  """The Q function's expansion at the step being solved, per world."""

  qx: wp.array2d[float]  # (nworld, nxa)
  qu: wp.array2d[float]  # (nworld, nu)
  qxx: wp.array3d[float]  # (nworld, nxa, nxa)
  quu: wp.array3d[float]  # (nworld, nu, nu)
  qux: wp.array3d[float]  # (nworld, nu, nxa)
  vxx_a: wp.array3d[float]  # (nworld, nxa, nxa) vxx A~
  vxx_b: wp.array3d[float]  # (nworld, nxa, nu) vxx B~


@wp.struct
class GainScratch:
  """Scratch of the gains, per world."""

  quu_reg: wp.array3d[float]  # (nworld, nu, nu) regularized quu
  free_block: wp.array3d[float]  # (nworld, nu, nu) its free block, clamped rows set to the identity
  factor: wp.array3d[float]  # (nworld, nu, nu) Cholesky factor
  gains: wp.array3d[float]  # (nworld, nu, 1 + nxa) [kff kfb], solved in place
  quu_gains: wp.array3d[float]  # (nworld, nu, 1 + nxa) quu [kff kfb]
  qp_columns: wp.array3d[float]  # (nworld, nu, 4) the box QP's columns
  clamped: wp.array2d[int]  # (nworld, nu) controls held at a bound


def backward_scratch(nworld: int, nu: int, nxa: int, device) -> tuple[Value, QTerms, GainScratch]:
  """The backward pass's per-world scratch, allocated once."""

  def zeros(*shape, dtype=float):
    return wp.zeros(shape, dtype=dtype, device=device)

  value = Value()
  value.vx, value.vxx = zeros(nworld, nxa), zeros(nworld, nxa, nxa)
  qterms = QTerms()
  qterms.qx, qterms.qu = zeros(nworld, nxa), zeros(nworld, nu)
  qterms.qxx, qterms.quu, qterms.qux = zeros(nworld, nxa, nxa), zeros(nworld, nu, nu), zeros(nworld, nu, nxa)
  qterms.vxx_a, qterms.vxx_b = zeros(nworld, nxa, nxa), zeros(nworld, nxa, nu)
  scratch = GainScratch()
  scratch.quu_reg, scratch.free_block, scratch.factor = (zeros(nworld, nu, nu) for _ in range(3))
  scratch.gains, scratch.quu_gains = zeros(nworld, nu, 1 + nxa), zeros(nworld, nu, 1 + nxa)
  scratch.qp_columns, scratch.clamped = zeros(nworld, nu, 4), zeros(nworld, nu, dtype=int)
  return value, qterms, scratch


@wp.func
def _terminal_value(world: int, nx: int, nxa: int, gx: wp.array3d[float], sjac: wp.array4d[float],
                    channels: CostChannels, value: Value, qterms: QTerms):
  """`V` at the final state: the terminal cost's gradient and curvature."""
  nstep = gx.shape[1] - 1
  for a in range(nxa):
    value.vx[world, a] = 0.0
    if a < nx:
      value.vx[world, a] = gx[world, nstep, a]
    for b in range(nxa):
      value.vxx[world, a, b] = 0.0
  add_curvature(world, nstep, 1, nx, channels, sjac, value.vxx, qterms.quu, qterms.qux)


@wp.func
def _q_terms(world: int, step: int, nx: int, nxa: int, jac: wp.array4d[float], sjac: wp.array4d[float],
             gx: wp.array3d[float], gu: wp.array3d[float], channels: CostChannels, value: Value, qterms: QTerms):
  """Q's expansion at `step` from the value at `step + 1`, the step Jacobians and the running cost."""
  nu = gu.shape[2]
  nstep = gu.shape[1]
  aug = nxa > nx
  vx, vxx = value.vx, value.vxx
  for i in range(nxa):
    for j in range(nxa):
      s = float(0.0)
      if j < nx:
        for p in range(nx):
          s += vxx[world, i, p] * jac[world, step, p, j]
      qterms.vxx_a[world, i, j] = s
    for j in range(nu):
      s = float(0.0)
      for p in range(nx):
        s += vxx[world, i, p] * jac[world, step, p, nx + j]
      if aug:
        s += vxx[world, i, nx + j]
      qterms.vxx_b[world, i, j] = s
  for a in range(nxa):
    s = float(0.0)
    if a < nx:
      s = gx[world, step, a]
      for p in range(nx):
        s += jac[world, step, p, a] * vx[world, p]
    qterms.qx[world, a] = s
    for b in range(nxa):
      s = float(0.0)
      if a < nx:
        for p in range(nx):
          s += jac[world, step, p, a] * qterms.vxx_a[world, p, b]
      qterms.qxx[world, a, b] = s
  for i in range(nu):
    s = float(gu[world, step, i])
    for p in range(nx):
      s += jac[world, step, p, nx + i] * vx[world, p]
    if aug:
      s += vx[world, nx + i]
    qterms.qu[world, i] = s
    for j in range(nu):
      s = float(0.0)
      for p in range(nx):
        s += jac[world, step, p, nx + i] * qterms.vxx_b[world, p, j]
      if aug:
        s += qterms.vxx_b[world, nx + i, j]
      qterms.quu[world, i, j] = s
    for b in range(nxa):
      s = float(0.0)
      for p in range(nx):
        s += jac[world, step, p, nx + i] * qterms.vxx_a[world, p, b]
      if aug:
        s += qterms.vxx_a[world, nx + i, b]
      qterms.qux[world, i, b] = s
  add_curvature(world, step, 0, nx, channels, sjac, qterms.qxx, qterms.quu, qterms.qux)
  if step == nstep - 1:
    add_terminal_control_curvature(world, nx, channels, jac, sjac, qterms.quu, qterms.qux)


@wp.func
def _regularize(world: int, nu: int, mu: float, qterms: QTerms, scratch: GainScratch) -> int:
  """`quu_reg = quu + mu (|diag quu| + 1e-3 max) + floor` and its Cholesky factor; 0 if not positive definite."""
  qmax = float(0.0)
  for i in range(nu):
    qmax = wp.max(qmax, wp.abs(qterms.quu[world, i, i]))
  for i in range(nu):
    for j in range(nu):
      scratch.quu_reg[world, i, j] = qterms.quu[world, i, j]
    # Marquardt scaling, plus a floor so controls without effect (a singular quu) stay solvable
    scratch.quu_reg[world, i, i] = (qterms.quu[world, i, i] + mu * (wp.abs(qterms.quu[world, i, i]) + 1.0e-3 * qmax)
                                    + 1.0e-5 * qmax + 1.0e-30)
  return cholesky(world, nu, scratch.quu_reg, scratch.factor)


@wp.func
def _gains(world: int, step: int, nu: int, nxa: int, ctrl: wp.array3d[float], ctrl_lo: wp.array3d[float],
           ctrl_hi: wp.array3d[float], qterms: QTerms, scratch: GainScratch, kff_out: wp.array3d[float],
           kfb_out: wp.array4d[float]):
  """The feedforward solves the box QP; the feedback acts on the controls left free at its solution."""
  box_qp(world, step, nu, scratch.quu_reg, qterms.qu, ctrl, ctrl_lo, ctrl_hi, scratch.free_block, scratch.factor,
         scratch.qp_columns, scratch.clamped, kff_out)
  for i in range(nu):
    scratch.gains[world, i, 0] = kff_out[world, step, i]
    for b in range(nxa):
      scratch.gains[world, i, 1 + b] = wp.where(scratch.clamped[world, i] != 0, 0.0, -qterms.qux[world, i, b])
  cholesky_solve(world, nu, 1, 1 + nxa, scratch.factor, scratch.gains)  # factor: of the free block, from box_qp
  for i in range(nu):
    for b in range(nxa):
      kfb_out[world, step, i, b] = scratch.gains[world, i, 1 + b]


@wp.func
def _value_update(world: int, step: int, nu: int, nxa: int, qterms: QTerms, scratch: GainScratch,
                  kff: wp.array3d[float], kfb: wp.array4d[float], value: Value, dv: float) -> float:
  """`V` at `step` with the unregularized Q; returns `dv` plus this step's predicted cost change."""
  for i in range(nu):
    for c in range(1 + nxa):
      s = float(0.0)
      for j in range(nu):
        s += qterms.quu[world, i, j] * scratch.gains[world, j, c]
      scratch.quu_gains[world, i, c] = s
  for i in range(nu):
    dv += kff[world, step, i] * (qterms.qu[world, i] + 0.5 * scratch.quu_gains[world, i, 0])
  for a in range(nxa):
    s = float(qterms.qx[world, a])
    for i in range(nu):
      fa = kfb[world, step, i, a]
      s += fa * (scratch.quu_gains[world, i, 0] + qterms.qu[world, i]) + qterms.qux[world, i, a] * kff[world, step, i]
    value.vx[world, a] = s
    for b in range(a, nxa):
      s = 0.5 * (qterms.qxx[world, a, b] + qterms.qxx[world, b, a])
      for i in range(nu):
        fa = kfb[world, step, i, a]
        fb = kfb[world, step, i, b]
        s += fa * (scratch.quu_gains[world, i, 1 + b] + qterms.qux[world, i, b]) + qterms.qux[world, i, a] * fb
      value.vxx[world, a, b] = s
      value.vxx[world, b, a] = s
  return dv


@wp.kernel
def backward_pass(
  # Model:
  nx: int,
  nxa: int,  # nx, plus nu when a CtrlRateCost makes the previous control part of the state
  # In:
  jac: wp.array4d[float],  # (nworld, nstep, nx, nz) step Jacobians [A B]
  sjac: wp.array4d[float],  # (nworld, nstep + 1, ns, nz) sensor Jacobians [C D]
  ctrl: wp.array3d[float],  # (nworld, nstep, nu) nominal controls
  ctrl_lo: wp.array3d[float],
  ctrl_hi: wp.array3d[float],
  gx: wp.array3d[float],  # (nworld, nstep + 1, nx) cost gradient
  gu: wp.array3d[float],  # (nworld, nstep, nu)
  channels: CostChannels,
  mu: wp.array[float],  # (nworld,) Levenberg-Marquardt regularization, relative to diag(quu)
  # Scratch (per world):
  value: Value,
  qterms: QTerms,
  scratch: GainScratch,
  # Out:
  kff_out: wp.array3d[float],  # (nworld, nstep, nu) feedforward
  kfb_out: wp.array4d[float],  # (nworld, nstep, nu, nxa) feedback
  dv_out: wp.array[float],  # (nworld,) predicted cost change of the full step (-inf: failed)
  fail_out: wp.array[int],  # (nworld,) 1: quu not positive definite; gains unusable
):
  world = wp.tid()
  nstep = kff_out.shape[1]
  nu = kff_out.shape[2]
  _terminal_value(world, nx, nxa, gx, sjac, channels, value, qterms)
  fail = int(0)
  dv = float(0.0)
  for back in range(nstep):
    step = nstep - 1 - back
    _q_terms(world, step, nx, nxa, jac, sjac, gx, gu, channels, value, qterms)
    if _regularize(world, nu, mu[world], qterms, scratch) == 0:
      fail = 1
      break
    _gains(world, step, nu, nxa, ctrl, ctrl_lo, ctrl_hi, qterms, scratch, kff_out, kfb_out)
    dv = _value_update(world, step, nu, nxa, qterms, scratch, kff_out, kfb_out, value, dv)
  fail_out[world] = fail
  if fail != 0:
    dv = -wp.inf
  dv_out[world] = dv
