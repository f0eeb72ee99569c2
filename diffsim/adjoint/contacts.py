"""Contact rows of the analytic adjoint: the frozen contact set's constraint rows (`ContactRows`); their
geometry as a function of `qpos` is `contact_geometry.py`'s.

The rows are MJWarp's (`constraint._efc_contact_jac_dense`, `_efc_contact_update`), pyramidal cones
and frictionless contacts: the normal row (`condim` 1) or `2 (condim - 1)` pyramid edges
`J_n +- mu_i J_i` (tangent, torsional and rolling directions), each with `aref = -b J v - k imp pos`,
`D = 1 / R` from the contact's `solref`/`solimp` and the two bodies' `body_invweight0`, and force
`-D (J a - aref)` where `J a < aref` at the solver's acceleration (the Newton solver's quadratic
regime), 0 elsewhere. Their `J^T D J` joins the implicit function theorem's Hessian `M + J^T D J`.
Elliptic cones have a row per frame direction and couple a contact's rows (`cones.py`).
"""

from __future__ import annotations

import mujoco
import warp as wp

from mujoco_warp._src.types import vec5

from .cones import _elliptic_force, _elliptic_jtdj, _pair_invweight
from .contact_geometry import _contact_geometry, _contact_locals, _mesh_edge_points
from .contact_threads import contact_range, contact_threads
from .constraints import _one_sided_row
from .spatial import _MINVAL

_MINMU = float(mujoco.mjMINMU)

__all__ = ["ContactRows", "MAX_CONTACT_ROWS"]

MAX_CONTACT_ROWS = 10  # pyramid edges of a condim-6 contact


@wp.func
def _nrow(dim: int, elliptic: int) -> int:
  """A contact's rows: the normal (`condim` 1), its frame's directions (elliptic cones) or the
  pyramid's edges."""
  if dim == 1:
    return 1
  if elliptic != 0:
    return dim
  return 2 * (dim - 1)


@wp.kernel
def _contact_friction(
  nthread: int,
  nacon: wp.array[int],
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
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  for c in range(span[0], span[1]):
    if active[c] != 0:
      _friction_one(c, geom_priority, geom_friction, contact_geom, contact_worldid, friction_out)


@wp.func
def _friction_one(
  c: int,
  geom_priority: wp.array[int],
  geom_friction: wp.array2d[wp.vec3],
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  friction_out: wp.array[vec5],
):
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
  # MJWarp floors each coefficient at mjMINMU
  slide = wp.max(slide, _MINMU)
  spin = wp.max(spin, _MINMU)
  roll = wp.max(roll, _MINMU)
  friction_out[c] = vec5(slide, slide, spin, roll, roll)


@wp.kernel
def _contact_solparams(
  nthread: int,
  nacon: wp.array[int],
  # Model:
  geom_priority: wp.array[int],
  geom_solmix: wp.array2d[float],
  geom_solref: wp.array2d[wp.vec2],
  geom_solimp: wp.array2d[vec5],
  # Frozen:
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  active: wp.array[int],
  # Out:
  solref_out: wp.array[wp.vec2],  # (naconmax,)
  solimp_out: wp.array[vec5],
):
  """The contact's `solref` and `solimp` from its geoms' (MJWarp's `contact_material_params`: the
  higher priority's, else mixed by `solmix`; the smaller of two direct `solref`s), so that
  `geom_solref` and `geom_solimp` get their adjoints."""
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  for c in range(span[0], span[1]):
    if active[c] != 0:
      _solparams_one(c, geom_priority, geom_solmix, geom_solref, geom_solimp, contact_geom, contact_worldid,
                     solref_out, solimp_out)


@wp.func
def _solparams_one(
  c: int,
  geom_priority: wp.array[int],
  geom_solmix: wp.array2d[float],
  geom_solref: wp.array2d[wp.vec2],
  geom_solimp: wp.array2d[vec5],
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  solref_out: wp.array[wp.vec2],
  solimp_out: wp.array[vec5],
):
  g = contact_geom[c]
  w = contact_worldid[c]
  p1 = geom_priority[g[0]]
  p2 = geom_priority[g[1]]
  mix = float(0.5)
  if p1 > p2:
    mix = 1.0
  elif p2 > p1:
    mix = 0.0
  else:
    s1 = geom_solmix[w % geom_solmix.shape[0], g[0]]
    s2 = geom_solmix[w % geom_solmix.shape[0], g[1]]
    if s1 >= _MINVAL and s2 >= _MINVAL:
      mix = s1 / (s1 + s2)
    elif s1 < _MINVAL and s2 >= _MINVAL:
      mix = 0.0
    elif s1 >= _MINVAL and s2 < _MINVAL:
      mix = 1.0
  r1 = geom_solref[w % geom_solref.shape[0], g[0]]
  r2 = geom_solref[w % geom_solref.shape[0], g[1]]
  if r1[0] > 0.0 and r2[0] > 0.0:
    solref_out[c] = mix * r1 + (1.0 - mix) * r2
  else:
    solref_out[c] = wp.min(r1, r2)
  i1 = geom_solimp[w % geom_solimp.shape[0], g[0]]
  i2 = geom_solimp[w % geom_solimp.shape[0], g[1]]
  solimp_out[c] = mix * i1 + (1.0 - mix) * i2


@wp.kernel
def _contact_jacobian(
  nthread: int,
  nacon: wp.array[int],
  # Model:
  geom_bodyid: wp.array[int],
  body_rootid: wp.array[int],
  body_isdofancestor: wp.array2d[int],
  elliptic: int,
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
  """Row `r` of contact `c` (MJWarp's `_efc_contact_jac_dense`): pyramidal cones, the normal plus or
  minus `mu_i` times a tangent, torsional or rolling direction; elliptic cones, the frame's `r`-th
  direction (translational, then rotational)."""
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  for c in range(span[0], span[1]):
    if active[c] != 0:
      for r in range(_nrow(contact_dim[c], elliptic)):
        _jacobian_row(c, r, geom_bodyid, body_rootid, body_isdofancestor, elliptic, contact_geom, contact_worldid,
                      contact_dim, contact_friction, dofs, pos, frame, com, cdof, J_out)


@wp.func
def _jacobian_row(
  c: int,
  r: int,
  geom_bodyid: wp.array[int],
  body_rootid: wp.array[int],
  body_isdofancestor: wp.array2d[int],
  elliptic: int,
  contact_geom: wp.array[wp.vec2i],
  contact_worldid: wp.array[int],
  contact_dim: wp.array[int],
  contact_friction: wp.array[vec5],
  dofs: wp.array2d[int],
  pos: wp.array[wp.vec3],
  frame: wp.array[wp.mat33],
  com: wp.array2d[wp.vec3],
  cdof: wp.array2d[wp.spatial_vector],
  J_out: wp.array3d[float],
):
  dim = contact_dim[c]
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
  if elliptic != 0:
    # elliptic cones: the frame's directions, translational (normal, tangents), then rotational
    if r >= 3:
      lin_dir = wp.vec3(0.0)
      rot_dir = F[r - 3]
    else:
      lin_dir = F[r]
  elif dim > 1:
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
  nthread: int,
  nacon: wp.array[int],
  elliptic: int,
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
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  for c in range(span[0], span[1]):
    if active[c] != 0:
      w = contact_worldid[c]
      for r in range(_nrow(contact_dim[c], elliptic)):
        for k in range(dofs.shape[1]):
          i = dofs[c, k]
          if i >= 0:
            wp.atomic_add(Jv_out, c, r, J[c, r, k] * qvel[w, i])
            wp.atomic_add(Ja_out, c, r, J[c, r, k] * qacc[w, i])


@wp.kernel
def _contact_force(
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
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  for c in range(span[0], span[1]):
    if active[c] != 0:
      for r in range(_nrow(contact_dim[c], 0)):
        _pyramid_row(c, r, opt_timestep, refsafe, opt_impratio_invsqrt, body_invweight0, geom_bodyid, contact_geom,
                     contact_worldid, contact_dim, contact_friction, contact_solref, contact_solimp,
                     contact_includemargin, dist, Jv, Ja, force_out, D_out)


@wp.func
def _pyramid_row(
  c: int,
  r: int,
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
  contact_solimp: wp.array[vec5],
  contact_includemargin: wp.array[float],
  dist: wp.array[float],
  Jv: wp.array2d[float],
  Ja: wp.array2d[float],
  force_out: wp.array2d[float],
  D_out: wp.array2d[float],
):
  dim = contact_dim[c]
  w = contact_worldid[c]
  invweight = _pair_invweight(body_invweight0, geom_bodyid, contact_geom[c], w)
  if dim > 1:
    fri0 = contact_friction[c][0]
    ir = opt_impratio_invsqrt[w % opt_impratio_invsqrt.shape[0]]
    invweight = invweight * (1.0 + fri0 * fri0) * 2.0 * fri0 * fri0 * ir * ir
  fD = _one_sided_row(opt_timestep, refsafe, contact_solref[c], contact_solimp[c], dist[c] - contact_includemargin[c],
                      Jv[c, r], Ja[c, r], invweight)
  force_out[c, r] = fD[0]
  D_out[c, r] = fD[1]


@wp.kernel
def _rows_to_qfrc(
  nthread: int,
  nacon: wp.array[int],
  elliptic: int,
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
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  for c in range(span[0], span[1]):
    if active[c] != 0:
      w = contact_worldid[c]
      for r in range(_nrow(contact_dim[c], elliptic)):
        for k in range(dofs.shape[1]):
          i = dofs[c, k]
          if i >= 0:
            wp.atomic_add(qfrc_out, w, i, J[c, r, k] * force[c, r])


@wp.kernel(enable_backward=False)
def _rows_jtdj(
  nthread: int,
  nacon: wp.array[int],
  elliptic: int,
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
  t = wp.tid()
  span = contact_range(t, nthread, nacon, active.shape[0])
  n = dofs.shape[1]
  for c in range(span[0], span[1]):
    if active[c] == 0:
      continue
    w = contact_worldid[c]
    # rows past the contact's own are stale (J and D are reused across steps and contacts)
    for r in range(_nrow(contact_dim[c], elliptic)):
      d = D[c, r]
      if d == 0.0:
        continue
      for k in range(n):
        i = dofs[c, k]
        ji = d * J[c, r, k]
        if i >= 0 and ji != 0.0:
          for l in range(n):
            j = dofs[c, l]
            if j >= 0:
              wp.atomic_add(jtdj_out, w, i, j, ji * J[c, r, l])


@wp.kernel(enable_backward=False)
def _tile_contacts(
  nworld: int,
  copies: int,
  nacon: wp.array[int],  # (1,) the base's filled slots
  # In (the base's frozen contacts, the fields the step's rows and sensors read; not `dist` and
  # `type`, which only `collide` reads):
  pos: wp.array[wp.vec3],
  frame: wp.array[wp.mat33],
  includemargin: wp.array[float],
  friction: wp.array[vec5],
  solref: wp.array[wp.vec2],
  solreffriction: wp.array[wp.vec2],
  solimp: wp.array[vec5],
  dim: wp.array[int],
  geom: wp.array[wp.vec2i],
  worldid: wp.array[int],
  active: wp.array[int],
  mode: wp.array[int],
  radius: wp.array[wp.vec2],
  local1: wp.array[wp.vec3],
  local2: wp.array[wp.vec3],
  frame_local: wp.array[wp.mat33],
  axis1: wp.array[wp.vec3],
  axis2: wp.array[wp.vec3],
  tangent: wp.array[wp.vec3],
  tmode: wp.array[int],
  edge_a: wp.array[wp.vec3],
  edge_b: wp.array[wp.vec3],
  plane_p: wp.array[wp.vec3],
  plane_n: wp.array[wp.vec3],
  dofs: wp.array2d[int],
  # Out (the copies', slot c * nacon + i copy c of the base's slot i, in world c * nworld + w):
  nacon_out: wp.array[int],
  pos_out: wp.array[wp.vec3],
  frame_out: wp.array[wp.mat33],
  includemargin_out: wp.array[float],
  friction_out: wp.array[vec5],
  solref_out: wp.array[wp.vec2],
  solreffriction_out: wp.array[wp.vec2],
  solimp_out: wp.array[vec5],
  dim_out: wp.array[int],
  geom_out: wp.array[wp.vec2i],
  worldid_out: wp.array[int],
  active_out: wp.array[int],
  mode_out: wp.array[int],
  radius_out: wp.array[wp.vec2],
  local1_out: wp.array[wp.vec3],
  local2_out: wp.array[wp.vec3],
  frame_local_out: wp.array[wp.mat33],
  axis1_out: wp.array[wp.vec3],
  axis2_out: wp.array[wp.vec3],
  tangent_out: wp.array[wp.vec3],
  tmode_out: wp.array[int],
  edge_a_out: wp.array[wp.vec3],
  edge_b_out: wp.array[wp.vec3],
  plane_p_out: wp.array[wp.vec3],
  plane_n_out: wp.array[wp.vec3],
  dofs_out: wp.array2d[int],
):
  c, i = wp.tid()
  n = nacon[0]
  if c == 0 and i == 0:
    nacon_out[0] = copies * n
  if i >= n:
    return
  j = c * n + i
  pos_out[j] = pos[i]
  frame_out[j] = frame[i]
  includemargin_out[j] = includemargin[i]
  friction_out[j] = friction[i]
  solref_out[j] = solref[i]
  solreffriction_out[j] = solreffriction[i]
  solimp_out[j] = solimp[i]
  dim_out[j] = dim[i]
  geom_out[j] = geom[i]
  worldid_out[j] = worldid[i] + c * nworld
  active_out[j] = active[i]
  mode_out[j] = mode[i]
  radius_out[j] = radius[i]
  local1_out[j] = local1[i]
  local2_out[j] = local2[i]
  frame_local_out[j] = frame_local[i]
  axis1_out[j] = axis1[i]
  axis2_out[j] = axis2[i]
  tangent_out[j] = tangent[i]
  tmode_out[j] = tmode[i]
  edge_a_out[j] = edge_a[i]
  edge_b_out[j] = edge_b[i]
  plane_p_out[j] = plane_p[i]
  plane_n_out[j] = plane_n[i]
  for k in range(dofs.shape[1]):
    dofs_out[j, k] = dofs[i, k]


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
    self.meshes = int((s.mjm.geom_type == mujoco.mjtGeom.mjGEOM_MESH).sum()) >= 2  # mesh-mesh contacts possible
    z = lambda shape, dtype=float: wp.zeros(shape, dtype=dtype, device=s.device)
    self.active = z(nc, int)
    self.mode, self.radius = z(nc, int), z(nc, wp.vec2)
    self.local1, self.local2, self.frame_local = z(nc, wp.vec3), z(nc, wp.vec3), z(nc, wp.mat33)
    self.axis1, self.axis2 = z(nc, wp.vec3), z(nc, wp.vec3)
    self.tangent, self.tmode = z(nc, wp.vec3), z(nc, int)
    self.edge_a, self.edge_b, self.plane_p, self.plane_n = (z(nc, wp.vec3) for _ in range(4))
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
    # each contact kernel walks the filled slots `[0, nacon)`, not every slot (`contact_threads.py`)
    self.nthread = T = contact_threads(nc, s.nworld, s.device)
    spread = [T, d.nacon]
    friction, solref, solimp = c.friction, c.solref, c.solimp
    if s.mjm.npair == 0:  # explicit pairs set their own (and geom_friction, _solref, _solimp Params are refused)
      friction, solref, solimp = arr(nc, vec5), arr(nc, wp.vec2), arr(nc, vec5)
      program.launch("step", _contact_friction, T, [*spread, m.geom_priority, m.geom_friction, *frozen, self.active],
                     [friction])
      program.launch("step", _contact_solparams, T,
                     [*spread, m.geom_priority, m.geom_solmix, m.geom_solref, m.geom_solimp, *frozen, self.active],
                     [solref, solimp])
    program.launch("step", _contact_geometry, T,
                   [*spread, m.geom_bodyid, *frozen, self.active, self.mode, self.local1, self.local2, self.radius,
                    self.frame_local, self.axis1, self.axis2, self.tangent, self.tmode, self.edge_a, self.edge_b,
                    self.plane_p, self.plane_n, xpos, xmat],
                   [pos, frame, dist])
    ell = self.elliptic = int(s.mjm.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC)
    program.launch("step", _contact_jacobian, T,
                   [*spread, m.geom_bodyid, m.body_rootid, m.body_isdofancestor, ell, *frozen, c.dim, friction,
                    self.active, self.dofs, pos, frame, com, cdof], [self.J])
    program.launch("step", _row_products, T,
                   [*spread, ell, c.worldid, c.dim, self.active, self.dofs, self.J, qvel, qacc], [Jv, Ja])
    h = float(s.mjm.opt.timestep)
    self.friction = friction  # the cones' and the acceleration sensors' (pyramid edges to contact forces)
    if ell:
      self.zone, self.u, self.cone = z(nc, int), arr(rows, grad=False), arr(nc, wp.vec4, grad=False)
      program.launch("step", _elliptic_force, T,
                     [*spread, h, refsafe, m.opt.impratio_invsqrt, m.body_invweight0, m.geom_bodyid, *frozen, c.dim,
                      friction, solref, c.solreffriction, solimp, c.includemargin, self.active, dist, Jv, Ja],
                     [self.force, self.zone, self.D, self.u, self.cone])
    else:
      program.launch("step", _contact_force, T,
                     [*spread, h, refsafe, m.opt.impratio_invsqrt, m.body_invweight0, m.geom_bodyid, *frozen, c.dim,
                      friction, solref, solimp, c.includemargin, self.active, dist, Jv, Ja], [self.force, self.D])
    program.launch("step", _rows_to_qfrc, T,
                   [*spread, ell, c.worldid, c.dim, self.active, self.dofs, self.J, self.force], [qfrc_constraint])
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
    wp.launch(_contact_locals, dim=self.nthread, device=s.device,
              inputs=[self.nthread, s.model.geom_type, s.model.geom_bodyid, s.model.geom_size, s.model.geom_dataid,
                      s.model.body_isdofancestor, s.model.mesh_polyadr, s.model.mesh_polynum,
                      s.model.mesh_polynormal, d.nacon, d.xpos, d.xmat, d.geom_xpos, d.geom_xmat, c.dist,
                      c.pos, c.frame, c.includemargin, c.geom, c.worldid, c.type],
              outputs=[self.active, self.mode, self.local1, self.local2, self.radius, self.frame_local, self.axis1,
                       self.axis2, self.tangent, self.tmode, self.dofs])
    if self.meshes:
      m = s.model
      wp.launch(_mesh_edge_points, dim=self.nc, device=s.device,
                inputs=[m.geom_type, m.geom_bodyid, m.geom_dataid, m.mesh_vertadr, m.mesh_vertnum, m.mesh_vert,
                        m.mesh_polyadr, m.mesh_polynum, m.mesh_polyvertadr, m.mesh_polyvertnum, m.mesh_polyvert,
                        m.mesh_polynormal, d.xpos, d.xmat, d.geom_xpos, d.geom_xmat, c.dist, c.pos, c.frame, c.geom,
                        c.worldid, self.active, self.mode],
                outputs=[self.edge_a, self.edge_b, self.plane_p, self.plane_n])

  def tile(self, base: ContactRows, copies: int) -> None:
    """`collide`'s frozen contacts taken from `base`'s instead (a `TiledReplay`: this scene's worlds
    are `copies` copies of `base`'s, at the same states): copy c of base slot i in slot `c * nacon + i`,
    in world `c * nworld + w`. One collision of `base`'s worlds, not one per copy."""
    b, cb, c = base, base.data.contact, self.data.contact
    frozen = [b.active, b.mode, b.radius, b.local1, b.local2, b.frame_local, b.axis1, b.axis2, b.tangent, b.tmode,
              b.edge_a, b.edge_b, b.plane_p, b.plane_n, b.dofs]
    mine = [self.active, self.mode, self.radius, self.local1, self.local2, self.frame_local, self.axis1, self.axis2,
            self.tangent, self.tmode, self.edge_a, self.edge_b, self.plane_p, self.plane_n, self.dofs]
    fields = ("pos", "frame", "includemargin", "friction", "solref", "solreffriction", "solimp", "dim", "geom",
              "worldid")
    wp.launch(_tile_contacts, dim=(copies, b.nc), device=self.scene.device,
              inputs=[b.scene.nworld, int(copies), b.data.nacon] + [getattr(cb, f) for f in fields] + frozen,
              outputs=[self.data.nacon] + [getattr(c, f) for f in fields] + mine)

  def hessian(self) -> None:
    """Adds the quadratic rows' `J^T D J` to `jtdj` (after the program's "step" segment ran)."""
    c = self.data.contact
    if self.elliptic:
      wp.launch(_elliptic_jtdj, dim=self.nthread, device=self.scene.device,
                inputs=[self.nthread, self.data.nacon, c.worldid, c.dim, self.friction, self.active, self.dofs, self.J,
                        self.zone, self.D, self.u, self.cone], outputs=[self.jtdj])
    else:
      wp.launch(_rows_jtdj, dim=self.nthread, device=self.scene.device,
                inputs=[self.nthread, self.data.nacon, 0, c.worldid, c.dim, self.active, self.dofs, self.J, self.D],
                outputs=[self.jtdj])

