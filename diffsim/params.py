"""Named, bounded model parameters mapped to per-world MJWarp model fields.

`Param("body_mass", "pole")` names the field and the element (a body, joint, geom, actuator, site
or tendon name; an index; a list; or `None` for all). Its `value` is a `wp.array2d[float]` of shape
`(nworld, dim)` with gradients, one row per world. A rollout writes each world's value (and, when
differentiating, each perturbation lane's value) into rows of the MJWarp field, which is batched
with a leading world axis and read as `field[worldid % field.shape[0]]`.

Fields that MuJoCo derives constants from (`body_mass`, `body_inertia`, `body_ipos`,
`dof_armature`, ...) trigger `mujoco_warp.set_const`, as `mj_setConst` does in MuJoCo C, so the
derived `body_subtreemass`, `dof_invweight0`, `body_invweight0`, `actuator_acc0` stay consistent.
Of those, an MJWarp step reads `body_subtreemass` (centres of mass) and the invweights (the softness
of constraint rows) only: on a model that can make no constraint row (`can_make_constraint_rows`)
the subtree masses are refreshed, by one kernel that a graph may capture, and `set_const`, whose
eager launches cost more than a small model's rollout step, is skipped.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Sequence

import mujoco
import numpy as np
import warp as wp

from . import joints
from .mjmodel import UnknownNameError, can_make_constraint_rows, name2id

__all__ = ["Param", "ParamLayout", "FIELD_DOCS"]

OBJECT_TYPES = {
  "nbody": mujoco.mjtObj.mjOBJ_BODY,
  "njnt": mujoco.mjtObj.mjOBJ_JOINT,
  "nv": mujoco.mjtObj.mjOBJ_JOINT,  # dof fields are named by their joint
  "ngeom": mujoco.mjtObj.mjOBJ_GEOM,
  "nsite": mujoco.mjtObj.mjOBJ_SITE,
  "nactuator": mujoco.mjtObj.mjOBJ_ACTUATOR,
  "nu": mujoco.mjtObj.mjOBJ_ACTUATOR,
  "ntendon": mujoco.mjtObj.mjOBJ_TENDON,
  "npair": mujoco.mjtObj.mjOBJ_PAIR,
}

# Fields whose change requires recomputing constants derived at qpos0 (mj_setConst's inertia group).
_INERTIAL = {"body_mass", "body_inertia", "body_ipos", "dof_armature", "tendon_armature", "actuator_armature"}
# Derived fields that set_const(INERT0) writes, plus body_subtreemass (from body_mass).
_DERIVED = ("body_subtreemass", "dof_invweight0", "body_invweight0", "tendon_invweight0", "actuator_acc0")
# Fields that cannot be parameters: derived ones, and those whose derived constants MJWarp recomputes
# only at qpos0 kinematics (KIN0) or in static bounding volumes.
_BLOCKED = set(_DERIVED) | {
  "qpos0", "body_pos", "body_quat", "body_iquat", "geom_size", "geom_aabb", "geom_rbound", "eq_data",
  "tendon_length0", "opt.timestep", "opt.impratio_invsqrt", "opt.tolerance", "opt.ls_tolerance",
}
# Default components of vector fields: MuJoCo's usual meaning of "the" parameter.
_DEFAULT_COMPONENTS = {
  "geom_friction": [0],  # sliding friction
  "actuator_gainprm": [0],  # gain (kp of a position servo)
  "actuator_dynprm": [0],  # time constant
  "actuator_biasprm": [1, 2],  # -kp, -kv
  "pair_friction": [0],
}
# Quantities that must stay positive get a positive lower bound by default.
POSITIVE_FIELDS = {"body_mass", "body_inertia", "dof_armature", "dof_damping", "dof_frictionloss", "jnt_stiffness",
             "geom_friction", "actuator_gainprm", "tendon_stiffness", "tendon_damping", "tendon_armature",
             "opt.density", "opt.viscosity"}

FIELD_DOCS = """Supported parameter fields: any MJWarp Model field with a world axis ("*" in its array spec)
whose element is a body, joint (dof fields are named by joint), geom, site, actuator, tendon or pair,
and the per-world options opt.gravity, opt.wind, opt.magnetic, opt.density, opt.viscosity. Examples:
body_mass, body_inertia, body_ipos, dof_damping, dof_armature, dof_frictionloss, jnt_stiffness,
actuator_gainprm, actuator_biasprm, geom_friction, opt.gravity."""


def _field_spec(field: str):
  """(dtype, element size name or None, width) of an MJWarp Model field with a world axis."""
  from mujoco_warp._src import types

  if field.startswith("opt."):
    cls, name = types.Option, field[4:]
  else:
    cls, name = types.Model, field
  fields = {f.name: f.type for f in dataclasses.fields(cls)}
  if name not in fields:
    raise UnknownNameError(f"unknown parameter field {field!r}. {FIELD_DOCS}")
  spec = fields[name]
  shape = getattr(spec, "shape", None)
  if not shape or shape[0] != "*" or field in _BLOCKED:
    raise ValueError(
      f"parameter field {field!r} cannot be batched per world by MJWarp"
      + (" (MJWarp derives it, or derives constants from it that diffsim cannot recompute)" if field in _BLOCKED
         else " (its array has no leading world axis)")
      + f". {FIELD_DOCS}")
  dtype = spec.dtype
  if dtype in (wp.float32, float):
    width = 1
  elif wp.types.type_is_vector(dtype) and dtype._wp_scalar_type_ in (wp.float32,):
    width = dtype._length_
  else:
    raise ValueError(f"parameter field {field!r} has dtype {dtype.__name__}, which diffsim cannot perturb")
  if len(shape) == 1:
    return dtype, None, width
  if len(shape) != 2 or shape[1] not in OBJECT_TYPES:
    raise ValueError(f"parameter field {field!r} has shape {shape}, which diffsim does not support. {FIELD_DOCS}")
  return dtype, shape[1], width


def _host_row(scene, field: str, width: int) -> np.ndarray:
  """The MJCF value of a field, `(nelem, width)`: float64 from `mjm` where MuJoCo has the field,
  else MJWarp's float32 row."""
  host = getattr(scene.mjm.opt, field[4:], None) if field.startswith("opt.") else getattr(scene.mjm, field, None)
  device = model_field(scene.model, field).numpy()[0].reshape(-1, width)
  if isinstance(host, np.ndarray) and host.size == device.size:
    return np.asarray(host, dtype=np.float64).reshape(-1, width)
  return device.astype(np.float64)


def model_field(model, field: str) -> wp.array:
  if field.startswith("opt."):
    return getattr(model.opt, field[4:])
  return getattr(model, field)


def set_model_field(model, field: str, arr: wp.array) -> None:
  if field.startswith("opt."):
    setattr(model.opt, field[4:], arr)
  else:
    setattr(model, field, arr)


class Param:
  """A named, bounded model parameter with one value per world.

  Args:
    field: MJWarp model field, e.g. `"body_mass"`, `"dof_damping"`, `"opt.gravity"`
      (see `FIELD_DOCS`); `"body_mass:pole"` is also accepted.
    element: element name, index, list of them, or `None` for all elements. Dof fields
      (`dof_*`) take joint names; a ball joint then has 3 values, a free joint 6.
    components: components of vector fields, e.g. `[0]` for sliding friction (default
      per field: `geom_friction` [0], `actuator_gainprm` [0], `actuator_biasprm` [1, 2], else all).
    lower, upper: bounds (scalars or `(dim,)`); default `(0, inf)` for quantities that must stay
      positive, else `(-inf, inf)`.
    name: label used in results and files (default `field:element`).

  After the parameter is first used with a scene, `value` is a `wp.array2d[float]` of shape
  `(nworld, dim)` (requires grad), initialised with the MJCF value in every world; `nominal`
  `(dim,)` float64 is that MJCF value. `value.grad` holds d(loss)/d(value) after `tape.backward`.

  A position actuator (`biasprm[1] == -gainprm[0]`) keeps its servo consistent: changing its
  gain (kp) also sets `biasprm[1] = -kp`, as MuJoCo's `<position kp=...>` does.
  """

  def __init__(self, field: str, element=None, *, components: Sequence[int] | None = None,
               lower=None, upper=None, name: str | None = None):
    if element is None and ":" in field:
      field, element = field.split(":", 1)
    self.field = field
    self.element = element
    self.dtype, self.element_size, self.width = _field_spec(field)
    if components is None:
      components = _DEFAULT_COMPONENTS.get(field, list(range(self.width)))
    components = [int(c) for c in np.atleast_1d(components)]
    bad = [c for c in components if not 0 <= c < self.width]
    if bad:
      raise ValueError(f"components {bad} out of range for {field!r}, which has {self.width} per element")
    self.components = components
    self.bounds = (lower, upper)  # as given; None: the field's default (see `resolved_bounds`)
    self.name = name or (field if element is None else f"{field}:{element}")
    self.scene = None
    self.value: wp.array | None = None
    self.nominal: np.ndarray | None = None
    self.lower: np.ndarray | None = None
    self.upper: np.ndarray | None = None
    self.elements: list[int] = []
    self.tie_bias: np.ndarray | None = None

  @property
  def inertial(self) -> bool:
    return self.field in _INERTIAL

  @property
  def dim(self) -> int:
    return len(self.elements) * len(self.components)

  def __repr__(self) -> str:
    return f"Param({self.name!r}, dim={self.dim if self.scene else '?'})"

  # -- binding to a scene -------------------------------------------------------------------------

  def resolve_elements(self, model) -> list[int]:
    """Element ids (dof ids for dof fields) of this parameter in `model`, a `Scene` or an `MjModel`."""
    mjm = getattr(model, "mjm", model)
    if self.element_size is None:
      if self.element is not None:
        raise ValueError(f"{self.field!r} is a per-world option with no elements; pass element=None")
      return [0]
    objtype = OBJECT_TYPES[self.element_size]
    count = {"nbody": mjm.nbody, "njnt": mjm.njnt, "nv": mjm.njnt, "ngeom": mjm.ngeom, "nsite": mjm.nsite,
             "nactuator": mjm.nu, "nu": mjm.nu, "ntendon": mjm.ntendon, "npair": mjm.npair}[self.element_size]
    items = list(range(count)) if self.element is None else list(np.atleast_1d(self.element))
    ids = []
    for it in items:
      if isinstance(it, (str, np.str_)):
        i = name2id(mjm, objtype, str(it))
      else:
        i = int(it)
        if not 0 <= i < count:
          raise IndexError(f"{self.field!r}: element index {i} out of range [0, {count})")
      ids.append(i)
    if self.element_size == "nv":  # joint ids to dof ids
      dofs = []
      for j in ids:
        adr = mjm.jnt_dofadr[j]
        ndof = joints.DOF_WIDTH[int(mjm.jnt_type[j])]
        dofs.extend(range(adr, adr + ndof))
      ids = dofs
    if not ids:
      raise ValueError(f"{self.name!r} selects no elements in this model")
    return ids

  def resolved_bounds(self) -> tuple:
    """`(lower, upper)` as given, with the defaults filled in: `(0, inf)` for quantities that must
    stay positive (`POSITIVE_FIELDS`), else `(-inf, inf)`. Scalars or `(dim,)` array-likes."""
    lo, hi = self.bounds
    if lo is None:
      lo = 0.0 if self.field in POSITIVE_FIELDS else -np.inf
    return lo, (np.inf if hi is None else hi)

  def bind(self, scene) -> "Param":
    """Resolves names against `scene` and allocates `value` `(nworld, dim)`; idempotent."""
    if self.scene is scene:
      return self
    if self.scene is not None and (self.scene.nworld != scene.nworld or self.scene.mjm is not scene.mjm):
      raise ValueError(f"{self.name!r} is bound to another scene; make a new Param for this one")
    self.elements = self.resolve_elements(scene)
    row = _host_row(scene, self.field, self.width)
    nominal = np.array([row[e, c] for e in self.elements for c in self.components], dtype=np.float64)
    lo, hi = self.resolved_bounds()
    self.lower = np.broadcast_to(np.asarray(lo, float), nominal.shape).copy()
    self.upper = np.broadcast_to(np.asarray(hi, float), nominal.shape).copy()
    if np.any(self.lower > self.upper):
      raise ValueError(f"{self.name!r}: lower bound above upper bound ({self.lower} > {self.upper})")
    if np.any((nominal < self.lower) | (nominal > self.upper)):
      raise ValueError(f"{self.name!r}: MJCF value {nominal} lies outside the bounds [{self.lower}, {self.upper}]")
    # position servos: gain kp also sets biasprm[1] = -kp
    self.tie_bias = None
    if self.field == "actuator_gainprm" and 0 in self.components:
      bias = scene.mjm.actuator_biasprm
      tie = np.array([e for e in self.elements if bias[e][1] != 0.0 and np.isclose(bias[e][1], -row[e, 0])])
      self.tie_bias = tie if tie.size else None
    self.nominal = nominal
    self.value = wp.array(np.tile(nominal.astype(np.float32), (scene.nworld, 1)), dtype=float,
                          device=scene.device, requires_grad=True)
    self.scene = scene
    return self

  def assign(self, values) -> None:
    """Sets the value in every world: `values` broadcasts to `(nworld, dim)`."""
    v = np.broadcast_to(np.asarray(values, dtype=np.float32), self.value.shape)
    if not np.all(np.isfinite(v)):
      raise ValueError(f"{self.name!r}: values must be finite")
    self.value.assign(v)

  def numpy(self) -> np.ndarray:
    """Current value, `(nworld, dim)` float32 (a host copy, also on the CPU, where `wp.array.numpy()`
    is a view)."""
    return self.value.numpy().copy()


@wp.kernel
def _write_param_rows(
  # In:
  nworld: int,
  value: wp.array2d[float],  # (nworld, dim)
  cols: wp.array[int],  # (dim,) column in the flat field view
  scale: float,
  lane0: int,  # lane of this parameter's first coordinate, -1: no perturbation lanes
  central: int,
  eps: float,
  # Out:
  field_out: wp.array2d[float],  # (nlane * nworld, ncol)
  h_out: wp.array2d[float],  # (nworld, dim) realized step
):
  lane, w, i = wp.tid()
  v = value[w, i]
  col = cols[i]
  if col < 0:
    return
  if lane0 >= 0:
    # relative step, with a floor for values at or near zero
    h = eps * wp.max(wp.abs(v), 0.01)
    vp = v + h
    vm = v - h
    if central == 0:
      vm = v
    if lane == 0:
      h_out[w, i] = (vp - vm) * wp.where(central != 0, 0.5, 1.0)
    step = wp.where(central != 0, 2, 1)
    rel = lane - lane0 - step * i
    if rel >= 0 and rel < step:
      if rel == 0:
        v = vp
      else:
        v = vm
  field_out[lane * nworld + w, col] = scale * v


@wp.kernel
def _subtreemass(
  body_subtreenum: wp.array[int],
  body_mass: wp.array2d[float],
  body_subtreemass_out: wp.array2d[float],
):
  worldid, bodyid = wp.tid()
  mass = float(0.0)
  for j in range(bodyid, bodyid + body_subtreenum[bodyid]):
    mass += body_mass[worldid % body_mass.shape[0], j]
  body_subtreemass_out[worldid, bodyid] = mass


def _rows(arr: wp.array) -> wp.array:
  """Float view `(batch, n)` of a contiguous float32 field array of any element type (no copy)."""
  n = int(np.prod(arr.shape[1:])) * (wp.types.type_size_in_bytes(arr.dtype) // 4)
  return wp.array(ptr=arr.ptr, shape=(arr.shape[0], n), dtype=float, device=arr.device, copy=False)


@wp.kernel
def _tile_row(
  # In:
  row: wp.array2d[float],  # (1, n)
  # Out:
  rows_out: wp.array2d[float],  # (batch, n)
):
  r, c = wp.tid()
  rows_out[r, c] = row[0, c]


def flat_rows(arr: wp.array, width: int) -> wp.array:
  """Float view `(batch, nelem * width)` of a contiguous field array (no copy)."""
  batch = arr.shape[0]
  ncol = (arr.shape[1] if arr.ndim > 1 else 1) * width
  return wp.array(ptr=arr.ptr, shape=(batch, ncol), dtype=float, device=arr.device, copy=False)


@dataclasses.dataclass
class ModelRows:
  """Which model fields of one scene hold per-world (and per-lane) rows, and what they held.

  MJWarp reads a batched field as `field[worldid % field.shape[0]]`; parameters tile their fields to
  `batch` rows (worlds times lanes). Owned by this module: one per scene, from `model_rows(scene)`.

  Attributes:
    batch: rows of every batched field.
    nominal: the MJCF row of each batched field, `(1, n)` on the host.
    nominal_device: the same on the device, `(1, n)` floats, to restore it inside a graph.
    applied: parameter name -> `Param` currently written into the model.
    needs_set_const: derived constants (subtree mass, invweight0, ...) are stale.
  """

  batch: int
  nominal: dict = dataclasses.field(default_factory=dict)
  nominal_device: dict = dataclasses.field(default_factory=dict)
  applied: dict = dataclasses.field(default_factory=dict)
  needs_set_const: bool = False


def model_rows(scene) -> ModelRows:
  """The `ModelRows` of `scene` (made on first use: every field still has its one MJCF row)."""
  rows = scene.memo.get("model_rows")
  if rows is None:
    rows = scene.memo["model_rows"] = ModelRows(batch=scene.nworld)
  return rows


class ParamLayout:
  """The flat parameter vector `theta` `(nworld, nparam)` of a list of bound `Param`s.

  Attributes:
    params: the parameters, in order.
    offsets: start of each parameter in `theta`.
    nparam: total number of scalar parameters.
    inertial: whether any parameter needs derived constants recomputed.
    eager_constants: whether that takes `set_const`, which cannot run in a captured graph
      (`Rollout.update_constants`): inertial parameters of a model that can make constraint rows.
  """

  def __init__(self, scene, params: Sequence[Param] | None):
    params = list(params or [])
    for p in params:
      if not isinstance(p, Param):
        raise TypeError(f"params must be diffsim.Param objects, got {type(p).__name__}")
      p.bind(scene)
    names = [p.name for p in params]
    if len(set(names)) != len(names):
      raise ValueError(f"duplicate parameters: {names}")
    self.scene = scene
    self.params = params
    self.offsets = np.cumsum([0] + [p.dim for p in params])[:-1].astype(int)
    self.nparam = int(sum(p.dim for p in params))
    self.inertial = any(p.inertial for p in params)
    self._set_const = _reads_invweight(scene)  # whether the model reads set_const's inertia group
    self.eager_constants = self.inertial and self._set_const
    self.columns = []
    for p in params:
      nelem_width = p.width
      cols = np.array([e * nelem_width + c for e in p.elements for c in p.components], dtype=np.int32)
      tie = None
      if p.tie_bias is not None:
        tie_cols = np.array([e * 10 + 1 if (e in p.tie_bias and c == 0) else -1
                             for e in p.elements for c in p.components], dtype=np.int32)
        tie = wp.array(tie_cols, dtype=int, device=scene.device)
      self.columns.append((wp.array(cols, dtype=int, device=scene.device), tie))
    tied = any(p.tie_bias is not None for p in params)
    fields = {p.field for p in params} | ({"actuator_biasprm"} if tied else set())
    if self.inertial:
      fields |= set(_DERIVED)
    self.fields = fields
    self.h = wp.zeros((scene.nworld, max(self.nparam, 1)), dtype=float, device=scene.device)

  def reserve(self, nlane: int) -> None:
    """Gives the parameters' model fields their rows for `nlane` lanes per world now, outside any
    graph capture (a capture would record the allocation and its upload instead of running them)."""
    scene = self.scene
    if self.params:
      _ensure_batched(scene, self.fields, max(model_rows(scene).batch, nlane * scene.nworld))

  def apply(self, nlane: int, lane0: int = -1, central: bool = True, eps: float = 1e-2) -> None:
    """Writes every world's (and lane's) parameter values into the model and updates constants.

    Args:
      nlane: number of lanes per world.
      lane0: lane of the first parameter coordinate, or -1 when not differentiating.
      central: central (two lanes per coordinate) or forward differences.
      eps: relative step, `h = eps * max(|value|, 0.01)`.
    """
    scene = self.scene
    rows = model_rows(scene)
    if not self.params and not rows.applied:
      return
    # rows only grow, so arrays captured in a graph stay valid; rows of lanes beyond `nlane` hold
    # world values and serve set_const, which needs one row per world of the Data it runs on
    _ensure_batched(scene, self.fields, max(rows.batch, nlane * scene.nworld))
    nrow = rows.batch // scene.nworld
    _restore_unapplied(scene, self)
    for p, off, (cols, tie) in zip(self.params, self.offsets, self.columns):
      lane_p = lane0 + (2 if central else 1) * int(off) if lane0 >= 0 else -1
      h = self.h[:, int(off):int(off) + p.dim]
      flat = flat_rows(model_field(scene.model, p.field), p.width)
      wp.launch(_write_param_rows, dim=(nrow, scene.nworld, p.dim), device=scene.device,
                inputs=[scene.nworld, p.value, cols, 1.0, lane_p, int(central), eps], outputs=[flat, h])
      if tie is not None:
        flat = flat_rows(scene.model.actuator_biasprm, 10)
        wp.launch(_write_param_rows, dim=(nrow, scene.nworld, p.dim), device=scene.device,
                  inputs=[scene.nworld, p.value, tie, -1.0, lane_p, int(central), eps], outputs=[flat, h])
    if self.inertial or rows.needs_set_const:
      full = self._set_const
      if full and scene.device.is_capturing:
        # set_const allocates, so it cannot live in a graph: the caller refreshes constants eagerly
        warnings.warn("inertial parameters in a captured graph: call Rollout.update_constants() after "
                      "changing their values and before replaying the graph", stacklevel=3)
        return
      update_constants(scene, scene.data(nrow) if full else None)
      rows.needs_set_const = self.inertial
    for p in self.params:
      rows.applied[p.name] = p


def _reads_invweight(scene) -> bool:
  """Whether a step of the scene's model reads the constants `set_const(INERT0)` derives: the
  invweights, in the softness of constraint rows (MJWarp's step reads `actuator_acc0` nowhere)."""
  return can_make_constraint_rows(scene.mjm)


def update_constants(scene, data) -> None:
  """Recomputes constants derived from mass and inertia, as `mj_setConst` does: the subtree masses
  and, with `data` (an MJWarp Data of one row per model row), `set_const`'s inertia group; None where
  the model reads none of the latter (`_reads_invweight`)."""
  m = scene.model
  wp.launch(_subtreemass, dim=(m.body_subtreemass.shape[0], scene.mjm.nbody), device=scene.device,
            inputs=[m.body_subtreenum, m.body_mass], outputs=[m.body_subtreemass])
  if data is None:
    return
  import mujoco_warp as mjw

  with wp.ScopedDevice(scene.device):
    mjw.set_const(m, data, groups=mjw.SetConstGroup.INERT0, restore=False)


def _ensure_batched(scene, fields, batch: int) -> None:
  """Gives each field (and every field batched before) exactly `batch` rows."""
  rows = model_rows(scene)
  todo = set(fields) | set(rows.nominal)
  if scene.device.is_capturing and any(model_field(scene.model, f).shape[0] != batch for f in todo):
    raise RuntimeError("a graph capture would allocate model rows for parameters: build the Rollout (or call "
                       "Rollout.update_constants()) before capturing")
  rows.batch = batch
  for f in sorted(todo):
    arr = model_field(scene.model, f)
    if f not in rows.nominal:
      rows.nominal[f] = arr.numpy()[:1].copy()
      rows.nominal_device[f] = wp.array(rows.nominal[f].reshape(1, -1).astype(np.float32), dtype=float,
                                        device=scene.device)
    if arr.shape[0] == batch:
      continue
    nominal = rows.nominal[f]
    tiled = np.repeat(nominal, batch, axis=0)
    set_model_field(scene.model, f, wp.array(tiled, dtype=arr.dtype, device=scene.device))
    if f in _INERTIAL or f in _DERIVED:
      rows.needs_set_const = True


def _restore_unapplied(scene, layout: ParamLayout) -> None:
  """Resets fields of parameters applied earlier but not now to their MJCF values."""
  current = {p.name for p in layout.params}
  state = model_rows(scene)
  stale = [name for name in state.applied if name not in current]
  for name in stale:
    p = state.applied.pop(name)
    for f in [p.field] + (["actuator_biasprm"] if p.tie_bias is not None else []):
      # a kernel, not a host upload: this can run inside a graph capture (a CUDA capture refuses uploads)
      rows = _rows(model_field(scene.model, f))
      wp.launch(_tile_row, dim=rows.shape, device=scene.device, inputs=[state.nominal_device[f]], outputs=[rows])
      if p.inertial:
        state.needs_set_const = True
  # the inertial parameters still applied are rewritten below, so their constants are refreshed then
