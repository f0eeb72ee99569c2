"""Custom Warp kernels that share a `wp.Tape` with MJWarp rollouts.

`integrate_gravity` is an ordinary differentiable Warp kernel (Warp generates its adjoint), so a
ballistic flight launched from a rollout's sensor values (e.g. a site's position and velocity at
release) back-propagates into the rollout's controls.

Also `init_state` (trajectory row 0 from initial states), which custom rollout loops reuse. The
tangent-space maths of `qpos` (quaternion steps and differences) lives in `diffsim.joints`.
"""

from __future__ import annotations

import warp as wp

__all__ = ["integrate_gravity", "ballistic", "init_state"]

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
