"""Hand-written, forward-only pieces of the backward pass: the mass matrix and its Cholesky solves,
the damped acceleration `a_e = (M + h B)^-1 M a` (6 x 6 solves on implicitfast's free bodies), the
integrator's vector-Jacobian product and the constraint adjoint `(M + J^T D J) lambda = -J^T D J mu`.
"""

from __future__ import annotations

import warp as wp

from mujoco_warp._src.types import mat66, vec6, vec10

from ..joints import FREE, HINGE, SLIDE
from .dynamics import _free_gyro
from .spatial import _inert_vec


@wp.kernel(enable_backward=False)
def _mass_matrix(
  # Model:
  body_subtreenum: wp.array[int],
  dof_bodyid: wp.array[int],
  dof_parentid: wp.array[int],
  dof_armature: wp.array2d[float],
  h_damp: float,
  # In:
  bdiag: wp.array2d[float],  # (nworld, nv) the implicitly integrated velocity derivative
  cinert: wp.array2d[vec10],
  cdof: wp.array2d[wp.spatial_vector],
  crb: wp.array2d[vec10],  # (nworld, nbody) scratch
  M_pairs: wp.array3d[float],  # (nworld, nv, nv) the tendons' armature J^T J, lower triangle (`_rank_ones`)
  B_pairs: wp.array3d[float],  # (nworld, nv, nv) h B's dense part, lower triangle (`_rank_ones`)
  nM: int,  # whether to add M_pairs
  nB: int,  # whether to add B_pairs
  # Out:
  M_out: wp.array3d[float],  # (nworld, nv, nv) M, dense
  H_out: wp.array3d[float],  # (nworld, nv, nv) Cholesky factor of M + h_damp diag(bdiag), lower
):
  """Composite-rigid-body mass matrix (MJWarp's `crb`) plus the tendons' `armature J^T J` on the
  tree's ancestor pairs (`mj_tendonArmature`; `M_pairs`), dense, and the factor of the matrix the
  Euler (or implicitfast) step solves with, `M + h B` (`B`'s diagonal `bdiag` plus its dense part
  `B_pairs`)."""
  w = wp.tid()
  nbody = body_subtreenum.shape[0]
  nv = dof_bodyid.shape[0]
  for b in range(nbody):
    c = cinert[w, b]
    if b > 0:
      for j in range(b + 1, b + body_subtreenum[b]):
        c += cinert[w, j]
    crb[w, b] = c
  for i in range(nv):
    for j in range(nv):
      M_out[w, i, j] = 0.0
  for i in range(nv):
    buf = _inert_vec(crb[w, dof_bodyid[i]], cdof[w, i])
    M_out[w, i, i] = dof_armature[w % dof_armature.shape[0], i] + wp.dot(cdof[w, i], buf)
    j = dof_parentid[i]
    while j >= 0:
      v = wp.dot(cdof[w, j], buf)
      M_out[w, i, j] = v
      M_out[w, j, i] = v
      j = dof_parentid[j]
  if nM != 0:
    # plain reads and writes, not `+=`: one thread per world owns M (deterministic mode's atomics)
    for i in range(nv):
      M_out[w, i, i] = M_out[w, i, i] + M_pairs[w, i, i]
      for j in range(i):
        M_out[w, i, j] = M_out[w, i, j] + M_pairs[w, i, j]
        M_out[w, j, i] = M_out[w, j, i] + M_pairs[w, i, j]
  for i in range(nv):
    for j in range(i + 1):
      v = M_out[w, i, j]
      if i == j:
        v += h_damp * bdiag[w, i]
      H_out[w, i, j] = v
  if nB != 0:
    for i in range(nv):
      for j in range(i + 1):
        H_out[w, i, j] = H_out[w, i, j] + B_pairs[w, i, j]
  _cholesky(H_out, w, nv)


@wp.kernel(enable_backward=False)
def _rank_ones(
  # Model:
  dof_parentid: wp.array[int],
  coef: wp.array2d[float],  # (nbatch or nworld, nrow)
  scale: float,
  # In:
  rows: wp.array3d[float],  # (nworld, nrow, nv)
  # Out:
  out: wp.array3d[float],  # (nworld, nv, nv) += scale coef r r^T on (i, ancestor-or-self j), lower
):
  """`scale coef_r r r^T` for each row `r` (a tendon's Jacobian with its armature or implicitfast's
  damping, a velocity-gain actuator's moment) on the pairs of dofs where one is the other's ancestor,
  where MJWarp's M and `qDeriv` have entries (`M_elemid`). One thread per world (no atomics)."""
  w = wp.tid()
  for r in range(rows.shape[1]):
    c = scale * coef[w % coef.shape[0], r]
    if c != 0.0:
      for i in range(rows.shape[2]):
        ci = c * rows[w, r, i]
        if ci != 0.0:
          out[w, i, i] = out[w, i, i] + ci * rows[w, r, i]
          j = dof_parentid[i]
          while j >= 0:
            out[w, i, j] = out[w, i, j] + ci * rows[w, r, j]
            j = dof_parentid[j]


@wp.func
def _cholesky(A: wp.array3d[float], w: int, n: int):
  """In place: the lower triangle of world `w`'s symmetric positive definite `A` becomes its
  Cholesky factor `L` (`A = L L^T`)."""
  for i in range(n):
    for j in range(i + 1):
      s = A[w, i, j]
      for k in range(j):
        s -= A[w, i, k] * A[w, j, k]
      if i == j:
        A[w, i, i] = wp.sqrt(wp.max(s, 1e-30))
      else:
        A[w, i, j] = s / A[w, j, j]


@wp.func
def _chol_solve(L: wp.array3d[float], w: int, x: wp.array2d[float]):
  """`x <- (L L^T)^-1 x` in place."""
  n = x.shape[1]
  for i in range(n):
    s = x[w, i]
    for k in range(i):
      s -= L[w, i, k] * x[w, k]
    x[w, i] = s / L[w, i, i]
  for ii in range(n):
    i = n - 1 - ii
    s = x[w, i]
    for k in range(i + 1, n):
      s -= L[w, k, i] * x[w, k]
    x[w, i] = s / L[w, i, i]


@wp.kernel(enable_backward=False)
def _damped_acceleration(
  # In:
  M: wp.array3d[float],
  L: wp.array3d[float],
  qacc: wp.array2d[float],  # the constraint solver's acceleration
  # Out:
  qacc_e_out: wp.array2d[float],  # (M + h B)^-1 M qacc, the acceleration the Euler step integrates
):
  w = wp.tid()
  nv = qacc.shape[1]
  for i in range(nv):
    s = float(0.0)
    for j in range(nv):
      s += M[w, i, j] * qacc[w, j]
    qacc_e_out[w, i] = s
  _chol_solve(L, w, qacc_e_out)


@wp.func
def _solve6(A: mat66, b: vec6) -> vec6:
  """`A^-1 b` by Gaussian elimination with partial pivoting."""
  for k in range(6):
    p = k
    for i in range(k + 1, 6):
      if wp.abs(A[i, k]) > wp.abs(A[p, k]):
        p = i
    if p != k:
      for j in range(6):
        t = A[k, j]
        A[k, j] = A[p, j]
        A[p, j] = t
      t = b[k]
      b[k] = b[p]
      b[p] = t
    for i in range(k + 1, 6):
      f = A[i, k] / A[k, k]
      for j in range(k, 6):
        A[i, j] = A[i, j] - f * A[k, j]
      b[i] = b[i] - f * b[k]
  x = vec6(0.0)
  for ii in range(6):
    i = 5 - ii
    s = b[i]
    for j in range(i + 1, 6):
      s -= A[i, j] * x[j]
    x[i] = s / A[i, i]
  return x


@wp.kernel(enable_backward=False)
def _free_body_acceleration(
  # Model:
  body_dofadr: wp.array[int],
  free_body: wp.array[int],
  h_damp: float,
  # In:
  bdiag: wp.array2d[float],
  M: wp.array3d[float],
  crb: wp.array2d[vec10],  # (nworld, nfree)
  xpos: wp.array2d[wp.vec3],
  xmat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  qvel: wp.array2d[float],
  qacc: wp.array2d[float],
  # Out:
  A_out: wp.array2d[mat66],  # (nworld, nfree) M + h B of each free body's rows (not symmetric)
  qacc_e_out: wp.array2d[float],  # the free bodies' rows of `_damped_acceleration`'s result
):
  """implicitfast's free bodies (trees of one free joint, decoupled in M): `a_e = A^-1 M a` with
  `A = M + h (damping + d qfrc_bias / d qvel)`, MJWarp's `implicit_free_body`."""
  w, f = wp.tid()
  b = free_body[f]
  d = body_dofadr[b]
  A = mat66(0.0)
  rhs = vec6(0.0)
  for r in range(6):
    for c in range(6):
      A[r, c] = M[w, d + r, d + c]
      rhs[r] = rhs[r] + M[w, d + r, d + c] * qacc[w, d + c]
    A[r, r] = A[r, r] + h_damp * bdiag[w, d + r]
  s = com[w, b] - xpos[w, b]
  omega = wp.vec3(qvel[w, d + 3], qvel[w, d + 4], qvel[w, d + 5])
  for c in range(3):
    e = wp.vec3(0.0)
    e[c] = 1.0
    g = _free_gyro(crb[w, f], xmat[w, b], s, omega, e)
    for r in range(6):
      A[r, 3 + c] = A[r, 3 + c] + h_damp * g[r]
  A_out[w, f] = A
  x = _solve6(A, rhs)
  for r in range(6):
    qacc_e_out[w, d + r] = x[r]


@wp.kernel(enable_backward=False)
def _free_body_mu(
  # Model:
  body_dofadr: wp.array[int],
  free_body: wp.array[int],
  opt_timestep: float,
  # In:
  A: wp.array2d[mat66],
  lam_v: wp.array2d[float],
  # Out:
  mu_out: wp.array2d[float],  # the free bodies' rows of `_integrator_vjp`'s `mu`: `A^-T h lam_v`
):
  w, f = wp.tid()
  d = body_dofadr[free_body[f]]
  rhs = vec6(0.0)
  for r in range(6):
    rhs[r] = opt_timestep * lam_v[w, d + r]
  x = _solve6(wp.transpose(A[w, f]), rhs)
  for r in range(6):
    mu_out[w, d + r] = x[r]


@wp.func
def _rotation(phi: wp.vec3) -> wp.mat33:
  """Rotation matrix of the rotation vector `phi`."""
  theta = wp.length(phi)
  K = wp.skew(phi)
  if theta < 1e-6:
    return wp.identity(3, float) + K + 0.5 * K * K
  return wp.identity(3, float) + (wp.sin(theta) / theta) * K + ((1.0 - wp.cos(theta)) / (theta * theta)) * K * K


@wp.func
def _right_jacobian_t(phi: wp.vec3) -> wp.mat33:
  """Transpose of the right Jacobian of the exponential map: `exp(phi + d) = exp(phi) exp(Jr d)`."""
  theta = wp.length(phi)
  K = wp.skew(phi)
  a = 0.5
  b = 1.0 / 6.0
  if theta > 1e-4:
    a = (1.0 - wp.cos(theta)) / (theta * theta)
    b = (theta - wp.sin(theta)) / (theta * theta * theta)
  return wp.identity(3, float) + a * K + b * K * K


@wp.kernel(enable_backward=False)
def _integrator_vjp(
  # Model:
  opt_timestep: float,
  jnt_type: wp.array[int],
  jnt_dofadr: wp.array[int],
  # In:
  k: int,
  qvel: wp.array3d[float],  # (nworld, nstep + 1, nv) trajectory velocities
  lam: wp.array3d[float],  # (nworld, nstep + 1, nx) adjoint of state k + 1 (tangent space)
  L: wp.array3d[float],
  # Out:
  mu_out: wp.array2d[float],  # (nworld, nv) (M + h B)^-1 a_bar: the seed of the dynamics
  lam_q_out: wp.array2d[float],  # (nworld, nv) direct adjoint of qpos k (tangent)
  lam_v_out: wp.array2d[float],  # (nworld, nv) direct adjoint of qvel k
):
  """VJP of `v' = v + h a_e, q' = q (+) h v'` at step `k`, then the damped solve for `mu`."""
  w = wp.tid()
  nv = qvel.shape[2]
  h = opt_timestep
  for j in range(jnt_type.shape[0]):
    typ = jnt_type[j]
    d = jnt_dofadr[j]
    if typ == HINGE or typ == SLIDE:
      lam_q_out[w, d] = lam[w, k + 1, d]
      lam_v_out[w, d] = lam[w, k + 1, nv + d] + h * lam[w, k + 1, d]
    else:
      r = d
      if typ == FREE:
        for i in range(3):
          lam_q_out[w, d + i] = lam[w, k + 1, d + i]
          lam_v_out[w, d + i] = lam[w, k + 1, nv + d + i] + h * lam[w, k + 1, d + i]
        r = d + 3
      phi = h * wp.vec3(qvel[w, k + 1, r], qvel[w, k + 1, r + 1], qvel[w, k + 1, r + 2])
      lq = wp.vec3(lam[w, k + 1, r], lam[w, k + 1, r + 1], lam[w, k + 1, r + 2])
      lv = wp.vec3(lam[w, k + 1, nv + r], lam[w, k + 1, nv + r + 1], lam[w, k + 1, nv + r + 2])
      gq = _rotation(phi) * lq
      gv = lv + h * (_right_jacobian_t(phi) * lq)
      for i in range(3):
        lam_q_out[w, r + i] = gq[i]
        lam_v_out[w, r + i] = gv[i]
  for i in range(nv):
    mu_out[w, i] = h * lam_v_out[w, i]
  _chol_solve(L, w, mu_out)


@wp.kernel(enable_backward=False)
def _constraint_factor(
  # In:
  M: wp.array3d[float],
  jtdj: wp.array3d[float],  # (nworld, nv, nv) J^T D J of the quadratic rows
  # Out:
  L_out: wp.array3d[float],  # (nworld, nv, nv) Cholesky factor of H = M + J^T D J
):
  """The implicit function theorem's matrix `H = M + J^T D J`, factored once per replayed step: every
  reverse sweep of the step (`_constraint_adjoint`, one per Jacobian row) solves with it."""
  w = wp.tid()
  nv = M.shape[1]
  for i in range(nv):
    for j in range(i + 1):
      L_out[w, i, j] = M[w, i, j] + jtdj[w, i, j]
  _cholesky(L_out, w, nv)


@wp.kernel(enable_backward=False)
def _constraint_adjoint(
  # In:
  L: wp.array3d[float],  # (nworld, nv, nv) `_constraint_factor`'s factor of H = M + J^T D J
  jtdj: wp.array3d[float],  # (nworld, nv, nv) J^T D J of the quadratic rows
  mu: wp.array2d[float],
  a_bar: wp.array2d[float],  # (nworld, nv) the acceleration sensors' own adjoint of `a` (0 without them)
  # Out:
  lam_out: wp.array2d[float],  # (nworld, nv) H^-1 (a_bar - J^T D J mu): the solver acceleration's adjoint
):
  """Implicit function theorem through the constraint solve: the Euler step's `a_e` depends on the
  solver's `a` through the constraint forces (`-J^T D J mu`), the acceleration sensors read it
  (`a_bar`), and `H lambda` is their sum."""
  w = wp.tid()
  nv = mu.shape[1]
  for i in range(nv):
    s = a_bar[w, i]
    for j in range(nv):
      s -= jtdj[w, i, j] * mu[w, j]
    lam_out[w, i] = s
  _chol_solve(L, w, lam_out)
