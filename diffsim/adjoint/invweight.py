"""The inertial parameters' path through the constraint rows' softness: `body_invweight0` and
`dof_invweight0`, which MuJoCo's `mj_setConst` (MJWarp's `set_const`) derives from the mass matrix at
`qpos0`, and which every contact, limit, friction and equality row reads.

With `A = M0^-1` at `qpos0`, `body_invweight0[b] = (tr(Jp_b A Jp_b^T), tr(Jr_b A Jr_b^T)) / 3` (`Jp_b`,
`Jr_b` the body's Jacobian at its centre of mass; one part stands in for the other where it is below
mjMINVAL) and `dof_invweight0[d] = A[d, d]` (averaged over a ball joint's dofs and over each half of a
free joint's). With `G` the adjoints the step replays accumulated into those arrays, the loss changes
by `tr(S dA) = -<W, dM0>`, `S = sum_b (cp_b Jp_b^T Jp_b + cr_b Jr_b^T Jr_b) + diag(c_d)` (the weights
`G / 3`, regrouped where averaged or substituted), `W = A S A`. `<W, M0> = sum_b <J_b W J_b^T, I_b> +
sum_d W_dd armature_d` is replayed differentiably at `qpos0` from the bodies' inertias (kinematics,
subtree centres of mass, `cinert`, `cdof`) and its reverse pass, seeded -1, adds the inertial
parameters' share to their adjoints.
"""

from __future__ import annotations

import mujoco
import warp as wp

from mujoco_warp._src.types import vec10

from .kinematics import record_frames
from .program import _Program
from .solve import _mass_matrix
from .spatial import _inert_vec

__all__ = ["InvWeightAdjoint"]

_FREE, _BALL = int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL)
_MINVAL = float(mujoco.mjMINVAL)


@wp.kernel(enable_backward=False)
def _fill_qpos0(
  qpos0: wp.array2d[float],  # (rows, nq) the model's
  q_out: wp.array2d[float],  # (nworld, nq)
):
  w, i = wp.tid()
  q_out[w, i] = qpos0[w % qpos0.shape[0], i]


@wp.kernel(enable_backward=False)
def _inverse(
  L: wp.array3d[float],  # (nworld, nv, nv) Cholesky factor of M0, lower
  A_out: wp.array3d[float],  # (nworld, nv, nv) M0^-1
):
  """Column `j` of `M0^-1` by two triangular solves."""
  w, j = wp.tid()
  nv = L.shape[1]
  for i in range(nv):
    s = float(0.0)
    if i == j:
      s = 1.0
    for k in range(i):
      s -= L[w, i, k] * A_out[w, k, j]
    A_out[w, i, j] = s / L[w, i, i]
  for ii in range(nv):
    i = nv - 1 - ii
    s = A_out[w, i, j]
    for k in range(i + 1, nv):
      s -= L[w, k, i] * A_out[w, k, j]
    A_out[w, i, j] = s / L[w, i, i]


@wp.func
def _jac_dots(ci: wp.spatial_vector, cj: wp.spatial_vector, offset: wp.vec3) -> wp.vec2:
  """`(Jp_i . Jp_j, Jr_i . Jr_j)` for dofs `i`, `j` (motion axes `ci`, `cj`) of a point at `offset`
  from the root's centre of mass."""
  ai = wp.spatial_top(ci)
  aj = wp.spatial_top(cj)
  pi = wp.spatial_bottom(ci) + wp.cross(ai, offset)
  pj = wp.spatial_bottom(cj) + wp.cross(aj, offset)
  return wp.vec2(wp.dot(pi, pj), wp.dot(ai, aj))


@wp.kernel(enable_backward=False)
def _body_weights(
  # Model:
  body_rootid: wp.array[int],
  body_weldid: wp.array[int],
  body_isdofancestor: wp.array2d[int],
  # In:
  G: wp.array2d[wp.vec2],  # (rows, nbody) adjoint of body_invweight0
  xipos: wp.array2d[wp.vec3],
  com: wp.array2d[wp.vec3],
  cdof: wp.array2d[wp.spatial_vector],
  A: wp.array3d[float],  # (nworld, nv, nv) M0^-1
  # Out:
  S_out: wp.array3d[float],  # (nworld, nv, nv) += cp Jp^T Jp + cr Jr^T Jr
):
  w, b = wp.tid()
  if b == 0 or body_weldid[b] == 0:
    return
  g = G[w % G.shape[0], b]
  if g[0] == 0.0 and g[1] == 0.0:
    return
  nv = A.shape[1]
  offset = xipos[w, b] - com[w, body_rootid[b]]
  trp = float(0.0)
  trr = float(0.0)
  for i in range(nv):
    for j in range(nv):
      if body_isdofancestor[b, i] != 0 and body_isdofancestor[b, j] != 0:
        d = _jac_dots(cdof[w, i], cdof[w, j], offset)
        trp += A[w, i, j] * d[0]
        trr += A[w, i, j] * d[1]
  cp = g[0] / 3.0
  cr = g[1] / 3.0
  # set_const's substitutions: one part stands in for the other where it is below mjMINVAL
  if trp / 3.0 < _MINVAL and trr / 3.0 > _MINVAL:
    cp = 0.0
    cr = (g[0] + g[1]) / 3.0
  elif trr / 3.0 < _MINVAL and trp / 3.0 > _MINVAL:
    cr = 0.0
    cp = (g[0] + g[1]) / 3.0
  for i in range(nv):
    for j in range(nv):
      if body_isdofancestor[b, i] != 0 and body_isdofancestor[b, j] != 0:
        d = _jac_dots(cdof[w, i], cdof[w, j], offset)
        wp.atomic_add(S_out, w, i, j, cp * d[0] + cr * d[1])


@wp.kernel(enable_backward=False)
def _dof_weights(
  # Model:
  dof_jntid: wp.array[int],
  jnt_type: wp.array[int],
  jnt_dofadr: wp.array[int],
  # In:
  G: wp.array2d[float],  # (rows, nv) adjoint of dof_invweight0
  # Out:
  S_out: wp.array3d[float],
):
  """`dof_invweight0[d]` is `A[d, d]`, or the mean over its joint's (ball) or half-joint's (free)
  diagonal: each diagonal entry gets its group's adjoints over the group's size."""
  w, d = wp.tid()
  row = w % G.shape[0]
  j = dof_jntid[d]
  typ = jnt_type[j]
  adr = jnt_dofadr[j]
  c = G[row, d]
  if typ == _BALL or typ == _FREE:
    first = adr
    if typ == _FREE and d >= adr + 3:
      first = adr + 3
    c = (G[row, first] + G[row, first + 1] + G[row, first + 2]) / 3.0
  wp.atomic_add(S_out, w, d, d, c)


@wp.kernel(enable_backward=False)
def _matmul(
  X: wp.array3d[float],  # (nworld, nv, nv)
  Y: wp.array3d[float],
  out: wp.array3d[float],  # X Y
):
  w, i, j = wp.tid()
  s = float(0.0)
  for k in range(X.shape[2]):
    s += X[w, i, k] * Y[w, k, j]
  out[w, i, j] = s


@wp.kernel
def _weighted_inertia(
  # In:
  body_dof: wp.array2d[int],  # (npair, 2) (body, dof moving it)
  body_isdofancestor: wp.array2d[int],
  W: wp.array3d[float],  # (nworld, nv, nv) fixed weights
  cinert: wp.array2d[vec10],
  cdof: wp.array2d[wp.spatial_vector],
  # Out (zeroed):
  E_out: wp.array[float],  # (nworld,) <W, M0> without armature
):
  """`sum_b sum_{i, j moving b} W_ij cdof_i . (I_b cdof_j)`, the bodies' share of `<W, M0>`."""
  w, p = wp.tid()
  b = body_dof[p, 0]
  i = body_dof[p, 1]
  ci = cdof[w, i]
  I = cinert[w, b]
  for j in range(cdof.shape[1]):
    if body_isdofancestor[b, j] != 0:
      wp.atomic_add(E_out, w, W[w, i, j] * wp.dot(ci, _inert_vec(I, cdof[w, j])))


@wp.kernel
def _weighted_armature(
  # Model:
  dof_armature: wp.array2d[float],
  # In:
  W: wp.array3d[float],
  # Out:
  E_out: wp.array[float],
):
  w, d = wp.tid()
  wp.atomic_add(E_out, w, W[w, d, d] * dof_armature[w % dof_armature.shape[0], d])


class InvWeightAdjoint:
  """Adds the inertial parameters' share through `body_invweight0` and `dof_invweight0` to their
  adjoints (see the module docstring). `G_body`, `G_dof` are the adjoints of the two arrays, which
  the step's program accumulates; `run()` after the last step's reverse pass."""

  def __init__(self, scene, P: _Program, body_dof: wp.array):
    s, mjm, m = scene, scene.mjm, scene.model
    dev, n, nv, nb = s.device, s.nworld, mjm.nv, mjm.nbody
    self.scene, self.body_dof = scene, body_dof
    self.G_body = P.grad(m.body_invweight0)
    self.G_dof = P.grad(m.dof_invweight0)
    Q = _Program(dev)
    for f in (m.body_mass, m.body_inertia, m.body_ipos, m.dof_armature):
      if id(f) in P.grads:  # the parameters' adjoints: shared with the step's program
        Q.grads[id(f)] = P.grads[id(f)]
    z = lambda shape, dtype=float: wp.zeros(shape, dtype=dtype, device=dev)
    self._inter = []

    def arr(shape, dtype=float):
      a = z(shape, dtype)
      self._inter.append(Q.grad(a))
      return a

    self.q0 = z((n, mjm.nq))
    frames, added = record_frames(Q, "q0", mjm, m, self.q0, arr)
    xipos, com, cinert, cdof = frames["xipos"], frames["com"], frames["cinert"], frames["cdof"]
    self.E = arr(n)
    self._accumulated = added + [self.E]
    self.W = z((n, nv, nv))
    Q.launch("q0", _weighted_inertia, (n, body_dof.shape[0]), [body_dof, m.body_isdofancestor, self.W, cinert, cdof],
             [self.E])
    Q.launch("q0", _weighted_armature, (n, nv), [m.dof_armature, self.W], [self.E])
    self.frames = (xipos, com, cinert, cdof)
    self.M, self.L, self.A, self.S, self.tmp = (z((n, nv, nv)) for _ in range(5))
    self.crb, self.zeros, self.no_pairs = z((n, nb), vec10), z((n, nv)), z((1, 1, 1))
    self.program = Q

  def run(self) -> None:
    s, m, Q = self.scene, self.scene.model, self.program
    n, nv, nb = s.nworld, s.nv, s.mjm.nbody
    xipos, com, cinert, cdof = self.frames
    wp.launch(_fill_qpos0, dim=(n, s.nq), device=s.device, inputs=[m.qpos0], outputs=[self.q0])
    for a in self._accumulated:
      a.zero_()
    Q.forward("q0")  # W is still zero: E's value is not needed, only the frames and the reverse pass
    wp.launch(_mass_matrix, dim=n, device=s.device,
              inputs=[m.body_subtreenum, m.dof_bodyid, m.dof_parentid, m.dof_armature, 0.0, self.zeros, cinert, cdof,
                      self.crb, self.no_pairs, self.no_pairs, 0, 0],
              outputs=[self.M, self.L])
    wp.launch(_inverse, dim=(n, nv), device=s.device, inputs=[self.L], outputs=[self.A])
    self.S.zero_()
    wp.launch(_body_weights, dim=(n, nb), device=s.device,
              inputs=[m.body_rootid, m.body_weldid, m.body_isdofancestor, self.G_body, xipos, com, cdof, self.A],
              outputs=[self.S])
    wp.launch(_dof_weights, dim=(n, nv), device=s.device, inputs=[m.dof_jntid, m.jnt_type, m.jnt_dofadr, self.G_dof],
              outputs=[self.S])
    wp.launch(_matmul, dim=(n, nv, nv), device=s.device, inputs=[self.S, self.A], outputs=[self.tmp])
    wp.launch(_matmul, dim=(n, nv, nv), device=s.device, inputs=[self.A, self.tmp], outputs=[self.W])
    for g in self._inter:
      g.zero_()
    Q.grads[id(self.E)].fill_(-1.0)  # dL = -<W, dM0>
    Q.backward("q0")

