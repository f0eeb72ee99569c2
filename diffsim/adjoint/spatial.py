"""Rigid-body helpers of the replayed kernels (MuJoCo's quaternion order w, x, y, z in a `wp.quat`, as
MJWarp stores them; spatial vectors rotation first).

Copies of MJWarp's math functions so that Warp generates their adjoints in the adjoint's kernels.
"""

from __future__ import annotations

import warp as wp

from mujoco_warp._src.types import vec10

_MINVAL = 1e-15


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
