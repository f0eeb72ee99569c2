"""Dynamics, replayed differentiably: recursive Newton-Euler at a given acceleration (body
accelerations, body, subtree and joint forces: `tau_ID = M a + c(q, v)`), the passive forces, the
velocity terms `h B a_e` the integrators treat implicitly (dof damping, and on free bodies under
implicitfast the gyroscopic term).

Arrays are (nworld, n); model fields are read per world as `field[w % field.shape[0]]`.
"""

from __future__ import annotations

import warp as wp

from mujoco_warp._src.types import vec10

from ..joints import BALL, HINGE, SLIDE
from .spatial import _inert_vec, _motion_cross_force


@wp.kernel
def _accelerations(
  # Model:
  opt_gravity: wp.array[wp.vec3],
  gravity_on: float,
  # Tables:
  body_dof: wp.array2d[int],
  # In:
  qvel: wp.array2d[float],
  qacc: wp.array2d[float],
  cdof: wp.array2d[wp.spatial_vector],
  cdof_dot: wp.array2d[wp.spatial_vector],
  # Out (zeroed):
  cacc_out: wp.array2d[wp.spatial_vector],  # (nworld, nbody)
):
  """Body accelerations with gravity as an upward acceleration of the world (`mj_rne`)."""
  w = wp.tid()
  g = opt_gravity[w % opt_gravity.shape[0]] * gravity_on
  for b in range(1, cacc_out.shape[1]):
    wp.atomic_add(cacc_out, w, b, wp.spatial_vector(wp.vec3(0.0), -g))
  for i in range(body_dof.shape[0]):
    d = body_dof[i, 1]
    wp.atomic_add(cacc_out, w, body_dof[i, 0], cdof_dot[w, d] * qvel[w, d] + cdof[w, d] * qacc[w, d])


@wp.kernel
def _body_forces(
  # In:
  cinert: wp.array2d[vec10],
  cvel: wp.array2d[wp.spatial_vector],
  cacc: wp.array2d[wp.spatial_vector],
  # Out:
  cfrc_out: wp.array2d[wp.spatial_vector],
):
  w, b = wp.tid()
  if b == 0:
    cfrc_out[w, b] = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
  else:
    i = cinert[w, b]
    v = cvel[w, b]
    cfrc_out[w, b] = _inert_vec(i, cacc[w, b]) + _motion_cross_force(v, _inert_vec(i, v))


@wp.kernel
def _subtree_forces(
  # Model:
  body_subtreenum: wp.array[int],
  # In:
  cfrc: wp.array2d[wp.spatial_vector],
  # Out (zeroed):
  cfrc_int_out: wp.array2d[wp.spatial_vector],
):
  w = wp.tid()
  for b in range(1, body_subtreenum.shape[0]):
    for j in range(b, b + body_subtreenum[b]):
      wp.atomic_add(cfrc_int_out, w, b, cfrc[w, j])


@wp.kernel
def _joint_forces(
  # Model:
  dof_bodyid: wp.array[int],
  dof_armature: wp.array2d[float],
  # In:
  qacc: wp.array2d[float],
  cdof: wp.array2d[wp.spatial_vector],
  cfrc_int: wp.array2d[wp.spatial_vector],
  # Out:
  tau_out: wp.array2d[float],  # (nworld, nv) inverse dynamics M qacc + c
):
  w, d = wp.tid()
  armature = dof_armature[w % dof_armature.shape[0], d]
  tau_out[w, d] = wp.dot(cdof[w, d], cfrc_int[w, dof_bodyid[d]]) + armature * qacc[w, d]


@wp.kernel
def _passive(
  # Model:
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  jnt_stiffness: wp.array2d[float],
  qpos_spring: wp.array2d[float],
  dof_damping: wp.array2d[float],
  spring_on: float,
  damper_on: float,
  # In:
  qpos: wp.array2d[float],
  qvel: wp.array2d[float],
  # Out:
  qfrc_out: wp.array2d[float],  # (nworld, nv)
):
  """Joint springs (hinge, slide) and dof dampers."""
  w, j = wp.tid()
  typ = jnt_type[j]
  d = jnt_dofadr[j]
  drow = w % dof_damping.shape[0]
  if typ == HINGE or typ == SLIDE:
    qadr = jnt_qposadr[j]
    stiffness = jnt_stiffness[w % jnt_stiffness.shape[0], j]
    spring = -stiffness * (qpos[w, qadr] - qpos_spring[w % qpos_spring.shape[0], qadr])
    qfrc_out[w, d] = spring * spring_on - damper_on * dof_damping[drow, d] * qvel[w, d]
  elif typ == BALL:
    for i in range(3):
      qfrc_out[w, d + i] = -damper_on * dof_damping[drow, d + i] * qvel[w, d + i]
  else:
    for i in range(6):
      qfrc_out[w, d + i] = -damper_on * dof_damping[drow, d + i] * qvel[w, d + i]


@wp.kernel
def _damping_diag(
  # Model:
  dof_damping: wp.array2d[float],
  damper_on: float,
  # Out:
  bdiag_out: wp.array2d[float],  # (nworld, nv) -d(smooth force)/d(qvel), the implicitly integrated part
):
  w, d = wp.tid()
  bdiag_out[w, d] = damper_on * dof_damping[w % dof_damping.shape[0], d]


@wp.kernel
def _damping_term(
  # In:
  h_damp: float,  # timestep when velocity terms are integrated implicitly, else 0
  bdiag: wp.array2d[float],
  qacc: wp.array2d[float],
  # Out:
  out: wp.array2d[float],
):
  w, d = wp.tid()
  out[w, d] = h_damp * bdiag[w, d] * qacc[w, d]


@wp.func
def _free_gyro(crb: vec10, R: wp.mat33, s: wp.vec3, qvel_rot: wp.vec3, a_rot: wp.vec3) -> wp.spatial_vector:
  """`(d qfrc_bias / d qvel) a` for a free rigid subtree, whose bias force depends on the velocity
  through its angular part only: MuJoCo's `mjd_freeMhat` (MJWarp's `free_bias_vel_blocks`).
  `crb`: the subtree's composite inertia about its com, `R`: the body frame, `s`: com - body origin,
  `qvel_rot`, `a_rot`: the free joint's angular velocity and the vector's angular part (body frame)."""
  mass = crb[9]
  Iw = wp.mat33(crb[0], crb[3], crb[4], crb[3], crb[1], crb[5], crb[4], crb[5], crb[2])
  w = R @ qvel_rot
  K = wp.outer(s, w) - wp.identity(3, float) * wp.dot(w, s) + wp.skew(wp.cross(w, s))
  C = -mass * (wp.skew(s) @ K) + wp.skew(w) @ Iw - wp.skew(Iw @ w)
  lin = -mass * ((K @ R) @ a_rot)
  rot = (wp.transpose(R) @ C @ R) @ a_rot
  return wp.spatial_vector(lin[0], lin[1], lin[2], rot[0], rot[1], rot[2])


@wp.kernel
def _free_crb(
  # Model:
  body_subtreenum: wp.array[int],
  free_body: wp.array[int],  # (nfree,) bodies whose tree is one free joint (MJWarp's body_freeadr)
  # In:
  cinert: wp.array2d[vec10],
  # Out (zeroed):
  crb_out: wp.array2d[vec10],  # (nworld, nfree) composite inertia of the free body's rigid subtree
):
  w, f = wp.tid()
  b = free_body[f]
  for j in range(b, b + body_subtreenum[b]):
    wp.atomic_add(crb_out, w, f, cinert[w, j])


@wp.kernel
def _free_gyro_term(
  # Model:
  body_dofadr: wp.array[int],
  free_body: wp.array[int],
  h_damp: float,
  # In:
  crb: wp.array2d[vec10],
  xpos: wp.array2d[wp.vec3],
  xmat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  qvel: wp.array2d[float],
  qacc_e: wp.array2d[float],
  # Out:
  out: wp.array2d[float],  # (nworld, nv) `h B a_e`: adds the free bodies' gyroscopic part
):
  """implicitfast integrates free bodies' gyroscopic forces implicitly: `h (d qfrc_bias / d qvel) a_e`
  joins the damping term on their rows."""
  w, f = wp.tid()
  b = free_body[f]
  d = body_dofadr[b]
  g = _free_gyro(crb[w, f], xmat[w, b], com[w, b] - xpos[w, b], wp.vec3(qvel[w, d + 3], qvel[w, d + 4], qvel[w, d + 5]),
                 wp.vec3(qacc_e[w, d + 3], qacc_e[w, d + 4], qacc_e[w, d + 5]))
  for i in range(6):
    wp.atomic_add(out, w, d + i, h_damp * g[i])
