"""What the analytic adjoint differentiates: `analytic_coverage` names the first feature of a model
(or parameter field) it does not, before anything is built.

Reads the `MjModel` only (no Warp kernels), so `Scene` can ask it cheaply. The MuJoCo enum values the
replayed kernels compare against live here too, beside the checks that admit them.
"""

from __future__ import annotations

import mujoco
import numpy as np

from ..joints import BALL, FREE, HINGE, SLIDE
from ..mjmodel import can_make_contacts

__all__ = ["analytic_coverage", "COVERED_PARAM_FIELDS"]

# Param fields the replayed kernels read (and so differentiate).
COVERED_PARAM_FIELDS = (
  "body_mass", "body_inertia", "body_ipos", "dof_damping", "dof_armature", "jnt_stiffness",
  "actuator_gainprm", "actuator_biasprm", "actuator_dynprm", "actuator_gear", "opt.gravity", "dof_frictionloss",
  "geom_friction", "geom_solref", "geom_solimp",
)

_DYN_NONE, _DYN_INTEGRATOR, _DYN_FILTER, _DYN_FILTEREXACT = 0, 1, 2, 3
_GAIN_FIXED, _GAIN_AFFINE = 0, 1
_TRN_JOINT, _TRN_TENDON, _TRN_SITE = int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_TENDON), \
  int(mujoco.mjtTrn.mjTRN_SITE)
_W = mujoco.mjtWrap
_WRAPS = (int(_W.mjWRAP_JOINT), int(_W.mjWRAP_SITE), int(_W.mjWRAP_PULLEY), int(_W.mjWRAP_SPHERE),
          int(_W.mjWRAP_CYLINDER))
_BIAS_NONE, _BIAS_AFFINE = 0, 1
_O = mujoco.mjtObj
_OBJ_BODY, _OBJ_XBODY, _OBJ_SITE = int(_O.mjOBJ_BODY), int(_O.mjOBJ_XBODY), int(_O.mjOBJ_SITE)
_OBJ_GEOM = int(_O.mjOBJ_GEOM)
_S = mujoco.mjtSensor
_SENS_JOINTPOS, _SENS_JOINTVEL = int(_S.mjSENS_JOINTPOS), int(_S.mjSENS_JOINTVEL)
_SENS_ACTUATORPOS, _SENS_ACTUATORVEL = int(_S.mjSENS_ACTUATORPOS), int(_S.mjSENS_ACTUATORVEL)
_SENS_ACTUATORFRC = int(_S.mjSENS_ACTUATORFRC)
_SENS_FRAMEPOS, _SENS_FRAMEQUAT = int(_S.mjSENS_FRAMEPOS), int(_S.mjSENS_FRAMEQUAT)
_SENS_FRAMEXAXIS, _SENS_FRAMEYAXIS, _SENS_FRAMEZAXIS = (int(_S.mjSENS_FRAMEXAXIS), int(_S.mjSENS_FRAMEYAXIS),
                                                        int(_S.mjSENS_FRAMEZAXIS))
_SENS_FRAMELINVEL, _SENS_FRAMEANGVEL = int(_S.mjSENS_FRAMELINVEL), int(_S.mjSENS_FRAMEANGVEL)
_SENS_SUBTREECOM = int(_S.mjSENS_SUBTREECOM)
_SENS_TENDONPOS, _SENS_TENDONVEL = int(_S.mjSENS_TENDONPOS), int(_S.mjSENS_TENDONVEL)
_SENS_GYRO, _SENS_VELOCIMETER = int(_S.mjSENS_GYRO), int(_S.mjSENS_VELOCIMETER)
_SENS_BALLQUAT, _SENS_BALLANGVEL = int(_S.mjSENS_BALLQUAT), int(_S.mjSENS_BALLANGVEL)
_SENS_JOINTACTFRC = int(_S.mjSENS_JOINTACTFRC)
# acceleration stage: read the solver's acceleration (an extra seed of the implicit function theorem)
_SENS_ACCELEROMETER, _SENS_TOUCH = int(_S.mjSENS_ACCELEROMETER), int(_S.mjSENS_TOUCH)
_SENS_FORCE, _SENS_TORQUE = int(_S.mjSENS_FORCE), int(_S.mjSENS_TORQUE)
ACC_SENSORS = (_SENS_ACCELEROMETER, _SENS_TOUCH, _SENS_FORCE, _SENS_TORQUE)
_SENSORS = (_SENS_JOINTPOS, _SENS_JOINTVEL, _SENS_ACTUATORPOS, _SENS_ACTUATORVEL, _SENS_ACTUATORFRC, _SENS_FRAMEPOS,
            _SENS_FRAMEQUAT, _SENS_FRAMEXAXIS, _SENS_FRAMEYAXIS, _SENS_FRAMEZAXIS, _SENS_FRAMELINVEL,
            _SENS_FRAMEANGVEL, _SENS_SUBTREECOM, _SENS_TENDONPOS, _SENS_TENDONVEL, _SENS_GYRO, _SENS_VELOCIMETER,
            _SENS_BALLQUAT, _SENS_BALLANGVEL, _SENS_JOINTACTFRC) + ACC_SENSORS


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
  constraints_on = not off & dsbl.mjDSBL_CONSTRAINT
  contacts = constraints_on and can_make_contacts(mjm)
  if contacts:
    if mjm.opt.noslip_iterations > 0:
      return "the noslip solver (noslip_iterations > 0)"
    if (mjm.ngeom and np.any(mjm.geom_adhesion)) or (mjm.npair and np.any(mjm.pair_adhesion)):
      return "adhesive contacts (geom or pair adhesion)"
    if mjm.ngeom and np.any(mjm.geom_surfacevel):
      return "contacts with surface velocity (geom surfacevel)"
  why = _tendons_uncovered(mjm)
  if why:
    return why
  if constraints_on and not off & dsbl.mjDSBL_EQUALITY:
    covered = (int(mujoco.mjtEq.mjEQ_JOINT), int(mujoco.mjtEq.mjEQ_CONNECT), int(mujoco.mjtEq.mjEQ_WELD))
    for e in range(mjm.neq):
      if int(mjm.eq_type[e]) not in covered:
        return (f"{mujoco.mjtEq(int(mjm.eq_type[e])).name[5:].lower()} equality constraints (joint, connect and "
                "weld equalities only)")
      for j in mjm.eq_obj1id[e], mjm.eq_obj2id[e]:
        if mjm.eq_type[e] == mujoco.mjtEq.mjEQ_JOINT and j >= 0 and mjm.jnt_type[j] not in (HINGE, SLIDE):
          return "joint equalities of ball or free joints"
  limits = constraints_on and not off & dsbl.mjDSBL_LIMIT and (mjm.jnt_limited.any() or mjm.tendon_limited.any())
  friction = constraints_on and not off & dsbl.mjDSBL_FRICTIONLOSS and (mjm.dof_frictionloss.any() or
                                                                        mjm.tendon_frictionloss.any())
  if limits:
    for j in np.flatnonzero(mjm.jnt_limited):
      if mjm.jnt_type[j] not in (HINGE, SLIDE, BALL):
        return f"limits of free joints (joint {_name(mjm, mujoco.mjtObj.mjOBJ_JOINT, int(j))})"
  equality = constraints_on and not off & dsbl.mjDSBL_EQUALITY and mjm.neq
  if limits or friction or equality or contacts:
    # the rows' softness reads dof_invweight0 and body_invweight0, which MuJoCo derives from the inertia at
    # qpos0 (`invweight.py` differentiates them), and tendon_invweight0 (not differentiated)
    if "body_ipos" in fields:
      return ("inertial parameter body_ipos in a model with contacts, limits, friction or equalities (the rows' "
              "softness reads body_invweight0, whose Jacobians at the centres of mass move with it)")
    tendon_rows = mjm.ntendon and ((limits and mjm.tendon_limited.any()) or
                                   (friction and mjm.tendon_frictionloss.any()))
    inertial = [f for f in fields if f in ("body_mass", "body_inertia", "dof_armature")]
    if inertial and tendon_rows:
      return (f"inertial parameter {inertial[0]} in a model with tendon limits or tendon friction (their "
              "softness reads tendon_invweight0, which the adjoint does not differentiate)")
    if inertial and mjm.ntendon and mjm.tendon_armature.any():
      return (f"inertial parameter {inertial[0]} in a model with rows and tendon armature (the rows' softness "
              "reads the mass matrix at qpos0, whose tendon part the adjoint does not replay there)")
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
  implicitfast = integrator == int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST)
  for i in range(mjm.nu):
    name = _name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, i)
    trn = int(mjm.actuator_trntype[i])
    joint = trn in (_TRN_JOINT, int(mujoco.mjtTrn.mjTRN_JOINTINPARENT))
    scalar = joint and mjm.jnt_type[mjm.actuator_trnid[i, 0]] in (SLIDE, HINGE)
    motor = trn == _TRN_JOINT and mjm.actuator_gaintype[i] == _GAIN_FIXED and mjm.actuator_biastype[i] == _BIAS_NONE
    other = trn == _TRN_TENDON or (trn == _TRN_SITE and mjm.actuator_trnid[i, 1] < 0)
    if not scalar and not motor and not other:
      return (f"actuator {name}'s transmission (joints, tendons and sites without a reference site; on ball and "
              "free joints only motors without joint-in-parent)")
    if other and implicitfast and (
        (mjm.actuator_gaintype[i] == _GAIN_AFFINE and mjm.actuator_gainprm[i, 2] != 0) or
        (mjm.actuator_biastype[i] == _BIAS_AFFINE and mjm.actuator_biasprm[i, 2] != 0)) and (
        _moves_free_body(mjm, int(mjm.actuator_trnid[i, 0])) if trn == _TRN_TENDON else
        _on_free_body(mjm, int(mjm.site_bodyid[mjm.actuator_trnid[i, 0]]))):
      return (f"actuator {name}'s velocity gain on a tendon or site transmission on a free body with the "
              "implicitfast integrator (implicitfast's free bodies take their own 6 x 6 solve)")
    if mjm.actuator_gaintype[i] not in (_GAIN_FIXED, _GAIN_AFFINE) or \
        mjm.actuator_biastype[i] not in (_BIAS_NONE, _BIAS_AFFINE):
      return f"actuator {name}'s gain or bias type (fixed and affine only)"
    if mjm.actuator_dyntype[i] not in (_DYN_NONE, _DYN_INTEGRATOR, _DYN_FILTER, _DYN_FILTEREXACT) or \
        mjm.actuator_actnum[i] > 1 or mjm.actuator_actearly[i]:
      return f"actuator {name}'s activation dynamics (none, integrator, filter, filterexact)"
  for f in fields:
    if f not in COVERED_PARAM_FIELDS:
      return f"parameter field {f} (covered: {', '.join(COVERED_PARAM_FIELDS)})"
    if f in ("geom_friction", "geom_solref", "geom_solimp") and mjm.npair:
      return f"parameter field {f} in a model with explicit contact pairs (<pair>: their own contact parameters)"
  return None


def _tendons_uncovered(mjm: mujoco.MjModel) -> str | None:
  """Fixed tendons and spatial tendons through sites and pulleys and around spheres and cylinders
  (side sites outside or inside the geom), with springs, dampers (implicitfast's too, but not on a
  free body), limits, friction, armature (MuJoCo refuses it on a wrapping tendon), actuators and their
  force limits (actuatorfrcrange; not with implicitfast velocity gains); not polynomial springs and
  dampers nor plasticity."""
  for t in range(mjm.ntendon):
    name = f"tendon {_name(mjm, mujoco.mjtObj.mjOBJ_TENDON, t)}"
    wraps = mjm.wrap_type[mjm.tendon_adr[t]:mjm.tendon_adr[t] + mjm.tendon_num[t]]
    if not np.isin(wraps, _WRAPS).all():
      return f"{name}'s wrap objects (joints, sites, pulleys, spheres and cylinders only)"
    if np.any(mjm.tendon_stiffnesspoly[t]) or np.any(mjm.tendon_dampingpoly[t]):
      return f"{name}'s polynomial stiffness or damping"
    if mjm.tendon_plasticadr[t] >= 0:
      return f"{name}'s plasticity"
    implicitfast = mjm.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    if mjm.tendon_actfrclimited[t] and implicitfast and any(
        mjm.actuator_trntype[u] == _TRN_TENDON and mjm.actuator_trnid[u, 0] == t and
        ((mjm.actuator_gaintype[u] == _GAIN_AFFINE and mjm.actuator_gainprm[u, 2]) or
         (mjm.actuator_biastype[u] == _BIAS_AFFINE and mjm.actuator_biasprm[u, 2])) for u in range(mjm.nu)):
      return (f"{name}'s actuator force limits (actuatorfrcrange) with implicitfast and a velocity gain on its "
              "actuators (dropped while the tendon is clamped)")
    damped = mjm.tendon_damping[t] and not mjm.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_DAMPER
    if implicitfast and (damped or mjm.tendon_armature[t]) and _moves_free_body(mjm, t):
      what = "damping" if damped else "armature"
      return (f"{name}'s {what} with the implicitfast integrator on a free body (implicitfast's free bodies "
              "take their own 6 x 6 solve)")
  return None


def _on_free_body(mjm: mujoco.MjModel, b: int) -> bool:
  """Whether body `b` is in a tree of one free joint (implicitfast's free-body path)."""
  while b > 0 and not mjm.body_dofnum[b]:
    b = mjm.body_parentid[b]
  return b > 0 and mjm.tree_dofnum[mjm.dof_treeid[mjm.body_dofadr[b]]] == 6 and \
    mjm.jnt_type[mjm.body_jntadr[b]] == FREE


def _moves_free_body(mjm: mujoco.MjModel, t: int) -> bool:
  """Whether tendon `t` passes a site or geom on a body in a tree of one free joint."""
  for k in range(mjm.tendon_adr[t], mjm.tendon_adr[t] + mjm.tendon_num[t]):
    typ, obj = int(mjm.wrap_type[k]), int(mjm.wrap_objid[k])
    if typ == int(_W.mjWRAP_SITE) and _on_free_body(mjm, int(mjm.site_bodyid[obj])):
      return True
    if typ in (int(_W.mjWRAP_SPHERE), int(_W.mjWRAP_CYLINDER)) and _on_free_body(mjm, int(mjm.geom_bodyid[obj])):
      return True
  return False


def _sensor_uncovered(mjm: mujoco.MjModel, i: int) -> str | None:
  typ, objtype, obj = int(mjm.sensor_type[i]), int(mjm.sensor_objtype[i]), int(mjm.sensor_objid[i])
  if typ not in _SENSORS:
    return f"type {mujoco.mjtSensor(typ).name[7:].lower()}"
  if mjm.sensor_refid[i] >= 0:
    return "a reference frame"
  if typ in (_SENS_JOINTPOS, _SENS_JOINTVEL, _SENS_JOINTACTFRC) and mjm.jnt_type[obj] not in (HINGE, SLIDE):
    return "a ball or free joint"
  if typ in (_SENS_FRAMEPOS, _SENS_FRAMEQUAT, _SENS_FRAMEXAXIS, _SENS_FRAMEYAXIS, _SENS_FRAMEZAXIS,
             _SENS_FRAMELINVEL, _SENS_FRAMEANGVEL) and objtype not in (_OBJ_BODY, _OBJ_XBODY, _OBJ_SITE, _OBJ_GEOM):
    return "a frame that is not a body, geom or site"
  if hasattr(mjm, "sensor_interval") and np.asarray(mjm.sensor_interval[i]).reshape(-1)[0] > 0:
    return "a sampling interval"
  if typ in (_SENS_FORCE, _SENS_TORQUE) and (mjm.neq or mjm.ntendon):
    # their cfrc_int subtracts cfrc_ext, which the replay builds from contact forces only
    return "a force or torque sensor in a model with equalities or tendons (their forces on the bodies)"
  if typ == _SENS_TOUCH and mjm.sensor_cutoff[i] > 0:
    return "a touch sensor with a cutoff"
  return None


def _name(mjm, objtype, i: int) -> str:
  return mujoco.mj_id2name(mjm, objtype, i) or f"#{i}"
