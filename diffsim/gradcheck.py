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

from .params import Param
from .rollout import rollout

__all__ = ["mujoco_rollout", "check_gradients", "GradCheck", "set_mjmodel_params"]


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
  """Per input: tape gradient, finite-difference gradient and relative error `|g - g_fd| / |g_fd|`."""

  tape: dict[str, np.ndarray] = field(default_factory=dict)
  fd: dict[str, np.ndarray] = field(default_factory=dict)
  rel_err: dict[str, float] = field(default_factory=dict)

  @property
  def max_rel_err(self) -> float:
    return max(self.rel_err.values())

  def __str__(self) -> str:
    return ", ".join(f"{k}: rel err {v:.2e} (|g|={np.linalg.norm(self.fd[k]):.3g})" for k, v in self.rel_err.items())


@wp.kernel
def _linear_functional(
  # In:
  a: wp.array3d[float],  # (nworld, nstep + 1, n)
  weights: wp.array3d[float],  # (nworld, nstep + 1, n)
  # Out:
  loss: wp.array[float],
):
  w, k, i = wp.tid()
  wp.atomic_add(loss, 0, weights[w, k, i] * a[w, k, i])


def check_gradients(scene, ctrl: np.ndarray, *, qpos0=None, qvel0=None, params: Sequence[Param] = (),
                    wrt: Sequence[str] = ("ctrl", "qpos0", "qvel0", "params"), world: int = 0, seed: int = 0,
                    h: float = 1e-6, eps: float | dict | None = None, signals: Sequence[str] = ("qpos", "qvel", "act", "sensordata"),
                    ) -> GradCheck:
  """Compares tape gradients of a random trajectory functional with float64 MuJoCo differences.

  Args:
    scene: the `Scene` (every world gets the same inputs; `world` is checked).
    ctrl: `(nstep, nu)` controls.
    qpos0, qvel0: `(nq,)`, `(nv,)` initial state (defaults: `qpos0` of the model, zeros).
      Quaternion gradients are compared in the tangent space (radial part dropped).
    params: `Param`s, evaluated at their current value in `world`.
    wrt: inputs to check, from `"ctrl"`, `"qpos0"`, `"qvel0"`, `"params"`.
    world: world whose gradient is compared.
    seed: seed of the random weights.
    h: finite-difference step of the float64 reference.
    eps: diffsim's own finite-difference step (see `FiniteDifferenceStep`).
    signals: trajectory arrays entering the functional.

  Returns:
    A `GradCheck`.
  """
  ctrl = np.asarray(ctrl, dtype=np.float64)
  nstep = ctrl.shape[0]
  n, dev = scene.nworld, scene.device
  qpos0 = scene.mjm.qpos0.copy() if qpos0 is None else np.asarray(qpos0, dtype=np.float64)
  qvel0 = np.zeros(scene.nv) if qvel0 is None else np.asarray(qvel0, dtype=np.float64)
  rng = np.random.default_rng(seed)
  sizes = {"qpos": scene.nq, "qvel": scene.nv, "act": scene.na, "sensordata": scene.nsensordata}
  weights = {s: rng.standard_normal((nstep + 1, sizes[s])) / np.sqrt(nstep + 1) for s in signals}

  # tape gradient
  tile = lambda x: np.tile(x.astype(np.float32), (n,) + (1,) * x.ndim)
  ctrl_wp = wp.array(tile(ctrl), dtype=float, device=dev, requires_grad=True)
  qpos0_wp = wp.array(tile(qpos0), dtype=float, device=dev, requires_grad=True)
  qvel0_wp = wp.array(tile(qvel0), dtype=float, device=dev, requires_grad=True)
  for p in params:
    p.bind(scene)
    p.value.grad.zero_()
  loss = wp.zeros(1, dtype=float, device=dev, requires_grad=True)
  w_wp = {s: wp.array(tile(weights[s]), dtype=float, device=dev) for s in signals}
  # only `world` enters the loss
  for s in signals:
    mask = np.zeros((n, 1, 1), np.float32)
    mask[world] = 1.0
    w_wp[s] = wp.array(w_wp[s].numpy() * mask, dtype=float, device=dev)
  tape = wp.Tape()
  with tape:
    traj = rollout(scene, ctrl_wp, qpos0=qpos0_wp, qvel0=qvel0_wp, params=list(params), eps=eps)
    for s in signals:
      if sizes[s]:
        wp.launch(_linear_functional, dim=(n, nstep + 1, sizes[s]), inputs=[getattr(traj, s), w_wp[s]],
                  outputs=[loss], device=dev)
  tape.backward(loss)
  res = GradCheck()
  tape_grads = {"ctrl": ctrl_wp.grad.numpy()[world], "qpos0": qpos0_wp.grad.numpy()[world],
                "qvel0": qvel0_wp.grad.numpy()[world]}
  for p in params:
    tape_grads[p.name] = p.value.grad.numpy()[world].copy()  # the Param keeps its grad array

  # float64 reference
  values = {p: p.value.numpy()[world].astype(np.float64) for p in params}

  def functional(ctrl_, qpos0_, qvel0_, values_) -> float:
    mjm = _copy(scene.mjm)
    set_mjmodel_params(mjm, values_)
    out = mujoco_rollout(mjm, ctrl_, qpos0=qpos0_, qvel0=qvel0_)
    return float(sum(np.sum(weights[s] * out[s]) for s in signals))

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
      g = central(lambda: ctrl, lambda x: functional(x, qpos0, qvel0, values), ctrl.size).reshape(ctrl.shape)
      _add(res, "ctrl", tape_grads["ctrl"], g)
    elif name == "qpos0":
      g = central(lambda: qpos0, lambda x: functional(ctrl, x, qvel0, values), qpos0.size)
      _add(res, "qpos0", tape_grads["qpos0"], _project_quats(scene.mjm, qpos0, g))
    elif name == "qvel0":
      _add(res, "qvel0", tape_grads["qvel0"], central(lambda: qvel0, lambda x: functional(ctrl, qpos0, x, values),
                                                      qvel0.size))
    elif name == "params":
      for p in params:
        g = central(lambda: values[p], lambda x: functional(ctrl, qpos0, qvel0, {**values, p: x}), p.dim)
        _add(res, p.name, tape_grads[p.name], g)
    else:
      raise ValueError(f"unknown input {name!r}; choose from ctrl, qpos0, qvel0, params")
  return res


def _project_quats(mjm: mujoco.MjModel, qpos: np.ndarray, g: np.ndarray) -> np.ndarray:
  """Drops the radial part of quaternion gradients: a rollout's state is a unit quaternion, and
  MuJoCo evaluates some quantities (e.g. `framequat` of a free body) on the raw, unnormalized one."""
  g = g.copy()
  for j in range(mjm.njnt):
    typ = int(mjm.jnt_type[j])
    if typ in (int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL)):
      a = mjm.jnt_qposadr[j] + (3 if typ == int(mujoco.mjtJoint.mjJNT_FREE) else 0)
      q = qpos[a:a + 4] / np.linalg.norm(qpos[a:a + 4])
      g[a:a + 4] -= np.dot(g[a:a + 4], q) * q
  return g


def _add(res: GradCheck, name: str, g: np.ndarray, g_fd: np.ndarray) -> None:
  res.tape[name] = np.asarray(g, dtype=np.float64)
  res.fd[name] = g_fd
  res.rel_err[name] = float(np.linalg.norm(g - g_fd) / max(np.linalg.norm(g_fd), 1e-12))


def _copy(mjm: mujoco.MjModel) -> mujoco.MjModel:
  import copy

  return copy.deepcopy(mjm)
