"""Gradient checks: tape gradients against central differences of float64 MuJoCo C.

`check_gradients` draws a random linear functional of the whole trajectory,

  L = sum(Wq * qpos) + sum(Wv * qvel) + sum(Wa * act) + sum(Ws * sensordata),

so that one backward pass exercises every output's adjoint, then compares d(L)/d(ctrl, qpos0,
qvel0, params) from `tape.backward` with central differences of the same functional on rollouts
of `mujoco.mj_step` in float64 (parameters set in the `MjModel`, then `mj_setConst`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import mujoco
import numpy as np
import warp as wp

from . import joints
from .params import Param
from .rollout import rollout

__all__ = ["mujoco_rollout", "check_gradients", "GradCheck", "set_mjmodel_params", "linear_functional"]


def set_mjmodel_params(mjm: mujoco.MjModel, values: dict[Param, np.ndarray]) -> None:
  """Writes parameter values into a host `MjModel` (float64) and updates derived constants."""
  inertial = False
  for p, v in values.items():
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    arr = getattr(mjm.opt, p.field[4:]) if p.field.startswith("opt.") else getattr(mjm, p.field)
    flat = arr.reshape(-1, p.width)  # a view of the model's memory
    i = 0
    for e in p.elements:
      for c in p.components:
        flat[e, c] = v[i]
        if p.tie_bias is not None and c == 0 and e in p.tie_bias:
          mjm.actuator_biasprm[e, 1] = -v[i]
        i += 1
    inertial |= p.inertial
  if inertial:
    mujoco.mj_setConst(mjm, mujoco.MjData(mjm))


def mujoco_rollout(mjm: mujoco.MjModel, ctrl: np.ndarray, *, qpos0=None, qvel0=None, act0=None
                   ) -> dict[str, np.ndarray]:
  """One float64 MuJoCo C rollout with diffsim's conventions.

  Args:
    mjm: host model.
    ctrl: `(nstep, nu)`.
    qpos0, qvel0, act0: initial state (defaults: `mjm.qpos0`, zeros).

  Returns:
    `qpos (nstep+1, nq)`, `qvel`, `act`, `sensordata (nstep+1, ns)`; sensordata row k is computed
    inside `mj_step` from state k, row nstep by `mj_forward` at the final state.
  """
  d = mujoco.MjData(mjm)
  d.qpos[:] = mjm.qpos0 if qpos0 is None else qpos0
  d.qvel[:] = 0 if qvel0 is None else qvel0
  if mjm.na:
    d.act[:] = 0 if act0 is None else act0
  nstep = ctrl.shape[0]
  out = {k: np.zeros((nstep + 1, n)) for k, n in
         (("qpos", mjm.nq), ("qvel", mjm.nv), ("act", mjm.na), ("sensordata", mjm.nsensordata))}
  out["qpos"][0], out["qvel"][0], out["act"][0] = d.qpos, d.qvel, d.act
  for k in range(nstep):
    d.ctrl[:] = ctrl[k]
    mujoco.mj_step(mjm, d)
    out["sensordata"][k] = d.sensordata
    out["qpos"][k + 1], out["qvel"][k + 1], out["act"][k + 1] = d.qpos, d.qvel, d.act
  mujoco.mj_forward(mjm, d)
  out["sensordata"][nstep] = d.sensordata
  return out


@dataclass
class GradCheck:
  """Per input: tape gradient and finite-difference gradient, `(nchecked, ...)` (one row per checked
  world), and the relative error `|g - g_fd| / |g_fd|`, the largest over the checked worlds
  (`rel_err_by_world` has each)."""

  worlds: list[int] = field(default_factory=list)
  tape: dict[str, np.ndarray] = field(default_factory=dict)
  fd: dict[str, np.ndarray] = field(default_factory=dict)
  rel_err: dict[str, float] = field(default_factory=dict)
  rel_err_by_world: dict[str, np.ndarray] = field(default_factory=dict)

  @property
  def max_rel_err(self) -> float:
    return max(self.rel_err.values())

  def __str__(self) -> str:
    return ", ".join(f"{k}: rel err {v:.2e} (|g|={np.linalg.norm(self.fd[k][0]):.3g}, worlds {self.worlds})"
                     for k, v in self.rel_err.items())


@wp.kernel
def linear_functional(
  # In:
  a: wp.array3d[float],  # (nworld, nstep + 1, n)
  weights: wp.array3d[float],  # (nworld, nstep + 1, n)
  # Out:
  loss: wp.array[float],
):
  w, k, i = wp.tid()
  wp.atomic_add(loss, 0, weights[w, k, i] * a[w, k, i])


def _per_world(x, n: int, width_ndim: int, name: str) -> np.ndarray:
  """`x` with a leading world axis: shared (`width_ndim` dims) or per world (one more)."""
  x = np.asarray(x, dtype=np.float64)
  if x.ndim == width_ndim:
    return np.broadcast_to(x, (n,) + x.shape).copy()
  if x.ndim == width_ndim + 1 and x.shape[0] == n:
    return x.copy()
  raise ValueError(f"{name} must have {width_ndim} dimensions (shared by all worlds) or {width_ndim + 1} with "
                   f"nworld={n} first, got shape {x.shape}")


def check_gradients(scene, ctrl: np.ndarray, *, qpos0=None, qvel0=None, params: Sequence[Param] = (),
                    wrt: Sequence[str] = ("ctrl", "qpos0", "qvel0", "params"), worlds: Sequence[int] | None = None,
                    spread: float = 0.05, seed: int = 0, h: float = 1e-6, eps: float | dict | None = None,
                    central: bool = True,
                    signals: Sequence[str] = ("qpos", "qvel", "act", "sensordata"), gradient: str = "auto",
                    ) -> GradCheck:
  """Compares tape gradients of a random trajectory functional with float64 MuJoCo differences.

  Every world gets its own inputs and its own functional, and each checked world is compared with
  its own float64 reference, so a kernel that mixes worlds (reads another world's Jacobian, state
  or adjoint) fails the check.

  Args:
    scene: the `Scene`.
    ctrl: `(nstep, nu)` controls shared by all worlds, or `(nworld, nstep, nu)` per world. Shared
      controls and velocities are made distinct: world `w > 0` adds `spread * N(0, 1)` (seeded).
    qpos0, qvel0: `(nq,)`, `(nv,)` (or with a leading `nworld` axis) initial state (defaults:
      `qpos0` of the model, zeros). Quaternion gradients are compared in the tangent space (radial
      part dropped).
    params: `Param`s, evaluated at their current value in each world.
    wrt: inputs to check, from `"ctrl"`, `"qpos0"`, `"qvel0"`, `"params"`.
    worlds: worlds compared with the reference (default: all).
    spread: size of the per-world offsets of shared controls and velocities (ctrl units, rad/s or m/s).
    seed: seed of the random weights and offsets.
    h: finite-difference step of the float64 reference.
    eps, central: diffsim's own finite-difference steps and scheme (see `FiniteDifferenceStep`).
    signals: trajectory arrays entering the functional.
    gradient: `"auto"`, `"analytic"` or `"finite_difference"` (see `diffsim.Rollout`).

  Returns:
    A `GradCheck`.
  """
  n, dev = scene.nworld, scene.device
  worlds = list(range(n)) if worlds is None else [int(w) for w in worlds]
  if not worlds or any(not 0 <= w < n for w in worlds):
    raise ValueError(f"worlds must name worlds of the scene (0..{n - 1}), got {worlds}")
  rng = np.random.default_rng(seed)
  shared_ctrl = np.ndim(ctrl) == 2
  ctrl = _per_world(ctrl, n, 2, "ctrl")
  nstep = ctrl.shape[1]
  shared_qvel = qvel0 is None or np.ndim(qvel0) == 1
  qpos0 = _per_world(scene.mjm.qpos0 if qpos0 is None else qpos0, n, 1, "qpos0")
  qvel0 = _per_world(np.zeros(scene.nv) if qvel0 is None else qvel0, n, 1, "qvel0")
  if shared_ctrl:
    ctrl[1:] += spread * rng.standard_normal(ctrl[1:].shape)
  if shared_qvel:
    qvel0[1:] += spread * rng.standard_normal(qvel0[1:].shape)
  sizes = {"qpos": scene.nq, "qvel": scene.nv, "act": scene.na, "sensordata": scene.nsensordata}
  # a functional per world; worlds not checked stay in the loss, so their adjoints run alongside
  weights = {s: rng.standard_normal((n, nstep + 1, sizes[s])) / np.sqrt(nstep + 1) for s in signals}

  # tape gradient
  f32 = lambda x: x.astype(np.float32)
  ctrl_wp = wp.array(f32(ctrl), dtype=float, device=dev, requires_grad=True)
  qpos0_wp = wp.array(f32(qpos0), dtype=float, device=dev, requires_grad=True)
  qvel0_wp = wp.array(f32(qvel0), dtype=float, device=dev, requires_grad=True)
  for p in params:
    p.bind(scene)
    p.value.grad.zero_()
  loss = wp.zeros(1, dtype=float, device=dev, requires_grad=True)
  w_wp = {s: wp.array(f32(weights[s]), dtype=float, device=dev) for s in signals}
  tape = wp.Tape()
  with tape:
    traj = rollout(scene, ctrl_wp, qpos0=qpos0_wp, qvel0=qvel0_wp, params=list(params), eps=eps,
                   central=central, gradient=gradient)
    for s in signals:
      if sizes[s]:
        wp.launch(linear_functional, dim=(n, nstep + 1, sizes[s]), inputs=[getattr(traj, s), w_wp[s]],
                  outputs=[loss], device=dev)
  tape.backward(loss)
  tape_grads = {"ctrl": ctrl_wp.grad.numpy().copy(), "qpos0": qpos0_wp.grad.numpy().copy(),
                "qvel0": qvel0_wp.grad.numpy().copy()}
  for p in params:
    tape_grads[p.name] = p.value.grad.numpy().copy()  # the Param keeps its grad array

  # float64 reference, world by world, with the float32 inputs the tape saw
  res = GradCheck(worlds=worlds)
  grads: dict[str, list] = {}
  for w in worlds:
    values = {p: p.value.numpy()[w].astype(np.float64) for p in params}
    c_w, q_w, v_w = (f32(x[w]).astype(np.float64) for x in (ctrl, qpos0, qvel0))
    wts = {s: weights[s][w] for s in signals}

    def functional(ctrl_, qpos0_, qvel0_, values_) -> float:
      mjm = _copy(scene.mjm)
      set_mjmodel_params(mjm, values_)
      out = mujoco_rollout(mjm, ctrl_, qpos0=qpos0_, qvel0=qvel0_)
      return float(sum(np.sum(wts[s] * out[s]) for s in signals))

    def central(get, set_, size):
      g = np.zeros(size)
      for i in range(size):
        x = get().copy()
        step = h * max(1.0, abs(x.flat[i]))
        xp, xm = x.copy(), x.copy()
        xp.flat[i] += step
        xm.flat[i] -= step
        g[i] = (set_(xp) - set_(xm)) / (2 * step)
      return g

    for name in wrt:
      if name == "ctrl":
        g = central(lambda: c_w, lambda x: functional(x, q_w, v_w, values), c_w.size).reshape(c_w.shape)
        grads.setdefault("ctrl", []).append((tape_grads["ctrl"][w], g))
      elif name == "qpos0":
        g = central(lambda: q_w, lambda x: functional(c_w, x, v_w, values), q_w.size)
        grads.setdefault("qpos0", []).append((tape_grads["qpos0"][w], _project_quats(scene.mjm, q_w, g)))
      elif name == "qvel0":
        g = central(lambda: v_w, lambda x: functional(c_w, q_w, x, values), v_w.size)
        grads.setdefault("qvel0", []).append((tape_grads["qvel0"][w], g))
      elif name == "params":
        for p in params:
          g = central(lambda: values[p], lambda x: functional(c_w, q_w, v_w, {**values, p: x}), p.dim)
          grads.setdefault(p.name, []).append((tape_grads[p.name][w], g))
      else:
        raise ValueError(f"unknown input {name!r}; choose from ctrl, qpos0, qvel0, params")
  for name, pairs in grads.items():
    _add(res, name, np.stack([g for g, _ in pairs]), np.stack([g for _, g in pairs]))
  return res


def _project_quats(mjm: mujoco.MjModel, qpos: np.ndarray, g: np.ndarray) -> np.ndarray:
  """Drops the radial part of quaternion gradients: a rollout's state is a unit quaternion, and
  MuJoCo evaluates some quantities (e.g. `framequat` of a free body) on the raw, unnormalized one."""
  g = g.copy()
  for j in range(mjm.njnt):
    typ = int(mjm.jnt_type[j])
    if typ in (joints.FREE, joints.BALL):
      a = mjm.jnt_qposadr[j] + (3 if typ == joints.FREE else 0)
      q = qpos[a:a + 4] / np.linalg.norm(qpos[a:a + 4])
      g[a:a + 4] -= np.dot(g[a:a + 4], q) * q
  return g


def _add(res: GradCheck, name: str, g: np.ndarray, g_fd: np.ndarray) -> None:
  """Records `(nchecked, ...)` gradients and their relative errors, world by world."""
  res.tape[name] = np.asarray(g, dtype=np.float64)
  res.fd[name] = g_fd
  flat = lambda x: x.reshape(len(x), -1)
  err = np.linalg.norm(flat(res.tape[name] - g_fd), axis=1) / np.maximum(np.linalg.norm(flat(g_fd), axis=1), 1e-12)
  res.rel_err_by_world[name] = err
  res.rel_err[name] = float(err.max())


def _copy(mjm: mujoco.MjModel) -> mujoco.MjModel:
  import copy

  return copy.deepcopy(mjm)
