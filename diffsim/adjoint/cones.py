"""Elliptic friction cones of the analytic adjoint's contact rows: the Newton solver's three zones and
the cone's Hessian block (MJWarp's `constraint._efc_contact_update` and `solver._eval_constraint`,
elliptic branch).

An elliptic contact of `condim` `d` has `d` rows on the contact frame's directions (normal, tangents,
torsion, rolling: no pyramid edges). With `jar_r = J_r a - aref_r` at the solver's acceleration,
`mu = friction[0] / sqrt(impratio)`, `N = mu jar_0`, `u_j = friction[j - 1] jar_j` and `T = |u|`:

  top     `N >= mu T`:      no force (the contact separates);
  bottom  `mu N + T <= 0`:  every row quadratic, `f_r = -D_r jar_r` (inside the cone);
  middle  otherwise:        `f = -grad c` of `c = dm (N - mu T)^2 / 2`, `dm = D_0 / (mu^2 (1 + mu^2))`
                            (the force projected onto the cone's surface).

The constraint solve's Hessian gains `J^T H J` per contact, `H = diag(D_r)` in the bottom zone and the
cost's Hessian `dm (g g^T - mu (N - mu T) d^2 T / d jar^2)` in the middle, `g = d (N - mu T) / d jar`.
A friction row's `D_r` is the normal's times `friction[r - 1]^2 impratio / friction[0]^2`, its
reference `-b v` with `b` from `solreffriction` where set (else `solref`).
"""

from __future__ import annotations

import warp as wp

from mujoco_warp._src.types import vec5

from .constraints import _kbimp, _row_R
from .contact_threads import contact_range

__all__ = ["ELLIPTIC_TOP", "ELLIPTIC_BOTTOM", "ELLIPTIC_MIDDLE"]

ELLIPTIC_TOP, ELLIPTIC_BOTTOM, ELLIPTIC_MIDDLE = 0, 1, 2


@wp.func
def _u(dim: int, j: int, friction: vec5, Ja: float, Jv: float, b: float) -> float:
  """`friction[j - 1] (J_j a - aref_j)` of friction row `j` (0 past the contact's `condim`)."""
  if j >= dim:
    return 0.0
  return friction[j - 1] * (Ja + b * Jv)


@wp.func
def _pair_invweight(body_invweight0: wp.array2d[wp.vec2], geom_bodyid: wp.array[int], geoms: wp.vec2i,
                    w: int) -> float:
  """A contact's inverse weight: its two bodies' translational `body_invweight0`."""
  iw = w % body_invweight0.shape[0]
  return body_invweight0[iw, geom_bodyid[geoms[0]]][0] + body_invweight0[iw, geom_bodyid[geoms[1]]][0]


@wp.kernel
def _elliptic_force(
  nthread: int,
  nacon: wp.array[int],
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
  contact_solreffriction: wp.array[wp.vec2],
  contact_solimp: wp.array[vec5],
  contact_includemargin: wp.array[float],
  active: wp.array[int],
  # In:
  dist: wp.array[float],
  Jv: wp.array2d[float],  # (naconmax, MAX_CONTACT_ROWS) J v of the contact's rows
  Ja: wp.array2d[float],  # J a at the solver's acceleration
  # Out:
  force_out: wp.array2d[float],  # (naconmax, MAX_CONTACT_ROWS)
  zone_out: wp.array[int],  # (naconmax,) ELLIPTIC_TOP, _BOTTOM or _MIDDLE
  D_out: wp.array2d[float],  # (naconmax, MAX_CONTACT_ROWS) the rows' D (bottom zone's Hessian)
  u_out: wp.array2d[float],  # (naconmax, MAX_CONTACT_ROWS) u_j (middle zone's Hessian)
  cone_out: wp.array[wp.vec4],  # (naconmax,) dm, mu, N - mu T, T
):
  """The forces of an elliptic contact's rows at the solver's acceleration, and what its Hessian
  block needs (`_elliptic_jtdj`)."""
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  for c in range(span[0], span[1]):
    if active[c] != 0:
      _elliptic_one(c, opt_timestep, refsafe, opt_impratio_invsqrt, body_invweight0, geom_bodyid, contact_geom,
                    contact_worldid, contact_dim, contact_friction, contact_solref, contact_solreffriction,
                    contact_solimp, contact_includemargin, dist, Jv, Ja, force_out, zone_out, D_out, u_out, cone_out)


@wp.func
def _elliptic_one(
  c: int,
  opt_timestep: float,
  refsafe: int,
  opt_impratio_invsqrt: wp.array[float],
  body_invweight0: wp.array2d[wp.vec2],
  geom_bodyid: wp.array[int],
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  contact_dim: wp.array[int],
  contact_friction: wp.array[vec5],
  contact_solref: wp.array[wp.vec2],
  contact_solreffriction: wp.array[wp.vec2],
  contact_solimp: wp.array[vec5],
  contact_includemargin: wp.array[float],
  dist: wp.array[float],
  Jv: wp.array2d[float],
  Ja: wp.array2d[float],
  force_out: wp.array2d[float],
  zone_out: wp.array[int],
  D_out: wp.array2d[float],
  u_out: wp.array2d[float],
  cone_out: wp.array[wp.vec4],
):
  dim = contact_dim[c]
  w = contact_worldid[c]
  invweight = _pair_invweight(body_invweight0, geom_bodyid, contact_geom[c], w)
  pos = dist[c] - contact_includemargin[c]
  solimp = contact_solimp[c]
  kbi = _kbimp(opt_timestep, refsafe, contact_solref[c], solimp, pos)
  imp = kbi[2]
  D0 = 1.0 / _row_R(invweight, imp)
  jar0 = Ja[c, 0] - (-kbi[0] * imp * pos - kbi[1] * Jv[c, 0])
  D_out[c, 0] = D0
  if dim == 1:  # frictionless: one quadratic row where it pushes
    zone_out[c] = ELLIPTIC_TOP
    force_out[c, 0] = 0.0
    if jar0 < 0.0:
      zone_out[c] = ELLIPTIC_BOTTOM
      force_out[c, 0] = -D0 * jar0
  else:
    fr = contact_friction[c]
    ir = opt_impratio_invsqrt[w % opt_impratio_invsqrt.shape[0]]
    ref = contact_solref[c]
    srf = contact_solreffriction[c]
    if srf[0] != 0.0 or srf[1] != 0.0:
      ref = srf
    b = _kbimp(opt_timestep, refsafe, ref, solimp, pos)[1]
    u1 = _u(dim, 1, fr, Ja[c, 1], Jv[c, 1], b)
    u2 = _u(dim, 2, fr, Ja[c, 2], Jv[c, 2], b)
    u3 = _u(dim, 3, fr, Ja[c, 3], Jv[c, 3], b)
    u4 = _u(dim, 4, fr, Ja[c, 4], Jv[c, 4], b)
    u5 = _u(dim, 5, fr, Ja[c, 5], Jv[c, 5], b)
    u_out[c, 1] = u1
    u_out[c, 2] = u2
    u_out[c, 3] = u3
    u_out[c, 4] = u4
    u_out[c, 5] = u5
    TT = u1 * u1 + u2 * u2 + u3 * u3 + u4 * u4 + u5 * u5
    T = float(0.0)
    if TT > 0.0:
      T = wp.sqrt(TT)
    mu = fr[0] * ir
    N = mu * jar0
    # friction rows' D: the normal's over impratio (1 / ir^2), scaled by friction[j - 1]^2 / friction[0]^2
    scale = 1.0 / (ir * ir * fr[0] * fr[0])
    for j in range(1, 6):
      D_out[c, j] = D0 * scale * fr[j - 1] * fr[j - 1]
    if N >= mu * T or (T <= 0.0 and N >= 0.0):
      zone_out[c] = ELLIPTIC_TOP
      for r in range(6):
        force_out[c, r] = 0.0
    elif mu * N + T <= 0.0 or (T <= 0.0 and N < 0.0):
      zone_out[c] = ELLIPTIC_BOTTOM
      force_out[c, 0] = -D0 * jar0
      # jar_j = u_j / friction[j - 1]: f_j = -D_j jar_j = -D0 scale friction[j - 1] u_j
      force_out[c, 1] = -D0 * scale * fr[0] * u1
      force_out[c, 2] = -D0 * scale * fr[1] * u2
      force_out[c, 3] = -D0 * scale * fr[2] * u3
      force_out[c, 4] = -D0 * scale * fr[3] * u4
      force_out[c, 5] = -D0 * scale * fr[4] * u5
    else:
      zone_out[c] = ELLIPTIC_MIDDLE
      dm = D0 / (mu * mu * (1.0 + mu * mu))
      nmt = N - mu * T
      fn = -dm * nmt * mu
      force_out[c, 0] = fn
      force_out[c, 1] = -(fn / T) * u1 * fr[0]
      force_out[c, 2] = -(fn / T) * u2 * fr[1]
      force_out[c, 3] = -(fn / T) * u3 * fr[2]
      force_out[c, 4] = -(fn / T) * u4 * fr[3]
      force_out[c, 5] = -(fn / T) * u5 * fr[4]
      cone_out[c] = wp.vec4(dm, mu, nmt, T)


@wp.func
def _cone_hessian(r: int, s: int, zone: int, D: float, fr: vec5, ur: float, us: float, cone: wp.vec4) -> float:
  """Entry `(r, s)` of an elliptic contact's Hessian block `d (-f) / d jar`."""
  if zone == ELLIPTIC_BOTTOM:
    if r == s:
      return D
    return 0.0
  if zone != ELLIPTIC_MIDDLE:
    return 0.0
  dm = cone[0]
  mu = cone[1]
  nmt = cone[2]
  T = cone[3]
  # g = d (N - mu T) / d jar: mu on the normal, -mu friction[j - 1] u_j / T on friction row j
  gr = mu
  if r > 0:
    gr = -mu * fr[r - 1] * ur / T
  gs = mu
  if s > 0:
    gs = -mu * fr[s - 1] * us / T
  h = dm * gr * gs
  if r > 0 and s > 0:
    # d^2 T / d jar_r d jar_s = friction_r friction_s (delta_rs - u_r u_s / T^2) / T
    d2T = -ur * us / (T * T)
    if r == s:
      d2T += 1.0
    h -= dm * mu * nmt * fr[r - 1] * fr[s - 1] * d2T / T
  return h


@wp.kernel(enable_backward=False)
def _elliptic_jtdj(
  nthread: int,
  nacon: wp.array[int],
  # Frozen:
  contact_worldid: wp.array[int],
  contact_dim: wp.array[int],
  contact_friction: wp.array[vec5],
  active: wp.array[int],
  dofs: wp.array2d[int],
  # In:
  J: wp.array3d[float],  # (naconmax, MAX_CONTACT_ROWS, ncdof)
  zone: wp.array[int],
  D: wp.array2d[float],
  u: wp.array2d[float],
  cone: wp.array[wp.vec4],
  # Out:
  jtdj_out: wp.array3d[float],  # (nworld, nv, nv) += J_r^T H_rs J_s
):
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  n = dofs.shape[1]
  for c in range(span[0], span[1]):
    if active[c] == 0:
      continue
    dim = contact_dim[c]
    w = contact_worldid[c]
    for r in range(dim):
      for s in range(dim):
        h = _cone_hessian(r, s, zone[c], D[c, r], contact_friction[c], u[c, r], u[c, s], cone[c])
        if h == 0.0:
          continue
        for k in range(n):
          i = dofs[c, k]
          ji = h * J[c, r, k]
          if i >= 0 and ji != 0.0:
            for l in range(n):
              j = dofs[c, l]
              if j >= 0:
                wp.atomic_add(jtdj_out, w, i, j, ji * J[c, s, l])
