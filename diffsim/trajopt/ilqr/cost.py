"""The cost's local model along iLQR's nominal trajectory: gradient and Gauss-Newton curvature.

The gradient comes from a tape over the cost (any term, user kernels included), pulled back to the
tangent space of the state `x = (qpos (-) qpos_ref, qvel, act)` (`nx = 2 nv + na`) and, for sensor
terms, through the sensor Jacobians `S = [C D]`. The curvature is Gauss-Newton, `J^T W J`, of the
built-in terms' residual channels (`losses.Cost`), whose Jacobians are known: identity rows for
positions, velocities and controls, `S` rows for sensors. A `CtrlRateCost` makes the previous
control part of the state (`nxa = nx + nu`).
"""

from __future__ import annotations

import warp as wp

from ...joints import tangent_grad
from ...losses import CTRL, QPOS, QVEL, SENSOR


@wp.struct
class CostChannels:
  """The built-in terms' residual channels (`losses.Cost`'s `ch_*` arrays)."""

  kind: wp.array[int]  # (nch,) QPOS, QVEL, SENSOR, CTRL or CTRL_RATE
  index: wp.array[int]  # (nch,) source column: sensor or actuator
  column: wp.array[int]  # (nch,) tangent column of a QPOS or QVEL residual
  running: wp.array[float]  # (nch,) weights, dt folded in
  terminal: wp.array[float]  # (nch,)
  count: int  # nch (the arrays are padded to at least one entry)


def cost_channels(cost) -> CostChannels:
  """The channels of a bound `losses.Cost`, as the struct the iLQR kernels take."""
  channels = CostChannels()
  channels.kind, channels.index, channels.column = cost.ch_kind, cost.ch_idx, cost.ch_col
  channels.running, channels.terminal, channels.count = cost.ch_running, cost.ch_terminal, cost.nch
  return channels


@wp.kernel
def cost_gradient(
  # Model:
  nv: int,
  na: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qpos_grad: wp.array3d[float],  # d(cost)/d(trajectory), from the cost's tape
  qvel_grad: wp.array3d[float],
  act_grad: wp.array3d[float],
  sensordata_grad: wp.array3d[float],  # (nworld, nstep + 1, ns)
  ctrl_grad: wp.array3d[float],  # (nworld, nstep, nu)
  sjac: wp.array4d[float],  # (nworld, nstep + 1, ns, nz) sensor Jacobians [C D]
  # Out:
  gx_out: wp.array3d[float],  # (nworld, nstep + 1, nx) cost gradient in the tangent space
  gu_out: wp.array3d[float],  # (nworld, nstep, nu)
):
  world, step = wp.tid()
  nx = 2 * nv + na
  nstep = gu_out.shape[1]
  nsensor = sjac.shape[2]
  for c in range(nv):
    gx_out[world, step, c] = tangent_grad(c, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, qpos[world], step,
                                          qpos_grad[world], step)
    gx_out[world, step, nv + c] = qvel_grad[world, step, c]
  for c in range(na):
    gx_out[world, step, 2 * nv + c] = act_grad[world, step, c]
  # sensors pull back through their Jacobians S = [C D]
  for s in range(nsensor):
    g = sensordata_grad[world, step, s]
    if g != 0.0:
      for c in range(nx):
        gx_out[world, step, c] += sjac[world, step, s, c] * g
  if step < nstep:
    for i in range(gu_out.shape[2]):
      g = float(ctrl_grad[world, step, i])
      for s in range(nsensor):
        g += sjac[world, step, s, nx + i] * sensordata_grad[world, step, s]
      if step == nstep - 1:  # the final row's control columns belong to the last control
        for s in range(nsensor):
          g += sjac[world, step + 1, s, nx + i] * sensordata_grad[world, step + 1, s]
      gu_out[world, step, i] = g


@wp.func
def add_curvature(
  world: int, step: int, terminal: int, nx: int, channels: CostChannels, sjac: wp.array4d[float],
  xx: wp.array3d[float], uu: wp.array3d[float], ux: wp.array3d[float],
):
  """Adds the Gauss-Newton curvature of the built-in terms at row `step` to `xx`, `uu`, `ux`
  (`(nworld, nxa, nxa)`, `(nworld, nu, nu)`, `(nworld, nu, nxa)`; `terminal`: the final row's weights)."""
  nu = uu.shape[1]
  for c in range(channels.count):
    kind = channels.kind[c]
    weight = channels.running[c]
    if terminal != 0:
      weight = channels.terminal[c]
    if weight == 0.0:
      continue
    if kind == QPOS or kind == QVEL:
      col = channels.column[c]
      xx[world, col, col] += weight
    elif kind == SENSOR:
      s = channels.index[c]
      for a in range(nx):
        ja = sjac[world, step, s, a]
        if ja != 0.0:
          for b in range(nx):
            xx[world, a, b] += weight * ja * sjac[world, step, s, b]
      if terminal == 0:
        for i in range(nu):
          di = sjac[world, step, s, nx + i]
          if di != 0.0:
            for j in range(nu):
              uu[world, i, j] += weight * di * sjac[world, step, s, nx + j]
            for b in range(nx):
              ux[world, i, b] += weight * di * sjac[world, step, s, b]
    elif terminal == 0:
      i = channels.index[c]
      if kind == CTRL:
        uu[world, i, i] += weight
      elif step > 0:  # CTRL_RATE: residual u_k - u_{k-1}, u_{k-1} is the augmented state
        uu[world, i, i] += weight
        xx[world, nx + i, nx + i] += weight
        ux[world, i, nx + i] -= weight


@wp.func
def add_terminal_control_curvature(
  world: int, nx: int, channels: CostChannels, jac: wp.array4d[float], sjac: wp.array4d[float],
  uu: wp.array3d[float], ux: wp.array3d[float],
):
  """Adds to the last step's `uu`, `ux` the Gauss-Newton terms of terminal sensor residuals that
  depend on the last control (row `nstep` is sensed with it held): with `r = C_T dx_T + D_T du`
  and `dx_T = A dx + B du`, `V_T` already holds `C_T^T W C_T`; the rest is
  `uu += W (D^T D + (C B)^T D + D^T C B)`, `ux += W D^T C A`."""
  nstep = jac.shape[1]
  step = nstep - 1
  nu = uu.shape[1]
  for c in range(channels.count):
    weight = channels.terminal[c]
    if channels.kind[c] != SENSOR or weight == 0.0:
      continue
    s = channels.index[c]
    coupled = int(0)
    for i in range(nu):
      if sjac[world, nstep, s, nx + i] != 0.0:
        coupled = 1
    if coupled == 0:  # e.g. positions: nothing beyond V_T
      continue
    for i in range(nu):
      di = sjac[world, nstep, s, nx + i]
      cbi = float(0.0)
      for p in range(nx):
        cbi += sjac[world, nstep, s, p] * jac[world, step, p, nx + i]
      for j in range(nu):
        dj = sjac[world, nstep, s, nx + j]
        cbj = float(0.0)
        for p in range(nx):
          cbj += sjac[world, nstep, s, p] * jac[world, step, p, nx + j]
        uu[world, i, j] += weight * (di * dj + cbi * dj + di * cbj)
      if di != 0.0:
        for b in range(nx):
          ca = float(0.0)
          for p in range(nx):
            ca += sjac[world, nstep, s, p] * jac[world, step, p, b]
          ux[world, i, b] += weight * di * ca
