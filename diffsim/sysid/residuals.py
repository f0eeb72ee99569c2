"""Warp kernels of system identification: residuals, their Jacobian, costs and parameter scatter/gather.

Layouts: a world `w` belongs to start `world_start[w]` (`nstart` initial guesses side by side, `nseg`
worlds each). Sample slot `j` of a world holds recorded row `j` of its segment, simulated at step
`sample_step[w, j]` (-1: padding); `step_sample` is the inverse map. A sample's residuals are
`nsignal = 2 nv + nsensordata` values: qpos in the tangent space, qvel, sensors.
"""

import warp as wp

from ..joints import qpos_diff


@wp.kernel
def residuals(
  # Model:
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  sample_step: wp.array2d[int],  # (nworld, nsample) simulation step of each sample, -1: padding
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq) simulated
  qvel: wp.array3d[float],  # (nworld, nstep + 1, nv)
  sensordata: wp.array3d[float],  # (nworld, nstep + 1, ns)
  meas_qpos: wp.array3d[float],  # (nworld, nsample, nq) measured
  meas_qvel: wp.array3d[float],  # (nworld, nsample, nv)
  meas_sensordata: wp.array3d[float],  # (nworld, nsample, ns)
  weight: wp.array3d[float],  # (nworld, nsample, nsignal) 0 where not measured
  # Out:
  res_out: wp.array3d[float],  # (nworld, nsample, nsignal) = weight * (simulated - measured)
):
  w, j = wp.tid()
  k = sample_step[w, j]
  if k < 0:
    return
  nv = meas_qvel.shape[2]
  # qpos in the tangent space of the measurement (quaternions as rotation vectors, mju_subQuat)
  for c in range(nv):
    d = qpos_diff(c, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, qpos[w], k, meas_qpos[w], j)
    res_out[w, j, c] = weight[w, j, c] * d
  for i in range(nv):
    res_out[w, j, nv + i] = weight[w, j, nv + i] * (qvel[w, k, i] - meas_qvel[w, j, i])
  for s in range(meas_sensordata.shape[2]):
    res_out[w, j, 2 * nv + s] = weight[w, j, 2 * nv + s] * (sensordata[w, k, s] - meas_sensordata[w, j, s])


@wp.kernel
def half_sum_squares(
  # In:
  res: wp.array3d[float],  # (nworld, nsample, nsignal)
  world_start: wp.array[int],  # (nworld,) start (initial guess) each world belongs to
  # Out:
  cost_out: wp.array[float],  # (nstart,) accumulated
):
  w, j, i = wp.tid()
  r = res[w, j, i]
  wp.atomic_add(cost_out, world_start[w], 0.5 * r * r)


@wp.kernel
def tangent_linear(
  # In:
  nv: int,
  nu: int,
  nlayout: int,
  k0: int,
  count: wp.array[int],  # (1,) step k = k0 + count[0] (see `Rollout.stages`)
  nstep: int,
  step_sample: wp.array2d[int],  # (nworld, nstep + 1) sample slot of each step, -1: none
  step_jac: wp.array4d[float],  # (nworld, nstep, nx, nz) step Jacobians [A B P]
  sensor_jac: wp.array4d[float],  # (nworld, nstep + 1, ns, nz) sensor Jacobians [C D Q]
  weight: wp.array3d[float],  # (nworld, nsample, nsignal)
  tangent_in: wp.array3d[float],  # (nworld, nx, ncol) dx_k/d(theta, nuisance)
  # Out:
  tangent_out: wp.array3d[float],  # (nworld, nx, ncol) dx_{k+1}/d(theta, nuisance)
  res_jac_out: wp.array4d[float],  # (nworld, nsample, nsignal, ncol) dr/d(theta, nuisance)
):
  # columns c < nlayout are parameters (direct terms P, Q); the others are initial states, which
  # enter only through dx_0
  w, c = wp.tid()
  k = k0 + count[0]
  nx = tangent_in.shape[1]
  th = nx + nu + c  # column of theta_c in z
  j = step_sample[w, k]
  if j >= 0:
    # residuals of sample j: state rows are dx_k, sensor rows C_k dx_k + Q_k
    for i in range(2 * nv):
      res_jac_out[w, j, i, c] = weight[w, j, i] * tangent_in[w, i, c]
    for s in range(sensor_jac.shape[2]):
      g = float(0.0)
      if c < nlayout:
        g = sensor_jac[w, k, s, th]
      for row in range(nx):
        g += sensor_jac[w, k, s, row] * tangent_in[w, row, c]
      res_jac_out[w, j, 2 * nv + s, c] = weight[w, j, 2 * nv + s] * g
  if k < nstep:
    for i in range(nx):
      g = float(0.0)
      if c < nlayout:
        g = step_jac[w, k, i, th]
      for row in range(nx):
        g += step_jac[w, k, i, row] * tangent_in[w, row, c]
      tangent_out[w, i, c] = g


@wp.kernel
def constraint_changes(
  # In:
  k0: int,
  count: wp.array[int],  # (1,) step k = k0 + count[0] (see `Rollout.stages`)
  nefc: wp.array[int],  # (nlane * nworld,) constraint rows of each lane world's step, lane 0 nominal
  efc_type: wp.array2d[int],  # (nlane * nworld, njmax) their types
  # Out:
  last_out: wp.array[int],  # (nworld,) hash of the nominal rows of the previous step
  changes_out: wp.array[int],  # (nworld,) steps whose nominal constraint rows differ from the previous step's
  rows_out: wp.array[int],  # (nworld,) steps with constraint rows along the nominal trajectory
):
  # a limit or contact row appearing or vanishing along the nominal trajectory, where the step map
  # jumps (see `Problem.linearize`); a row changing regime (a frictionloss or friction row between
  # sticking and sliding, a limit between pushing and not) is a kink, which the step Jacobians see
  w = wp.tid()
  n = wp.min(nefc[w], efc_type.shape[1])
  h = wp.int64(n)
  for i in range(n):
    h = (h * wp.int64(31) + wp.int64(efc_type[w, i] + 1)) % wp.int64(2147483647)
  sig = int(h)
  if k0 + count[0] > 0 and sig != last_out[w]:
    changes_out[w] += 1
  if n > 0:
    rows_out[w] += 1
  last_out[w] = sig


@wp.kernel
def residual_jacobian(
  # In:
  nv: int,
  sample_step: wp.array2d[int],  # (nworld, nsample) simulation step of each sample, -1: padding
  state_tangent: wp.array4d[float],  # (nworld, nstep + 1, nx, ncol) d x_k / d(theta, nuisance)
  sensor_tangent: wp.array4d[float],  # (nworld, nstep + 1, ns, ncol)
  weight: wp.array3d[float],  # (nworld, nsample, nsignal)
  # Out:
  res_jac_out: wp.array4d[float],  # (nworld, nsample, nsignal, ncol) d(residual)/d(theta, nuisance)
):
  w, j, c = wp.tid()
  k = sample_step[w, j]
  nsignal = res_jac_out.shape[2]
  for i in range(nsignal):
    g = float(0.0)
    if k >= 0:
      if i < 2 * nv:
        g = state_tangent[w, k, i, c]
      else:
        g = sensor_tangent[w, k, i - 2 * nv, c]
    res_jac_out[w, j, i, c] = weight[w, j, i] * g


@wp.kernel
def seed_residual(
  # In:
  j: int,
  i: int,
  # Out:
  res_grad_out: wp.array3d[float],  # (nworld, nsample, nsignal)
):
  w = wp.tid()
  res_grad_out[w, j, i] = 1.0


@wp.kernel
def gather_grad(
  # In:
  value_grad: wp.array2d[float],  # (nworld, dim) one parameter's gradient per world
  param_column: wp.array[int],  # (nlayout,) identified coordinate of each layout coordinate
  offset: int,  # the parameter's first layout coordinate
  world_start: wp.array[int],  # (nworld,)
  # Out:
  grad_out: wp.array2d[float],  # (nstart, nparam) accumulated over the worlds of each start
):
  w, i = wp.tid()
  wp.atomic_add(grad_out, world_start[w], param_column[offset + i], value_grad[w, i])


@wp.kernel
def scatter_theta(
  # In:
  theta: wp.array2d[float],  # (nstart, nparam) identified values
  param_column: wp.array[int],  # (nlayout,) identified coordinate of each layout coordinate
  offset: int,  # the parameter's first layout coordinate
  world_start: wp.array[int],  # (nworld,)
  # Out:
  value_out: wp.array2d[float],  # (nworld, dim) one parameter's per-world value
):
  w, i = wp.tid()
  value_out[w, i] = theta[world_start[w], param_column[offset + i]]
