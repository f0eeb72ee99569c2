"""Constraint rows, replayed differentiably: joint limits, dof friction and joint equalities, each row
a force `-D (J a - aref)` in the quadratic regime (a constant in the linear one), with MuJoCo's
impedance `_kbimp` from `solref` and `solimp`.

Each row kernel adds its force into `qfrc_constraint` `(nworld, nv)` and, for the rows in the
quadratic regime, `J^T D J` into `jtdj` `(nworld, nv, nv)` (the IFT's Hessian `M + J^T D J`).
`record_rows` records their launches; other row kinds (contacts) add into the same two arrays.
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

from mujoco_warp._src.types import vec5, vec12

from ..joints import HINGE, SLIDE
from .spatial import _MINVAL

_MINIMP, _MAXIMP = float(mujoco.mjMINIMP), float(mujoco.mjMAXIMP)


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


@wp.func
def _row_R(invweight: float, imp: float) -> float:
  """A row's regularizer `R = invweight (1 - imp) / imp`, floored at mjMINVAL (`D = 1 / R`: MJWarp's
  `_efc_D`)."""
  return wp.max(invweight * (1.0 - imp) / imp, _MINVAL)


@wp.func
def _one_sided_row(timestep: float, refsafe: int, solref: wp.vec2, solimp: vec5, pos: float, Jv: float, Ja: float,
                   invweight: float) -> wp.vec2:
  """A limit (or contact normal, pyramid edge) row at the solver's acceleration: `(force, D)` with
  force `-D (J a - aref)`, `aref = -k imp pos - b J v`, where it pushes (the Newton solver's quadratic
  regime); `(0, 0)` where it is slack."""
  kbi = _kbimp(timestep, refsafe, solref, solimp, pos)
  imp = kbi[2]
  D = 1.0 / _row_R(invweight, imp)
  jar = Ja - (-kbi[0] * imp * pos - kbi[1] * Jv)
  out = wp.vec2(0.0, 0.0)
  if jar < 0.0:
    out = wp.vec2(-D * jar, D)
  return out


@wp.func
def _friction_row(timestep: float, refsafe: int, solref: wp.vec2, solimp: vec5, frictionloss: float, Jv: float,
                  Ja: float, invweight: float) -> wp.vec2:
  """A friction row at the solver's acceleration: `(force, D)`, force `-D (J a + b J v)` within
  `[-frictionloss, frictionloss]` (quadratic regime), else the bound with `D = 0` (linear regime)."""
  kbi = _kbimp(timestep, refsafe, solref, solimp, 0.0)
  R = _row_R(invweight, kbi[2])
  jar = Ja + kbi[1] * Jv
  out = wp.vec2(-jar / R, 1.0 / R)
  if jar <= -R * frictionloss:
    out = wp.vec2(frictionloss, 0.0)
  elif jar >= R * frictionloss:
    out = wp.vec2(-frictionloss, 0.0)
  return out


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
    fD = _one_sided_row(opt_timestep, refsafe, jnt_solref[w % jnt_solref.shape[0], j],
                        jnt_solimp[w % jnt_solimp.shape[0], j], pos, J * qvel[w, d], J * qacc[w, d],
                        dof_invweight0[w % dof_invweight0.shape[0], d])
    if fD[1] > 0.0:
      wp.atomic_add(qfrc_out, w, d, J * fD[0])
      wp.atomic_add(jtdj_out, w, d, d, fD[1])


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
    fD = _friction_row(opt_timestep, refsafe, dof_solref[w % dof_solref.shape[0], d],
                       dof_solimp[w % dof_solimp.shape[0], d], fl, qvel[w, d], qacc[w, d],
                       dof_invweight0[w % dof_invweight0.shape[0], d])
    wp.atomic_add(qfrc_out, w, d, fD[0])
    if fD[1] > 0.0:
      wp.atomic_add(jtdj_out, w, d, d, fD[1])


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
  D = 1.0 / _row_R(invweight, imp)
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


def record_rows(P, mjm: mujoco.MjModel, m, qpos: wp.array, qvel: wp.array, qacc: wp.array,
                qfrc_constraint: wp.array, jtdj: wp.array) -> bool:
  """Records (segment "step" of the `_Program` `P`) the launches of `mjm`'s joint-limit, dof-friction
  and joint-equality rows at the state `qpos` `(nworld, nq)`, `qvel` and the solver's acceleration
  `qacc` `(nworld, nv)`, adding into `qfrc_constraint` and `jtdj`; whether there are any rows."""
  off = int(mjm.opt.disableflags)
  dsbl = mujoco.mjtDisableBit
  h = float(mjm.opt.timestep)
  dev, n = P.device, qpos.shape[0]
  constraints_on = not off & dsbl.mjDSBL_CONSTRAINT
  limited = [j for j in range(mjm.njnt) if mjm.jnt_limited[j] and mjm.jnt_type[j] in (HINGE, SLIDE)]
  if not constraints_on or off & dsbl.mjDSBL_LIMIT:
    limited = []
  friction = constraints_on and not off & dsbl.mjDSBL_FRICTIONLOSS and bool(mjm.dof_frictionloss.any())
  equalities = [e for e in range(mjm.neq) if mjm.eq_active0[e] and mjm.eq_type[e] == mujoco.mjtEq.mjEQ_JOINT] \
    if constraints_on and not off & dsbl.mjDSBL_EQUALITY else []
  refsafe = 0 if off & dsbl.mjDSBL_REFSAFE else 1
  any_rows = bool(limited) or friction or bool(equalities)
  if limited:
    limited = wp.array(np.array(limited, np.int32), dtype=int, device=dev)
    P.launch("step", _limit_rows, (n, len(limited)),
             [h, refsafe, m.jnt_qposadr, m.jnt_dofadr, m.jnt_solref, m.jnt_solimp, m.jnt_range, m.jnt_margin,
              m.dof_invweight0, limited, qpos, qvel, qacc], [qfrc_constraint, jtdj])
  if friction:
    P.launch("step", _friction_rows, (n, mjm.nv),
             [h, refsafe, m.dof_solref, m.dof_solimp, m.dof_frictionloss, m.dof_invweight0, qvel, qacc],
             [qfrc_constraint, jtdj])
  if equalities:
    equalities = wp.array(np.array(equalities, np.int32), dtype=int, device=dev)
    P.launch("step", _joint_equality_rows, (n, len(equalities)),
             [h, refsafe, m.qpos0, m.jnt_qposadr, m.jnt_dofadr, m.dof_invweight0, m.eq_obj1id, m.eq_obj2id,
              m.eq_solref, m.eq_solimp, m.eq_data, equalities, qpos, qvel, qacc], [qfrc_constraint, jtdj])
  return any_rows
