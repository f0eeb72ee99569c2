"""Trajectory costs: weighted quadratic terms and user Warp kernels, one scalar per world.

A cost is a list of terms. Every built-in term is a weighted quadratic in a *residual* read from the
rollout (`Trajectory`): a `qpos` or `qvel` entry, a sensor value (a site's position through its
`framepos` sensor), a control, or a control's change between steps. For world `w`,

  cost_w = sum_terms [ dt * sum_{k < nstep} 1/2 sum_i running_i r_{w,k,i}^2 + 1/2 sum_i terminal_i r_{w,nstep,i}^2 ]

so running terms approximate time integrals (their weights do not depend on the timestep) and the
terminal term weighs the final state. State and sensor residuals use rows `k = 0 .. nstep` of the
trajectory (row `k` of `sensordata` is computed from state `k` with `ctrl[:, k]`); control residuals
use `ctrl[:, k]`, `k < nstep`.

`KernelCost` adds any user-written Warp kernel on the trajectory arrays. Built-in terms also give the
Gauss-Newton curvature that iLQR needs; kernel terms reach iLQR through their gradient only.

`Cost` binds terms to a scene and horizon: names are resolved and shapes checked on the host, so a
wrong name or shape raises before any kernel runs.
"""

from __future__ import annotations

from typing import Callable, Sequence

import mujoco
import numpy as np
import warp as wp

from . import joints
from .mjmodel import UnknownNameError

__all__ = ["CostTerm", "QposCost", "QvelCost", "SensorCost", "SiteCost", "CtrlCost", "CtrlRateCost", "KernelCost",
           "Cost", "add_site_sensors"]

# residual kinds of a channel (one scalar residual per row)
QPOS, QVEL, SENSOR, CTRL, CTRL_RATE = 0, 1, 2, 3, 4
_HINGE_SLIDE = (joints.HINGE, joints.SLIDE)


class _Channels:
  """Residual channels of one bound term (host arrays, `n` channels)."""

  def __init__(self, kind: int, idx, col, running, terminal, target: np.ndarray):
    self.kind = kind
    self.idx = np.asarray(idx, dtype=np.int32)  # column of the source array
    self.col = np.asarray(col, dtype=np.int32)  # tangent column (qpos, qvel); else unused
    self.running = np.asarray(running, dtype=np.float64)  # dt (or 1/dt) folded in
    self.terminal = np.asarray(terminal, dtype=np.float64)
    self.target = target  # (nworld, nrow, n) after broadcasting


def _weights(name: str, value, n: int, what: str = "") -> np.ndarray:
  w = np.asarray(value, dtype=np.float64)
  what = f"{what} " if what else ""
  if w.ndim > 1 or (w.ndim == 1 and w.shape[0] != n):
    raise ValueError(f"{name}: {what}weight must be a scalar or have shape ({n},), got shape {w.shape}")
  w = np.broadcast_to(w, (n,)).copy()
  if not np.all(np.isfinite(w)) or np.any(w < 0):
    raise ValueError(f"{name}: {what}weights must be finite and non-negative, got {w}")
  return w


def _target(name: str, value, n: int, nworld: int, nrow: int) -> np.ndarray:
  """Broadcasts a target of shape (), (n,), (nworld, n) or (nworld, nrow, n) to (nworld, nrow, n)."""
  t = np.asarray(value, dtype=np.float64)
  shapes = f"(), ({n},), (nworld={nworld}, {n}) or (nworld={nworld}, {nrow}, {n})"
  if t.ndim == 0 or (t.ndim == 1 and t.shape == (n,)):
    t = np.broadcast_to(t, (nworld, nrow, n))
  elif t.ndim == 2 and t.shape == (nworld, n):
    t = np.broadcast_to(t[:, None, :], (nworld, nrow, n))
  elif t.ndim != 3 or t.shape != (nworld, nrow, n):
    raise ValueError(f"{name}: target must have shape {shapes}, got {t.shape}")
  if not np.all(np.isfinite(t)):
    raise ValueError(f"{name}: target contains NaN/Inf")
  return t


class CostTerm:
  """Base class of cost terms; `bind(scene, nstep)` resolves names and returns residual channels."""

  def bind(self, scene, nstep: int) -> list[_Channels]:
    raise NotImplementedError

  def __repr__(self) -> str:
    fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
    return f"{type(self).__name__}({fields})"


class _StateTerm(CostTerm):
  """A residual on trajectory rows 0..nstep with running and terminal weights."""

  def __init__(self, target, running, terminal):
    self.target = target
    self.running = running
    self.terminal = terminal

  def _channels(self, scene, nstep: int, kind: int, idx, col) -> list[_Channels]:
    name = type(self).__name__
    n = len(idx)
    run = _weights(name, self.running, n, "running") * scene.dt
    term = _weights(name, self.terminal, n, "terminal")
    target = _target(name, self.target, n, scene.nworld, nstep + 1)
    if not (run.any() or term.any()):
      raise ValueError(f"{name}: every weight is zero; give running= and/or terminal= weights")
    return [_Channels(kind, idx, col, run, term, target)]


def _joint_ids(scene, joints, name: str) -> list[int]:
  if joints is None:
    return list(range(scene.mjm.njnt))
  if isinstance(joints, (str, int, np.integer)):
    joints = [joints]
  ids = []
  for j in joints:
    if isinstance(j, str):
      ids.append(scene.name2id(mujoco.mjtObj.mjOBJ_JOINT, j))
    elif isinstance(j, (int, np.integer)) and 0 <= j < scene.mjm.njnt:
      ids.append(int(j))
    else:
      raise UnknownNameError(f"{name}: joint {j!r} is not a joint name or an index in [0, {scene.mjm.njnt})")
  return ids


class QposCost(_StateTerm):
  """Tracks joint positions: residual `qpos[joint] - target` (hinge and slide joints).

  Args:
    target: rad or m; shape `()`, `(n,)`, `(nworld, n)` or `(nworld, nstep + 1, n)` for the `n`
      selected joints (a per-world, per-step reference).
    joints: joint names or ids; default: every hinge and slide joint, in model order.
    running: running weight (scalar or `(n,)`), per second; default 0.
    terminal: weight on the final state (scalar or `(n,)`); default 0. Give at least one.
  """

  def __init__(self, target, *, joints=None, running=0.0, terminal=0.0):
    super().__init__(target, running, terminal)
    self.joints = joints

  def bind(self, scene, nstep):
    mjm = scene.mjm
    ids = _joint_ids(scene, self.joints, "QposCost")
    if self.joints is None:
      ids = [j for j in ids if int(mjm.jnt_type[j]) in _HINGE_SLIDE]
    bad = [mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j) or j for j in ids
           if int(mjm.jnt_type[j]) not in _HINGE_SLIDE]
    if bad:
      raise ValueError(f"QposCost: joints {bad} are free or ball joints, whose qpos holds a quaternion; "
                       "track their pose with a SensorCost on a framepos/framequat sensor instead")
    if not ids:
      raise ValueError("QposCost: the model has no hinge or slide joint")
    return self._channels(scene, nstep, QPOS, mjm.jnt_qposadr[ids], mjm.jnt_dofadr[ids])


class QvelCost(_StateTerm):
  """Tracks joint velocities: residual `qvel[dof] - target` for every dof of the selected joints.

  Args:
    target: rad/s or m/s; shape `()`, `(n,)`, `(nworld, n)` or `(nworld, nstep + 1, n)` for the `n`
      dofs of the selected joints (a free joint has 6, a ball joint 3).
    joints: joint names or ids; default: all joints.
    running: running weight (scalar or `(n,)`), per second; default 0.
    terminal: weight on the final state (scalar or `(n,)`); default 0. Give at least one.
  """

  def __init__(self, target=0.0, *, joints=None, running=0.0, terminal=0.0):
    super().__init__(target, running, terminal)
    self.joints = joints

  def bind(self, scene, nstep):
    mjm = scene.mjm
    dofs = []
    for j in _joint_ids(scene, self.joints, "QvelCost"):
      adr = int(mjm.jnt_dofadr[j])
      dofs.extend(range(adr, adr + joints.DOF_WIDTH[int(mjm.jnt_type[j])]))
    if not dofs:
      raise ValueError("QvelCost: the model has no joint")
    return self._channels(scene, nstep, QVEL, dofs, [scene.nv + d for d in dofs])


class SensorCost(_StateTerm):
  """Drives a named sensor toward a target: residual `sensordata[sensor] - target`.

  Args:
    sensor: sensor name (or id).
    target: sensor units; shape `()`, `(dim,)`, `(nworld, dim)` or `(nworld, nstep + 1, dim)`.
    running: running weight (scalar or `(dim,)`), per second; default 0.
    terminal: weight on the final row (scalar or `(dim,)`); default 0. Give at least one.
  """

  def __init__(self, sensor, target, *, running=0.0, terminal=0.0):
    super().__init__(target, running, terminal)
    self.sensor = sensor

  def _sensor_id(self, scene) -> int:
    if isinstance(self.sensor, str):
      return scene.name2id(mujoco.mjtObj.mjOBJ_SENSOR, self.sensor)
    if isinstance(self.sensor, (int, np.integer)) and 0 <= self.sensor < scene.mjm.nsensor:
      return int(self.sensor)
    raise UnknownNameError(f"SensorCost: sensor {self.sensor!r} is not a sensor name or an index in "
                           f"[0, {scene.mjm.nsensor})")

  def bind(self, scene, nstep):
    s = self._sensor_id(scene)
    adr, dim = int(scene.mjm.sensor_adr[s]), int(scene.mjm.sensor_dim[s])
    idx = list(range(adr, adr + dim))
    return self._channels(scene, nstep, SENSOR, idx, idx)


class SiteCost(SensorCost):
  """Drives a site's world position toward a target, through the site's `framepos` sensor.

  MJWarp computes site positions inside the step, so the rollout sees them through a sensor: the
  model needs a `framepos` sensor on the site in the world frame (`add_site_sensors` adds one).

  Args:
    site: site name.
    target: m; shape `()`, `(3,)`, `(nworld, 3)` or `(nworld, nstep + 1, 3)`.
    running: running weight (scalar or `(3,)`), per second; default 0.
    terminal: weight on the final position (scalar or `(3,)`); default 0. Give at least one.
  """

  def __init__(self, site: str, target, *, running=0.0, terminal=0.0):
    super().__init__(None, target, running=running, terminal=terminal)
    self.site = site

  def _sensor_id(self, scene) -> int:
    mjm = scene.mjm
    sid = scene.name2id(mujoco.mjtObj.mjOBJ_SITE, self.site)
    for s in range(mjm.nsensor):
      if (mjm.sensor_type[s] == mujoco.mjtSensor.mjSENS_FRAMEPOS and mjm.sensor_objtype[s] == mujoco.mjtObj.mjOBJ_SITE
          and mjm.sensor_objid[s] == sid and mjm.sensor_refid[s] < 0):
        return s
    raise ValueError(f"SiteCost: site {self.site!r} has no framepos sensor in the world frame, and MJWarp "
                     f"exposes site positions to rollouts only through sensors. Build the scene from "
                     f"diffsim.losses.add_site_sensors(spec, [{self.site!r}]) or add "
                     f"<framepos objtype=\"site\" objname=\"{self.site}\"/> to the MJCF")


def _actuator_ids(scene, actuators, name: str) -> list[int]:
  if actuators is None:
    return list(range(scene.nu))
  if isinstance(actuators, (str, int, np.integer)):
    actuators = [actuators]
  ids = []
  for a in actuators:
    if isinstance(a, str):
      ids.append(scene.name2id(mujoco.mjtObj.mjOBJ_ACTUATOR, a))
    elif isinstance(a, (int, np.integer)) and 0 <= a < scene.nu:
      ids.append(int(a))
    else:
      raise UnknownNameError(f"{name}: actuator {a!r} is not an actuator name or an index in [0, {scene.nu})")
  if not ids:
    raise ValueError(f"{name}: the model has no actuator")
  return ids


class CtrlCost(CostTerm):
  """Control effort: residual `ctrl[:, k] - target`, integrated over the horizon.

  Args:
    weight: scalar or `(n,)` for the `n` selected actuators, per second.
    target: ctrl units; shape `()`, `(n,)`, `(nworld, n)` or `(nworld, nstep, n)`.
    actuators: actuator names or ids; default: all.
  """

  def __init__(self, weight=1.0, *, target=0.0, actuators=None):
    self.weight = weight
    self.target = target
    self.actuators = actuators

  def bind(self, scene, nstep):
    ids = _actuator_ids(scene, self.actuators, "CtrlCost")
    n = len(ids)
    run = _weights("CtrlCost", self.weight, n) * scene.dt
    target = _target("CtrlCost", self.target, n, scene.nworld, nstep)
    target = np.concatenate([target, target[:, -1:]], axis=1)  # row nstep unused (no control there)
    return [_Channels(CTRL, ids, ids, run, np.zeros(n), target)]


class CtrlRateCost(CostTerm):
  """Control smoothness: residual `(ctrl[:, k] - ctrl[:, k - 1]) / dt` for `k = 1 .. nstep - 1`.

  Args:
    weight: scalar or `(n,)` for the `n` selected actuators, per second (the residual is a rate).
    actuators: actuator names or ids; default: all.
  """

  def __init__(self, weight=1.0, *, actuators=None):
    self.weight = weight
    self.actuators = actuators

  def bind(self, scene, nstep):
    ids = _actuator_ids(scene, self.actuators, "CtrlRateCost")
    n = len(ids)
    run = _weights("CtrlRateCost", self.weight, n) / scene.dt  # dt * (du / dt)^2
    return [_Channels(CTRL_RATE, ids, ids, run, np.zeros(n), np.zeros((scene.nworld, nstep + 1, n)))]


class KernelCost(CostTerm):
  """A user-written cost: `fn(traj, out)` launches Warp kernels that write each world's cost.

  `out` is a zeroed `wp.array[float]` `(nworld,)` owned by this term; `fn` may assign or add to it.
  The kernels must be differentiable Warp kernels (reading `traj.qpos`, `traj.qvel`, `traj.act`,
  `traj.sensordata`, `traj.ctrl`) and must not allocate or copy to the host, so the solvers can
  record them on a tape and capture them in a graph; allocate scratch arrays once, outside `fn`.

  Example:
    @wp.kernel
    def tip_height(sensordata: wp.array3d[float], out: wp.array[float]):
      w = wp.tid()
      z = sensordata[w, sensordata.shape[1] - 1, 3]
      out[w] = (z - 0.6) * (z - 0.6)

    cost = KernelCost(lambda traj, out: wp.launch(tip_height, dim=traj.nworld,
                                                  inputs=[traj.sensordata], outputs=[out]))
  """

  def __init__(self, fn: Callable, *, name: str | None = None):
    if not callable(fn):
      raise TypeError(f"KernelCost needs a callable fn(traj, out), got {type(fn).__name__}")
    self.fn = fn
    self.name = name or getattr(fn, "__name__", "kernel")

  def bind(self, scene, nstep):
    return []


@wp.kernel
def _quadratic_cost(
  # In:
  nstep: int,
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qvel: wp.array3d[float],  # (nworld, nstep + 1, nv)
  sensordata: wp.array3d[float],  # (nworld, nstep + 1, ns)
  ctrl: wp.array3d[float],  # (nworld, nstep, nu)
  ch_kind: wp.array[int],  # (nch,)
  ch_idx: wp.array[int],  # (nch,)
  ch_running: wp.array[float],  # (nch,) dt folded in
  ch_terminal: wp.array[float],  # (nch,)
  target: wp.array3d[float],  # (nworld, nstep + 1, nch)
  # Out:
  cost_out: wp.array[float],  # (nworld,) accumulated
):
  w, k, c = wp.tid()
  kind = ch_kind[c]
  i = ch_idx[c]
  r = float(0.0)
  if kind == QPOS:
    r = qpos[w, k, i] - target[w, k, c]
  elif kind == QVEL:
    r = qvel[w, k, i] - target[w, k, c]
  elif kind == SENSOR:
    r = sensordata[w, k, i] - target[w, k, c]
  elif kind == CTRL:
    if k == nstep:
      return
    r = ctrl[w, k, i] - target[w, k, c]
  else:  # CTRL_RATE
    if k == 0 or k == nstep:
      return
    r = ctrl[w, k, i] - ctrl[w, k - 1, i]
  weight = ch_running[c]
  if k == nstep:
    weight = ch_terminal[c]
  wp.atomic_add(cost_out, w, 0.5 * weight * r * r)


@wp.kernel
def _add_cost(src: wp.array[float], dst: wp.array[float]):
  w = wp.tid()
  dst[w] += src[w]


class Cost:
  """Terms bound to a scene and horizon; evaluates the per-world cost of a trajectory.

  Args:
    scene: the `Scene`.
    nstep: horizon (number of steps).
    terms: `CostTerm`s (a list, or one term).

  Raises `diffsim.UnknownNameError` (a `KeyError`) for an unknown joint, sensor, site or actuator
  name, `ValueError` for a wrong target or weight shape, before anything is allocated on the device.

  Attributes (device arrays, for solvers):
    ch_kind, ch_idx, ch_col: `(nch,)` int residual kind, source column, tangent column.
    ch_running, ch_terminal: `(nch,)` float weights (running ones with dt folded in).
    target: `(nworld, nstep + 1, nch)` float targets.
    nch: number of residual channels; has_rate: any `CtrlRateCost`.
  """

  def __init__(self, scene, nstep: int, terms: CostTerm | Sequence[CostTerm]):
    if isinstance(terms, CostTerm):
      terms = [terms]
    terms = list(terms)
    if not terms:
      raise ValueError("the cost has no terms; pass e.g. [QposCost(...), CtrlCost(0.01)]")
    for t in terms:
      if not isinstance(t, CostTerm):
        raise TypeError(f"cost terms must be diffsim.losses.CostTerm objects, got {type(t).__name__}")
    chans = [c for t in terms for c in t.bind(scene, nstep)]
    self.scene, self.nstep, self.terms = scene, nstep, terms
    self.kernels = [t for t in terms if isinstance(t, KernelCost)]
    self.has_rate = any(c.kind == CTRL_RATE for c in chans)
    nw, dev = scene.nworld, scene.device
    cat = lambda f, dt: np.concatenate([np.broadcast_to(f(c), len(c.idx)) for c in chans]).astype(dt) if chans \
      else np.zeros(0, dt)
    self.nch = int(sum(len(c.idx) for c in chans))
    m = max(self.nch, 1)  # zero-size arrays cannot be launched over; pad
    pad = lambda a: np.concatenate([a, np.zeros(m - len(a), a.dtype)])
    self.ch_kind = wp.array(pad(cat(lambda c: c.kind, np.int32)), dtype=int, device=dev)
    self.ch_idx = wp.array(pad(cat(lambda c: c.idx, np.int32)), dtype=int, device=dev)
    self.ch_col = wp.array(pad(cat(lambda c: c.col, np.int32)), dtype=int, device=dev)
    self.ch_running = wp.array(pad(cat(lambda c: c.running, np.float32)), dtype=float, device=dev)
    self.ch_terminal = wp.array(pad(cat(lambda c: c.terminal, np.float32)), dtype=float, device=dev)
    target = np.zeros((nw, nstep + 1, m), np.float32)
    if chans:
      target[..., :self.nch] = np.concatenate([c.target for c in chans], axis=2)
    self.target = wp.array(target, dtype=float, device=dev)
    self._kernel_out = [wp.zeros(nw, dtype=float, device=dev, requires_grad=True) for _ in self.kernels]

  def evaluate(self, traj, out: wp.array) -> wp.array:
    """Writes each world's cost of `traj` into `out` `(nworld,)`; differentiable on a `wp.Tape`."""
    dev = self.scene.device
    out.zero_()
    if self.nch:
      wp.launch(_quadratic_cost, dim=(self.scene.nworld, self.nstep + 1, self.nch), device=dev,
                inputs=[self.nstep, traj.qpos, traj.qvel, traj.sensordata, traj.ctrl, self.ch_kind, self.ch_idx,
                        self.ch_running, self.ch_terminal, self.target], outputs=[out])
    for term, buf in zip(self.kernels, self._kernel_out):
      buf.zero_()
      term.fn(traj, buf)
      wp.launch(_add_cost, dim=self.scene.nworld, device=dev, inputs=[buf], outputs=[out])
    return out


def add_site_sensors(model, sites: Sequence[str] | str, *, linvel: bool = False) -> mujoco.MjSpec:
  """Adds a world-frame `framepos` sensor (and optionally `framelinvel`) on each site.

  Args:
    model: MJCF path or a `mujoco.MjSpec` (modified in place).
    sites: site names.
    linvel: also add a `framelinvel` sensor (m/s), e.g. to release an object at the site's velocity.

  Returns:
    The `MjSpec`, to pass to `Scene.from_xml`. Sensors are named `"{site}_pos"` and `"{site}_linvel"`.
  """
  spec = model if isinstance(model, mujoco.MjSpec) else mujoco.MjSpec.from_file(str(model))
  names = {s.name for s in spec.sites}
  for site in [sites] if isinstance(sites, str) else sites:
    if site not in names:
      raise UnknownNameError(f"no site named {site!r} in the model; sites are: {sorted(n for n in names if n)}")
    kinds = [("pos", mujoco.mjtSensor.mjSENS_FRAMEPOS)] + ([("linvel", mujoco.mjtSensor.mjSENS_FRAMELINVEL)]
                                                           if linvel else [])
    for suffix, typ in kinds:
      spec.add_sensor(name=f"{site}_{suffix}", type=typ, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site)
  return spec
