"""iLQR's forward pass: the closed-loop control law of the line search, and the acceptance of a step.

A candidate rollout applies `u_k = clamp(u_nom_k + alpha kff_k + kfb_k (x_k (-) x_nom_k))` step by
step, for each line-search step `alpha`; the acceptance keeps, per world, the best candidate if it
beats the nominal cost, and adapts that world's regularization `mu` (Levenberg-Marquardt).
"""

from __future__ import annotations

import warp as wp

from ...joints import qpos_diff


@wp.kernel
def feedback(
  # Model:
  nv: int,
  na: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  step0: int,
  step_count: wp.array[int],  # (1,) step = step0 + step_count[0] (a looped one-step graph's counter)
  alphas: wp.array[float],  # (nalpha,) line-search steps
  alpha_index: wp.array[int],  # (1,) the step of this rollout
  nxa: int,
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq) this rollout, states up to step
  qvel: wp.array3d[float],
  act: wp.array3d[float],
  qpos_nom: wp.array3d[float],  # the nominal trajectory
  qvel_nom: wp.array3d[float],
  act_nom: wp.array3d[float],
  ctrl_nom: wp.array3d[float],  # (nworld, nstep, nu)
  kff: wp.array3d[float],  # (nworld, nstep, nu)
  kfb: wp.array4d[float],  # (nworld, nstep, nu, nxa)
  fail: wp.array[int],  # (nworld,)
  ctrl_lo: wp.array3d[float],
  ctrl_hi: wp.array3d[float],
  # Out:
  ctrl_out: wp.array3d[float],  # (nworld, nstep, nu) writes `step`
):
  """u = clamp(u_nom + alpha kff + kfb (x (-) x_nom)) at one step: the closed-loop line search."""
  world = wp.tid()
  step = step0 + step_count[0]
  nu = ctrl_out.shape[2]
  nx = 2 * nv + na
  if fail[world] != 0:
    for i in range(nu):
      ctrl_out[world, step, i] = ctrl_nom[world, step, i]
    return
  alpha = alphas[alpha_index[0]]
  for i in range(nu):
    ctrl_out[world, step, i] = ctrl_nom[world, step, i] + alpha * kff[world, step, i]
  for a in range(nxa):
    d = float(0.0)
    if a < nv:
      d = qpos_diff(a, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, qpos[world], step, qpos_nom[world], step)
    elif a < 2 * nv:
      d = qvel[world, step, a - nv] - qvel_nom[world, step, a - nv]
    elif a < nx:
      d = act[world, step, a - 2 * nv] - act_nom[world, step, a - 2 * nv]
    elif step > 0:
      d = ctrl_out[world, step - 1, a - nx] - ctrl_nom[world, step - 1, a - nx]
    if d != 0.0:
      for i in range(nu):
        ctrl_out[world, step, i] += kfb[world, step, i, a] * d
  for i in range(nu):
    ctrl_out[world, step, i] = wp.clamp(ctrl_out[world, step, i], ctrl_lo[world, step, i], ctrl_hi[world, step, i])


@wp.kernel
def accept(
  # In:
  ftol_in: wp.array[float],  # (1,) relative decrease below which a world has converged
  mu_min: float,
  mu_max: float,
  mu_factor: float,
  nominal: wp.array[float],  # (nworld,) cost of the nominal controls
  trial: wp.array[float],  # (nworld,) best line-search cost (nominal if none was lower)
  dv: wp.array[float],  # (nworld,) predicted change of the full step
  # Out:
  mu_out: wp.array[float],  # (nworld,)
  status_out: wp.array[int],  # (nworld,) 0: running, 1: converged, 2: stalled (sticky)
  improved_out: wp.array[int],  # (nworld,)
):
  world = wp.tid()
  before = nominal[world]
  after = trial[world]
  scale = ftol_in[0] * wp.max(wp.abs(before), 1.0e-12)
  mu = mu_out[world]
  improved_out[world] = int(after < before)
  if after < before:
    mu = mu / mu_factor
    if mu < mu_min:
      mu = 0.0
    if before - after <= scale and status_out[world] == 0:
      status_out[world] = 1
  else:
    mu = wp.max(mu * mu_factor, mu_min)
    if mu > mu_max and status_out[world] == 0:
      status_out[world] = 2
    mu = wp.min(mu, mu_max)
  # the local model predicts nothing left to gain: a (float32) optimum
  if -dv[world] <= scale and status_out[world] != 1:
    status_out[world] = 1
  mu_out[world] = mu


@wp.kernel
def pack_monitor(best: wp.array[float], status: wp.array[int], monitor_out: wp.array2d[float]):
  """Best cost and status per world in one `(2, nworld)` array: the host check reads both in one copy."""
  world = wp.tid()
  monitor_out[0, world] = best[world]
  monitor_out[1, world] = float(status[world])
