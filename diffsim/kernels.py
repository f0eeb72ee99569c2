"""Custom Warp kernels that share a `wp.Tape` with MJWarp rollouts.

`integrate_gravity` is an ordinary differentiable Warp kernel (Warp generates its adjoint), so a
ballistic flight launched from a rollout's sensor values (e.g. a site's position and velocity at
release) back-propagates into the rollout's controls.

Also the quaternion helpers used to perturb and difference `qpos` in the tangent space, matching
MuJoCo's `mju_quatIntegrate` and `mju_subQuat`, and the pieces of a rollout that custom loops reuse:
`init_state` (trajectory row 0 from initial states) and `tangent_grad` (a `qpos` gradient mapped to
the tangent space of the joints).
"""

from __future__ import annotations

import warp as wp

__all__ = ["integrate_gravity", "ballistic", "quat_integrate", "quat_sub", "init_state", "tangent_grad"]

_FREE, _BALL = 0, 1  # mjtJoint


@wp.func
def quat_integrate(q: wp.quat, v: wp.vec3) -> wp.quat:
  """`q * exp(v / 2)` with `q` in MuJoCo's (w, x, y, z) order stored as a Warp quat (x, y, z, w).

  Matches `mju_quatIntegrate(q, v, 1)`: `v` is a rotation vector in the local frame.
  """
  angle = wp.length(v)
  dq = wp.quat_identity()
  if angle > 0.0:
    dq = wp.quat_from_axis_angle(v / angle, angle)
  return wp.normalize(q * dq)


@wp.func
def quat_sub(qa: wp.quat, qb: wp.quat) -> wp.vec3:
  """Rotation vector `v` with `qb * exp(v / 2) = qa`, as `mju_subQuat(v, qa, qb)`."""
  dq = wp.quat_inverse(qb) * qa
  xyz = wp.vec3(dq[0], dq[1], dq[2])
  s = wp.length(xyz)
  if s == 0.0:
    return wp.vec3(0.0)
  angle = 2.0 * wp.atan2(s, dq[3])
  if angle > wp.pi:
    angle -= 2.0 * wp.pi
  return xyz * (angle / s)


@wp.func
def load_quat(a: wp.array2d[float], row: int, adr: int) -> wp.quat:
  """MuJoCo (w, x, y, z) at `a[row, adr:adr+4]` as a Warp quat."""
  return wp.quat(a[row, adr + 1], a[row, adr + 2], a[row, adr + 3], a[row, adr + 0])


@wp.func
def store_quat(a: wp.array2d[float], row: int, adr: int, q: wp.quat):
  a[row, adr + 0] = q[3]
  a[row, adr + 1] = q[0]
  a[row, adr + 2] = q[1]
  a[row, adr + 3] = q[2]


@wp.kernel
def init_state(
  # In:
  qpos0: wp.array2d[float],  # (nworld or 1, nq)
  qvel0: wp.array2d[float],  # (nworld or 1, nv)
  act0: wp.array2d[float],  # (nworld or 1, na)
  # Out:
  qpos_out: wp.array3d[float],
  qvel_out: wp.array3d[float],
  act_out: wp.array3d[float],
  warm_out: wp.array2d[float],
):
  w = wp.tid()
  for i in range(qpos_out.shape[2]):
    qpos_out[w, 0, i] = qpos0[w % qpos0.shape[0], i]
  for i in range(qvel_out.shape[2]):
    qvel_out[w, 0, i] = qvel0[w % qvel0.shape[0], i]
    warm_out[w, i] = 0.0
  for i in range(act_out.shape[2]):
    act_out[w, 0, i] = act0[w % act0.shape[0], i]


@wp.func
def tangent_grad(
  c: int, w: int, k: int,
  jnt_type: wp.array[int], jnt_qposadr: wp.array[int], jnt_dofadr: wp.array[int], dof_jntid: wp.array[int],
  qpos: wp.array3d[float], qpos_grad: wp.array3d[float],
) -> float:
  """dL/d(tangent dof c) from dL/dqpos: for quaternions `0.5 Im(conj(q) * g)` (`dq = 0.5 q * (0, v)`)."""
  j = dof_jntid[c]
  typ = jnt_type[j]
  qadr = jnt_qposadr[j]
  i = c - jnt_dofadr[j]
  if typ == _FREE:
    if i < 3:
      return qpos_grad[w, k, qadr + i]
    qadr += 3
    i -= 3
  elif typ != _BALL:
    return qpos_grad[w, k, qadr + i]
  q = wp.quat(qpos[w, k, qadr + 1], qpos[w, k, qadr + 2], qpos[w, k, qadr + 3], qpos[w, k, qadr])
  g = wp.quat(qpos_grad[w, k, qadr + 1], qpos_grad[w, k, qadr + 2], qpos_grad[w, k, qadr + 3], qpos_grad[w, k, qadr])
  r = wp.quat_inverse(q) * g
  return 0.5 * r[i]


@wp.kernel
def integrate_gravity(
  # In:
  gravity: wp.vec3,  # (3,) m/s^2
  dt: float,  # s
  x_in: wp.array2d[wp.vec3],  # (npoint, nstep + 1) m; reads column `step`
  v_in: wp.array2d[wp.vec3],  # (npoint, nstep + 1) m/s; reads column `step`
  step: int,
  # Out:
  x_out: wp.array2d[wp.vec3],  # writes column `step + 1`
  v_out: wp.array2d[wp.vec3],  # writes column `step + 1`
):
  """One semi-implicit Euler step of ballistic point masses: `v += g dt; x += v dt`.

  Positions and velocities of every step are kept (one column per step) so the tape can
  differentiate the whole flight; launch once per step with `dim=npoint`.
  """
  i = wp.tid()
  v = v_in[i, step] + gravity * dt
  v_out[i, step + 1] = v
  x_out[i, step + 1] = x_in[i, step] + v * dt


def ballistic(x0: wp.array, v0: wp.array, *, nstep: int, dt: float, gravity=(0.0, 0.0, -9.81)):
  """Flies points from `x0`, `v0` under gravity for `nstep` steps, recorded on the active tape.

  Args:
    x0: `wp.array[wp.vec3]` `(npoint,)` initial positions, m.
    v0: `wp.array[wp.vec3]` `(npoint,)` initial velocities, m/s.
    nstep: number of steps.
    dt: step, s.
    gravity: `(3,)` m/s^2.

  Returns:
    `(x, v)`: `wp.array2d[wp.vec3]` `(npoint, nstep + 1)` each, with gradients.
  """
  n = x0.shape[0]
  dev = x0.device
  x = wp.zeros((n, nstep + 1), dtype=wp.vec3, device=dev, requires_grad=True)
  v = wp.zeros((n, nstep + 1), dtype=wp.vec3, device=dev, requires_grad=True)
  wp.launch(_set_column, dim=n, inputs=[x0, 0], outputs=[x], device=dev)
  wp.launch(_set_column, dim=n, inputs=[v0, 0], outputs=[v], device=dev)
  g = wp.vec3(*[float(c) for c in gravity])
  for k in range(nstep):
    wp.launch(integrate_gravity, dim=n, inputs=[g, float(dt), x, v, k], outputs=[x, v], device=dev)
  return x, v


@wp.kernel
def _set_column(src: wp.array[wp.vec3], col: int, dst: wp.array2d[wp.vec3]):
  i = wp.tid()
  dst[i, col] = src[i]
