"""Joint types and the tangent space of `qpos`, in Warp and in NumPy.

MuJoCo's `qpos` has `nq` coordinates and its tangent space `nv`: a free joint stores a position and
a unit quaternion (7 numbers, 6 dofs), a ball joint a quaternion (4, 3), slide and hinge joints one
number each. Differences and steps of `qpos` live in the tangent space, quaternions as rotation
vectors in the local frame, as `mj_differentiatePos` and `mj_integratePos` do:

  qpos_b = qpos_a (+) v   <=>   v = qpos_b (-) qpos_a,   q_b = q_a * exp(v / 2) for each quaternion.

Warp quaternions are stored (x, y, z, w) and MuJoCo's (w, x, y, z): `load_quat` and `store_quat`
convert. The Warp functions take a 2D array and a row (`qpos[w]` and a step `k`, or a lane world's
row), the NumPy twins one `qpos` vector and an `MjModel`.
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

__all__ = [
  "FREE", "BALL", "SLIDE", "HINGE", "QPOS_WIDTH", "DOF_WIDTH",
  "quat_integrate", "quat_sub", "load_quat", "store_quat", "qpos_diff", "qpos_move", "tangent_grad",
  "quat_addresses", "qpos_diff_np", "qpos_integrate_np", "tangent_grad_np",
]

# mjtJoint, as plain ints so kernels can compare with them
FREE = int(mujoco.mjtJoint.mjJNT_FREE)
BALL = int(mujoco.mjtJoint.mjJNT_BALL)
SLIDE = int(mujoco.mjtJoint.mjJNT_SLIDE)
HINGE = int(mujoco.mjtJoint.mjJNT_HINGE)
QPOS_WIDTH = {FREE: 7, BALL: 4, SLIDE: 1, HINGE: 1}  # qpos coordinates per joint type
DOF_WIDTH = {FREE: 6, BALL: 3, SLIDE: 1, HINGE: 1}  # tangent coordinates (dofs) per joint type


# -- Warp --------------------------------------------------------------------------------------------


@wp.func
def quat_integrate(q: wp.quat, v: wp.vec3) -> wp.quat:
  """`q * exp(v / 2)`: `mju_quatIntegrate(q, v, 1)`, `v` a rotation vector in the local frame."""
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
  """MuJoCo's (w, x, y, z) at `a[row, adr:adr+4]` as a Warp quat."""
  return wp.quat(a[row, adr + 1], a[row, adr + 2], a[row, adr + 3], a[row, adr + 0])


@wp.func
def store_quat(a: wp.array2d[float], row: int, adr: int, q: wp.quat):
  """Writes Warp quat `q` to `a[row, adr:adr+4]` in MuJoCo's (w, x, y, z) order."""
  a[row, adr + 0] = q[3]
  a[row, adr + 1] = q[0]
  a[row, adr + 2] = q[1]
  a[row, adr + 3] = q[2]


@wp.func
def _quat_start(typ: int, qadr: int, i: int) -> wp.vec2i:
  """For dof `i` of a joint at `qadr`: (qpos address of its quaternion, index 0..2 in the rotation
  vector), or (-1, qpos address) for a dof stored as one qpos coordinate."""
  if typ == FREE:
    if i < 3:
      return wp.vec2i(-1, qadr + i)
    return wp.vec2i(qadr + 3, i - 3)
  if typ == BALL:
    return wp.vec2i(qadr, i)
  return wp.vec2i(-1, qadr + i)


@wp.func
def qpos_diff(
  c: int,
  jnt_type: wp.array[int], jnt_qposadr: wp.array[int], jnt_dofadr: wp.array[int], dof_jntid: wp.array[int],
  qa: wp.array2d[float], ra: int, qb: wp.array2d[float], rb: int,
) -> float:
  """Tangent coordinate `c` of `qa[ra] (-) qb[rb]` (`mj_differentiatePos` with dt = 1)."""
  j = dof_jntid[c]
  at = _quat_start(jnt_type[j], jnt_qposadr[j], c - jnt_dofadr[j])
  if at[0] < 0:
    return qa[ra, at[1]] - qb[rb, at[1]]
  v = quat_sub(load_quat(qa, ra, at[0]), load_quat(qb, rb, at[0]))
  return v[at[1]]


@wp.func
def qpos_move(
  c: int, h: float,
  jnt_type: wp.array[int], jnt_qposadr: wp.array[int], jnt_dofadr: wp.array[int], dof_jntid: wp.array[int],
  qpos: wp.array2d[float], row: int,
):
  """Moves `qpos[row]` by `h` along tangent coordinate `c`, in place (`mj_integratePos`)."""
  j = dof_jntid[c]
  at = _quat_start(jnt_type[j], jnt_qposadr[j], c - jnt_dofadr[j])
  if at[0] < 0:
    qpos[row, at[1]] += h
  else:
    v = wp.vec3(0.0)
    v[at[1]] = h
    store_quat(qpos, row, at[0], quat_integrate(load_quat(qpos, row, at[0]), v))


@wp.func
def tangent_grad(
  c: int,
  jnt_type: wp.array[int], jnt_qposadr: wp.array[int], jnt_dofadr: wp.array[int], dof_jntid: wp.array[int],
  qpos: wp.array2d[float], row: int, qpos_grad: wp.array2d[float], grad_row: int,
) -> float:
  """dL/d(tangent coordinate c) from dL/dqpos `qpos_grad[grad_row]` at `qpos[row]`: for quaternions
  `0.5 Im(conj(q) * g)`, since moving along `v` changes `q` by `0.5 q * (0, v)`."""
  j = dof_jntid[c]
  at = _quat_start(jnt_type[j], jnt_qposadr[j], c - jnt_dofadr[j])
  if at[0] < 0:
    return qpos_grad[grad_row, at[1]]
  q = load_quat(qpos, row, at[0])
  g = load_quat(qpos_grad, grad_row, at[0])
  r = wp.quat_inverse(q) * g
  return 0.5 * r[at[1]]


# -- NumPy ------------------------------------------------------------------------------------------


def quat_addresses(mjm: mujoco.MjModel) -> list[int]:
  """qpos address of every quaternion: ball joints, and the rotation of free joints."""
  adrs = []
  for j in range(mjm.njnt):
    typ = int(mjm.jnt_type[j])
    if typ in (FREE, BALL):
      adrs.append(int(mjm.jnt_qposadr[j]) + (3 if typ == FREE else 0))
  return adrs


def qpos_diff_np(mjm: mujoco.MjModel, qa: np.ndarray, qb: np.ndarray) -> np.ndarray:
  """`qa (-) qb` `(nv,)` float64: `mj_differentiatePos` with dt = 1."""
  v = np.zeros(mjm.nv)
  mujoco.mj_differentiatePos(mjm, v, 1.0, np.asarray(qb, np.float64), np.asarray(qa, np.float64))
  return v


def qpos_integrate_np(mjm: mujoco.MjModel, qpos: np.ndarray, v: np.ndarray) -> np.ndarray:
  """`qpos (+) v` `(nq,)` float64: `mj_integratePos` with dt = 1 (a copy; `qpos` is unchanged)."""
  out = np.array(qpos, dtype=np.float64)
  mujoco.mj_integratePos(mjm, out, np.asarray(v, np.float64), 1.0)
  return out


def tangent_grad_np(mjm: mujoco.MjModel, qpos: np.ndarray, g: np.ndarray) -> np.ndarray:
  """dL/d(tangent) `(nv,)` from dL/dqpos `g` `(nq,)` at `qpos` (the NumPy twin of `tangent_grad`)."""
  out = np.zeros(mjm.nv)
  for j in range(mjm.njnt):
    typ, qadr, dadr = int(mjm.jnt_type[j]), int(mjm.jnt_qposadr[j]), int(mjm.jnt_dofadr[j])
    if typ == FREE:
      out[dadr:dadr + 3] = g[qadr:qadr + 3]
      qadr, dadr = qadr + 3, dadr + 3
    if typ in (FREE, BALL):
      q = np.asarray(qpos[qadr:qadr + 4], np.float64)
      conj = np.array([q[0], -q[1], -q[2], -q[3]])
      r = np.zeros(4)
      mujoco.mju_mulQuat(r, conj, np.asarray(g[qadr:qadr + 4], np.float64))
      out[dadr:dadr + 3] = 0.5 * r[1:]
    else:
      out[dadr] = g[qadr]
  return out
