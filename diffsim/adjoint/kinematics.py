"""Kinematics, replayed differentiably: joint and body frames from `qpos`, inertial frames, subtree
centres of mass, the composite inertias `cinert`, the motion axes `cdof`, body velocities, `cdof_dot`
and site frames (MuJoCo's `mj_kinematics`, `mj_comPos`, `mj_comVel`).

Arrays are (nworld, n); model fields are read per world as `field[w % field.shape[0]]`, as MJWarp
reads them.
"""

from __future__ import annotations

import warp as wp

from mujoco_warp._src.types import vec10

from ..joints import BALL, FREE, HINGE, SLIDE
from .spatial import _MINVAL, _axis_angle_quat, _motion_cross, _mul_quat, _normalize_quat, _quat_to_mat, \
  _rot_vec_quat


@wp.kernel
def _kinematics(
  # Model:
  body_parentid: wp.array[int],
  body_jntnum: wp.array[int],
  body_jntadr: wp.array[int],
  body_pos: wp.array2d[wp.vec3],
  body_quat: wp.array2d[wp.quat],
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_pos: wp.array2d[wp.vec3],
  jnt_axis: wp.array2d[wp.vec3],
  qpos0: wp.array2d[float],
  # In:
  qpos: wp.array2d[float],
  # Out:
  jpos_out: wp.array2d[wp.vec3],  # (nworld, njnt) frame after each joint
  jquat_out: wp.array2d[wp.quat],
  xpos_out: wp.array2d[wp.vec3],  # (nworld, nbody)
  xquat_out: wp.array2d[wp.quat],
  xanchor_out: wp.array2d[wp.vec3],  # (nworld, njnt)
  xaxis_out: wp.array2d[wp.vec3],
):
  """Body frames from `qpos`, MJWarp's `_kinematics_branch` walked body by body (parents first);
  a body's joints chain through `jpos`/`jquat` so no frame is carried across loop iterations."""
  w = wp.tid()
  xpos_out[w, 0] = wp.vec3(0.0)
  xquat_out[w, 0] = wp.quat(1.0, 0.0, 0.0, 0.0)
  for b in range(1, body_parentid.shape[0]):
    pid = body_parentid[b]
    jntadr = body_jntadr[b]
    jntnum = body_jntnum[b]
    free = int(0)
    if jntnum == 1:
      free = int(jnt_type[jntadr] == FREE)
    if free != 0:
      qadr = jnt_qposadr[jntadr]
      fpos = wp.vec3(qpos[w, qadr], qpos[w, qadr + 1], qpos[w, qadr + 2])
      fquat = _normalize_quat(wp.quat(qpos[w, qadr + 3], qpos[w, qadr + 4], qpos[w, qadr + 5], qpos[w, qadr + 6]))
      xpos_out[w, b] = fpos
      xquat_out[w, b] = fquat
      xanchor_out[w, jntadr] = fpos
      xaxis_out[w, jntadr] = jnt_axis[w % jnt_axis.shape[0], jntadr]
    else:
      bq = body_quat[w % body_quat.shape[0], b]
      pos0 = _rot_vec_quat(body_pos[w % body_pos.shape[0], b], xquat_out[w, pid]) + xpos_out[w, pid]
      quat0 = _mul_quat(xquat_out[w, pid], bq)
      for jj in range(jntnum):
        j = jntadr + jj
        ppos = pos0
        pquat = quat0
        if jj > 0:
          ppos = jpos_out[w, j - 1]
          pquat = jquat_out[w, j - 1]
        typ = jnt_type[j]
        qadr = jnt_qposadr[j]
        jp = jnt_pos[w % jnt_pos.shape[0], j]
        ax = jnt_axis[w % jnt_axis.shape[0], j]
        anchor = _rot_vec_quat(jp, pquat) + ppos
        axis = _rot_vec_quat(ax, pquat)
        npos = ppos
        nquat = pquat
        if typ == BALL:
          qloc = _normalize_quat(wp.quat(qpos[w, qadr], qpos[w, qadr + 1], qpos[w, qadr + 2], qpos[w, qadr + 3]))
          nquat = _mul_quat(pquat, qloc)
          npos = anchor - _rot_vec_quat(jp, nquat)
        elif typ == SLIDE:
          npos = ppos + axis * (qpos[w, qadr] - qpos0[w % qpos0.shape[0], qadr])
        elif typ == HINGE:
          nquat = _mul_quat(pquat, _axis_angle_quat(ax, qpos[w, qadr] - qpos0[w % qpos0.shape[0], qadr]))
          npos = anchor - _rot_vec_quat(jp, nquat)
        jpos_out[w, j] = npos
        jquat_out[w, j] = nquat
        xanchor_out[w, j] = anchor
        xaxis_out[w, j] = axis
      if jntnum == 0:
        xpos_out[w, b] = pos0
        xquat_out[w, b] = _normalize_quat(quat0)
      else:
        xpos_out[w, b] = jpos_out[w, jntadr + jntnum - 1]
        xquat_out[w, b] = _normalize_quat(jquat_out[w, jntadr + jntnum - 1])


@wp.kernel
def _inertial_frames(
  # Model:
  body_ipos: wp.array2d[wp.vec3],
  body_iquat: wp.array2d[wp.quat],
  # In:
  xpos: wp.array2d[wp.vec3],
  xquat: wp.array2d[wp.quat],
  # Out:
  xmat_out: wp.array2d[wp.mat33],
  xipos_out: wp.array2d[wp.vec3],
  ximat_out: wp.array2d[wp.mat33],
):
  w, b = wp.tid()
  q = xquat[w, b]
  xmat_out[w, b] = _quat_to_mat(q)
  xipos_out[w, b] = xpos[w, b] + _rot_vec_quat(body_ipos[w % body_ipos.shape[0], b], q)
  ximat_out[w, b] = _quat_to_mat(_mul_quat(q, body_iquat[w % body_iquat.shape[0], b]))


@wp.kernel
def _subtree_sums(
  # Model:
  body_subtreenum: wp.array[int],
  body_mass: wp.array2d[float],
  # In:
  xipos: wp.array2d[wp.vec3],
  # Out (zeroed):
  mass_out: wp.array2d[float],  # (nworld, nbody) subtree mass
  moment_out: wp.array2d[wp.vec3],  # (nworld, nbody) subtree mass-weighted position
):
  w = wp.tid()
  mrow = w % body_mass.shape[0]
  for b in range(1, body_subtreenum.shape[0]):
    for j in range(b, b + body_subtreenum[b]):
      wp.atomic_add(mass_out, w, b, body_mass[mrow, j])
      wp.atomic_add(moment_out, w, b, body_mass[mrow, j] * xipos[w, j])


@wp.kernel
def _subtree_com(
  # In:
  xipos: wp.array2d[wp.vec3],
  mass: wp.array2d[float],
  moment: wp.array2d[wp.vec3],
  # Out:
  com_out: wp.array2d[wp.vec3],
):
  w, b = wp.tid()
  m = mass[w, b]
  if b == 0 or m < _MINVAL:
    com_out[w, b] = xipos[w, b]  # massless subtree: the body's inertial frame, as mj_comPos
  else:
    com_out[w, b] = moment[w, b] / m


@wp.kernel
def _cinert(
  # Model:
  body_rootid: wp.array[int],
  body_mass: wp.array2d[float],
  body_inertia: wp.array2d[wp.vec3],
  # In:
  xipos: wp.array2d[wp.vec3],
  ximat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  # Out:
  cinert_out: wp.array2d[vec10],
):
  """Body inertia about its tree's center of mass, in the world frame (`mju_inertCom`)."""
  w, b = wp.tid()
  mat = ximat[w, b]
  inert = body_inertia[w % body_inertia.shape[0], b]
  mass = body_mass[w % body_mass.shape[0], b]
  dif = xipos[w, b] - com[w, body_rootid[b]]
  row0 = wp.cw_mul(mat[0], inert)
  row1 = wp.cw_mul(mat[1], inert)
  row2 = wp.cw_mul(mat[2], inert)
  res = vec10(
    wp.dot(row0, mat[0]) + mass * (dif[1] * dif[1] + dif[2] * dif[2]),
    wp.dot(row1, mat[1]) + mass * (dif[0] * dif[0] + dif[2] * dif[2]),
    wp.dot(row2, mat[2]) + mass * (dif[0] * dif[0] + dif[1] * dif[1]),
    wp.dot(row0, mat[1]) - mass * dif[0] * dif[1],
    wp.dot(row0, mat[2]) - mass * dif[0] * dif[2],
    wp.dot(row1, mat[2]) - mass * dif[1] * dif[2],
    mass * dif[0], mass * dif[1], mass * dif[2], mass,
  )
  cinert_out[w, b] = res


@wp.kernel
def _cdof(
  # Model:
  body_rootid: wp.array[int],
  jnt_type: wp.array[int],
  jnt_dofadr: wp.array[int],
  jnt_bodyid: wp.array[int],
  # In:
  xmat: wp.array2d[wp.mat33],
  xanchor: wp.array2d[wp.vec3],
  xaxis: wp.array2d[wp.vec3],
  com: wp.array2d[wp.vec3],
  # Out:
  cdof_out: wp.array2d[wp.spatial_vector],
):
  """Each dof's motion axis about its tree's center of mass (MJWarp's `_cdof`)."""
  w, j = wp.tid()
  b = jnt_bodyid[j]
  d = jnt_dofadr[j]
  typ = jnt_type[j]
  axis = xaxis[w, j]
  rot = wp.transpose(xmat[w, b])
  offset = com[w, body_rootid[b]] - xanchor[w, j]
  if typ == FREE:
    cdof_out[w, d + 0] = wp.spatial_vector(0.0, 0.0, 0.0, 1.0, 0.0, 0.0)
    cdof_out[w, d + 1] = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 1.0, 0.0)
    cdof_out[w, d + 2] = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    cdof_out[w, d + 3] = wp.spatial_vector(rot[0], wp.cross(rot[0], offset))
    cdof_out[w, d + 4] = wp.spatial_vector(rot[1], wp.cross(rot[1], offset))
    cdof_out[w, d + 5] = wp.spatial_vector(rot[2], wp.cross(rot[2], offset))
  elif typ == BALL:
    cdof_out[w, d + 0] = wp.spatial_vector(rot[0], wp.cross(rot[0], offset))
    cdof_out[w, d + 1] = wp.spatial_vector(rot[1], wp.cross(rot[1], offset))
    cdof_out[w, d + 2] = wp.spatial_vector(rot[2], wp.cross(rot[2], offset))
  elif typ == SLIDE:
    cdof_out[w, d] = wp.spatial_vector(wp.vec3(0.0), axis)
  else:
    cdof_out[w, d] = wp.spatial_vector(axis, wp.cross(axis, offset))


@wp.kernel
def _velocities(
  # Tables:
  body_dof: wp.array2d[int],  # (npair, 2): body, a dof of it or of an ancestor
  dof_pre: wp.array2d[int],  # (npair, 2): dof, a dof moving its body before it (ancestors, earlier joints)
  # In:
  qvel: wp.array2d[float],
  cdof: wp.array2d[wp.spatial_vector],
  # Out (zeroed):
  cvel_out: wp.array2d[wp.spatial_vector],  # (nworld, nbody)
  cvel_pre_out: wp.array2d[wp.spatial_vector],  # (nworld, nv) velocity a dof's axis moves with
):
  w = wp.tid()
  for i in range(body_dof.shape[0]):
    d = body_dof[i, 1]
    wp.atomic_add(cvel_out, w, body_dof[i, 0], cdof[w, d] * qvel[w, d])
  for i in range(dof_pre.shape[0]):
    d = dof_pre[i, 1]
    wp.atomic_add(cvel_pre_out, w, dof_pre[i, 0], cdof[w, d] * qvel[w, d])


@wp.kernel
def _cdof_dot(
  # Tables:
  dof_still: wp.array[int],  # (nv,) 1: a free joint's translation, whose axis does not move
  # In:
  cvel_pre: wp.array2d[wp.spatial_vector],
  cdof: wp.array2d[wp.spatial_vector],
  # Out:
  cdof_dot_out: wp.array2d[wp.spatial_vector],
):
  w, d = wp.tid()
  if dof_still[d] != 0:
    cdof_dot_out[w, d] = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
  else:
    cdof_dot_out[w, d] = _motion_cross(cvel_pre[w, d], cdof[w, d])


@wp.kernel
def _site_frames(
  # Model:
  site_bodyid: wp.array[int],
  site_pos: wp.array2d[wp.vec3],
  site_quat: wp.array2d[wp.quat],
  # In:
  xpos: wp.array2d[wp.vec3],
  xquat: wp.array2d[wp.quat],
  # Out:
  site_xpos_out: wp.array2d[wp.vec3],
  site_xquat_out: wp.array2d[wp.quat],
  site_xmat_out: wp.array2d[wp.mat33],
):
  w, i = wp.tid()
  b = site_bodyid[i]
  q = _mul_quat(xquat[w, b], site_quat[w % site_quat.shape[0], i])
  site_xpos_out[w, i] = xpos[w, b] + _rot_vec_quat(site_pos[w % site_pos.shape[0], i], xquat[w, b])
  site_xquat_out[w, i] = q
  site_xmat_out[w, i] = _quat_to_mat(q)


def record_frames(P, segment: str, mjm, m, qpos: wp.array, arr):
  """Records (segment `segment` of the `_Program` `P`) the kinematics at `qpos` `(nworld, nq)` up to
  the composite inertias and motion axes: returns the replayed arrays by MuJoCo's names (`xpos`,
  `xquat`, `xmat`, `xipos`, `ximat`, `xanchor`, `xaxis`, `com`, `cinert`, `cdof`, ...) and the list of
  those the kernels add into (zero them before each run). `arr(shape, dtype)` allocates a replayed
  array with an adjoint."""
  n, nb, nj, nv = qpos.shape[0], mjm.nbody, mjm.njnt, mjm.nv
  f = dict(jpos=arr((n, nj), wp.vec3), jquat=arr((n, nj), wp.quat), xpos=arr((n, nb), wp.vec3),
           xquat=arr((n, nb), wp.quat), xanchor=arr((n, nj), wp.vec3), xaxis=arr((n, nj), wp.vec3),
           xmat=arr((n, nb), wp.mat33), xipos=arr((n, nb), wp.vec3), ximat=arr((n, nb), wp.mat33),
           stmass=arr((n, nb)), stmom=arr((n, nb), wp.vec3), com=arr((n, nb), wp.vec3), cinert=arr((n, nb), vec10),
           cdof=arr((n, nv), wp.spatial_vector))
  P.launch(segment, _kinematics, n, [m.body_parentid, m.body_jntnum, m.body_jntadr, m.body_pos, m.body_quat,
                                     m.jnt_type, m.jnt_qposadr, m.jnt_pos, m.jnt_axis, m.qpos0, qpos],
           [f["jpos"], f["jquat"], f["xpos"], f["xquat"], f["xanchor"], f["xaxis"]])
  P.launch(segment, _inertial_frames, (n, nb), [m.body_ipos, m.body_iquat, f["xpos"], f["xquat"]],
           [f["xmat"], f["xipos"], f["ximat"]])
  P.launch(segment, _subtree_sums, n, [m.body_subtreenum, m.body_mass, f["xipos"]], [f["stmass"], f["stmom"]])
  P.launch(segment, _subtree_com, (n, nb), [f["xipos"], f["stmass"], f["stmom"]], [f["com"]])
  P.launch(segment, _cinert, (n, nb), [m.body_rootid, m.body_mass, m.body_inertia, f["xipos"], f["ximat"], f["com"]],
           [f["cinert"]])
  P.launch(segment, _cdof, (n, nj), [m.body_rootid, m.jnt_type, m.jnt_dofadr, m.jnt_bodyid, f["xmat"], f["xanchor"],
                                     f["xaxis"], f["com"]], [f["cdof"]])
  return f, [f["stmass"], f["stmom"]]
