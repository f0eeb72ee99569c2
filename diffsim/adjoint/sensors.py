"""Sensors, replayed differentiably: the sensor types `analytic_coverage` admits (joint, ball-joint,
tendon and actuator positions, velocities and forces, joints' actuator forces, frame positions,
orientations, axes and velocities of bodies and sites, gyros and velocimeters, subtree centres of mass)
in the "state" segment, and the acceleration stage (accelerometers, touch, force and torque sensors:
`record_acc_sensors`) in an "acc" segment after the step's, from the solver's acceleration `a` and the
contact rows' forces at it. `a` is an implicit function of the state (the constraint solve), so their
adjoint reaches it as an extra seed `a_bar` of the implicit function theorem (`AnalyticStep.reverse`).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from mujoco_warp._src.ray import ray_geom
from mujoco_warp._src.types import vec5

from .coverage import ACC_SENSORS, _OBJ_BODY, _OBJ_GEOM, _OBJ_SITE, _OBJ_XBODY, _SENS_ACTUATORFRC, _SENS_ACTUATORPOS, \
  _SENS_ACTUATORVEL, _SENS_BALLANGVEL, _SENS_BALLQUAT, _SENS_FRAMEANGVEL, _SENS_FRAMELINVEL, _SENS_FRAMEQUAT, \
  _SENS_FRAMEXAXIS, _SENS_FRAMEYAXIS, _SENS_FRAMEZAXIS, _SENS_GYRO, _SENS_JOINTACTFRC, _SENS_JOINTPOS, _SENS_JOINTVEL, \
  _SENS_SUBTREECOM, _SENS_TENDONPOS, _SENS_TENDONVEL, _SENS_VELOCIMETER, _TRN_SITE, _TRN_TENDON, \
  _SENS_ACCELEROMETER, _SENS_FORCE, _SENS_TORQUE, _SENS_TOUCH
from .dynamics import _subtree_forces
from .spatial import _mul_quat

__all__ = ["record_acc_sensors"]


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
  if typ == _SENS_ACCELEROMETER or typ == _SENS_TOUCH or typ == _SENS_FORCE or typ == _SENS_TORQUE:
    return  # the acceleration stage's (`_acc_sensors`)
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


@wp.func
def _row(force: wp.array2d[float], c: int, r: int, dim: int) -> float:
  if r < dim:
    return force[c, r]
  return 0.0


@wp.func
def _pyramid_sum(force: wp.array2d[float], c: int, i: int, dim: int) -> float:
  """Pyramid edge pair `i`'s share of the normal force (`_decode_pyramid`)."""
  if i < dim - 1:
    return force[c, 2 * i] + force[c, 2 * i + 1]
  return 0.0


@wp.func
def _pyramid_dif(force: wp.array2d[float], c: int, i: int, dim: int) -> float:
  if i < dim - 1:
    return force[c, 2 * i] - force[c, 2 * i + 1]
  return 0.0


@wp.kernel
def _contact_wrenches(
  elliptic: int,
  # Model:
  geom_bodyid: wp.array[int],
  body_rootid: wp.array[int],
  # Frozen:
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  contact_dim: wp.array[int],
  active: wp.array[int],
  # In:
  friction: wp.array[vec5],
  pos: wp.array[wp.vec3],
  frame: wp.array[wp.mat33],
  force: wp.array2d[float],  # (naconmax, MAX_CONTACT_ROWS) the rows' forces
  com: wp.array2d[wp.vec3],
  # Out (zeroed):
  cfrc_ext_out: wp.array2d[wp.spatial_vector],  # (nworld, nbody)
  normal_out: wp.array[float],  # (naconmax,) the contact's normal force
):
  """The contact forces on their bodies, about the subtree com (MJWarp's `_cfrc_ext_contact`): the
  pyramid edges decoded (`_decode_pyramid`) or the elliptic rows as they are, in the world frame."""
  c = wp.tid()
  if active[c] == 0:
    return
  dim = contact_dim[c]
  # straight-line code (no loop-carried locals: Warp's adjoint of those is wrong)
  fn = _pyramid_sum(force, c, 0, dim) + _pyramid_sum(force, c, 1, dim) + _pyramid_sum(force, c, 2, dim) + \
    _pyramid_sum(force, c, 3, dim) + _pyramid_sum(force, c, 4, dim)
  mu = friction[c]
  fl = wp.vec3(fn, _pyramid_dif(force, c, 0, dim) * mu[0], _pyramid_dif(force, c, 1, dim) * mu[1])
  tl = wp.vec3(_pyramid_dif(force, c, 2, dim) * mu[2], _pyramid_dif(force, c, 3, dim) * mu[3],
               _pyramid_dif(force, c, 4, dim) * mu[4])
  if dim == 1:
    fl = wp.vec3(force[c, 0], 0.0, 0.0)
    tl = wp.vec3(0.0)
  elif elliptic != 0:
    fl = wp.vec3(force[c, 0], force[c, 1], force[c, 2])
    tl = wp.vec3(_row(force, c, 3, dim), _row(force, c, 4, dim), _row(force, c, 5, dim))
  f = wp.spatial_vector(fl, tl)  # force (3), torque (3) in the contact frame
  normal_out[c] = f[0]
  R = frame[c]
  fw = wp.transpose(R) @ fl
  tw = wp.transpose(R) @ tl
  w = contact_worldid[c]
  g = contact_geom[c]
  b1 = geom_bodyid[g[0]]
  b2 = geom_bodyid[g[1]]
  p = pos[c]
  if b1 != 0:
    off = com[w, body_rootid[b1]] - p
    wp.atomic_sub(cfrc_ext_out, w, b1, wp.spatial_vector(tw - wp.cross(off, fw), fw))
  if b2 != 0:
    off = com[w, body_rootid[b2]] - p
    wp.atomic_add(cfrc_ext_out, w, b2, wp.spatial_vector(tw - wp.cross(off, fw), fw))


@wp.kernel(enable_backward=False)
def _touch_zones(
  # Model:
  geom_bodyid: wp.array[int],
  site_type: wp.array[int],
  site_bodyid: wp.array[int],
  site_size: wp.array[wp.vec3],
  sensor_objid: wp.array[int],
  touch_sensor: wp.array[int],  # (ntouch,) sensor ids
  # Frozen:
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  contact_pos: wp.array[wp.vec3],  # MJWarp's contacts at the step's state
  contact_frame: wp.array[wp.mat33],
  active: wp.array[int],
  # In:
  site_xpos: wp.array2d[wp.vec3],
  site_xmat: wp.array2d[wp.mat33],
  normal: wp.array[float],
  # Out:
  inside_out: wp.array2d[float],  # (naconmax, ntouch) 1 where the touch sensor counts the contact
):
  """MJWarp's `_sensor_touch` test, a discrete choice held fixed by the adjoint: a contact of the
  sensor's body with a pushing normal force whose ray toward that body crosses the site's zone."""
  c, t = wp.tid()
  inside_out[c, t] = 0.0
  if active[c] == 0 or normal[c] <= 0.0:
    return
  site = sensor_objid[touch_sensor[t]]
  body = site_bodyid[site]
  g = contact_geom[c]
  b1 = geom_bodyid[g[0]]
  b2 = geom_bodyid[g[1]]
  if body != b1 and body != b2:
    return
  R = contact_frame[c]
  ray = wp.normalize(wp.vec3(R[0, 0], R[0, 1], R[0, 2]))
  if body == b2:
    ray = -ray
  w = contact_worldid[c]
  dist, _nrm = ray_geom(site_xpos[w, site], site_xmat[w, site], site_size[site], contact_pos[c], ray,
                        site_type[site])
  if dist >= 0.0:
    inside_out[c, t] = 1.0


@wp.kernel
def _touch(
  # Model:
  sensor_adr: wp.array[int],
  touch_sensor: wp.array[int],
  # Frozen:
  contact_worldid: wp.array[int],
  inside: wp.array2d[float],
  # In:
  normal: wp.array[float],
  # Out (zeroed rows of the touch sensors):
  sensordata_out: wp.array2d[float],
):
  c, t = wp.tid()
  if inside[c, t] != 0.0:
    wp.atomic_add(sensordata_out, contact_worldid[c], sensor_adr[touch_sensor[t]], normal[c])


@wp.kernel
def _post_forces(
  # In:
  cfrc: wp.array2d[wp.spatial_vector],  # (nworld, nbody) inverse dynamics' body forces at `a`
  cfrc_ext: wp.array2d[wp.spatial_vector],
  # Out:
  cfrc_out: wp.array2d[wp.spatial_vector],
):
  w, b = wp.tid()
  cfrc_out[w, b] = cfrc[w, b] - cfrc_ext[w, b]


@wp.kernel
def _acc_sensors(
  # Model:
  sensor_type: wp.array[int],
  sensor_objid: wp.array[int],
  sensor_adr: wp.array[int],
  sensor_cutoff: wp.array[float],
  site_bodyid: wp.array[int],
  body_rootid: wp.array[int],
  acc_sensor: wp.array[int],  # (nacc,) accelerometers, force and torque sensors
  # In:
  site_xpos: wp.array2d[wp.vec3],
  site_xmat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  cvel: wp.array2d[wp.spatial_vector],
  cacc: wp.array2d[wp.spatial_vector],  # (nworld, nbody) at the solver's acceleration
  cfrc_int: wp.array2d[wp.spatial_vector],  # (nworld, nbody) after the constraint forces
  # Out:
  sensordata_out: wp.array2d[float],
):
  """MJWarp's `_accelerometer`, `_force`, `_torque` (sites, no reference frame)."""
  w, i = wp.tid()
  s = acc_sensor[i]
  typ = sensor_type[s]
  site = sensor_objid[s]
  body = site_bodyid[site]
  rotT = wp.transpose(site_xmat[w, site])
  dif = site_xpos[w, site] - com[w, body_rootid[body]]
  out = wp.vec3(0.0)
  if typ == _SENS_ACCELEROMETER:
    cv = cvel[w, body]
    a = cacc[w, body]
    ang = rotT @ wp.spatial_top(cv)
    lin = rotT @ (wp.spatial_bottom(cv) - wp.cross(dif, wp.spatial_top(cv)))
    out = rotT @ (wp.spatial_bottom(a) - wp.cross(dif, wp.spatial_top(a))) + wp.cross(ang, lin)
  elif typ == _SENS_FORCE:
    out = rotT @ wp.spatial_bottom(cfrc_int[w, body])
  else:
    f = cfrc_int[w, body]
    out = rotT @ (wp.spatial_top(f) - wp.cross(dif, wp.spatial_bottom(f)))
  cutoff = sensor_cutoff[s]
  adr = sensor_adr[s]
  for j in range(3):
    v = out[j]
    if cutoff > 0.0:
      v = wp.clamp(v, -cutoff, cutoff)
    sensordata_out[w, adr + j] = v


def record_acc_sensors(P, mjm, m, arr, accumulated, *, contacts, site_xpos, site_xmat, com, cvel, cacc, cfrc,
                       sensordata):
  """Records the acceleration-stage sensors into segment "acc" of `P`; None without them, else the
  sensordata columns they write (`(nrow,)`). `cacc`, `cfrc`: inverse dynamics at the solver's
  acceleration (`(nworld, nbody)`); `contacts`: the step's `ContactRows` or None."""
  types = mjm.sensor_type
  acc = [i for i in range(mjm.nsensor) if types[i] in ACC_SENSORS]
  if not acc:
    return None
  n, nb, dev = cvel.shape[0], mjm.nbody, cvel.device
  touch = [i for i in acc if types[i] == _SENS_TOUCH]
  frames = [i for i in acc if types[i] != _SENS_TOUCH]
  if contacts is not None:
    nc = contacts.nc
    cfrc_ext, normal = arr((n, nb), wp.spatial_vector), arr(nc)
    accumulated.append(cfrc_ext)
    v = contacts.values
    c = contacts.data.contact
    P.launch("acc", _contact_wrenches, nc,
             [contacts.elliptic, m.geom_bodyid, m.body_rootid, c.geom, c.worldid, c.dim, contacts.active,
              contacts.friction, v["contact_pos"], v["contact_frame"], contacts.force, com], [cfrc_ext, normal])
    if touch:
      ids = wp.array(np.array(touch, np.int32), dtype=int, device=dev)
      inside = wp.zeros((nc, len(touch)), dtype=float, device=dev)
      P.launch("acc", _touch_zones, (nc, len(touch)),
               [m.geom_bodyid, m.site_type, m.site_bodyid, m.site_size, m.sensor_objid, ids,
                c.geom, c.worldid, c.pos, c.frame, contacts.active, site_xpos, site_xmat, normal], [inside],
               backward=False)
      P.launch("acc", _touch, (nc, len(touch)), [m.sensor_adr, ids, c.worldid, inside, normal], [sensordata])
  if frames:
    cfrc_int = arr((n, nb), wp.spatial_vector)
    accumulated.append(cfrc_int)
    if any(types[i] != _SENS_ACCELEROMETER for i in frames):
      post = arr((n, nb), wp.spatial_vector)
      P.launch("acc", _post_forces, (n, nb), [cfrc, cfrc_ext if contacts is not None else arr((n, nb),
                                                                                            wp.spatial_vector)],
               [post])
      P.launch("acc", _subtree_forces, n, [m.body_subtreenum, post], [cfrc_int])
    ids = wp.array(np.array(frames, np.int32), dtype=int, device=dev)
    P.launch("acc", _acc_sensors, (n, len(frames)),
             [m.sensor_type, m.sensor_objid, m.sensor_adr, m.sensor_cutoff, m.site_bodyid, m.body_rootid, ids,
              site_xpos, site_xmat, com, cvel, cacc, cfrc_int], [sensordata])
  cols = [mjm.sensor_adr[i] + j for i in acc for j in range(mjm.sensor_dim[i])]
  return np.array(cols, np.int32)
