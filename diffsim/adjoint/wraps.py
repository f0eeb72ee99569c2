"""Spatial tendons wrapping around spheres and cylinders, replayed differentiably: MJWarp's
`util_misc.wrap` (tangent points of the shortest path around the circle in the plane of the two sites
and the geom's centre, or around the cylinder's axis with a helical correction) and its tendon
segments `site - tangent point - arc - tangent point - site` (MJWarp's `_spatial_geom_tendon`).

The wrap's discrete choices (whether the straight segment clears the geom, which of the two
tangent solutions, the side site's orientation) are made on the replayed values, which at the
replayed state are MJWarp's own, and the tangent points and arc are the closed-form functions of the
sites and the geom's pose within that branch, so the length, the Jacobian
`vec . (jac(tangent point) - jac(site))` and its dependence on `q` are differentiated exactly.

A side site inside the geom takes MuJoCo's inside wrap (MJWarp's `wrap_inside`): the path touches
the circle at one point, the root `phi` of `asin(A sin phi) + asin(B sin phi) - 2 phi + G = 0` (`A`, `B`:
the radius over the sites' distances from the centre, `G` the angle between them), which MuJoCo finds
by Newton's method. The iteration runs forward only (`_inside_wraps`, MJWarp's steps and fallbacks);
the differentiable replay takes one more Newton step from its root with the root held constant,
`phi = phi* - F(phi*) / F'(phi*)`, whose derivative is the implicit function theorem's `-F_theta / F'`.
"""

from __future__ import annotations

from typing import Tuple

import mujoco
import warp as wp

from .spatial import _MINVAL

_W = mujoco.mjtWrap
_WRAP_SPHERE, _WRAP_CYLINDER = int(_W.mjWRAP_SPHERE), int(_W.mjWRAP_CYLINDER)
_MAXVAL = float(mujoco.mjMAXVAL)


@wp.func
def _winding(p: wp.vec2, q: wp.vec2) -> float:
  """Signed angle swept from `p` to `q` around the origin, in (-pi, pi]."""
  return wp.atan2(p[0] * q[1] - p[1] * q[0], wp.dot(p, q))


@wp.func
def _intersect(p1: wp.vec2, p2: wp.vec2, p3: wp.vec2, p4: wp.vec2) -> bool:
  """Whether segments `p1 p2` and `p3 p4` cross (MJWarp's `is_intersect`)."""
  u = p2 - p1
  v = p4 - p3
  det = v[1] * u[0] - v[0] * u[1]
  out = False
  if wp.abs(det) >= _MINVAL:
    w = p1 - p3
    a = (v[0] * w[1] - v[1] * w[0]) / det
    b = (u[0] * w[1] - u[1] * w[0]) / det
    out = a >= 0.0 and a <= 1.0 and b >= 0.0 and b <= 1.0
  return out


@wp.func
def _arc(p0: wp.vec2, p1: wp.vec2, ind: int, radius: float) -> float:
  """Arc length from `p0` to `p1` on the circle (MJWarp's `length_circle`)."""
  cross = p0[1] * p1[0] - p0[0] * p1[1]
  angle = wp.atan2(wp.abs(cross), wp.dot(p0, p1))
  if angle > 1.0e-6 and ((cross > 0.0 and ind != 0) or (cross < 0.0 and ind == 0)):
    angle = 2.0 * wp.pi - angle
  return radius * angle


@wp.func
def _tangent(end: wp.vec2, sqlen: float, sqrad: float, radius: float, sign: float) -> wp.vec2:
  """A tangent point of the circle seen from `end` (`sign` picks the side)."""
  root = wp.sqrt(sqlen - sqrad)
  return wp.vec2((end[0] * sqrad + sign * radius * end[1] * root) / sqlen,
                 (end[1] * sqrad - sign * radius * end[0] * root) / sqlen)


@wp.func
def _wrap_circle(end0: wp.vec2, end1: wp.vec2, side: wp.vec2, has_side: bool,
                 radius: float) -> Tuple[float, wp.vec2, wp.vec2]:
  """2D circle wrap (MJWarp's `wrap_circle`): the arc length (-1: no wrap) and the tangent points."""
  wlen = float(-1.0)
  pnt0 = wp.vec2(0.0)
  pnt1 = wp.vec2(0.0)
  sqlen0 = wp.dot(end0, end0)
  sqlen1 = wp.dot(end1, end1)
  sqrad = radius * radius
  dif = end1 - end0
  dd = wp.dot(dif, dif)
  if sqlen0 >= sqrad and sqlen1 >= sqrad and radius >= _MINVAL and dd >= _MINVAL:
    a = wp.clamp(-wp.dot(dif, end0) / dd, 0.0, 1.0)
    tmp = a * dif + end0
    clear = wp.dot(tmp, tmp) > sqrad
    wside = float(0.0)
    wraps = not clear
    if has_side:
      wside = _winding(end0, side) + _winding(side, end1)
      wraps = not (clear and wp.abs(wside - _winding(end0, end1)) < wp.pi)
    if wraps:
      sol00 = _tangent(end0, sqlen0, sqrad, radius, 1.0)
      sol01 = _tangent(end1, sqlen1, sqrad, radius, -1.0)
      sol10 = _tangent(end0, sqlen0, sqrad, radius, -1.0)
      sol11 = _tangent(end1, sqlen1, sqrad, radius, 1.0)
      good0 = -wp.length_sq(sol00 - sol01)
      good1 = -wp.length_sq(sol10 - sol11)
      int0 = _intersect(end0, sol00, end1, sol01)
      int1 = _intersect(end0, sol10, end1, sol11)
      if int0:
        good0 = -10000.0
      if int1:
        good1 = -10000.0
      ind = int(1)
      if has_side:
        if wside <= 0.0:
          ind = 0
      elif good0 > good1:
        ind = 0
      pnt0 = sol10
      pnt1 = sol11
      crossing = int1
      if ind == 0:
        pnt0 = sol00
        pnt1 = sol01
        crossing = int0
      if not crossing:
        if has_side:
          wlen = radius * wp.abs(wside - _winding(end0, pnt0) - _winding(pnt1, end1))
        else:
          wlen = _arc(pnt0, pnt1, ind, radius)
  return wlen, pnt0, pnt1


_INSIDE_NONE, _INSIDE_AVERAGE, _INSIDE_ROOT = -1, 0, 1  # `_inside_wraps`' outcomes


@wp.func
def _inside_f(phi: float, A: float, B: float, G: float) -> wp.vec2:
  """The inside wrap's equation `F(phi)` and its derivative `F'(phi)`."""
  z = wp.sin(phi)
  df = wp.cos(phi) * (A / wp.max(_MINVAL, wp.sqrt(1.0 - z * z * A * A)) +
                      B / wp.max(_MINVAL, wp.sqrt(1.0 - z * z * B * B))) - 2.0
  return wp.vec2(wp.asin(A * z) + wp.asin(B * z) - 2.0 * phi + G, df)


@wp.func
def _inside_setup(end0: wp.vec2, end1: wp.vec2, radius: float) -> wp.vec4:
  """`(outcome, A, B, cos G)` of the inside wrap before its iteration (MJWarp's `wrap_inside`):
  `_INSIDE_NONE` where a site is inside the circle or the segment crosses it, `_INSIDE_AVERAGE` where
  MuJoCo falls back to the sites' mean direction, else `_INSIDE_ROOT` (iterate)."""
  len0 = wp.length(end0)
  len1 = wp.length(end1)
  dif = end1 - end0
  dd = wp.dot(dif, dif)
  out = wp.vec4(float(_INSIDE_NONE), 0.0, 0.0, 0.0)
  if len0 > radius and len1 > radius and radius >= _MINVAL and len0 >= _MINVAL and len1 >= _MINVAL:
    crosses = False
    if dd > _MINVAL:
      a = -wp.dot(dif, end0) / dd
      if a > 0.0 and a < 1.0:
        crosses = wp.length(end0 + a * dif) <= radius
    if not crosses:
      A = radius / len0
      B = radius / len1
      cosG = (len0 * len0 + len1 * len1 - dd) / (2.0 * len0 * len1)
      out = wp.vec4(float(_INSIDE_ROOT), A, B, cosG)
      if cosG < -1.0 + _MINVAL:
        out = wp.vec4(float(_INSIDE_NONE), A, B, cosG)
      elif cosG > 1.0 - _MINVAL or wp.asin(A) + wp.asin(B) - wp.pi + wp.acos(cosG) > 0.0:
        out = wp.vec4(float(_INSIDE_AVERAGE), A, B, cosG)
  return out


@wp.func
def _inside_wrap(end0: wp.vec2, end1: wp.vec2, radius: float, outcome: int, phi_root: float
                 ) -> Tuple[float, wp.vec2]:
  """The inside wrap's length (0, or -1: no wrap) and its one contact point, differentiably: from
  the forward-only root `phi_root` one Newton step (see the module docstring)."""
  wlen = float(-1.0)
  pnt = wp.vec2(0.0)
  if outcome == _INSIDE_AVERAGE:
    wlen = 0.0
    pnt = radius * wp.normalize(0.5 * (end0 + end1))
  elif outcome == _INSIDE_ROOT:
    s = _inside_setup(end0, end1, radius)
    A = s[1]
    B = s[2]
    f = _inside_f(phi_root, A, B, wp.acos(s[3]))
    phi = phi_root - f[0] / f[1]
    z = wp.sin(phi)
    vec = end1
    ang = phi - wp.asin(B * z)
    if end0[0] * end1[1] - end0[1] * end1[0] > 0.0:
      vec = end0
      ang = phi - wp.asin(A * z)
    vec = wp.normalize(vec)
    wlen = 0.0
    pnt = radius * wp.vec2(wp.cos(ang) * vec[0] - wp.sin(ang) * vec[1], wp.sin(ang) * vec[0] + wp.cos(ang) * vec[1])
  return wlen, pnt


@wp.func
def _wrap_plane(x0: wp.vec3, x1: wp.vec3, pos: wp.vec3, mat: wp.mat33, wrap_type: int) -> wp.mat33:
  """The wrap's 2D frame in the geom's frame: rows `axis0`, `axis1` (a sphere's: the plane of its
  centre and the two points; a cylinder's: its cross-section) and, third, a zero row."""
  matT = wp.transpose(mat)
  p0 = matT @ (x0 - pos)
  p1 = matT @ (x1 - pos)
  axis0 = wp.vec3(1.0, 0.0, 0.0)
  axis1 = wp.vec3(0.0, 1.0, 0.0)
  if wrap_type == _WRAP_SPHERE:
    axis0 = wp.normalize(p0)
    normal = wp.cross(p0, p1)
    if wp.length(normal) < _MINVAL:
      # p0, p1 parallel: a normal from the axis across p0's largest component
      a = wp.abs(axis0)
      other = wp.vec3(0.0, 1.0, 1.0)
      if a[1] > a[0] and a[1] > a[2]:
        other = wp.vec3(1.0, 0.0, 1.0)
      if a[2] > a[0] and a[2] > a[1]:
        other = wp.vec3(1.0, 1.0, 0.0)
      normal = wp.cross(axis0, other)
    normal = wp.normalize(normal)
    axis1 = wp.normalize(wp.cross(normal, axis0))
  return wp.matrix_from_rows(axis0, axis1, wp.vec3(0.0))


@wp.func
def _side_inside(side: wp.vec3, pos: wp.vec3, mat: wp.mat33, radius: float) -> bool:
  """Whether the side site takes the inside wrap (MJWarp: its distance from the centre, in 3D)."""
  return wp.length(wp.transpose(mat) @ (side - pos)) < radius


@wp.kernel(enable_backward=False)
def _inside_wraps(
  # Model:
  geom_size: wp.array2d[wp.vec3],
  wrap_type: wp.array[int],
  wrap_objid: wp.array[int],
  wrap_prm: wp.array[float],
  wrap_geom_adr: wp.array[int],
  # In (replayed):
  site_xpos: wp.array2d[wp.vec3],
  geom_xpos: wp.array2d[wp.vec3],
  geom_xmat: wp.array2d[wp.mat33],
  # Out:
  outcome_out: wp.array2d[int],  # (nworld, nwrapgeom) `_INSIDE_*`, or -2 where the wrap is not inside
  phi_out: wp.array2d[float],  # (nworld, nwrapgeom) the root, where `_INSIDE_ROOT`
):
  """Forward only: MJWarp's Newton iteration of the inside wraps (`wrap_inside`), its root and outcome."""
  w, e = wp.tid()
  j = wrap_geom_adr[e]
  g = wrap_objid[j]
  sideid = int(wp.round(wrap_prm[j]))
  outcome_out[w, e] = -2
  phi_out[w, e] = 0.0
  pos = geom_xpos[w, g]
  mat = geom_xmat[w, g]
  radius = geom_size[w % geom_size.shape[0], g][0]
  if sideid < 0 or not _side_inside(site_xpos[w, sideid], pos, mat, radius):
    return
  x0 = site_xpos[w, wrap_objid[j - 1]]
  x1 = site_xpos[w, wrap_objid[j + 1]]
  matT = wp.transpose(mat)
  p0 = matT @ (x0 - pos)
  p1 = matT @ (x1 - pos)
  fr = _wrap_plane(x0, x1, pos, mat, wrap_type[j])
  end0 = wp.vec2(wp.dot(p0, fr[0]), wp.dot(p0, fr[1]))
  end1 = wp.vec2(wp.dot(p1, fr[0]), wp.dot(p1, fr[1]))
  s = _inside_setup(end0, end1, radius)
  outcome = int(s[0])
  phi = float(0.5 * wp.pi)
  if outcome == _INSIDE_ROOT:
    G = wp.acos(s[3])
    f = _inside_f(phi, s[1], s[2], G)
    it = int(0)
    while it < 20 and wp.abs(f[0]) > 1.0e-6 and outcome == _INSIDE_ROOT:
      phi1 = phi - f[0] / f[1]
      if f[1] > -_MINVAL or phi1 > phi:
        outcome = _INSIDE_AVERAGE  # MuJoCo's "should not occur" exits
      else:
        phi = phi1
        f = _inside_f(phi, s[1], s[2], G)
        if f[0] > 1.0e-6:
          outcome = _INSIDE_AVERAGE
        it += 1
    if it >= 20:
      outcome = _INSIDE_AVERAGE
  outcome_out[w, e] = outcome
  phi_out[w, e] = phi


@wp.func
def _wrap(x0: wp.vec3, x1: wp.vec3, pos: wp.vec3, mat: wp.mat33, radius: float, wrap_type: int, side: wp.vec3,
          has_side: bool, inside: int, phi_root: float) -> Tuple[float, wp.vec3, wp.vec3]:
  """The wrap of the segment `x0 x1` around a sphere or cylinder at `pos`, `mat` (MJWarp's
  `util_misc.wrap`): the wrapped length (-1: no wrap) and the world tangent points. `inside`,
  `phi_root`: `_inside_wraps`' outcome and root (-2: the side site is outside)."""
  matT = wp.transpose(mat)
  p0 = matT @ (x0 - pos)
  p1 = matT @ (x1 - pos)
  wlen = float(-1.0)
  w0 = wp.vec3(0.0)
  w1 = wp.vec3(0.0)
  if wp.length(p0) >= _MINVAL and wp.length(p1) >= _MINVAL:
    fr = _wrap_plane(x0, x1, pos, mat, wrap_type)
    axis0 = fr[0]
    axis1 = fr[1]
    end0 = wp.vec2(wp.dot(p0, axis0), wp.dot(p0, axis1))
    end1 = wp.vec2(wp.dot(p1, axis0), wp.dot(p1, axis1))
    side2 = wp.vec2(0.0)
    if has_side:
      sp = matT @ (side - pos)
      side2 = wp.vec2(wp.dot(sp, axis0), wp.dot(sp, axis1))
      if wp.length(side2) < _MINVAL:
        side2 = wp.vec2(radius, 0.0)
      else:
        side2 = radius * wp.normalize(side2)
    wl = float(-1.0)
    pnt0 = wp.vec2(0.0)
    pnt1 = wp.vec2(0.0)
    if inside >= _INSIDE_NONE:
      wl, pnt0 = _inside_wrap(end0, end1, radius, inside, phi_root)
      pnt1 = pnt0
    else:
      wl, pnt0, pnt1 = _wrap_circle(end0, end1, side2, has_side, radius)
    if wl >= 0.0:
      res0 = axis0 * pnt0[0] + axis1 * pnt0[1]
      res1 = axis0 * pnt1[0] + axis1 * pnt1[1]
      if wrap_type == _WRAP_CYLINDER:
        # heights along the axis in proportion to the path's length, and the helix's length
        L0 = wp.sqrt((p0[0] - res0[0]) * (p0[0] - res0[0]) + (p0[1] - res0[1]) * (p0[1] - res0[1]))
        L1 = wp.sqrt((p1[0] - res1[0]) * (p1[0] - res1[0]) + (p1[1] - res1[1]) * (p1[1] - res1[1]))
        total = L0 + wl + L1
        z0 = p0[2] + (p1[2] - p0[2]) * L0 / total
        z1 = p0[2] + (p1[2] - p0[2]) * (L0 + wl) / total
        res0 = wp.vec3(res0[0], res0[1], z0)
        res1 = wp.vec3(res1[0], res1[1], z1)
        if inside < _INSIDE_NONE:  # (an inside wrap's one point: no helix, and sqrt(0) has no derivative)
          wl = wp.sqrt(wl * wl + (z1 - z0) * (z1 - z0))
      wlen = wl
      w0 = mat @ res0 + pos
      w1 = mat @ res1 + pos
  return wlen, w0, w1


@wp.func
def _segment_jac(cd: wp.spatial_vector, a0: float, a1: float, off0: wp.vec3, off1: wp.vec3, vec: wp.vec3) -> float:
  """A dof's entry of `vec . (jac(p1) - jac(p0))` (`a0`, `a1`: whether it moves each point's body)."""
  ang = wp.spatial_top(cd)
  lin = wp.spatial_bottom(cd)
  return wp.dot(vec, a1 * (lin + wp.cross(ang, off1)) - a0 * (lin + wp.cross(ang, off0)))


@wp.kernel
def _geom_segments(
  # Model:
  body_rootid: wp.array[int],
  body_isdofancestor: wp.array2d[int],
  geom_bodyid: wp.array[int],
  geom_size: wp.array2d[wp.vec3],
  site_bodyid: wp.array[int],
  wrap_type: wp.array[int],
  wrap_objid: wp.array[int],
  wrap_prm: wp.array[float],
  wrap_pulley_scale: wp.array[float],
  tendon_geom_adr: wp.array[int],
  wrap_geom_adr: wp.array[int],
  # In (replayed):
  site_xpos: wp.array2d[wp.vec3],
  geom_xpos: wp.array2d[wp.vec3],
  geom_xmat: wp.array2d[wp.mat33],
  com: wp.array2d[wp.vec3],
  cdof: wp.array2d[wp.spatial_vector],
  inside: wp.array2d[int],  # (nworld, nwrapgeom) `_inside_wraps`' outcomes (forward only)
  phi_root: wp.array2d[float],  # (nworld, nwrapgeom) and roots
  # Out (zeroed):
  length_out: wp.array2d[float],  # (nworld, ntendon)
  J_out: wp.array3d[float],  # (nworld, ntendon, nv)
):
  """A site - geom - site stretch of a spatial tendon: wrapped (two straight segments to the tangent
  points and the arc between them) or, where the straight segment clears the geom, straight."""
  w, e = wp.tid()
  j = wrap_geom_adr[e]
  t = tendon_geom_adr[e]
  scale = wrap_pulley_scale[j]
  s0 = wrap_objid[j - 1]
  g = wrap_objid[j]
  s1 = wrap_objid[j + 1]
  x0 = site_xpos[w, s0]
  x1 = site_xpos[w, s1]
  sideid = int(wp.round(wrap_prm[j]))
  side = wp.vec3(0.0)
  if sideid >= 0:
    side = site_xpos[w, sideid]
  wlen, w0, w1 = _wrap(x0, x1, geom_xpos[w, g], geom_xmat[w, g], geom_size[w % geom_size.shape[0], g][0],
                       wrap_type[j], side, sideid >= 0, inside[w, e], phi_root[w, e])
  b0 = site_bodyid[s0]
  bg = geom_bodyid[g]
  b1 = site_bodyid[s1]
  r0 = com[w, body_rootid[b0]]
  rg = com[w, body_rootid[bg]]
  r1 = com[w, body_rootid[b1]]
  if wlen >= 0.0:
    d0 = w0 - x0
    d1 = x1 - w1
    l0 = wp.length(d0)
    l1 = wp.length(d1)
    wp.atomic_add(length_out, w, t, scale * (l0 + wlen + l1))
    v0 = wp.vec3(1.0, 0.0, 0.0)
    if l0 >= _MINVAL:
      v0 = d0 / l0
    v1 = wp.vec3(1.0, 0.0, 0.0)
    if l1 >= _MINVAL:
      v1 = d1 / l1
    # (a segment between two points of one body contributes nothing: vec . (omega x d) with d along vec)
    for i in range(cdof.shape[1]):
      cd = cdof[w, i]
      a0 = float(body_isdofancestor[b0, i])
      ag = float(body_isdofancestor[bg, i])
      a1 = float(body_isdofancestor[b1, i])
      v = _segment_jac(cd, a0, ag, x0 - r0, w0 - rg, v0) + _segment_jac(cd, ag, a1, w1 - rg, x1 - r1, v1)
      wp.atomic_add(J_out, w, t, i, scale * v)
  else:
    d = x1 - x0
    l = wp.length(d)
    wp.atomic_add(length_out, w, t, scale * l)
    vec = wp.vec3(1.0, 0.0, 0.0)
    if l >= _MINVAL:
      vec = d / l
    for i in range(cdof.shape[1]):
      v = _segment_jac(cdof[w, i], float(body_isdofancestor[b0, i]), float(body_isdofancestor[b1, i]), x0 - r0,
                       x1 - r1, vec)
      wp.atomic_add(J_out, w, t, i, scale * v)
