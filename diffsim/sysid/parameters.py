"""The identified parameters: parsing, checks on the host model, labels and initial guesses.

A `Param` names a model field and elements (`"dof_damping:elbow_flex"`); the rollout perturbs
each of its elements (each dof of a dof field) on its own, its `ParamLayout` coordinates. sysid
identifies one value per joint for dof fields instead, as MJCF stores one and compiles it into
every dof (a ball joint's damping is one number): `joint_groups` says which layout coordinates share
an identified coordinate, `param_columns` maps each to it, and `ParamVector` holds the identified
vector's values, bounds and labels.
"""

from __future__ import annotations

from typing import Sequence

import mujoco
import numpy as np

from ..params import OBJECT_TYPES, Param


def parse_param(spec: str | Param, bounds: dict | None = None) -> Param:
  """A fresh `Param` from `"field:element"` (or a copy of a `Param`), with bounds from `bounds`.

  Args:
    spec: `"body_mass:ball"`, `"opt.gravity"`, or a `Param`.
    bounds: `{name: (lower, upper)}`; `None` entries keep the default (positive quantities
      `(0, inf)`, others `(-inf, inf)`: `Param.resolved_bounds`).
  """
  bounds = bounds or {}
  if isinstance(spec, Param):
    lo, hi = bounds.get(spec.name, spec.bounds)
    return Param(spec.field, spec.element, components=spec.components, lower=lo, upper=hi, name=spec.name)
  if not isinstance(spec, str):
    raise TypeError(f"parameters are 'field:element' strings or diffsim.Param objects, got {type(spec).__name__}")
  lo, hi = bounds.get(spec, (None, None))
  if ":" in spec:
    f, e = spec.split(":", 1)
    return Param(f, e, lower=lo, upper=hi, name=spec)
  return Param(spec, None, lower=lo, upper=hi, name=spec)


# element counts of the object types parameters name (for the list of valid names in an error)
def host_field(mjm: mujoco.MjModel, field: str) -> np.ndarray:
  """A model field (`"dof_damping"`, `"opt.gravity"`) of a host model, as float64."""
  a = getattr(mjm.opt, field[4:]) if field.startswith("opt.") else getattr(mjm, field)
  return np.asarray(a, dtype=np.float64)


def joint_groups(p: Param, mjm: mujoco.MjModel, elements: Sequence[int]) -> list[list[int]]:
  """Elements of `p` that share one identified value: the dofs of a joint for dof fields (a ball
  joint's damping, a free joint's armature), since MJCF stores one value per joint and compiles it
  into every dof (`identified_spec` could not write per-dof values); else each element alone."""
  if p.element_size != "nv":
    return [[int(e)] for e in elements]
  groups: dict[int, list[int]] = {}
  for e in elements:
    groups.setdefault(int(mjm.dof_jntid[e]), []).append(int(e))
  return list(groups.values())


def param_columns(params: Sequence[Param], mjm: mujoco.MjModel) -> np.ndarray:
  """`(nlayout,)` identified coordinate of each coordinate of the parameters' `ParamLayout` (which has
  one per dof): the dofs of one joint map to one coordinate (see `joint_groups`). `params` are bound."""
  cols, off = [], 0
  for p in params:
    groups = joint_groups(p, mjm, p.elements)
    where = {e: g for g, grp in enumerate(groups) for e in grp}
    nc = len(p.components)
    cols += [off + where[e] * nc + i for e in p.elements for i in range(nc)]
    off += len(groups) * nc
  return np.array(cols, dtype=np.int32)


class ParamVector:
  """The identified vector `theta` `(nparam,)` of some parameters on a host model: MJCF values,
  bounds, labels, and conversions to and from `{name: value}`.

  Built by `check`, which refuses bad names, bounds and duplicates before any kernel runs.

  Attributes:
    params: the `Param`s, in order.
    nominal, lower, upper: `(nparam,)` float64 MJCF values (the initial guess) and bounds.
    dims: identified coordinates of each parameter; offsets: the first of each in `theta`.
    labels: `(nparam,)` one name per coordinate (see `labels`).
  """

  def __init__(self, params: Sequence[Param], nominal, lower, upper, dims, labels):
    self.params = list(params)
    self.nominal, self.lower, self.upper = nominal, lower, upper
    self.dims = list(dims)
    self.offsets = [int(o) for o in np.cumsum([0] + self.dims)[:-1]]
    self.labels = labels

  @property
  def nparam(self) -> int:
    return int(self.nominal.size)

  def named(self, theta: np.ndarray) -> dict:
    """`{name: value}` of `theta` `(nparam,)`: a float for a one-coordinate parameter, else an array."""
    out = {}
    for p, off, dim in zip(self.params, self.offsets, self.dims):
      out[p.name] = float(theta[off]) if dim == 1 else np.array(theta[off:off + dim])
    return out

  def with_values(self, values: dict | None) -> np.ndarray:
    """`(nparam,)` the MJCF values with `{name: value}` overrides (`identify`'s `x0`)."""
    first = self.nominal.copy()
    if not values:
      return first
    names = [p.name for p in self.params]
    unknown = sorted(set(values) - set(names))
    if unknown:
      raise ValueError(f"x0 names unknown parameters {unknown}; parameters are {names}")
    for p, off, dim in zip(self.params, self.offsets, self.dims):
      if p.name in values:
        try:
          first[off:off + dim] = np.broadcast_to(np.asarray(values[p.name], float), (dim,))
        except ValueError:
          raise ValueError(f"x0[{p.name!r}] must have {dim} value(s), got {np.shape(values[p.name])}") from None
    if np.any((first < self.lower) | (first > self.upper)):
      raise ValueError(f"x0 lies outside the bounds: {first} not in [{self.lower}, {self.upper}]")
    return first

  @classmethod
  def check(cls, mjm: mujoco.MjModel, params: Sequence[Param]) -> ParamVector:
    """Name, bound and duplicate checks on the host model, so bad input fails before any kernel runs."""
    names = [p.name for p in params]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
      raise ValueError(f"duplicate parameters {dup}; list each once")
    if not params:
      raise ValueError("no parameters to identify; pass e.g. params=['body_mass:ball'] (--param body_mass:ball)")
    nominals, lowers, uppers = [], [], []
    for p in params:
      nominal = _nominal(p, mjm, joint_groups(p, mjm, p.resolve_elements(mjm)))
      lo, hi = _bounds(p, nominal)
      nominals.append(nominal)
      lowers.append(lo)
      uppers.append(hi)
    return cls(params, np.concatenate(nominals), np.concatenate(lowers), np.concatenate(uppers),
               [n.size for n in nominals], labels(params, mjm))


def _nominal(p: Param, mjm: mujoco.MjModel, groups: list[list[int]]) -> np.ndarray:
  """The MJCF values of `p`, one per group of elements (they must agree within a group)."""
  a = host_field(mjm, p.field)
  rows = a.reshape(1, -1) if p.element_size is None else a.reshape(a.shape[0], -1)
  nominal = []
  for grp in groups:
    for c in p.components:
      v = rows[grp, c]
      if np.any(v != v[0]):
        j = int(mjm.dof_jntid[grp[0]])
        raise ValueError(f"{p.name!r}: the dofs of joint {mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j)!r} "
                         f"have different values {v}; MJCF stores one value per joint, so sysid identifies one "
                         "(start from a model compiled from MJCF)")
      nominal.append(v[0])
  return np.array(nominal)


def _bounds(p: Param, nominal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """`(lower, upper)` of `p`, the shape of `nominal`, checked against it."""
  lo, hi = p.resolved_bounds()
  try:
    lo = np.broadcast_to(np.asarray(lo, float), nominal.shape)
    hi = np.broadcast_to(np.asarray(hi, float), nominal.shape)
  except ValueError:
    raise ValueError(f"{p.name!r}: bounds must be scalars or have {nominal.size} value(s) (one per joint for "
                     f"dof fields), got {np.shape(lo)} and {np.shape(hi)}") from None
  if np.any(lo > hi):
    raise ValueError(f"{p.name!r}: lower bound above upper bound ({lo} > {hi})")
  if np.any((nominal < lo) | (nominal > hi)):
    raise ValueError(f"{p.name!r}: the initial guess (MJCF value {nominal}) lies outside the bounds [{lo}, {hi}]; "
                     "widen the bounds or edit the MJCF")
  return lo, hi


def labels(params: Sequence[Param], mjm: mujoco.MjModel) -> list[str]:
  """One label per identified scalar: the name, plus `[element]` (and `,component`) when a
  parameter has several values, e.g. `dof_damping[elbow_flex]`, `opt.gravity[2]`."""
  out = []
  for p in params:
    groups = joint_groups(p, mjm, p.resolve_elements(mjm))
    if len(groups) * len(p.components) == 1:
      out.append(p.name)
      continue
    for grp in groups:
      e = grp[0]
      if p.element_size is None:
        elem = None
      elif p.element_size == "nv":
        j = int(mjm.dof_jntid[e])
        elem = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j) or f"#{j}"
      else:
        elem = mujoco.mj_id2name(mjm, OBJECT_TYPES[p.element_size], e) or f"#{e}"
      for c in p.components:
        parts = ([elem] if elem is not None and len(groups) > 1 else []) + \
                ([str(c)] if len(p.components) > 1 or elem is None else [])
        out.append(f"{p.name}[{','.join(parts)}]")
  return out


def initial_guesses(vector: ParamVector, starts, spread: float, seed: int, x0: dict | None) -> np.ndarray:
  """`(nstart, nparam)` initial guesses: the MJCF values (with `x0` overrides) first, then random
  ones within a factor `1 + spread` (`starts` a count), or `starts` itself (an array)."""
  lower, upper = vector.lower, vector.upper
  first = vector.with_values(x0)
  n = first.size
  if isinstance(starts, (int, np.integer)):
    if starts < 1:
      raise ValueError(f"starts must be >= 1, got {starts}")
    rng = np.random.default_rng(seed)
    guesses = [first]
    for _ in range(int(starts) - 1):
      g = first.copy()
      for i in range(n):
        if lower[i] >= 0 and first[i] > 0:  # positive: log-uniform around the guess
          g[i] = first[i] * np.exp(rng.uniform(-np.log1p(spread), np.log1p(spread)))
        elif first[i] != 0:
          g[i] = first[i] + spread * abs(first[i]) * rng.uniform(-1, 1)
        elif np.isfinite(lower[i]) and np.isfinite(upper[i]):
          g[i] = rng.uniform(lower[i], upper[i])
        else:
          g[i] = spread * rng.uniform(0 if lower[i] >= 0 else -1, 1)
      guesses.append(np.clip(g, lower, upper))
    return np.stack(guesses)
  guesses = np.asarray(starts, dtype=np.float64)
  if guesses.ndim != 2 or guesses.shape[1] != n:
    raise ValueError(f"starts must be a count or an array of initial guesses (nstart, nparam={n}), got {guesses.shape}")
  if np.any((guesses < lower) | (guesses > upper)):
    raise ValueError("some initial guesses in starts lie outside the bounds")
  return guesses
