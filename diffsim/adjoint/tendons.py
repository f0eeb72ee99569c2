"""Tendons and non-joint transmissions, replayed differentiably: fixed and spatial tendon lengths
and Jacobians, their springs, dampers and armature, their limit and friction rows, and the moment
arms of tendon and site actuators.

A fixed tendon is `L = sum_k coef_k q_k`; a spatial tendon through sites (and pulleys, which divide
the branches after them) is the sum of its straight segments' lengths, each Jacobian row
`vec . (jac(p1) - jac(p0))` for the segment's unit direction `vec` (MJWarp's `_joint_tendon`,
`_spatial_site_tendon`), rebuilt from the replayed site frames, so the Jacobian's own dependence on
`q` is differentiated; stretches wrapping around spheres and cylinders are `wraps.py`'s.

Armature `A` adds the tendon's inertia to inverse dynamics: `J^T A (J a + Jdot v)`, the bracket the
tendon's acceleration, built from the replayed site accelerations (`TendonRows.inertia`), and
`A J^T J` to the mass matrix (`solve._rank_ones`, `_mass_matrix`), both only on pairs of dofs where one is the
other's ancestor, as MuJoCo's `mj_tendonArmature` adds it into the tree's sparsity. implicitfast
integrates tendon damping and the velocity gains of tendon and site actuators implicitly: their
`h B a_e` on the same pairs (`TendonRows.implicit_damping`, `record_transmission_damping`).

Rows (MJWarp's `_limit_tendon`, `_friction_tendon`) follow `constraints.py`: a limit row
`-D (J a - aref)` where the limit pushes, a friction row `-D (J a - aref)` inside
`[-frictionloss, frictionloss]` (quadratic) else the bound; the quadratic rows' `J^T D J` joins the
IFT's Hessian (`TendonRows.hessian`, after the step segment ran).

Arrays: tendon lengths `(nworld, ntendon)` (m, or rad for a fixed tendon of hinges), Jacobians
`(nworld, ntendon, nv)`; actuator lengths `(nworld, nu)` and moments `(nworld, nu, nv)` (zero rows for
joint transmissions, which `actuation.py` handles itself).
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

from mujoco_warp._src.types import vec5

from .constraints import _friction_row, _one_sided_row
from .spatial import _MINVAL
from .wraps import _geom_segments, _inside_wraps

__all__ = ["TendonRows", "record_transmission_damping", "record_transmissions"]

_TRN_TENDON, _TRN_SITE = int(mujoco.mjtTrn.mjTRN_TENDON), int(mujoco.mjtTrn.mjTRN_SITE)


@wp.kernel
def _joint_wraps(
  # Model:
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  wrap_objid: wp.array[int],
  wrap_prm: wp.array[float],
  tendon_jnt_adr: wp.array[int],
  wrap_jnt_adr: wp.array[int],
  # In:
  qpos: wp.array2d[float],
  # Out (zeroed):
  length_out: wp.array2d[float],  # (nworld, ntendon)
  J_out: wp.array3d[float],  # (nworld, ntendon, nv)
):
  """Fixed tendons: each joint term `coef * q` of its tendon's length, `coef` its Jacobian entry."""
  w, e = wp.tid()
  t = tendon_jnt_adr[e]
  j = wrap_jnt_adr[e]
  jnt = wrap_objid[j]
  coef = wrap_prm[j]
  wp.atomic_add(length_out, w, t, coef * qpos[w, jnt_qposadr[jnt]])
  wp.atomic_add(J_out, w, t, jnt_dofadr[jnt], coef)


@wp.kernel
def _site_segments(
  # Model:
  body_rootid: wp.array[int],
  body_isdofancestor: wp.array2d[int],
  site_bodyid: wp.array[int],
  wrap_objid: wp.array[int],
  wrap_pulley_scale: wp.array[float],
  tendon_site_pair_adr: wp.array[int],
  wrap_site_pair_adr: wp.array[int],
  # In (replayed):
  site_xpos: wp.array2d[wp.vec3],
  com: wp.array2d[wp.vec3],
  cdof: wp.array2d[wp.spatial_vector],
  # Out (zeroed):
  length_out: wp.array2d[float],
  J_out: wp.array3d[float],
):
  """Spatial tendons: each straight segment between two sites, its length over the pulleys' divisor,
  and its Jacobian row `vec . (jac(p1) - jac(p0))`."""
  w, e = wp.tid()
  t = tendon_site_pair_adr[e]
  j = wrap_site_pair_adr[e]
  scale = wrap_pulley_scale[j]
  s0 = wrap_objid[j]
  s1 = wrap_objid[j + 1]
  p0 = site_xpos[w, s0]
  p1 = site_xpos[w, s1]
  dif = p1 - p0
  length = wp.length(dif)
  wp.atomic_add(length_out, w, t, scale * length)
  vec = wp.vec3(1.0, 0.0, 0.0)
  if length >= _MINVAL:
    vec = dif / length
  b0 = site_bodyid[s0]
  b1 = site_bodyid[s1]
  if b0 != b1:
    off0 = p0 - com[w, body_rootid[b0]]
    off1 = p1 - com[w, body_rootid[b1]]
    for i in range(cdof.shape[1]):
      a0 = float(body_isdofancestor[b0, i])
      a1 = float(body_isdofancestor[b1, i])
      if a0 != a1:
        cd = cdof[w, i]
        ang = wp.spatial_top(cd)
        lin = wp.spatial_bottom(cd)
        jp = a1 * (lin + wp.cross(ang, off1)) - a0 * (lin + wp.cross(ang, off0))
        wp.atomic_add(J_out, w, t, i, scale * wp.dot(vec, jp))


@wp.func
def _point_motion(w: int, b: int, p: wp.vec3, c: wp.vec3, cvel: wp.array2d[wp.spatial_vector],
                  cacc: wp.array2d[wp.spatial_vector], g: wp.vec3) -> wp.mat33:
  """The world velocity (row 0) and acceleration (row 1) of the point `p` fixed to body `b`, from the
  body's spatial velocity and the replayed `mj_rne` acceleration about `c` (its root's subtree com);
  `g` is the gravity `_accelerations` put into every moving body's acceleration, taken out here."""
  v = cvel[w, b]
  a = cacc[w, b]
  r = p - c
  vel = wp.spatial_bottom(v) + wp.cross(wp.spatial_top(v), r)
  acc = wp.spatial_bottom(a) + wp.cross(wp.spatial_top(a), r) + wp.cross(wp.spatial_top(v), vel)
  if b > 0:
    acc += g
  return wp.matrix_from_rows(vel, acc, wp.vec3(0.0))


@wp.kernel
def _site_segment_acc(
  # Model:
  opt_gravity: wp.array[wp.vec3],
  gravity_on: float,
  body_rootid: wp.array[int],
  site_bodyid: wp.array[int],
  wrap_objid: wp.array[int],
  wrap_pulley_scale: wp.array[float],
  tendon_armature: wp.array2d[float],
  tendon_site_pair_adr: wp.array[int],
  wrap_site_pair_adr: wp.array[int],
  # In (replayed):
  site_xpos: wp.array2d[wp.vec3],
  com: wp.array2d[wp.vec3],
  cvel: wp.array2d[wp.spatial_vector],
  cacc: wp.array2d[wp.spatial_vector],
  # Out (zeroed):
  acc_out: wp.array2d[float],  # (nworld, ntendon) tendon accelerations J a + Jdot v
):
  """A straight segment's part of its tendon's acceleration, `u . (a1 - a0) + (|dv|^2 - (u . dv)^2) / L`
  over the pulleys' divisor (`u`: unit direction, `L`: length, `dv`, `a1 - a0`: the sites' relative
  velocity and acceleration); only tendons with armature read it."""
  w, e = wp.tid()
  t = tendon_site_pair_adr[e]
  if tendon_armature[w % tendon_armature.shape[0], t] == 0.0:
    return
  j = wrap_site_pair_adr[e]
  s0 = wrap_objid[j]
  s1 = wrap_objid[j + 1]
  b0 = site_bodyid[s0]
  b1 = site_bodyid[s1]
  p0 = site_xpos[w, s0]
  p1 = site_xpos[w, s1]
  dif = p1 - p0
  length = wp.length(dif)
  if b0 == b1 or length < _MINVAL:
    return
  g = opt_gravity[w % opt_gravity.shape[0]] * gravity_on
  m0 = _point_motion(w, b0, p0, com[w, body_rootid[b0]], cvel, cacc, g)
  m1 = _point_motion(w, b1, p1, com[w, body_rootid[b1]], cvel, cacc, g)
  u = dif / length
  dv = m1[0] - m0[0]
  udv = wp.dot(u, dv)
  lddot = wp.dot(u, m1[1] - m0[1]) + (wp.dot(dv, dv) - udv * udv) / length
  wp.atomic_add(acc_out, w, t, wrap_pulley_scale[j] * lddot)


@wp.kernel
def _joint_wrap_acc(
  # Model:
  jnt_dofadr: wp.array[int],
  wrap_objid: wp.array[int],
  wrap_prm: wp.array[float],
  tendon_armature: wp.array2d[float],
  tendon_jnt_adr: wp.array[int],
  wrap_jnt_adr: wp.array[int],
  # In:
  qacc: wp.array2d[float],
  # Out (zeroed):
  acc_out: wp.array2d[float],  # (nworld, ntendon)
):
  """A fixed tendon's acceleration `sum_k coef_k qacc_k` (its Jacobian is constant)."""
  w, e = wp.tid()
  t = tendon_jnt_adr[e]
  if tendon_armature[w % tendon_armature.shape[0], t] == 0.0:
    return
  j = wrap_jnt_adr[e]
  wp.atomic_add(acc_out, w, t, wrap_prm[j] * qacc[w, jnt_dofadr[wrap_objid[j]]])


@wp.kernel
def _tendon_term(
  # Model:
  coef: wp.array2d[float],  # (nbatch, ntendon) tendon_armature or tendon_damping
  scale: float,
  # In:
  J: wp.array3d[float],  # (nworld, ntendon, nv)
  y: wp.array2d[float],  # (nworld, ntendon)
  # Out:
  out: wp.array2d[float],  # (nworld, nv) += scale J^T coef y
):
  w, t, i = wp.tid()
  c = coef[w % coef.shape[0], t]
  if c != 0.0:
    wp.atomic_add(out, w, i, J[w, t, i] * scale * c * y[w, t])


@wp.kernel
def _unrelated_term(
  # Model:
  coef: wp.array2d[float],
  scale: float,
  # Tables:
  pairs: wp.array[wp.vec3i],  # (npair,) (tendon, dof i, dof j), i and j on different branches
  # In:
  J: wp.array3d[float],
  x: wp.array2d[float],  # (nworld, nv)
  # Out:
  out: wp.array2d[float],  # (nworld, nv)
):
  """Takes out of `scale J^T coef J x` the pairs of dofs where neither is the other's ancestor: MuJoCo
  adds a tendon's `armature J^T J` (`mj_tendonArmature`) and implicitfast's `damping J^T J` only into
  the mass matrix's tree sparsity."""
  w, e = wp.tid()
  p = pairs[e]
  c = coef[w % coef.shape[0], p[0]]
  wp.atomic_add(out, w, p[1], -scale * c * J[w, p[0], p[1]] * J[w, p[0], p[2]] * x[w, p[2]])


@wp.kernel
def _row_dot(
  # In:
  J: wp.array3d[float],  # (nworld, nrow, nv)
  x: wp.array2d[float],  # (nworld, nv)
  # Out (zeroed):
  out: wp.array2d[float],  # (nworld, nrow) J x
):
  w, r, i = wp.tid()
  wp.atomic_add(out, w, r, J[w, r, i] * x[w, i])


@wp.kernel
def _tendon_passive(
  # Model:
  tendon_stiffness: wp.array2d[float],
  tendon_damping: wp.array2d[float],
  tendon_lengthspring: wp.array2d[wp.vec2],
  spring: float,
  damper: float,
  # In:
  length: wp.array2d[float],
  velocity: wp.array2d[float],
  J: wp.array3d[float],
  # Out:
  qfrc_out: wp.array2d[float],  # (nworld, nv) += J^T (spring + damper force)
):
  """Tendon springs (dead band between the two spring lengths) and dampers (MJWarp's
  `_spring_damper_tendon_passive` without the polynomial terms, which coverage refuses)."""
  w, t, i = wp.tid()
  ls = tendon_lengthspring[w % tendon_lengthspring.shape[0], t]
  L = length[w, t]
  x = float(0.0)
  if L > ls[1]:
    x = L - ls[1]
  elif L < ls[0]:
    x = L - ls[0]
  f = -spring * tendon_stiffness[w % tendon_stiffness.shape[0], t] * x
  f -= damper * tendon_damping[w % tendon_damping.shape[0], t] * velocity[w, t]
  wp.atomic_add(qfrc_out, w, i, J[w, t, i] * f)


@wp.kernel
def _tendon_rows(
  # Model:
  opt_timestep: float,
  refsafe: int,
  limits_on: int,
  friction_on: int,
  tendon_limited: wp.array[int],
  tendon_range: wp.array2d[wp.vec2],
  tendon_margin: wp.array2d[float],
  tendon_solref_lim: wp.array2d[wp.vec2],
  tendon_solimp_lim: wp.array2d[vec5],
  tendon_solref_fri: wp.array2d[wp.vec2],
  tendon_solimp_fri: wp.array2d[vec5],
  tendon_frictionloss: wp.array2d[float],
  tendon_invweight0: wp.array2d[float],
  # In:
  length: wp.array2d[float],
  velocity: wp.array2d[float],  # (nworld, ntendon) J qvel
  Ja: wp.array2d[float],  # (nworld, ntendon) J qacc, the solver's acceleration (fixed)
  # Out (zeroed):
  force_out: wp.array2d[float],  # (nworld, ntendon) the rows' force along the tendon
  D_out: wp.array3d[float],  # (nworld, ntendon, 2) D of the quadratic limit and friction rows, 0 elsewhere
):
  """A tendon's limit row (where its length leaves `range` by more than `margin`) and friction row, at
  the solver's acceleration; their summed force along the tendon."""
  w, t = wp.tid()
  invweight = tendon_invweight0[w % tendon_invweight0.shape[0], t]
  if limits_on != 0 and tendon_limited[t] != 0:
    r = tendon_range[w % tendon_range.shape[0], t]
    L = length[w, t]
    dist_min = L - r[0]
    dist_max = r[1] - L
    pos = wp.min(dist_min, dist_max) - tendon_margin[w % tendon_margin.shape[0], t]
    if pos < 0.0:
      scl = float(1.0)
      if dist_min >= dist_max:
        scl = -1.0
      fD = _one_sided_row(opt_timestep, refsafe, tendon_solref_lim[w % tendon_solref_lim.shape[0], t],
                          tendon_solimp_lim[w % tendon_solimp_lim.shape[0], t], pos, scl * velocity[w, t],
                          scl * Ja[w, t], invweight)
      wp.atomic_add(force_out, w, t, scl * fD[0])
      D_out[w, t, 0] = fD[1]
  fl = tendon_frictionloss[w % tendon_frictionloss.shape[0], t]
  if friction_on != 0 and fl > 0.0:
    fD = _friction_row(opt_timestep, refsafe, tendon_solref_fri[w % tendon_solref_fri.shape[0], t],
                       tendon_solimp_fri[w % tendon_solimp_fri.shape[0], t], fl, velocity[w, t], Ja[w, t], invweight)
    wp.atomic_add(force_out, w, t, fD[0])
    D_out[w, t, 1] = fD[1]


@wp.kernel
def _row_forces(
  # In:
  J: wp.array3d[float],  # (nworld, nrow, nv)
  force: wp.array2d[float],  # (nworld, nrow)
  # Out:
  qfrc_out: wp.array2d[float],  # (nworld, nv) += J^T force
):
  w, r, i = wp.tid()
  wp.atomic_add(qfrc_out, w, i, J[w, r, i] * force[w, r])


@wp.kernel(enable_backward=False)
def _tendon_jtdj(
  # In:
  J: wp.array3d[float],
  D: wp.array3d[float],  # (nworld, ntendon, 2)
  # Out:
  jtdj_out: wp.array3d[float],  # (nworld, nv, nv) += J^T D J of the quadratic rows
):
  w, t, i = wp.tid()
  d = D[w, t, 0] + D[w, t, 1]
  ji = d * J[w, t, i]
  if ji != 0.0:
    for j in range(J.shape[2]):
      wp.atomic_add(jtdj_out, w, i, j, ji * J[w, t, j])


@wp.kernel
def _transmission(
  # Model:
  body_rootid: wp.array[int],
  body_isdofancestor: wp.array2d[int],
  site_bodyid: wp.array[int],
  actuator_trntype: wp.array[int],
  actuator_trnid: wp.array[wp.vec2i],
  actuator_gear: wp.array2d[wp.spatial_vector],
  # In (replayed):
  ten_length: wp.array2d[float],
  ten_J: wp.array3d[float],
  site_xpos: wp.array2d[wp.vec3],
  site_xmat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  cdof: wp.array2d[wp.spatial_vector],
  # Out:
  length_out: wp.array2d[float],  # (nworld, nu)
  moment_out: wp.array3d[float],  # (nworld, nu, nv)
):
  """Tendon and site transmissions (MJWarp's `_transmission`): a tendon actuator's length and moment
  are the tendon's times `gear[0]`; a site actuator (no reference site) has length 0 and moment
  `jac_p . (R gear[:3]) + jac_r . (R gear[3:])`, the site's frame `R` turning the gear's wrench."""
  w, u, i = wp.tid()
  trn = actuator_trntype[u]
  gear = actuator_gear[w % actuator_gear.shape[0], u]
  if trn == _TRN_TENDON:
    t = actuator_trnid[u][0]
    moment_out[w, u, i] = gear[0] * ten_J[w, t, i]
    if i == 0:
      length_out[w, u] = gear[0] * ten_length[w, t]
  elif trn == _TRN_SITE:
    s = actuator_trnid[u][0]
    b = site_bodyid[s]
    if body_isdofancestor[b, i] != 0:
      R = site_xmat[w, s]
      cd = cdof[w, i]
      ang = wp.spatial_top(cd)
      jp = wp.spatial_bottom(cd) + wp.cross(ang, site_xpos[w, s] - com[w, body_rootid[b]])
      moment_out[w, u, i] = wp.dot(jp, R @ wp.spatial_top(gear)) + wp.dot(ang, R @ wp.spatial_bottom(gear))


def record_transmissions(P, mjm: mujoco.MjModel, m, arr, accumulated, *, qvel, tendons, site_xpos, site_xmat, com,
                         cdof):
  """Records (segment "state") the lengths, velocities and moments of `mjm`'s tendon and site
  actuators; returns `(length, velocity, moment)`, `(nworld, nu)`, `(nworld, nu)`, `(nworld, nu, nv)`
  (dummies of one element when every actuator acts on a joint), for `actuation._actuation`."""
  n, nu, nv = qvel.shape[0], mjm.nu, mjm.nv
  if not np.isin(mjm.actuator_trntype, (_TRN_TENDON, _TRN_SITE)).any():
    return arr((1, 1)), arr((1, 1)), arr((1, 1, 1))
  length, velocity, moment = arr((n, nu)), arr((n, nu)), arr((n, nu, nv))
  accumulated.append(velocity)
  ten_length, ten_J = (tendons.length, tendons.J) if tendons is not None else (arr((1, 1)), arr((1, 1, 1)))
  P.launch("state", _transmission, (n, nu, nv),
           [m.body_rootid, m.body_isdofancestor, m.site_bodyid, m.actuator_trntype, m.actuator_trnid,
            m.actuator_gear, ten_length, ten_J, site_xpos, site_xmat, com, cdof], [length, moment])
  P.launch("state", _row_dot, (n, nu, nv), [moment, qvel], [velocity])
  return length, velocity, moment


class TendonRows:
  """The tendons of one replayed step, recorded into the adjoint's program (`_Program`): lengths,
  Jacobians and velocities, springs and dampers in segment "state" (into `qfrc_passive`); limit and
  friction rows in segment "step" (into `qfrc_constraint`); `hessian()` adds the quadratic rows'
  `J^T D J` to `jtdj` after the step segment ran.

  `arr(shape)` allocates a replayed array with an adjoint; `accumulated` lists the arrays the kernels
  add into (zeroed before each replay)."""

  def __init__(self, mjm: mujoco.MjModel, m, P, arr, accumulated, *, qpos, qvel, qacc, site_xpos, geom_xpos, geom_xmat,
               com, cdof, cvel, qfrc_passive, qfrc_constraint, jtdj):
    off = int(mjm.opt.disableflags)
    dsbl = mujoco.mjtDisableBit
    n, nt, nv = qpos.shape[0], mjm.ntendon, mjm.nv
    h = float(mjm.opt.timestep)
    self.length, self.J, self.velocity = arr((n, nt)), arr((n, nt, nv)), arr((n, nt))
    self._m, self._P, self._arr, self._accumulated = m, P, arr, accumulated
    self._frames = (site_xpos, com, cvel)
    self._gravity_on = 0.0 if off & dsbl.mjDSBL_GRAVITY else 1.0
    # tendon armature: the inertia `armature J^T J` (mass matrix) and its velocity term (`inertia`);
    # implicitfast integrates tendon damping implicitly: `h damping J^T J` (`implicit_damping`)
    self.armature = bool(mjm.tendon_armature.any())
    implicitfast = mjm.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    self.implicit_damping_on = bool(implicitfast and not off & dsbl.mjDSBL_DAMPER and mjm.tendon_damping.any())

    self._pairs = _unrelated_pairs(mjm, np.flatnonzero(mjm.tendon_armature), P.device) if self.armature else None
    self._damping_pairs = _unrelated_pairs(mjm, np.flatnonzero(mjm.tendon_damping), P.device) \
      if self.implicit_damping_on else None
    accumulated.extend([self.length, self.J, self.velocity])
    if m.wrap_jnt_adr.shape[0]:
      P.launch("state", _joint_wraps, (n, m.wrap_jnt_adr.shape[0]),
               [m.jnt_qposadr, m.jnt_dofadr, m.wrap_objid, m.wrap_prm, m.tendon_jnt_adr, m.wrap_jnt_adr, qpos],
               [self.length, self.J])
    if m.wrap_site_pair_adr.shape[0]:
      P.launch("state", _site_segments, (n, m.wrap_site_pair_adr.shape[0]),
               [m.body_rootid, m.body_isdofancestor, m.site_bodyid, m.wrap_objid, m.wrap_pulley_scale,
                m.tendon_site_pair_adr, m.wrap_site_pair_adr, site_xpos, com, cdof], [self.length, self.J])
    ngw = m.wrap_geom_adr.shape[0]
    if ngw:
      # stretches wrapping around spheres and cylinders, from the geoms' replayed frames; inside wraps'
      # Newton roots first, forward only (no adjoint: `wraps.py`)
      inside, phi = wp.zeros((n, ngw), dtype=int, device=P.device), wp.zeros((n, ngw), device=P.device)
      P.launch("state", _inside_wraps, (n, ngw),
               [m.geom_size, m.wrap_type, m.wrap_objid, m.wrap_prm, m.wrap_geom_adr, site_xpos, geom_xpos, geom_xmat],
               [inside, phi], backward=False)
      P.launch("state", _geom_segments, (n, ngw),
               [m.body_rootid, m.body_isdofancestor, m.geom_bodyid, m.geom_size, m.site_bodyid, m.wrap_type,
                m.wrap_objid, m.wrap_prm, m.wrap_pulley_scale, m.tendon_geom_adr, m.wrap_geom_adr, site_xpos,
                geom_xpos, geom_xmat, com, cdof, inside, phi], [self.length, self.J])
    P.launch("state", _row_dot, (n, nt, nv), [self.J, qvel], [self.velocity])
    spring = 0.0 if off & dsbl.mjDSBL_SPRING else 1.0
    damper = 0.0 if off & dsbl.mjDSBL_DAMPER else 1.0
    if (spring and mjm.tendon_stiffness.any()) or (damper and mjm.tendon_damping.any()):
      P.launch("state", _tendon_passive, (n, nt, nv),
               [m.tendon_stiffness, m.tendon_damping, m.tendon_lengthspring, spring, damper, self.length,
                self.velocity, self.J], [qfrc_passive])
    constraints_on = not off & dsbl.mjDSBL_CONSTRAINT
    limits = constraints_on and not off & dsbl.mjDSBL_LIMIT and bool(mjm.tendon_limited.any())
    friction = constraints_on and not off & dsbl.mjDSBL_FRICTIONLOSS and bool(mjm.tendon_frictionloss.any())
    self.any_rows = limits or friction
    self.jtdj = jtdj
    if not self.any_rows:
      return
    Ja, self.force = arr((n, nt)), arr((n, nt))
    self.D = arr((n, nt, 2), grad=False)
    accumulated.extend([Ja, self.force, self.D])
    refsafe = 0 if off & dsbl.mjDSBL_REFSAFE else 1
    limited = wp.array(mjm.tendon_limited.astype(np.int32), dtype=int, device=P.device)
    P.launch("step", _row_dot, (n, nt, nv), [self.J, qacc], [Ja])
    P.launch("step", _tendon_rows, (n, nt),
             [h, refsafe, int(limits), int(friction), limited, m.tendon_range, m.tendon_margin, m.tendon_solref_lim,
              m.tendon_solimp_lim, m.tendon_solref_fri, m.tendon_solimp_fri, m.tendon_frictionloss,
              m.tendon_invweight0, self.length, self.velocity, Ja], [self.force, self.D])
    P.launch("step", _row_forces, (n, nt, nv), [self.J, self.force], [qfrc_constraint])

  def inertia(self, qacc, cacc, tau) -> None:
    """Records (segment "step") the armature forces `J^T armature (J qacc + Jdot qvel)` into `tau`, the
    inverse dynamics at the acceleration `qacc` whose `mj_rne` body accelerations are `cacc`: the
    tendon acceleration from the sites' accelerations, so the Jacobian's rate needs no kernel of its
    own (MJWarp's `tendon_armature` into M and `tendon_bias` into qfrc_bias)."""
    if not self.armature:
      return
    m, P = self._m, self._P
    n, nt, nv = self.J.shape
    site_xpos, com, cvel = self._frames
    acc = self._arr((n, nt))
    self._accumulated.append(acc)
    if m.wrap_jnt_adr.shape[0]:
      P.launch("step", _joint_wrap_acc, (n, m.wrap_jnt_adr.shape[0]),
               [m.jnt_dofadr, m.wrap_objid, m.wrap_prm, m.tendon_armature, m.tendon_jnt_adr, m.wrap_jnt_adr, qacc],
               [acc])
    if m.wrap_site_pair_adr.shape[0]:
      P.launch("step", _site_segment_acc, (n, m.wrap_site_pair_adr.shape[0]),
               [m.opt.gravity, self._gravity_on, m.body_rootid, m.site_bodyid, m.wrap_objid, m.wrap_pulley_scale,
                m.tendon_armature, m.tendon_site_pair_adr, m.wrap_site_pair_adr, site_xpos, com, cvel, cacc], [acc])
    P.launch("step", _tendon_term, (n, nt, nv), [m.tendon_armature, 1.0, self.J, acc], [tau])
    if self._pairs is not None:
      P.launch("step", _unrelated_term, (n, self._pairs.shape[0]),
               [m.tendon_armature, 1.0, self._pairs, self.J, qacc], [tau])

  def implicit_damping(self, h: float, qacc_e, damp) -> None:
    """Records (segment "step") implicitfast's tendon damping term `h damping J^T J a_e` (on the tree's
    ancestor pairs, MJWarp's `_qderiv_tendon_damping`) into `damp`, the velocity terms `h B a_e`."""
    if not self.implicit_damping_on:
      return
    m, P = self._m, self._P
    n, nt, nv = self.J.shape
    ja = self._arr((n, nt))
    self._accumulated.append(ja)
    P.launch("step", _row_dot, (n, nt, nv), [self.J, qacc_e], [ja])
    P.launch("step", _tendon_term, (n, nt, nv), [m.tendon_damping, h, self.J, ja], [damp])
    if self._damping_pairs is not None:
      P.launch("step", _unrelated_term, (n, self._damping_pairs.shape[0]),
               [m.tendon_damping, h, self._damping_pairs, self.J, qacc_e], [damp])

  def hessian(self) -> None:
    """Adds the quadratic rows' `J^T D J` to `jtdj` (after the program's "step" segment ran)."""
    if self.any_rows:
      n, nt, nv = self.J.shape
      wp.launch(_tendon_jtdj, dim=(n, nt, nv), device=self.J.device, inputs=[self.J, self.D], outputs=[self.jtdj])


def _dofs_above(mjm: mujoco.MjModel, b: int) -> set:
  """The dofs that move body `b`."""
  out = set()
  while b > 0:
    out |= set(range(mjm.body_dofadr[b], mjm.body_dofadr[b] + mjm.body_dofnum[b]))
    b = mjm.body_parentid[b]
  return out


def _tendon_support(mjm: mujoco.MjModel, t: int) -> set:
  """The dofs tendon `t`'s Jacobian may move: a fixed tendon's joints, the dofs above a spatial
  tendon's sites and wrap geoms."""
  support = set()
  for k in range(mjm.tendon_adr[t], mjm.tendon_adr[t] + mjm.tendon_num[t]):
    typ, obj = mjm.wrap_type[k], mjm.wrap_objid[k]
    if typ == mujoco.mjtWrap.mjWRAP_JOINT:
      support.add(int(mjm.jnt_dofadr[obj]))
    elif typ == mujoco.mjtWrap.mjWRAP_SITE:
      support |= _dofs_above(mjm, mjm.site_bodyid[obj])
    elif typ in (mujoco.mjtWrap.mjWRAP_SPHERE, mujoco.mjtWrap.mjWRAP_CYLINDER):
      support |= _dofs_above(mjm, mjm.geom_bodyid[obj])
  return support


def _unrelated(mjm: mujoco.MjModel, supports, device):
  """`(row, i, j)` for each `(row, support)` and each pair of dofs in the support where neither dof is
  the other's ancestor, as a `wp.vec3i` array (None: no such pair)."""
  def chain(i):
    out = set()
    while i >= 0:
      out.add(int(i))
      i = mjm.dof_parentid[i]
    return out

  above = [chain(i) for i in range(mjm.nv)]
  pairs = [(int(r), i, j) for r, support in supports for i in sorted(support) for j in sorted(support)
           if i not in above[j] and j not in above[i]]
  return wp.array(np.array(pairs, np.int32).reshape(-1, 3), dtype=wp.vec3i, device=device) if pairs else None


def _unrelated_pairs(mjm: mujoco.MjModel, tendons, device):
  """`_unrelated` over `tendons`' supports."""
  return _unrelated(mjm, [(t, _tendon_support(mjm, t)) for t in tendons], device)


def record_transmission_damping(P, mjm: mujoco.MjModel, arr, accumulated, *, h: float, vel, moment, qacc_e, damp):
  """Records (segment "step") implicitfast's velocity-gain term of tendon and site actuators,
  `-h vel_u m_u m_u^T a_e` on the tree's ancestor pairs (MJWarp's `_qderiv_actuator_passive_actuation_sparse`;
  `vel` `(nworld, nu)` from `actuation._transmission_velocity_gain`, `m_u` the moments `(nworld, nu, nv)`)
  into `damp`, the velocity terms `h B a_e`."""
  n, nu, nv = moment.shape
  trn = [u for u in range(mjm.nu) if mjm.actuator_trntype[u] in (_TRN_TENDON, _TRN_SITE)]
  supports = [(u, _tendon_support(mjm, mjm.actuator_trnid[u, 0]) if mjm.actuator_trntype[u] == _TRN_TENDON
               else _dofs_above(mjm, mjm.site_bodyid[mjm.actuator_trnid[u, 0]])) for u in trn]
  ma = arr((n, nu))
  accumulated.append(ma)
  P.launch("step", _row_dot, (n, nu, nv), [moment, qacc_e], [ma])
  P.launch("step", _tendon_term, (n, nu, nv), [vel, -h, moment, ma], [damp])
  pairs = _unrelated(mjm, supports, P.device)
  if pairs is not None:
    P.launch("step", _unrelated_term, (n, pairs.shape[0]), [vel, -h, pairs, moment, qacc_e], [damp])
