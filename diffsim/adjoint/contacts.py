"""Contact rows of the analytic adjoint: the forward's contact set, frozen, as a function of `qpos`.

At each replayed step `k` the backward pass runs MJWarp's own kinematics and collision on `q_k`, so
it sees exactly the contacts the forward step used (same state, same code), and keeps their discrete
choices (geom pair, `dim`, friction, `solref`, `solimp`, margin, the narrowphase's witness feature).
What stays a function of `q` is rebuilt in differentiable kernels from the replayed body poses
(`_contact_locals` freezes, `_contact_geometry` rebuilds), in one of three modes:

  - face (`_FACE1`, `_FACE2`): one geom's surface defines the normal (a plane; a box face or mesh
    polygon along the normal, whichever of the two geoms has one, and between two boxes the one whose
    corner is not the contact point; the non-round geom against a sphere or capsule). The normal and
    an anchor point on that surface turn and move with its body; the other geom's feature (a box
    corner or mesh vertex, a sphere's centre or capsule's core point, a cylinder's lowest rim point
    around its axis) moves with its own body, and
    `dist = n . (p_feature - p_anchor)` less the feature's rounding radius;
  - round (`_ROUND`): two spheres or capsules: the normal joins their core points, a capsule's
    sliding along its segment (the segments' closest points) unless it is a segment end.

The contact point is the witness points' midpoint and the tangents are `make_frame(n)`, except
plane-capsule's, which follow the capsule's axis, as MJWarp's do. At the nominal `q` these equal
MJWarp's values. The derivatives are exact where the touching feature is a vertex, a sphere or a
capsule core, or a cylinder rim on a face (every primitive pair diffsim's tests check against float64
C, and a mesh vertex on a mesh face); where a contact point is no vertex of either mesh (MJWarp's
multi-contact clipping can put one where an edge crosses a face) it slides as the bodies move, and
keeping it rigid is a first-order model (the SO-101's self-collision: `tests/test_contact_adjoint.py`).

The rows are MJWarp's (`constraint._efc_contact_jac_dense`, `_efc_contact_update`), pyramidal cones
and frictionless contacts: the normal row (`condim` 1) or `2 (condim - 1)` pyramid edges
`J_n +- mu_i J_i` (tangent, torsional and rolling directions), each with `aref = -b J v - k imp pos`,
`D = 1 / R` from the contact's `solref`/`solimp` and the two bodies' `body_invweight0`, and force
`-D (J a - aref)` where `J a < aref` at the solver's acceleration (the Newton solver's quadratic
regime), 0 elsewhere. Their `J^T D J` joins the implicit function theorem's Hessian `M + J^T D J`.
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

from mujoco_warp._src.math import make_frame
from mujoco_warp._src.types import ContactType, vec5

from .constraints import _kbimp
from .spatial import _MINVAL

__all__ = ["ContactRows", "MAX_CONTACT_ROWS"]

MAX_CONTACT_ROWS = 10  # pyramid edges of a condim-6 contact
_CONSTRAINT = int(ContactType.CONSTRAINT)


_G = mujoco.mjtGeom
_PLANE, _SPHERE, _CAPSULE, _CYLINDER = int(_G.mjGEOM_PLANE), int(_G.mjGEOM_SPHERE), int(_G.mjGEOM_CAPSULE), \
  int(_G.mjGEOM_CYLINDER)
_BOX, _MESH = int(_G.mjGEOM_BOX), int(_G.mjGEOM_MESH)
_FACE1, _FACE2, _ROUND = 0, 1, 2  # which body's surface defines the normal (see `_contact_locals`)
_MAKE_FRAME, _CAPSULE_AXIS, _FIXED = 0, 1, 2  # how the tangents follow (see `_contact_locals`)


@wp.func
def _radius(geom_type: int, size: wp.vec3) -> float:
  """The rounding of a sphere or capsule (its surface is a core point or segment inflated by it)."""
  if geom_type == _SPHERE or geom_type == _CAPSULE:
    return size[0]
  return 0.0


@wp.func
def _geom_axis(xmat: wp.mat33) -> wp.vec3:
  """A geom's local z axis (a capsule's or cylinder's axis) in the world frame."""
  return wp.vec3(xmat[0, 2], xmat[1, 2], xmat[2, 2])


@wp.func
def _inside_segment(point: wp.vec3, center: wp.vec3, axis: wp.vec3, half: float) -> bool:
  """Whether `point` on a capsule's core segment lies strictly between its ends."""
  return wp.abs(wp.dot(point - center, axis)) < half * (1.0 - 1.0e-5)


@wp.func
def _box_corner(point: wp.vec3, center: wp.vec3, R: wp.mat33, size: wp.vec3) -> bool:
  """Whether `point` is a corner of the box (centre `center`, orientation `R`, half sizes `size`)."""
  local = wp.transpose(R) @ (point - center)
  tol = 1.0e-3 * wp.max(wp.max(size[0], size[1]), size[2])
  return wp.abs(local[0]) > size[0] - tol and wp.abs(local[1]) > size[1] - tol and wp.abs(local[2]) > size[2] - tol


@wp.func
def _face_alignment(geom_type: int, dataid: int, R: wp.mat33, outward: wp.vec3,
                    mesh_polyadr: wp.array[int], mesh_polynum: wp.array[int],
                    mesh_polynormal: wp.array[wp.vec3]) -> float:
  """How well a face of the geom (orientation `R`) has the outward normal `outward`: the largest
  cosine over a box's six faces or a mesh's polygons; -1 for other geoms."""
  local = wp.transpose(R) @ outward
  if geom_type == _BOX:
    return wp.max(wp.max(wp.abs(local[0]), wp.abs(local[1])), wp.abs(local[2]))
  best = float(-1.0)
  if geom_type == _MESH and dataid >= 0:
    adr = mesh_polyadr[dataid]
    for i in range(mesh_polynum[dataid]):
      best = wp.max(best, wp.dot(mesh_polynormal[adr + i], local))
  return best


@wp.kernel(enable_backward=False)
def _contact_locals(
  # Model:
  geom_type: wp.array[int],
  geom_bodyid: wp.array[int],
  geom_size: wp.array2d[wp.vec3],
  geom_dataid: wp.array2d[int],
  body_isdofancestor: wp.array2d[int],
  mesh_polyadr: wp.array[int],
  mesh_polynum: wp.array[int],
  mesh_polynormal: wp.array[wp.vec3],
  # Data in (MJWarp, after kinematics and collision at q_k):
  nacon: wp.array[int],
  xpos: wp.array2d[wp.vec3],
  xmat: wp.array2d[wp.mat33],
  geom_xpos: wp.array2d[wp.vec3],
  geom_xmat: wp.array2d[wp.mat33],
  contact_dist: wp.array[float],
  contact_pos: wp.array[wp.vec3],
  contact_frame: wp.array[wp.mat33],
  contact_includemargin: wp.array[float],
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  contact_type: wp.array[int],
  # Out:
  active_out: wp.array[int],  # (naconmax,) 1: the contact has constraint rows
  mode_out: wp.array[int],  # _FACE1, _FACE2 or _ROUND
  local1_out: wp.array[wp.vec3],  # a point fixed in body 1's frame (see the modes)
  local2_out: wp.array[wp.vec3],  # a point fixed in body 2's frame
  radius_out: wp.array[wp.vec2],  # geoms' rounding (sphere, capsule radius; 0 otherwise)
  frame_out: wp.array[wp.mat33],  # contact frame in the face body's frame (_ROUND: the world frame)
  axis1_out: wp.array[wp.vec3],  # _ROUND: geom 1 a capsule whose core point slides along its axis: the axis
  axis2_out: wp.array[wp.vec3],  # _FACE1, geom 2 a cylinder on its side or rim; _ROUND, as axis1_out: its axis
  tangent_out: wp.array[wp.vec3],  # plane-capsule: the capsule's axis in body 2's frame, or a fixed tangent
  tmode_out: wp.array[int],  # tangents: _MAKE_FRAME (from the normal), _CAPSULE_AXIS or _FIXED
  dofs_out: wp.array2d[int],  # (naconmax, ncdof) the dofs that move either body (-1: none), ascending
):
  """Freezes a contact's features. `_FACE1` (geom 1 a plane; or neither geom round and geom 1's face
  lies along the normal at least as well as geom 2's): the normal turns with body 1, a point on its
  surface (the anchor) is fixed in body 1, geom 2's feature (a vertex, or a sphere's or capsule's core
  point, a cylinder's lowest rim point) in body 2. `_FACE2` (geom 1 round and geom 2 not, or geom 2's
  face along the normal): the same with the bodies' roles swapped. `_ROUND` (both round): the normal
  joins the two core points, a capsule's sliding along its segment unless it is a segment end."""
  c = wp.tid()
  active_out[c] = 0
  if c >= nacon[0]:
    return
  if (contact_type[c] & _CONSTRAINT) == 0:
    return
  dist = contact_dist[c]
  if dist - contact_includemargin[c] >= 0.0:
    return
  active_out[c] = 1
  w = contact_worldid[c]
  g = contact_geom[c]
  b1 = geom_bodyid[g[0]]
  b2 = geom_bodyid[g[1]]
  t1 = geom_type[g[0]]
  r1 = _radius(t1, geom_size[w % geom_size.shape[0], g[0]])
  r2 = _radius(geom_type[g[1]], geom_size[w % geom_size.shape[0], g[1]])
  frame = contact_frame[c]
  n = frame[0]
  pos = contact_pos[c]
  p1 = pos - 0.5 * dist * n  # witness points
  p2 = pos + 0.5 * dist * n
  R1 = xmat[w, b1]
  R2 = xmat[w, b2]
  mode = _FACE1
  if t1 != _PLANE and r1 > 0.0:
    if r2 > 0.0:
      mode = _ROUND
    else:
      mode = _FACE2
  elif t1 != _PLANE and r2 == 0.0:
    # neither round (boxes, meshes): the normal belongs to the geom with a face along it (a vertex or
    # edge of the other touches that face)
    t2 = geom_type[g[1]]
    di = w % geom_dataid.shape[0]
    face1 = _face_alignment(t1, geom_dataid[di, g[0]], geom_xmat[w, g[0]], n, mesh_polyadr, mesh_polynum,
                            mesh_polynormal)
    face2 = _face_alignment(t2, geom_dataid[di, g[1]], geom_xmat[w, g[1]], -n, mesh_polyadr, mesh_polynum,
                            mesh_polynormal)
    if face2 > face1:
      mode = _FACE2
    if t1 == _BOX and t2 == _BOX:
      # nearly parallel faces: a corner of one box on the other's face moves with its own box, whichever
      # face MJWarp took the normal from
      sizes = w % geom_size.shape[0]
      corner1 = _box_corner(p1, geom_xpos[w, g[0]], geom_xmat[w, g[0]], geom_size[sizes, g[0]])
      corner2 = _box_corner(p2, geom_xpos[w, g[1]], geom_xmat[w, g[1]], geom_size[sizes, g[1]])
      if corner1 and not corner2:
        mode = _FACE2
      elif corner2 and not corner1:
        mode = _FACE1
  core2 = p2 + r2 * n
  if mode == _ROUND and dist + r1 + r2 < 1.0e-6 * (r1 + r2):
    # coincident core points: the normal joining them is undefined (MJWarp picks one); keep MJWarp's,
    # turning with body 1, as a face
    mode = _FACE1
  # the rows' Jacobians are nonzero only on the dofs that move either body: kept compact
  k = int(0)
  for i in range(body_isdofancestor.shape[1]):
    if body_isdofancestor[b1, i] != 0 or body_isdofancestor[b2, i] != 0:
      if k < dofs_out.shape[1]:
        dofs_out[c, k] = i
      k += 1
  for j in range(k, dofs_out.shape[1]):
    dofs_out[c, j] = -1
  mode_out[c] = mode
  axis1_out[c] = wp.vec3(0.0)
  axis2_out[c] = wp.vec3(0.0)
  if mode == _ROUND:
    # a capsule's core point is the point of its segment closest to the other core: it slides along the
    # axis unless it is an end of the segment (then it is rigid on the body)
    core1 = p1 - r1 * n
    a1 = _geom_axis(geom_xmat[w, g[0]])
    a2 = _geom_axis(geom_xmat[w, g[1]])
    sizes = w % geom_size.shape[0]
    slides1 = t1 == _CAPSULE and _inside_segment(core1, geom_xpos[w, g[0]], a1, geom_size[sizes, g[0]][1])
    if slides1:
      axis1_out[c] = wp.transpose(R1) @ a1
    if geom_type[g[1]] == _CAPSULE:
      slides2 = _inside_segment(core2, geom_xpos[w, g[1]], a2, geom_size[sizes, g[1]][1])
      # parallel capsules touch where one's segment end meets the other's side: that side slides
      if t1 == _CAPSULE and not slides1 and wp.abs(wp.dot(a1, a2)) > 1.0 - 1.0e-6:
        slides2 = True
      if slides2:
        axis2_out[c] = wp.transpose(R2) @ a2
  if mode == _FACE1 and geom_type[g[1]] == _CYLINDER:
    # a cylinder's side or rim: the contact point is its lowest point around the axis (it stays put when
    # the cylinder rolls), unless the normal runs along the axis (a flat face: a rigid rim point)
    axis = _geom_axis(geom_xmat[w, g[1]])
    radial = -n + wp.dot(n, axis) * axis
    if wp.length(radial) > 1.0e-3:
      r2 = geom_size[w % geom_size.shape[0], g[1]][0]
      core2 = p2 - r2 * wp.normalize(radial)
      axis2_out[c] = wp.transpose(R2) @ axis
  radius_out[c] = wp.vec2(r1, r2)
  # MJWarp's tangents are `make_frame(n)` except plane-capsule's, which follow the capsule's axis
  tmode_out[c] = _MAKE_FRAME
  if t1 == _PLANE and geom_type[g[1]] == _CAPSULE:
    axis = _geom_axis(geom_xmat[w, g[1]])
    if wp.length(axis - n * wp.dot(n, axis)) < 0.5:
      tmode_out[c] = _FIXED
      tangent_out[c] = frame[1]
    else:
      tmode_out[c] = _CAPSULE_AXIS
      tangent_out[c] = wp.transpose(R2) @ axis
  if mode == _FACE1:
    local1_out[c] = wp.transpose(R1) @ (p1 - xpos[w, b1])  # anchor on body 1's surface
    local2_out[c] = wp.transpose(R2) @ (core2 - xpos[w, b2])  # geom 2's core point
    frame_out[c] = frame @ R1
  elif mode == _FACE2:
    local1_out[c] = wp.transpose(R1) @ (p1 - r1 * n - xpos[w, b1])  # geom 1's core point
    local2_out[c] = wp.transpose(R2) @ (p2 - xpos[w, b2])  # anchor on body 2's surface
    frame_out[c] = frame @ R2
  else:
    local1_out[c] = wp.transpose(R1) @ (p1 - r1 * n - xpos[w, b1])
    local2_out[c] = wp.transpose(R2) @ (p2 + r2 * n - xpos[w, b2])
    frame_out[c] = frame


@wp.kernel
def _contact_geometry(
  # Model:
  geom_bodyid: wp.array[int],
  # Frozen:
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  active: wp.array[int],
  mode: wp.array[int],
  local1: wp.array[wp.vec3],
  local2: wp.array[wp.vec3],
  radius: wp.array[wp.vec2],
  frame_local: wp.array[wp.mat33],
  axis1: wp.array[wp.vec3],
  axis2: wp.array[wp.vec3],
  tangent: wp.array[wp.vec3],
  tmode: wp.array[int],
  # In (replayed):
  xpos: wp.array2d[wp.vec3],
  xmat: wp.array2d[wp.mat33],
  # Out:
  pos_out: wp.array[wp.vec3],  # (naconmax,) contact point
  frame_out: wp.array[wp.mat33],  # (naconmax,) rows: normal (geom 1 to geom 2), tangents
  dist_out: wp.array[float],  # (naconmax,) signed distance, m
):
  """The contact point, frame and distance from the replayed body poses (see `_contact_locals`)."""
  c = wp.tid()
  if active[c] == 0:
    return
  w = contact_worldid[c]
  g = contact_geom[c]
  b1 = geom_bodyid[g[0]]
  b2 = geom_bodyid[g[1]]
  R1 = xmat[w, b1]
  R2 = xmat[w, b2]
  q1 = xpos[w, b1] + R1 @ local1[c]
  q2 = xpos[w, b2] + R2 @ local2[c]
  r = radius[c]
  m = mode[c]
  n = wp.vec3(0.0)
  if m == _FACE1:
    n = R1 @ frame_local[c][0]
    p2 = q2 - r[1] * n
    if wp.length_sq(axis2[c]) > 0.0:
      a = R2 @ axis2[c]
      p2 = q2 + r[1] * wp.normalize(-n + wp.dot(n, a) * a)
    dist = wp.dot(n, p2 - q1)
    dist_out[c] = dist
    pos_out[c] = p2 - 0.5 * dist * n
  elif m == _FACE2:
    n = R2 @ frame_local[c][0]
    p1 = q1 + r[0] * n
    dist = wp.dot(n, q2 - p1)
    dist_out[c] = dist
    pos_out[c] = p1 + 0.5 * dist * n
  else:
    # capsules' core points slide along their axes (the segments' closest points; see _contact_locals)
    s1 = wp.length_sq(axis1[c]) > 0.0
    s2 = wp.length_sq(axis2[c]) > 0.0
    a1 = R1 @ axis1[c]
    a2 = R2 @ axis2[c]
    if s1 and s2:
      # two lines: the closest points (not parallel: MJWarp's parallel capsules touch at segment ends)
      w0 = q1 - q2
      cab = wp.dot(a1, a2)
      den = wp.max(1.0 - cab * cab, 1.0e-12)
      e1 = wp.dot(a1, w0)
      e2 = wp.dot(a2, w0)
      q1 = q1 + ((cab * e2 - e1) / den) * a1
      q2 = q2 + ((e2 - cab * e1) / den) * a2
    elif s1:
      q1 = q1 + wp.dot(q2 - q1, a1) * a1
    elif s2:
      q2 = q2 + wp.dot(q1 - q2, a2) * a2
    d = q2 - q1
    n = wp.normalize(d)
    dist = wp.length(d) - r[0] - r[1]
    dist_out[c] = dist
    pos_out[c] = q1 + (r[0] + 0.5 * dist) * n
  tm = tmode[c]
  if tm == _MAKE_FRAME:
    frame_out[c] = make_frame(n)
  else:
    b = tangent[c]
    if tm == _CAPSULE_AXIS:
      a = R2 @ tangent[c]
      b = wp.normalize(a - n * wp.dot(n, a))
    e = wp.cross(n, b)
    frame_out[c] = wp.mat33(n[0], n[1], n[2], b[0], b[1], b[2], e[0], e[1], e[2])


@wp.func
def _nrow(dim: int) -> int:
  if dim == 1:
    return 1
  return 2 * (dim - 1)


@wp.kernel
def _contact_friction(
  # Model:
  geom_priority: wp.array[int],
  geom_friction: wp.array2d[wp.vec3],
  # Frozen:
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  active: wp.array[int],
  # Out:
  friction_out: wp.array[vec5],  # (naconmax,) tangent, tangent, torsional, rolling, rolling
):
  """The contact's friction from its geoms' (MJWarp's `contact_material_params`: the higher
  priority's, else the larger of each coefficient), so that `geom_friction` gets its adjoint."""
  c = wp.tid()
  if active[c] == 0:
    return
  g = contact_geom[c]
  fid = contact_worldid[c] % geom_friction.shape[0]
  f1 = geom_friction[fid, g[0]]
  f2 = geom_friction[fid, g[1]]
  p1 = geom_priority[g[0]]
  p2 = geom_priority[g[1]]
  slide = wp.max(f1[0], f2[0])
  spin = wp.max(f1[1], f2[1])
  roll = wp.max(f1[2], f2[2])
  if p1 > p2:
    slide = f1[0]
    spin = f1[1]
    roll = f1[2]
  elif p2 > p1:
    slide = f2[0]
    spin = f2[1]
    roll = f2[2]
  friction_out[c] = vec5(slide, slide, spin, roll, roll)


@wp.kernel
def _contact_jacobian(
  # Model:
  geom_bodyid: wp.array[int],
  body_rootid: wp.array[int],
  body_isdofancestor: wp.array2d[int],
  # Frozen:
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  contact_dim: wp.array[int],
  contact_friction: wp.array[vec5],
  active: wp.array[int],
  dofs: wp.array2d[int],
  # In (replayed):
  pos: wp.array[wp.vec3],
  frame: wp.array[wp.mat33],
  com: wp.array2d[wp.vec3],
  cdof: wp.array2d[wp.spatial_vector],
  # Out:
  J_out: wp.array3d[float],  # (naconmax, MAX_CONTACT_ROWS, ncdof) the rows' Jacobians on `dofs`
):
  """Row `r` of contact `c` (MJWarp's `_efc_contact_jac_dense`, pyramidal cone): the normal, plus
  or minus `mu_i` times a tangent, torsional or rolling direction."""
  c, r = wp.tid()
  if active[c] == 0:
    return
  dim = contact_dim[c]
  if r >= _nrow(dim):
    return
  w = contact_worldid[c]
  g = contact_geom[c]
  b1 = geom_bodyid[g[0]]
  b2 = geom_bodyid[g[1]]
  p = pos[c]
  off1 = p - com[w, body_rootid[b1]]
  off2 = p - com[w, body_rootid[b2]]
  F = frame[c]
  # the row's direction: translational part along `lin_dir`, rotational part along `rot_dir`
  lin_dir = F[0]
  rot_dir = wp.vec3(0.0)
  if dim > 1:
    dimid2 = r / 2 + 1
    fr = contact_friction[c][dimid2 - 1] * (1.0 - 2.0 * float(r & 1))
    if dimid2 == 1:
      lin_dir = F[0] + fr * F[1]
    elif dimid2 == 2:
      lin_dir = F[0] + fr * F[2]
    else:
      rot_dir = fr * F[dimid2 - 3]
  for k in range(dofs.shape[1]):
    i = dofs[c, k]
    if i >= 0:
      a1 = float(body_isdofancestor[b1, i])
      a2 = float(body_isdofancestor[b2, i])
      cd = cdof[w, i]
      ang = wp.spatial_top(cd)
      lin = wp.spatial_bottom(cd)
      jp = a2 * (lin + wp.cross(ang, off2)) - a1 * (lin + wp.cross(ang, off1))
      J_out[c, r, k] = wp.dot(lin_dir, jp) + (a2 - a1) * wp.dot(rot_dir, ang)


@wp.kernel
def _row_products(
  # Frozen:
  contact_worldid: wp.array[int],
  contact_dim: wp.array[int],
  active: wp.array[int],
  dofs: wp.array2d[int],
  # In:
  J: wp.array3d[float],
  qvel: wp.array2d[float],
  qacc: wp.array2d[float],  # the solver's acceleration (fixed)
  # Out (zeroed):
  Jv_out: wp.array2d[float],  # (naconmax, MAX_CONTACT_ROWS)
  Ja_out: wp.array2d[float],
):
  c, r = wp.tid()
  if active[c] == 0:
    return
  if r >= _nrow(contact_dim[c]):
    return
  w = contact_worldid[c]
  for k in range(dofs.shape[1]):
    i = dofs[c, k]
    if i >= 0:
      wp.atomic_add(Jv_out, c, r, J[c, r, k] * qvel[w, i])
      wp.atomic_add(Ja_out, c, r, J[c, r, k] * qacc[w, i])


@wp.kernel
def _contact_force(
  # Model:
  opt_timestep: float,
  refsafe: int,
  opt_impratio_invsqrt: wp.array[float],
  body_invweight0: wp.array2d[wp.vec2],
  geom_bodyid: wp.array[int],
  # Frozen:
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  contact_dim: wp.array[int],
  contact_friction: wp.array[vec5],
  contact_solref: wp.array[wp.vec2],
  contact_solimp: wp.array[vec5],
  contact_includemargin: wp.array[float],
  active: wp.array[int],
  # In:
  dist: wp.array[float],
  Jv: wp.array2d[float],
  Ja: wp.array2d[float],
  # Out:
  force_out: wp.array2d[float],  # (naconmax, MAX_CONTACT_ROWS) row forces (0 where the row is slack)
  D_out: wp.array2d[float],  # (naconmax, MAX_CONTACT_ROWS) D of the quadratic rows, 0 elsewhere
):
  """Row constants (MJWarp's `_efc_contact_update`, `_efc_row`) and the force at the solver's
  acceleration."""
  c, r = wp.tid()
  if active[c] == 0:
    return
  dim = contact_dim[c]
  if r >= _nrow(dim):
    return
  w = contact_worldid[c]
  g = contact_geom[c]
  iw = w % body_invweight0.shape[0]
  invweight = body_invweight0[iw, geom_bodyid[g[0]]][0] + body_invweight0[iw, geom_bodyid[g[1]]][0]
  if dim > 1:
    fri0 = contact_friction[c][0]
    ir = opt_impratio_invsqrt[w % opt_impratio_invsqrt.shape[0]]
    invweight = invweight * (1.0 + fri0 * fri0) * 2.0 * fri0 * fri0 * ir * ir
  pos = dist[c] - contact_includemargin[c]
  kbi = _kbimp(opt_timestep, refsafe, contact_solref[c], contact_solimp[c], pos)
  imp = kbi[2]
  D = 1.0 / wp.max(invweight * (1.0 - imp) / imp, _MINVAL)
  aref = -kbi[0] * imp * pos - kbi[1] * Jv[c, r]
  jar = Ja[c, r] - aref
  if jar < 0.0:
    force_out[c, r] = -D * jar
    D_out[c, r] = D
  else:
    force_out[c, r] = 0.0
    D_out[c, r] = 0.0


@wp.kernel
def _rows_to_qfrc(
  # Frozen:
  contact_worldid: wp.array[int],
  contact_dim: wp.array[int],
  active: wp.array[int],
  dofs: wp.array2d[int],
  # In:
  J: wp.array3d[float],
  force: wp.array2d[float],
  # Out (zeroed):
  qfrc_out: wp.array2d[float],  # (nworld, nv) J^T force
):
  c, r = wp.tid()
  if active[c] == 0:
    return
  if r >= _nrow(contact_dim[c]):
    return
  w = contact_worldid[c]
  for k in range(dofs.shape[1]):
    i = dofs[c, k]
    if i >= 0:
      wp.atomic_add(qfrc_out, w, i, J[c, r, k] * force[c, r])


@wp.kernel(enable_backward=False)
def _rows_jtdj(
  # Frozen:
  contact_worldid: wp.array[int],
  contact_dim: wp.array[int],
  active: wp.array[int],
  dofs: wp.array2d[int],
  # In:
  J: wp.array3d[float],
  D: wp.array2d[float],
  # Out:
  jtdj_out: wp.array3d[float],  # (nworld, nv, nv) += J^T D J of the quadratic rows
):
  c, r = wp.tid()
  if active[c] == 0:
    return
  # rows past the contact's own are stale (J and D are reused across steps and contacts)
  if r >= _nrow(contact_dim[c]):
    return
  d = D[c, r]
  if d == 0.0:
    return
  w = contact_worldid[c]
  n = dofs.shape[1]
  for k in range(n):
    i = dofs[c, k]
    ji = d * J[c, r, k]
    if i >= 0 and ji != 0.0:
      for l in range(n):
        j = dofs[c, l]
        if j >= 0:
          wp.atomic_add(jtdj_out, w, i, j, ji * J[c, r, l])


class ContactRows:
  """The contact rows of one replayed step, recorded into the adjoint's program (`_Program`).

  `collide(qpos)` runs MJWarp's kinematics and collision on the step's state (forward only) and
  freezes each contact's witness points and frame in its bodies' frames; the program's "step"
  segment then rebuilds the rows from the replayed poses and adds `J^T f` to `qfrc_constraint`;
  `hessian()` adds the quadratic rows' `J^T D J` to `jtdj`.
  """

  def __init__(self, scene, fwd_data, program, arr, accumulated, *, xpos, xmat, com, cdof, qvel, qacc,
               qfrc_constraint, jtdj):
    import mujoco_warp as mjw

    s, m = scene, scene.model
    off = int(s.mjm.opt.disableflags)
    with wp.ScopedDevice(s.device):
      # a Data of its own: the forward's holds the last forward step's contacts and warm start
      self.data = mjw.put_data(s.mjm, mujoco.MjData(s.mjm), nworld=s.nworld, naconmax=fwd_data.naconmax,
                               njmax=fwd_data.njmax)
    d = self.data
    nc, nv = d.naconmax, s.nv
    self.scene, self.nc = scene, nc
    z = lambda shape, dtype=float: wp.zeros(shape, dtype=dtype, device=s.device)
    self.active = z(nc, int)
    self.mode, self.radius = z(nc, int), z(nc, wp.vec2)
    self.local1, self.local2, self.frame_local = z(nc, wp.vec3), z(nc, wp.vec3), z(nc, wp.mat33)
    self.axis1, self.axis2 = z(nc, wp.vec3), z(nc, wp.vec3)
    self.tangent, self.tmode = z(nc, wp.vec3), z(nc, int)
    pos, frame, dist = arr(nc, wp.vec3), arr(nc, wp.mat33), arr(nc)
    # a row's Jacobian lives on the dofs of its two bodies' trees: at most two trees' dofs
    tree_dofs = int(s.mjm.tree_dofnum.max()) if s.mjm.ntree else nv
    self.ncdof = max(1, min(nv, 2 * tree_dofs))
    self.dofs = z((nc, self.ncdof), int)
    self.J = arr((nc, MAX_CONTACT_ROWS, self.ncdof))
    Jv, Ja = arr((nc, MAX_CONTACT_ROWS)), arr((nc, MAX_CONTACT_ROWS))
    accumulated.extend([Jv, Ja])
    self.force, self.D = arr((nc, MAX_CONTACT_ROWS)), arr((nc, MAX_CONTACT_ROWS), grad=False)
    self.jtdj = jtdj
    c = d.contact
    frozen = [c.geom, c.worldid]
    refsafe = 0 if off & mujoco.mjtDisableBit.mjDSBL_REFSAFE else 1
    rows = (nc, MAX_CONTACT_ROWS)
    friction = c.friction
    if s.mjm.npair == 0:  # explicit pairs set their own friction (and a geom_friction Param is refused)
      friction = arr(nc, vec5)
      program.launch("step", _contact_friction, nc, [m.geom_priority, m.geom_friction, *frozen, self.active],
                     [friction])
    program.launch("step", _contact_geometry, nc,
                   [m.geom_bodyid, *frozen, self.active, self.mode, self.local1, self.local2, self.radius,
                    self.frame_local, self.axis1, self.axis2, self.tangent, self.tmode, xpos, xmat],
                   [pos, frame, dist])
    program.launch("step", _contact_jacobian, rows,
                   [m.geom_bodyid, m.body_rootid, m.body_isdofancestor, *frozen, c.dim, friction, self.active,
                    self.dofs, pos, frame, com, cdof], [self.J])
    program.launch("step", _row_products, rows, [c.worldid, c.dim, self.active, self.dofs, self.J, qvel, qacc],
                   [Jv, Ja])
    program.launch("step", _contact_force, rows,
                   [float(s.mjm.opt.timestep), refsafe, m.opt.impratio_invsqrt, m.body_invweight0, m.geom_bodyid,
                    *frozen, c.dim, friction, c.solref, c.solimp, c.includemargin, self.active, dist, Jv, Ja],
                   [self.force, self.D])
    program.launch("step", _rows_to_qfrc, rows, [c.worldid, c.dim, self.active, self.dofs, self.J, self.force],
                   [qfrc_constraint])
    self.values = dict(contact_pos=pos, contact_frame=frame, contact_dist=dist, contact_J=self.J,
                       contact_dofs=self.dofs)

  def collide(self, qpos: wp.array) -> None:
    """MJWarp's kinematics and collision at `qpos` `(nworld, nq)`; freezes the contacts with rows."""
    import mujoco_warp as mjw

    s, d = self.scene, self.data
    wp.copy(d.qpos, qpos)
    mjw.kinematics(s.model, d)
    mjw.collision(s.model, d)
    c = d.contact
    wp.launch(_contact_locals, dim=self.nc, device=s.device,
              inputs=[s.model.geom_type, s.model.geom_bodyid, s.model.geom_size, s.model.geom_dataid,
                      s.model.body_isdofancestor, s.model.mesh_polyadr, s.model.mesh_polynum,
                      s.model.mesh_polynormal, d.nacon, d.xpos, d.xmat, d.geom_xpos, d.geom_xmat, c.dist,
                      c.pos, c.frame, c.includemargin, c.geom, c.worldid, c.type],
              outputs=[self.active, self.mode, self.local1, self.local2, self.radius, self.frame_local, self.axis1,
                       self.axis2, self.tangent, self.tmode, self.dofs])

  def hessian(self) -> None:
    """Adds the quadratic rows' `J^T D J` to `jtdj` (after the program's "step" segment ran)."""
    c = self.data.contact
    wp.launch(_rows_jtdj, dim=(self.nc, MAX_CONTACT_ROWS), device=self.scene.device,
              inputs=[c.worldid, c.dim, self.active, self.dofs, self.J, self.D], outputs=[self.jtdj])

