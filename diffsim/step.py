"""The differentiable MJWarp step: forward in MJWarp, Jacobians from perturbation lanes.

MJWarp compiles its kernels with `enable_backward=False`, so diffsim forms each step's Jacobians
itself. Every world `w` gets `nlane` MJWarp worlds (lane-major ids `lane * nworld + w`): lane 0 is
the nominal step, and lanes `1 + 2c` / `2 + 2c` step the input coordinate `c` perturbed by `+h` / `-h`
(central differences; forward differences use one lane per coordinate). The inputs are

  z = [dqpos (nv, tangent space), qvel (nv), act (na), ctrl (nu), theta (nparam)],

so one MJWarp step over `nlane * nworld` worlds yields, for every world, the columns of

  J = d(qpos', qvel', act')/dz   (nx, nz)   = [A B P],  nx = 2 nv + na
  S = d(sensordata)/dz          (ns, nz)   = [C D Q]

(sensordata as MuJoCo computes it inside `mj_step`, i.e. at the pre-step state). All lanes of a
world share the nominal warm start and a fixed solver iteration count with zero tolerance
(`Scene.lane_tolerance`, see `SolverSettings`; or, with `lanes="nominal"`, none stops before its
nominal world or its central difference's partner, `lane_solver`), so constraint solves follow the
same path and the differences stay smooth; a stepper without lanes (`differentiable=False`) runs at
the model's own.

Constraint switches. Where a lane's step makes a contact or limit row appear or vanish (a jump in
force: a contact's damping acts at once) or change regime (a kink), a difference across it is not
the derivative MuJoCo's own `mjd_transitionFD` gives at the nominal state: off by jump / step,
orders of magnitude at contact onset. Each lane world's constraint rows are hashed (type and solver
state, in order), with the side of every actuation clamp (actuator forcerange, joint and tendon
actuatorfrcrange: a kink), and a column is formed from the lanes that kept the nominal hash:
central, else one-sided. In a model with position constraints the qpos coordinates, whose steps
move contacts and limits, get guard lanes: central differences add a pair at `GUARD` times the step
(so a state between two switches still has a clean central difference), forward differences a step
down. A column with no clean difference is counted per world and step (`switches`, with the actuation kink
its lanes straddle in `kinks`), the gradient's self-check (`rollout.check_switches`).

Forward mode (`directions=m`): when only a few derivatives of the whole trajectory are needed
(system identification: d(trajectory)/d(theta), a handful of parameters), forming `J` costs
`2 nv + na` lanes more than necessary. Instead, lane `1 + c` steps the state moved along the
tangent `dx_k[:, c]` *and* (for `c < nparam`) parameter `c` moved by one unit, both scaled by one
step `h`, so its difference from the nominal lane is directly the next tangent,

  dx_{k+1}[:, c] = A dx_k[:, c] + P e_c,   ds_k[:, c] = C dx_k[:, c] + Q e_c,

the tangent-linear recursion without forming `A`: `1 + m` lanes (forward) instead of
`1 + nx + nparam`, and no matrix product per step. The price is precision: the state moves by the
parameter's step times the tangent, a perturbation not chosen for the state (see `diffsim.sysid`,
`jacobian="directional"`).

`FiniteDifferenceStep` is the only place that knows how Jacobians are made. Tape gradients of the
models it covers come from the analytic adjoint instead (`adjoint.AnalyticStep`, behind the same
three methods `begin`, `step`, `sense`), which steps one world per world and needs no Jacobians.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from .joints import BALL, FREE, HINGE, SLIDE, load_quat, qpos_move, quat_integrate, quat_sub, store_quat
from .lane_solver import actuation_side
from .physics import Physics, skips_solver

__all__ = ["FiniteDifferenceStep"]



@wp.func
def _copy_nominal(
  lw: int, w: int, step: int, ctrl_step: int,
  qpos_in: wp.array3d[float], qvel_in: wp.array3d[float], act_in: wp.array3d[float],
  ctrl_in: wp.array3d[float], warm_in: wp.array2d[float],
  qpos_out: wp.array2d[float], qvel_out: wp.array2d[float], act_out: wp.array2d[float],
  ctrl_out: wp.array2d[float], qacc_warmstart_out: wp.array2d[float],
):
  """Lane world `lw` starts from world `w`'s state `step`, control `ctrl_step` and warm start."""
  for i in range(qpos_out.shape[1]):
    qpos_out[lw, i] = qpos_in[w, step, i]
  for i in range(qvel_out.shape[1]):
    qvel_out[lw, i] = qvel_in[w, step, i]
    qacc_warmstart_out[lw, i] = warm_in[w, i]
  for i in range(act_out.shape[1]):
    act_out[lw, i] = act_in[w, step, i]
  for i in range(ctrl_out.shape[1]):
    ctrl_out[lw, i] = ctrl_in[w, ctrl_step, i]


@wp.func
def _state_difference(
  njnt: int, jnt_type: wp.array[int], jnt_qposadr: wp.array[int], jnt_dofadr: wp.array[int],
  qpos: wp.array2d[float], qvel: wp.array2d[float], act: wp.array2d[float],
  lp: int, lm: int, inv: float,
  out: wp.array4d[float], w: int, k: int, c: int,
):
  """`out[w, k, :, c]` = (state of lane world `lp` - that of `lm`) * `inv`, qpos in the tangent space."""
  nv = qvel.shape[1]
  for j in range(njnt):
    typ = jnt_type[j]
    qadr = jnt_qposadr[j]
    dadr = jnt_dofadr[j]
    if typ == SLIDE or typ == HINGE:
      out[w, k, dadr, c] = (qpos[lp, qadr] - qpos[lm, qadr]) * inv
    else:
      if typ == FREE:
        for i in range(3):
          out[w, k, dadr + i, c] = (qpos[lp, qadr + i] - qpos[lm, qadr + i]) * inv
        qadr += 3
        dadr += 3
      dq = quat_sub(load_quat(qpos, lp, qadr), load_quat(qpos, lm, qadr)) * inv
      for i in range(3):
        out[w, k, dadr + i, c] = dq[i]
  for i in range(nv):
    out[w, k, nv + i, c] = (qvel[lp, i] - qvel[lm, i]) * inv
  for i in range(act.shape[1]):
    out[w, k, 2 * nv + i, c] = (act[lp, i] - act[lm, i]) * inv


@wp.kernel
def _lanes_in(
  # Model:
  nworld: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  ctrl_lo: wp.array[float],  # (nu,) control limits (-inf, inf when not clamped)
  ctrl_hi: wp.array[float],
  # In:
  lane_coord: wp.array[int],  # (nlane,) input coordinate perturbed by the lane, -1: nominal
  lane_sign: wp.array[float],  # (nlane,)
  eps: wp.array[float],  # (nz,) step of each input coordinate
  step0: int,
  ctrl_step0: int,
  step_count: wp.array[int],  # (1,) steps already taken by a replayed one-step graph (0 when eager)
  qpos_in: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qvel_in: wp.array3d[float],  # (nworld, nstep + 1, nv)
  act_in: wp.array3d[float],  # (nworld, nstep + 1, na)
  ctrl_in: wp.array3d[float],  # (nworld, nstep, nu)
  warm_in: wp.array2d[float],  # (nworld, nv)
  # Data out:
  qpos_out: wp.array2d[float],  # (nlane * nworld, nq)
  qvel_out: wp.array2d[float],
  act_out: wp.array2d[float],
  ctrl_out: wp.array2d[float],
  qacc_warmstart_out: wp.array2d[float],
):
  step = step0 + step_count[0]
  ctrl_step = ctrl_step0 + step_count[0]
  lw = wp.tid()
  w = lw % nworld
  lane = lw // nworld
  nv = qvel_out.shape[1]
  na = act_out.shape[1]
  nu = ctrl_out.shape[1]
  _copy_nominal(lw, w, step, ctrl_step, qpos_in, qvel_in, act_in, ctrl_in, warm_in,
                qpos_out, qvel_out, act_out, ctrl_out, qacc_warmstart_out)

  c = lane_coord[lane]
  if c < 0:
    return
  h = lane_sign[lane] * eps[c]
  if c < nv:
    qpos_move(c, h, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, qpos_out, lw)
  elif c < 2 * nv:
    qvel_out[lw, c - nv] += h
  elif c < 2 * nv + na:
    act_out[lw, c - 2 * nv] += h
  elif c < 2 * nv + na + nu:
    # stay inside ctrlrange: MuJoCo clamps there, so a step across the limit would bias the slope
    i = c - 2 * nv - na
    ctrl_out[lw, i] = wp.clamp(ctrl_out[lw, i] + h, ctrl_lo[i], ctrl_hi[i])


@wp.func
def _realized_steps(x: float, eps: float, lo: float, hi: float) -> wp.vec2:
  """Distances actually stepped up and down from `x` (float32 rounding and clamping to `[lo, hi]`
  included), so neither biases the difference; 0 outside `[lo, hi]`, where the input has no effect."""
  if x < lo or x > hi:
    return wp.vec2(0.0)
  return wp.vec2(wp.clamp(x + eps, lo, hi) - wp.clamp(x, lo, hi), wp.clamp(x, lo, hi) - wp.clamp(x - eps, lo, hi))


@wp.kernel
def _constraint_signature(
  # Model:
  nworld: int,
  dof_jntid: wp.array[int],
  jnt_actfrclimited: wp.array[bool],
  jnt_actfrcrange: wp.array2d[wp.vec2],
  actuator_trntype: wp.array[int],
  actuator_trnid: wp.array[wp.vec2i],
  actuator_forcelimited: wp.array[bool],
  actuator_forcerange: wp.array2d[wp.vec2],
  tendon_actfrclimited: wp.array[bool],
  tendon_actfrcrange: wp.array2d[wp.vec2],
  # Data in:
  nefc_in: wp.array[int],  # (nlane * nworld,)
  efc_type_in: wp.array2d[int],  # (nlane * nworld, njmax)
  efc_state_in: wp.array2d[int],  # (nlane * nworld, njmax)
  actuator_force_in: wp.array2d[float],  # (nlane * nworld, nu)
  qfrc_actuator_in: wp.array2d[float],  # (nlane * nworld, nv)
  # Out:
  signature_out: wp.array[int],  # (nlane * nworld,)
  kink_out: wp.array[int],  # (nlane * nworld,) 1 + the first actuation kink on another side than nominal, or 0
):
  """A hash of each lane world's regimes: its constraint rows (type and solver state, in order) and
  the side of each actuation clamp (`lane_solver.actuation_side`). The lanes of a world share it
  unless a row appeared, vanished or changed regime (a contact began to slide or to separate) or an
  actuator's, joint's or tendon's force saturated or let go inside the finite-difference step.
  Control clamps (ctrlrange) are not hashed: the lanes step controls inside them (`_lanes_in`,
  `_realized_steps`)."""
  lw = wp.tid()
  w = lw % nworld
  n = wp.min(nefc_in[lw], efc_state_in.shape[1])
  p = wp.int64(2147483647)
  h = wp.int64(n)
  for i in range(n):
    h = (h * wp.int64(31) + wp.int64(efc_type_in[lw, i] * 8 + efc_state_in[lw, i] + 1)) % p
  kink = int(0)
  for i in range(actuator_force_in.shape[1] + qfrc_actuator_in.shape[1] + tendon_actfrclimited.shape[0]):
    side = actuation_side(i, lw, dof_jntid, jnt_actfrclimited, jnt_actfrcrange, actuator_trntype, actuator_trnid,
                           actuator_forcelimited, actuator_forcerange, tendon_actfrclimited, tendon_actfrcrange,
                           actuator_force_in, qfrc_actuator_in)
    if side != 0:
      h = (h * wp.int64(31) + wp.int64(side)) % p
      if kink == 0 and side != actuation_side(i, w, dof_jntid, jnt_actfrclimited, jnt_actfrcrange, actuator_trntype,
                                               actuator_trnid, actuator_forcelimited, actuator_forcerange,
                                               tendon_actfrclimited, tendon_actfrcrange, actuator_force_in,
                                               qfrc_actuator_in):
        kink = 1 + i
  signature_out[lw] = int(h)
  kink_out[lw] = kink


@wp.func
def _pick_lanes(
  w: int, lanes: wp.vec4i, h: wp.vec4,
  signature: wp.array[int], kink: wp.array[int],
  switches_out: wp.array2d[int], kinks_out: wp.array2d[int], row: int,
):
  """Lanes and inverse step of one column: `(lane, lane subtracted, 1 / step)`.

  `lanes` are the lane worlds stepped up, down, up by the guard step and down by it (-1: none) and
  `h` the distances actually stepped. A lane whose constraint rows differ from the nominal ones
  (`_constraint_signature`: a contact or limit row appearing or vanishing inside the step, or
  changing regime) differentiates across a jump in force (orders of magnitude off at contact
  onset: jump / step) or a kink (the two slopes' average). The first difference whose lanes kept
  the nominal rows is taken: central, central at the guard step, one-sided at the guard step,
  one-sided. Where none did, the column is counted in `switches_out[w, row]` (the gradient's
  self-check), the largest actuation kink its lanes straddle (`_constraint_signature`'s `kink`)
  kept in `kinks_out[w, row]`, and it is differenced as if all had.
  """
  n0 = signature[w]
  ok = wp.vec4i(0)
  for i in range(4):
    if lanes[i] >= 0:
      if signature[lanes[i]] == n0:
        ok[i] = 1
  lp = lanes[0]
  lm = lanes[1]
  d = h[0] + h[1]
  if lm < 0:
    lm = w
    d = h[0]
  if ok[0] == 0 or (lanes[1] >= 0 and ok[1] == 0):
    if ok[2] != 0 and ok[3] != 0:
      lp = lanes[2]
      lm = lanes[3]
      d = h[2] + h[3]
    elif ok[2] != 0:
      lp = lanes[2]
      lm = w
      d = h[2]
    elif ok[3] != 0:
      lp = w
      lm = lanes[3]
      d = h[3]
    elif ok[0] != 0:
      lm = w
      d = h[0]
    elif ok[1] != 0:
      lp = w
      d = h[1]
    else:
      wp.atomic_add(switches_out, w, row, 1)
      for i in range(4):
        if lanes[i] >= 0:
          wp.atomic_max(kinks_out, w, row, kink[lanes[i]])
  return lp, lm, wp.where(d != 0.0, 1.0 / d, 0.0)


@wp.kernel
def _lanes_out(
  # Model:
  nworld: int,
  njnt: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  ctrl_lo: wp.array[float],
  ctrl_hi: wp.array[float],
  # In:
  central: int,
  eps_z: wp.array[float],  # (nz,)
  coord_lanes: wp.array[wp.vec4i],  # (nz,) lanes stepping each coordinate up, down, up and down by the guard step
  guard: float,  # guard step / step
  step0: int,
  ctrl_step0: int,
  step_count: wp.array[int],  # (1,) steps already taken by a replayed one-step graph (0 when eager)
  with_state: int,
  qpos_in: wp.array3d[float],  # (nworld, nstep + 1, nq) nominal inputs
  qvel_in: wp.array3d[float],
  act_in: wp.array3d[float],
  ctrl_in: wp.array3d[float],  # (nworld, nstep, nu)
  h_param: wp.array2d[float],  # (nworld, nparam) realized parameter steps
  # Data in:
  qpos: wp.array2d[float],  # (nlane * nworld, nq) after the step
  qvel: wp.array2d[float],
  act: wp.array2d[float],
  sensordata: wp.array2d[float],
  signature: wp.array[int],  # (nlane * nworld,) `_constraint_signature` of each lane's step
  kink: wp.array[int],  # (nlane * nworld,) and the actuation kink it straddles
  # Out:
  jac_out: wp.array4d[float],  # (nworld, nstep, nx, nz)
  sjac_out: wp.array4d[float],  # (nworld, nstep + 1, ns, nz)
  switches_out: wp.array2d[int],  # (nworld, nstep + 1) columns whose lanes all switched constraint set
  kinks_out: wp.array2d[int],  # (nworld, nstep + 1) 1 + an actuation kink they straddle (`actuation_side`)
):
  step = step0 + step_count[0]
  ctrl_step = ctrl_step0 + step_count[0]
  w, c = wp.tid()
  nv = qvel.shape[1]
  na = act.shape[1]
  nu = ctrl_in.shape[2]
  ns = sensordata.shape[1]
  nx = 2 * nv + na

  lanes = coord_lanes[c]
  if lanes[0] < 0:  # a skipped coordinate: zero column
    for s in range(ns):
      sjac_out[w, step, s, c] = 0.0
    if with_state != 0:
      _state_difference(njnt, jnt_type, jnt_qposadr, jnt_dofadr, qpos, qvel, act, w, w, 0.0, jac_out, w, step, c)
    return
  # distances actually stepped up and down along coordinate c, by the step and the guard step
  inf = wp.inf
  eps = eps_z[c]
  hpm = wp.vec2(eps, eps)
  gpm = wp.vec2(guard * eps, guard * eps)
  if c < nv:
    j = dof_jntid[c]
    typ = jnt_type[j]
    if typ == SLIDE or typ == HINGE or (typ == FREE and c - jnt_dofadr[j] < 3):
      x = qpos_in[w, step, jnt_qposadr[j] + c - jnt_dofadr[j]]
      hpm = _realized_steps(x, eps, -inf, inf)
      gpm = _realized_steps(x, guard * eps, -inf, inf)
  elif c < 2 * nv:
    hpm = _realized_steps(qvel_in[w, step, c - nv], eps, -inf, inf)
  elif c < nx:
    hpm = _realized_steps(act_in[w, step, c - 2 * nv], eps, -inf, inf)
  elif c < nx + nu:
    i = c - nx
    hpm = _realized_steps(ctrl_in[w, ctrl_step, i], eps, ctrl_lo[i], ctrl_hi[i])
  else:
    hpm = wp.vec2(h_param[w, c - nx - nu])

  lane_world = wp.vec4i(-1)
  for i in range(4):
    if lanes[i] >= 0:
      lane_world[i] = lanes[i] * nworld + w
  lp, lm, inv = _pick_lanes(w, lane_world, wp.vec4(hpm[0], hpm[1], gpm[0], gpm[1]), signature, kink, switches_out,
                          kinks_out, step)

  for s in range(ns):
    sjac_out[w, step, s, c] = (sensordata[lp, s] - sensordata[lm, s]) * inv
  if with_state == 0:
    return
  _state_difference(njnt, jnt_type, jnt_qposadr, jnt_dofadr, qpos, qvel, act, lp, lm, inv, jac_out, w, step, c)


@wp.func
def _tangent_scale(
  c: int, w: int, step: int, nparam: int, eps_state: float,
  h_param: wp.array2d[float],  # (nworld, nparam) realized parameter steps
  dx: wp.array4d[float],  # (nworld, nstep + 1, nx, ndir)
) -> float:
  """Step `h` along direction `c`: a parameter direction keeps the parameter's realized step (its
  model rows are written once per rollout); a state-only direction is scaled so that its largest
  component moves by `eps_state`."""
  if c < nparam:
    return h_param[w, c]
  m = float(0.0)
  for i in range(dx.shape[2]):
    m = wp.max(m, wp.abs(dx[w, step, i, c]))
  if m > 0.0:
    return eps_state / m
  return eps_state


@wp.kernel
def _tangent_lanes_in(
  # Model:
  nworld: int,
  njnt: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  # In:
  nparam: int,
  eps_state: float,
  lane_coord: wp.array[int],  # (nlane,) direction moved along by the lane, -1: nominal
  lane_sign: wp.array[float],  # (nlane,)
  step0: int,
  ctrl_step0: int,
  step_count: wp.array[int],  # (1,) steps already taken by a replayed one-step graph (0 when eager)
  h_param: wp.array2d[float],  # (nworld, nparam)
  dx: wp.array4d[float],  # (nworld, nstep + 1, nx, ndir) tangents, row `step` read
  qpos_in: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qvel_in: wp.array3d[float],  # (nworld, nstep + 1, nv)
  act_in: wp.array3d[float],  # (nworld, nstep + 1, na)
  ctrl_in: wp.array3d[float],  # (nworld, nstep, nu)
  warm_in: wp.array2d[float],  # (nworld, nv)
  # Data out:
  qpos_out: wp.array2d[float],  # (nlane * nworld, nq)
  qvel_out: wp.array2d[float],
  act_out: wp.array2d[float],
  ctrl_out: wp.array2d[float],
  qacc_warmstart_out: wp.array2d[float],
  # Out:
  h_out: wp.array2d[float],  # (nworld, ndir) step of each direction
):
  step = step0 + step_count[0]
  ctrl_step = ctrl_step0 + step_count[0]
  lw = wp.tid()
  w = lw % nworld
  lane = lw // nworld
  nv = qvel_out.shape[1]
  na = act_out.shape[1]
  _copy_nominal(lw, w, step, ctrl_step, qpos_in, qvel_in, act_in, ctrl_in, warm_in,
                qpos_out, qvel_out, act_out, ctrl_out, qacc_warmstart_out)

  c = lane_coord[lane]
  if c < 0:
    return
  h = _tangent_scale(c, w, step, nparam, eps_state, h_param, dx)
  if lane_sign[lane] > 0.0:
    h_out[w, c] = h
  h *= lane_sign[lane]
  for j in range(njnt):
    typ = jnt_type[j]
    qadr = jnt_qposadr[j]
    dadr = jnt_dofadr[j]
    if typ == SLIDE or typ == HINGE:
      qpos_out[lw, qadr] += h * dx[w, step, dadr, c]
    else:
      if typ == FREE:
        for i in range(3):
          qpos_out[lw, qadr + i] += h * dx[w, step, dadr + i, c]
        qadr += 3
        dadr += 3
      v = h * wp.vec3(dx[w, step, dadr, c], dx[w, step, dadr + 1, c], dx[w, step, dadr + 2, c])
      store_quat(qpos_out, lw, qadr, quat_integrate(load_quat(qpos_out, lw, qadr), v))
  for i in range(nv):
    qvel_out[lw, i] += h * dx[w, step, nv + i, c]
  for i in range(na):
    act_out[lw, i] += h * dx[w, step, 2 * nv + i, c]


@wp.kernel
def _tangent_lanes_out(
  # Model:
  nworld: int,
  njnt: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  # In:
  central: int,
  step0: int,
  step_count: wp.array[int],  # (1,) steps already taken by a replayed one-step graph (0 when eager)
  with_state: int,
  h_dir: wp.array2d[float],  # (nworld, ndir)
  # Data in:
  qpos: wp.array2d[float],  # (nlane * nworld, nq) after the step
  qvel: wp.array2d[float],
  act: wp.array2d[float],
  sensordata: wp.array2d[float],
  signature: wp.array[int],  # (nlane * nworld,) `_constraint_signature` of each lane's step
  kink: wp.array[int],  # (nlane * nworld,) and the actuation kink it straddles
  # Out:
  dx_out: wp.array4d[float],  # (nworld, nstep + 1, nx, ndir) row `step + 1` written
  ds_out: wp.array4d[float],  # (nworld, nstep + 1, ns, ndir) row `step` written
  switches_out: wp.array2d[int],  # (nworld, nstep + 1) directions whose lanes all switched constraint set
  kinks_out: wp.array2d[int],  # (nworld, nstep + 1) 1 + an actuation kink they straddle
):
  step = step0 + step_count[0]
  w, c = wp.tid()
  plus = (1 + c * wp.where(central != 0, 2, 1)) * nworld + w
  lanes = wp.vec4i(plus, wp.where(central != 0, plus + nworld, -1), -1, -1)
  h = h_dir[w, c]
  lp, lm, inv = _pick_lanes(w, lanes, wp.vec4(h, h, 0.0, 0.0), signature, kink, switches_out, kinks_out, step)
  for s in range(sensordata.shape[1]):
    ds_out[w, step, s, c] = (sensordata[lp, s] - sensordata[lm, s]) * inv
  if with_state == 0:
    return
  _state_difference(njnt, jnt_type, jnt_qposadr, jnt_dofadr, qpos, qvel, act, lp, lm, inv, dx_out, w, step + 1, c)


@wp.kernel
def _increment(count: wp.array[int]):
  count[0] += 1


@wp.kernel
def _store_nominal(
  # In:
  step0: int,
  step_count: wp.array[int],  # (1,) steps already taken by a replayed one-step graph (0 when eager)
  store_state: int,
  # Data in:
  qpos: wp.array2d[float],  # (nlane * nworld, nq), lane 0 first
  qvel: wp.array2d[float],
  act: wp.array2d[float],
  qacc_warmstart: wp.array2d[float],
  sensordata: wp.array2d[float],
  # Out:
  qpos_out: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qvel_out: wp.array3d[float],
  act_out: wp.array3d[float],
  sensordata_out: wp.array3d[float],  # (nworld, nstep + 1, ns)
  warm_out: wp.array2d[float],  # (nworld, nv)
):
  step = step0 + step_count[0]
  w = wp.tid()
  for s in range(sensordata.shape[1]):
    sensordata_out[w, step, s] = sensordata[w, s]
  if store_state == 0:
    return
  for i in range(qpos.shape[1]):
    qpos_out[w, step + 1, i] = qpos[w, i]
  for i in range(qvel.shape[1]):
    qvel_out[w, step + 1, i] = qvel[w, i]
    warm_out[w, i] = qacc_warmstart[w, i]
  for i in range(act.shape[1]):
    act_out[w, step + 1, i] = act[w, i]


# Steps by input group. Larger steps lose less to float32 rounding, but a step must stay inside the
# kinks it would otherwise straddle: in a model with position constraints (contacts, equality
# constraints, joint or tendon limits) qpos steps stay below the ~1 mm width of the constraint
# impedance (solimp); in a model whose forces kink in the controls (force-limited actuators, dry
# friction) control steps stay below what moves a servo across them (on the SO-101 a 1e-2 control
# step errs by 6% of the gradient, 1e-3 by 1e-4).
DEFAULT_EPS = {"qpos": 1e-3, "qvel": 1e-2, "act": 1e-2, "ctrl": 1e-2, "param": 1e-2}
CONSTRAINT_QPOS_EPS = 1e-4
KINKED_CTRL_EPS = 1e-3
# guard step / step of the qpos guard lanes (`FiniteDifferenceStep`, `_pick_lanes`)
GUARD = 0.125


def resolve_eps(eps, scene=None) -> dict[str, float]:
  """Finite-difference steps by input group from a float, a dict, or `None` (defaults); the default
  qpos step is `CONSTRAINT_QPOS_EPS` in a `scene` with position constraints, the default control
  step `KINKED_CTRL_EPS` in one with force kinks (`Scene.has_position_constraints`,
  `Scene.has_force_kinks`)."""
  defaults = dict(DEFAULT_EPS)
  if scene is not None and scene.has_position_constraints:
    defaults["qpos"] = CONSTRAINT_QPOS_EPS
  if scene is not None and scene.has_force_kinks:
    defaults["ctrl"] = KINKED_CTRL_EPS
  if eps is None:
    return defaults
  if isinstance(eps, dict):
    unknown = set(eps) - set(DEFAULT_EPS)
    if unknown:
      raise ValueError(f"unknown eps keys {sorted(unknown)}; use {sorted(DEFAULT_EPS)}")
    out = {**defaults, **{k: float(v) for k, v in eps.items()}}
  else:
    out = {k: float(eps) for k in DEFAULT_EPS}
  if not all(v > 0 and np.isfinite(v) for v in out.values()):
    raise ValueError(f"finite-difference steps must be positive, got {out}")
  return out


class FiniteDifferenceStep:
  """MJWarp step plus its Jacobians from perturbation lanes (see the module docstring).

  Args:
    scene: the `Scene`.
    nparam: number of scalar model parameters in `z` (their lanes are set by `ParamLayout.apply`).
    differentiable: form Jacobians (`nlane = 1 + 2 nz` central, `1 + nz` forward; with guard
      lanes `2 nv` / `nv` more) or only step the nominal lane (`nlane = 1`).
    central: central (default) or forward differences.
    ctrl_jacobian: form the control columns of the Jacobians (default). Without them (zero columns)
      the step needs `2 nu` (central) or `nu` (forward) fewer lanes; for Jacobians with respect to
      states and parameters only, as system identification needs.
    eps: step of each input group, a float for all or a dict with keys `"qpos"` (m or rad, in the
      tangent space), `"qvel"`, `"act"`, `"ctrl"` (ctrl units) and `"param"` (relative: the step is
      `eps * max(|theta|, 0.01)`); missing keys take `DEFAULT_EPS` (qpos: `CONSTRAINT_QPOS_EPS` in models
      with contacts, equality constraints or joint / tendon limits; ctrl: `KINKED_CTRL_EPS` in models
      with force-limited actuators or dry friction; see `resolve_eps` and the README's note on
      gradient quality).
    directions: `m > 0` selects forward mode (see the module docstring): `m` tangent directions, the
      first `nparam` of which also move their parameter; `step` and `sense` then propagate tangents
      instead of forming Jacobians (`nlane = 1 + m` forward, `1 + 2 m` central). A parameter
      direction is stepped by the parameter's step (`eps["param"]`), a state-only one so that its
      largest component moves by `eps["qpos"]`.
    guard: guard lanes for the qpos coordinates (see the module docstring); `None` (default): in
      models with position constraints (`Scene.has_position_constraints`). Not in forward mode.
  """

  def __init__(self, scene, nparam: int = 0, *, differentiable: bool = True, central: bool = True,
               ctrl_jacobian: bool = True, eps: float | dict = None, directions: int = 0,
               guard: bool | None = None, lazy: bool = False):
    if not isinstance(directions, (int, np.integer)) or directions < 0:
      raise ValueError(f"directions must be a non-negative integer, got {directions!r}")
    if directions and (not differentiable or directions < nparam):
      raise ValueError(f"forward mode needs differentiable=True and a direction per parameter "
                       f"(directions >= nparam = {nparam}), got directions={directions}")
    self.scene = scene
    self.nparam = nparam
    self.nz = scene.nx + scene.nu + nparam
    self.ndir = int(directions)
    self.differentiable = differentiable
    self.central = bool(central)
    self.ctrl_jacobian = bool(ctrl_jacobian) and not self.ndir
    self.eps = resolve_eps(eps, scene)
    # qpos coordinates of a model with position constraints get guard lanes, so that a constraint
    # row switching inside the step leaves a clean difference (`_pick_lanes`): down by the step too
    # when differencing forward, and up and down by `GUARD` times the step when central
    self.guard = bool(scene.has_position_constraints if guard is None else guard) and differentiable and not self.ndir
    coord = [-1]
    sign = [0.0]
    lanes = np.full((self.nz, 4), -1, np.int32)  # lanes of each coordinate: up, down, guard up, guard down
    if self.ndir:
      # lanes of direction c: 1 + c (forward); 1 + 2c, 2 + 2c (central), so parameter c's lanes
      # are those of direction c (`ParamLayout.apply` with lane0 = 1)
      for c in range(self.ndir):
        coord += [c, c] if central else [c]
        sign += [1.0, -1.0] if central else [1.0]
    elif differentiable:
      for c in range(self.nz):
        if not ctrl_jacobian and scene.nx <= c < scene.nx + scene.nu:
          continue
        signs = [1.0, -1.0] if central else [1.0]
        if self.guard and c < scene.nv:
          signs = [1.0, -1.0, GUARD, -GUARD] if central else [1.0, -1.0]
        lanes[c, :len(signs)] = len(coord) + np.arange(len(signs))
        coord += [c] * len(signs)
        sign += signs
    self.nlane = len(coord)
    self._lanes = lanes
    dev = scene.device
    e = self.eps
    eps_z = [e["qpos"]] * scene.nv + [e["qvel"]] * scene.nv + [e["act"]] * scene.na + [e["ctrl"]] * scene.nu
    eps_z += [e["param"]] * nparam
    self.eps_z = wp.array(np.array(eps_z, dtype=np.float32), dtype=float, device=dev)
    self.lane_coord = wp.array(np.array(coord, dtype=np.int32), dtype=int, device=dev)
    self.lane_sign = wp.array(np.array(sign, dtype=np.float32), dtype=float, device=dev)
    self.coord_lanes = wp.array(lanes, dtype=wp.vec4i, device=dev)
    # the lane worlds' MJWarp Data; `lazy`: on first use (a Rollout whose tape gradients are analytic
    # steps them only to linearize)
    self._data = self._physics = None
    if not lazy:
      self._allocate()
    # steps taken by a captured one-step graph replayed in a loop (see `advance`); 0 when eager
    self.count = wp.zeros(1, dtype=int, device=dev)
    self.h_dir = wp.zeros((scene.nworld, max(self.ndir, 1)), dtype=float, device=dev)
    self.signature = wp.zeros(self.nlane * scene.nworld, dtype=int, device=dev)
    self.kink = wp.zeros(self.nlane * scene.nworld, dtype=int, device=dev)

  @property
  def data(self):
    """MJWarp `Data` of the `nlane * nworld` lane worlds, nominal lane first."""
    if self._data is None:
      if self.scene.device.is_capturing:
        raise RuntimeError(f"the {self.nlane} perturbation lanes per world were first needed inside a graph "
                           "capture, where they cannot be allocated; run the call once eagerly before capturing")
      self._allocate()
    return self._data

  def _allocate(self) -> None:
    self._data = self.scene.data(self.nlane)
    # mjw.step without idle constraint solves; the lanes at their own solver tolerance
    s = self.scene
    tolerance, follow = (s.lane_tolerance_array if self.differentiable else None), 0
    if self.differentiable and s.lane_stop == "nominal" and self.nlane > 1:
      from .lane_solver import FOLLOW_TOLERANCE, follows

      if follows(s.model) and skips_solver(s.model, self._data):
        # every world at a tight tolerance (or the one `SolverSettings` sets), no lane stopping before
        # its nominal world or its central difference's partner (`lane_solver`)
        tol = FOLLOW_TOLERANCE if s.solver.tolerance is None else s.lane_tolerance
        tolerance, follow = wp.array([tol], dtype=float, device=s.device), s.nworld
    self._physics = Physics(s.model, self._data, tolerance=tolerance, follow=follow,
                            pairs=bool(follow) and self.central)

  @property
  def param_lane0(self) -> int:
    """Lane of the first parameter coordinate (-1 when not differentiating)."""
    if not self.differentiable:
      return -1
    if self.ndir:
      return 1
    return int(self._lanes[self.scene.nx + self.scene.nu, 0]) if self.nparam else self.nlane

  def begin(self) -> None:
    """Resets time and step counter of every lane before a rollout."""
    self.data.time.zero_()
    self.count.zero_()

  def advance(self) -> None:
    """Adds one to the step counter: `step(k)` then reads and writes step `k + count`, so a graph of
    `step(0); advance()` replayed `n` times runs steps `0 .. n - 1` (call `count.zero_()` after)."""
    wp.launch(_increment, dim=1, device=self.scene.device, outputs=[self.count])

  def _lanes_in(self, traj, ctrl, warm, step: int, ctrl_step: int, h_param=None, jac=None) -> None:
    s, d = self.scene, self.data
    if self.ndir:
      wp.launch(
        _tangent_lanes_in, dim=self.nlane * s.nworld, device=s.device,
        inputs=[s.nworld, s.mjm.njnt, s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, self.nparam, self.eps["qpos"],
                self.lane_coord, self.lane_sign, step, ctrl_step, self.count, h_param, jac,
                traj.qpos, traj.qvel, traj.act, ctrl, warm],
        outputs=[d.qpos, d.qvel, d.act, d.ctrl, d.qacc_warmstart, self.h_dir])
      return
    wp.launch(
      _lanes_in, dim=self.nlane * s.nworld, device=s.device,
      inputs=[s.nworld, s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, s.dof_jntid, s.ctrl_lo, s.ctrl_hi,
              self.lane_coord, self.lane_sign,
              self.eps_z, step, ctrl_step, self.count, traj.qpos, traj.qvel, traj.act, ctrl, warm],
      outputs=[d.qpos, d.qvel, d.act, d.ctrl, d.qacc_warmstart])

  def _lanes_out(self, traj, ctrl, h_param, jac, sjac, switches, kinks, step: int, ctrl_step: int,
                 with_state: bool) -> None:
    s, d, m = self.scene, self.data, self.scene.model
    wp.launch(_constraint_signature, dim=self.nlane * s.nworld, device=s.device,
              inputs=[s.nworld, m.dof_jntid, m.jnt_actfrclimited, m.jnt_actfrcrange, m.actuator_trntype,
                      m.actuator_trnid, m.actuator_forcelimited, m.actuator_forcerange, m.tendon_actfrclimited,
                      m.tendon_actfrcrange,
                      d.nefc, d.efc.type, d.efc.state, d.actuator_force, d.qfrc_actuator],
              outputs=[self.signature, self.kink])
    if self.ndir:
      wp.launch(
        _tangent_lanes_out, dim=(s.nworld, self.ndir), device=s.device,
        inputs=[s.nworld, s.mjm.njnt, s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, int(self.central), step, self.count,
                int(with_state), self.h_dir, d.qpos, d.qvel, d.act, d.sensordata, self.signature, self.kink],
        outputs=[jac, sjac, switches, kinks])
      return
    wp.launch(
      _lanes_out, dim=(s.nworld, self.nz), device=s.device,
      inputs=[s.nworld, s.mjm.njnt, s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, s.dof_jntid, s.ctrl_lo, s.ctrl_hi,
              int(self.central),
              self.eps_z, self.coord_lanes, GUARD, step, ctrl_step, self.count, int(with_state), traj.qpos, traj.qvel,
              traj.act, ctrl, h_param,
              d.qpos, d.qvel, d.act, d.sensordata, self.signature, self.kink],
      outputs=[jac, sjac, switches, kinks])

  def step(self, traj, ctrl, warm, k: int, *, h_param=None, jac=None, sjac=None, switches=None,
           kinks=None) -> None:
    """Steps state `k` of `traj` with `ctrl[:, k]`: writes state `k + 1`, sensordata `k` and
    (when differentiable) `jac[:, k]`, `sjac[:, k]` and adds the columns that crossed a constraint
    switch on every lane to `switches[:, k]` (`(nworld, nstep + 1)` int, zeroed by the caller), 1 + the
    actuation kink they straddle to `kinks[:, k]` (same shape, `lane_solver.kink_name`); in forward
    mode `jac` and `sjac` are the tangents `(nworld, nstep + 1, nx, ndir)`, `(nworld, nstep + 1, ns, ndir)`: reads `jac[:, k]`,
    writes `jac[:, k + 1]` and `sjac[:, k]`."""
    s, d = self.scene, self.data
    self._lanes_in(traj, ctrl, warm, k, k, h_param, jac)
    self._physics.step()
    wp.launch(_store_nominal, dim=s.nworld, device=s.device, inputs=[k, self.count, 1, d.qpos, d.qvel, d.act,
              d.qacc_warmstart, d.sensordata], outputs=[traj.qpos, traj.qvel, traj.act, traj.sensordata, warm])
    if self.differentiable:
      self._lanes_out(traj, ctrl, h_param, jac, sjac, switches, kinks, k, k, True)

  def sense(self, traj, ctrl, warm, k: int, *, h_param=None, jac=None, sjac=None, switches=None,
            kinks=None) -> None:
    """Sensors at the final state `k` (control held at `ctrl[:, k - 1]`): sensordata `k`, `sjac[:, k]`."""
    s, d = self.scene, self.data
    self._lanes_in(traj, ctrl, warm, k, k - 1, h_param, jac)
    self._physics.forward()
    wp.launch(_store_nominal, dim=s.nworld, device=s.device, inputs=[k, self.count, 0, d.qpos, d.qvel, d.act,
              d.qacc_warmstart, d.sensordata], outputs=[traj.qpos, traj.qvel, traj.act, traj.sensordata, warm])
    if self.differentiable:
      self._lanes_out(traj, ctrl, h_param, jac, sjac, switches, kinks, k, k - 1, False)

