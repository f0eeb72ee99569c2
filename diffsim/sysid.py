"""System identification: model parameters that make MJWarp reproduce recorded trajectories.

`identify(model, data, params)` fits named model parameters (`"body_mass:ball"`,
`"dof_damping:slide"`, ...) to recordings (see `diffsim.data` for the format) by minimizing

  cost = 0.5 |r|^2,   r = W (simulated - measured),

over every sample of every recording (`qpos` residuals in the tangent space, so quaternions work).
Each recording, or with multiple shooting each segment of one, runs in its own MJWarp world; all
worlds share one parameter set, and several initial guesses (multi-start) run side by side in more
worlds. Initial velocities that were not measured (and, with `fit_qpos0`, noisy initial positions)
are unknowns too, solved for with the parameters; each world's block of them is eliminated from the
normal equations on its own (Schur complement), so thousands of shooting segments stay cheap.

Solvers:
  - `"lm"` (default): Levenberg-Marquardt (Gauss-Newton with Marquardt damping, projected onto
    the bounds). The residual Jacobian (`jacobian=`) comes from one of:
      - `"forward"`: *tangent-linear propagation* of the per-step Jacobians that a
        linearized rollout forms (`1 + nx + nparam` lanes per world, forward differences):
        `dx_{k+1}/dtheta = A_k dx_k/dtheta + P_k`, `ds_k/dtheta = C_k dx_k/dtheta + Q_k`, one kernel
        per step inside the rollout's step graph, a thread per (world, column).
      - `"directional"`: *forward mode* (`Rollout(directions=ncol)`): besides the nominal lane, one
        lane per column (a parameter, or an unknown initial state coordinate) steps the state moved
        along that column's tangent, so its difference from the nominal lane is the next tangent
        without forming `A_k`: `1 + ncol` lanes. Fewer lanes when the parameters are few against the
        state (the 5-link arm of `benchmarks/bench_sysid.py`: 11 instead of 21, 1.9x faster on 64
        trajectories, same result), but less precise: a parameter column moves the state by the
        parameter's step times the tangent (one step for both, fixed per rollout), so the state
        perturbation grows with the sensitivity and crosses the kinks of constraint forces. On the
        SO-101 of tutorial 06 (frictionloss, 1,500 steps) its columns differ from "forward"'s by 0.3-9%
        and LM stalls short of the minimum (15 of 18 parameters within 3 std of the truth, against
        18 of 18); on smooth models it is within 1e-3..9e-3 of float64 MuJoCo (tests/test_gradients.py).
      - `"tape"`: reverse mode, one backward sweep per residual block (sample x signal, all worlds
        at once): `nsample * nres` sweeps, growing with the square of the recording's length, against
        one rollout for any length. For checks (no convergence test below).
      - `"auto"` (default): `"forward"`, and where it stops or stalls on trajectories that cross
        constraint switches, the step of `"directional"` (forward differences) when that lowers the
        cost, then `"forward"` again from there (see Convergence).
    The nominal lane of the linearized rollout also gives the cost at the trial point, so accepting
    or rejecting a step needs no extra rollout.
  - `"adam"`: first-order, with the gradient of the cost from one `tape.backward()` sweep. For
    problems with very many parameters, where the dense `nparam x nparam` normal equations and the
    `(nworld, nsample, nres, nparam)` Jacobian become the bottleneck; needs far more iterations
    than LM, and keeps initial states at their measured or estimated values. The step Jacobians are
    finite differences either way (a lane per state coordinate and parameter; controls are data and
    get none), so a rollout's cost grows with the parameter count in both. The tape's rollout and
    backward pass are captured as one graph on the first iteration and replayed after.

Speed: the linearized rollout is captured once as graphs (`Rollout.stages`: the step is one graph
replayed `nstep` times, so capturing costs one step whatever the recording's length) and replayed
at every LM iteration; the host solves the small normal equations in between.

Multiple shooting (`shooting=k`) restarts from the measured state every `k` samples: long or
unstable recordings stay close to the data, and on launch-bound devices (CPU) shorter rollouts in
more worlds are also faster. Unmeasured initial velocities of the segments are solved for.

Convergence: LM stops when its step falls below `xtol` (relative) or 0.1 of the parameters' std,
when an accepted step lowers the cost by less than `ftol`, or when ever shorter steps fail. Each
says the *linearized model* has nothing left, a minimum only where the Jacobian is right. Where a
limit or contact engages or releases along the nominal trajectories
(`SysIdResult.constraint_changes`), the step map jumps (a limit's force starts at a finite value,
from its damping), and the step Jacobians, formed on one side of the jump, leave out how the
trajectory moves with the onset: on recordings that drive joints onto their limits, LM with them
alone stops on a slope, short of the truth (`benchmarks/bench_sysid.py`, the case at the limits;
`tests/test_sysid_limits.py`). Forward mode with forward differences catches the jumps (a lane that
crosses one carries it), as a coarse sample, so it converges, but linearly. So there the
convergence test asks that other Jacobian for its step (one rollout, plus one to try the step):
within the tolerances too, converged, and the std widens by it; lowering the cost, not a minimum:
`"auto"` takes the step and goes on with `"forward"` from there, an explicit Jacobian stops there,
not converged; raising the cost, converged if the start's own step was within the tolerances, else
stalled, not converged, with a message that says what to try (`diffsim sysid` exits with 1). In
`"auto"` a step that fails after the model's predicted reductions stopped matching the actual ones
asks at once. Trajectories that cross no switch are the derivative of a smooth map, and skip the
test (no extra rollout).

Confidence: at the solution, `cov = s^2 (J^T J)^-1` with `s^2 = 2 cost / (nresidual - nunknown)`
(the residual variance; with weights `1 / sigma` it is about 1), marginalized over the initial
velocities, with `s^2` multiplied by `(1 + rho) / (1 - rho)` for residuals with lag-1
autocorrelation `rho` along time (`_data_std`): the misfit of a float32 simulation of noise-free
data drifts (`rho` close to 1), and the plain formula puts the truth tens to hundreds of std away.
To that
(`SysIdResult.std_data`) the std adds in quadrature what the solver leaves open: the other
Jacobian's step at the solution (their disagreement), the step still proposed (divided by `1 - q`
where steps shrink by `q` per iteration) and `xtol` times the value (the float32 resolution LM
claims, which noise-free data reach). The summary marks a std these dominate as
"Jacobian-limited", and warns when it exceeds 1e-4 of the value. A parameter the residuals do not
depend on, or a combination they do not depend on (an eigenvalue of `J^T J` scaled to a unit
diagonal below 1e-6 of the largest: within the float32 finite-difference noise of the Jacobian,
see `_confidence`), is reported as not identifiable, with `std = inf`; a condition number above
1e5 as ill-conditioned, naming the parameters involved; a positive quantity (mass, damping, ...) whose
std exceeds its value as poorly determined (the servo of a joint the recordings do not move).

Precision: MJWarp simulates in float32 and the Jacobians are forward differences. On
noise-free float64 MuJoCo data of smooth systems the parameters come back to relative errors of
1e-7 to 1e-5 (pendulum mass and damping; SO-101 damping and armature); `frictionloss`, a
non-smooth constraint force, to about 1e-4 on noise-free data; armatures from recordings that
reach joint limits as closely as from smooth ones (`benchmarks/bench_sysid.py`).
"""

from __future__ import annotations

import json
import os
import time as _time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import mujoco
import numpy as np
import warp as wp

from . import data as _data
from .kernels import quat_sub
from .graph import Replay
from .params import Param, _POSITIVE
from .rollout import Rollout
from .scene import Scene, SolverSettings, _load_mjmodel, copy_mjmodel

__all__ = ["identify", "SysIdResult", "IdentifiabilityWarning", "identified_spec", "write_mjcf", "parse_param"]

_FREE, _BALL = 0, 1


class IdentifiabilityWarning(UserWarning):
  """The data do not determine some parameter (or combination) well."""


# -- kernels ----------------------------------------------------------------------------------------


@wp.kernel
def _residuals(
  # Model:
  njnt: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  # In:
  slot_step: wp.array2d[int],  # (nworld, nsample) simulation step of each sample, -1: padding
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq) simulated
  qvel: wp.array3d[float],  # (nworld, nstep + 1, nv)
  sensordata: wp.array3d[float],  # (nworld, nstep + 1, ns)
  meas_qpos: wp.array3d[float],  # (nworld, nsample, nq) measured
  meas_qvel: wp.array3d[float],  # (nworld, nsample, nv)
  meas_sensordata: wp.array3d[float],  # (nworld, nsample, ns)
  weight: wp.array3d[float],  # (nworld, nsample, nres) 0 where not measured
  # Out:
  res_out: wp.array3d[float],  # (nworld, nsample, nres) = weight * (simulated - measured)
):
  w, j = wp.tid()
  k = slot_step[w, j]
  if k < 0:
    return
  nv = meas_qvel.shape[2]
  # qpos in the tangent space of the measurement (quaternions as rotation vectors, mju_subQuat)
  for jnt in range(njnt):
    typ = jnt_type[jnt]
    qadr = jnt_qposadr[jnt]
    dadr = jnt_dofadr[jnt]
    if typ == _FREE or typ == _BALL:
      if typ == _FREE:
        for i in range(3):
          res_out[w, j, dadr + i] = weight[w, j, dadr + i] * (qpos[w, k, qadr + i] - meas_qpos[w, j, qadr + i])
        qadr += 3
        dadr += 3
      qs = wp.quat(qpos[w, k, qadr + 1], qpos[w, k, qadr + 2], qpos[w, k, qadr + 3], qpos[w, k, qadr])
      qm = wp.quat(meas_qpos[w, j, qadr + 1], meas_qpos[w, j, qadr + 2], meas_qpos[w, j, qadr + 3],
                   meas_qpos[w, j, qadr])
      dq = quat_sub(qs, qm)
      for i in range(3):
        res_out[w, j, dadr + i] = weight[w, j, dadr + i] * dq[i]
    else:
      res_out[w, j, dadr] = weight[w, j, dadr] * (qpos[w, k, qadr] - meas_qpos[w, j, qadr])
  for i in range(nv):
    res_out[w, j, nv + i] = weight[w, j, nv + i] * (qvel[w, k, i] - meas_qvel[w, j, i])
  for s in range(meas_sensordata.shape[2]):
    res_out[w, j, 2 * nv + s] = weight[w, j, 2 * nv + s] * (sensordata[w, k, s] - meas_sensordata[w, j, s])


@wp.kernel
def _half_sum_squares(
  # In:
  res: wp.array3d[float],  # (nworld, nsample, nres)
  world_start: wp.array[int],  # (nworld,) start (initial guess) each world belongs to
  # Out:
  cost_out: wp.array[float],  # (nstart,) accumulated
):
  w, j, i = wp.tid()
  r = res[w, j, i]
  wp.atomic_add(cost_out, world_start[w], 0.5 * r * r)


@wp.kernel
def _tangent_linear(
  # In:
  nv: int,
  nu: int,
  nparam: int,
  k0: int,
  count: wp.array[int],  # (1,) step k = k0 + count[0] (see `Rollout.stages`)
  nstep: int,
  step_slot: wp.array2d[int],  # (nworld, nstep + 1) sample slot of each step, -1: none
  jac: wp.array4d[float],  # (nworld, nstep, nx, nz) step Jacobians [A B P]
  sjac: wp.array4d[float],  # (nworld, nstep + 1, ns, nz) sensor Jacobians [C D Q]
  weight: wp.array3d[float],  # (nworld, nsample, nres)
  dx_in: wp.array3d[float],  # (nworld, nx, ncol) dx_k/d(theta, qvel0)
  # Out:
  dx_out: wp.array3d[float],  # (nworld, nx, ncol) dx_{k+1}/d(theta, qvel0)
  rjac_out: wp.array4d[float],  # (nworld, nsample, nres, ncol) dr/d(theta, qvel0)
):
  # columns c < nparam are parameters (direct terms P, Q); the others are initial velocities,
  # which enter only through dx_0
  w, c = wp.tid()
  k = k0 + count[0]
  nx = dx_in.shape[1]
  th = nx + nu + c  # column of theta_c in z
  j = step_slot[w, k]
  if j >= 0:
    # residuals of sample j: state rows are dx_k, sensor rows C_k dx_k + Q_k
    for i in range(2 * nv):
      rjac_out[w, j, i, c] = weight[w, j, i] * dx_in[w, i, c]
    for s in range(sjac.shape[2]):
      g = float(0.0)
      if c < nparam:
        g = sjac[w, k, s, th]
      for l in range(nx):
        g += sjac[w, k, s, l] * dx_in[w, l, c]
      rjac_out[w, j, 2 * nv + s, c] = weight[w, j, 2 * nv + s] * g
  if k < nstep:
    for i in range(nx):
      g = float(0.0)
      if c < nparam:
        g = jac[w, k, i, th]
      for l in range(nx):
        g += jac[w, k, i, l] * dx_in[w, l, c]
      dx_out[w, i, c] = g


@wp.kernel
def _constraint_changes(
  # In:
  k0: int,
  count: wp.array[int],  # (1,) step k = k0 + count[0] (see `Rollout.stages`)
  nefc: wp.array[int],  # (nlane * nworld,) constraint rows of each lane world's step, lane 0 nominal
  efc_type: wp.array2d[int],  # (nlane * nworld, njmax) their types
  # Out:
  last_out: wp.array[int],  # (nworld,) hash of the nominal rows of the previous step
  changes_out: wp.array[int],  # (nworld,) steps whose nominal constraint rows differ from the previous step's
):
  # a limit or contact row appearing or vanishing along the nominal trajectory, where the step map
  # jumps (see `_Problem.linearize`); a row changing regime (a frictionloss or friction row between
  # sticking and sliding, a limit between pushing and not) is a kink, which the step Jacobians see
  w = wp.tid()
  n = wp.min(nefc[w], efc_type.shape[1])
  h = wp.int64(n)
  for i in range(n):
    h = (h * wp.int64(31) + wp.int64(efc_type[w, i] + 1)) % wp.int64(2147483647)
  sig = int(h)
  if k0 + count[0] > 0 and sig != last_out[w]:
    changes_out[w] += 1
  last_out[w] = sig


@wp.kernel
def _residual_jacobian(
  # In:
  nv: int,
  slot_step: wp.array2d[int],  # (nworld, nsample) simulation step of each sample, -1: padding
  dx: wp.array4d[float],  # (nworld, nstep + 1, nx, ncol) state tangents d x_k / d(theta, nuisance)
  ds: wp.array4d[float],  # (nworld, nstep + 1, ns, ncol) sensor tangents
  weight: wp.array3d[float],  # (nworld, nsample, nres)
  # Out:
  rjac_out: wp.array4d[float],  # (nworld, nsample, nres, ncol) d(residual)/d(theta, nuisance)
):
  w, j, c = wp.tid()
  k = slot_step[w, j]
  nres = rjac_out.shape[2]
  for i in range(nres):
    g = float(0.0)
    if k >= 0:
      if i < 2 * nv:
        g = dx[w, k, i, c]
      else:
        g = ds[w, k, i - 2 * nv, c]
    rjac_out[w, j, i, c] = weight[w, j, i] * g


@wp.kernel
def _seed_residual(
  # In:
  j: int,
  i: int,
  # Out:
  res_grad_out: wp.array3d[float],  # (nworld, nsample, nres)
):
  w = wp.tid()
  res_grad_out[w, j, i] = 1.0


@wp.kernel
def _gather_grad(
  # In:
  value_grad: wp.array2d[float],  # (nworld, dim) one parameter's gradient per world
  col_map: wp.array[int],  # (nlayout,) identified coordinate of each layout coordinate
  offset: int,  # the parameter's first layout coordinate
  world_start: wp.array[int],  # (nworld,)
  # Out:
  grad_out: wp.array2d[float],  # (nstart, nparam) accumulated over the worlds of each start
):
  w, i = wp.tid()
  wp.atomic_add(grad_out, world_start[w], col_map[offset + i], value_grad[w, i])


@wp.kernel
def _scatter_theta(
  # In:
  theta: wp.array2d[float],  # (nstart, nparam) identified values
  col_map: wp.array[int],  # (nlayout,) identified coordinate of each layout coordinate
  offset: int,  # the parameter's first layout coordinate
  world_start: wp.array[int],  # (nworld,)
  # Out:
  value_out: wp.array2d[float],  # (nworld, dim) one parameter's per-world value
):
  w, i = wp.tid()
  value_out[w, i] = theta[world_start[w], col_map[offset + i]]


@wp.kernel
def _adam_step(
  # In:
  grad: wp.array2d[float],  # (nstart, nparam) d cost / d theta
  scale: wp.array[float],  # (nparam,) typical magnitude: Adam works on theta / scale
  lower: wp.array[float],  # (nparam,)
  upper: wp.array[float],  # (nparam,)
  lr: float,
  beta1: float,
  beta2: float,
  t: int,
  # Out:
  m_out: wp.array2d[float],  # (nstart, nparam) first moment
  v_out: wp.array2d[float],  # (nstart, nparam) second moment
  theta_out: wp.array2d[float],  # (nstart, nparam) updated in place
):
  s, i = wp.tid()
  g = grad[s, i] * scale[i]
  m = beta1 * m_out[s, i] + (1.0 - beta1) * g
  v = beta2 * v_out[s, i] + (1.0 - beta2) * g * g
  m_out[s, i] = m
  v_out[s, i] = v
  mhat = m / (1.0 - wp.pow(beta1, float(t)))
  vhat = v / (1.0 - wp.pow(beta2, float(t)))
  th = theta_out[s, i] - lr * scale[i] * mhat / (wp.sqrt(vhat) + 1.0e-12)
  theta_out[s, i] = wp.clamp(th, lower[i], upper[i])


# -- parameters -------------------------------------------------------------------------------------


def parse_param(spec: str | Param, bounds: dict | None = None) -> Param:
  """A fresh `Param` from `"field:element"` (or a copy of a `Param`), with bounds from `bounds`.

  Args:
    spec: `"body_mass:ball"`, `"opt.gravity"`, or a `Param`.
    bounds: `{name: (lower, upper)}`; `None` entries keep the default (positive quantities
      `(0, inf)`, others `(-inf, inf)`).
  """
  bounds = bounds or {}
  if isinstance(spec, Param):
    lo, hi = bounds.get(spec.name, (spec._lower, spec._upper))
    return Param(spec.field, spec.element, components=spec.components, lower=lo, upper=hi, name=spec.name)
  if not isinstance(spec, str):
    raise TypeError(f"parameters are 'field:element' strings or diffsim.Param objects, got {type(spec).__name__}")
  lo, hi = bounds.get(spec, (None, None))
  if ":" in spec:
    f, e = spec.split(":", 1)
    return Param(f, e, lower=lo, upper=hi, name=spec)
  return Param(spec, None, lower=lo, upper=hi, name=spec)


class _Names:
  """Resolves element names against a host model before any device work (see `_check_params`)."""

  def __init__(self, mjm):
    self.mjm = mjm

  name2id = Scene.name2id


def _host_field(mjm, field: str) -> np.ndarray:
  a = getattr(mjm.opt, field[4:]) if field.startswith("opt.") else getattr(mjm, field)
  return np.asarray(a, dtype=np.float64)


def _groups(p: Param, mjm, elements: Sequence[int]) -> list[list[int]]:
  """Elements of `p` that share one identified value: the dofs of a joint for dof fields (a ball
  joint's damping, a free joint's armature), since MJCF stores one value per joint and compiles it
  into every dof (`identified_spec` could not write per-dof values); else each element alone."""
  if p._elem_size != "nv":
    return [[int(e)] for e in elements]
  groups: dict[int, list[int]] = {}
  for e in elements:
    groups.setdefault(int(mjm.dof_jntid[e]), []).append(int(e))
  return list(groups.values())


def _param_columns(params: Sequence[Param], mjm) -> np.ndarray:
  """`(nlayout,)` identified coordinate of each coordinate of the parameters' `ParamLayout` (which has
  one per dof): the dofs of one joint map to one coordinate (see `_groups`)."""
  cols, off = [], 0
  for p in params:
    groups = _groups(p, mjm, p.elements)
    where = {e: g for g, grp in enumerate(groups) for e in grp}
    nc = len(p.components)
    cols += [off + where[e] * nc + i for e in p.elements for i in range(nc)]
    off += len(groups) * nc
  return np.array(cols, dtype=np.int32)


def _check_params(mjm, params: Sequence[Param]):
  """Name, bound and duplicate checks on the host model, so bad input fails before any kernel runs.

  Returns:
    `(nominal, lower, upper, dims)`: the flat MJCF values (float64) and bounds of the identified
    coordinates (one per joint for dof fields, see `_groups`), and each parameter's count of them.
  """
  names = [p.name for p in params]
  dup = sorted({n for n in names if names.count(n) > 1})
  if dup:
    raise ValueError(f"duplicate parameters {dup}; list each once")
  if not params:
    raise ValueError("no parameters to identify; pass e.g. params=['body_mass:ball'] (--param body_mass:ball)")
  nominals, lowers, uppers, dims = [], [], [], []
  for p in params:
    elems = p._resolve_elements(_Names(mjm))
    a = _host_field(mjm, p.field)
    rows = a.reshape(1, -1) if p._elem_size is None else a.reshape(a.shape[0], -1)
    nominal = []
    for grp in _groups(p, mjm, elems):
      for c in p.components:
        v = rows[grp, c]
        if np.any(v != v[0]):
          j = int(mjm.dof_jntid[grp[0]])
          raise ValueError(f"{p.name!r}: the dofs of joint {mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j)!r} "
                           f"have different values {v}; MJCF stores one value per joint, so sysid identifies one "
                           "(start from a model compiled from MJCF)")
        nominal.append(v[0])
    nominal = np.array(nominal)
    lo = -np.inf if p._lower is None else p._lower
    lo = 0.0 if (p._lower is None and p.field in _POSITIVE) else lo
    hi = np.inf if p._upper is None else p._upper
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
    nominals.append(nominal)
    lowers.append(lo)
    uppers.append(hi)
    dims.append(nominal.size)
  return np.concatenate(nominals), np.concatenate(lowers), np.concatenate(uppers), dims


def _labels(params: Sequence[Param], mjm) -> list[str]:
  """One label per identified scalar: the name, plus `[element]` (and `,component`) when a
  parameter has several values, e.g. `dof_damping[elbow_flex]`, `opt.gravity[2]`."""
  from .params import _OBJ

  out = []
  for p in params:
    groups = _groups(p, mjm, p._resolve_elements(_Names(mjm)))
    if len(groups) * len(p.components) == 1:
      out.append(p.name)
      continue
    for grp in groups:
      e = grp[0]
      if p._elem_size is None:
        elem = None
      elif p._elem_size == "nv":
        j = int(mjm.dof_jntid[e])
        elem = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j) or f"#{j}"
      else:
        elem = mujoco.mj_id2name(mjm, _OBJ[p._elem_size], e) or f"#{e}"
      for c in p.components:
        parts = ([elem] if elem is not None and len(groups) > 1 else []) + \
                ([str(c)] if len(p.components) > 1 or elem is None else [])
        out.append(f"{p.name}[{','.join(parts)}]")
  return out


# -- the problem ------------------------------------------------------------------------------------


def _as_recordings(data, mjm, resample_to_grid: bool,
                   max_steps_per_sample: int | None = None) -> list[_data.Recording]:
  items = data if isinstance(data, (list, tuple)) else [data]
  if not items:
    raise ValueError("no recorded data given")
  recs = []
  kw = dict(resample_to_grid=resample_to_grid, max_steps_per_sample=max_steps_per_sample)
  for it in items:
    if isinstance(it, _data.Recording):
      recs.append(_data.validate(it, mjm, **kw))
    elif isinstance(it, dict):
      recs.append(_data.validate(_data.Recording(**it), mjm, **kw))
    elif isinstance(it, (str, os.PathLike)):
      recs.extend(_data.load(it, mjm, **kw))
    else:
      raise TypeError(f"data must be paths, diffsim.data.Recording objects or dicts of arrays, got {type(it).__name__}")
  return recs


def _column_weights(mjm, recs, weights: dict | None, normalize: bool) -> dict[str, np.ndarray]:
  """Weight of every residual column, `{"qpos": (nv,), "qvel": (nv,), "sensordata": (ns,)}`.

  With `normalize`, columns in the same unit share one scale, the RMS spread of their measured
  signals: angles and lengths of `qpos` (rad, m) and of `qvel` (rad/s, m/s) separately, and each
  sensor on its own. Sharing matters: a joint that barely moves keeps the weight of the others
  (per-column scaling would blow its measurement noise up to the size of the real motion).
  """
  nv, ns = mjm.nv, mjm.nsensordata
  out = {"qpos": np.ones(nv), "qvel": np.ones(nv), "sensordata": np.ones(ns)}
  if normalize:
    # dof groups by unit: 0 rotational (rad), 1 translational (m)
    unit = np.zeros(nv, int)
    for j in range(mjm.njnt):
      t, da = int(mjm.jnt_type[j]), int(mjm.jnt_dofadr[j])
      if t == 2:
        unit[da] = 1
      elif t == 0:
        unit[da:da + 3] = 1
    groups = {"qpos": [np.nonzero(unit == u)[0] for u in (0, 1)],
              "qvel": [np.nonzero(unit == u)[0] for u in (0, 1)],
              "sensordata": [np.arange(mjm.sensor_adr[i], mjm.sensor_adr[i] + mjm.sensor_dim[i])
                             for i in range(mjm.nsensor)]}
    for kind in ("qpos", "qvel", "sensordata"):
      vals = [getattr(r, kind) for r in recs if getattr(r, kind) is not None]
      if not vals:
        continue
      allv = np.concatenate(vals)
      if kind == "qpos":  # spread per dof: hinge/slide coordinates; rotations count 1 rad
        var = np.ones(nv)
        for j in range(mjm.njnt):
          t, qa, da = int(mjm.jnt_type[j]), int(mjm.jnt_qposadr[j]), int(mjm.jnt_dofadr[j])
          if t >= 2:
            var[da] = allv[:, qa].var()
          elif t == 0:
            var[da:da + 3] = allv[:, qa:qa + 3].var(axis=0)
      else:
        # unmeasured sensor columns (a CSV with some sensors) are NaN
        finite = np.isfinite(allv)
        cnt = np.maximum(finite.sum(axis=0), 1)
        mean = np.where(finite, allv, 0.0).sum(axis=0) / cnt
        var = np.where(finite, (allv - mean) ** 2, 0.0).sum(axis=0) / cnt
        var[~finite.any(axis=0)] = np.nan
      for cols in groups[kind]:
        v = var[cols][np.isfinite(var[cols])]
        if v.size:
          rms = float(np.sqrt(np.mean(v)))
          out[kind][cols] = 1.0 / rms if rms > 1e-12 else 1.0
  for key, wgt in (weights or {}).items():
    wgt = float(wgt)
    if not np.isfinite(wgt) or wgt < 0:
      raise ValueError(f"weight {key!r} must be a finite number >= 0, got {wgt}")
    if key in ("qpos", "qvel", "sensordata", "sensor"):
      out["sensordata" if key == "sensor" else key] *= wgt
      continue
    kind, _, name = key.partition(":")
    if kind in ("qpos", "qvel") and name:
      j = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_JOINT, name)
      if j >= 0:
        n = {0: 6, 1: 3}.get(int(mjm.jnt_type[j]), 1)
        out[kind][mjm.jnt_dofadr[j]:mjm.jnt_dofadr[j] + n] *= wgt
        continue
    if kind in ("sensor", "sensordata") and name:
      s = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_SENSOR, name)
      if s >= 0:
        out["sensordata"][mjm.sensor_adr[s]:mjm.sensor_adr[s] + mjm.sensor_dim[s]] *= wgt
        continue
    raise ValueError(f"unknown weight key {key!r}: use 'qpos', 'qvel', 'sensordata', 'qpos:<joint>', "
                     "'qvel:<joint>' or 'sensor:<sensor>'")
  return out


@dataclass
class _Normal:
  """Gauss-Newton normal equations `J^T J`, `J^T r` of every start, in block-arrow form.

  Unknowns per start: the parameters `t` (`n`), then one nuisance block `v` (`k`, an initial state)
  per free world (`m` of them), which couple to the parameters but not to each other.
  """

  cost: np.ndarray  # (nstart,)
  Htt: np.ndarray  # (nstart, n, n)
  Htv: np.ndarray  # (nstart, m, n, k)
  Hvv: np.ndarray  # (nstart, m, k, k)
  gt: np.ndarray  # (nstart, n)
  gv: np.ndarray  # (nstart, m, k)
  rho: np.ndarray  # (nstart,) lag-1 autocorrelation of the residuals along time (see `_data_std`)
  changes: np.ndarray  # (nstart,) constraint-set changes along the nominal trajectories (see `linearize`)

  def take(self, s: int, other: "_Normal") -> None:
    """Copies start `s` of `other` into this one."""
    for f in ("cost", "Htt", "Htv", "Hvv", "gt", "gv", "rho", "changes"):
      getattr(self, f)[s] = getattr(other, f)[s]

  def g(self, s: int) -> np.ndarray:
    return np.concatenate([self.gt[s], self.gv[s].reshape(-1)])

  def quad(self, s: int, d: np.ndarray) -> float:
    """`d^T H d` for start `s`."""
    n, (m, k) = self.gt.shape[1], self.gv.shape[1:]
    dt, dv = d[:n], d[n:].reshape(m, k)
    return float(dt @ self.Htt[s] @ dt + 2.0 * np.einsum("i,mik,mk->", dt, self.Htv[s], dv)
                 + np.einsum("mi,mij,mj->", dv, self.Hvv[s], dv))

  def diag(self, s: int) -> np.ndarray:
    return np.concatenate([np.diag(self.Htt[s]), np.einsum("mkk->mk", self.Hvv[s]).reshape(-1)])

  def solve(self, s: int, damp: np.ndarray) -> np.ndarray:
    """Solves `(H + diag(damp)) d = -g` for start `s` by eliminating the nuisance blocks (Schur)."""
    n, (m, k) = self.gt.shape[1], self.gv.shape[1:]
    At = self.Htt[s] + np.diag(damp[:n])
    if m == 0:
      return _solve(At, -self.gt[s])
    Av = self.Hvv[s] + damp[n:].reshape(m, k)[:, :, None] * np.eye(k)
    Avi_Hvt = np.linalg.solve(Av, np.transpose(self.Htv[s], (0, 2, 1)))  # (m, k, n)
    Avi_gv = np.linalg.solve(Av, self.gv[s][..., None])[..., 0]  # (m, k)
    Sc = At - np.einsum("mik,mkj->ij", self.Htv[s], Avi_Hvt)
    rhs = -self.gt[s] + np.einsum("mik,mk->i", self.Htv[s], Avi_gv)
    dt = _solve(Sc, rhs)
    dv = -Avi_gv - np.einsum("mkj,j->mk", Avi_Hvt, dt)
    return np.concatenate([dt, dv.reshape(-1)])

  def schur(self, s: int) -> np.ndarray:
    """`(n, n)` parameter block of `J^T J` with the nuisance unknowns eliminated: the inverse of the
    parameters' covariance (up to the residual variance)."""
    m, k = self.gv.shape[1:]
    if m == 0:
      return self.Htt[s].copy()
    d = np.einsum("mkk->mk", self.Hvv[s])
    # a nuisance direction with no effect at all is pinned (it cannot inform the parameters)
    reg = np.where(d > 0, 0.0, 1.0)[:, :, None] * np.eye(k) + 1e-12 * d.max(initial=0.0) * np.eye(k)
    Avi_Hvt = np.linalg.solve(self.Hvv[s] + reg, np.transpose(self.Htv[s], (0, 2, 1)))
    return self.Htt[s] - np.einsum("mik,mkj->ij", self.Htv[s], Avi_Hvt)


def _solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
  try:
    return np.linalg.solve(A, b)
  except np.linalg.LinAlgError:
    return np.linalg.lstsq(A, b, rcond=None)[0]


@dataclass
class _Segment:
  rec: int  # recording index
  row0: int  # first row (initial state)
  row1: int  # last row (inclusive)


class _Problem:
  """Worlds, buffers and kernels of one identification problem (allocated once)."""

  def __init__(self, model, recs, params, *, weights, normalize, shooting, nstart, device, solver, central, eps,
               fit_qvel0=None, fit_qpos0=False, capture=True):
    mjm = copy_mjmodel(model) if isinstance(model, mujoco.MjModel) else _load_mjmodel(model)
    self.mjm = mjm
    self.recs = recs
    dt = float(mjm.opt.timestep)
    self.steps = [_data.sim_steps(r.time, dt, source=r.source) for r in recs]
    if shooting is not None:
      if not isinstance(shooting, (int, np.integer)) or shooting < 1:
        raise ValueError(f"shooting must be a positive number of samples per segment, got {shooting!r}")
      missing = [r.source for r in recs if r.qpos is None]
      if missing:
        raise ValueError(f"multiple shooting restarts from measured states, but {missing} have no qpos")
    segs = []
    for i, r in enumerate(recs):
      k = r.nrow - 1 if shooting is None else int(shooting)
      segs += [_Segment(i, r0, min(r0 + k, r.nrow - 1)) for r0 in range(0, r.nrow - 1, k)]
    self.segs = segs
    self.nseg = len(segs)
    self.nstart = int(nstart)
    self.nworld = self.nstart * self.nseg
    with_sensors = any(r.sensordata is not None for r in recs)
    # one extra step so the last row's sensors are computed with its own control, as mj_step does
    self.nstep = max(int(self.steps[s.rec][s.row1] - self.steps[s.rec][s.row0]) for s in segs) + int(with_sensors)
    self.nsample = max(s.row1 - s.row0 + 1 for s in segs)
    nq, nv, na, nu, ns = mjm.nq, mjm.nv, mjm.na, mjm.nu, mjm.nsensordata
    self.nres = 2 * nv + ns
    colw = _column_weights(mjm, recs, weights, normalize)

    # host arrays of one start (nseg worlds), tiled over starts below
    G, S, N = self.nseg, self.nsample, self.nstep
    ctrl = np.zeros((G, N, nu))
    qpos0 = np.tile(mjm.qpos0, (G, 1))
    qvel0 = np.zeros((G, nv))
    act0 = np.zeros((G, na))
    slot_step = np.full((G, S), -1, np.int32)
    meas = {"qpos": np.zeros((G, S, nq)), "qvel": np.zeros((G, S, nv)), "sensordata": np.zeros((G, S, ns))}
    wgt = np.zeros((G, S, self.nres))
    # initial states solved for with the parameters (nuisance unknowns of the least squares)
    free = np.zeros(G, bool)  # velocity
    free_q = np.zeros(G, bool)  # position
    for g, sg in enumerate(segs):
      r, steps = recs[sg.rec], self.steps[sg.rec]
      rows = np.arange(sg.row0, sg.row1 + 1)
      rel = steps[rows] - steps[sg.row0]
      slot_step[g, :len(rows)] = rel
      if nu:
        for a, b in zip(range(sg.row0, sg.row1), range(sg.row0 + 1, sg.row1 + 1)):
          ctrl[g, steps[a] - steps[sg.row0]:steps[b] - steps[sg.row0]] = r.ctrl[a]
        ctrl[g, rel[-1]:] = r.ctrl[sg.row1]
      if r.qpos is not None:
        qpos0[g] = r.qpos[sg.row0]
      elif r.qpos0 is not None:
        qpos0[g] = r.qpos0
      measured = r.qvel is not None or (sg.row0 == 0 and r.qvel0 is not None)
      if r.qvel is not None:
        qvel0[g] = r.qvel[sg.row0]
      elif sg.row0 == 0 and r.qvel0 is not None:
        qvel0[g] = r.qvel0
      elif r.qpos is not None:
        qvel0[g] = _data.estimate_qvel(r, mjm, sg.row0)  # the first guess
      free[g] = (not measured) if fit_qvel0 is None else bool(fit_qvel0)
      free_q[g] = bool(fit_qpos0) and r.qpos is not None
      if r.act is not None:
        act0[g] = r.act[sg.row0]
      n = len(rows)
      # row 0 is the initial state itself, unless that is solved for: then it is a measurement too
      if r.qpos is not None:
        meas["qpos"][g, :n] = r.qpos[rows]
        wgt[g, 0 if free_q[g] else 1:n, :nv] = colw["qpos"]
      if r.qvel is not None:
        meas["qvel"][g, :n] = r.qvel[rows]
        wgt[g, 0 if free[g] else 1:n, nv:2 * nv] = colw["qvel"]
      if r.sensordata is not None:
        mask = np.ones(ns, bool) if r.sensor_mask is None else r.sensor_mask
        meas["sensordata"][g, :n] = np.where(mask, r.sensordata[rows], 0.0)
        first = 0 if sg.row0 == 0 else 1  # a segment's first row is the previous segment's last
        wgt[g, first:n, 2 * nv:] = colw["sensordata"] * mask
    for msg in filter(None, (_data.initial_state_warning(r) for r in recs)):
      warnings.warn(msg, stacklevel=3)
    self.weights = wgt
    self.nresidual = int(np.count_nonzero(wgt)) * self.nstart
    # nuisance block of a world: [dqpos (nv, tangent) if any position is free][qvel (nv) if any velocity is]
    self.free_v, self.free_q = free, free_q
    self.blk_q = nv if free_q.any() else 0
    self.blk = self.blk_q + (nv if free.any() else 0)
    self.free = free | free_q  # worlds with a nuisance block
    self.free_index = np.cumsum(self.free) - 1
    self.nfree = int(self.free.sum())
    self.qpos0_host = np.concatenate([qpos0] * self.nstart, axis=0)
    self.qvel0_host = np.concatenate([qvel0] * self.nstart, axis=0)
    self.meas_host = meas
    self.slot_step_host = slot_step

    # device
    self.scene = Scene(mjm, nworld=self.nworld, device=device, solver=solver)
    self.params = params
    # controls are data here: no Jacobian columns (and lanes) for them
    self.ro = Rollout(self.scene, self.nstep, params=params, differentiable=True, central=central,
                      ctrl_jacobian=False, eps=eps)
    self.ro.reserve_linearization()  # Gauss-Newton linearizes it inside captured graphs
    self.layout = self.ro.layout
    # identified coordinates: the layout's, except that the dofs of one joint share one (see _groups);
    # the rollout perturbs each dof in its own lane and `linearize` sums their Jacobian columns
    self.col_map = _param_columns(params, mjm)
    self.nparam = int(self.col_map.max(initial=-1)) + 1
    self.tied = self.nparam < self.layout.nparam
    self._capture = capture
    dev = self.scene.device
    tile = lambda a: np.concatenate([a] * self.nstart, axis=0)
    f32 = lambda a, **kw: wp.array(np.ascontiguousarray(tile(a)).astype(np.float32), dtype=float, device=dev, **kw)
    self.ctrl = f32(ctrl)
    self.act0 = f32(act0)
    self.qpos0 = f32(qpos0, requires_grad=True)
    self.qvel0 = f32(qvel0, requires_grad=True)
    # unknowns per start: theta, then a nuisance block per free world
    self.nunknown = self.nparam + self.nfree * self.blk
    # columns of the residual Jacobian `rjac` as the rollout forms it: a parameter column per layout
    # coordinate (each dof), then the world's nuisance block
    self.ncol = self.layout.nparam + self.blk
    # initial tangents of the forward-mode rollout: a nuisance column moves its world's initial state
    dx0 = np.zeros((self.nworld, self.scene.nx, self.ncol), np.float32)
    n, bq = self.layout.nparam, self.blk_q
    for w in range(self.nworld):
      if free_q[w % G]:
        dx0[w, :nv, n:n + nv] = np.eye(nv)
      if free[w % G]:
        dx0[w, nv:2 * nv, n + bq:n + bq + nv] = np.eye(nv)
    self.dx0 = wp.array(dx0, dtype=float, device=dev)
    self.slot_step = wp.array(tile(slot_step), dtype=int, device=dev)
    step_slot = np.full((self.nworld, N + 1), -1, np.int32)
    for w, row in enumerate(tile(slot_step)):
      for j, k in enumerate(row):
        if k >= 0:
          step_slot[w, k] = j
    self.step_slot = wp.array(step_slot, dtype=int, device=dev)
    self.meas = {k: f32(v) for k, v in meas.items()}
    self.weight = f32(wgt)
    self.res = wp.zeros((self.nworld, S, self.nres), dtype=float, device=dev, requires_grad=True)
    self.rjac = wp.zeros((self.nworld, S, self.nres, self.ncol), dtype=float, device=dev)
    self.dx = [wp.zeros((self.nworld, self.scene.nx, self.ncol), dtype=float, device=dev) for _ in range(2)]  # in, out
    self.world_start = wp.array(np.repeat(np.arange(self.nstart, dtype=np.int32), self.nseg), dtype=int, device=dev)
    self.col_map_dev = wp.array(self.col_map, dtype=int, device=dev)
    self.cost_dev = wp.zeros(self.nstart, dtype=float, device=dev, requires_grad=True)
    self._ones = wp.ones(self.nstart, dtype=float, device=dev)  # d(total)/d(cost of each start)
    self.theta_dev = wp.zeros((self.nstart, self.nparam), dtype=float, device=dev)
    self.grad_dev = wp.zeros((self.nstart, self.nparam), dtype=float, device=dev)
    # constraint-set changes along each world's nominal trajectory in the last linearized rollout
    self.changes = wp.zeros(self.nworld, dtype=int, device=dev)
    self._last_signature = wp.zeros(self.nworld, dtype=int, device=dev)
    self.nrollout = 0
    # LM's linearized rollout (step Jacobians + tangent-linear sweep) is a few graph replays after its
    # first call; its step is one graph replayed nstep times, so capturing costs one step, not nstep.
    # jacobian="directional" builds a forward-mode rollout on first use.
    self._lin = Replay(dev, self._stages(), capture)
    self._fm = {}  # forward-mode rollouts and their replays by central differences (see `forward_mode`)
    self._grad = None  # Adam's tape gradient, captured on first use

  # -- evaluation -----------------------------------------------------------------------------------

  def set_theta(self, theta: np.ndarray) -> None:
    """Writes `(nstart, nparam)` identified values into the worlds of each start."""
    self.theta_dev.assign(np.asarray(theta, dtype=np.float32))
    self._scatter()

  def x0(self, theta0: np.ndarray) -> np.ndarray:
    """Unknowns `(nstart, nunknown)`: `theta0`, then per free world its nuisance block: a tangent
    offset of the initial position (zero) and the initial velocity (the measured or estimated one)."""
    nv, G = self.scene.nv, self.nseg
    blocks = np.zeros((self.nfree, self.blk))
    if self.blk > self.blk_q:
      blocks[:, self.blk_q:] = self.qvel0_host[:G][self.free]
    return np.concatenate([theta0, np.tile(blocks.reshape(-1), (theta0.shape[0], 1))], axis=1)

  def initial_state(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Initial `(qpos (nseg, nq), qvel (nseg, nv))` of one start's worlds given its unknowns `(nunknown,)`."""
    nv, G = self.scene.nv, self.nseg
    qpos, qvel = self.qpos0_host[:G].copy(), self.qvel0_host[:G].copy()
    blocks = np.asarray(x[self.nparam:], dtype=np.float64).reshape(self.nfree, self.blk)
    for g in np.nonzero(self.free)[0]:
      b = blocks[self.free_index[g]]
      if self.free_q[g]:
        mujoco.mj_integratePos(self.mjm, qpos[g], b[:nv].copy(), 1.0)
      if self.free_v[g]:
        qvel[g] = b[self.blk_q:]
    return qpos, qvel

  def set_x(self, x: np.ndarray) -> None:
    """Writes the unknowns `(nstart, nunknown)`: parameters and free initial states."""
    x = np.asarray(x, dtype=np.float64)
    self.set_theta(x[:, :self.nparam])
    if self.nfree:
      states = [self.initial_state(xs) for xs in x]
      self.qpos0.assign(np.concatenate([q for q, _ in states]).astype(np.float32))
      self.qvel0.assign(np.concatenate([v for _, v in states]).astype(np.float32))

  def _scatter(self) -> None:
    for p, off in zip(self.layout.params, self.layout.offsets):
      wp.launch(_scatter_theta, dim=(self.nworld, p.dim), device=self.scene.device,
                inputs=[self.theta_dev, self.col_map_dev, int(off), self.world_start], outputs=[p.value])

  def _rollout(self):
    return self.ro(self.ctrl, qpos0=self.qpos0, qvel0=self.qvel0, act0=self.act0)

  def _stages(self) -> list:
    """The linearized rollout, residuals and their Jacobian `rjac` by the tangent-linear sweep, as
    stages to capture (`Rollout.stages`)."""
    stages, traj = self.ro.stages(self.ctrl, qpos0=self.qpos0, qvel0=self.qvel0, act0=self.act0,
                                  linearize=True, after_step=self._propagate_step)

    def start():
      wp.copy(self.dx[0], self.dx0)
      self.rjac.zero_()
      self.changes.zero_()

    def finish():
      self.traj = traj
      self._residuals(traj)

    return [(start, 1)] + stages + [(finish, 1)]

  def _propagate_step(self, k0: int, count: wp.array) -> None:
    """One step of the tangent-linear sweep (`rjac` = d(residual)/d(unknowns) from the step
    Jacobians), run right after the rollout forms step `k0 + count[0]`'s Jacobians."""
    s = self.scene
    J, Sj = self.ro.jacobians()
    wp.launch(_tangent_linear, dim=(self.nworld, self.ncol), device=s.device,
              inputs=[s.nv, s.nu, self.layout.nparam, k0, count, self.nstep, self.step_slot, J, Sj, self.weight,
                      self.dx[0]],
              outputs=[self.dx[1], self.rjac])
    wp.copy(self.dx[0], self.dx[1])
    self._count_changes(self.ro, k0, count)

  def _count_changes(self, ro: Rollout, k0: int, count: wp.array) -> None:
    d = ro.fd.data  # the lane worlds' MJWarp Data, nominal lane first
    wp.launch(_constraint_changes, dim=self.nworld, device=self.scene.device,
              inputs=[k0, count, d.nefc, d.efc.type], outputs=[self._last_signature, self.changes])

  @property
  def forward_mode(self) -> Rollout:
    """jacobian="directional": a forward-mode rollout with a lane per column of the residual
    Jacobian (parameters, then the world's nuisance block), built on first use, with the
    differences of `ro` (central or forward)."""
    return self._forward_mode(self.ro.fd.central)[0]

  def _forward_mode(self, central: bool) -> tuple[Rollout, Replay]:
    """The forward-mode rollout with central or forward differences and its replay, built on first
    use (jacobian="directional-fd": forward differences whatever `ro`'s, the convergence test's
    second opinion, see `_lm`). It needs no more model rows per world than `ro`
    (`1 + ncol <= 1 + nx + nparam` lanes), so `ro`'s graphs stay valid."""
    if central not in self._fm:
      fd = self.ro.fd
      ro = Rollout(self.scene, self.nstep, params=self.params, central=central, eps=fd.eps, ctrl_jacobian=False,
                   directions=self.ncol)
      self._fm[central] = ro, Replay(self.scene.device, self._directional_stages(ro), self._capture)
    return self._fm[central]

  def _directional_stages(self, ro: Rollout) -> list:
    """Forward-mode rollout, residuals and their Jacobian `rjac` from the tangents, as stages to capture."""
    stages, traj = ro.stages(self.ctrl, qpos0=self.qpos0, qvel0=self.qvel0, act0=self.act0, linearize=True,
                             tangent0=self.dx0, after_step=lambda k0, count: self._count_changes(ro, k0, count))
    dx, ds = ro.tangents()

    def finish():
      self.traj = traj
      self._residuals(traj)
      wp.launch(_residual_jacobian, dim=(self.nworld, self.nsample, self.ncol), device=self.scene.device,
                inputs=[self.scene.nv, self.slot_step, dx, ds, self.weight], outputs=[self.rjac])

    return [(self.changes.zero_, 1)] + stages + [(finish, 1)]

  def _replay(self, ro: Rollout, replay: Replay) -> None:
    self.nrollout += 1
    if self.layout.inertial:
      ro.update_constants()  # graphs replay the parameter writes, not set_const
    replay()

  def _residuals(self, traj) -> None:
    s = self.scene
    wp.launch(_residuals, dim=(self.nworld, self.nsample), device=s.device,
              inputs=[s.mjm.njnt, s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, self.slot_step, traj.qpos, traj.qvel,
                      traj.sensordata, self.meas["qpos"], self.meas["qvel"], self.meas["sensordata"], self.weight],
              outputs=[self.res])

  def _costs(self, r: np.ndarray) -> np.ndarray:
    c = 0.5 * np.einsum("gi,gi->g", r.reshape(self.nstart, -1), r.reshape(self.nstart, -1))
    return np.where(np.isfinite(c), c, np.inf)

  def linearize(self, x: np.ndarray, *, jacobian: str = "forward") -> "_Normal":
    """Cost and normal equations of each start at the unknowns `x` `(nstart, nunknown)`.

    One linearized rollout. The nuisance blocks of different worlds do not interact, so `J^T J`
    is block-arrow shaped: a parameter block, one block per free world, and their couplings.

    Also counts, per start, the steps at which a world's nominal constraint rows changed (a limit
    or contact row appearing or vanishing; not a row changing regime, a kink). There the step map
    jumps (a limit's force starts at a finite value, from its damping), and the trajectory's
    dependence on the parameters has a term from the jump moving in time, which step Jacobians,
    formed from lanes on one side of the switch, leave out (see `_lm`).
    """
    self.set_x(x)
    self.last_x = np.array(x, dtype=np.float64, copy=True)
    if jacobian == "tape":
      r, G = self._jacobian_tape()
      changes = np.zeros(self.nworld, np.int64)
    else:
      if jacobian in ("directional", "directional-fd"):
        self._replay(*self._forward_mode(self.ro.fd.central and jacobian == "directional"))
      else:
        self._replay(self.ro, self._lin)
      r = self.res.numpy().astype(np.float64)
      G = self.rjac.numpy().astype(np.float64)
      changes = self.changes.numpy().astype(np.int64)
    cost = self._costs(r)
    n, k, S = self.nparam, self.blk, self.nstart
    # residual autocorrelation between consecutive samples of a world, pooled over its signals
    rt = r.reshape(S, self.nseg, self.nsample, self.nres)
    with np.errstate(invalid="ignore", over="ignore"):
      num = np.einsum("gwti,gwti->g", rt[:, :, 1:], rt[:, :, :-1])
      den = np.einsum("gwti,gwti->g", rt[:, :, :-1], rt[:, :, :-1])
    rho = np.where(np.isfinite(num) & (den > 0), num / np.where(den > 0, den, 1.0), 0.0)
    changes = changes.reshape(S, self.nseg).sum(axis=1)
    G = G.reshape(self.nworld, -1, self.ncol)
    if self.tied:  # chain rule: an identified coordinate moves every dof it stands for
      T = np.zeros((self.layout.nparam, n))
      T[np.arange(self.layout.nparam), self.col_map] = 1.0
      G = np.concatenate([G[..., :self.layout.nparam] @ T, G[..., self.layout.nparam:]], axis=-1)
    r = r.reshape(self.nworld, -1)
    bad = ~np.isfinite(np.repeat(cost, self.nseg))
    G[bad] = 0.0
    r[bad] = 0.0
    Hw = np.einsum("wri,wrj->wij", G, G)  # (nworld, ncol, ncol)
    gw = np.einsum("wri,wr->wi", G, r)
    Htt = Hw[:, :n, :n].reshape(S, self.nseg, n, n).sum(axis=1)
    gt = gw[:, :n].reshape(S, self.nseg, n).sum(axis=1)
    free = np.tile(self.free, S)
    Htv = Hw[free, :n, n:].reshape(S, self.nfree, n, k)
    Hvv = Hw[free, n:, n:].reshape(S, self.nfree, k, k)
    gv = gw[free, n:].reshape(S, self.nfree, k)
    return _Normal(cost, Htt, Htv, Hvv, gt, gv, rho, changes)

  def _jacobian_tape(self):
    """Residual Jacobian by reverse mode: one backward pass per residual block (sample, signal)."""
    self.nrollout += 1
    with wp.Tape() as tape:
      self.traj = self._rollout()
      self._residuals(self.traj)
    r = self.res.numpy().astype(np.float64)
    G = np.zeros((self.nworld, self.nsample, self.nres, self.ncol))
    active = np.nonzero(self.weights.reshape(-1, self.nres).any(axis=0))[0]
    slots = np.nonzero(self.weights.any(axis=(0, 2)))[0]
    for j in slots:
      for i in active:
        tape.zero()
        self.res.grad.zero_()
        wp.launch(_seed_residual, dim=self.nworld, inputs=[int(j), int(i)], outputs=[self.res.grad],
                  device=self.scene.device)
        tape.backward()
        for p, off in zip(self.layout.params, self.layout.offsets):
          G[:, j, i, off:off + p.dim] = p.value.grad.numpy()
        n, nv, bq = self.layout.nparam, self.scene.nv, self.blk_q
        if bq:
          G[:, j, i, n:n + nv] = self._tangent(self.qpos0.grad.numpy()) * np.tile(self.free_q, self.nstart)[:, None]
        if self.blk > bq:
          G[:, j, i, n + bq:] = self.qvel0.grad.numpy() * np.tile(self.free_v, self.nstart)[:, None]
    tape.zero()
    return r, G

  def _tangent(self, gq: np.ndarray) -> np.ndarray:
    """d/d(tangent qpos0) `(nworld, nv)` from d/d(qpos0) `(nworld, nq)` (quaternions: 0.5 Im(q^-1 g))."""
    m, q = self.mjm, self.qpos0.numpy().astype(np.float64)
    out = np.zeros((gq.shape[0], m.nv))
    for j in range(m.njnt):
      t, qa, da = int(m.jnt_type[j]), int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j])
      if t == 0:
        out[:, da:da + 3] = gq[:, qa:qa + 3]
        qa, da = qa + 3, da + 3
      if t in (0, 1):
        for w in range(gq.shape[0]):
          qi = np.array([q[w, qa], -q[w, qa + 1], -q[w, qa + 2], -q[w, qa + 3]])
          prod = np.zeros(4)
          mujoco.mju_mulQuat(prod, qi, gq[w, qa:qa + 4].astype(np.float64))
          out[w, da:da + 3] = 0.5 * prod[1:]
      else:
        out[:, da] = gq[:, qa]
    return out

  def gradient(self) -> np.ndarray:
    """Cost of each start at `theta_dev` and its gradient into `grad_dev` (tape, one backward pass).

    The rollout on the tape and its backward pass are captured once and replayed (launched from
    Python, an MJWarp step costs milliseconds on the CPU)."""
    self._scatter()
    if self.layout.inertial:
      self.ro.update_constants()  # graphs replay the parameter writes, not set_const
    if self._grad is None:
      self._grad = Replay(self.scene.device, self._gradient_stage, self._capture)
    self.nrollout += 1
    self._grad()
    c = self.cost_dev.numpy().astype(np.float64)
    return np.where(np.isfinite(c), c, np.inf)

  def _gradient_stage(self) -> None:
    s = self.scene
    self.cost_dev.zero_()
    with wp.Tape() as tape:
      self.traj = self._rollout()
      self._residuals(self.traj)
      wp.launch(_half_sum_squares, dim=(self.nworld, self.nsample, self.nres), device=s.device,
                inputs=[self.res, self.world_start], outputs=[self.cost_dev])
    tape.backward(grads={self.cost_dev: self._ones})
    self.grad_dev.zero_()
    for p, off in zip(self.layout.params, self.layout.offsets):
      wp.launch(_gather_grad, dim=(self.nworld, p.dim), device=s.device,
                inputs=[p.value.grad, self.col_map_dev, int(off), self.world_start], outputs=[self.grad_dev])
    tape.zero()

  def samples(self, start: int = 0) -> list[dict[str, np.ndarray]]:
    """Simulated signals of the last rollout at every recorded row, per recording (start `start`)."""
    out = [{k: np.full_like(getattr(r, k), np.nan) for k in r.kinds} for r in self.recs]
    qpos, qvel, sens = (a.numpy() for a in (self.traj.qpos, self.traj.qvel, self.traj.sensordata))
    for g, sg in enumerate(self.segs):
      w = start * self.nseg + g
      for j, row in enumerate(range(sg.row0, sg.row1 + 1)):
        if j == 0 and sg.row0 > 0:
          continue  # this row belongs to the previous segment
        k = self.slot_step_host[g, j]
        for kind, src in (("qpos", qpos), ("qvel", qvel), ("sensordata", sens)):
          if kind in out[sg.rec]:
            out[sg.rec][kind][row] = src[w, k]
    return out


# -- result -----------------------------------------------------------------------------------------


@dataclass
class SysIdResult:
  """Outcome of `identify` (scipy-style).

  Attributes:
    x: identified value by parameter name (float, or `(dim,)` array for vector parameters).
    std: standard deviation by name (same shapes; `inf` where the data do not determine it): the
      data's (`std_data`) with what the solver leaves open added in quadrature, the Jacobians'
      disagreement and the step still proposed at the end (see `diffsim.sysid`, "Confidence").
    std_data: the part of `std` the data support, by name (the misfit left, correlated along time).
    x0: initial guess by name (of the best start, with `starts`).
    fun: final cost `0.5 |r|^2` (weighted residuals).
    fun0: cost at the initial guess (of the best start, like `x0` and `history`).
    nit: iterations.
    nfev: rollouts run.
    history: `{"fun": (nit + 1,), "x": (nit + 1, nparam), "lambda": (nit + 1,)}` of the best start.
    success: whether the solver converged to a minimum: a stopping test fired and, where the
      trajectories cross constraint switches, the other Jacobian found no step beyond the
      tolerances that lowers the cost (see `diffsim.sysid`, "Convergence"). `False` for a stall,
      with a message that says what to try.
    message: why the solver stopped, plus identifiability warnings.
    labels: `(nparam,)` name of each identified scalar (dof fields: one per joint, as MJCF stores them).
    theta, theta0, theta_std, theta_std_data: `(nparam,)` flat values.
    cov: `(nparam, nparam)` covariance; corr: its correlation matrix.
    cond: condition number of the scaled Gauss-Newton Hessian.
    warnings: identifiability warnings.
    starts_fun: `(nstart,)` final cost of every start; starts_fun0: `(nstart,)` their initial costs.
    wall_time: seconds spent solving (the first iteration includes kernel compilation when the
      cache is cold).
    nresidual: number of weighted residuals.
    sim_worlds: MJWarp worlds the solver's differentiated rollout steps (worlds times lanes).
    solver: `"lm"` or `"adam"`.
    jacobian: the residual Jacobian LM used last (`"forward"`, `"directional"`, `"tape"`).
    constraint_changes: steps at which the nominal trajectories' constraint rows changed (limits or
      contacts engaging or releasing), summed over the worlds, at the solution.
    bounds: `{name: (lower, upper)}`.
    initial_qpos: `(nq,)` initial position of each recording (row 0, or solved for: `fit_qpos0`).
    initial_qvel: `(nv,)` initial velocity of each recording: measured, or solved for together
      with the parameters when the recording has no `qvel` (see `fit_qvel0`).
    save_error: why writing `identify(out=...)`'s files failed, or `None` (the files were written).
  """

  x: dict
  std: dict
  x0: dict
  fun: float
  fun0: float
  nit: int
  nfev: int
  history: dict
  success: bool
  message: str
  labels: list
  theta: np.ndarray
  theta0: np.ndarray
  theta_std: np.ndarray
  cov: np.ndarray
  corr: np.ndarray
  cond: float
  warnings: list
  starts_fun: np.ndarray
  wall_time: float
  nresidual: int
  starts_fun0: np.ndarray = field(default_factory=lambda: np.zeros(0))
  sim_worlds: int = 0
  solver: str = "lm"
  std_data: dict = field(default_factory=dict)
  theta_std_data: np.ndarray = field(default_factory=lambda: np.zeros(0))
  jacobian: str = "forward"
  constraint_changes: int = 0
  bounds: dict = field(default_factory=dict)
  initial_qpos: list = field(default_factory=list)
  initial_qvel: list = field(default_factory=list)
  save_error: str | None = None
  _plot: dict = field(default_factory=dict, repr=False)
  _source: object = field(default=None, repr=False)
  _params: list = field(default_factory=list, repr=False)

  def summary(self) -> str:
    """One line: cost before and after, iterations, time, and each parameter with its std."""
    parts = []
    for name in self.x:
      v, s, v0 = (np.atleast_1d(d[name]) for d in (self.x, self.std, self.x0))
      fmt = lambda a: ", ".join(f"{e:.6g}" for e in a) if a.size > 1 else f"{a[0]:.6g}"
      # a std that the data alone would put below half its value comes mostly from the solver
      sdata = np.atleast_1d(self.std_data.get(name, s))
      note = " (Jacobian-limited)" if np.any(np.isfinite(s) & (sdata < 0.5 * s)) else ""
      parts.append(f"{name} = {fmt(v)} ± {fmt(s)}{note} (from {fmt(v0)})")
    status = "converged" if self.success else "NOT converged"
    if np.size(self.starts_fun0) > 1:
      status += f" (best of {np.size(self.starts_fun0)} starts)"
    return (f"sysid {status}: cost {self.fun0:.4g} -> {self.fun:.4g} in {self.nit} iterations "
            f"({self.wall_time:.1f} s); " + "; ".join(parts))

  def save(self, out, *, plots: bool = True, truth: dict | None = None) -> dict[str, str]:
    """Writes `params.json`, the identified `model.xml` and PNG plots into folder `out`.

    Every file goes through a temporary file and a rename, so a failure leaves earlier files intact.
    `params.json` comes first (a failure there raises at once); when `model.xml` cannot be written
    (the identified values do not compile, e.g. a body inertia violating the triangle inequality),
    the plots are still written, and then a `ValueError` says why. The results of an earlier run in
    `out` are replaced, and its plots that this run does not draw (`signals_2.png` of a run with
    more recordings, or all of them with `plots=False`) are removed, so the folder holds one run.
    A folder whose `model.xml` is the input model is refused before anything is written.

    Args:
      out: folder (created if missing).
      plots: write `signals.png` (measured vs simulated before/after), `cost.png`, `params.png`.
      truth: `{name: value}` drawn as reference lines in `params.png` (for synthetic data).

    Returns:
      `{kind: path}` with kinds `params_json`, `model`, `signals` (`signals_1`, ...), `cost`,
      `params_plot`.
    """
    out = os.fspath(out)
    _check_out(out, self._source)
    earlier = os.path.isfile(os.path.join(out, "params.json"))
    os.makedirs(out, exist_ok=True)
    files = {}
    path = os.path.join(out, "params.json")
    _data._atomic_write(path, lambda f: f.write(json.dumps(self.to_json(), indent=2).encode()))
    files["params_json"] = path
    failed = None
    if self._source is not None and not isinstance(self._source, mujoco.MjModel):
      path = os.path.join(out, "model.xml")
      try:
        write_mjcf(self._source, self._params, self.theta, path)
        files["model"] = path
      except ValueError as e:
        failed = e
    else:
      warnings.warn("the model was given as an MjModel, which cannot be written back as MJCF; pass the MJCF "
                    "path to identify() to get model.xml", stacklevel=2)
    if plots and self._plot:
      from . import plot

      files.update(plot.sysid_plots(self, out, truth=truth))
    if earlier:  # an earlier run's plots that this one did not redraw would pass for this run's
      from .plot import PLOT_FILES

      written = {os.path.basename(f) for f in files.values()}
      for name in PLOT_FILES:
        if name not in written and os.path.isfile(os.path.join(out, name)):
          os.remove(os.path.join(out, name))
    if failed is not None:
      raise ValueError(f"model.xml not written: {failed} ({', '.join(os.path.basename(f) for f in files.values())} "
                       f"written to {out})")
    return files

  def to_json(self) -> dict:
    def conv(a):
      a = np.atleast_1d(np.asarray(a, dtype=np.float64))
      vals = [float(e) if np.isfinite(e) else None for e in a]
      return vals[0] if len(vals) == 1 else vals

    return {name: {"initial": conv(self.x0[name]), "value": conv(self.x[name]), "std": conv(self.std[name]),
                   "std_data": conv(self.std_data.get(name, self.std[name])),
                   "lower": conv(self.bounds[name][0]), "upper": conv(self.bounds[name][1])}
            for name in self.x}


# -- confidence -------------------------------------------------------------------------------------


# Identifiability thresholds on the parameters' information scaled to a unit diagonal (the Gram
# matrix of the unit-normalized Jacobian columns). The columns are float32 forward differences of
# MJWarp rollouts, each off by a relative delta ~ 1e-4..1e-3, so a combination v that the data do
# not depend on at all (true J v = 0, |v| = 1) still shows an eigenvalue |E v|^2 ~ delta^2, up to
# 1e-6 (a pendulum's armature and hinge-axis inertia, which act only as their sum: 4e-8), and a
# small singular value sigma is uncertain by ~delta, so its std (~ 1/sigma) by delta / sigma.
# Taken relative to the largest eigenvalue (>= 1, the trace being n), as the condition number is:
_NULL_EIG = 1e-6  # below: no information beyond finite-difference noise (std = inf)
_COND_WARN = 1e5  # above (sigma_min / sigma_max < 3e-3): the std may be off by tens of percent


# Residuals whose lag-1 autocorrelation is this close to 1 count as this correlated (see `_data_std`)
_RHO_MAX = 1.0 - 1e-6


def _inflation(rho: float) -> float:
  """Variance factor `(1 + rho) / (1 - rho)` of residuals correlated along time with lag-1
  autocorrelation `rho` (an AR(1) process; 1 for white noise, negative `rho` counted as 0)."""
  r = min(max(float(rho), 0.0), _RHO_MAX)
  return (1.0 + r) / (1.0 - r)


def _data_std(ne: _Normal, s: int, fun: float, nres: int, nunknown: int, *, correlated: bool = True) -> np.ndarray:
  """`(n,)` std of the parameters of start `s` that the misfit left supports: `s^2 (J^T J)^-1` with
  the residual variance `s^2 = 2 cost / (nres - nunknown)`, times `_inflation(rho)` for residuals
  correlated along time (`_Normal.rho`; `correlated=False`: not).

  The usual formula counts every residual as an independent sample: right for white measurement
  noise (`rho ~ 0`), but the misfit of a float32 simulation of noise-free data, or of a model
  that lacks some physics, drifts smoothly (`rho` close to 1), and there it puts the truth tens to
  hundreds of std away (benchmarks/bench_sysid.py's arm, smooth and at joint limits); the AR(1)
  factor (one effective sample per correlation length) brings it to a few std.
  """
  s2 = 2.0 * fun / max(nres - nunknown, 1) * (_inflation(ne.rho[s]) if correlated else 1.0)
  return np.sqrt(s2 * np.clip(np.diag(np.linalg.pinv(ne.schur(s))), 0.0, None))


def _confidence(ne: _Normal, s: int, fun: float, nres: int, nunknown: int, labels: list[str], *,
                theta: np.ndarray | None = None, jacobian_std: np.ndarray | None = None,
                resolution: float = 2.0 ** -24, cond_warn: float = _COND_WARN, null_eig: float = _NULL_EIG,
                positive: np.ndarray | None = None):
  """Covariance of the parameters from the Gauss-Newton Hessian, and identifiability warnings.

  The parameters' information matrix is `J^T J` with the nuisance unknowns (initial states)
  eliminated (`_Normal.schur`), so their uncertainty counts. The analysis works on it scaled to
  a unit diagonal (the correlation form), so units and magnitudes (a parameter at zero, say) do
  not matter: a zero column of `J` means the data do not depend on a parameter; a (near-)zero
  eigenvalue that only a combination of some (or of them and the initial state) does.

  The covariance is the data's (`_data_std`: the misfit, correlated along time) plus, on the
  diagonal, what the solver leaves open: `jacobian_std` (the Jacobians' disagreement and the step
  still proposed, see `_lm`) and the relative `resolution` of the float32 solve (LM: its `xtol`,
  the relative step below which it calls further steps float32 noise: parameters from noise-free
  float64 data land that close to the truth, often farther than the data's std alone allows).
  A std that the solver's terms dominate is named in a warning when it exceeds 1e-4 of the value.

  Args:
    ne: normal equations at the solution; `s`: the start.
    fun: cost at the solution.
    nres: number of weighted residuals; `nunknown`: number of unknowns (parameters and nuisance).
    labels: `(n,)` names of the parameters.
    theta: `(n,)` the values (for the resolution); `jacobian_std`: `(n,)`, default 0.
    resolution: relative resolution of the values (default: float32's, 2^-24).
    cond_warn: warn when the condition number of the scaled parameter information exceeds this.
    null_eig: eigenvalues of the scaled information below this fraction of the largest (and
      parameters keeping less than this fraction of their information once the initial states are
      eliminated) count as zero: float32 finite-difference Jacobians resolve no finer.
    positive: `(n,)` which parameters are positive quantities (lower bound 0 or above): one whose
      std exceeds its value is named in a warning. The scaled analysis above cannot see that: a
      parameter the data barely touch (the servo of a joint that does not move) keeps a column
      independent of the others, only tiny, and its std, however large, would otherwise pass unnamed.

  Returns:
    `(cov (n, n), std (n,), corr (n, n), cond, warnings, data_std (n,))`.
  """
  n = len(labels)
  s2 = 2.0 * fun / max(nres - nunknown, 1) * _inflation(ne.rho[s])
  theta = np.zeros(n) if theta is None else np.asarray(theta, dtype=np.float64)
  jstd = np.zeros(n) if jacobian_std is None else np.asarray(jacobian_std, dtype=np.float64)
  dt = np.diag(ne.Htt[s]).copy()
  Sc = ne.schur(s)
  ds = np.diag(Sc).copy()
  zero = dt <= 1e-24 * max(dt.max(initial=0.0), 1e-300)
  # information lost to the nuisance unknowns almost entirely: only a combination is determined
  lost = ~zero & (ds <= null_eig * dt)
  keep = np.nonzero(~zero & ~lost)[0]
  cov = np.full((n, n), np.nan)
  msgs = []
  comb = lost.copy()
  cond = np.inf
  V = None
  if keep.size:
    sc = 1.0 / np.sqrt(ds[keep])
    C = Sc[np.ix_(keep, keep)] * sc[:, None] * sc[None, :]
    lam, V = np.linalg.eigh(C)
    null = lam <= null_eig * lam[-1]
    pinv = (V[:, ~null] / lam[~null]) @ V[:, ~null].T
    cov[np.ix_(keep, keep)] = s2 * pinv * sc[:, None] * sc[None, :]
    if null.any():
      comb[keep[np.abs(V[:, null]).max(axis=1) > 0.1]] = True
    cond = float(lam[-1] / max(lam[0], 1e-300))
  data_std = np.sqrt(np.clip(np.diag(cov), 0.0, None))
  jstd = np.hypot(jstd, np.abs(theta) * max(resolution, 2.0 ** -24))
  cov[keep, keep] += jstd[keep] ** 2
  std = np.sqrt(np.clip(np.diag(cov), 0.0, None))
  bad = zero | comb
  data_std[bad] = np.inf
  std[bad] = np.inf
  cov[bad, :] = np.nan
  cov[:, bad] = np.nan
  none = np.nonzero(zero)[0]
  if none.size:
    msgs.append("not identifiable from this data: " + ", ".join(labels[i] for i in none)
                + " (the residuals do not depend on it; excite it, or fix it at a known value)")
  if comb.any():
    msgs.append("not identifiable from this data: " + ", ".join(labels[i] for i in np.nonzero(comb)[0])
                + " (only a combination of them, or with the unknown initial state, affects the residuals; "
                  "fix all but one, or add data that separates them)")
  elif V is not None and np.isfinite(cond) and cond > cond_warn:
    v = np.abs(V[:, 0])
    worst = [labels[keep[i]] for i in np.argsort(-v)[:max(2, int((v > 0.3).sum()))]]
    msgs.append(f"ill-conditioned (condition number {cond:.2g} of the scaled Gauss-Newton Hessian): "
                f"{', '.join(worst)} are nearly interchangeable in this data; their std is large")
  vague = [i for i in keep if positive is not None and positive[i] and np.isfinite(std[i]) and std[i] > abs(theta[i])]
  if vague:
    msgs.append("poorly determined by this data: " + ", ".join(
      f"{labels[i]} (std {std[i]:.2g} exceeds the value {theta[i]:.2g})" for i in vague)
      + ": the recordings barely excite it; add motion that does, or fix it at a known value")
  limited = [i for i in keep if jstd[i] > data_std[i] and jstd[i] > 1e-4 * abs(theta[i])]
  if limited:
    msgs.append("the Jacobian limits the precision of " + ", ".join(
      f"{labels[i]} (std {std[i]:.2g}, of which the data's {data_std[i]:.2g})" for i in limited)
      + ": the two finite-difference Jacobians disagree there, or the solver stopped with a step left "
        "(constraint switches along the trajectories make the cost non-smooth); the std includes it")
  with np.errstate(invalid="ignore", divide="ignore"):
    corr = cov / np.outer(std, std)
  return cov, std, corr, cond, msgs, data_std


# -- solvers ----------------------------------------------------------------------------------------


def _project(theta, step, lower, upper):
  """`theta + step`, stopping 90% of the way to a bound it would cross (stays strictly inside)."""
  new = theta + step
  lo_hit = new < lower
  hi_hit = new > upper
  new = np.where(lo_hit, theta + 0.9 * (lower - theta), new)
  new = np.where(hi_hit, theta + 0.9 * (upper - theta), new)
  return new


def _second_opinion(jacobian: str, central: bool) -> str:
  """The Jacobian the convergence test asks where the trajectories cross constraint switches (see
  `_lm`): forward mode with forward differences ("directional-fd"), whose one-sided lanes catch the
  jumps there; for that one itself, the step Jacobians propagated forward."""
  return "forward" if jacobian == "directional-fd" or (jacobian == "directional" and not central) else \
    "directional-fd"


def _jacobian_name(jacobian: str, central: bool) -> str:
  """`identify`'s name of an internal Jacobian choice."""
  if jacobian == "directional-fd":
    return "directional (forward differences)" if central else "directional"
  return jacobian


def _lm(prob: _Problem, x0, lower, upper, *, iters, ftol, xtol, jacobian, callback, stdtol=0.1):
  """Levenberg-Marquardt over every start at once (one linearized rollout per iteration).

  `x0`, `lower`, `upper` cover all unknowns (`nstart, nunknown`): the parameters first
  (`prob.nparam`), then the free initial states. Stopping tests look at the parameters only.

  A start stops when its step falls below `xtol` (relative) or below `stdtol` of the parameters'
  std (`_data_std`), when an accepted step lowers the cost by less than `ftol`, or when three ever
  shorter steps in a row fail to lower it. Each says that the linearized model has nothing left
  to give, which is a minimum only where that model is right. Where the nominal trajectories
  cross constraint switches (`_Problem.linearize`), the two Jacobians are wrong in different ways:
  "forward" forms each step's Jacobian on one side of a switch and misses the jump moving in
  time (on recordings that reach joint limits, LM stalls on a slope), "directional" (forward
  differences) moves the state along the tangent and catches it, as a coarse sample. So the
  convergence test asks the other Jacobian (`_second_opinion`) for its step at the stopping point:
    - within the tolerances too: converged, and that step (the Jacobians' disagreement) widens the std;
    - outside, and the cost falls along it: not a minimum. `jacobian="auto"` takes the step and goes
      on with its own Jacobian from there (which converges fast again once past the switches that
      stopped it, where the other converges linearly); an explicit Jacobian stops, not converged, at
      the lower cost;
    - outside, and the cost rises along it: its model is refuted. Converged where the start's own
      step was within the tolerances (half that step widens the std: the rise bounds how far the
      minimum lies along it); where the start's own last step, outside them, failed too, stalled on
      a slope: not converged (the message says what to try).
  With `"auto"`, a significant step that fails right after accepted steps whose actual cost
  reduction was off the predicted one by more than half asks the other Jacobian at once (if its
  step does not lower the cost, LM goes on). Trajectories that cross no switch skip the test: the
  Jacobian is then the derivative of a smooth map, and failing steps mean float32 resolution.

  Returns:
    `(x, f, ne, hist, nit, success, reason, jacobian, jac_std)`: per start its unknowns, cost,
    normal equations (of Jacobian `jacobian`, the one used last), whether it converged and why it
    stopped; `jac_std` `(nstart, nparam)` is what the Jacobians leave open: the other Jacobian's step
    and the step the last linearization still proposes, divided by `1 - q` where the steps shrink
    by a factor `q` per iteration (linear convergence, with an inexact Jacobian).
  """
  nstart, N = x0.shape
  n = prob.nparam
  nres = prob.nresidual // prob.nstart
  jac = "forward" if jacobian == "auto" else jacobian
  x = x0.copy()
  ne = prob.linearize(x, jacobian=jac)
  f = ne.cost.copy()
  if not np.isfinite(f).any():
    raise FloatingPointError("every initial guess diverges (NaN/Inf state): check the model, the data, or the "
                             "bounds; multiple shooting (shooting=k) helps with long or unstable recordings")
  prob.before = prob.samples(0)
  lam = np.full(nstart, 1e-3)
  nu = np.full(nstart, 2.0)
  stopped = np.zeros(nstart, bool)
  success = np.zeros(nstart, bool)
  reason = np.array(["maximum number of iterations reached"] * nstart, dtype=object)
  why = np.array([None] * nstart, dtype=object)  # the stopping test that fired, before the convergence test
  said = np.array([""] * nstart, dtype=object)  # its message
  reject_run = np.zeros(nstart, int)
  # the last proposal: predicted reduction, size in std, within the stopping test, within the std
  pred, size, small, noise = np.zeros(nstart), np.zeros(nstart), np.zeros(nstart, bool), np.zeros(nstart, bool)
  last = np.zeros(nstart)  # relative size of the last accepted step
  fit = np.ones(nstart)  # its actual / predicted cost reduction
  jac_std = np.zeros((nstart, n))
  hist = {"fun": [f.copy()], "x": [x[:, :n].copy()], "lambda": [lam.copy()]}
  nit = 0
  # relative step measure: float32 resolves about 6e-8 of a value, and float32 rollouts reproduce
  # trajectories to about 1e-6, so the default xtol (1e-6) stops where further steps are noise
  typical = np.abs(x0[:, :n]) * 1e-3 + 1e-12
  rel_step = lambda d, s: float(np.max(np.abs(d[:n]) / (np.abs(x[s, :n]) + typical[s]), initial=0.0))
  changes = lambda s: int(ne.changes[s])
  central = prob.ro.fd.central

  def propose(lin: _Normal, s: int, damping: float):
    """LM step of start `s` from linearization `lin`: `(step, predicted cost reduction, damping)`."""
    d = lin.diag(s)
    d = np.maximum(d, 1e-12 * max(d.max(), 1e-300))
    g = lin.g(s)
    for _ in range(20):
      dlt = _project(x[s], lin.solve(s, damping * d), lower, upper) - x[s]
      p = -(g @ dlt + 0.5 * lin.quad(s, dlt))
      if p > 0 or not np.any(g):
        break
      damping *= 10.0  # no predicted decrease (round-off in a near-singular system, or the bounds): damp more
    return dlt, float(p), damping

  def within(lin: _Normal, s: int, dlt, tol: float = stdtol) -> tuple[bool, float, str]:
    """Whether step `dlt` of start `s` is within the tolerances (`xtol`, or `tol` times the std), its
    size in std, and which test holds.

    The std is the one the misfit left would give as white noise. Not `_data_std`'s, which counts a
    misfit correlated along time as fewer samples: right at the minimum, but away from it the misfit
    is the parameters' error, correlated too, and that std would call any step noise."""
    std = _data_std(lin, s, f[s], nres, N, correlated=False)
    k = float(np.max(np.abs(dlt[:n]) / np.maximum(std, 1e-300), initial=0.0))
    if rel_step(dlt, s) <= xtol:
      return True, k, f"relative step below xtol={xtol:g}"
    # steps far inside the uncertainty the remaining misfit leaves change nothing that matters
    return k <= tol, k, f"step below {tol:g} of the parameter std"

  def finish(s: int, ok: bool, text: str) -> None:
    stopped[s], success[s], reason[s] = True, ok, text

  def stall(s: int, tail: str = "") -> None:
    finish(s, False, f"stalled, not converged: {reject_run[s]} ever shorter steps that the linearized model "
                     f"predicted to lower the cost (the last by {pred[s]:.3g}, {size[s]:.3g} std) raised it"
                     f"{tail}; the cost is not at a minimum. The trajectories cross constraint switches "
                     f"({changes(s)} times: limits or contacts engaging or releasing), where "
                     "the cost jumps and finite-difference Jacobians are inexact: try multiple shooting "
                     "(shooting=k) to shorten the rollouts across them, other starting points (starts=4), or "
                     "another finite-difference step (eps=...)")

  def log() -> None:
    hist["fun"].append(f.copy())
    hist["x"].append(x[:, :n].copy())
    hist["lambda"].append(lam.copy())
    if callback is not None:
      callback({"nit": nit, "fun": float(f.min()), "theta": x[int(np.argmin(f)), :n].copy()})

  while True:
    # -- convergence test of the starts a stopping test stopped
    pending = [s for s in np.nonzero(~stopped & (why != None))[0]]  # noqa: E711
    other = _second_opinion(jac, central)
    name, oname = _jacobian_name(jac, central), _jacobian_name(other, central)
    ask = [s for s in pending if changes(s) > 0 and why[s] != "zero"]
    for s in pending:
      if s not in ask:
        if why[s] == "descent" and not np.any(np.diag(ne.Htt[s])):
          finish(s, False, "not converged: the residuals depend on none of the parameters (a zero Jacobian: "
                           "check that the parameters act on the recorded signals, and that eps['param'] is not "
                           "below float32 resolution)")
        else:
          finish(s, True, said[s])
    if ask:
      na = prob.linearize(x, jacobian=other)
      alt, moves = x.copy(), {}
      for s in ask:
        dlt, p, _ = propose(na, s, min(lam[s], 1e-3))
        ok, k, text = within(na, s, dlt)
        if why[s] == "doubt" and (ok or nit >= iters):
          why[s] = None  # nothing better from the other Jacobian: LM goes on with this one
        elif ok:
          # a minimum by the other Jacobian's model too (where the start's own steps failed, the cost
          # refuted its model: the two disagree, and the std says by how much)
          jac_std[s] = np.abs(dlt[:n])
          own = said[s] if why[s] != "rejected" or noise[s] else \
            f"the {name} Jacobian's steps raised the cost (the last {size[s]:.2g} std)"
          finish(s, True, f"{own}; the {oname} Jacobian agrees ({text}: {k:.2g} std)")
        elif nit >= iters:
          finish(s, False, f"maximum number of iterations reached: the {name} Jacobian stopped ({said[s] or why[s]}), "
                           f"but the {oname} Jacobian proposes a step of {k:.2g} std that there was no iteration "
                           "left to try")
        else:
          alt[s], moves[s] = x[s] + dlt, k
      if moves:
        nt = prob.linearize(alt, jacobian=other)
        nit += 1
        lower_cost = [s for s in moves if nt.cost[s] < f[s]]
        for s in moves:
          k = moves[s]
          if s in lower_cost:
            continue
          if why[s] == "doubt":
            why[s] = None
          elif why[s] == "rejected" and not noise[s]:
            stall(s, f", and so did the {oname} Jacobian's step ({k:.2g} std)")
          else:
            jac_std[s] = 0.5 * np.abs(alt[s, :n] - x[s, :n])
            finish(s, True, f"{said[s]}; the {oname} Jacobian's step ({k:.2g} std) raised the cost")
        for s in lower_cost:
          f0, k = f[s], moves[s]
          x[s], f[s] = alt[s], nt.cost[s]
          ne.take(s, nt)
          if jacobian != "auto":
            finish(s, False, f"not converged: the {name} Jacobian stopped at cost {f0:.4g}, but the {oname} "
                             f"Jacobian's step ({k:.2g} std) lowers it to {f[s]:.4g}: {changes(s)} constraint "
                             "switches along the trajectories make the two differ. The result is that lower "
                             "point; jacobian='auto' (the default) takes such steps and goes on")
          lam[s], nu[s], reject_run[s], fit[s], why[s], said[s] = min(lam[s], 1e-3), 2.0, 0, 1.0, None, ""
        if lower_cost and jacobian == "auto":
          # back to this Jacobian from the lower point: the other one's step got LM past the switches
          # that stalled it, and near the minimum it converges fast again (the other, a coarse sample of
          # the jumps, converges linearly: on tests/test_sysid_limits.py's arm, three times the iterations)
          back = prob.linearize(x, jacobian=jac)
          for s in lower_cost:
            ne.take(s, back)
        log()
    live = ~stopped & (why == None)  # noqa: E711
    if not live.any() or nit >= iters:
      break
    # -- one LM iteration of the running starts
    trial = x.copy()
    for s in np.nonzero(live)[0]:
      dlt, pred[s], lam[s] = propose(ne, s, lam[s])
      small[s], size[s], text = within(ne, s, dlt)
      # a step within 1 std that raises the cost: float32 resolution (see the convergence test)
      noise[s] = within(ne, s, dlt, 1.0)[0]
      trial[s] = x[s] + dlt
      if not pred[s] > 0:
        why[s], said[s] = "descent", "no descent direction left (zero gradient, or round-off)"
      elif small[s]:
        # the model predicts nothing to gain beyond the tolerances: no rollout needed
        why[s], said[s] = "step", text
    run = live & (why == None)  # noqa: E711
    if not run.any():
      continue
    trial[~run] = x[~run]
    nt = prob.linearize(trial, jacobian=jac)
    nit += 1
    for s in np.nonzero(run)[0]:
      ft = nt.cost[s]
      if ft < f[s]:
        rho = (f[s] - ft) / max(pred[s], 1e-300)
        rel = (f[s] - ft) / max(f[s], 1e-300)
        last[s] = rel_step(trial[s] - x[s], s)
        x[s], f[s] = trial[s], ft
        ne.take(s, nt)
        lam[s] *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
        nu[s] = 2.0
        reject_run[s] = 0
        fit[s] = rho
        if rel <= ftol:
          why[s], said[s] = "ftol", f"relative cost reduction below ftol={ftol:g}"
        elif f[s] == 0.0:
          why[s], said[s] = "zero", "zero cost"
      else:
        lam[s] *= nu[s]
        nu[s] *= 2.0
        reject_run[s] += 1
        if reject_run[s] >= 3:
          # no decrease along ever shorter steps: a minimum within float32 precision if the last was
          # within the tolerances (see the convergence test above), else a stall
          why[s], said[s] = "rejected", "the cost cannot be reduced further (float32 precision)"
        elif jacobian == "auto" and reject_run[s] == 1 and abs(fit[s] - 1.0) > 0.5 and not noise[s] \
            and changes(s) > 0:
          # a significant step failed after the model's predictions had stopped matching the cost (on
          # recordings that reach joint limits the cost fell several times as much as predicted): ask the
          # other Jacobian now rather than after two more failed steps
          why[s] = "doubt"
    log()
  # the step the last linearization still proposes: the distance left to its fixed point, 1 / (1 - q)
  # times the step where the steps shrink by q per iteration
  for s in range(nstart):
    dlt, _, _ = propose(ne, s, min(lam[s], 1e-3))
    q = min(0.9, rel_step(dlt, s) / last[s]) if last[s] > 0 else 0.0
    jac_std[s] = np.hypot(jac_std[s], np.abs(dlt[:n]) / (1.0 - q))
  return x, f, ne, hist, nit, success, reason, jac, jac_std


def _adam(prob: _Problem, theta0, lower, upper, *, iters, lr, callback):
  nstart, n = theta0.shape
  dev = prob.scene.device
  scale = np.where(np.abs(theta0[0]) > 0, np.abs(theta0[0]), 1.0)
  # a strictly positive floor for quantities bounded at 0 (a zero mass makes the model singular)
  lo = np.where(np.isfinite(lower), lower + 1e-6 * scale, lower)
  arr = lambda a: wp.array(np.asarray(a, dtype=np.float32), dtype=float, device=dev)
  scale_d, lo_d, hi_d = arr(scale), arr(np.maximum(lo, -3e38)), arr(np.minimum(upper, 3e38))
  m = wp.zeros((nstart, n), dtype=float, device=dev)
  v = wp.zeros((nstart, n), dtype=float, device=dev)
  prob.theta_dev.assign(theta0.astype(np.float32))
  best_f = np.full(nstart, np.inf)
  best_x = theta0.copy()
  hist = {"fun": [], "x": [], "lambda": []}
  f = None
  for it in range(iters + 1):
    x = prob.theta_dev.numpy().astype(np.float64)
    f = prob.gradient()
    if it == 0:
      if not np.isfinite(f).any():
        raise FloatingPointError("every initial guess diverges (NaN/Inf state): check the model and the data")
      prob.before = prob.samples(0)
    better = f < best_f
    best_f[better], best_x[better] = f[better], x[better]
    hist["fun"].append(f.copy())
    hist["x"].append(x.copy())
    hist["lambda"].append(np.full(nstart, lr))
    if callback is not None and it > 0:
      callback({"nit": it, "fun": float(f.min()), "theta": x[int(np.argmin(f))].copy()})
    if it == iters:
      break
    wp.launch(_adam_step, dim=(nstart, n), device=dev,
              inputs=[prob.grad_dev, scale_d, lo_d, hi_d, float(lr), 0.9, 0.999, it + 1],
              outputs=[m, v, prob.theta_dev])
  # first-order methods have no sharp stopping test: call it converged when the best cost
  # changed by less than 1e-3 (relative) over the last fifth of the iterations
  fun = np.array(hist["fun"])
  tail = max(1, (iters + 1) // 5)
  ref = np.min(fun[:-tail], axis=0) if fun.shape[0] > tail else fun[0]
  flat = (ref - best_f) <= 1e-3 * np.abs(best_f)
  done = np.isfinite(best_f) & flat
  reason = np.array([f"completed {iters} Adam iterations" + ("" if d else " (cost still decreasing)") for d in done],
                    dtype=object)
  return best_x, best_f, hist, iters, done, reason


# -- entry point ------------------------------------------------------------------------------------


def _check_out(out, source) -> None:
  """Refuses an output folder that is a file, or whose `model.xml` would replace the input model."""
  out = os.fspath(out)
  if os.path.exists(out) and not os.path.isdir(out):
    raise ValueError(f"out={out!r} is a file, not a folder: pass a folder for params.json, model.xml and the plots")
  if isinstance(source, str) and os.path.isfile(source) and \
      os.path.realpath(os.path.join(out, "model.xml")) == os.path.realpath(source):
    raise ValueError(f"writing the identified model to {os.path.join(out, 'model.xml')!r} would overwrite the input "
                     f"model {source!r}: choose another output folder")


def _initial_guesses(params, nominal, lower, upper, starts, spread, seed, x0):
  n = nominal.size
  first = nominal.copy()
  if x0:
    unknown = sorted(set(x0) - {p.name for p, _, _ in params})
    if unknown:
      raise ValueError(f"x0 names unknown parameters {unknown}; parameters are {[p.name for p, _, _ in params]}")
    for p, off, dim in params:
      if p.name in x0:
        try:
          first[off:off + dim] = np.broadcast_to(np.asarray(x0[p.name], float), (dim,))
        except ValueError:
          raise ValueError(f"x0[{p.name!r}] must have {dim} value(s), got {np.shape(x0[p.name])}") from None
    if np.any((first < lower) | (first > upper)):
      raise ValueError(f"x0 lies outside the bounds: {first} not in [{lower}, {upper}]")
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


def identify(model, data, params: Sequence[str | Param], *, bounds: dict | None = None, weights: dict | None = None,
             normalize: bool = True, solver: str = "lm", iters: int = 30, shooting: int | None = None,
             starts=1, spread: float = 1.0, seed: int = 0, x0: dict | None = None, lr: float = 0.05,
             ftol: float = 1e-10, xtol: float = 1e-6, jacobian: str = "auto", resample: bool = False,
             max_steps_per_sample: int | None = None, fit_qvel0: bool | None = None, fit_qpos0: bool = False,
             device=None, solver_settings: SolverSettings | None = None, central: bool = False,
             eps: float | dict | None = None, out=None, plots: bool = True, progress: bool = False,
             callback: Callable | None = None) -> SysIdResult:
  """Identifies model parameters from recorded trajectories.

  Args:
    model: MJCF path or XML string, `mujoco.MjSpec` or `mujoco.MjModel`; its values are the
      initial guess (a path or spec is needed to write `model.xml`).
    data: a recording or a list of them: `.npz` / `.csv` paths, `diffsim.data.Recording`s, or
      dicts of arrays (see `diffsim.data` for the format). All share one parameter set.
    params: `"field:element"` strings (`"body_mass:ball"`, `"dof_damping:slide"`, `"opt.gravity"`)
      or `diffsim.Param`s. A dof field of a ball or free joint is one value for all its dofs, as
      MJCF stores it (`dof_damping:ball` is one damping, not three).
    bounds: `{name: (lower, upper)}`; default `(0, inf)` for positive quantities, else unbounded.
    weights: residual weight multipliers: `{"qpos"|"qvel"|"sensordata": w}` per signal kind,
      `{"qpos:<joint>"|"qvel:<joint>"|"sensor:<name>": w}` per column.
    normalize: divide residuals by the RMS spread of the measured signals of the same unit (joint
      angles, joint lengths, each sensor), so signals in different units count alike (default);
      `weights` multiply on top. For the confidence, weights should be proportional to
      1 / (noise std) of each signal: pass them via `weights` (and `normalize=False`) when known.
    solver: `"lm"` (Levenberg-Marquardt) or `"adam"`.
    iters: maximum iterations, each one linearized rollout at a trial point (the convergence test's
      trial of the other Jacobian's step counts as one; its linearization at the stopping point, and
      `"auto"`'s return to its own Jacobian after that step, are rollouts that do not, see `nfev`).
    shooting: multiple shooting: restart from the measured state every `shooting` samples (each
      segment runs in its own world); `None`: one rollout per recording.
    starts: number of initial guesses solved in parallel worlds (the first is the MJCF value or
      `x0`, the others random within a factor `1 + spread`), or an array `(nstart, nparam)`.
    spread: spread of random initial guesses (see `starts`).
    seed: seed of the random initial guesses.
    x0: `{name: value}` initial guess overriding the MJCF value.
    lr: Adam step, relative to each parameter's initial magnitude.
    ftol, xtol: LM stops when the relative cost reduction or the relative step falls below these
      (`xtol` also floors each std: the relative resolution LM claims, see the module docstring).
    jacobian: `"auto"` (default): `"forward"`, with the step of `"directional"` (forward
      differences) taken where that lowers the cost further (trajectories that cross constraint
      switches, see the module docstring); `"forward"` (step Jacobians propagated forward) or
      `"directional"` (forward mode: a lane per column of the Jacobian; fewer lanes, less precise)
      alone, each checked by the other where it stops (not converged where the other lowers the
      cost); or `"tape"` (reverse mode, one backward pass per residual block: for checks; much
      slower, unchecked).
    resample: resample recordings whose sample times are off the timestep grid instead of failing.
    max_steps_per_sample: most model steps one sample interval may span (default
      `diffsim.data.MAX_STEPS_PER_SAMPLE`, 500): longer intervals are refused as likely times in
      milliseconds; raise it for recordings that really are this sparse.
    fit_qvel0: solve for the initial velocity of each world (recording, or shooting segment) together
      with the parameters, starting from a finite-difference estimate from `qpos`. `None` (default):
      for worlds whose initial velocity is not measured (no `qvel`, no `qvel0`); `True`: for all
      (noisy `qvel`); `False`: never (use the estimate as is). LM only; Adam keeps the estimate.
    fit_qpos0: also solve for the initial position of each world (a tangent-space offset from the
      measured row), with that row counted as a measurement: for noisy position data, where
      pinning the simulation to one noisy sample biases the parameters, by more than the std says
      (which counts the other samples' noise, not that one's: tests/test_sysid_errorbars.py). LM only.
    device: Warp device (`None`: CUDA if available, else CPU).
    solver_settings: MJWarp constraint solver settings (`diffsim.SolverSettings`).
    central, eps: finite-difference scheme of the Jacobians (see `diffsim.Rollout`). Forward
      differences by default: the Jacobian only steers the LM steps (the residuals, computed
      exactly, set the minimum), and they need half the lanes of central ones. The convergence
      test's directional Jacobian differences forward whatever `central` (its one-sided lanes
      catch the jumps at constraint switches).
    out: folder to write `params.json`, `model.xml` and plots into (`None`: write nothing); an
      earlier run's results there are replaced. A folder that is a file, or whose `model.xml` is
      the input model, and a parameter that `model.xml` cannot hold are refused before any kernel
      runs; if writing fails after the solve (e.g. identified inertias that violate the triangle
      inequality), a warning says why and the result is returned all the same (see
      `SysIdResult.save`).
    plots: write PNG plots when `out` is given.
    progress: show a tqdm progress bar.
    callback: called after every iteration with `{"nit", "fun", "theta"}`.

  Returns:
    A `SysIdResult`.

  Raises:
    diffsim.data.DataError: bad recorded data (before any kernel runs).
    ValueError, KeyError: bad parameters, bounds or options (before any kernel runs).
  """
  if solver not in ("lm", "adam"):
    raise ValueError(f"solver must be 'lm' or 'adam', got {solver!r}")
  if jacobian not in ("auto", "forward", "directional", "tape"):
    raise ValueError(f"jacobian must be 'auto', 'forward', 'directional' or 'tape', got {jacobian!r}")
  if not isinstance(iters, (int, np.integer)) or iters < 0:
    raise ValueError(f"iters must be a non-negative integer, got {iters!r}")
  source = model
  if isinstance(model, (str, os.PathLike)) and not str(model).lstrip().startswith("<"):
    source = os.path.abspath(os.fspath(model))
  mjm = copy_mjmodel(model) if isinstance(model, mujoco.MjModel) else _load_mjmodel(source)
  recs = _as_recordings(data, mjm, resample, max_steps_per_sample)
  bounds = dict(bounds or {})
  plist = [parse_param(p, bounds) for p in ([params] if isinstance(params, (str, Param)) else params)]
  unknown = sorted(set(bounds) - {p.name for p in plist})
  if unknown:
    raise ValueError(f"bounds name unknown parameters {unknown}; parameters are {[p.name for p in plist]}")
  # the MJCF values in float64 (Param.nominal goes through the float32 device model)
  nominal, lower, upper, dims = _check_params(mjm, plist)
  offsets = np.cumsum([0] + dims)[:-1]
  theta0 = _initial_guesses([(p, int(o), d) for p, o, d in zip(plist, offsets, dims)], nominal, lower, upper,
                            starts, spread, seed, x0)
  nstart = theta0.shape[0]
  if out is not None:
    _check_out(out, source)
    if not isinstance(source, mujoco.MjModel):
      # model.xml must be able to hold these parameters: find out now, not after the solve
      try:
        identified_spec(source, plist, nominal)
      except ValueError as e:
        raise ValueError(f"cannot write the identified parameters to model.xml: {e}") from None

  t0 = _time.perf_counter()
  # the rollout's copies carry no bounds (sysid enforces them, per identified coordinate)
  rollout_params = [Param(p.field, p.element, components=p.components, name=p.name) for p in plist]
  prob = _Problem(mjm, recs, rollout_params, weights=weights, normalize=normalize, shooting=shooting, nstart=nstart,
                  device=device, solver=solver_settings, central=central, eps=eps, fit_qvel0=fit_qvel0,
                  fit_qpos0=fit_qpos0)
  labels = _labels(plist, mjm)

  bar = None
  if progress:
    from tqdm.auto import tqdm

    bar = tqdm(total=iters, desc="sysid", unit="it", leave=False)

  def on_iter(info):
    if bar is not None:
      bar.update(1)
      bar.set_postfix(cost=f"{info['fun']:.4g}")
    if callback is not None:
      callback(info)

  # unknowns: the parameters, then the initial states solved for (unbounded)
  nfree = prob.nunknown - prob.nparam
  lo_x = np.concatenate([lower, np.full(nfree, -np.inf)])
  hi_x = np.concatenate([upper, np.full(nfree, np.inf)])
  jac_std = np.zeros((nstart, prob.nparam))
  try:
    if solver == "lm":
      xs, f, ne, hist, nit, done, reason, used, jac_std = _lm(prob, prob.x0(theta0), lo_x, hi_x, iters=iters,
                                                              ftol=ftol, xtol=xtol, jacobian=jacobian,
                                                              callback=on_iter)
    else:
      # Adam keeps the initial states at their measured or estimated values
      theta, f, hist, nit, done, reason = _adam(prob, theta0, lower, upper, iters=iters, lr=lr, callback=on_iter)
      xs, used = prob.x0(theta), "forward"
  finally:
    if bar is not None:
      bar.close()
  best = int(np.argmin(f))
  theta = xs[:, :prob.nparam]
  # final state: cost, curvature for the confidence, and the simulated signals for the plots; LM
  # usually ends on a rollout at the accepted point, which already has all three
  if solver == "lm" and np.array_equal(prob.last_x[best], xs[best]):
    fun, sb, after = float(f[best]), best, prob.samples(best)
  else:
    ne = prob.linearize(np.repeat(xs[best:best + 1], nstart, axis=0), jacobian=used)
    fun, sb, after = float(ne.cost[0]), 0, prob.samples(0)
  wall = _time.perf_counter() - t0
  cov, std, corr, cond, msgs, data_std = _confidence(ne, sb, fun, prob.nresidual // nstart, prob.nunknown, labels,
                                                     theta=theta[best], jacobian_std=jac_std[best],
                                                     resolution=xtol if solver == "lm" else 2.0 ** -24,
                                                     # at a minimum only: elsewhere the misfit is the error
                                                     positive=(lower >= 0.0) if done[best] else None)
  for m in msgs:
    warnings.warn(m, IdentifiabilityWarning, stacklevel=2)
  x, sd, sdd, xi, bnd = {}, {}, {}, {}, {}
  for p, off, dim in zip(plist, offsets, dims):
    sl = slice(int(off), int(off) + dim)
    pick = (lambda a: float(a[sl][0])) if dim == 1 else (lambda a: a[sl].copy())
    # the initial guess and cost are the best start's, like the history
    x[p.name], sd[p.name], xi[p.name] = pick(theta[best]), pick(std), pick(theta0[best])
    sdd[p.name] = pick(data_std)
    bnd[p.name] = (pick(lower), pick(upper))
  message = str(reason[best]) + "".join(f"; warning: {m}" for m in msgs)
  # the solver's differentiated rollout: LM's linearization, or the tape's (Adam)
  sim_ro = prob.forward_mode if solver == "lm" and jacobian == "directional" else prob.ro
  res = SysIdResult(
    x=x, std=sd, x0=xi, fun=fun, fun0=float(hist["fun"][0][best]), nit=int(nit), nfev=prob.nrollout,
    history={"fun": np.array([h[best] for h in hist["fun"]]), "x": np.array([h[best] for h in hist["x"]]),
             "lambda": np.array([h[best] for h in hist["lambda"]])},
    success=bool(done[best]), message=message, labels=labels, theta=theta[best].copy(), theta0=theta0[best].copy(),
    theta_std=std, cov=cov, corr=corr, cond=cond, warnings=msgs, starts_fun=np.asarray(f, dtype=np.float64),
    std_data=sdd, theta_std_data=data_std, jacobian=_jacobian_name(used, central),
    constraint_changes=int(ne.changes[sb]),
    starts_fun0=np.asarray(hist["fun"][0], dtype=np.float64),
    wall_time=wall, nresidual=prob.nresidual // nstart, sim_worlds=sim_ro.fd.nlane * prob.nworld, solver=solver,
    bounds=bnd,
    initial_qpos=[prob.initial_state(xs[best])[0][g] for g in range(prob.nseg) if prob.segs[g].row0 == 0],
    initial_qvel=[prob.initial_state(xs[best])[1][g] for g in range(prob.nseg) if prob.segs[g].row0 == 0],
    _plot={"recs": prob.recs, "before": prob.before, "after": after, "mjm": prob.mjm},
    _source=source, _params=plist)
  if out is not None:
    try:
      res.save(out, plots=plots)
    except Exception as e:  # the solve is worth more than the files: return it whatever happened
      res.save_error = str(e)
      warnings.warn(f"identify: the solve finished and its result is returned, but writing it to {os.fspath(out)!r} "
                    f"failed: {e}", stacklevel=2)
  return res


# -- MJCF output ------------------------------------------------------------------------------------

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


def _load_spec(source) -> mujoco.MjSpec:
  if isinstance(source, mujoco.MjSpec):
    return source.copy()
  if isinstance(source, mujoco.MjModel):
    raise TypeError("an MjModel cannot be written back as MJCF; pass the MJCF path or an MjSpec")
  src = os.fspath(source)
  if src.lstrip().startswith("<"):
    return mujoco.MjSpec.from_string(src)
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

  Raises:
    ValueError: a parameter MJCF cannot hold, or values that do not compile.
  """
  spec = _load_spec(source)
  mjm = spec.copy().compile()
  theta = np.asarray(theta, dtype=np.float64).reshape(-1)
  for p in params:
    if not p.elements:  # not bound to a scene: resolve the names here
      p.elements = p._resolve_elements(_Names(mjm))
  groups = [_groups(p, mjm, p.elements) for p in params]
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
      attr = p.field[4:]
      cur = np.array(getattr(spec.option, attr), dtype=np.float64, ndmin=1)
      cur[p.components] = vals[0]
      setattr(spec.option, attr, cur if np.ndim(getattr(spec.option, attr)) else float(cur[0]))
      continue
    prefix = next((k for k in _SPEC_KIND if p.field.startswith(k)), None)
    if prefix is None:
      raise ValueError(f"cannot write parameter {p.name!r} to MJCF: unknown element kind of {p.field!r}")
    listname, objtype = _SPEC_KIND[prefix]
    attr = _SPEC_ATTR.get(p.field, p.field[len(prefix):])
    for grp, row in zip(grps, vals):
      e = grp[0]
      ident = int(mjm.dof_jntid[e]) if prefix == "dof_" else e
      name = mujoco.mj_id2name(mjm, objtype, ident)
      el = getattr(spec, listname)[ident]
      if name and el.name != name:
        el = next(x for x in getattr(spec, listname) if x.name == name)
      if p.field in ("body_mass", "body_inertia", "body_ipos"):
        # write the compiled inertial frame explicitly, so the edit survives inertia-from-geom compilation
        if e not in inertial_done:
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
  # verify what will be written: the XML, reloaded
  try:
    chk = mujoco.MjModel.from_xml_string(spec.to_xml())
  except Exception as e:
    raise ValueError(f"the identified model does not compile: {e}") from None
  off = 0
  for p, grps, dim in zip(params, groups, dims):
    want = np.repeat(theta[off:off + dim].reshape(len(grps), -1), [len(g) for g in grps], axis=0).reshape(-1)
    off += dim
    a = _host_field(chk, p.field)
    rows = a.reshape(1, -1) if p._elem_size is None else a.reshape(a.shape[0], -1)
    got = np.array([rows[e, c] for g in grps for e in g for c in p.components])
    if not np.allclose(got, want, rtol=1e-5, atol=1e-9):
      raise ValueError(f"writing {p.name!r} to MJCF gave {got} after compiling instead of {want} (a compiler "
                       "option such as inertiafromgeom or a default overrides it)")
  if not np.allclose(chk.actuator_biasprm, want_bias, rtol=1e-5, atol=1e-9):
    bad = np.nonzero(~np.isclose(chk.actuator_biasprm, want_bias, rtol=1e-5, atol=1e-9).all(axis=1))[0]
    raise ValueError(f"the written actuators {[mujoco.mj_id2name(chk, mujoco.mjtObj.mjOBJ_ACTUATOR, a) for a in bad]} "
                     f"compile to biasprm {chk.actuator_biasprm[bad]} instead of the simulated {want_bias[bad]}")
  return spec


def write_mjcf(source, params: Sequence[Param], theta: np.ndarray, path) -> None:
  """Writes the identified model as MJCF to `path` (through a temporary file and a rename)."""
  spec = identified_spec(source, params, theta)
  xml = spec.to_xml()
  _data._atomic_write(path, lambda f: f.write(xml.encode()))
