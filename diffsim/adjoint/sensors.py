"""Sensors, replayed differentiably: the sensor types `analytic_coverage` admits (joint, ball-joint,
tendon and actuator positions, velocities and forces, joints' actuator forces, frame positions,
orientations, axes and velocities of bodies and sites, gyros and velocimeters, subtree centres of mass).
"""

from __future__ import annotations

import warp as wp

from .coverage import _OBJ_BODY, _OBJ_GEOM, _OBJ_SITE, _OBJ_XBODY, _SENS_ACTUATORFRC, _SENS_ACTUATORPOS, \
  _SENS_ACTUATORVEL, _SENS_BALLANGVEL, _SENS_BALLQUAT, _SENS_FRAMEANGVEL, _SENS_FRAMELINVEL, _SENS_FRAMEQUAT, \
  _SENS_FRAMEXAXIS, _SENS_FRAMEYAXIS, _SENS_FRAMEZAXIS, _SENS_GYRO, _SENS_JOINTACTFRC, _SENS_JOINTPOS, _SENS_JOINTVEL, \
  _SENS_SUBTREECOM, _SENS_TENDONPOS, _SENS_TENDONVEL, _SENS_VELOCIMETER, _TRN_SITE, _TRN_TENDON
from .spatial import _mul_quat


@wp.kernel
def _sensors(
  # Model:
  sensor_type: wp.array[int],
  sensor_objtype: wp.array[int],
  sensor_objid: wp.array[int],
  sensor_adr: wp.array[int],
  sensor_cutoff: wp.array[float],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  site_bodyid: wp.array[int],
  geom_bodyid: wp.array[int],
  body_rootid: wp.array[int],
  body_iquat: wp.array2d[wp.quat],
  actuator_trntype: wp.array[int],
  actuator_trnid: wp.array[wp.vec2i],
  actuator_gear: wp.array2d[wp.spatial_vector],
  # In:
  qpos: wp.array2d[float],
  qvel: wp.array2d[float],
  xpos: wp.array2d[wp.vec3],
  xquat: wp.array2d[wp.quat],
  xmat: wp.array2d[wp.mat33],
  xipos: wp.array2d[wp.vec3],
  ximat: wp.array2d[wp.mat33],
  site_xpos: wp.array2d[wp.vec3],
  site_xquat: wp.array2d[wp.quat],
  site_xmat: wp.array2d[wp.mat33],
  geom_xpos: wp.array2d[wp.vec3],  # (nworld, ngeom) geom frames where a sensor reads one, else (nworld, 1)
  geom_xquat: wp.array2d[wp.quat],
  geom_xmat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  cvel: wp.array2d[wp.spatial_vector],
  actuator_force: wp.array2d[float],
  ten_length: wp.array2d[float],  # (nworld, ntendon), or (1, 1) without tendons
  ten_velocity: wp.array2d[float],
  trn_length: wp.array2d[float],  # (nworld, nu) tendon and site transmissions, or (1, 1) without them
  trn_velocity: wp.array2d[float],
  qfrc_actuator: wp.array2d[float],  # (nworld, nv)
  # Out:
  sensordata_out: wp.array2d[float],
):
  """The position- and velocity-stage sensors of bodies, geoms and sites (no reference frame), and the
  actuator sensors, as MJWarp's `sensor_pos`/`sensor_vel`/`sensor_acc` compute them."""
  w, s = wp.tid()
  typ = sensor_type[s]
  objtype = sensor_objtype[s]
  objid = sensor_objid[s]
  adr = sensor_adr[s]
  cutoff = sensor_cutoff[s]
  if typ == _SENS_JOINTPOS or typ == _SENS_JOINTVEL or typ == _SENS_ACTUATORPOS or typ == _SENS_ACTUATORVEL or \
      typ == _SENS_ACTUATORFRC or typ == _SENS_TENDONPOS or typ == _SENS_TENDONVEL or typ == _SENS_JOINTACTFRC:
    v = float(0.0)
    if typ == _SENS_JOINTPOS:
      v = qpos[w, jnt_qposadr[objid]]
    elif typ == _SENS_JOINTVEL:
      v = qvel[w, jnt_dofadr[objid]]
    elif typ == _SENS_JOINTACTFRC:
      v = qfrc_actuator[w, jnt_dofadr[objid]]
    elif typ == _SENS_ACTUATORFRC:
      v = actuator_force[w, objid]
    elif typ == _SENS_TENDONPOS:
      v = ten_length[w, objid]
    elif typ == _SENS_TENDONVEL:
      v = ten_velocity[w, objid]
    elif actuator_trntype[objid] == _TRN_TENDON or actuator_trntype[objid] == _TRN_SITE:
      if typ == _SENS_ACTUATORPOS:
        v = trn_length[w, objid]
      else:
        v = trn_velocity[w, objid]
    else:
      jnt = actuator_trnid[objid][0]
      gear = actuator_gear[w % actuator_gear.shape[0], objid][0]
      if typ == _SENS_ACTUATORPOS:
        v = gear * qpos[w, jnt_qposadr[jnt]]
      else:
        v = gear * qvel[w, jnt_dofadr[jnt]]
    if cutoff > 0.0:
      v = wp.clamp(v, -cutoff, cutoff)
    sensordata_out[w, adr] = v
  elif typ == _SENS_BALLQUAT:
    a = jnt_qposadr[objid]
    q = wp.normalize(wp.quat(qpos[w, a], qpos[w, a + 1], qpos[w, a + 2], qpos[w, a + 3]))
    for i in range(4):
      sensordata_out[w, adr + i] = q[i]
  elif typ == _SENS_FRAMEQUAT:
    q = wp.quat_identity(float)
    if objtype == _OBJ_XBODY:
      q = xquat[w, objid]
    elif objtype == _OBJ_BODY:
      q = _mul_quat(xquat[w, objid], body_iquat[w % body_iquat.shape[0], objid])
    elif objtype == _OBJ_SITE:
      q = site_xquat[w, objid]
    elif objtype == _OBJ_GEOM:
      q = geom_xquat[w, objid]
    for i in range(4):
      v = q[i]
      if cutoff > 0.0:
        v = wp.clamp(v, -cutoff, cutoff)
      sensordata_out[w, adr + i] = v
  elif typ == _SENS_BALLANGVEL:
    d = jnt_dofadr[objid]
    for i in range(3):
      v = qvel[w, d + i]
      if cutoff > 0.0:
        v = wp.clamp(v, -cutoff, cutoff)
      sensordata_out[w, adr + i] = v
  else:
    # the frame: read only the arrays `objtype` indexes (an id of one kind may exceed another's count)
    pos = wp.vec3(0.0)
    mat = wp.identity(3, float)
    body = objid
    if objtype == _OBJ_BODY:
      pos = xipos[w, objid]
      mat = ximat[w, objid]
    elif objtype == _OBJ_SITE:
      pos = site_xpos[w, objid]
      mat = site_xmat[w, objid]
      body = site_bodyid[objid]
    elif objtype == _OBJ_GEOM:
      pos = geom_xpos[w, objid]
      mat = geom_xmat[w, objid]
      body = geom_bodyid[objid]
    elif typ != _SENS_SUBTREECOM:
      pos = xpos[w, objid]
      mat = xmat[w, objid]
    out = pos
    if typ == _SENS_FRAMEXAXIS:
      out = wp.vec3(mat[0, 0], mat[1, 0], mat[2, 0])
    elif typ == _SENS_FRAMEYAXIS:
      out = wp.vec3(mat[0, 1], mat[1, 1], mat[2, 1])
    elif typ == _SENS_FRAMEZAXIS:
      out = wp.vec3(mat[0, 2], mat[1, 2], mat[2, 2])
    elif typ == _SENS_FRAMELINVEL:
      cv = cvel[w, body]
      offset = pos - com[w, body_rootid[body]]
      out = wp.vec3(cv[3], cv[4], cv[5]) - wp.cross(offset, wp.vec3(cv[0], cv[1], cv[2]))
    elif typ == _SENS_FRAMEANGVEL:
      cv = cvel[w, body]
      out = wp.vec3(cv[0], cv[1], cv[2])
    elif typ == _SENS_SUBTREECOM:
      out = com[w, objid]
    elif typ == _SENS_GYRO:
      cv = cvel[w, body]
      out = wp.transpose(mat) @ wp.vec3(cv[0], cv[1], cv[2])
    elif typ == _SENS_VELOCIMETER:
      cv = cvel[w, body]
      offset = pos - com[w, body_rootid[body]]
      out = wp.transpose(mat) @ (wp.vec3(cv[3], cv[4], cv[5]) - wp.cross(offset, wp.vec3(cv[0], cv[1], cv[2])))

    for i in range(3):
      v = out[i]
      if cutoff > 0.0:
        v = wp.clamp(v, -cutoff, cutoff)
      sensordata_out[w, adr + i] = v
