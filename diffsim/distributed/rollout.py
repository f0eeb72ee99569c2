"""Rollouts and tape gradients of many worlds, sharded over a `Cluster`'s workers.

Each worker builds, once per model, cost and world slice, a scene of its worlds, a differentiable
`diffsim.Rollout` and the bound `losses.Cost`, with every array on its device; a call then copies the
shard's controls and initial states in, runs the rollout on a `wp.Tape`, seeds every world's cost with
1 and runs the backward pass (all of it captured as a graph after the first call, and replayed), and
sends back the per-world costs, the gradients of their sum and (optionally) the trajectory. Worlds are
independent, so these equal, world by world, what one process returns for all worlds (the same
kernels on the same inputs).

What crosses per call: the controls and initial states going out, the costs, gradients and
trajectory coming back (`RolloutResult.traffic`); the model and cost once per worker.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .cluster import Cluster, Traffic, Worker, check_workers, local_cores, register_job, shards

__all__ = ["rollout", "RolloutResult", "run_rollout"]

@dataclass(kw_only=True)
class RolloutResult:
  """The shards' results gathered in world order (host arrays).

  Attributes:
    trajectory: `Trajectory.numpy()`'s arrays by name: `qpos` `(nworld, nstep + 1, nq)`, `qvel`
      `(nworld, nstep + 1, nv)`, `act` `(nworld, nstep + 1, na)`, `sensordata`
      `(nworld, nstep + 1, nsensordata)`, `ctrl` `(nworld, nstep, nu)`; None with `trajectory=False`.
    cost: `(nworld,)` float32 cost per world; None without a cost.
    grad: gradients of the summed cost (each world's cost depends on its own inputs only): `ctrl`
      `(nworld, nstep, nu)`, `qpos0` `(nworld, nq)` (as `qpos0.grad` after `diffsim.rollout` on a
      tape), `qvel0` `(nworld, nv)`, and `act0` `(nworld, na)` where the model has activations; None
      without gradients.
    time: wall time of the call, s.
    traffic: bytes that crossed between the processes in this call.
  """

  trajectory: dict[str, np.ndarray] | None
  cost: np.ndarray | None
  grad: dict[str, np.ndarray] | None
  time: float
  traffic: Traffic


class SceneFromModel:
  """A picklable scene factory: `Scene.from_xml(model, nworld=len(worlds), device=device)`."""

  def __init__(self, model):
    self.model = model

  def __call__(self, worlds: range, device: str):
    from ..scene import Scene

    return Scene.from_xml(self.model, nworld=len(worlds), device=device)

  def __repr__(self) -> str:
    return f"SceneFromModel({self.model if isinstance(self.model, (str, os.PathLike)) else type(self.model).__name__})"


class CostTerms:
  """A picklable cost factory returning the same terms for every shard."""

  def __init__(self, terms):
    self.terms = terms

  def __call__(self, worlds: range):
    return self.terms


def scene_factory(model) -> Callable:
  """A picklable `(worlds, device) -> Scene` from a model path, XML string, `MjSpec`, `MjModel`, or
  the factory itself."""
  import mujoco

  if isinstance(model, mujoco.MjSpec):
    return SceneFromModel(model.compile())  # an MjSpec does not pickle; its compiled model does
  if isinstance(model, (str, os.PathLike, mujoco.MjModel)):
    return SceneFromModel(model)
  if callable(model):
    return model
  raise TypeError(f"model must be an MJCF path or string, a mujoco.MjSpec or MjModel, or a function "
                  f"(worlds, device) -> diffsim.Scene; got {type(model).__name__}")


def cost_factory(cost) -> Callable | None:
  """A picklable `worlds -> terms` from `None`, a `CostTerm`, a list of them, or the factory itself."""
  from ..losses import CostTerm

  if cost is None:
    return None
  if isinstance(cost, CostTerm):
    cost = [cost]
  if isinstance(cost, (list, tuple)):
    bad = [type(t).__name__ for t in cost if not isinstance(t, CostTerm)]
    if bad or not cost:
      raise TypeError(f"cost must hold diffsim.losses terms (QposCost, CtrlCost, ...), got {bad or 'none'}")
    return CostTerms(list(cost))
  if callable(cost):
    return cost
  raise TypeError(f"cost must be a diffsim.losses term, a list of them, or a function worlds -> terms (per-world "
                  f"targets, sliced to the shard's worlds); got {type(cost).__name__}")


def _host_inputs(ctrl, states: dict) -> tuple[np.ndarray, dict]:
  """Checks the per-world inputs on the host: ctrl `(nworld, nstep, nu)`, states `(nworld, n)` or `(n,)`."""
  if hasattr(ctrl, "numpy") and not isinstance(ctrl, np.ndarray):
    ctrl = ctrl.numpy()  # a wp.array (or a tensor on the host)
  u = np.ascontiguousarray(ctrl, dtype=np.float32)
  if u.ndim != 3 or u.shape[0] < 1 or u.shape[1] < 1:
    raise ValueError(f"ctrl must have shape (nworld, nstep, nu) with nworld, nstep >= 1, got {u.shape}")
  if not np.all(np.isfinite(u)):
    raise ValueError("ctrl contains NaN/Inf")
  out = {}
  for name, x in states.items():
    if x is None:
      continue
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
      x = x.numpy()
    a = np.ascontiguousarray(x, dtype=np.float32)
    if a.ndim not in (1, 2) or (a.ndim == 2 and a.shape[0] != u.shape[0]):
      raise ValueError(f"{name} must have shape (nworld={u.shape[0]}, n) or (n,), got {a.shape}")
    if not np.all(np.isfinite(a)):
      raise ValueError(f"{name} contains NaN/Inf")
    out[name] = a
  return u, out


def rollout(model, ctrl, *, qpos0=None, qvel0=None, act0=None, cost=None, grad: bool | None = None,
            trajectory: bool = True, options: dict | None = None, workers: int | None = None,
            address: str | None = None, device: str | None = None, timeout: float = 60.0) -> RolloutResult:
  """Rolls out (and differentiates) many worlds on `workers` Ray workers; a cluster for one call.

  For repeated calls hold a `Cluster` and call `cluster.rollout(...)` (same arguments, less the
  cluster's): the workers keep their scenes and buffers between calls.

  Args:
    model: an MJCF path (it must exist on every node) or XML string, a `mujoco.MjSpec` or
      `MjModel` (pickled to the workers), or a picklable function `(worlds: range, device: str) ->
      diffsim.Scene` for scene settings (solver, `njmax`) or per-world model values.
    ctrl: `(nworld, nstep, nu)` controls (array-like or `wp.array`), float32.
    qpos0, qvel0, act0: `(nworld, n)` or `(n,)` initial state; default: the model's `qpos0`, zero
      velocities and activations (as `diffsim.rollout`).
    cost: `diffsim.losses` terms (a list, or one), the same for every world, or a picklable function
      `worlds -> terms` (per-world targets, sliced to `worlds`); None: no cost.
    grad: tape gradients of the summed cost (default: when there is a cost).
    trajectory: send back the trajectory (False: only costs and gradients cross).
    options: `diffsim.Rollout` keyword arguments (`gradient`, `central`, `eps`, ...), and `check`
      (default True: a `DivergenceError` names the shard's world and step) and `capture` (default
      True: each worker replays its call as a captured graph after the first).
    workers: Ray workers (>= 1, <= nworld); default: one per CPU core (or, at `address`, per CPU or
      GPU of the cluster), at most `nworld`.
    address, device, timeout: see `Cluster`.

  Returns:
    A `RolloutResult`.

  Raises:
    ImportError: Ray is not installed. ValueError: a bad shape, `workers < 1` or more workers than
      worlds, before the cluster starts. ConnectionError: nothing answers at `address`.
    WorkerError: a worker died during the call.
  """
  u, _ = _host_inputs(ctrl, {"qpos0": qpos0, "qvel0": qvel0, "act0": act0})
  nworld = u.shape[0]
  check_workers(workers, nworld)
  scene_factory(model)  # type errors before the cluster starts
  cost_factory(cost)
  if workers is None:
    workers = min(local_cores(), nworld) if address is None else None
  with Cluster(workers, address, device=device, timeout=timeout) as cluster:
    return run_rollout(cluster, model, u, qpos0=qpos0, qvel0=qvel0, act0=act0, cost=cost, grad=grad,
                       trajectory=trajectory, options=options, workers=min(cluster.workers, nworld))


def run_rollout(cluster: Cluster, model, ctrl, *, qpos0=None, qvel0=None, act0=None, cost=None,
                grad: bool | None = None, trajectory: bool = True, options: dict | None = None,
                workers: int | None = None) -> RolloutResult:
  """`rollout` on a held cluster (`Cluster.rollout`); `workers`: use the first `workers` of them
  (default: all)."""
  t0 = time.perf_counter()
  u, states = _host_inputs(ctrl, {"qpos0": qpos0, "qvel0": qvel0, "act0": act0})
  nworld, nstep = u.shape[:2]
  grad = cost is not None if grad is None else bool(grad)
  if grad and cost is None:
    raise ValueError("grad=True needs a cost to differentiate: pass cost=[...] (diffsim.losses terms)")
  options = {"check": True, **dict(options or {})}
  for key in ("differentiable", "params", "directions"):
    if key in options:
      raise ValueError(f"options: {key!r} is not supported by the sharded rollout")
  parts = shards(nworld, cluster.use(workers, nworld))
  scene = cluster.ship(scene_factory(model), "model")
  terms = cluster.ship(cost_factory(cost), "cost") if cost is not None else None
  args = [(scene, terms, w, nstep, options, grad, bool(trajectory),
           {"ctrl": u[w.start:w.stop], **{k: (a if a.ndim == 1 else a[w.start:w.stop]) for k, a in states.items()}})
          for w in parts]
  labels = [f"worlds {w.start}-{w.stop - 1}" for w in parts]
  outs = cluster.map(_rollout_shard, args, what="rollout", labels=labels)
  cat = lambda key: {k: np.concatenate([o[key][k] for o in outs]) for k in outs[0][key]}
  return RolloutResult(trajectory=cat("trajectory") if trajectory else None,
                       cost=np.concatenate([o["cost"] for o in outs]) if cost is not None else None,
                       grad=cat("grad") if grad else None, time=time.perf_counter() - t0,
                       traffic=cluster.last_traffic)


register_job("rollout", run_rollout)  # `Cluster.rollout`


# -- the worker side --------------------------------------------------------------------------------


class _Shard:
  """One worker's scene, rollout, cost and device arrays for its worlds, made once and reused.

  The first call runs eagerly (it loads the kernels) and then captures the call as a graph
  (`capture=True`): later calls copy the inputs in and replay it, without Python's launch overhead,
  which does not shrink with the shard's worlds and so would cap the speedup of more workers.
  """

  def __init__(self, scene, terms, nstep: int, options: dict, grad: bool):
    import warp as wp

    from ..losses import Cost
    from ..rollout import Rollout

    options = dict(options)
    self.check = bool(options.pop("check", True))
    self.capture = bool(options.pop("capture", True))
    self.scene, self.grad, self.nstep = scene, grad, nstep
    n, dev = scene.nworld, scene.device
    # the NaN/Inf check reads the host: it runs after each call, outside the graph
    self.rollout = Rollout(scene, nstep, differentiable=grad, check=False, **options)
    self.cost = Cost(scene, nstep, terms) if terms is not None else None
    zeros = lambda *shape: wp.zeros(shape, dtype=float, device=dev, requires_grad=grad)
    self.ctrl = zeros(n, nstep, scene.nu)
    self.widths = {"qpos0": scene.nq, "qvel0": scene.nv, "act0": scene.na}
    self.defaults = {"qpos0": scene.mjm.qpos0, "qvel0": 0.0, "act0": 0.0}
    self.states = {k: zeros(n, w) for k, w in self.widths.items() if w}
    self.out = zeros(n)
    if grad:
      self.out.grad = wp.ones(n, dtype=float, device=dev)  # the seed: d(sum of costs) / d(cost of world w) = 1
    self.traj, self.graph = None, None

  def _run(self):
    import warp as wp

    if not self.grad:
      self.traj = self.rollout(self.ctrl, **self.states)
      if self.cost is not None:
        self.cost.evaluate(self.traj, self.out)
      return
    for a in (self.ctrl, *self.states.values()):
      a.grad.zero_()
    tape = wp.Tape()
    with tape:
      self.traj = self.rollout(self.ctrl, **self.states)
      self.cost.evaluate(self.traj, self.out)
    tape.backward()  # from the seed in out.grad

  def __call__(self, inputs: dict, keep_trajectory: bool) -> dict:
    import warp as wp

    from ..rollout import check_finite

    n, nu = self.scene.nworld, self.scene.nu
    u = inputs["ctrl"]
    if u.shape[1:] != (self.nstep, nu):
      raise ValueError(f"ctrl must have shape (nworld, nstep, nu={nu}) for this model, got {inputs['ctrl'].shape}")
    self.ctrl.assign(u)
    for name, width in self.widths.items():
      value = inputs.get(name, self.defaults[name])
      if np.ndim(value) and np.shape(value)[-1] != width:
        raise ValueError(f"{name} must have {width} columns for this model, got shape {np.shape(value)}")
      if width:
        self.states[name].assign(np.broadcast_to(np.asarray(value, np.float32), (n, width)))
      elif name in inputs:
        raise ValueError(f"{name} given, but the model has no {name[:-1]} (width 0)")
    if self.graph is not None:
      wp.capture_launch(self.graph)
    else:
      self._run()  # eagerly: loads the kernels, which a capture cannot
      if self.capture:
        with wp.ScopedCapture(device=self.scene.device) as cap:
          self._run()
        self.graph = cap.graph
    if self.check:
      check_finite(self.traj)
    out = {"cost": self.out.numpy() if self.cost is not None else None}
    if self.grad:
      out["grad"] = {"ctrl": self.ctrl.grad.numpy(), **{k: a.grad.numpy() for k, a in self.states.items()}}
    if keep_trajectory:
      out["trajectory"] = self.traj.numpy()
    return out


def _rollout_shard(worker: Worker, scene, terms, worlds: range, nstep: int, options: dict, grad: bool,
                   keep_trajectory: bool, inputs: dict) -> dict:
  make_scene = worker.resolve(scene)
  make_terms = worker.resolve(terms) if terms is not None else None
  key = ("rollout", scene.token, terms and terms.token, worlds.start, worlds.stop, nstep,
         repr(sorted(options.items())), grad)

  def build():
    s = make_scene(worlds, worker.device)
    if getattr(s, "nworld", None) != len(worlds):
      raise ValueError(f"the model factory returned {s!r} for {len(worlds)} worlds; it must return a diffsim.Scene "
                       f"with nworld=len(worlds)")
    return _Shard(s, make_terms(worlds) if make_terms else None, nstep, options, grad)

  return worker.cached(key, build)(inputs, keep_trajectory)
