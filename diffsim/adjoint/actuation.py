"""Actuation, replayed differentiably: activation dynamics, gains and biases through joint, tendon and
site transmissions (`qfrc_actuator`, `actuator_force`, the next activation), the joints' actuator
force limits (`actuatorfrcrange`: the summed force clamped per dof), the tendons' (each actuator of a
tendon whose summed force leaves the range scaled by bound / sum, as MJWarp 4.0 does), and the joint actuators' velocity
gains that implicitfast integrates implicitly (their part of `B`, dropped while their force or their
joint's is clamped; `coverage.py` refuses velocity gains on tendon and site actuators there).
"""

from __future__ import annotations

import mujoco
import warp as wp

from mujoco_warp._src.types import vec10

from ..joints import BALL, HINGE, SLIDE
from .coverage import _BIAS_AFFINE, _DYN_FILTER, _DYN_FILTEREXACT, _DYN_NONE, _GAIN_AFFINE
from .spatial import _MINVAL

_TRN_JOINT, _TRN_JOINTINPARENT = int(mujoco.mjtTrn.mjTRN_JOINT), int(mujoco.mjtTrn.mjTRN_JOINTINPARENT)
_TRN_TENDON = int(mujoco.mjtTrn.mjTRN_TENDON)


@wp.kernel
def _actuation(
  # Model:
  opt_timestep: float,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  actuator_trntype: wp.array[int],
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
  tendon_clamp: int,  # 1: tendon actuators' forces raw, clamped and applied by `_tendon_actuator_limits`
  # In:
  qpos: wp.array2d[float],
  qvel: wp.array2d[float],
  act: wp.array2d[float],
  ctrl: wp.array2d[float],
  trn_length: wp.array2d[float],  # (nworld, nu) tendon and site transmissions (tendons.record_transmissions)
  trn_velocity: wp.array2d[float],
  trn_moment: wp.array3d[float],  # (nworld, nu, nv)
  # Out:
  qfrc_out: wp.array2d[float],  # (nworld, nv), zeroed
  force_out: wp.array2d[float],  # (nworld, nu) actuator forces
  act_next_out: wp.array2d[float],  # (nworld, na) activations after the step
):
  """Joint-transmission actuators: `force = gain * (ctrl or act) + bias`, as MJWarp's
  `_actuator_force`, and the activation's Euler step (`next_act`). Ball and free joints: motors
  (fixed gain, no bias), whose moment is the gear; tendon and site transmissions: the length,
  velocity and moment `record_transmissions` replayed."""
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
  joint = actuator_trntype[u] == _TRN_JOINT or actuator_trntype[u] == _TRN_JOINTINPARENT
  jnt = actuator_trnid[u][0]
  gears = actuator_gear[w % actuator_gear.shape[0], u]
  gear = gears[0]
  d = int(0)
  typ = int(-1)
  length = float(0.0)
  velocity = float(0.0)
  if joint:
    d = jnt_dofadr[jnt]
    typ = jnt_type[jnt]
    if typ == HINGE or typ == SLIDE:
      length = gear * qpos[w, jnt_qposadr[jnt]]
      velocity = gear * qvel[w, d]
  else:
    length = trn_length[w, u]
    velocity = trn_velocity[w, u]
  gainprm = actuator_gainprm[w % actuator_gainprm.shape[0], u]
  biasprm = actuator_biasprm[w % actuator_biasprm.shape[0], u]
  gain = gainprm[0]
  if actuator_gaintype[u] == _GAIN_AFFINE:
    gain = gainprm[0] + gainprm[1] * length + gainprm[2] * velocity
  bias = float(0.0)
  if actuator_biastype[u] == _BIAS_AFFINE:
    bias = biasprm[0] + biasprm[1] * length + biasprm[2] * velocity
  force = gain * inp + bias
  if tendon_clamp != 0 and actuator_trntype[u] == _TRN_TENDON:
    force_out[w, u] = force
    return
  if actuator_forcelimited[u]:
    r = actuator_forcerange[w % actuator_forcerange.shape[0], u]
    force = wp.clamp(force, r[0], r[1])
  force_out[w, u] = force
  if not joint:
    for i in range(qfrc_out.shape[1]):
      wp.atomic_add(qfrc_out, w, i, trn_moment[w, u, i] * force)
  elif typ == HINGE or typ == SLIDE:
    wp.atomic_add(qfrc_out, w, d, gear * force)
  elif typ == BALL:
    for i in range(3):
      wp.atomic_add(qfrc_out, w, d + i, gears[i] * force)
  else:
    for i in range(6):
      wp.atomic_add(qfrc_out, w, d + i, gears[i] * force)


@wp.func
def _velocity_coef(
  # Model:
  actuator_dyntype: wp.array[int],
  actuator_gaintype: wp.array[int],
  actuator_biastype: wp.array[int],
  actuator_actadr: wp.array[int],
  actuator_forcelimited: wp.array[bool],
  actuator_forcerange: wp.array2d[wp.vec2],
  actuator_gainprm: wp.array2d[vec10],
  actuator_biasprm: wp.array2d[vec10],
  # In:
  act: wp.array2d[float],
  ctrl: wp.array2d[float],
  actuator_force: wp.array2d[float],
  w: int,
  u: int,
) -> float:
  """`d force / d actuator velocity` of an affine actuator, `biasprm[2] + gainprm[2] * input`, or 0
  while its force is clamped (MJWarp's `_qderiv_actuator_passive_vel`)."""
  gain = float(0.0)
  if actuator_gaintype[u] == _GAIN_AFFINE:
    gain = actuator_gainprm[w % actuator_gainprm.shape[0], u][2]
  bias = float(0.0)
  if actuator_biastype[u] == _BIAS_AFFINE:
    bias = actuator_biasprm[w % actuator_biasprm.shape[0], u][2]
  clamped = False
  if actuator_forcelimited[u]:
    r = actuator_forcerange[w % actuator_forcerange.shape[0], u]
    f = actuator_force[w, u]
    clamped = f <= r[0] or f >= r[1]
  vel = float(0.0)
  if not clamped:
    if actuator_dyntype[u] != _DYN_NONE:
      vel = bias + gain * act[w, actuator_actadr[u]]
    else:
      vel = bias + gain * ctrl[w, u]
  return vel


@wp.kernel
def _actuator_velocity_diag(
  # Model:
  jnt_type: wp.array[int],
  jnt_dofadr: wp.array[int],
  actuator_trntype: wp.array[int],
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
  jnt_actfrclimited: wp.array[bool],
  jnt_actfrcrange: wp.array2d[wp.vec2],
  # In:
  act: wp.array2d[float],
  ctrl: wp.array2d[float],
  actuator_force: wp.array2d[float],
  qfrc_actuator: wp.array2d[float],  # (nworld, nv) after the joints' actuator force limits
  # Out:
  bdiag_out: wp.array2d[float],
):
  """implicitfast's actuator term of `-qDeriv`: `-gear^2 (biasprm[2] + gainprm[2] * input)` of
  affine actuators whose force is not clamped, by their own force range or their joint's
  `actuatorfrcrange` (MJWarp's `_qderiv_actuator_passive_vel`, `_jnt_actfrc_clamped`)."""
  w, u = wp.tid()
  if actuator_trntype[u] != _TRN_JOINT and actuator_trntype[u] != _TRN_JOINTINPARENT:
    return
  jnt = actuator_trnid[u][0]
  typ = jnt_type[jnt]
  if jnt_actfrclimited[jnt]:
    r = jnt_actfrcrange[w % jnt_actfrcrange.shape[0], jnt]
    f = qfrc_actuator[w, jnt_dofadr[jnt]]
    if f <= r[0] or f >= r[1]:
      return
  if typ == HINGE or typ == SLIDE:
    vel = _velocity_coef(actuator_dyntype, actuator_gaintype, actuator_biastype, actuator_actadr, actuator_forcelimited,
                         actuator_forcerange, actuator_gainprm, actuator_biasprm, act, ctrl, actuator_force, w, u)
    gear = actuator_gear[w % actuator_gear.shape[0], u][0]
    wp.atomic_add(bdiag_out, w, jnt_dofadr[jnt], -gear * gear * vel)


@wp.kernel
def _joint_actuator_limits(
  # Model:
  dof_jntid: wp.array[int],
  jnt_actfrclimited: wp.array[bool],
  jnt_actfrcrange: wp.array2d[wp.vec2],
  # In:
  qfrc_raw: wp.array2d[float],  # (nworld, nv) the actuators' summed generalized forces
  # Out:
  qfrc_out: wp.array2d[float],  # (nworld, nv) clamped to each joint's actuatorfrcrange
):
  """Joint-level actuator force limits (`actuatorfrcrange`, MJWarp's `_qfrc_actuator_gravcomp_limits`):
  every dof of a limited joint clamped to its range."""
  w, i = wp.tid()
  f = qfrc_raw[w, i]
  j = dof_jntid[i]
  if jnt_actfrclimited[j]:
    r = jnt_actfrcrange[w % jnt_actfrcrange.shape[0], j]
    f = wp.clamp(f, r[0], r[1])
  qfrc_out[w, i] = f


@wp.kernel
def _tendon_actuator_sum(
  # Model:
  actuator_trntype: wp.array[int],
  actuator_trnid: wp.array[wp.vec2i],
  # In:
  force_raw: wp.array2d[float],  # (nworld, nu) `_actuation`'s forces, tendon actuators unclamped
  # Out:
  ten_force_out: wp.array2d[float],  # (nworld, ntendon) zeroed: each tendon's summed actuator force
):
  """The tendons' total actuator force (MJWarp's `_tendon_actuator_force`)."""
  w, u = wp.tid()
  if actuator_trntype[u] == _TRN_TENDON:
    wp.atomic_add(ten_force_out, w, actuator_trnid[u][0], force_raw[w, u])


@wp.kernel
def _tendon_actuator_limits(
  # Model:
  actuator_trntype: wp.array[int],
  actuator_trnid: wp.array[wp.vec2i],
  actuator_forcelimited: wp.array[bool],
  actuator_forcerange: wp.array2d[wp.vec2],
  tendon_actfrclimited: wp.array[bool],
  tendon_actfrcrange: wp.array2d[wp.vec2],
  # In:
  force_raw: wp.array2d[float],  # (nworld, nu)
  ten_force: wp.array2d[float],  # (nworld, ntendon) `_tendon_actuator_sum`
  trn_moment: wp.array3d[float],  # (nworld, nu, nv)
  # Out:
  force_out: wp.array2d[float],  # (nworld, nu) actuator forces
  qfrc_out: wp.array2d[float],  # (nworld, nv) the tendon actuators' part added
):
  """Tendons' actuator force limits (`actuatorfrcrange`, MJWarp's `_tendon_actuator_force_clamp`):
  each actuator of a tendon whose total lies outside the range scaled by bound / total, then its own
  forcerange, then applied through its moment."""
  w, u = wp.tid()
  force = force_raw[w, u]
  if actuator_trntype[u] != _TRN_TENDON:
    force_out[w, u] = force
    return
  t = actuator_trnid[u][0]
  if tendon_actfrclimited[t]:
    total = ten_force[w, t]
    r = tendon_actfrcrange[w % tendon_actfrcrange.shape[0], t]
    if total != 0.0:
      if total < r[0]:
        force = force * r[0] / total
      elif total > r[1]:
        force = force * r[1] / total
  if actuator_forcelimited[u]:
    r = actuator_forcerange[w % actuator_forcerange.shape[0], u]
    force = wp.clamp(force, r[0], r[1])
  force_out[w, u] = force
  for i in range(qfrc_out.shape[1]):
    wp.atomic_add(qfrc_out, w, i, trn_moment[w, u, i] * force)


def record_tendon_actuator_limits(P, mjm: mujoco.MjModel, m, arr, accumulated, *, force_raw, trn_moment,
                                  actuator_force, qfrc) -> None:
  """Records (segment "state") the tendons' actuator force limits after `_actuation` ran with
  `tendon_clamp=1` into `force_raw`: the final `actuator_force` and the tendon actuators' `qfrc`."""
  n = force_raw.shape[0]
  ten_force = arr((n, mjm.ntendon))
  accumulated.append(ten_force)
  P.launch("state", _tendon_actuator_sum, (n, mjm.nu), [m.actuator_trntype, m.actuator_trnid, force_raw],
           [ten_force])
  P.launch("state", _tendon_actuator_limits, (n, mjm.nu),
           [m.actuator_trntype, m.actuator_trnid, m.actuator_forcelimited, m.actuator_forcerange,
            m.tendon_actfrclimited, m.tendon_actfrcrange, force_raw, ten_force, trn_moment], [actuator_force, qfrc])


@wp.kernel
def _transmission_velocity_gain(
  # Model:
  actuator_trntype: wp.array[int],
  actuator_dyntype: wp.array[int],
  actuator_gaintype: wp.array[int],
  actuator_biastype: wp.array[int],
  actuator_actadr: wp.array[int],
  actuator_forcelimited: wp.array[bool],
  actuator_forcerange: wp.array2d[wp.vec2],
  actuator_gainprm: wp.array2d[vec10],
  actuator_biasprm: wp.array2d[vec10],
  # In:
  act: wp.array2d[float],
  ctrl: wp.array2d[float],
  actuator_force: wp.array2d[float],
  # Out:
  vel_out: wp.array2d[float],  # (nworld, nu) d force / d actuator velocity; 0 on joint transmissions
):
  """Tendon and site actuators' `biasprm[2] + gainprm[2] * input` (affine) unless their force is
  clamped (MJWarp's `_qderiv_actuator_passive_vel`); implicitfast integrates `vel m m^T` implicitly
  (`tendons.record_transmission_damping`)."""
  w, u = wp.tid()
  vel = float(0.0)
  if actuator_trntype[u] != _TRN_JOINT and actuator_trntype[u] != _TRN_JOINTINPARENT:
    vel = _velocity_coef(actuator_dyntype, actuator_gaintype, actuator_biastype, actuator_actadr,
                         actuator_forcelimited, actuator_forcerange, actuator_gainprm, actuator_biasprm, act, ctrl,
                         actuator_force, w, u)
  vel_out[w, u] = vel


def transmission_velocity_gains(mjm: mujoco.MjModel) -> bool:
  """Whether a tendon or site actuator of `mjm` has an affine velocity gain or bias (implicitfast
  integrates it implicitly)."""
  for u in range(mjm.nu):
    if mjm.actuator_trntype[u] in (_TRN_JOINT, _TRN_JOINTINPARENT):
      continue
    if (mjm.actuator_gaintype[u] == _GAIN_AFFINE and mjm.actuator_gainprm[u, 2] != 0) or \
        (mjm.actuator_biastype[u] == _BIAS_AFFINE and mjm.actuator_biasprm[u, 2] != 0):
      return True
  return False
