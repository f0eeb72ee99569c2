"""Contact geometry of the analytic adjoint: the forward's contact set, frozen, as a function of `qpos`.

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
    sliding along its segment (the segments' closest points) unless it is a segment end;
    coincident core points (`_COINCIDENT`) keep MJWarp's normal, a fixed world axis.

The contact point is the witness points' midpoint and the tangents are `make_frame(n)`, except
plane-capsule's, which follow the capsule's axis, as MJWarp's do. At the nominal `q` these equal
MJWarp's values. The derivatives are exact where the touching feature is a vertex, a sphere or a
capsule core, or a cylinder rim on a face (every primitive pair diffsim's tests check against float64
C, and a mesh vertex on a mesh face); where a contact point is no vertex of either mesh (MJWarp's
multi-contact clipping can put one where an edge crosses a face) it slides as the bodies move, and
keeping it rigid is a first-order model (the SO-101's self-collision: `tests/test_contact_adjoint.py`).
"""

from __future__ import annotations

import mujoco
import warp as wp

from mujoco_warp._src.math import make_frame
from mujoco_warp._src.types import ContactType

from .contact_threads import contact_range

_CONSTRAINT = int(ContactType.CONSTRAINT)
_G = mujoco.mjtGeom
_PLANE, _SPHERE, _CAPSULE, _CYLINDER = int(_G.mjGEOM_PLANE), int(_G.mjGEOM_SPHERE), int(_G.mjGEOM_CAPSULE), \
  int(_G.mjGEOM_CYLINDER)
_BOX, _MESH = int(_G.mjGEOM_BOX), int(_G.mjGEOM_MESH)
_FACE1, _FACE2, _ROUND, _COINCIDENT = 0, 1, 2, 3  # which body's surface defines the normal (`_contact_locals`)
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
def _rim_direction(n: wp.vec3, axis: wp.vec3) -> wp.vec3:
  """The unit direction from a cylinder's cap centre to its rim point deepest along `-n`: `-n` less its
  part along the unit `axis`, as `-axis x (n x axis)`, whose products keep float32's accuracy where
  `-n + (n . axis) axis` would cancel (a cylinder nearly upright on a plane)."""
  return wp.normalize(-wp.cross(axis, wp.cross(n, axis)))


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
  nthread: int,
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
  mode_out: wp.array[int],  # _FACE1, _FACE2, _ROUND or _COINCIDENT
  local1_out: wp.array[wp.vec3],  # a point fixed in body 1's frame (see the modes)
  local2_out: wp.array[wp.vec3],  # a point fixed in body 2's frame
  radius_out: wp.array[wp.vec2],  # geoms' rounding (sphere, capsule radius; 0 otherwise)
  frame_out: wp.array[wp.mat33],  # contact frame in the face body's frame (_ROUND, _COINCIDENT: the world frame)
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
  t = wp.tid()
  nc = active_out.shape[0]
  size = (nc + nthread - 1) / nthread
  n = nacon[0]
  for c in range(t * size, wp.min((t + 1) * size, nc)):
    active_out[c] = 0
    if c < n:
      _locals_one(c, geom_type, geom_bodyid, geom_size, geom_dataid, body_isdofancestor, mesh_polyadr, mesh_polynum,
                  mesh_polynormal, xpos, xmat, geom_xpos, geom_xmat, contact_dist, contact_pos, contact_frame,
                  contact_includemargin, contact_geom, contact_worldid, contact_type, active_out, mode_out,
                  local1_out, local2_out, radius_out, frame_out, axis1_out, axis2_out, tangent_out, tmode_out,
                  dofs_out)


@wp.func
def _locals_one(
  c: int,
  geom_type: wp.array[int],
  geom_bodyid: wp.array[int],
  geom_size: wp.array2d[wp.vec3],
  geom_dataid: wp.array2d[int],
  body_isdofancestor: wp.array2d[int],
  mesh_polyadr: wp.array[int],
  mesh_polynum: wp.array[int],
  mesh_polynormal: wp.array[wp.vec3],
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
  active_out: wp.array[int],
  mode_out: wp.array[int],
  local1_out: wp.array[wp.vec3],
  local2_out: wp.array[wp.vec3],
  radius_out: wp.array[wp.vec2],
  frame_out: wp.array[wp.mat33],
  axis1_out: wp.array[wp.vec3],
  axis2_out: wp.array[wp.vec3],
  tangent_out: wp.array[wp.vec3],
  tmode_out: wp.array[int],
  dofs_out: wp.array2d[int],
):
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
    # coincident core points: the normal joining them is undefined and MJWarp's is a fixed world axis;
    # keep it (and its frame) fixed in the world
    mode = _COINCIDENT
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
    axis = wp.normalize(_geom_axis(geom_xmat[w, g[1]]))
    if wp.length(wp.cross(n, axis)) > 1.0e-3:
      r2 = geom_size[w % geom_size.shape[0], g[1]][0]
      core2 = p2 - r2 * _rim_direction(n, axis)
      axis2_out[c] = wp.transpose(R2) @ axis
  radius_out[c] = wp.vec2(r1, r2)
  # MJWarp's tangents are `make_frame(n)` except plane-capsule's, which follow the capsule's axis
  tmode_out[c] = _MAKE_FRAME
  if mode == _COINCIDENT:
    tmode_out[c] = _FIXED
    tangent_out[c] = frame[1]
  elif t1 == _PLANE and geom_type[g[1]] == _CAPSULE:
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


@wp.func
def _edge_point(rigid: wp.vec3, a: wp.vec3, b: wp.vec3, Rf: wp.mat33, xf: wp.vec3, p: wp.vec3, nrm: wp.vec3,
                RF: wp.mat33, xF: wp.vec3) -> wp.vec3:
  """A clipped contact point: where the feature body's edge `a b` (frame `Rf`, `xf`) crosses the face
  body's side plane through `p` with normal `nrm` (frame `RF`, `xF`); `rigid` where there is no edge."""
  out = rigid
  if wp.length_sq(b - a) > 0.0:
    A = xf + Rf @ a
    B = xf + Rf @ b
    N = RF @ nrm
    t = wp.dot(N, xF + RF @ p - A) / wp.dot(N, B - A)
    out = A + t * (B - A)
  return out


@wp.kernel(enable_backward=False)
def _mesh_edge_points(
  # Model:
  geom_type: wp.array[int],
  geom_bodyid: wp.array[int],
  geom_dataid: wp.array2d[int],
  mesh_vertadr: wp.array[int],
  mesh_vertnum: wp.array[int],
  mesh_vert: wp.array[wp.vec3],
  mesh_polyadr: wp.array[int],
  mesh_polynum: wp.array[int],
  mesh_polyvertadr: wp.array[int],
  mesh_polyvertnum: wp.array[int],
  mesh_polyvert: wp.array[int],
  mesh_polynormal: wp.array[wp.vec3],
  # Data in (MJWarp, after kinematics and collision at q_k):
  xpos: wp.array2d[wp.vec3],
  xmat: wp.array2d[wp.mat33],
  geom_xpos: wp.array2d[wp.vec3],
  geom_xmat: wp.array2d[wp.mat33],
  contact_dist: wp.array[float],
  contact_pos: wp.array[wp.vec3],
  contact_frame: wp.array[wp.mat33],
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  # Frozen:
  active: wp.array[int],
  mode: wp.array[int],
  # Out:
  edge_a_out: wp.array[wp.vec3],  # (naconmax,) the feature mesh's edge, in its body's frame (a == b: none)
  edge_b_out: wp.array[wp.vec3],
  plane_p_out: wp.array[wp.vec3],  # a point of the face polygon's side plane, in the face body's frame
  plane_n_out: wp.array[wp.vec3],  # the side plane's normal, in the face body's frame
):
  """Mesh-mesh contact points that are no vertex (MJWarp's multi-contact clipping: an edge of the
  feature mesh crossing a side plane of the face mesh's polygon) slide along that edge as the bodies
  move: finds the edge and the side plane the witness point lies on (within 1 um)."""
  c = wp.tid()
  edge_a_out[c] = wp.vec3(0.0)
  edge_b_out[c] = wp.vec3(0.0)
  if active[c] == 0:
    return
  md = mode[c]
  if md != _FACE1 and md != _FACE2:
    return
  w = contact_worldid[c]
  g = contact_geom[c]
  gf = g[1]  # the feature's geom
  gF = g[0]  # the face's geom
  n = contact_frame[c][0]
  outward = n
  pf = contact_pos[c] + 0.5 * contact_dist[c] * n
  if md == _FACE2:
    gf = g[0]
    gF = g[1]
    outward = -n
    pf = contact_pos[c] - 0.5 * contact_dist[c] * n
  if geom_type[gf] != _MESH or geom_type[gF] != _MESH:
    return
  di = w % geom_dataid.shape[0]
  mf = geom_dataid[di, gf]
  mF = geom_dataid[di, gF]
  if mf < 0 or mF < 0:
    return
  tol = 1.0e-6
  Rf = geom_xmat[w, gf]
  pl = wp.transpose(Rf) @ (pf - geom_xpos[w, gf])  # the witness point in the feature geom's frame
  vadr = mesh_vertadr[mf]
  for i in range(mesh_vertnum[mf]):
    if wp.length(mesh_vert[vadr + i] - pl) < 1.0e-5:
      return  # a vertex: rigid on its body
  best = tol
  ea = wp.vec3(0.0)
  eb = wp.vec3(0.0)
  for p in range(mesh_polyadr[mf], mesh_polyadr[mf] + mesh_polynum[mf]):
    adr = mesh_polyvertadr[p]
    num = mesh_polyvertnum[p]
    for k in range(num):
      A = mesh_vert[vadr + mesh_polyvert[adr + k]]
      B = mesh_vert[vadr + mesh_polyvert[adr + (k + 1) % num]]
      AB = B - A
      t = wp.dot(pl - A, AB) / wp.max(wp.dot(AB, AB), 1.0e-20)
      if t > 1.0e-4 and t < 1.0 - 1.0e-4:
        d = wp.length(A + t * AB - pl)
        if d < best:
          best = d
          ea = A
          eb = B
  if best >= tol:
    return
  # the face polygon along the outward normal, and its side plane through the witness point
  RF = geom_xmat[w, gF]
  local_out = wp.transpose(RF) @ outward
  pF = wp.transpose(RF) @ (pf - geom_xpos[w, gF])
  FvA = mesh_vertadr[mF]
  face = int(-1)
  align = float(-2.0)
  for p in range(mesh_polyadr[mF], mesh_polyadr[mF] + mesh_polynum[mF]):
    a = wp.dot(mesh_polynormal[p], local_out)
    if a > align:
      align = a
      face = p
  adr = mesh_polyvertadr[face]
  num = mesh_polyvertnum[face]
  pnorm = mesh_polynormal[face]
  best = tol
  sp = wp.vec3(0.0)
  sn = wp.vec3(0.0)
  for k in range(num):
    E = mesh_vert[FvA + mesh_polyvert[adr + k]]
    E2 = mesh_vert[FvA + mesh_polyvert[adr + (k + 1) % num]]
    side = wp.cross(E2 - E, pnorm)
    if wp.length(side) > 0.0:
      side = wp.normalize(side)
      d = wp.abs(wp.dot(side, pF - E))
      if d < best:
        best = d
        sp = E
        sn = side
  if best >= tol:
    return
  # to the bodies' frames
  bf = geom_bodyid[gf]
  bF = geom_bodyid[gF]
  Rbf = wp.transpose(xmat[w, bf])
  RbF = wp.transpose(xmat[w, bF])
  edge_a_out[c] = Rbf @ (geom_xpos[w, gf] + Rf @ ea - xpos[w, bf])
  edge_b_out[c] = Rbf @ (geom_xpos[w, gf] + Rf @ eb - xpos[w, bf])
  plane_p_out[c] = RbF @ (geom_xpos[w, gF] + RF @ sp - xpos[w, bF])
  plane_n_out[c] = RbF @ (RF @ sn)


@wp.kernel
def _contact_geometry(
  nthread: int,
  nacon: wp.array[int],
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
  edge_a: wp.array[wp.vec3],
  edge_b: wp.array[wp.vec3],
  plane_p: wp.array[wp.vec3],
  plane_n: wp.array[wp.vec3],
  # In (replayed):
  xpos: wp.array2d[wp.vec3],
  xmat: wp.array2d[wp.mat33],
  # Out:
  pos_out: wp.array[wp.vec3],  # (naconmax,) contact point
  frame_out: wp.array[wp.mat33],  # (naconmax,) rows: normal (geom 1 to geom 2), tangents
  dist_out: wp.array[float],  # (naconmax,) signed distance, m
):
  """The contact point, frame and distance from the replayed body poses (see `_contact_locals`)."""
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  for c in range(span[0], span[1]):
    if active[c] != 0:
      _geometry_one(c, geom_bodyid, contact_geom, contact_worldid, mode, local1, local2, radius, frame_local, axis1,
                    axis2, tangent, tmode, edge_a, edge_b, plane_p, plane_n, xpos, xmat, pos_out, frame_out, dist_out)


@wp.func
def _geometry_one(
  c: int,
  geom_bodyid: wp.array[int],
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  mode: wp.array[int],
  local1: wp.array[wp.vec3],
  local2: wp.array[wp.vec3],
  radius: wp.array[wp.vec2],
  frame_local: wp.array[wp.mat33],
  axis1: wp.array[wp.vec3],
  axis2: wp.array[wp.vec3],
  tangent: wp.array[wp.vec3],
  tmode: wp.array[int],
  edge_a: wp.array[wp.vec3],
  edge_b: wp.array[wp.vec3],
  plane_p: wp.array[wp.vec3],
  plane_n: wp.array[wp.vec3],
  xpos: wp.array2d[wp.vec3],
  xmat: wp.array2d[wp.mat33],
  pos_out: wp.array[wp.vec3],
  frame_out: wp.array[wp.mat33],
  dist_out: wp.array[float],
):
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
    q2 = _edge_point(q2, edge_a[c], edge_b[c], R2, xpos[w, b2], plane_p[c], plane_n[c], R1, xpos[w, b1])
    p2 = q2 - r[1] * n
    if wp.length_sq(axis2[c]) > 0.0:
      # unit length again: float32's 1e-7 off it would tilt the rim direction by 1e-7 / sin(tilt) on a
      # cylinder nearly upright on the plane (the rim point's height then off by 1.5e-7 m at 4 degrees)
      p2 = q2 + r[1] * _rim_direction(n, wp.normalize(R2 @ axis2[c]))
    dist = wp.dot(n, p2 - q1)
    dist_out[c] = dist
    pos_out[c] = p2 - 0.5 * dist * n
  elif m == _FACE2:
    n = R2 @ frame_local[c][0]
    q1 = _edge_point(q1, edge_a[c], edge_b[c], R1, xpos[w, b1], plane_p[c], plane_n[c], R2, xpos[w, b2])
    p1 = q1 + r[0] * n
    dist = wp.dot(n, q2 - p1)
    dist_out[c] = dist
    pos_out[c] = p1 + 0.5 * dist * n
  elif m == _COINCIDENT:
    n = frame_local[c][0]
    dist = wp.dot(n, q2 - q1) - r[0] - r[1]
    dist_out[c] = dist
    pos_out[c] = q1 + (r[0] + 0.5 * dist) * n
  else:
    # capsules' core points slide along their axes (the segments' closest points; see _contact_locals)
    s1 = wp.length_sq(axis1[c]) > 0.0
    s2 = wp.length_sq(axis2[c]) > 0.0
    a1 = wp.normalize(R1 @ axis1[c])  # unit length again (float32's rounding of the frozen axes)
    a2 = wp.normalize(R2 @ axis2[c])
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

