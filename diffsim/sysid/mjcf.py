"""The identified model as MJCF: the values written into an `MjSpec` of the input, checked by compiling it."""

from __future__ import annotations

import os
from typing import Sequence

import mujoco
import numpy as np

from .. import data as _data
from ..params import Param
from .parameters import host_field, joint_groups

_SPEC_KIND = {  # field prefix -> (spec list, object type)
  "body_": ("bodies", mujoco.mjtObj.mjOBJ_BODY),
  "jnt_": ("joints", mujoco.mjtObj.mjOBJ_JOINT),
  "dof_": ("joints", mujoco.mjtObj.mjOBJ_JOINT),
  "geom_": ("geoms", mujoco.mjtObj.mjOBJ_GEOM),
  "site_": ("sites", mujoco.mjtObj.mjOBJ_SITE),
  "actuator_": ("actuators", mujoco.mjtObj.mjOBJ_ACTUATOR),
  "tendon_": ("tendons", mujoco.mjtObj.mjOBJ_TENDON),
  "pair_": ("pairs", mujoco.mjtObj.mjOBJ_PAIR),
}
_SPEC_ATTR = {"body_inertia": "inertia", "body_ipos": "ipos", "body_mass": "mass"}
_INERTIAL = ("body_mass", "body_inertia", "body_ipos")


def _load_spec(source) -> mujoco.MjSpec:
  if isinstance(source, mujoco.MjSpec):
    return source.copy()
  if isinstance(source, mujoco.MjModel):
    raise TypeError("an MjModel cannot be written back as MJCF; pass the MJCF path or an MjSpec")
  src = os.fspath(source)
  if src.lstrip().startswith("<"):
    return mujoco.MjSpec.from_string(src)
  if src.lower().endswith((".usd", ".usda", ".usdc", ".usdz")):
    from ..usd import usd_to_spec  # model.xml is then the converted stage with the identified values

    return usd_to_spec(src).spec
  spec = mujoco.MjSpec.from_file(src)
  # asset folders are relative to the original file: make them absolute so model.xml loads anywhere
  base = os.path.dirname(os.path.abspath(src))
  for attr in ("meshdir", "texturedir"):
    d = getattr(spec, attr) or ""
    setattr(spec, attr, os.path.normpath(os.path.join(base, d)) if not os.path.isabs(d) else d)
  return spec


def identified_spec(source, params: Sequence[Param], theta: np.ndarray) -> mujoco.MjSpec:
  """An `MjSpec` of `source` with the identified values `theta` `(nparam,)` written in.

  `theta` has one value per joint for dof fields (as `identify` returns them; MJCF stores one and
  compiles it into every dof of the joint). The spec keeps what the simulation kept: a position
  servo's `biasprm[1] = -kp` follows its kp (see `Param`), and a `dampratio` is written as the
  compiled `kv` (`biasprm[2]`), which the simulation used whatever the identified kp, masses or
  armatures (compiling the dampratio again would recompute it from them).

  Checks the result: the compiled spec must reproduce every value and every actuator's `biasprm`
  (float32 precision).

  Args:
    source: MJCF path or XML string, or `mujoco.MjSpec` (not modified).
    params: the identified `Param`s.
    theta: their values, flat.

  Raises:
    ValueError: a parameter MJCF cannot hold, or values that do not compile.
  """
  spec = _load_spec(source)
  mjm = spec.copy().compile()
  theta = np.asarray(theta, dtype=np.float64).reshape(-1)
  for p in params:
    if not p.elements:  # not bound to a scene: resolve the names here
      p.elements = p.resolve_elements(mjm)
  groups = [joint_groups(p, mjm, p.elements) for p in params]
  dims = [len(g) * len(p.components) for p, g in zip(params, groups)]
  if theta.size != sum(dims):
    raise ValueError(f"theta has {theta.size} values, but the parameters have {sum(dims)} ({dims}; dof fields "
                     "have one per joint)")
  want_bias = mjm.actuator_biasprm.copy()  # what the simulation used
  for a, el in enumerate(spec.actuators):
    if el.biastype == mujoco.mjtBias.mjBIAS_AFFINE and el.biasprm[2] > 0 and mjm.actuator_biasprm[a, 2] < 0:
      b = np.array(el.biasprm, dtype=np.float64)
      b[2] = mjm.actuator_biasprm[a, 2]  # dampratio -> the compiled -kv
      el.biasprm = b
  inertial_done = set()
  off = 0
  for p, grps, dim in zip(params, groups, dims):
    vals = theta[off:off + dim].reshape(len(grps), len(p.components))
    off += dim
    if p.field.startswith("opt."):
      _write_option(spec, p, vals[0])
    else:
      _write_elements(spec, mjm, p, grps, vals, want_bias, inertial_done)
  _verify(spec, params, groups, dims, theta, want_bias)
  return spec


def _write_option(spec: mujoco.MjSpec, p: Param, values: np.ndarray) -> None:
  attr = p.field[4:]
  cur = np.array(getattr(spec.option, attr), dtype=np.float64, ndmin=1)
  cur[p.components] = values
  setattr(spec.option, attr, cur if np.ndim(getattr(spec.option, attr)) else float(cur[0]))


def _write_elements(spec: mujoco.MjSpec, mjm: mujoco.MjModel, p: Param, groups: list[list[int]], vals: np.ndarray,
                    want_bias: np.ndarray, inertial_done: set) -> None:
  """Writes `vals` `(ngroup, ncomponent)` of `p` into the spec's elements; updates `want_bias`, the
  `biasprm` the written actuators must compile to."""
  prefix = next((k for k in _SPEC_KIND if p.field.startswith(k)), None)
  if prefix is None:
    raise ValueError(f"cannot write parameter {p.name!r} to MJCF: unknown element kind of {p.field!r}")
  listname, objtype = _SPEC_KIND[prefix]
  attr = _SPEC_ATTR.get(p.field, p.field[len(prefix):])
  for grp, row in zip(groups, vals):
    e = grp[0]
    ident = int(mjm.dof_jntid[e]) if prefix == "dof_" else e
    name = mujoco.mj_id2name(mjm, objtype, ident)
    el = getattr(spec, listname)[ident]
    if name and el.name != name:
      el = next(x for x in getattr(spec, listname) if x.name == name)
    if p.field in _INERTIAL and e not in inertial_done:
      # write the compiled inertial frame explicitly, so the edit survives inertia-from-geom compilation
      inertial_done.add(e)
      el.explicitinertial = True
      el.mass = float(mjm.body_mass[e])
      el.ipos = mjm.body_ipos[e]
      el.iquat = mjm.body_iquat[e]
      el.inertia = mjm.body_inertia[e]
      el.fullinertia = np.full(6, np.nan)
    if not hasattr(el, attr):
      raise ValueError(f"cannot write parameter {p.name!r} to MJCF: MjSpec {listname[:-1]} has no attribute {attr!r}")
    cur = getattr(el, attr)
    if np.ndim(cur) == 0:
      setattr(el, attr, float(row[0]))
    else:
      # joint damping and stiffness are polynomials in MJCF: element 0 is the linear coefficient
      cur = np.array(cur, dtype=np.float64)
      for c, v in zip(p.components, row):
        cur[c] = v
      setattr(el, attr, cur)
    if p.field == "actuator_biasprm":
      want_bias[e, p.components] = row
    # a position servo keeps biasprm[1] = -kp, as the simulation did (see Param)
    if p.field == "actuator_gainprm" and 0 in p.components and mjm.actuator_biasprm[e, 1] != 0.0 \
        and np.isclose(mjm.actuator_biasprm[e, 1], -mjm.actuator_gainprm[e, 0]):
      b = np.array(el.biasprm, dtype=np.float64)
      b[1] = want_bias[e, 1] = -row[p.components.index(0)]
      el.biasprm = b


def _verify(spec: mujoco.MjSpec, params, groups, dims, theta: np.ndarray, want_bias: np.ndarray) -> None:
  """Compiles the XML that will be written and checks every value and actuator `biasprm` in it."""
  try:
    chk = mujoco.MjModel.from_xml_string(spec.to_xml())
  except Exception as e:
    raise ValueError(f"the identified model does not compile: {e}") from None
  off = 0
  for p, grps, dim in zip(params, groups, dims):
    want = np.repeat(theta[off:off + dim].reshape(len(grps), -1), [len(g) for g in grps], axis=0).reshape(-1)
    off += dim
    a = host_field(chk, p.field)
    rows = a.reshape(1, -1) if p.element_size is None else a.reshape(a.shape[0], -1)
    got = np.array([rows[e, c] for g in grps for e in g for c in p.components])
    if not np.allclose(got, want, rtol=1e-5, atol=1e-9):
      raise ValueError(f"writing {p.name!r} to MJCF gave {got} after compiling instead of {want} (a compiler "
                       "option such as inertiafromgeom or a default overrides it)")
  if not np.allclose(chk.actuator_biasprm, want_bias, rtol=1e-5, atol=1e-9):
    bad = np.nonzero(~np.isclose(chk.actuator_biasprm, want_bias, rtol=1e-5, atol=1e-9).all(axis=1))[0]
    raise ValueError(f"the written actuators {[mujoco.mj_id2name(chk, mujoco.mjtObj.mjOBJ_ACTUATOR, a) for a in bad]} "
                     f"compile to biasprm {chk.actuator_biasprm[bad]} instead of the simulated {want_bias[bad]}")


def write_mjcf(source, params: Sequence[Param], theta: np.ndarray, path) -> None:
  """Writes the identified model as MJCF to `path` (through a temporary file and a rename); see
  `identified_spec` for the arguments."""
  xml = identified_spec(source, params, theta).to_xml()
  _data.atomic_write(path, lambda f: f.write(xml.encode()))
