"""Connect and weld equality rows of the analytic adjoint, replayed differentiably from the replayed
body frames and velocities (MJWarp's `constraint._equality_connect` and `_equality_weld`).

A connect holds two points together (3 rows: `pos = p1 - p2`); a weld also their orientations (3 more
rows: the imaginary part of `quat1 * quat` times the torque scale, `quat` body 1's frame times the
relative pose `eq_data[6:10]`, `quat1` the inverse of body 2's frame; with sites, the sites' frames).
Points are an anchor (`eq_data`) on each body, or the sites. Each row is always in the quadratic
regime: force `-D (J a - aref)` with

  J      = jac(p1, body 1) - jac(p2, body 2)   (translation; jac of a point: cdof_lin + cdof_ang x (p - com))
           0.5 Im(quat1 * (0, s (jacr1 - jacr2)) * quat)   (rotation, s the torque scale)
  aref   = -k imp pos - b J v - Jdot v        (MuJoCo 4.0's shift: J's time derivative times v)
  D      = 1 / max(invweight (1 - imp) / imp, MINVAL),  invweight from `body_invweight0`,

the impedance at `|pos|` (connect) or `|(cpos, crot)|` (weld, all six rows). `Jdot v` is
`support.jac_dot_dof`'s, from the replayed `cvel` and `cdof_dot` of the step's own state, as float64
MuJoCo C's (MJWarp reads those its Data holds when it builds the rows, the previous step's, unless
refreshed: diffsim's `Physics` refreshes them before each step of a model with these rows). `J` is
dense over the `nv` dofs: `(nworld, nrow, nv)` with `nrow` 3 per connect and 6 per weld. The
discrete integrator's rows (`is_discrete`) are not replayed: `analytic_coverage` admits Euler and
implicitfast only.

The rows' forces join `qfrc_constraint` in the program's "step" segment and `hessian()` adds their
`J^T D J` to the implicit function theorem's Hessian, as `ContactRows` does.
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

from mujoco_warp._src.types import vec5, vec12

from ..joints import BALL, FREE
from .constraints import _kbimp, _row_R
from .spatial import _motion_cross, _mul_quat

__all__ = ["EqualityRows"]

_CONNECT, _WELD = int(mujoco.mjtEq.mjEQ_CONNECT), int(mujoco.mjtEq.mjEQ_WELD)


@wp.func
def _conj(q: wp.quat) -> wp.quat:
  return wp.quat(q[0], -q[1], -q[2], -q[3])


@wp.func
def _pure(v: wp.vec3) -> wp.quat:
  return wp.quat(0.0, v[0], v[1], v[2])


@wp.func
def _im(q: wp.quat) -> wp.vec3:
  return wp.vec3(q[1], q[2], q[3])


@wp.kernel
def _equality_error(
  # Model:
  site_pos: wp.array2d[wp.vec3],
  site_quat: wp.array2d[wp.quat],
  eq_data: wp.array2d[vec12],
  # Tables:
  eqs: wp.array[int],  # (ne,) the connect and weld equalities
  kind: wp.array[int],  # (ne,) mjEQ_CONNECT or mjEQ_WELD
  obj: wp.array2d[int],  # (ne, 2) eq_obj1id, eq_obj2id: sites where `site` is 1, else bodies
  body: wp.array2d[int],  # (ne, 2) the objects' bodies
  site: wp.array[int],  # (ne,) 1: the objects are sites
  row0: wp.array[int],  # (ne,) first row
  # In (replayed):
  xpos: wp.array2d[wp.vec3],
  xquat: wp.array2d[wp.quat],
  xmat: wp.array2d[wp.mat33],
  # Out:
  p1_out: wp.array2d[wp.vec3],  # (nworld, ne) the point on body 1, m
  p2_out: wp.array2d[wp.vec3],  # (nworld, ne) the point on body 2
  quat_out: wp.array2d[wp.quat],  # (nworld, ne) weld: body 1's frame times the relative pose (or site 1's)
  quat1_out: wp.array2d[wp.quat],  # (nworld, ne) weld: the inverse of body 2's (or site 2's) frame
  pos_out: wp.array2d[float],  # (nworld, nrow) each row's violation (m; rad-like for weld's rotation)
  pos_imp_out: wp.array2d[float],  # (nworld, ne) the impedance's argument
):
  """The points and frames an equality holds together, and its rows' violations."""
  w, i = wp.tid()
  e = eqs[i]
  data = eq_data[w % eq_data.shape[0], e]
  b1 = body[i, 0]
  b2 = body[i, 1]
  p1 = wp.vec3(0.0)
  p2 = wp.vec3(0.0)
  quat = xquat[w, b1]
  quat1 = _conj(xquat[w, b2])
  if site[i] != 0:
    sw = w % site_pos.shape[0]
    qw = w % site_quat.shape[0]
    s1 = obj[i, 0]
    s2 = obj[i, 1]
    p1 = xpos[w, b1] + xmat[w, b1] @ site_pos[sw, s1]
    p2 = xpos[w, b2] + xmat[w, b2] @ site_pos[sw, s2]
    quat = _mul_quat(xquat[w, b1], site_quat[qw, s1])
    quat1 = _conj(_mul_quat(xquat[w, b2], site_quat[qw, s2]))
  elif kind[i] == _CONNECT:
    p1 = xpos[w, b1] + xmat[w, b1] @ wp.vec3(data[0], data[1], data[2])
    p2 = xpos[w, b2] + xmat[w, b2] @ wp.vec3(data[3], data[4], data[5])
  else:
    # MuJoCo's weld: data[3:6] is the anchor on body 1, data[0:3] on body 2
    p1 = xpos[w, b1] + xmat[w, b1] @ wp.vec3(data[3], data[4], data[5])
    p2 = xpos[w, b2] + xmat[w, b2] @ wp.vec3(data[0], data[1], data[2])
    quat = _mul_quat(xquat[w, b1], wp.quat(data[6], data[7], data[8], data[9]))
  p1_out[w, i] = p1
  p2_out[w, i] = p2
  quat_out[w, i] = quat
  quat1_out[w, i] = quat1
  r = row0[i]
  cpos = p1 - p2
  for k in range(3):
    pos_out[w, r + k] = cpos[k]
  # a weld's rotation error (0 for a connect, so that the impedance's argument is one expression)
  crot = _im(_mul_quat(quat1, quat)) * data[10] * float(kind[i] == _WELD)
  if kind[i] == _WELD:
    for k in range(3):
      pos_out[w, r + 3 + k] = crot[k]
  # the impedance's argument, |pos| over all the equality's rows (no sqrt at 0: its derivative is infinite)
  pos_imp_out[w, i] = wp.sqrt(wp.max(wp.dot(cpos, cpos) + wp.dot(crot, crot), 1.0e-30))


@wp.func
def _jac_dot(
  body_rootid: wp.array[int],
  jnt_type: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_bodyid: wp.array[int],
  dof_jntid: wp.array[int],
  com: wp.array2d[wp.vec3],
  cdof: wp.array2d[wp.spatial_vector],
  cvel: wp.array2d[wp.spatial_vector],
  cdof_dot: wp.array2d[wp.spatial_vector],
  w: int,
  point: wp.vec3,
  b: int,
  d: int,
) -> wp.spatial_vector:
  """The time derivative of dof `d`'s column of the point's Jacobian on body `b` (rotation, then
  translation), MJWarp's `support.jac_dot_dof` (the caller checks that `d` moves `b`)."""
  offset = point - com[w, body_rootid[b]]
  v = cvel[w, b]
  pvel_lin = wp.spatial_bottom(v) - wp.cross(offset, wp.spatial_top(v))
  cd = cdof[w, d]
  cdd = cdof_dot[w, d]
  j = dof_jntid[d]
  if jnt_type[j] == BALL or (jnt_type[j] == FREE and d >= jnt_dofadr[j] + 3):
    # a quaternion joint's axes turn with its own body
    cdd = _motion_cross(cvel[w, dof_bodyid[d]], cd)
  ang = wp.spatial_top(cdd)
  lin = wp.spatial_bottom(cdd) + wp.cross(ang, offset) + wp.cross(wp.spatial_top(cd), pvel_lin)
  return wp.spatial_vector(ang, lin)


@wp.kernel
def _equality_jacobian(
  # Model:
  body_rootid: wp.array[int],
  body_isdofancestor: wp.array2d[int],
  jnt_type: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_bodyid: wp.array[int],
  dof_jntid: wp.array[int],
  eq_data: wp.array2d[vec12],
  # Tables:
  eqs: wp.array[int],
  kind: wp.array[int],
  body: wp.array2d[int],
  row0: wp.array[int],
  # In (replayed):
  com: wp.array2d[wp.vec3],
  cdof: wp.array2d[wp.spatial_vector],
  cvel: wp.array2d[wp.spatial_vector],
  cdof_dot: wp.array2d[wp.spatial_vector],
  p1: wp.array2d[wp.vec3],
  p2: wp.array2d[wp.vec3],
  quat: wp.array2d[wp.quat],
  quat1: wp.array2d[wp.quat],
  # Out:
  J_out: wp.array3d[float],  # (nworld, nrow, nv) the rows' Jacobians
  Jdot_out: wp.array3d[float],  # (nworld, nrow, nv) translation: J's time derivative; rotation: jacr_dot1 - jacr_dot2
):
  """Dof `d`'s column of an equality's rows (MJWarp's dense `_equality_connect`/`_equality_weld`)."""
  w, i, d = wp.tid()
  b1 = body[i, 0]
  b2 = body[i, 1]
  a1 = float(body_isdofancestor[b1, d])
  a2 = float(body_isdofancestor[b2, d])
  cd = cdof[w, d]
  ang = wp.spatial_top(cd)
  lin = wp.spatial_bottom(cd)
  x1 = p1[w, i]
  x2 = p2[w, i]
  jacp = a1 * (lin + wp.cross(ang, x1 - com[w, body_rootid[b1]])) - \
    a2 * (lin + wp.cross(ang, x2 - com[w, body_rootid[b2]]))
  dot1 = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
  dot2 = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
  if a1 != 0.0:
    dot1 = _jac_dot(body_rootid, jnt_type, jnt_dofadr, dof_bodyid, dof_jntid, com, cdof, cvel, cdof_dot, w, x1, b1, d)
  if a2 != 0.0:
    dot2 = _jac_dot(body_rootid, jnt_type, jnt_dofadr, dof_bodyid, dof_jntid, com, cdof, cvel, cdof_dot, w, x2, b2, d)
  jacp_dot = wp.spatial_bottom(dot1) - wp.spatial_bottom(dot2)
  r = row0[i]
  for k in range(3):
    J_out[w, r + k, d] = jacp[k]
    Jdot_out[w, r + k, d] = jacp_dot[k]
  if kind[i] == _WELD:
    torquescale = eq_data[w % eq_data.shape[0], eqs[i]][10]
    jacr = (a1 - a2) * ang * torquescale
    jacr_q = 0.5 * _im(_mul_quat(_mul_quat(quat1[w, i], _pure(jacr)), quat[w, i]))
    jacr_dot = wp.spatial_top(dot1) - wp.spatial_top(dot2)
    for k in range(3):
      J_out[w, r + 3 + k, d] = jacr_q[k]
      Jdot_out[w, r + 3 + k, d] = jacr_dot[k]


@wp.kernel
def _equality_products(
  # In:
  J: wp.array3d[float],
  Jdot: wp.array3d[float],
  qvel: wp.array2d[float],
  qacc: wp.array2d[float],  # the solver's acceleration (fixed)
  # Out (zeroed):
  Jv_out: wp.array2d[float],  # (nworld, nrow)
  Ja_out: wp.array2d[float],
  Jdv_out: wp.array2d[float],
):
  w, r, d = wp.tid()
  v = qvel[w, d]
  wp.atomic_add(Jv_out, w, r, J[w, r, d] * v)
  wp.atomic_add(Ja_out, w, r, J[w, r, d] * qacc[w, d])
  wp.atomic_add(Jdv_out, w, r, Jdot[w, r, d] * v)


@wp.kernel
def _equality_force(
  # Model:
  opt_timestep: float,
  refsafe: int,
  body_invweight0: wp.array2d[wp.vec2],
  eq_solref: wp.array2d[wp.vec2],
  eq_solimp: wp.array2d[vec5],
  eq_data: wp.array2d[vec12],
  # Tables:
  eqs: wp.array[int],
  kind: wp.array[int],
  body: wp.array2d[int],
  weight_body: wp.array2d[int],  # (ne, 2) the bodies whose body_invweight0 MJWarp reads
  row0: wp.array[int],
  # In (replayed):
  cvel: wp.array2d[wp.spatial_vector],
  quat: wp.array2d[wp.quat],
  quat1: wp.array2d[wp.quat],
  pos: wp.array2d[float],
  pos_imp: wp.array2d[float],
  Jv: wp.array2d[float],
  Ja: wp.array2d[float],
  Jdv: wp.array2d[float],
  # Out:
  force_out: wp.array2d[float],  # (nworld, nrow) row forces
  D_out: wp.array2d[float],  # (nworld, nrow)
  aref_out: wp.array2d[float],  # (nworld, nrow) reference accelerations (for checks)
):
  """Row constants (MJWarp's `_efc_row`, the Newton solver's quadratic regime) and the forces at the
  solver's acceleration."""
  w, i = wp.tid()
  e = eqs[i]
  r = row0[i]
  weld = kind[i] == _WELD
  kbi = _kbimp(opt_timestep, refsafe, eq_solref[w % eq_solref.shape[0], e], eq_solimp[w % eq_solimp.shape[0], e],
               pos_imp[w, i])
  imp = kbi[2]
  iw = w % body_invweight0.shape[0]
  inv1 = body_invweight0[iw, weight_body[i, 0]]
  inv2 = body_invweight0[iw, weight_body[i, 1]]
  Dt = 1.0 / _row_R(inv1[0] + inv2[0], imp)
  for k in range(3):
    aref = -kbi[0] * imp * pos[w, r + k] - kbi[1] * Jv[w, r + k] - Jdv[w, r + k]
    force_out[w, r + k] = -Dt * (Ja[w, r + k] - aref)
    D_out[w, r + k] = Dt
    aref_out[w, r + k] = aref
  if weld:
    # the rotation rows' shift: the time derivative of 0.5 Im(quat1 * (0, jacr) * quat) times v
    torquescale = eq_data[w % eq_data.shape[0], e][10]
    q0 = quat[w, i]
    q1 = quat1[w, i]
    omega1 = wp.spatial_top(cvel[w, body[i, 0]])
    omega2 = wp.spatial_top(cvel[w, body[i, 1]])
    domega = _pure(omega1 - omega2)
    negqdot1 = _conj(0.5 * _mul_quat(_pure(omega2), _conj(q1)))
    qdot0 = 0.5 * _mul_quat(_pure(omega1), q0)
    djrdv = _pure(wp.vec3(Jdv[w, r + 3], Jdv[w, r + 4], Jdv[w, r + 5]))
    t = _mul_quat(_mul_quat(negqdot1, domega), q0) + _mul_quat(_mul_quat(q1, djrdv), q0) + \
      _mul_quat(_mul_quat(q1, domega), qdot0)
    shift = 0.5 * torquescale * _im(t)
    Dr = 1.0 / _row_R(inv1[1] + inv2[1], imp)
    for k in range(3):
      aref = -kbi[0] * imp * pos[w, r + 3 + k] - kbi[1] * Jv[w, r + 3 + k] - shift[k]
      force_out[w, r + 3 + k] = -Dr * (Ja[w, r + 3 + k] - aref)
      D_out[w, r + 3 + k] = Dr
      aref_out[w, r + 3 + k] = aref


@wp.kernel
def _equality_qfrc(
  # In:
  J: wp.array3d[float],
  force: wp.array2d[float],
  # Out (zeroed):
  qfrc_out: wp.array2d[float],  # (nworld, nv) += J^T force
):
  w, r, d = wp.tid()
  wp.atomic_add(qfrc_out, w, d, J[w, r, d] * force[w, r])


@wp.kernel(enable_backward=False)
def _equality_jtdj(
  # In:
  J: wp.array3d[float],
  D: wp.array2d[float],
  # Out:
  jtdj_out: wp.array3d[float],  # (nworld, nv, nv) += J^T D J
):
  w, i, j = wp.tid()
  s = float(0.0)
  for r in range(J.shape[1]):
    s += D[w, r] * J[w, r, i] * J[w, r, j]
  wp.atomic_add(jtdj_out, w, i, j, s)


class EqualityRows:
  """The connect and weld rows of one replayed step, recorded into the adjoint's program
  (`_Program`, segment "step"); `hessian()` adds their `J^T D J` to `jtdj` after the segment ran.
  `record` returns `None` when the model has no active connect or weld equality."""

  @classmethod
  def record(cls, program, mjm: mujoco.MjModel, m, arr, accumulated, **replayed):
    off = int(mjm.opt.disableflags)
    dsbl = mujoco.mjtDisableBit
    if off & (dsbl.mjDSBL_CONSTRAINT | dsbl.mjDSBL_EQUALITY):
      return None
    eqs = [e for e in range(mjm.neq) if mjm.eq_active0[e] and int(mjm.eq_type[e]) in (_CONNECT, _WELD)]
    if not eqs:
      return None
    return cls(program, mjm, m, eqs, arr, accumulated, **replayed)

  def __init__(self, program, mjm, m, eqs, arr, accumulated, *, xpos, xquat, xmat, com, cdof, cvel, cdof_dot, qvel,
               qacc, qfrc_constraint, jtdj):
    dev, n, nv = program.device, qvel.shape[0], mjm.nv
    kind = np.array([int(mjm.eq_type[e]) for e in eqs], np.int32)
    site = np.array([int(mjm.eq_objtype[e]) == int(mujoco.mjtObj.mjOBJ_SITE) and mjm.nsite > 0 for e in eqs], np.int32)
    obj = np.array([[mjm.eq_obj1id[e], mjm.eq_obj2id[e]] for e in eqs], np.int32)
    body = np.array([mjm.site_bodyid[o] if s else o for o, s in zip(obj, site)], np.int32).reshape(-1, 2)
    # MJWarp's sparse rows read the invweight of the bodies' weld roots (body_weldid), its dense rows the bodies'
    weight_body = mjm.body_weldid[body].astype(np.int32) if m.is_sparse else body
    sizes = np.where(kind == _WELD, 6, 3)
    row0 = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)
    self.nrow = nrow = int(sizes.sum())
    ne = len(eqs)
    a = lambda x: wp.array(x, dtype=int, device=dev)
    tables = dict(eqs=a(np.array(eqs, np.int32)), kind=a(kind), obj=a(obj), body=a(body), site=a(site),
                  row0=a(row0), weight_body=a(weight_body))
    t = lambda *names: [tables[k] for k in names]
    p1, p2 = arr((n, ne), wp.vec3), arr((n, ne), wp.vec3)
    quat, quat1 = arr((n, ne), wp.quat), arr((n, ne), wp.quat)
    pos, pos_imp = arr((n, nrow)), arr((n, ne))
    self.J, Jdot = arr((n, nrow, nv)), arr((n, nrow, nv))
    Jv, Ja, Jdv = arr((n, nrow)), arr((n, nrow)), arr((n, nrow))
    accumulated.extend([Jv, Ja, Jdv])
    self.force, self.D, aref = arr((n, nrow)), arr((n, nrow), grad=False), arr((n, nrow), grad=False)
    self.jtdj, self.device = jtdj, dev
    refsafe = 0 if int(mjm.opt.disableflags) & mujoco.mjtDisableBit.mjDSBL_REFSAFE else 1
    program.launch("step", _equality_error, (n, ne),
                   [m.site_pos, m.site_quat, m.eq_data, *t("eqs", "kind", "obj", "body", "site", "row0"), xpos, xquat,
                    xmat], [p1, p2, quat, quat1, pos, pos_imp])
    program.launch("step", _equality_jacobian, (n, ne, nv),
                   [m.body_rootid, m.body_isdofancestor, m.jnt_type, m.jnt_dofadr, m.dof_bodyid, m.dof_jntid,
                    m.eq_data, *t("eqs", "kind", "body", "row0"), com, cdof, cvel, cdof_dot, p1, p2, quat, quat1],
                   [self.J, Jdot])
    program.launch("step", _equality_products, (n, nrow, nv), [self.J, Jdot, qvel, qacc], [Jv, Ja, Jdv])
    program.launch("step", _equality_force, (n, ne),
                   [float(mjm.opt.timestep), refsafe, m.body_invweight0, m.eq_solref, m.eq_solimp, m.eq_data,
                    *t("eqs", "kind", "body", "weight_body", "row0"), cvel, quat, quat1, pos, pos_imp, Jv, Ja, Jdv],
                   [self.force, self.D, aref])
    program.launch("step", _equality_qfrc, (n, nrow, nv), [self.J, self.force], [qfrc_constraint])
    self.values = dict(eq_pos=pos, eq_J=self.J, eq_D=self.D, eq_aref=aref, eq_force=self.force)

  def hessian(self) -> None:
    """Adds the rows' `J^T D J` to `jtdj` (after the program's "step" segment ran)."""
    n, nv = self.jtdj.shape[0], self.jtdj.shape[1]
    wp.launch(_equality_jtdj, dim=(n, nv, nv), device=self.device, inputs=[self.J, self.D], outputs=[self.jtdj])
