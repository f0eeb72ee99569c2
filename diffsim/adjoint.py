"""The analytic adjoint of the MJWarp step: reverse mode through diffsim's own smooth dynamics.

MJWarp runs the forward step (one MJWarp world per world, no perturbation lanes) and diffsim keeps
each step's state and the acceleration `a` MJWarp's constraint solver returned. The backward pass
replays, step by step in reverse, diffsim's re-implementation of the step in kernels that Warp can
differentiate (one thread per world, tree walks through arrays, no loop-carried locals, nothing
written twice) and pushes the incoming adjoint through them. The step, as MuJoCo's Euler and
implicitfast integrators take it:

  r(a)   = tau_ID(q, v, a) - f(q, v, w, u, p, a) = 0           (the constraint solve, converged)
  (M + h B) a_e = M a                                          (B: implicitly integrated velocity terms)
  v' = v + h a_e,   q' = q (+) h v',   w' = w + h w_dot(w, u)

`tau_ID = M a + c(q, v)` is inverse dynamics (recursive Newton-Euler at a fixed acceleration), `f` the
actuator, passive and constraint forces (joint limits, dof friction and joint equalities: rows whose
force is `-D (J a - aref)` in the quadratic regime, a constant in the linear one), `B` the dof damping
(Euler; none when `eulerdamp` is off) or minus implicitfast's `qDeriv` (damping and the actuators'
velocity gains; on a free body, a tree of one free joint, also its bias force's velocity derivative,
the gyroscopic term, which makes that 6 x 6 block unsymmetric). By the implicit function theorem two
dense solves per step,

  (M + h B)^T mu = a_bar_e,     (M + J^T D J) lambda = -J^T D J mu,

give every upstream adjoint as the reverse pass of the replayed kernels seeded `-mu` on
`tau_ID(a_e) + h B a_e`, `-lambda` on `tau_ID(a)` and `mu + lambda` on `f`. The solver's iterations
are never replayed; without constraint rows `lambda = 0`. The integrator's vector-Jacobian product
is written by hand (the quaternion exponential's right Jacobian for ball and free joints).

The replayed forward values equal MJWarp's to float32 rounding (`tests/test_adjoint.py`). Coverage
is checked up front (`analytic_coverage`): a model feature the adjoint does not differentiate
(contacts, tendons, connect and weld equalities, ...) makes `gradient="auto"` fall back to the
finite-difference lanes, and `gradient="analytic"` an error that names it. Contact rows will slot
into the same constraint solve, with their Jacobians rebuilt from the frozen contact frames.
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

from mujoco_warp._src.types import mat66, vec5, vec6, vec10, vec12

from .joints import BALL, FREE, HINGE, SLIDE
from .params import flat_rows, model_field

__all__ = ["AnalyticStep", "analytic_coverage", "COVERED_PARAM_FIELDS"]

# Param fields the replayed kernels read (and so differentiate).
COVERED_PARAM_FIELDS = (
  "body_mass", "body_inertia", "body_ipos", "dof_damping", "dof_armature", "jnt_stiffness",
  "actuator_gainprm", "actuator_biasprm", "actuator_dynprm", "actuator_gear", "opt.gravity", "dof_frictionloss",
)

_MINVAL = 1e-15
_DYN_NONE, _DYN_INTEGRATOR, _DYN_FILTER, _DYN_FILTEREXACT = 0, 1, 2, 3
_GAIN_FIXED, _GAIN_AFFINE = 0, 1
_BIAS_NONE, _BIAS_AFFINE = 0, 1
_MINIMP, _MAXIMP = float(mujoco.mjMINIMP), float(mujoco.mjMAXIMP)
_O = mujoco.mjtObj
_OBJ_BODY, _OBJ_XBODY, _OBJ_SITE = int(_O.mjOBJ_BODY), int(_O.mjOBJ_XBODY), int(_O.mjOBJ_SITE)
_S = mujoco.mjtSensor
_SENS_JOINTPOS, _SENS_JOINTVEL = int(_S.mjSENS_JOINTPOS), int(_S.mjSENS_JOINTVEL)
_SENS_ACTUATORPOS, _SENS_ACTUATORVEL = int(_S.mjSENS_ACTUATORPOS), int(_S.mjSENS_ACTUATORVEL)
_SENS_ACTUATORFRC = int(_S.mjSENS_ACTUATORFRC)
_SENS_FRAMEPOS, _SENS_FRAMEQUAT = int(_S.mjSENS_FRAMEPOS), int(_S.mjSENS_FRAMEQUAT)
_SENS_FRAMEXAXIS, _SENS_FRAMEYAXIS, _SENS_FRAMEZAXIS = (int(_S.mjSENS_FRAMEXAXIS), int(_S.mjSENS_FRAMEYAXIS),
                                                        int(_S.mjSENS_FRAMEZAXIS))
_SENS_FRAMELINVEL, _SENS_FRAMEANGVEL = int(_S.mjSENS_FRAMELINVEL), int(_S.mjSENS_FRAMEANGVEL)
_SENS_SUBTREECOM = int(_S.mjSENS_SUBTREECOM)
_SENSORS = (_SENS_JOINTPOS, _SENS_JOINTVEL, _SENS_ACTUATORPOS, _SENS_ACTUATORVEL, _SENS_ACTUATORFRC, _SENS_FRAMEPOS,
            _SENS_FRAMEQUAT, _SENS_FRAMEXAXIS, _SENS_FRAMEYAXIS, _SENS_FRAMEZAXIS, _SENS_FRAMELINVEL,
            _SENS_FRAMEANGVEL, _SENS_SUBTREECOM)


def analytic_coverage(mjm: mujoco.MjModel, fields=()) -> str | None:
  """The first feature of `mjm` (or parameter field in `fields`) the analytic adjoint does not
  differentiate, as a phrase; `None` when it covers the model."""
  off = int(mjm.opt.disableflags)
  dsbl = mujoco.mjtDisableBit
  integrator = int(mjm.opt.integrator)
  if integrator not in (int(mujoco.mjtIntegrator.mjINT_EULER), int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST)):
    return f"the {mujoco.mjtIntegrator(integrator).name[6:].lower()} integrator (Euler and implicitfast only)"
  if mjm.opt.enableflags & mujoco.mjtEnableBit.mjENBL_SLEEP:
    return "sleeping bodies (the sleep enable flag)"
  from .scene import can_make_contacts

  constraints_on = not off & dsbl.mjDSBL_CONSTRAINT
  contacts = constraints_on and can_make_contacts(mjm)
  if contacts:
    if mjm.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC:
      return "contacts with elliptic friction cones (pyramidal cones only; <option cone=\"pyramidal\"/>)"
    if mjm.opt.noslip_iterations > 0:
      return "the noslip solver (noslip_iterations > 0)"
    if (mjm.ngeom and np.any(mjm.geom_adhesion)) or (mjm.npair and np.any(mjm.pair_adhesion)):
      return "adhesive contacts (geom or pair adhesion)"
    if mjm.ngeom and np.any(mjm.geom_surfacevel):
      return "contacts with surface velocity (geom surfacevel)"
  if mjm.ntendon:
    return "tendons"
  if constraints_on and not off & dsbl.mjDSBL_EQUALITY:
    for e in range(mjm.neq):
      if int(mjm.eq_type[e]) != int(mujoco.mjtEq.mjEQ_JOINT):
        return f"{mujoco.mjtEq(int(mjm.eq_type[e])).name[5:].lower()} equality constraints (joint equalities only)"
      for j in mjm.eq_obj1id[e], mjm.eq_obj2id[e]:
        if j >= 0 and mjm.jnt_type[j] not in (HINGE, SLIDE):
          return "joint equalities of ball or free joints"
  limits = constraints_on and not off & dsbl.mjDSBL_LIMIT and mjm.jnt_limited.any()
  friction = constraints_on and not off & dsbl.mjDSBL_FRICTIONLOSS and mjm.dof_frictionloss.any()
  if limits:
    for j in np.flatnonzero(mjm.jnt_limited):
      if mjm.jnt_type[j] not in (HINGE, SLIDE):
        return f"limits of ball joints (joint {_name(mjm, mujoco.mjtObj.mjOBJ_JOINT, int(j))})"
  equality = constraints_on and not off & dsbl.mjDSBL_EQUALITY and mjm.neq
  if limits or friction or equality or contacts:
    inertial = [f for f in fields if f in ("body_mass", "body_inertia", "body_ipos", "dof_armature")]
    if inertial:
      # the rows' regularization reads dof_invweight0 and body_invweight0, which MuJoCo derives from the
      # inertia at qpos0
      return (f"inertial parameter {inertial[0]} in a model with contacts, joint limits, dof friction or joint "
              "equalities (their constraint rows' softness depends on the inertia through dof_invweight0 and "
              "body_invweight0)")
  if mjm.nflex or mjm.nplugin:
    return "flexes or plugins"
  if mjm.nmocap:
    return "mocap bodies"
  if not off & dsbl.mjDSBL_SENSOR:
    for i in range(mjm.nsensor):
      why = _sensor_uncovered(mjm, i)
      if why:
        return f"sensor {_name(mjm, mujoco.mjtObj.mjOBJ_SENSOR, i)} ({why})"
  if not off & dsbl.mjDSBL_SPRING:
    rot = np.isin(mjm.jnt_type, (FREE, BALL))
    if (mjm.jnt_stiffness[rot] != 0).any():
      return "springs on ball or free joints"
  if (mjm.body_gravcomp != 0).any():
    return "gravity compensation"
  if mjm.opt.density or mjm.opt.viscosity:
    return "fluid forces"
  for name in ("dof_dampingpoly", "actuator_damping", "actuator_dampingpoly", "actuator_armature"):
    if getattr(mjm, name, np.zeros(1)).any():
      return name.replace("_", " ")
  if mjm.njnt and getattr(mjm, "jnt_actfrclimited", np.zeros(1)).any():
    return "joint actuator force limits (actuatorfrcrange)"
  for i in range(mjm.nu):
    name = _name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, i)
    trn = int(mjm.actuator_trntype[i])
    scalar = trn in (int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT)) and \
      mjm.jnt_type[mjm.actuator_trnid[i, 0]] in (SLIDE, HINGE)
    motor = trn == int(mujoco.mjtTrn.mjTRN_JOINT) and mjm.actuator_gaintype[i] == _GAIN_FIXED and \
      mjm.actuator_biastype[i] == _BIAS_NONE
    if not scalar and not motor:
      return (f"actuator {name}'s transmission (joints; on ball and free joints only motors without "
              "joint-in-parent)")
    if mjm.actuator_gaintype[i] not in (_GAIN_FIXED, _GAIN_AFFINE) or \
        mjm.actuator_biastype[i] not in (_BIAS_NONE, _BIAS_AFFINE):
      return f"actuator {name}'s gain or bias type (fixed and affine only)"
    if mjm.actuator_dyntype[i] not in (_DYN_NONE, _DYN_INTEGRATOR, _DYN_FILTER, _DYN_FILTEREXACT) or \
        mjm.actuator_actnum[i] > 1 or mjm.actuator_actearly[i]:
      return f"actuator {name}'s activation dynamics (none, integrator, filter, filterexact)"
  for f in fields:
    if f not in COVERED_PARAM_FIELDS:
      return f"parameter field {f} (covered: {', '.join(COVERED_PARAM_FIELDS)})"
  return None


def _sensor_uncovered(mjm: mujoco.MjModel, i: int) -> str | None:
  typ, objtype, obj = int(mjm.sensor_type[i]), int(mjm.sensor_objtype[i]), int(mjm.sensor_objid[i])
  if typ not in _SENSORS:
    return f"type {mujoco.mjtSensor(typ).name[7:].lower()}"
  if mjm.sensor_refid[i] >= 0:
    return "a reference frame"
  if typ in (_SENS_JOINTPOS, _SENS_JOINTVEL) and mjm.jnt_type[obj] not in (HINGE, SLIDE):
    return "a ball or free joint"
  if typ in (_SENS_FRAMEPOS, _SENS_FRAMEQUAT, _SENS_FRAMEXAXIS, _SENS_FRAMEYAXIS, _SENS_FRAMEZAXIS,
             _SENS_FRAMELINVEL, _SENS_FRAMEANGVEL) and objtype not in (_OBJ_BODY, _OBJ_XBODY, _OBJ_SITE):
    return "a frame that is not a body or site"
  if hasattr(mjm, "sensor_interval") and np.asarray(mjm.sensor_interval[i]).reshape(-1)[0] > 0:
    return "a sampling interval"
  return None


def _name(mjm, objtype, i: int) -> str:
  return mujoco.mj_id2name(mjm, objtype, i) or f"#{i}"


# ------------------------------------------------------------------------------------------------
# Rigid-body helpers (MuJoCo's quaternion order w, x, y, z in a wp.quat, as MJWarp stores them).
# Copies of MJWarp's math functions so that Warp generates their adjoints in this module.


@wp.func
def _mul_quat(u: wp.quat, v: wp.quat) -> wp.quat:
  return wp.quat(
    u[0] * v[0] - u[1] * v[1] - u[2] * v[2] - u[3] * v[3],
    u[0] * v[1] + u[1] * v[0] + u[2] * v[3] - u[3] * v[2],
    u[0] * v[2] - u[1] * v[3] + u[2] * v[0] + u[3] * v[1],
    u[0] * v[3] + u[1] * v[2] - u[2] * v[1] + u[3] * v[0],
  )


@wp.func
def _rot_vec_quat(vec: wp.vec3, quat: wp.quat) -> wp.vec3:
  s = quat[0]
  u = wp.vec3(quat[1], quat[2], quat[3])
  r = 2.0 * (wp.dot(u, vec) * u) + (s * s - wp.dot(u, u)) * vec
  return r + 2.0 * s * wp.cross(u, vec)


@wp.func
def _axis_angle_quat(axis: wp.vec3, angle: float) -> wp.quat:
  s = wp.sin(angle * 0.5)
  return wp.quat(wp.cos(angle * 0.5), axis[0] * s, axis[1] * s, axis[2] * s)


@wp.func
def _normalize_quat(q: wp.quat) -> wp.quat:
  n = wp.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
  if n < 1e-15:
    return wp.quat(1.0, 0.0, 0.0, 0.0)
  return wp.quat(q[0] / n, q[1] / n, q[2] / n, q[3] / n)


@wp.func
def _quat_to_mat(q: wp.quat) -> wp.mat33:
  q00 = q[0] * q[0]
  q01 = q[0] * q[1]
  q02 = q[0] * q[2]
  q03 = q[0] * q[3]
  q11 = q[1] * q[1]
  q12 = q[1] * q[2]
  q13 = q[1] * q[3]
  q22 = q[2] * q[2]
  q23 = q[2] * q[3]
  q33 = q[3] * q[3]
  return wp.mat33(
    q00 + q11 - q22 - q33, 2.0 * (q12 - q03), 2.0 * (q13 + q02),
    2.0 * (q12 + q03), q00 - q11 + q22 - q33, 2.0 * (q23 - q01),
    2.0 * (q13 - q02), 2.0 * (q23 + q01), q00 - q11 - q22 + q33,
  )


@wp.func
def _inert_vec(i: vec10, v: wp.spatial_vector) -> wp.spatial_vector:
  """6D inertia (rotation, translation) times a 6D motion, as `mju_mulInertVec`."""
  return wp.spatial_vector(
    i[0] * v[0] + i[3] * v[1] + i[4] * v[2] - i[8] * v[4] + i[7] * v[5],
    i[3] * v[0] + i[1] * v[1] + i[5] * v[2] + i[8] * v[3] - i[6] * v[5],
    i[4] * v[0] + i[5] * v[1] + i[2] * v[2] - i[7] * v[3] + i[6] * v[4],
    i[8] * v[1] - i[7] * v[2] + i[9] * v[3],
    i[6] * v[2] - i[8] * v[0] + i[9] * v[4],
    i[7] * v[0] - i[6] * v[1] + i[9] * v[5],
  )


@wp.func
def _motion_cross(u: wp.spatial_vector, v: wp.spatial_vector) -> wp.spatial_vector:
  u0 = wp.vec3(u[0], u[1], u[2])
  u1 = wp.vec3(u[3], u[4], u[5])
  v0 = wp.vec3(v[0], v[1], v[2])
  v1 = wp.vec3(v[3], v[4], v[5])
  return wp.spatial_vector(wp.cross(u0, v0), wp.cross(u1, v0) + wp.cross(u0, v1))


@wp.func
def _motion_cross_force(v: wp.spatial_vector, f: wp.spatial_vector) -> wp.spatial_vector:
  v0 = wp.vec3(v[0], v[1], v[2])
  v1 = wp.vec3(v[3], v[4], v[5])
  f0 = wp.vec3(f[0], f[1], f[2])
  f1 = wp.vec3(f[3], f[4], f[5])
  return wp.spatial_vector(wp.cross(v0, f0) + wp.cross(v1, f1), wp.cross(v0, f1))


# ------------------------------------------------------------------------------------------------
# The smooth dynamics, differentiable. Arrays are (nworld, n); model fields are read per world as
# `field[w % field.shape[0]]`, as MJWarp reads them.


@wp.kernel
def _kinematics(
  # Model:
  body_parentid: wp.array[int],
  body_jntnum: wp.array[int],
  body_jntadr: wp.array[int],
  body_pos: wp.array2d[wp.vec3],
  body_quat: wp.array2d[wp.quat],
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_pos: wp.array2d[wp.vec3],
  jnt_axis: wp.array2d[wp.vec3],
  qpos0: wp.array2d[float],
  # In:
  qpos: wp.array2d[float],
  # Out:
  jpos_out: wp.array2d[wp.vec3],  # (nworld, njnt) frame after each joint
  jquat_out: wp.array2d[wp.quat],
  xpos_out: wp.array2d[wp.vec3],  # (nworld, nbody)
  xquat_out: wp.array2d[wp.quat],
  xanchor_out: wp.array2d[wp.vec3],  # (nworld, njnt)
  xaxis_out: wp.array2d[wp.vec3],
):
  """Body frames from `qpos`, MJWarp's `_kinematics_branch` walked body by body (parents first);
  a body's joints chain through `jpos`/`jquat` so no frame is carried across loop iterations."""
  w = wp.tid()
  xpos_out[w, 0] = wp.vec3(0.0)
  xquat_out[w, 0] = wp.quat(1.0, 0.0, 0.0, 0.0)
  for b in range(1, body_parentid.shape[0]):
    pid = body_parentid[b]
    jntadr = body_jntadr[b]
    jntnum = body_jntnum[b]
    free = int(0)
    if jntnum == 1:
      free = int(jnt_type[jntadr] == FREE)
    if free != 0:
      qadr = jnt_qposadr[jntadr]
      fpos = wp.vec3(qpos[w, qadr], qpos[w, qadr + 1], qpos[w, qadr + 2])
      fquat = _normalize_quat(wp.quat(qpos[w, qadr + 3], qpos[w, qadr + 4], qpos[w, qadr + 5], qpos[w, qadr + 6]))
      xpos_out[w, b] = fpos
      xquat_out[w, b] = fquat
      xanchor_out[w, jntadr] = fpos
      xaxis_out[w, jntadr] = jnt_axis[w % jnt_axis.shape[0], jntadr]
    else:
      bq = body_quat[w % body_quat.shape[0], b]
      pos0 = _rot_vec_quat(body_pos[w % body_pos.shape[0], b], xquat_out[w, pid]) + xpos_out[w, pid]
      quat0 = _mul_quat(xquat_out[w, pid], bq)
      for jj in range(jntnum):
        j = jntadr + jj
        ppos = pos0
        pquat = quat0
        if jj > 0:
          ppos = jpos_out[w, j - 1]
          pquat = jquat_out[w, j - 1]
        typ = jnt_type[j]
        qadr = jnt_qposadr[j]
        jp = jnt_pos[w % jnt_pos.shape[0], j]
        ax = jnt_axis[w % jnt_axis.shape[0], j]
        anchor = _rot_vec_quat(jp, pquat) + ppos
        axis = _rot_vec_quat(ax, pquat)
        npos = ppos
        nquat = pquat
        if typ == BALL:
          qloc = _normalize_quat(wp.quat(qpos[w, qadr], qpos[w, qadr + 1], qpos[w, qadr + 2], qpos[w, qadr + 3]))
          nquat = _mul_quat(pquat, qloc)
          npos = anchor - _rot_vec_quat(jp, nquat)
        elif typ == SLIDE:
          npos = ppos + axis * (qpos[w, qadr] - qpos0[w % qpos0.shape[0], qadr])
        elif typ == HINGE:
          nquat = _mul_quat(pquat, _axis_angle_quat(ax, qpos[w, qadr] - qpos0[w % qpos0.shape[0], qadr]))
          npos = anchor - _rot_vec_quat(jp, nquat)
        jpos_out[w, j] = npos
        jquat_out[w, j] = nquat
        xanchor_out[w, j] = anchor
        xaxis_out[w, j] = axis
      if jntnum == 0:
        xpos_out[w, b] = pos0
        xquat_out[w, b] = _normalize_quat(quat0)
      else:
        xpos_out[w, b] = jpos_out[w, jntadr + jntnum - 1]
        xquat_out[w, b] = _normalize_quat(jquat_out[w, jntadr + jntnum - 1])


@wp.kernel
def _inertial_frames(
  # Model:
  body_ipos: wp.array2d[wp.vec3],
  body_iquat: wp.array2d[wp.quat],
  # In:
  xpos: wp.array2d[wp.vec3],
  xquat: wp.array2d[wp.quat],
  # Out:
  xmat_out: wp.array2d[wp.mat33],
  xipos_out: wp.array2d[wp.vec3],
  ximat_out: wp.array2d[wp.mat33],
):
  w, b = wp.tid()
  q = xquat[w, b]
  xmat_out[w, b] = _quat_to_mat(q)
  xipos_out[w, b] = xpos[w, b] + _rot_vec_quat(body_ipos[w % body_ipos.shape[0], b], q)
  ximat_out[w, b] = _quat_to_mat(_mul_quat(q, body_iquat[w % body_iquat.shape[0], b]))


@wp.kernel
def _subtree_sums(
  # Model:
  body_subtreenum: wp.array[int],
  body_mass: wp.array2d[float],
  # In:
  xipos: wp.array2d[wp.vec3],
  # Out (zeroed):
  mass_out: wp.array2d[float],  # (nworld, nbody) subtree mass
  moment_out: wp.array2d[wp.vec3],  # (nworld, nbody) subtree mass-weighted position
):
  w = wp.tid()
  mrow = w % body_mass.shape[0]
  for b in range(1, body_subtreenum.shape[0]):
    for j in range(b, b + body_subtreenum[b]):
      wp.atomic_add(mass_out, w, b, body_mass[mrow, j])
      wp.atomic_add(moment_out, w, b, body_mass[mrow, j] * xipos[w, j])


@wp.kernel
def _subtree_com(
  # In:
  xipos: wp.array2d[wp.vec3],
  mass: wp.array2d[float],
  moment: wp.array2d[wp.vec3],
  # Out:
  com_out: wp.array2d[wp.vec3],
):
  w, b = wp.tid()
  m = mass[w, b]
  if b == 0 or m < _MINVAL:
    com_out[w, b] = xipos[w, b]  # massless subtree: the body's inertial frame, as mj_comPos
  else:
    com_out[w, b] = moment[w, b] / m


@wp.kernel
def _cinert(
  # Model:
  body_rootid: wp.array[int],
  body_mass: wp.array2d[float],
  body_inertia: wp.array2d[wp.vec3],
  # In:
  xipos: wp.array2d[wp.vec3],
  ximat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  # Out:
  cinert_out: wp.array2d[vec10],
):
  """Body inertia about its tree's center of mass, in the world frame (`mju_inertCom`)."""
  w, b = wp.tid()
  mat = ximat[w, b]
  inert = body_inertia[w % body_inertia.shape[0], b]
  mass = body_mass[w % body_mass.shape[0], b]
  dif = xipos[w, b] - com[w, body_rootid[b]]
  row0 = wp.cw_mul(mat[0], inert)
  row1 = wp.cw_mul(mat[1], inert)
  row2 = wp.cw_mul(mat[2], inert)
  res = vec10(
    wp.dot(row0, mat[0]) + mass * (dif[1] * dif[1] + dif[2] * dif[2]),
    wp.dot(row1, mat[1]) + mass * (dif[0] * dif[0] + dif[2] * dif[2]),
    wp.dot(row2, mat[2]) + mass * (dif[0] * dif[0] + dif[1] * dif[1]),
    wp.dot(row0, mat[1]) - mass * dif[0] * dif[1],
    wp.dot(row0, mat[2]) - mass * dif[0] * dif[2],
    wp.dot(row1, mat[2]) - mass * dif[1] * dif[2],
    mass * dif[0], mass * dif[1], mass * dif[2], mass,
  )
  cinert_out[w, b] = res


@wp.kernel
def _cdof(
  # Model:
  body_rootid: wp.array[int],
  jnt_type: wp.array[int],
  jnt_dofadr: wp.array[int],
  jnt_bodyid: wp.array[int],
  # In:
  xmat: wp.array2d[wp.mat33],
  xanchor: wp.array2d[wp.vec3],
  xaxis: wp.array2d[wp.vec3],
  com: wp.array2d[wp.vec3],
  # Out:
  cdof_out: wp.array2d[wp.spatial_vector],
):
  """Each dof's motion axis about its tree's center of mass (MJWarp's `_cdof`)."""
  w, j = wp.tid()
  b = jnt_bodyid[j]
  d = jnt_dofadr[j]
  typ = jnt_type[j]
  axis = xaxis[w, j]
  rot = wp.transpose(xmat[w, b])
  offset = com[w, body_rootid[b]] - xanchor[w, j]
  if typ == FREE:
    cdof_out[w, d + 0] = wp.spatial_vector(0.0, 0.0, 0.0, 1.0, 0.0, 0.0)
    cdof_out[w, d + 1] = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 1.0, 0.0)
    cdof_out[w, d + 2] = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    cdof_out[w, d + 3] = wp.spatial_vector(rot[0], wp.cross(rot[0], offset))
    cdof_out[w, d + 4] = wp.spatial_vector(rot[1], wp.cross(rot[1], offset))
    cdof_out[w, d + 5] = wp.spatial_vector(rot[2], wp.cross(rot[2], offset))
  elif typ == BALL:
    cdof_out[w, d + 0] = wp.spatial_vector(rot[0], wp.cross(rot[0], offset))
    cdof_out[w, d + 1] = wp.spatial_vector(rot[1], wp.cross(rot[1], offset))
    cdof_out[w, d + 2] = wp.spatial_vector(rot[2], wp.cross(rot[2], offset))
  elif typ == SLIDE:
    cdof_out[w, d] = wp.spatial_vector(wp.vec3(0.0), axis)
  else:
    cdof_out[w, d] = wp.spatial_vector(axis, wp.cross(axis, offset))


@wp.kernel
def _velocities(
  # Tables:
  body_dof: wp.array2d[int],  # (npair, 2): body, a dof of it or of an ancestor
  dof_pre: wp.array2d[int],  # (npair, 2): dof, a dof moving its body before it (ancestors, earlier joints)
  # In:
  qvel: wp.array2d[float],
  cdof: wp.array2d[wp.spatial_vector],
  # Out (zeroed):
  cvel_out: wp.array2d[wp.spatial_vector],  # (nworld, nbody)
  cvel_pre_out: wp.array2d[wp.spatial_vector],  # (nworld, nv) velocity a dof's axis moves with
):
  w = wp.tid()
  for i in range(body_dof.shape[0]):
    d = body_dof[i, 1]
    wp.atomic_add(cvel_out, w, body_dof[i, 0], cdof[w, d] * qvel[w, d])
  for i in range(dof_pre.shape[0]):
    d = dof_pre[i, 1]
    wp.atomic_add(cvel_pre_out, w, dof_pre[i, 0], cdof[w, d] * qvel[w, d])


@wp.kernel
def _cdof_dot(
  # Tables:
  dof_still: wp.array[int],  # (nv,) 1: a free joint's translation, whose axis does not move
  # In:
  cvel_pre: wp.array2d[wp.spatial_vector],
  cdof: wp.array2d[wp.spatial_vector],
  # Out:
  cdof_dot_out: wp.array2d[wp.spatial_vector],
):
  w, d = wp.tid()
  if dof_still[d] != 0:
    cdof_dot_out[w, d] = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
  else:
    cdof_dot_out[w, d] = _motion_cross(cvel_pre[w, d], cdof[w, d])


@wp.kernel
def _accelerations(
  # Model:
  opt_gravity: wp.array[wp.vec3],
  gravity_on: float,
  # Tables:
  body_dof: wp.array2d[int],
  # In:
  qvel: wp.array2d[float],
  qacc: wp.array2d[float],
  cdof: wp.array2d[wp.spatial_vector],
  cdof_dot: wp.array2d[wp.spatial_vector],
  # Out (zeroed):
  cacc_out: wp.array2d[wp.spatial_vector],  # (nworld, nbody)
):
  """Body accelerations with gravity as an upward acceleration of the world (`mj_rne`)."""
  w = wp.tid()
  g = opt_gravity[w % opt_gravity.shape[0]] * gravity_on
  for b in range(1, cacc_out.shape[1]):
    wp.atomic_add(cacc_out, w, b, wp.spatial_vector(wp.vec3(0.0), -g))
  for i in range(body_dof.shape[0]):
    d = body_dof[i, 1]
    wp.atomic_add(cacc_out, w, body_dof[i, 0], cdof_dot[w, d] * qvel[w, d] + cdof[w, d] * qacc[w, d])


@wp.kernel
def _body_forces(
  # In:
  cinert: wp.array2d[vec10],
  cvel: wp.array2d[wp.spatial_vector],
  cacc: wp.array2d[wp.spatial_vector],
  # Out:
  cfrc_out: wp.array2d[wp.spatial_vector],
):
  w, b = wp.tid()
  if b == 0:
    cfrc_out[w, b] = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
  else:
    i = cinert[w, b]
    v = cvel[w, b]
    cfrc_out[w, b] = _inert_vec(i, cacc[w, b]) + _motion_cross_force(v, _inert_vec(i, v))


@wp.kernel
def _subtree_forces(
  # Model:
  body_subtreenum: wp.array[int],
  # In:
  cfrc: wp.array2d[wp.spatial_vector],
  # Out (zeroed):
  cfrc_int_out: wp.array2d[wp.spatial_vector],
):
  w = wp.tid()
  for b in range(1, body_subtreenum.shape[0]):
    for j in range(b, b + body_subtreenum[b]):
      wp.atomic_add(cfrc_int_out, w, b, cfrc[w, j])


@wp.kernel
def _joint_forces(
  # Model:
  dof_bodyid: wp.array[int],
  dof_armature: wp.array2d[float],
  # In:
  qacc: wp.array2d[float],
  cdof: wp.array2d[wp.spatial_vector],
  cfrc_int: wp.array2d[wp.spatial_vector],
  # Out:
  tau_out: wp.array2d[float],  # (nworld, nv) inverse dynamics M qacc + c
):
  w, d = wp.tid()
  armature = dof_armature[w % dof_armature.shape[0], d]
  tau_out[w, d] = wp.dot(cdof[w, d], cfrc_int[w, dof_bodyid[d]]) + armature * qacc[w, d]


@wp.kernel
def _passive(
  # Model:
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  jnt_stiffness: wp.array2d[float],
  qpos_spring: wp.array2d[float],
  dof_damping: wp.array2d[float],
  spring_on: float,
  damper_on: float,
  # In:
  qpos: wp.array2d[float],
  qvel: wp.array2d[float],
  # Out:
  qfrc_out: wp.array2d[float],  # (nworld, nv)
):
  """Joint springs (hinge, slide) and dof dampers."""
  w, j = wp.tid()
  typ = jnt_type[j]
  d = jnt_dofadr[j]
  drow = w % dof_damping.shape[0]
  if typ == HINGE or typ == SLIDE:
    qadr = jnt_qposadr[j]
    stiffness = jnt_stiffness[w % jnt_stiffness.shape[0], j]
    spring = -stiffness * (qpos[w, qadr] - qpos_spring[w % qpos_spring.shape[0], qadr])
    qfrc_out[w, d] = spring * spring_on - damper_on * dof_damping[drow, d] * qvel[w, d]
  elif typ == BALL:
    for i in range(3):
      qfrc_out[w, d + i] = -damper_on * dof_damping[drow, d + i] * qvel[w, d + i]
  else:
    for i in range(6):
      qfrc_out[w, d + i] = -damper_on * dof_damping[drow, d + i] * qvel[w, d + i]


@wp.kernel
def _actuation(
  # Model:
  opt_timestep: float,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  actuator_trnid: wp.array[wp.vec2i],
  actuator_dyntype: wp.array[int],
  actuator_gaintype: wp.array[int],
  actuator_biastype: wp.array[int],
  actuator_actadr: wp.array[int],
  actuator_ctrllimited: wp.array[bool],
  actuator_forcelimited: wp.array[bool],
  actuator_actlimited: wp.array[bool],
  actuator_ctrlrange: wp.array2d[wp.vec2],
  actuator_forcerange: wp.array2d[wp.vec2],
  actuator_actrange: wp.array2d[wp.vec2],
  actuator_gear: wp.array2d[wp.spatial_vector],
  actuator_dynprm: wp.array2d[vec10],
  actuator_gainprm: wp.array2d[vec10],
  actuator_biasprm: wp.array2d[vec10],
  clampctrl: int,
  # In:
  qpos: wp.array2d[float],
  qvel: wp.array2d[float],
  act: wp.array2d[float],
  ctrl: wp.array2d[float],
  # Out:
  qfrc_out: wp.array2d[float],  # (nworld, nv), zeroed
  force_out: wp.array2d[float],  # (nworld, nu) actuator forces
  act_next_out: wp.array2d[float],  # (nworld, na) activations after the step
):
  """Joint-transmission actuators: `force = gain * (ctrl or act) + bias`, as MJWarp's
  `_actuator_force`, and the activation's Euler step (`next_act`). Ball and free joints: motors
  (fixed gain, no bias), whose moment is the gear."""
  w, u = wp.tid()
  c = ctrl[w, u]
  if actuator_ctrllimited[u] and clampctrl != 0:
    r = actuator_ctrlrange[w % actuator_ctrlrange.shape[0], u]
    c = wp.clamp(c, r[0], r[1])
  dyn = actuator_dyntype[u]
  inp = c
  if dyn != _DYN_NONE:
    adr = actuator_actadr[u]
    a = act[w, adr]
    dynprm = actuator_dynprm[w % actuator_dynprm.shape[0], u]
    adot = c
    if dyn == _DYN_FILTER or dyn == _DYN_FILTEREXACT:
      adot = (c - a) / wp.max(dynprm[0], _MINVAL)
    anext = a + adot * opt_timestep
    if dyn == _DYN_FILTEREXACT:
      tau = wp.max(_MINVAL, dynprm[0])
      anext = a + adot * tau * (1.0 - wp.exp(-opt_timestep / tau))
    if actuator_actlimited[u]:
      r = actuator_actrange[w % actuator_actrange.shape[0], u]
      anext = wp.clamp(anext, r[0], r[1])
    act_next_out[w, adr] = anext
    inp = a
  jnt = actuator_trnid[u][0]
  gears = actuator_gear[w % actuator_gear.shape[0], u]
  gear = gears[0]
  d = jnt_dofadr[jnt]
  typ = jnt_type[jnt]
  length = float(0.0)
  velocity = float(0.0)
  if typ == HINGE or typ == SLIDE:
    length = gear * qpos[w, jnt_qposadr[jnt]]
    velocity = gear * qvel[w, d]
  gainprm = actuator_gainprm[w % actuator_gainprm.shape[0], u]
  biasprm = actuator_biasprm[w % actuator_biasprm.shape[0], u]
  gain = gainprm[0]
  if actuator_gaintype[u] == _GAIN_AFFINE:
    gain = gainprm[0] + gainprm[1] * length + gainprm[2] * velocity
  bias = float(0.0)
  if actuator_biastype[u] == _BIAS_AFFINE:
    bias = biasprm[0] + biasprm[1] * length + biasprm[2] * velocity
  force = gain * inp + bias
  if actuator_forcelimited[u]:
    r = actuator_forcerange[w % actuator_forcerange.shape[0], u]
    force = wp.clamp(force, r[0], r[1])
  force_out[w, u] = force
  if typ == HINGE or typ == SLIDE:
    wp.atomic_add(qfrc_out, w, d, gear * force)
  elif typ == BALL:
    for i in range(3):
      wp.atomic_add(qfrc_out, w, d + i, gears[i] * force)
  else:
    for i in range(6):
      wp.atomic_add(qfrc_out, w, d + i, gears[i] * force)


@wp.kernel
def _damping_diag(
  # Model:
  dof_damping: wp.array2d[float],
  damper_on: float,
  # Out:
  bdiag_out: wp.array2d[float],  # (nworld, nv) -d(smooth force)/d(qvel), the implicitly integrated part
):
  w, d = wp.tid()
  bdiag_out[w, d] = damper_on * dof_damping[w % dof_damping.shape[0], d]


@wp.kernel
def _actuator_velocity_diag(
  # Model:
  jnt_type: wp.array[int],
  jnt_dofadr: wp.array[int],
  actuator_trnid: wp.array[wp.vec2i],
  actuator_dyntype: wp.array[int],
  actuator_gaintype: wp.array[int],
  actuator_biastype: wp.array[int],
  actuator_actadr: wp.array[int],
  actuator_forcelimited: wp.array[bool],
  actuator_forcerange: wp.array2d[wp.vec2],
  actuator_gear: wp.array2d[wp.spatial_vector],
  actuator_gainprm: wp.array2d[vec10],
  actuator_biasprm: wp.array2d[vec10],
  # In:
  act: wp.array2d[float],
  ctrl: wp.array2d[float],
  actuator_force: wp.array2d[float],
  # Out:
  bdiag_out: wp.array2d[float],
):
  """implicitfast's actuator term of `-qDeriv`: `-gear^2 (biasprm[2] + gainprm[2] * input)` of
  affine actuators whose force is not clamped (MJWarp's `_qderiv_actuator_passive_vel`)."""
  w, u = wp.tid()
  jnt = actuator_trnid[u][0]
  typ = jnt_type[jnt]
  if typ == HINGE or typ == SLIDE:
    gain = float(0.0)
    if actuator_gaintype[u] == _GAIN_AFFINE:
      gain = actuator_gainprm[w % actuator_gainprm.shape[0], u][2]
    bias = float(0.0)
    if actuator_biastype[u] == _BIAS_AFFINE:
      bias = actuator_biasprm[w % actuator_biasprm.shape[0], u][2]
    clamped = int(0)
    if actuator_forcelimited[u]:
      r = actuator_forcerange[w % actuator_forcerange.shape[0], u]
      f = actuator_force[w, u]
      if f <= r[0] or f >= r[1]:
        clamped = 1
    if clamped == 0:
      vel = bias
      if actuator_dyntype[u] != _DYN_NONE:
        vel = bias + gain * act[w, actuator_actadr[u]]
      else:
        vel = bias + gain * ctrl[w, u]
      gear = actuator_gear[w % actuator_gear.shape[0], u][0]
      wp.atomic_add(bdiag_out, w, jnt_dofadr[jnt], -gear * gear * vel)


@wp.kernel
def _damping_term(
  # In:
  h_damp: float,  # timestep when velocity terms are integrated implicitly, else 0
  bdiag: wp.array2d[float],
  qacc: wp.array2d[float],
  # Out:
  out: wp.array2d[float],
):
  w, d = wp.tid()
  out[w, d] = h_damp * bdiag[w, d] * qacc[w, d]


@wp.func
def _free_gyro(crb: vec10, R: wp.mat33, s: wp.vec3, qvel_rot: wp.vec3, a_rot: wp.vec3) -> wp.spatial_vector:
  """`(d qfrc_bias / d qvel) a` for a free rigid subtree, whose bias force depends on the velocity
  through its angular part only: MuJoCo's `mjd_freeMhat` (MJWarp's `free_bias_vel_blocks`).
  `crb`: the subtree's composite inertia about its com, `R`: the body frame, `s`: com - body origin,
  `qvel_rot`, `a_rot`: the free joint's angular velocity and the vector's angular part (body frame)."""
  mass = crb[9]
  Iw = wp.mat33(crb[0], crb[3], crb[4], crb[3], crb[1], crb[5], crb[4], crb[5], crb[2])
  w = R @ qvel_rot
  K = wp.outer(s, w) - wp.identity(3, float) * wp.dot(w, s) + wp.skew(wp.cross(w, s))
  C = -mass * (wp.skew(s) @ K) + wp.skew(w) @ Iw - wp.skew(Iw @ w)
  lin = -mass * ((K @ R) @ a_rot)
  rot = (wp.transpose(R) @ C @ R) @ a_rot
  return wp.spatial_vector(lin[0], lin[1], lin[2], rot[0], rot[1], rot[2])


@wp.kernel
def _free_crb(
  # Model:
  body_subtreenum: wp.array[int],
  free_body: wp.array[int],  # (nfree,) bodies whose tree is one free joint (MJWarp's body_freeadr)
  # In:
  cinert: wp.array2d[vec10],
  # Out (zeroed):
  crb_out: wp.array2d[vec10],  # (nworld, nfree) composite inertia of the free body's rigid subtree
):
  w, f = wp.tid()
  b = free_body[f]
  for j in range(b, b + body_subtreenum[b]):
    wp.atomic_add(crb_out, w, f, cinert[w, j])


@wp.kernel
def _free_gyro_term(
  # Model:
  body_dofadr: wp.array[int],
  free_body: wp.array[int],
  h_damp: float,
  # In:
  crb: wp.array2d[vec10],
  xpos: wp.array2d[wp.vec3],
  xmat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  qvel: wp.array2d[float],
  qacc_e: wp.array2d[float],
  # Out:
  out: wp.array2d[float],  # (nworld, nv) `h B a_e`: adds the free bodies' gyroscopic part
):
  """implicitfast integrates free bodies' gyroscopic forces implicitly: `h (d qfrc_bias / d qvel) a_e`
  joins the damping term on their rows."""
  w, f = wp.tid()
  b = free_body[f]
  d = body_dofadr[b]
  g = _free_gyro(crb[w, f], xmat[w, b], com[w, b] - xpos[w, b], wp.vec3(qvel[w, d + 3], qvel[w, d + 4], qvel[w, d + 5]),
                 wp.vec3(qacc_e[w, d + 3], qacc_e[w, d + 4], qacc_e[w, d + 5]))
  for i in range(6):
    wp.atomic_add(out, w, d + i, h_damp * g[i])


@wp.kernel
def _site_frames(
  # Model:
  site_bodyid: wp.array[int],
  site_pos: wp.array2d[wp.vec3],
  site_quat: wp.array2d[wp.quat],
  # In:
  xpos: wp.array2d[wp.vec3],
  xquat: wp.array2d[wp.quat],
  # Out:
  site_xpos_out: wp.array2d[wp.vec3],
  site_xquat_out: wp.array2d[wp.quat],
  site_xmat_out: wp.array2d[wp.mat33],
):
  w, i = wp.tid()
  b = site_bodyid[i]
  q = _mul_quat(xquat[w, b], site_quat[w % site_quat.shape[0], i])
  site_xpos_out[w, i] = xpos[w, b] + _rot_vec_quat(site_pos[w % site_pos.shape[0], i], xquat[w, b])
  site_xquat_out[w, i] = q
  site_xmat_out[w, i] = _quat_to_mat(q)


@wp.kernel
def _sensors(
  # Model:
  sensor_type: wp.array[int],
  sensor_objtype: wp.array[int],
  sensor_objid: wp.array[int],
  sensor_adr: wp.array[int],
  sensor_cutoff: wp.array[float],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  site_bodyid: wp.array[int],
  body_rootid: wp.array[int],
  body_iquat: wp.array2d[wp.quat],
  actuator_trnid: wp.array[wp.vec2i],
  actuator_gear: wp.array2d[wp.spatial_vector],
  # In:
  qpos: wp.array2d[float],
  qvel: wp.array2d[float],
  xpos: wp.array2d[wp.vec3],
  xquat: wp.array2d[wp.quat],
  xmat: wp.array2d[wp.mat33],
  xipos: wp.array2d[wp.vec3],
  ximat: wp.array2d[wp.mat33],
  site_xpos: wp.array2d[wp.vec3],
  site_xquat: wp.array2d[wp.quat],
  site_xmat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  cvel: wp.array2d[wp.spatial_vector],
  actuator_force: wp.array2d[float],
  # Out:
  sensordata_out: wp.array2d[float],
):
  """The position- and velocity-stage sensors of bodies and sites (no reference frame), and the
  actuator sensors, as MJWarp's `sensor_pos`/`sensor_vel`/`sensor_acc` compute them."""
  w, s = wp.tid()
  typ = sensor_type[s]
  objtype = sensor_objtype[s]
  objid = sensor_objid[s]
  adr = sensor_adr[s]
  cutoff = sensor_cutoff[s]
  if typ == _SENS_JOINTPOS or typ == _SENS_JOINTVEL or typ == _SENS_ACTUATORPOS or typ == _SENS_ACTUATORVEL or \
      typ == _SENS_ACTUATORFRC:
    v = float(0.0)
    if typ == _SENS_JOINTPOS:
      v = qpos[w, jnt_qposadr[objid]]
    elif typ == _SENS_JOINTVEL:
      v = qvel[w, jnt_dofadr[objid]]
    elif typ == _SENS_ACTUATORFRC:
      v = actuator_force[w, objid]
    else:
      jnt = actuator_trnid[objid][0]
      gear = actuator_gear[w % actuator_gear.shape[0], objid][0]
      if typ == _SENS_ACTUATORPOS:
        v = gear * qpos[w, jnt_qposadr[jnt]]
      else:
        v = gear * qvel[w, jnt_dofadr[jnt]]
    if cutoff > 0.0:
      v = wp.clamp(v, -cutoff, cutoff)
    sensordata_out[w, adr] = v
  elif typ == _SENS_FRAMEQUAT:
    q = xquat[w, objid]
    if objtype == _OBJ_BODY:
      q = _mul_quat(xquat[w, objid], body_iquat[w % body_iquat.shape[0], objid])
    elif objtype == _OBJ_SITE:
      q = site_xquat[w, objid]
    for i in range(4):
      v = q[i]
      if cutoff > 0.0:
        v = wp.clamp(v, -cutoff, cutoff)
      sensordata_out[w, adr + i] = v
  else:
    pos = xpos[w, objid]
    mat = xmat[w, objid]
    body = objid
    if objtype == _OBJ_BODY:
      pos = xipos[w, objid]
      mat = ximat[w, objid]
    elif objtype == _OBJ_SITE:
      pos = site_xpos[w, objid]
      mat = site_xmat[w, objid]
      body = site_bodyid[objid]
    out = pos
    if typ == _SENS_FRAMEXAXIS:
      out = wp.vec3(mat[0, 0], mat[1, 0], mat[2, 0])
    elif typ == _SENS_FRAMEYAXIS:
      out = wp.vec3(mat[0, 1], mat[1, 1], mat[2, 1])
    elif typ == _SENS_FRAMEZAXIS:
      out = wp.vec3(mat[0, 2], mat[1, 2], mat[2, 2])
    elif typ == _SENS_FRAMELINVEL:
      cv = cvel[w, body]
      offset = pos - com[w, body_rootid[body]]
      out = wp.vec3(cv[3], cv[4], cv[5]) - wp.cross(offset, wp.vec3(cv[0], cv[1], cv[2]))
    elif typ == _SENS_FRAMEANGVEL:
      cv = cvel[w, body]
      out = wp.vec3(cv[0], cv[1], cv[2])
    elif typ == _SENS_SUBTREECOM:
      out = com[w, objid]
    for i in range(3):
      v = out[i]
      if cutoff > 0.0:
        v = wp.clamp(v, -cutoff, cutoff)
      sensordata_out[w, adr + i] = v


@wp.func
def _kbimp(timestep: float, refsafe: int, solref: wp.vec2, solimp: vec5, pos: float) -> wp.vec3:
  """A constraint row's reference stiffness, damping and impedance (MJWarp's `_contact_kbimp`)."""
  timeconst = solref[0]
  dampratio = solref[1]
  dmin = wp.clamp(solimp[0], _MINIMP, _MAXIMP)
  dmax = wp.clamp(solimp[1], _MINIMP, _MAXIMP)
  width = wp.max(_MINVAL, solimp[2])
  mid = wp.clamp(solimp[3], _MINIMP, _MAXIMP)
  power = wp.max(1.0, solimp[4])
  if refsafe != 0:
    timeconst = wp.max(timeconst, 2.0 * timestep)
  dmax_sq = dmax * dmax
  k = float(0.0)
  if solref[0] <= 0.0:
    k = -solref[0] / wp.max(_MINVAL, dmax_sq)
  else:
    k = 1.0 / wp.max(_MINVAL, dmax_sq * timeconst * timeconst * dampratio * dampratio)
  b = float(0.0)
  if solref[1] <= 0.0:
    b = -solref[1] / wp.max(_MINVAL, dmax)
  else:
    b = 2.0 / wp.max(_MINVAL, dmax * timeconst)
  x = wp.abs(pos) / width
  imp = float(0.0)
  if dmin == dmax or solimp[2] <= _MINVAL:
    imp = 0.5 * (dmin + dmax)
  elif x <= 0.0:
    imp = dmin
  elif x >= 1.0:
    imp = dmax
  elif power == 1.0:
    imp = dmin + x * (dmax - dmin)
  elif x <= mid:
    y = (1.0 / wp.pow(mid, power - 1.0)) * wp.pow(x, power)
    imp = wp.clamp(dmin + y * (dmax - dmin), dmin, dmax)
  else:
    y = 1.0 - (1.0 / wp.pow(1.0 - mid, power - 1.0)) * wp.pow(1.0 - x, power)
    imp = wp.clamp(dmin + y * (dmax - dmin), dmin, dmax)
  return wp.vec3(k, b, imp)


@wp.kernel
def _limit_rows(
  # Model:
  opt_timestep: float,
  refsafe: int,
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  jnt_solref: wp.array2d[wp.vec2],
  jnt_solimp: wp.array2d[vec5],
  jnt_range: wp.array2d[wp.vec2],
  jnt_margin: wp.array2d[float],
  dof_invweight0: wp.array2d[float],
  limited: wp.array[int],  # (nlimited,) limited hinge and slide joints
  # In:
  qpos: wp.array2d[float],
  qvel: wp.array2d[float],
  qacc: wp.array2d[float],  # the solver's acceleration (fixed)
  # Out (zeroed):
  qfrc_out: wp.array2d[float],  # (nworld, nv) J^T force
  jtdj_out: wp.array3d[float],  # (nworld, nv, nv) J^T D J of the rows in the quadratic regime
):
  """Joint-limit rows (MJWarp's `_limit_slide_hinge` and the Newton solver's row update) at the
  solver's acceleration: force `-D (J a - aref)` where the limit pushes, 0 where it is satisfied."""
  w, i = wp.tid()
  j = limited[i]
  d = jnt_dofadr[j]
  r = jnt_range[w % jnt_range.shape[0], j]
  q = qpos[w, jnt_qposadr[j]]
  dist_min = q - r[0]
  dist_max = r[1] - q
  pos = wp.min(dist_min, dist_max) - jnt_margin[w % jnt_margin.shape[0], j]
  if pos < 0.0:
    J = float(1.0)
    if dist_min >= dist_max:
      J = -1.0
    kbi = _kbimp(opt_timestep, refsafe, jnt_solref[w % jnt_solref.shape[0], j], jnt_solimp[w % jnt_solimp.shape[0], j],
                 pos)
    aref = -kbi[0] * kbi[2] * pos - kbi[1] * J * qvel[w, d]
    imp = kbi[2]
    D = 1.0 / wp.max(dof_invweight0[w % dof_invweight0.shape[0], d] * (1.0 - imp) / imp, _MINVAL)
    jar = J * qacc[w, d] - aref
    if jar < 0.0:
      wp.atomic_add(qfrc_out, w, d, -J * D * jar)
      wp.atomic_add(jtdj_out, w, d, d, D)


@wp.kernel
def _friction_rows(
  # Model:
  opt_timestep: float,
  refsafe: int,
  dof_solref: wp.array2d[wp.vec2],
  dof_solimp: wp.array2d[vec5],
  dof_frictionloss: wp.array2d[float],
  dof_invweight0: wp.array2d[float],
  # In:
  qvel: wp.array2d[float],
  qacc: wp.array2d[float],
  # Out (zeroed):
  qfrc_out: wp.array2d[float],
  jtdj_out: wp.array3d[float],
):
  """Dof friction rows: force `-D (a - aref)` within `[-frictionloss, frictionloss]` (quadratic
  regime), else the bound (linear regime)."""
  w, d = wp.tid()
  fl = dof_frictionloss[w % dof_frictionloss.shape[0], d]
  if fl > 0.0:
    kbi = _kbimp(opt_timestep, refsafe, dof_solref[w % dof_solref.shape[0], d], dof_solimp[w % dof_solimp.shape[0], d],
                 0.0)
    imp = kbi[2]
    R = wp.max(dof_invweight0[w % dof_invweight0.shape[0], d] * (1.0 - imp) / imp, _MINVAL)
    jar = qacc[w, d] + kbi[1] * qvel[w, d]
    if jar <= -R * fl:
      wp.atomic_add(qfrc_out, w, d, fl)
    elif jar >= R * fl:
      wp.atomic_add(qfrc_out, w, d, -fl)
    else:
      wp.atomic_add(qfrc_out, w, d, -jar / R)
      wp.atomic_add(jtdj_out, w, d, d, 1.0 / R)


@wp.kernel
def _joint_equality_rows(
  # Model:
  opt_timestep: float,
  refsafe: int,
  qpos0: wp.array2d[float],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_invweight0: wp.array2d[float],
  eq_obj1id: wp.array[int],
  eq_obj2id: wp.array[int],
  eq_solref: wp.array2d[wp.vec2],
  eq_solimp: wp.array2d[vec5],
  eq_data: wp.array2d[vec12],
  eqs: wp.array[int],  # (neq,) active joint equalities
  # In:
  qpos: wp.array2d[float],
  qvel: wp.array2d[float],
  qacc: wp.array2d[float],
  # Out (zeroed):
  qfrc_out: wp.array2d[float],
  jtdj_out: wp.array3d[float],
):
  """Joint equality rows, `q1 - q1_0 = poly(q2 - q2_0)` (MJWarp's `_equality_joint`); always in the
  quadratic regime."""
  w, i = wp.tid()
  e = eqs[i]
  data = eq_data[w % eq_data.shape[0], e]
  j1 = eq_obj1id[e]
  j2 = eq_obj2id[e]
  d1 = jnt_dofadr[j1]
  q1 = jnt_qposadr[j1]
  row0 = w % qpos0.shape[0]
  iw = w % dof_invweight0.shape[0]
  pos = qpos[w, q1] - qpos0[row0, q1] - data[0]
  J2 = float(0.0)
  d2 = d1
  invweight = dof_invweight0[iw, d1]
  if j2 > -1:
    q2 = jnt_qposadr[j2]
    d2 = jnt_dofadr[j2]
    dif = qpos[w, q2] - qpos0[row0, q2]
    rhs = data[0] + dif * (data[1] + dif * (data[2] + dif * (data[3] + dif * data[4])))
    J2 = -(data[1] + dif * (2.0 * data[2] + dif * (3.0 * data[3] + dif * 4.0 * data[4])))
    pos = qpos[w, q1] - qpos0[row0, q1] - rhs
    invweight = dof_invweight0[iw, d1] + dof_invweight0[iw, d2]
  vel = qvel[w, d1] + J2 * qvel[w, d2]
  kbi = _kbimp(opt_timestep, refsafe, eq_solref[w % eq_solref.shape[0], e], eq_solimp[w % eq_solimp.shape[0], e], pos)
  imp = kbi[2]
  D = 1.0 / wp.max(invweight * (1.0 - imp) / imp, _MINVAL)
  aref = -kbi[0] * imp * pos - kbi[1] * vel
  jar = qacc[w, d1] + J2 * qacc[w, d2] - aref
  f = -D * jar
  wp.atomic_add(qfrc_out, w, d1, f)
  wp.atomic_add(jtdj_out, w, d1, d1, D)
  if j2 > -1:
    wp.atomic_add(qfrc_out, w, d2, J2 * f)
    wp.atomic_add(jtdj_out, w, d1, d2, D * J2)
    wp.atomic_add(jtdj_out, w, d2, d1, D * J2)
    wp.atomic_add(jtdj_out, w, d2, d2, D * J2 * J2)


# ------------------------------------------------------------------------------------------------
# Hand-written, forward-only pieces: the mass matrix, its solve and the integrator's VJP.


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
  # Out:
  M_out: wp.array3d[float],  # (nworld, nv, nv) M, dense
  H_out: wp.array3d[float],  # (nworld, nv, nv) Cholesky factor of M + h_damp diag(bdiag), lower
):
  """Composite-rigid-body mass matrix (MJWarp's `crb`), dense, and the factor of the matrix the
  Euler (or implicitfast) step solves with, `M + h B`."""
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
  for i in range(nv):
    for j in range(i + 1):
      v = M_out[w, i, j]
      if i == j:
        v += h_damp * bdiag[w, i]
      H_out[w, i, j] = v
  _cholesky(H_out, w, nv)


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
def _load_step(
  # In:
  k: int,
  kc: int,
  kq: int,
  qpos: wp.array3d[float],
  qvel: wp.array3d[float],
  act: wp.array3d[float],
  ctrl: wp.array3d[float],
  qacc: wp.array3d[float],
  # Out:
  qpos_out: wp.array2d[float],
  qvel_out: wp.array2d[float],
  act_out: wp.array2d[float],
  ctrl_out: wp.array2d[float],
  qacc_out: wp.array2d[float],
):
  w = wp.tid()
  for i in range(qpos.shape[2]):
    qpos_out[w, i] = qpos[w, k, i]
  for i in range(qvel.shape[2]):
    qvel_out[w, i] = qvel[w, k, i]
    qacc_out[w, i] = qacc[w, kq, i]
  for i in range(act.shape[2]):
    act_out[w, i] = act[w, k, i]
  for i in range(ctrl.shape[2]):
    ctrl_out[w, i] = ctrl[w, kc, i]


@wp.kernel(enable_backward=False)
def _constraint_adjoint(
  # In:
  M: wp.array3d[float],
  jtdj: wp.array3d[float],  # (nworld, nv, nv) J^T D J of the quadratic rows
  mu: wp.array2d[float],
  # Out:
  L_out: wp.array3d[float],  # (nworld, nv, nv) scratch: Cholesky factor of H = M + J^T D J
  lam_out: wp.array2d[float],  # (nworld, nv) H^-1 (-J^T D J mu): the solver acceleration's adjoint
):
  """Implicit function theorem through the constraint solve: the Euler step's `a_e` depends on the
  solver's `a` through the constraint forces, `a_bar = -J^T D J mu`, and `H lambda = a_bar`."""
  w = wp.tid()
  nv = mu.shape[1]
  for i in range(nv):
    for j in range(i + 1):
      L_out[w, i, j] = M[w, i, j] + jtdj[w, i, j]
  _cholesky(L_out, w, nv)
  for i in range(nv):
    s = float(0.0)
    for j in range(nv):
      s -= jtdj[w, i, j] * mu[w, j]
    lam_out[w, i] = s
  _chol_solve(L_out, w, lam_out)


@wp.kernel(enable_backward=False)
def _seed(
  # In:
  k: int,
  nv: int,
  mu: wp.array2d[float],  # (nworld, nv) adjoint through the damped Euler solve
  lam_a: wp.array2d[float],  # (nworld, nv) adjoint through the constraint solve (0 without rows)
  lam: wp.array3d[float],
  # Out:
  tau_e_grad: wp.array2d[float],
  tau_a_grad: wp.array2d[float],
  damp_grad: wp.array2d[float],
  force_grad: wp.array2d[float],  # actuator, passive and constraint forces share one adjoint
  act_next_grad: wp.array2d[float],
):
  """Seeds of the residuals `tau_ID(a_e) + h B a_e - f` (times `-mu`) and `tau_ID(a) - f` (times
  `-lambda`), `f` the actuator, passive and constraint forces, and of the activations after the step."""
  w = wp.tid()
  for i in range(nv):
    m = mu[w, i]
    l = lam_a[w, i]
    tau_e_grad[w, i] = -m
    tau_a_grad[w, i] = -l
    damp_grad[w, i] = -m
    force_grad[w, i] = m + l
  for i in range(act_next_grad.shape[1]):
    act_next_grad[w, i] = lam[w, k + 1, 2 * nv + i]


@wp.kernel(enable_backward=False)
def _copy_row(
  # In:
  k: int,
  src: wp.array3d[float],  # (nworld, nstep + 1, n)
  # Out:
  dst: wp.array2d[float],  # (nworld, n)
):
  w, i = wp.tid()
  dst[w, i] = src[w, k, i]


@wp.kernel
def _add_forces(
  # In:
  passive: wp.array2d[float],
  actuator: wp.array2d[float],
  constraint: wp.array2d[float],
  # Out:
  out: wp.array2d[float],
):
  w, i = wp.tid()
  out[w, i] = passive[w, i] + actuator[w, i] + constraint[w, i]


@wp.kernel(enable_backward=False)
def _assemble(
  # Model:
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  # In:
  k: int,
  kc: int,
  with_step: int,
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qpos_grad: wp.array3d[float],  # trajectory adjoints (from the loss)
  qvel_grad: wp.array3d[float],
  act_grad: wp.array3d[float],
  qpos_k_grad: wp.array2d[float],  # (nworld, nq) adjoints through the replayed dynamics
  qvel_k_grad: wp.array2d[float],
  act_k_grad: wp.array2d[float],
  ctrl_k_grad: wp.array2d[float],
  lam_q: wp.array2d[float],  # (nworld, nv) direct adjoints through the integrator
  lam_v: wp.array2d[float],
  # Out:
  lam_out: wp.array3d[float],  # (nworld, nstep + 1, nx)
  ctrl_grad_out: wp.array3d[float],  # (nworld, nstep, nu) accumulated
):
  """`lam[k]` in the tangent space (quaternion adjoints `g` become `0.5 Im(conj(q) g)`): the loss's
  own, the replay's (dynamics and sensors) and, `with_step`, the integrator's direct terms."""
  w = wp.tid()
  nv = lam_q.shape[1]
  step = float(with_step)
  for j in range(jnt_type.shape[0]):
    typ = jnt_type[j]
    qadr = jnt_qposadr[j]
    d = jnt_dofadr[j]
    if typ == HINGE or typ == SLIDE:
      lam_out[w, k, d] = qpos_grad[w, k, qadr] + qpos_k_grad[w, qadr] + step * lam_q[w, d]
    else:
      if typ == FREE:
        for i in range(3):
          lam_out[w, k, d + i] = qpos_grad[w, k, qadr + i] + qpos_k_grad[w, qadr + i] + step * lam_q[w, d + i]
        qadr += 3
        d += 3
      q = wp.quat(qpos[w, k, qadr + 1], qpos[w, k, qadr + 2], qpos[w, k, qadr + 3], qpos[w, k, qadr])
      g = wp.quat(qpos_grad[w, k, qadr + 1] + qpos_k_grad[w, qadr + 1],
                  qpos_grad[w, k, qadr + 2] + qpos_k_grad[w, qadr + 2],
                  qpos_grad[w, k, qadr + 3] + qpos_k_grad[w, qadr + 3],
                  qpos_grad[w, k, qadr] + qpos_k_grad[w, qadr])
      r = wp.quat_inverse(q) * g
      for i in range(3):
        lam_out[w, k, d + i] = 0.5 * r[i] + step * lam_q[w, d + i]
  for i in range(nv):
    lam_out[w, k, nv + i] = qvel_grad[w, k, i] + qvel_k_grad[w, i] + step * lam_v[w, i]
  for i in range(act_grad.shape[2]):
    lam_out[w, k, 2 * nv + i] = act_grad[w, k, i] + act_k_grad[w, i]
  for i in range(ctrl_k_grad.shape[1]):
    ctrl_grad_out[w, kc, i] += ctrl_k_grad[w, i]


@wp.kernel(enable_backward=False)
def _store_qacc(
  # In:
  k: int,
  count: wp.array[int],
  qacc: wp.array2d[float],
  # Out:
  qacc_out: wp.array3d[float],
):
  w, i = wp.tid()
  qacc_out[w, k + count[0], i] = qacc[w, i]


@wp.kernel(enable_backward=False)
def _gather_param_grad(
  # In:
  field_grad: wp.array2d[float],  # (nrow, ncol) flat view of the field's adjoint
  cols: wp.array[int],  # (dim,)
  scale: float,
  # Out:
  value_grad: wp.array2d[float],  # (nworld, dim)
):
  w, i = wp.tid()
  c = cols[i]
  if c >= 0:
    value_grad[w, i] += scale * field_grad[w % field_grad.shape[0], c]


# ------------------------------------------------------------------------------------------------


def _tables(mjm: mujoco.MjModel):
  """Host tables of the kinematic tree: (body, dof of it or an ancestor) pairs, (dof, dof moving its
  axis) pairs, and the dofs whose axes do not move (a free joint's translation)."""
  body_dof, dof_pre = [], []
  still = np.zeros(max(mjm.nv, 1), np.int32)
  for b in range(1, mjm.nbody):
    chain = []
    p = b
    while p > 0:
      chain.append(p)
      p = mjm.body_parentid[p]
    anc_dofs = [d for a in chain[1:] for d in range(mjm.body_dofadr[a], mjm.body_dofadr[a] + mjm.body_dofnum[a])]
    own = list(range(mjm.body_dofadr[b], mjm.body_dofadr[b] + mjm.body_dofnum[b]))
    body_dof += [(b, d) for d in anc_dofs + own]
    before = list(anc_dofs)
    for j in range(mjm.body_jntadr[b], mjm.body_jntadr[b] + mjm.body_jntnum[b]):
      adr = mjm.jnt_dofadr[j]
      if mjm.jnt_type[j] == FREE:
        still[adr:adr + 3] = 1
        dof_pre += [(adr + 3 + i, d) for i in range(3) for d in before + [adr, adr + 1, adr + 2]]
        before += list(range(adr, adr + 6))
      elif mjm.jnt_type[j] == BALL:
        dof_pre += [(adr + i, d) for i in range(3) for d in before]
        before += list(range(adr, adr + 3))
      else:
        dof_pre += [(adr, d) for d in before]
        before.append(adr)
  as2 = lambda x: np.array(x, np.int32).reshape(-1, 2) if x else np.zeros((0, 2), np.int32)
  return as2(body_dof), as2(dof_pre), still[:mjm.nv]


class _Program:
  """Launches replayed forward and then in reverse with Warp's generated adjoints.

  `grads` maps an array (by id) to its adjoint; arrays without one get `None` (no gradient)."""

  def __init__(self, device):
    self.device = device
    self.segments = {}
    self.grads = {}

  def grad(self, a: wp.array) -> wp.array:
    g = wp.zeros(a.shape, dtype=a.dtype, device=self.device)
    self.grads[id(a)] = g
    return g

  def launch(self, segment: str, kernel, dim, inputs, outputs):
    self.segments.setdefault(segment, []).append((kernel, dim, inputs, outputs))

  def forward(self, segment: str):
    for kernel, dim, inputs, outputs in self.segments.get(segment, ()):
      wp.launch(kernel, dim=dim, inputs=inputs, outputs=outputs, device=self.device)

  def _adj(self, a):
    return self.grads.get(id(a)) if isinstance(a, wp.array) else None

  def backward(self, segment: str):
    for kernel, dim, inputs, outputs in reversed(self.segments.get(segment, ())):
      wp.launch(kernel, dim=dim, inputs=inputs, outputs=outputs, device=self.device, adjoint=True,
                adj_inputs=[self._adj(a) for a in inputs], adj_outputs=[self._adj(a) for a in outputs])


class AnalyticStep:
  """Reverse-mode gradient of MJWarp steps from diffsim's differentiable smooth dynamics.

  The forward pass is one MJWarp world per world (the forward stepper `fwd`, a one-lane
  `FiniteDifferenceStep`) plus each step's acceleration (`step(..., qacc=)`, `(nworld, nstep, nv)`).
  `backward` walks the steps in reverse; see the module docstring. Raises `ValueError` naming the
  first uncovered feature when the model (or a parameter) is not covered.
  """

  def __init__(self, scene, layout, fwd):
    fields = [p.field for p in layout.params]
    why = analytic_coverage(scene.mjm, fields)
    if why is not None:
      raise ValueError(f"the analytic adjoint does not cover {why}; use gradient='finite_difference' "
                       "(or 'auto', which picks the finite-difference lanes for this model)")
    self.scene, self.layout, self.fwd = scene, layout, fwd
    self.nparam = layout.nparam
    self.nlane = 1
    self._built_for = None
    self.rebuild()

  # -- forward ----------------------------------------------------------------------------------

  def begin(self) -> None:
    self.fwd.begin()

  def advance(self) -> None:
    self.fwd.advance()

  @property
  def count(self):
    return self.fwd.count

  def step(self, traj, ctrl, warm, k: int, *, qacc=None, **_) -> None:
    """MJWarp's step `k` (see `FiniteDifferenceStep.step`), keeping its acceleration in `qacc[:, k]`."""
    self.fwd.step(traj, ctrl, warm, k)
    s = self.scene
    wp.launch(_store_qacc, dim=(s.nworld, s.nv), device=s.device, inputs=[k, self.fwd.count, self.fwd.data.qacc],
              outputs=[qacc])

  def sense(self, traj, ctrl, warm, k: int, **_) -> None:
    self.fwd.sense(traj, ctrl, warm, k)

  # -- backward ---------------------------------------------------------------------------------

  def rebuild(self) -> None:
    """Allocates the replay's arrays and records its launches (again when a parameter field was
    reallocated with more rows)."""
    s, mjm, m = self.scene, self.scene.mjm, self.scene.model
    # rebuilt when a batched field the launches read was reallocated with more rows
    key = tuple(id(model_field(m, f)) for f in sorted(self.layout.fields))
    if self._built_for == key:
      return
    dev, n = s.device, s.nworld
    if dev.is_capturing:
      # allocations and uploads inside a graph would be recorded, not run
      raise RuntimeError("a parameter's model field was reallocated after this Rollout was built; run its tape "
                         "gradient once eagerly before capturing it")
    nb, nj, nv, na, nu, ns = mjm.nbody, mjm.njnt, mjm.nv, mjm.na, mjm.nu, mjm.nsensordata
    P = _Program(dev)
    z = lambda shape, dtype=float: wp.zeros(shape, dtype=dtype, device=dev)
    body_dof, dof_pre, still = _tables(mjm)
    self.body_dof = wp.array(body_dof, dtype=int, device=dev)
    self.dof_pre = wp.array(dof_pre, dtype=int, device=dev)
    self.dof_still = wp.array(still, dtype=int, device=dev)
    off = int(mjm.opt.disableflags)
    dsbl = mujoco.mjtDisableBit
    h = float(mjm.opt.timestep)
    implicitfast = mjm.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    if implicitfast:
      # MJWarp's `implicit`: M - h qDeriv unless actuation, springs and dampers are all disabled
      every = dsbl.mjDSBL_ACTUATION | dsbl.mjDSBL_SPRING | dsbl.mjDSBL_DAMPER
      self.h_damp = 0.0 if off & every == every else h
    else:
      self.h_damp = 0.0 if off & (dsbl.mjDSBL_EULERDAMP | dsbl.mjDSBL_DAMPER) else h
    # implicitfast's free bodies (a tree of one free joint, MJWarp's `body_freeadr`) also integrate
    # their gyroscopic forces implicitly
    free = [b for b in range(1, nb) if mjm.body_jntnum[b] == 1 and mjm.jnt_type[mjm.body_jntadr[b]] == FREE
            and mjm.tree_dofnum[mjm.dof_treeid[mjm.body_dofadr[b]]] == 6] if implicitfast and self.h_damp else []
    self.nfree = len(free)
    self.free_body = wp.array(np.array(free, np.int32), dtype=int, device=dev)
    constraints_on = not off & dsbl.mjDSBL_CONSTRAINT
    limited = [j for j in range(nj) if mjm.jnt_limited[j] and mjm.jnt_type[j] in (HINGE, SLIDE)]
    if not constraints_on or off & dsbl.mjDSBL_LIMIT:
      limited = []
    friction = constraints_on and not off & dsbl.mjDSBL_FRICTIONLOSS and bool(mjm.dof_frictionloss.any())
    equalities = [e for e in range(mjm.neq) if mjm.eq_active0[e]] \
      if constraints_on and not off & dsbl.mjDSBL_EQUALITY else []
    from .scene import can_make_contacts

    contacts = constraints_on and can_make_contacts(mjm)
    self.constrained = bool(limited) or friction or bool(equalities) or contacts

    # leaves: one step's inputs; their adjoints are read after each step's reverse pass
    self.qpos, self.qvel, self.act = z((n, s.nq)), z((n, nv)), z((n, na))
    self.ctrl, self.qacc, self.qacc_e = z((n, nu)), z((n, nv)), z((n, nv))
    self._leaves = [P.grad(a) for a in (self.qpos, self.qvel, self.act, self.ctrl)]
    # model fields that are parameters get adjoints, accumulated over the steps
    for p in self.layout.params:
      f = model_field(m, p.field)
      if id(f) not in P.grads:
        P.grad(f)
    if any(p.tie_bias is not None for p in self.layout.params) and id(m.actuator_biasprm) not in P.grads:
      P.grad(m.actuator_biasprm)
    self._param_grads = [P.grads[id(model_field(m, p.field))] for p in self.layout.params]
    self._field_grads = list({id(g): g for g in self._param_grads + (
      [P.grads[id(m.actuator_biasprm)]] if id(m.actuator_biasprm) in P.grads else [])}.values())

    inter = []

    def arr(shape, dtype=float, grad=True):
      a = z(shape, dtype)
      if grad:
        inter.append(P.grad(a))
      return a

    jpos, jquat = arr((n, nj), wp.vec3), arr((n, nj), wp.quat)
    xpos, xquat = arr((n, nb), wp.vec3), arr((n, nb), wp.quat)
    xanchor, xaxis = arr((n, nj), wp.vec3), arr((n, nj), wp.vec3)
    xmat, xipos, ximat = arr((n, nb), wp.mat33), arr((n, nb), wp.vec3), arr((n, nb), wp.mat33)
    stmass, stmom, com = arr((n, nb)), arr((n, nb), wp.vec3), arr((n, nb), wp.vec3)
    cinert, cdof = arr((n, nb), vec10), arr((n, nv), wp.spatial_vector)
    cvel, cvel_pre = arr((n, nb), wp.spatial_vector), arr((n, nv), wp.spatial_vector)
    cdof_dot = arr((n, nv), wp.spatial_vector)
    nsite = max(mjm.nsite, 1)
    site_xpos, site_xquat, site_xmat = arr((n, nsite), wp.vec3), arr((n, nsite), wp.quat), arr((n, nsite), wp.mat33)
    qfrc_passive, qfrc_actuator = arr((n, nv)), arr((n, nv))
    actuator_force = arr((n, max(nu, 1)))
    self.act_next = arr((n, max(na, 1)))
    self.sensordata = arr((n, max(ns, 1)))
    qfrc_constraint, jtdj = arr((n, nv)), arr((n, nv, nv), grad=False)
    self.force = arr((n, nv))
    self.damp = arr((n, nv))
    self.bdiag = bdiag = arr((n, nv))
    crb_free = arr((n, max(self.nfree, 1)), vec10)
    accumulated = [stmass, stmom, cvel, cvel_pre, qfrc_actuator, qfrc_constraint, jtdj, bdiag, crb_free]

    # segment "state": what the sensors need and the forces that do not depend on acceleration
    gravity_on = 0.0 if off & dsbl.mjDSBL_GRAVITY else 1.0
    P.launch("state", _kinematics, n, [m.body_parentid, m.body_jntnum, m.body_jntadr, m.body_pos, m.body_quat,
                                       m.jnt_type, m.jnt_qposadr, m.jnt_pos, m.jnt_axis, m.qpos0, self.qpos],
             [jpos, jquat, xpos, xquat, xanchor, xaxis])
    P.launch("state", _inertial_frames, (n, nb), [m.body_ipos, m.body_iquat, xpos, xquat], [xmat, xipos, ximat])
    P.launch("state", _subtree_sums, n, [m.body_subtreenum, m.body_mass, xipos], [stmass, stmom])
    P.launch("state", _subtree_com, (n, nb), [xipos, stmass, stmom], [com])
    P.launch("state", _cinert, (n, nb), [m.body_rootid, m.body_mass, m.body_inertia, xipos, ximat, com], [cinert])
    if self.nfree:
      P.launch("state", _free_crb, (n, self.nfree), [m.body_subtreenum, self.free_body, cinert], [crb_free])
    P.launch("state", _cdof, (n, nj), [m.body_rootid, m.jnt_type, m.jnt_dofadr, m.jnt_bodyid, xmat, xanchor, xaxis,
                                       com], [cdof])
    P.launch("state", _velocities, n, [self.body_dof, self.dof_pre, self.qvel, cdof], [cvel, cvel_pre])
    P.launch("state", _cdof_dot, (n, nv), [self.dof_still, cvel_pre, cdof], [cdof_dot])
    if mjm.nsite:
      P.launch("state", _site_frames, (n, mjm.nsite), [m.site_bodyid, m.site_pos, m.site_quat, xpos, xquat],
               [site_xpos, site_xquat, site_xmat])
    if nj:
      P.launch("state", _passive, (n, nj), [m.jnt_type, m.jnt_qposadr, m.jnt_dofadr, m.jnt_stiffness, m.qpos_spring,
                                            m.dof_damping, 0.0 if off & dsbl.mjDSBL_SPRING else 1.0,
                                            0.0 if off & dsbl.mjDSBL_DAMPER else 1.0, self.qpos, self.qvel],
               [qfrc_passive])
    if nu and not off & dsbl.mjDSBL_ACTUATION:
      P.launch("state", _actuation, (n, nu),
               [h, m.jnt_type, m.jnt_qposadr, m.jnt_dofadr, m.actuator_trnid, m.actuator_dyntype, m.actuator_gaintype,
                m.actuator_biastype, m.actuator_actadr, m.actuator_ctrllimited, m.actuator_forcelimited,
                m.actuator_actlimited, m.actuator_ctrlrange, m.actuator_forcerange, m.actuator_actrange,
                m.actuator_gear, m.actuator_dynprm, m.actuator_gainprm, m.actuator_biasprm,
                0 if off & dsbl.mjDSBL_CLAMPCTRL else 1, self.qpos, self.qvel, self.act, self.ctrl],
               [qfrc_actuator, actuator_force, self.act_next])
    P.launch("state", _damping_diag, (n, nv), [m.dof_damping, 0.0 if off & dsbl.mjDSBL_DAMPER else 1.0], [bdiag])
    if implicitfast and nu and not off & dsbl.mjDSBL_ACTUATION:
      P.launch("state", _actuator_velocity_diag, (n, nu),
               [m.jnt_type, m.jnt_dofadr, m.actuator_trnid, m.actuator_dyntype, m.actuator_gaintype,
                m.actuator_biastype, m.actuator_actadr, m.actuator_forcelimited, m.actuator_forcerange,
                m.actuator_gear, m.actuator_gainprm, m.actuator_biasprm, self.act, self.ctrl, actuator_force], [bdiag])
    if ns and not off & dsbl.mjDSBL_SENSOR:
      P.launch("state", _sensors, (n, mjm.nsensor),
               [m.sensor_type, m.sensor_objtype, m.sensor_objid, m.sensor_adr, m.sensor_cutoff, m.jnt_qposadr,
                m.jnt_dofadr, m.site_bodyid, m.body_rootid, m.body_iquat, m.actuator_trnid, m.actuator_gear,
                self.qpos, self.qvel, xpos, xquat, xmat, xipos, ximat, site_xpos, site_xquat, site_xmat, com, cvel,
                actuator_force], [self.sensordata])

    # segment "step": inverse dynamics at the accelerations, constraint forces at the solver's
    def rne(acc, tau):
      cacc, cfrc, cfrc_int = arr((n, nb), wp.spatial_vector), arr((n, nb), wp.spatial_vector), \
        arr((n, nb), wp.spatial_vector)
      accumulated.extend([cacc, cfrc_int])
      P.launch("step", _accelerations, n, [m.opt.gravity, gravity_on, self.body_dof, self.qvel, acc, cdof, cdof_dot],
               [cacc])
      P.launch("step", _body_forces, (n, nb), [cinert, cvel, cacc], [cfrc])
      P.launch("step", _subtree_forces, n, [m.body_subtreenum, cfrc], [cfrc_int])
      P.launch("step", _joint_forces, (n, nv), [m.dof_bodyid, m.dof_armature, acc, cdof, cfrc_int], [tau])

    self.tau_e, self.tau_a = arr((n, nv)), arr((n, nv))
    rne(self.qacc_e, self.tau_e)
    P.launch("step", _damping_term, (n, nv), [self.h_damp, bdiag, self.qacc_e], [self.damp])
    if self.nfree:
      P.launch("step", _free_gyro_term, (n, self.nfree), [m.body_dofadr, self.free_body, self.h_damp, crb_free, xpos,
                                                          xmat, com, self.qvel, self.qacc_e], [self.damp])
    refsafe = 0 if off & dsbl.mjDSBL_REFSAFE else 1
    if limited:
      self.limited = wp.array(np.array(limited, np.int32), dtype=int, device=dev)
      P.launch("step", _limit_rows, (n, len(limited)),
               [h, refsafe, m.jnt_qposadr, m.jnt_dofadr, m.jnt_solref, m.jnt_solimp, m.jnt_range, m.jnt_margin,
                m.dof_invweight0, self.limited, self.qpos, self.qvel, self.qacc], [qfrc_constraint, jtdj])
    if friction:
      P.launch("step", _friction_rows, (n, nv),
               [h, refsafe, m.dof_solref, m.dof_solimp, m.dof_frictionloss, m.dof_invweight0, self.qvel, self.qacc],
               [qfrc_constraint, jtdj])
    if equalities:
      self.equalities = wp.array(np.array(equalities, np.int32), dtype=int, device=dev)
      P.launch("step", _joint_equality_rows, (n, len(equalities)),
               [h, refsafe, m.qpos0, m.jnt_qposadr, m.jnt_dofadr, m.dof_invweight0, m.eq_obj1id, m.eq_obj2id,
                m.eq_solref, m.eq_solimp, m.eq_data, self.equalities, self.qpos, self.qvel, self.qacc],
               [qfrc_constraint, jtdj])
    self.contacts = None
    if contacts:
      from .adjoint_contacts import ContactRows

      self.contacts = ContactRows(s, self.fwd.data, P, arr, accumulated, xpos=xpos, xmat=xmat, com=com, cdof=cdof,
                                  qvel=self.qvel, qacc=self.qacc, qfrc_constraint=qfrc_constraint, jtdj=jtdj)
    P.launch("step", _add_forces, (n, nv), [qfrc_passive, qfrc_actuator, qfrc_constraint], [self.force])
    if self.constrained:
      rne(self.qacc, self.tau_a)

    self._inter = inter
    self._accumulated = accumulated  # zeroed before each replay (atomics)
    # the replay's forward values, for checks against MJWarp's (`tests/test_adjoint.py`)
    self.values = dict(xpos=xpos, xquat=xquat, xipos=xipos, cinert=cinert, cdof=cdof, qfrc_passive=qfrc_passive,
                       qfrc_actuator=qfrc_actuator, actuator_force=actuator_force, qfrc_constraint=qfrc_constraint,
                       act=self.act_next, sensordata=self.sensordata, tau_e=self.tau_e, tau_a=self.tau_a,
                       damp=self.damp, force=self.force, **(self.contacts.values if self.contacts else {}))
    self.cinert, self.cdof, self.jtdj = cinert, cdof, jtdj
    self.crb = z((n, nb), vec10)
    self.free_frames = (crb_free, xpos, xmat, com)
    self.A_free = z((n, max(self.nfree, 1)), mat66)
    self.M, self.L, self.L_h = z((n, nv, nv)), z((n, nv, nv)), z((n, nv, nv))
    self.mu, self.lam_a = z((n, nv)), z((n, nv))
    self.lam_q, self.lam_v = z((n, nv)), z((n, nv))
    self.program = P
    self._built_for = key

  def replay(self, traj, qacc, k: int, kc: int, with_step: bool) -> None:
    """Recomputes step `k`'s smooth dynamics (control `kc`) into the replay's arrays; only the
    sensors' part without `with_step`."""
    s, m, P = self.scene, self.scene.model, self.program
    n = s.nworld
    wp.launch(_load_step, dim=n, device=s.device,
              inputs=[k, kc, min(k, qacc.shape[1] - 1), traj.qpos, traj.qvel, traj.act, traj.ctrl, qacc],
              outputs=[self.qpos, self.qvel, self.act, self.ctrl, self.qacc])
    for a in self._accumulated:
      a.zero_()
    P.forward("state")
    if not with_step:
      return
    wp.launch(_mass_matrix, dim=n, device=s.device,
              inputs=[m.body_subtreenum, m.dof_bodyid, m.dof_parentid, m.dof_armature, self.h_damp, self.bdiag,
                      self.cinert, self.cdof, self.crb], outputs=[self.M, self.L])
    wp.launch(_damped_acceleration, dim=n, device=s.device, inputs=[self.M, self.L, self.qacc], outputs=[self.qacc_e])
    if self.nfree:
      wp.launch(_free_body_acceleration, dim=(n, self.nfree), device=s.device,
                inputs=[m.body_dofadr, self.free_body, self.h_damp, self.bdiag, self.M, *self.free_frames, self.qvel,
                        self.qacc], outputs=[self.A_free, self.qacc_e])
    if self.contacts is not None:
      self.contacts.collide(self.qpos)
    P.forward("step")
    if self.contacts is not None:
      self.contacts.hessian()

  def backward(self, traj, qacc, lam, ctrl_grad, nstep: int) -> None:
    """Fills `lam` `(nworld, nstep + 1, nx)` (tangent-space state adjoints), adds control adjoints
    to `ctrl_grad` `(nworld, nstep, nu)` and parameter adjoints to each `Param.value.grad`."""
    self.rebuild()
    s, P = self.scene, self.program
    n, G = s.nworld, self.program.grads
    for g in self._field_grads:
      g.zero_()
    for k in range(nstep, -1, -1):
      with_step = k < nstep
      kc = min(k, nstep - 1)
      self.replay(traj, qacc, k, kc, with_step)
      for g in self._inter + self._leaves:
        g.zero_()
      if self.scene.nsensordata:
        wp.launch(_copy_row, dim=(n, s.nsensordata), device=s.device, inputs=[k, traj.sensordata.grad],
                  outputs=[G[id(self.sensordata)]])
      if with_step:
        wp.launch(_integrator_vjp, dim=n, device=s.device,
                  inputs=[s.dt, s.jnt_type, s.jnt_dofadr, k, traj.qvel, lam, self.L],
                  outputs=[self.mu, self.lam_q, self.lam_v])
        if self.nfree:
          wp.launch(_free_body_mu, dim=(n, self.nfree), device=s.device,
                    inputs=[s.model.body_dofadr, self.free_body, s.dt, self.A_free, self.lam_v], outputs=[self.mu])
        if self.constrained:
          wp.launch(_constraint_adjoint, dim=n, device=s.device, inputs=[self.M, self.jtdj, self.mu],
                    outputs=[self.L_h, self.lam_a])
        wp.launch(_seed, dim=n, device=s.device, inputs=[k, s.nv, self.mu, self.lam_a, lam],
                  outputs=[G[id(self.tau_e)], G[id(self.tau_a)], G[id(self.damp)], G[id(self.force)],
                           G[id(self.act_next)]])
        P.backward("step")
      P.backward("state")
      wp.launch(_assemble, dim=n, device=s.device,
                inputs=[s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, k, kc, int(with_step), traj.qpos, traj.qpos.grad,
                        traj.qvel.grad, traj.act.grad] + self._leaves + [self.lam_q, self.lam_v],
                outputs=[lam, ctrl_grad])
    for p, (cols, tie), g in zip(self.layout.params, self.layout.columns, self._param_grads):
      wp.launch(_gather_param_grad, dim=(n, p.dim), device=s.device, inputs=[flat_rows(g, p.width), cols, 1.0],
                outputs=[p.value.grad])
      if tie is not None:
        tg = G[id(s.model.actuator_biasprm)]
        wp.launch(_gather_param_grad, dim=(n, p.dim), device=s.device, inputs=[flat_rows(tg, 10), tie, -1.0],
                  outputs=[p.value.grad])
