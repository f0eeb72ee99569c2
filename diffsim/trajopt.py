"""Trajectory optimization of many worlds at once: Adam, L-BFGS and iLQR on MJWarp rollouts.

A `TrajectoryProblem` is a scene, a horizon, initial states per world, a `Cost`, control bounds and
an initial control guess. Every world is its own problem (its own initial state, targets and model
parameters); the solvers advance all of them together:

  - `"adam"`: first-order, gradients from `tape.backward()`, projected onto the control bounds
    (the analytic adjoint where it covers the model, else the lanes: `Rollout`'s `gradient`);
  - `"lbfgs"`: scipy's L-BFGS-B on the stacked controls (one host transfer per evaluation);
  - `"ilqr"`: iterative LQR (Gauss-Newton on the cost, the step Jacobians `ro.jacobians()` of the
    rollout as dynamics), box-constrained gains, a closed-loop line search and Levenberg-Marquardt
    regularization, all per world.

Adam and iLQR iterate without host copies: an iteration (forward, backward, update, bookkeeping)
is captured once as a few graphs (`wp.ScopedCapture`) and replayed (iLQR on the CPU: its rollouts'
step is one graph replayed per step, as capturing every step would cost seconds); the host reads
the best cost per world only every `log_every` iterations, to update the progress bar and test for
convergence.

Example:
  scene = diffsim.Scene.from_xml(diffsim.asset_path("cartpole.xml"), nworld=4)
  cost = [QposCost([0.0, np.pi], terminal=[1.0, 100.0]), QvelCost(0.0, terminal=[1.0, 10.0]), CtrlCost(0.1)]
  problem = diffsim.TrajectoryProblem(scene, cost, horizon=200)  # swing up from hanging in 2 s
  result = diffsim.optimize_trajectory(problem, method="ilqr")
  result.x  # (nworld, horizon, nu) optimized controls
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import warp as wp

from . import losses
from .losses import CTRL, QPOS, QVEL, SENSOR
from .graph import Replay
from .kernels import init_state, load_quat, quat_sub, tangent_grad
from .rollout import Rollout, Trajectory

__all__ = ["TrajectoryProblem", "TrajectoryResult", "optimize_trajectory", "METHODS"]

METHODS = ("ilqr", "adam", "lbfgs")
_BOXQP_ITERATIONS, _BOXQP_LINESEARCH = 20, 12
_FREE, _BALL = 0, 1
_DEFAULT_MAXITER = {"ilqr": 100, "adam": 1000, "lbfgs": 500}
_OPTIONS = {
  "adam": {"lr": 0.05, "betas": (0.9, 0.999), "eps": 1e-8, "patience": 100},
  "lbfgs": {"maxcor": 10, "gtol": 1e-8},
  "ilqr": {"alphas": (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125), "mu_init": 1.0, "mu_min": 1e-4, "mu_max": 1e8,
           "mu_factor": 10.0},
}


# -- input checks (host only: they run before anything is allocated or launched) -------------------


def _host(x, name: str) -> np.ndarray:
  if isinstance(x, wp.array):
    return x.numpy().astype(np.float64)
  try:
    return np.asarray(x, dtype=np.float64)
  except (TypeError, ValueError) as e:
    raise TypeError(f"{name} must be an array of numbers, got {type(x).__name__}: {e}") from None


def _per_world_step(x, name: str, nworld: int, nstep: int, nu: int) -> np.ndarray:
  """Broadcasts (), (nu,), (nworld, nu), (nstep, nu) or a 3-D array broadcastable to (nworld, nstep, nu)
  (e.g. (nworld, 1, nu), (1, nstep, nu)) to (nworld, nstep, nu)."""
  a = _host(x, name)
  full = (nworld, nstep, nu)
  if a.ndim == 2 and a.shape[1] == nu and nworld == nstep and nworld > 1:
    raise ValueError(f"{name} of shape {a.shape} is ambiguous: nworld and horizon are both {nworld}; pass "
                     f"(nworld, 1, nu) for one value per world or (1, horizon, nu) for one per step")
  if a.ndim == 2 and a.shape == (nworld, nu):
    a = a[:, None]
  elif a.ndim == 2 and a.shape == (nstep, nu):
    a = a[None]
  ok = a.ndim == 0 or a.shape == (nu,) or (a.ndim == 3 and a.shape[0] in (1, nworld) and a.shape[1] in (1, nstep)
                                            and a.shape[2] == nu)
  if not ok:
    raise ValueError(f"{name} must have shape (nworld={nworld}, horizon={nstep}, nu={nu}), or one that broadcasts "
                     f"to it ((nworld, 1, nu), (1, horizon, nu)), (nworld, nu), (horizon, nu), (nu,) or be a "
                     f"scalar; got {a.shape}")
  return np.broadcast_to(a, full)


def _state(x, name: str, nworld: int, width: int, default: np.ndarray) -> np.ndarray:
  a = default if x is None else _host(x, name)
  if a.ndim == 1 and a.shape[0] == width:
    a = np.broadcast_to(a, (nworld, width))
  if a.shape != (nworld, width):
    raise ValueError(f"{name} must have shape (nworld={nworld}, {width}) or ({width},), got {a.shape}")
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{name} contains NaN/Inf")
  return a


class TrajectoryProblem:
  """Optimal control of every world of a scene over a fixed horizon.

  Args:
    scene: the `Scene` (its `nworld` worlds are independent problems).
    cost: a list of `diffsim.losses` terms (or one term, or a bound `losses.Cost`).
    horizon: number of steps `nstep` (>= 1); the controls are `(nworld, nstep, nu)`.
    qpos0: `(nworld, nq)` or `(nq,)` initial positions; default: the model's `qpos0`.
    qvel0: `(nworld, nv)` or `(nv,)` initial velocities, default 0.
    act0: `(nworld, na)` or `(na,)` initial activations, default 0.
    ctrl_lo, ctrl_hi: control bounds, shape `()`, `(nu,)`, `(nworld, nu)`, `(nstep, nu)` or
      `(nworld, nstep, nu)` (or any 3-D shape that broadcasts to it, such as `(nworld, 1, nu)`);
      default: the actuators' `ctrlrange` (unbounded where MuJoCo does not clamp). Bounds are
      intersected with the `ctrlrange` MuJoCo clamps to, beyond which a control has no effect.
    ctrl_init: initial guess, same shapes; default 0. Clipped to the bounds.
    params: `diffsim.Param`s with per-world model values (e.g. a different mass in each world).
    central, eps: finite-difference scheme of the step Jacobians (see `diffsim.Rollout`; `eps=None`
      takes the core's steps per input group); forward differences (`central=False`) halve the
      perturbation lanes, so the cost of a differentiable rollout.
    gradient: how Adam's and L-BFGS's tape gradients are formed (`diffsim.Rollout`: `"auto"`,
      `"analytic"`, `"finite_difference"`); iLQR always linearizes with the lanes.

  Raises:
    ValueError, KeyError, TypeError: for a horizon below 1, a cost naming an unknown joint, site,
      sensor or actuator, an array of the wrong shape, or bounds with `lo > hi`; all before any
      kernel is launched.

  Attributes:
    scene, horizon, nworld, cost (`losses.Cost`), rollout (`diffsim.Rollout`).
    ctrl: `wp.array3d[float]` `(nworld, nstep, nu)` the solvers' working controls (with grad).
    ctrl_init, ctrl_lo, ctrl_hi: `wp.array3d[float]` `(nworld, nstep, nu)`.
    qpos0, qvel0, act0: `wp.array2d[float]` `(nworld, nq | nv | na)`.
  """

  def __init__(self, scene, cost, *, horizon: int, qpos0=None, qvel0=None, act0=None, ctrl_lo=None, ctrl_hi=None,
               ctrl_init=None, params=None, central: bool = True, eps: float | dict | None = None,
               gradient: str = "auto"):
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
      raise ValueError(f"horizon must be a positive number of steps, got {horizon!r}")
    if scene.nu == 0:
      raise ValueError("the model has no actuators, so there are no controls to optimize")
    n, T, nu = scene.nworld, int(horizon), scene.nu
    q0 = _state(qpos0, "qpos0", n, scene.nq, scene.mjm.qpos0)
    v0 = _state(qvel0, "qvel0", n, scene.nv, np.zeros(scene.nv))
    a0 = _state(act0, "act0", n, scene.na, np.zeros(scene.na))
    clamp_lo, clamp_hi = scene.ctrl_lo.numpy(), scene.ctrl_hi.numpy()
    lo = _per_world_step(clamp_lo if ctrl_lo is None else ctrl_lo, "ctrl_lo", n, T, nu)
    hi = _per_world_step(clamp_hi if ctrl_hi is None else ctrl_hi, "ctrl_hi", n, T, nu)
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
      raise ValueError("control bounds contain NaN")
    for what, (lo, hi) in (("", (lo, hi)), (" after intersecting them with the actuators' ctrlrange",
                                            (np.maximum(lo, clamp_lo), np.minimum(hi, clamp_hi)))):
      if np.any(lo > hi):
        w, k, i = np.argwhere(lo > hi)[0]
        raise ValueError(f"control bounds have ctrl_lo > ctrl_hi{what} (first at world {w}, step {k}, actuator "
                         f"{i}: {lo[w, k, i]} > {hi[w, k, i]})")
    guess = self._check_guess(ctrl_init, "ctrl_init", n, T, nu, lo, hi)
    self.scene, self.horizon, self.nworld = scene, T, n
    self.cost = cost if isinstance(cost, losses.Cost) else losses.Cost(scene, T, cost)
    if self.cost.scene is not scene or self.cost.nstep != T:
      raise ValueError("the Cost was bound to another scene or horizon")
    dev = scene.device
    f = lambda a, grad=False: wp.array(np.ascontiguousarray(a, dtype=np.float32), dtype=float, device=dev,
                                       requires_grad=grad)
    self.ctrl_lo, self.ctrl_hi = f(lo), f(hi)
    self._lo_np, self._hi_np = lo.astype(np.float32), hi.astype(np.float32)
    self.ctrl_init = f(guess)
    self.ctrl = f(guess, True)
    self.qpos0, self.qvel0, self.act0 = f(q0), f(v0), f(a0)
    self.rollout = Rollout(scene, T, params=params, central=central, eps=eps, gradient=gradient)
    self._solvers: dict = {}
    self._eval = None  # the evaluation's graph replay, made on first use

  @staticmethod
  def _check_guess(x, name, n, T, nu, lo, hi) -> np.ndarray:
    g = np.zeros((n, T, nu)) if x is None else _per_world_step(x, name, n, T, nu)
    if not np.all(np.isfinite(g)):
      raise ValueError(f"{name} contains NaN/Inf")
    return np.clip(g, lo, hi)

  def reset(self, *, qpos0=None, qvel0=None, act0=None, ctrl_init=None) -> None:
    """Sets new initial states and/or a new guess (for receding-horizon loops); keeps solvers and graphs.

    Arguments take the shapes of the constructor's; `None` keeps the current value.
    """
    s = self.scene
    for arr, x, name, width in ((self.qpos0, qpos0, "qpos0", s.nq), (self.qvel0, qvel0, "qvel0", s.nv),
                                (self.act0, act0, "act0", s.na)):
      if x is not None:
        arr.assign(_state(x, name, self.nworld, width, None).astype(np.float32))
    if ctrl_init is not None:
      g = self._check_guess(ctrl_init, "ctrl_init", self.nworld, self.horizon, s.nu, self._lo_np, self._hi_np)
      self.ctrl_init.assign(g.astype(np.float32))

  def evaluate(self, ctrl=None) -> tuple[np.ndarray, Trajectory]:
    """Cost per world `(nworld,)` and trajectory of `ctrl` (default: the guess), clipped to the bounds.

    The trajectory is the rollout's buffers (overwritten by the next call). The rollout and cost are
    captured as a graph on the first call and replayed after.
    """
    if ctrl is not None:
      g = self._check_guess(ctrl, "ctrl", self.nworld, self.horizon, self.scene.nu, self._lo_np, self._hi_np)
      self.ctrl.assign(g.astype(np.float32))
    else:
      wp.copy(self.ctrl, self.ctrl_init)
    self._refresh_constants()
    if self._eval is None:
      self._eval_cost = wp.zeros(self.nworld, dtype=float, device=self.scene.device)

      def stage():
        self._eval_traj = self._run(self.ctrl)
        self.cost.evaluate(self._eval_traj, self._eval_cost)

      self._eval = Replay(self.scene.device, stage)
    self._eval()
    return self._eval_cost.numpy().copy(), self._eval_traj  # a copy: on the CPU .numpy() is a view

  def replay_mujoco(self, ctrl=None) -> dict[str, np.ndarray]:
    """Replays `ctrl` (default: the guess; e.g. `result.x`) open-loop in float64 MuJoCo C
    (`mujoco.mj_step`), world by world with its own initial state and parameter values: the check
    that a plan works outside diffsim's float32 simulation.

    Returns:
      `qpos (nworld, nstep + 1, nq)`, `qvel`, `act` and `sensordata (nworld, nstep + 1, ns)` (see
      `diffsim.gradcheck.mujoco_rollout`).
    """
    import copy

    from .gradcheck import mujoco_rollout, set_mjmodel_params

    x = self.ctrl_init.numpy() if ctrl is None else ctrl
    x = self._check_guess(x, "ctrl", self.nworld, self.horizon, self.scene.nu, self._lo_np, self._hi_np)
    x = x.astype(np.float32).astype(np.float64)  # what the float32 simulation applied
    q0, v0, a0 = (a.numpy().astype(np.float64) for a in (self.qpos0, self.qvel0, self.act0))
    params = self.rollout.params
    runs = []
    for w in range(self.nworld):
      mjm = self.scene.mjm
      if params:
        mjm = copy.deepcopy(mjm)
        set_mjmodel_params(mjm, {p: p.value.numpy()[w].astype(np.float64) for p in params})
      runs.append(mujoco_rollout(mjm, x[w], qpos0=q0[w], qvel0=v0[w], act0=a0[w]))
    return {k: np.stack([r[k] for r in runs]) for k in runs[0]}

  def _run(self, ctrl, **kw) -> Trajectory:
    return self.rollout(ctrl, qpos0=self.qpos0, qvel0=self.qvel0, act0=self.act0, **kw)

  def _refresh_constants(self) -> None:
    """Constants derived from inertial parameters (`set_const`), which graphs do not recompute."""
    if self.rollout.layout.inertial:
      self.rollout.update_constants()

  def __repr__(self) -> str:
    return (f"TrajectoryProblem(nworld={self.nworld}, horizon={self.horizon}, nu={self.scene.nu}, "
            f"terms={[type(t).__name__ for t in self.cost.terms]})")


@dataclass
class TrajectoryResult:
  """What a solver returns, in scipy's style.

  Attributes:
    x: `(nworld, nstep, nu)` float32 optimized controls (the best found per world).
    fun: `(nworld,)` cost of `x` per world.
    nit: iterations run.
    history: `(nit + 1, nworld)` cost per iteration per world (row 0: the initial guess; Adam and
      L-BFGS: cost of the iterate; iLQR: cost after the iteration's line search).
    success: `(nworld,)` bool, the world met the convergence test before `maxiter` (L-BFGS:
      scipy's `success` for the stacked problem, the same in every world, as they share its line
      search).
    message: summary of the termination.
    trajectory: `Trajectory` of `x` (device arrays owned by the result).
    method: solver name. time: wall time, s.
  """

  x: np.ndarray
  fun: np.ndarray
  nit: int
  history: np.ndarray
  success: np.ndarray
  message: str
  trajectory: Trajectory
  method: str
  time: float = 0.0
  ctrl: wp.array = field(default=None, repr=False)  # x on the device, for warm starts

  def __repr__(self) -> str:
    return (f"TrajectoryResult(method={self.method!r}, nit={self.nit}, fun: median {np.median(self.fun):.4g} "
            f"best {np.min(self.fun):.4g}, success {int(self.success.sum())}/{self.success.size}, "
            f"message={self.message!r})")


# -- kernels shared by the solvers ----------------------------------------------------------------


@wp.kernel
def _shift(
  # In:
  src: wp.array3d[float],  # (nworld, nstep, nu)
  shift: int,
  lo: wp.array3d[float],
  hi: wp.array3d[float],
  # Out:
  dst: wp.array3d[float],
):
  w, k, i = wp.tid()
  # the last control is held, as a receding-horizon controller has nothing better to guess
  ks = wp.min(k + shift, src.shape[1] - 1)
  dst[w, k, i] = wp.clamp(src[w, ks, i], lo[w, k, i], hi[w, k, i])


@wp.kernel
def _sum(cost: wp.array[float], total: wp.array[float]):
  w = wp.tid()
  wp.atomic_add(total, 0, cost[w])


@wp.kernel
def _pack_monitor(best: wp.array[float], status: wp.array[int], monitor_out: wp.array2d[float]):
  w = wp.tid()
  monitor_out[0, w] = best[w]
  monitor_out[1, w] = float(status[w])


@wp.kernel
def _increment(it: wp.array[int]):
  it[0] = it[0] + 1


@wp.func
def _keep_better(w: int, c: float, best_out: wp.array[float], take_out: wp.array[int]):
  take_out[w] = 0
  if c < best_out[w]:  # False for NaN
    best_out[w] = c
    take_out[w] = 1


@wp.kernel
def _take_better(
  # In:
  cost: wp.array[float],  # (nworld,)
  # Out:
  best_out: wp.array[float],  # (nworld,) lowest cost so far
  take_out: wp.array[int],  # (nworld,) 1 where cost improved on best
):
  w = wp.tid()
  _keep_better(w, cost[w], best_out, take_out)


@wp.kernel
def _record_best(
  # In:
  it: wp.array[int],  # (1,) history row to write
  cost: wp.array[float],  # (nworld,)
  # Out:
  history_out: wp.array2d[float],  # (capacity, nworld)
  best_out: wp.array[float],  # (nworld,) lowest cost so far
  take_out: wp.array[int],  # (nworld,) 1 where cost improved on best
):
  w = wp.tid()
  history_out[it[0], w] = cost[w]
  _keep_better(w, cost[w], best_out, take_out)


@wp.kernel
def _copy_where(
  # In:
  take: wp.array[int],  # (nworld,)
  src: wp.array3d[float],
  # Out:
  dst: wp.array3d[float],
):
  w, k, i = wp.tid()
  if take[w] != 0:
    dst[w, k, i] = src[w, k, i]


@wp.kernel
def _adam_step(
  # In:
  lr: float,
  beta1: float,
  beta2: float,
  eps: float,
  t: wp.array[int],  # (1,) steps taken before this one
  grad: wp.array3d[float],  # (nworld, nstep, nu)
  lo: wp.array3d[float],
  hi: wp.array3d[float],
  # Out:
  m_out: wp.array3d[float],
  v_out: wp.array3d[float],
  ctrl_out: wp.array3d[float],
):
  w, k, i = wp.tid()
  g = grad[w, k, i]
  if not wp.isfinite(g):
    g = 0.0
  m = beta1 * m_out[w, k, i] + (1.0 - beta1) * g
  v = beta2 * v_out[w, k, i] + (1.0 - beta2) * g * g
  m_out[w, k, i] = m
  v_out[w, k, i] = v
  # bias correction from the device counter, so a replayed graph sees the current step
  n = float(t[0] + 1)
  mhat = m / (1.0 - wp.pow(beta1, n))
  vhat = v / (1.0 - wp.pow(beta2, n))
  ctrl_out[w, k, i] = wp.clamp(ctrl_out[w, k, i] - lr * mhat / (wp.sqrt(vhat) + eps), lo[w, k, i], hi[w, k, i])


# -- iLQR kernels (one thread per world; small dense matrices in per-world scratch arrays) ----------


@wp.func
def _tangent_diff(
  c: int, w: int, k: int,
  jnt_type: wp.array[int], jnt_qposadr: wp.array[int], jnt_dofadr: wp.array[int], dof_jntid: wp.array[int],
  qa: wp.array3d[float], qb: wp.array3d[float],
) -> float:
  """Tangent coordinate `c` of `qa[w, k] - qb[w, k]` (rotation vectors for quaternions, as `mj_differentiatePos`)."""
  j = dof_jntid[c]
  typ = jnt_type[j]
  qadr = jnt_qposadr[j]
  i = c - jnt_dofadr[j]
  if typ == _FREE:
    if i < 3:
      return qa[w, k, qadr + i] - qb[w, k, qadr + i]
    qadr += 3
    i -= 3
  elif typ != _BALL:
    return qa[w, k, qadr + i] - qb[w, k, qadr + i]
  v = quat_sub(load_quat(qa[w], k, qadr), load_quat(qb[w], k, qadr))
  return v[i]


@wp.kernel
def _ilqr_gradients(
  # Model:
  nv: int,
  na: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qpos_grad: wp.array3d[float],  # d(cost)/d(trajectory), from the cost's tape
  qvel_grad: wp.array3d[float],
  act_grad: wp.array3d[float],
  sensordata_grad: wp.array3d[float],  # (nworld, nstep + 1, ns)
  ctrl_grad: wp.array3d[float],  # (nworld, nstep, nu)
  sjac: wp.array4d[float],  # (nworld, nstep + 1, ns, nz)
  # Out:
  gx_out: wp.array3d[float],  # (nworld, nstep + 1, nx) cost gradient in the tangent space
  gu_out: wp.array3d[float],  # (nworld, nstep, nu)
):
  w, k = wp.tid()
  nx = 2 * nv + na
  nstep = gu_out.shape[1]
  ns = sjac.shape[2]
  for c in range(nv):
    gx_out[w, k, c] = tangent_grad(c, w, k, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, qpos, qpos_grad)
    gx_out[w, k, nv + c] = qvel_grad[w, k, c]
  for c in range(na):
    gx_out[w, k, 2 * nv + c] = act_grad[w, k, c]
  # sensors pull back through their Jacobians S = [C D]
  for s in range(ns):
    g = sensordata_grad[w, k, s]
    if g != 0.0:
      for c in range(nx):
        gx_out[w, k, c] += sjac[w, k, s, c] * g
  if k < nstep:
    for i in range(gu_out.shape[2]):
      g = float(ctrl_grad[w, k, i])
      for s in range(ns):
        g += sjac[w, k, s, nx + i] * sensordata_grad[w, k, s]
      if k == nstep - 1:  # the final row's control columns belong to the last control
        for s in range(ns):
          g += sjac[w, k + 1, s, nx + i] * sensordata_grad[w, k + 1, s]
      gu_out[w, k, i] = g


@wp.func
def _curvature(
  w: int, k: int, terminal: int, nx: int,
  ch_kind: wp.array[int], ch_idx: wp.array[int], ch_col: wp.array[int], ch_running: wp.array[float],
  ch_terminal: wp.array[float], nch: int, sjac: wp.array4d[float],
  xx: wp.array3d[float], uu: wp.array3d[float], ux: wp.array3d[float],
):
  """Adds the Gauss-Newton curvature of the built-in terms at row `k` to `xx`, `uu`, `ux`."""
  nu = uu.shape[1]
  for c in range(nch):
    kind = ch_kind[c]
    wt = ch_running[c]
    if terminal != 0:
      wt = ch_terminal[c]
    if wt == 0.0:
      continue
    if kind == QPOS or kind == QVEL:
      col = ch_col[c]
      xx[w, col, col] += wt
    elif kind == SENSOR:
      s = ch_idx[c]
      for a in range(nx):
        ja = sjac[w, k, s, a]
        if ja != 0.0:
          for b in range(nx):
            xx[w, a, b] += wt * ja * sjac[w, k, s, b]
      if terminal == 0:
        for i in range(nu):
          di = sjac[w, k, s, nx + i]
          if di != 0.0:
            for j in range(nu):
              uu[w, i, j] += wt * di * sjac[w, k, s, nx + j]
            for b in range(nx):
              ux[w, i, b] += wt * di * sjac[w, k, s, b]
    elif terminal == 0:
      i = ch_idx[c]
      if kind == CTRL:
        uu[w, i, i] += wt
      elif k > 0:  # CTRL_RATE: residual u_k - u_{k-1}, u_{k-1} is the augmented state
        uu[w, i, i] += wt
        xx[w, nx + i, nx + i] += wt
        ux[w, i, nx + i] -= wt


@wp.func
def _terminal_control_curvature(
  w: int, nx: int,
  ch_kind: wp.array[int], ch_idx: wp.array[int], ch_terminal: wp.array[float], nch: int,
  jac: wp.array4d[float], sjac: wp.array4d[float],
  uu: wp.array3d[float], ux: wp.array3d[float],
):
  """Adds to the last step's `uu`, `ux` the Gauss-Newton terms of terminal sensor residuals that
  depend on the last control (row `nstep` is sensed with it held): with `r = C_T dx_T + D_T du`
  and `dx_T = A dx + B du`, `V_T` already holds `C_T^T W C_T`; the rest is
  `uu += W (D^T D + (C B)^T D + D^T C B)`, `ux += W D^T C A`."""
  nstep = jac.shape[1]
  k = nstep - 1
  nu = uu.shape[1]
  for c in range(nch):
    wt = ch_terminal[c]
    if ch_kind[c] != SENSOR or wt == 0.0:
      continue
    s = ch_idx[c]
    coupled = int(0)
    for i in range(nu):
      if sjac[w, nstep, s, nx + i] != 0.0:
        coupled = 1
    if coupled == 0:  # e.g. positions: nothing beyond V_T
      continue
    for i in range(nu):
      di = sjac[w, nstep, s, nx + i]
      cbi = float(0.0)
      for p in range(nx):
        cbi += sjac[w, nstep, s, p] * jac[w, k, p, nx + i]
      for j in range(nu):
        dj = sjac[w, nstep, s, nx + j]
        cbj = float(0.0)
        for p in range(nx):
          cbj += sjac[w, nstep, s, p] * jac[w, k, p, nx + j]
        uu[w, i, j] += wt * (di * dj + cbi * dj + di * cbj)
      if di != 0.0:
        for b in range(nx):
          ca = float(0.0)
          for p in range(nx):
            ca += sjac[w, nstep, s, p] * jac[w, k, p, b]
          ux[w, i, b] += wt * di * ca


@wp.func
def _cholesky(w: int, n: int, a: wp.array3d[float], l: wp.array3d[float]) -> int:
  """Lower Cholesky factor of `a[w, :n, :n]` into `l`; returns 0 if `a` is not positive definite."""
  ok = int(1)
  for j in range(n):
    s = float(a[w, j, j])
    for p in range(j):
      s -= l[w, j, p] * l[w, j, p]
    if not (s > 0.0) or not wp.isfinite(s):
      ok = 0
      s = 1.0
    d = wp.sqrt(s)
    l[w, j, j] = d
    for i in range(j + 1, n):
      t = float(a[w, i, j])
      for p in range(j):
        t -= l[w, i, p] * l[w, j, p]
      l[w, i, j] = t / d
  return ok


@wp.func
def _cholesky_solve(w: int, n: int, c0: int, c1: int, l: wp.array3d[float], r: wp.array3d[float]):
  """Solves `L L^T x = r[w, :n, c]` in place for columns `c0 <= c < c1`."""
  for c in range(c0, c1):
    for i in range(n):
      s = float(r[w, i, c])
      for p in range(i):
        s -= l[w, i, p] * r[w, p, c]
      r[w, i, c] = s / l[w, i, i]
    for ii in range(n):
      i = n - 1 - ii
      s = float(r[w, i, c])
      for p in range(i + 1, n):
        s -= l[w, p, i] * r[w, p, c]
      r[w, i, c] = s / l[w, i, i]


@wp.func
def _qp_value(w: int, n: int, h: wp.array3d[float], q: wp.array2d[float], x: wp.array3d[float], col: int) -> float:
  """`x^T h x / 2 + q^T x` for `x = x[w, :n, col]`."""
  v = float(0.0)
  for i in range(n):
    hx = float(0.0)
    for j in range(n):
      hx += h[w, i, j] * x[w, j, col]
    v += x[w, i, col] * (0.5 * hx + q[w, i])
  return v


@wp.func
def _free_factor(w: int, n: int, h: wp.array3d[float], clamped: wp.array2d[int], hf: wp.array3d[float],
                 l: wp.array3d[float]):
  """Cholesky factor of `h` with clamped rows and columns replaced by the identity."""
  for i in range(n):
    for j in range(n):
      hf[w, i, j] = wp.where(clamped[w, i] != 0 or clamped[w, j] != 0, wp.where(i == j, 1.0, 0.0), h[w, i, j])
  _cholesky(w, n, hf, l)  # a principal block of a positive definite matrix, bordered by the identity


@wp.func
def _box_qp(
  w: int, k: int, n: int,
  h: wp.array3d[float],  # (nworld, nu, nu) positive definite
  q: wp.array2d[float],  # (nworld, nu)
  ctrl: wp.array3d[float], ctrl_lo: wp.array3d[float], ctrl_hi: wp.array3d[float],
  hf: wp.array3d[float], l: wp.array3d[float],
  v: wp.array3d[float],  # (nworld, nu, 4) scratch columns: x, gradient, direction, trial
  clamped: wp.array2d[int],  # (nworld, nu) out: controls held at a bound at the solution
  x_out: wp.array3d[float],  # (nworld, nstep, nu) in: warm start, out: the solution
):
  """min `x^T h x / 2 + q^T x` s.t. `ctrl_lo <= ctrl + x <= ctrl_hi` at step `k`: projected Newton
  (Tassa et al. 2014, Algorithm 3). Leaves in `l` the factor of `h`'s free block."""
  for i in range(n):
    v[w, i, 0] = wp.clamp(x_out[w, k, i], ctrl_lo[w, k, i] - ctrl[w, k, i], ctrl_hi[w, k, i] - ctrl[w, k, i])
  value = _qp_value(w, n, h, q, v, 0)
  for it in range(_BOXQP_ITERATIONS):
    nfree = int(0)
    for i in range(n):
      g = float(q[w, i])
      for j in range(n):
        g += h[w, i, j] * v[w, j, 0]
      v[w, i, 1] = g
      x = v[w, i, 0]
      c = (x <= ctrl_lo[w, k, i] - ctrl[w, k, i] and g > 0.0) or (x >= ctrl_hi[w, k, i] - ctrl[w, k, i] and g < 0.0)
      clamped[w, i] = int(c)
      nfree += 1 - int(c)
    if nfree == 0:
      break
    # Newton step on the free controls, the clamped ones held
    _free_factor(w, n, h, clamped, hf, l)
    for i in range(n):
      if clamped[w, i] != 0:
        v[w, i, 2] = v[w, i, 0]
      else:
        t = float(-q[w, i])
        for j in range(n):
          if clamped[w, j] != 0:
            t -= h[w, i, j] * v[w, j, 0]
        v[w, i, 2] = t
    _cholesky_solve(w, n, 2, 3, l, v)
    sdotg = float(0.0)
    for i in range(n):
      v[w, i, 2] = v[w, i, 2] - v[w, i, 0]
      sdotg += v[w, i, 2] * v[w, i, 1]
    if sdotg >= -1.0e-12 * wp.max(wp.abs(value), 1.0e-12):
      break
    # projected Armijo search along the direction
    step = float(1.0)
    accepted = int(0)
    trial = float(0.0)
    for ls in range(_BOXQP_LINESEARCH):
      for i in range(n):
        v[w, i, 3] = wp.clamp(v[w, i, 0] + step * v[w, i, 2], ctrl_lo[w, k, i] - ctrl[w, k, i],
                              ctrl_hi[w, k, i] - ctrl[w, k, i])
      trial = _qp_value(w, n, h, q, v, 3)
      if (trial - value) / (step * sdotg) >= 0.1:
        accepted = 1
        break
      step *= 0.6
    if accepted == 0:
      break
    for i in range(n):
      v[w, i, 0] = v[w, i, 3]
    improvement = value - trial
    value = trial
    if improvement < 1.0e-8 * wp.max(wp.abs(value), 1.0e-12):
      break
  # clamped set and free-block factor at the solution, for the feedback gains
  for i in range(n):
    g = float(q[w, i])
    for j in range(n):
      g += h[w, i, j] * v[w, j, 0]
    x = v[w, i, 0]
    c = (x <= ctrl_lo[w, k, i] - ctrl[w, k, i] and g > 0.0) or (x >= ctrl_hi[w, k, i] - ctrl[w, k, i] and g < 0.0)
    clamped[w, i] = int(c)
    x_out[w, k, i] = x
  _free_factor(w, n, h, clamped, hf, l)


@wp.kernel
def _ilqr_backward(
  # Model:
  nx: int,
  nxa: int,  # nx, plus nu when a CtrlRateCost makes the previous control part of the state
  # In:
  jac: wp.array4d[float],  # (nworld, nstep, nx, nz) step Jacobians [A B]
  sjac: wp.array4d[float],  # (nworld, nstep + 1, ns, nz) sensor Jacobians [C D]
  ctrl: wp.array3d[float],  # (nworld, nstep, nu) nominal controls
  ctrl_lo: wp.array3d[float],
  ctrl_hi: wp.array3d[float],
  gx: wp.array3d[float],  # (nworld, nstep + 1, nx) cost gradient
  gu: wp.array3d[float],  # (nworld, nstep, nu)
  ch_kind: wp.array[int],
  ch_idx: wp.array[int],
  ch_col: wp.array[int],
  ch_running: wp.array[float],
  ch_terminal: wp.array[float],
  nch: int,
  mu: wp.array[float],  # (nworld,) Levenberg-Marquardt regularization, relative to diag(Quu)
  # Scratch (per world):
  vx: wp.array2d[float],  # (nworld, nxa)
  vxx: wp.array3d[float],  # (nworld, nxa, nxa)
  qx: wp.array2d[float],  # (nworld, nxa)
  qu: wp.array2d[float],  # (nworld, nu)
  qxx: wp.array3d[float],  # (nworld, nxa, nxa)
  quu: wp.array3d[float],  # (nworld, nu, nu)
  qux: wp.array3d[float],  # (nworld, nu, nxa)
  va: wp.array3d[float],  # (nworld, nxa, nxa) Vxx A
  vb: wp.array3d[float],  # (nworld, nxa, nu) Vxx B
  qk: wp.array3d[float],  # (nworld, nu, 1 + nxa) Quu [k K]
  m: wp.array3d[float],  # (nworld, nu, nu) regularized Quu
  mf: wp.array3d[float],  # (nworld, nu, nu) its free block
  l: wp.array3d[float],  # (nworld, nu, nu)
  r: wp.array3d[float],  # (nworld, nu, 1 + nxa)
  bv: wp.array3d[float],  # (nworld, nu, 4)
  clamped: wp.array2d[int],  # (nworld, nu)
  # Out:
  kff_out: wp.array3d[float],  # (nworld, nstep, nu) feedforward
  kfb_out: wp.array4d[float],  # (nworld, nstep, nu, nxa) feedback
  dv_out: wp.array[float],  # (nworld,) predicted cost change of the full step (-inf: failed)
  fail_out: wp.array[int],  # (nworld,) 1: Quu not positive definite; gains unusable
):
  w = wp.tid()
  nstep = kff_out.shape[1]
  nu = kff_out.shape[2]
  aug = nxa > nx

  # terminal value function
  for a in range(nxa):
    vx[w, a] = 0.0
    if a < nx:
      vx[w, a] = gx[w, nstep, a]
    for b in range(nxa):
      vxx[w, a, b] = 0.0
  _curvature(w, nstep, 1, nx, ch_kind, ch_idx, ch_col, ch_running, ch_terminal, nch, sjac, vxx, quu, qux)

  fail = int(0)
  dv = float(0.0)
  for kk in range(nstep):
    k = nstep - 1 - kk
    # state x~ = [x, u_prev]: A~ = [[A, 0], [0, 0]], B~ = [B; I]
    for i in range(nxa):
      for j in range(nxa):
        s = float(0.0)
        if j < nx:
          for p in range(nx):
            s += vxx[w, i, p] * jac[w, k, p, j]
        va[w, i, j] = s
      for j in range(nu):
        s = float(0.0)
        for p in range(nx):
          s += vxx[w, i, p] * jac[w, k, p, nx + j]
        if aug:
          s += vxx[w, i, nx + j]
        vb[w, i, j] = s
    for a in range(nxa):
      s = float(0.0)
      if a < nx:
        s = gx[w, k, a]
        for p in range(nx):
          s += jac[w, k, p, a] * vx[w, p]
      qx[w, a] = s
      for b in range(nxa):
        s = float(0.0)
        if a < nx:
          for p in range(nx):
            s += jac[w, k, p, a] * va[w, p, b]
        qxx[w, a, b] = s
    for i in range(nu):
      s = float(gu[w, k, i])
      for p in range(nx):
        s += jac[w, k, p, nx + i] * vx[w, p]
      if aug:
        s += vx[w, nx + i]
      qu[w, i] = s
      for j in range(nu):
        s = float(0.0)
        for p in range(nx):
          s += jac[w, k, p, nx + i] * vb[w, p, j]
        if aug:
          s += vb[w, nx + i, j]
        quu[w, i, j] = s
      for b in range(nxa):
        s = float(0.0)
        for p in range(nx):
          s += jac[w, k, p, nx + i] * va[w, p, b]
        if aug:
          s += va[w, nx + i, b]
        qux[w, i, b] = s
    _curvature(w, k, 0, nx, ch_kind, ch_idx, ch_col, ch_running, ch_terminal, nch, sjac, qxx, quu, qux)
    if k == nstep - 1:
      _terminal_control_curvature(w, nx, ch_kind, ch_idx, ch_terminal, nch, jac, sjac, quu, qux)

    # regularized, box-constrained gains (Tassa et al. 2014): the feedforward solves the box QP,
    # the feedback acts on the controls left free at its solution
    qmax = float(0.0)
    for i in range(nu):
      qmax = wp.max(qmax, wp.abs(quu[w, i, i]))
    for i in range(nu):
      for j in range(nu):
        m[w, i, j] = quu[w, i, j]
      # Marquardt scaling, plus a floor so controls without effect (a singular Quu) stay solvable
      m[w, i, i] = quu[w, i, i] + mu[w] * (wp.abs(quu[w, i, i]) + 1.0e-3 * qmax) + 1.0e-5 * qmax + 1.0e-30
    if _cholesky(w, nu, m, l) == 0:
      fail = 1
      break
    _box_qp(w, k, nu, m, qu, ctrl, ctrl_lo, ctrl_hi, mf, l, bv, clamped, kff_out)
    for i in range(nu):
      r[w, i, 0] = kff_out[w, k, i]
      for b in range(nxa):
        r[w, i, 1 + b] = wp.where(clamped[w, i] != 0, 0.0, -qux[w, i, b])
    _cholesky_solve(w, nu, 1, 1 + nxa, l, r)  # l: factor of the free block, from _box_qp
    for i in range(nu):
      for b in range(nxa):
        kfb_out[w, k, i, b] = r[w, i, 1 + b]

    # value function with the unregularized Q (Tassa et al. 2012, eq. 11)
    for i in range(nu):
      for c in range(1 + nxa):
        s = float(0.0)
        for j in range(nu):
          s += quu[w, i, j] * r[w, j, c]
        qk[w, i, c] = s
    for i in range(nu):
      dv += kff_out[w, k, i] * (qu[w, i] + 0.5 * qk[w, i, 0])
    for a in range(nxa):
      s = float(qx[w, a])
      for i in range(nu):
        s += kfb_out[w, k, i, a] * (qk[w, i, 0] + qu[w, i]) + qux[w, i, a] * kff_out[w, k, i]
      vx[w, a] = s
      for b in range(a, nxa):
        s = 0.5 * (qxx[w, a, b] + qxx[w, b, a])
        for i in range(nu):
          s += kfb_out[w, k, i, a] * (qk[w, i, 1 + b] + qux[w, i, b]) + qux[w, i, a] * kfb_out[w, k, i, b]
        vxx[w, a, b] = s
        vxx[w, b, a] = s
  fail_out[w] = fail
  if fail != 0:
    dv = -wp.inf
  dv_out[w] = dv


@wp.kernel
def _ilqr_feedback(
  # Model:
  nv: int,
  na: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  k0: int,
  step_count: wp.array[int],  # (1,) step k = k0 + step_count[0] (a looped one-step graph's counter)
  alphas: wp.array[float],  # (nalpha,) line-search steps
  aidx: wp.array[int],  # (1,) the step of this rollout
  nxa: int,
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq) this rollout, states up to k
  qvel: wp.array3d[float],
  act: wp.array3d[float],
  qpos_nom: wp.array3d[float],  # the nominal trajectory
  qvel_nom: wp.array3d[float],
  act_nom: wp.array3d[float],
  ctrl_nom: wp.array3d[float],  # (nworld, nstep, nu)
  kff: wp.array3d[float],
  kfb: wp.array4d[float],
  fail: wp.array[int],
  ctrl_lo: wp.array3d[float],
  ctrl_hi: wp.array3d[float],
  # Out:
  ctrl_out: wp.array3d[float],  # (nworld, nstep, nu) writes step k
):
  """u_k = clamp(u_nom_k + alpha kff_k + Kfb_k (x_k - x_nom_k)): the closed-loop line search."""
  w = wp.tid()
  k = k0 + step_count[0]
  nu = ctrl_out.shape[2]
  nx = 2 * nv + na
  if fail[w] != 0:
    for i in range(nu):
      ctrl_out[w, k, i] = ctrl_nom[w, k, i]
    return
  alpha = alphas[aidx[0]]
  for i in range(nu):
    ctrl_out[w, k, i] = ctrl_nom[w, k, i] + alpha * kff[w, k, i]
  for a in range(nxa):
    d = float(0.0)
    if a < nv:
      d = _tangent_diff(a, w, k, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, qpos, qpos_nom)
    elif a < 2 * nv:
      d = qvel[w, k, a - nv] - qvel_nom[w, k, a - nv]
    elif a < nx:
      d = act[w, k, a - 2 * nv] - act_nom[w, k, a - 2 * nv]
    elif k > 0:
      d = ctrl_out[w, k - 1, a - nx] - ctrl_nom[w, k - 1, a - nx]
    if d != 0.0:
      for i in range(nu):
        ctrl_out[w, k, i] += kfb[w, k, i, a] * d
  for i in range(nu):
    ctrl_out[w, k, i] = wp.clamp(ctrl_out[w, k, i], ctrl_lo[w, k, i], ctrl_hi[w, k, i])


@wp.kernel
def _ilqr_accept(
  # In:
  ftol_in: wp.array[float],  # (1,) relative decrease below which a world has converged
  mu_min: float,
  mu_max: float,
  mu_factor: float,
  nominal: wp.array[float],  # (nworld,) cost of the nominal controls
  trial: wp.array[float],  # (nworld,) best line-search cost (nominal if none was lower)
  dv: wp.array[float],  # (nworld,) predicted change of the full step
  # Out:
  mu_out: wp.array[float],
  status_out: wp.array[int],  # 0: running, 1: converged, 2: stalled (sticky)
  improved_out: wp.array[int],
):
  w = wp.tid()
  j0 = nominal[w]
  j1 = trial[w]
  scale = ftol_in[0] * wp.max(wp.abs(j0), 1.0e-12)
  mu = mu_out[w]
  improved_out[w] = int(j1 < j0)
  if j1 < j0:
    mu = mu / mu_factor
    if mu < mu_min:
      mu = 0.0
    if j0 - j1 <= scale and status_out[w] == 0:
      status_out[w] = 1
  else:
    mu = wp.max(mu * mu_factor, mu_min)
    if mu > mu_max and status_out[w] == 0:
      status_out[w] = 2
    mu = wp.min(mu, mu_max)
  # the local model predicts nothing left to gain: a (float32) optimum
  if -dv[w] <= scale and status_out[w] != 1:
    status_out[w] = 1
  mu_out[w] = mu


# -- solvers --------------------------------------------------------------------------------------


class _Solver:
  """Buffers, captured stages and the host loop shared by the solvers.

  An iteration is a list of stages `(fn, repeats)`; each stage is captured once as a graph and
  replayed, so an iteration is a few graph launches and no host copy. History row `it` holds the
  cost after `it` iterations; `_record` writes it and keeps each world's best controls and their
  trajectory, which the result returns (no extra rollout).
  """

  method = ""
  extra_evals = 0  # evaluations beyond the iterations (Adam evaluates before it steps)

  def __init__(self, problem: TrajectoryProblem, options: dict, capacity: int, capture: bool):
    self.p = problem
    self.opt = options
    self.capacity = capacity
    self.capture = capture
    self._replay = None  # the iteration's stages, captured on the first step
    s, dev, n, T = problem.scene, problem.scene.device, problem.nworld, problem.horizon
    self.it = wp.zeros(1, dtype=int, device=dev)
    self.history = wp.zeros((capacity, n), dtype=float, device=dev)
    self.best = wp.zeros(n, dtype=float, device=dev)
    self.take = wp.zeros(n, dtype=int, device=dev)
    self.best_ctrl = wp.zeros(problem.ctrl.shape, dtype=float, device=dev)
    self.best_traj = [wp.zeros((n, T + 1, m), dtype=float, device=dev) for m in (s.nq, s.nv, s.na, s.nsensordata)]
    self.cost = wp.zeros(n, dtype=float, device=dev, requires_grad=True)
    self.total = wp.zeros(1, dtype=float, device=dev, requires_grad=True)

  def _launch(self, kernel, dim, inputs, outputs=()):
    wp.launch(kernel, dim=dim, inputs=inputs, outputs=list(outputs), device=self.p.scene.device)

  def _stages(self) -> list:
    raise NotImplementedError

  def _step(self) -> None:
    """Advances every world by one iteration with launches only (no host copies)."""
    if self._replay is None:
      self._replay = Replay(self.p.scene.device, self._stages(), self.capture)
    self._replay()

  def _record(self, cost: wp.array, ctrl: wp.array, traj) -> None:
    """History row `it` = cost; where it beats the best so far, keep controls and trajectory."""
    self._launch(_record_best, self.p.nworld, [self.it, cost], [self.history, self.best, self.take])
    self._launch(_copy_where, ctrl.shape, [self.take, ctrl], [self.best_ctrl])
    for src, dst in zip((traj.qpos, traj.qvel, traj.act, traj.sensordata), self.best_traj):
      if dst.size:
        self._launch(_copy_where, dst.shape, [self.take, src], [dst])

  def _gradient(self) -> Trajectory:
    """Cost of `p.ctrl` in `self.cost` and its gradient in `p.ctrl.grad` (a differentiable rollout)."""
    p = self.p
    p.ctrl.grad.zero_()
    self.total.zero_()
    tape = wp.Tape()
    with tape:
      traj = p._run(p.ctrl)
      p.cost.evaluate(traj, self.cost)
      self._launch(_sum, p.nworld, [self.cost], [self.total])
    tape.backward(loss=self.total)
    self._tape = tape  # zeroed by the caller once the gradient is used
    return traj

  def _start(self, ctrl0: wp.array) -> None:
    wp.copy(self.p.ctrl, ctrl0)
    wp.copy(self.best_ctrl, ctrl0)
    self.it.zero_()
    self.best.fill_(np.inf)

  def _read_best(self) -> np.ndarray:
    """The best cost per world `(nworld,)` float64: one device-to-host copy."""
    return self.best.numpy().astype(np.float64)

  def _done(self, nit: int, best: np.ndarray, ftol: float) -> np.ndarray:
    """Worlds whose best cost fell by at most `ftol` (relative) over the last `patience` iterations."""
    patience = self.opt.get("patience", 1)
    old = [b for i, b in self._snapshots if i <= nit - patience]
    if not old:
      return np.zeros(best.shape, bool)
    return (old[-1] - best) <= ftol * np.maximum(np.abs(old[-1]), 1e-12)

  def run(self, ctrl0: wp.array, *, maxiter: int, ftol: float, quiet: bool, log_every: int,
          callback=None) -> TrajectoryResult:
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    self.p._refresh_constants()
    self._start(ctrl0)
    n = self.p.nworld
    self._snapshots = []  # (iteration, best cost per world) at each check
    done = np.zeros(n, bool)
    nit = -self.extra_evals
    with tqdm(total=maxiter, desc=self.method, disable=quiet, leave=False, dynamic_ncols=True,
              mininterval=0.5) as bar:
      while nit < maxiter:
        self._step()
        nit += 1
        if nit > 0 and (nit % log_every == 0 or nit == maxiter):
          # the loop's only host read, every log_every iterations: the best cost per world (and
          # iLQR's convergence status), a few bytes per world
          best = self._read_best()
          done = self._done(nit, best, ftol)
          self._snapshots.append((nit, best))
          bar.set_postfix_str(f"best {np.nanmin(best):.4g}  median {np.nanmedian(best):.4g}  "
                              f"converged {int(done.sum())}/{n}", refresh=False)
          bar.update(nit - bar.n)
          if done.all() or (callback is not None and callback(nit, best)):
            break
    return self._finish(max(nit, 0), done, t0, maxiter)

  def _finish(self, nit: int, done: np.ndarray, t0: float, maxiter: int, message: str | None = None,
              hist: np.ndarray | None = None) -> TrajectoryResult:
    if hist is None:
      hist = self.history.numpy()[:nit + 1].astype(np.float64)
    x = wp.clone(self.best_ctrl)
    traj = Trajectory(*[wp.clone(a) for a in self.best_traj], x, self.p.scene.dt)
    if message is None:
      message = (f"converged in all {done.size} worlds (relative cost decrease below ftol)" if done.all() else
                 f"maximum number of iterations ({maxiter}) reached; converged in {int(done.sum())} of "
                 f"{done.size} worlds")
    return TrajectoryResult(x=x.numpy(), fun=self.best.numpy().astype(np.float64), nit=nit, history=hist,
                            success=done.copy(), message=message, trajectory=traj, method=self.method,
                            time=time.perf_counter() - t0, ctrl=x)


class _Adam(_Solver):
  """Adam on every world's controls, projected onto the bounds after each step.

  An iteration evaluates the cost of the current controls (history row `it`) and its gradient, keeps
  the best controls so far, then steps; `maxiter` steps take `maxiter + 1` evaluations.
  """

  method = "adam"
  extra_evals = 1

  def __init__(self, problem, options, capacity, capture):
    super().__init__(problem, options, capacity, capture)
    self.m = wp.zeros_like(self.best_ctrl)
    self.v = wp.zeros_like(self.best_ctrl)

  def _start(self, ctrl0):
    super()._start(ctrl0)
    self.m.zero_()
    self.v.zero_()

  def _stages(self):
    return [(self._iteration, 1)]

  def _iteration(self) -> None:
    p, o = self.p, self.opt
    traj = self._gradient()
    self._record(self.cost, p.ctrl, traj)
    b1, b2 = o["betas"]
    self._launch(_adam_step, p.ctrl.shape, [float(o["lr"]), float(b1), float(b2), float(o["eps"]), self.it,
                                            p.ctrl.grad, p.ctrl_lo, p.ctrl_hi], [self.m, self.v, p.ctrl])
    self._launch(_increment, 1, [self.it])
    self._tape.zero()


class _ILQR(_Solver):
  """Iterative LQR with the rollout's step Jacobians; every world has its own regularization.

  An iteration linearizes the rollout of the nominal controls, takes the cost gradient from a tape
  and its Gauss-Newton curvature from the built-in terms, runs the Riccati recursion with
  box-constrained gains, then rolls out the closed-loop policy for each line-search step `alpha`
  and keeps, per world, the lowest cost if it beats the nominal (`alpha` indexed on the device). On a
  GPU the iteration is one graph; on the CPU the rollouts' step is one graph replayed `horizon`
  times, between graphs of the rest (see `loop_steps`).
  """

  method = "ilqr"
  # Graphs of an iteration: on a GPU one (launching a graph costs microseconds there, capturing
  # one little); on the CPU, where capturing an MJWarp step costs tens of ms and replaying a graph
  # almost nothing, the rollouts' step is captured once and replayed `horizon` times (the first
  # iteration of the 200-step cart-pole swing-up, capture included: 24.7 s as one graph, 0.40 s
  # looped; `benchmarks/bench_trajopt.py`). None: by device.
  loop_steps: bool | None = None

  def __init__(self, problem, options, capacity, capture):
    super().__init__(problem, options, capacity, capture)
    s, T, n = problem.scene, problem.horizon, problem.nworld
    problem.rollout.reserve_linearization()  # its graphs linearize the rollout
    nu, nx = s.nu, s.nx
    self.nxa = nx + (nu if problem.cost.has_rate else 0)
    nxa = self.nxa
    z = lambda *shape, dtype=float: wp.zeros(shape, dtype=dtype, device=s.device)
    self.nominal = wp.zeros(n, dtype=float, device=s.device, requires_grad=True)
    self.trial, self.ccost, self.dv, self.mu, self.ftol = z(n), z(n), z(n), z(n), z(1)
    self.fail, self.status, self.improved = z(n, dtype=int), z(n, dtype=int), z(n, dtype=int)
    self.monitor = z(2, n)  # best cost and status, packed for the host check
    self.aidx = z(1, dtype=int)  # the line-search step of the candidate being rolled out
    self.alphas = wp.array(np.asarray(options["alphas"], np.float32), dtype=float, device=s.device)
    self.gx, self.gu = z(n, T + 1, nx), z(n, T, nu)
    self.kff, self.kfb = z(n, T, nu), z(n, T, nu, nxa)
    # _ilqr_backward's scratch, in its order: vx, vxx, qx, qu, qxx, quu, qux, va, vb, qk, m, mf, l, r, bv, clamped
    self.scratch = [z(n, nxa), z(n, nxa, nxa), z(n, nxa), z(n, nu), z(n, nxa, nxa), z(n, nu, nu), z(n, nu, nxa),
                    z(n, nxa, nxa), z(n, nxa, nu), z(n, nu, 1 + nxa), z(n, nu, nu), z(n, nu, nu), z(n, nu, nu),
                    z(n, nu, 1 + nxa), z(n, nu, 4), z(n, nu, dtype=int)]
    # closed-loop rollouts: candidate and best-candidate trajectories, the Rollout's one-lane stepper
    self.ctrl_c, self.ctrl_next, self.warm = z(n, T, nu), z(n, T, nu), z(n, s.nv)
    traj = lambda ctrl: Trajectory(z(n, T + 1, s.nq), z(n, T + 1, s.nv), z(n, T + 1, s.na),
                                   z(n, T + 1, s.nsensordata), ctrl, s.dt)
    self.ctraj, self.ntraj = traj(self.ctrl_c), traj(self.ctrl_next)
    self.nom = None
    self.fwd = problem.rollout.forward_stepper
    if self.loop_steps is None:
      self.loop_steps = not s.device.is_cuda

  def _start(self, ctrl0):
    super()._start(ctrl0)
    self.mu.fill_(float(self.opt["mu_init"]))
    self.status.zero_()
    self.kff.zero_()  # the box QPs warm-start from the last iteration's steps, but not across runs

  def _read_best(self):
    m = self.monitor.numpy()  # best cost and status in one copy
    self._status = m[1]
    return m[0].astype(np.float64)

  def _done(self, nit, best, ftol):
    return self._status != 0

  def _stages(self):
    p = self.p
    T, nalpha = p.horizon, len(self.opt["alphas"])
    if self.loop_steps:
      # the rollouts' step is one graph replayed `horizon` times (a device counter advances it), so
      # capturing an iteration costs a few steps whatever the horizon
      linearize, self.nom = p.rollout.stages(p.ctrl, qpos0=p.qpos0, qvel0=p.qvel0, act0=p.act0, linearize=True)
      candidate = [(self._candidate_start, 1), (self._looped_step, T), (self._candidate_end, 1)]
      return linearize + [(self._solve, 1)] + candidate * nalpha + [(self._accept, 1)]

    def iteration():
      self.nom = p._run(p.ctrl, linearize=True)
      self._solve()
      for _ in range(nalpha):
        self._candidate_start()
        for k in range(T):
          self._candidate_step(k)
        self._candidate_end()
      self._accept()

    return [(iteration, 1)]  # one graph

  def _solve(self) -> None:
    """Cost gradient along the linearized nominal trajectory, then the Riccati recursion."""
    p, s, c, nom = self.p, self.p.scene, self.p.cost, self.nom
    n, T = p.nworld, p.horizon
    jac, sjac = p.rollout.jacobians()
    # cost gradient along the nominal trajectory (any term, kernels included) from a tape
    p.ctrl.grad.zero_()
    self.total.zero_()
    tape = wp.Tape()
    with tape:
      c.evaluate(nom, self.nominal)
      self._launch(_sum, n, [self.nominal], [self.total])
    tape.backward(loss=self.total)
    self._launch(_ilqr_gradients, (n, T + 1),
                 [s.nv, s.na, s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, s.dof_jntid, nom.qpos, nom.qpos.grad,
                  nom.qvel.grad, nom.act.grad, nom.sensordata.grad, p.ctrl.grad, sjac], [self.gx, self.gu])
    tape.zero()
    self._record(self.nominal, p.ctrl, nom)  # row `it`: the cost of the nominal controls
    self._launch(_ilqr_backward, n,
                 [s.nx, self.nxa, jac, sjac, p.ctrl, p.ctrl_lo, p.ctrl_hi, self.gx, self.gu, c.ch_kind, c.ch_idx,
                  c.ch_col, c.ch_running, c.ch_terminal, c.nch, self.mu, *self.scratch],
                 [self.kff, self.kfb, self.dv, self.fail])
    wp.copy(self.trial, self.nominal)
    self.aidx.zero_()

  # closed-loop rollout with step `alphas[aidx]`, kept where it beats the best so far

  def _candidate_start(self) -> None:
    p, ct = self.p, self.ctraj
    self.fwd.begin()
    self._launch(init_state, p.nworld, [p.qpos0, p.qvel0, p.act0], [ct.qpos, ct.qvel, ct.act, self.warm])

  def _candidate_step(self, k: int) -> None:
    """Step `k` (plus the stepper's counter) of the closed-loop rollout."""
    p, s, fwd, ct, nom = self.p, self.p.scene, self.fwd, self.ctraj, self.nom
    self._launch(_ilqr_feedback, p.nworld,
                 [s.nv, s.na, s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, s.dof_jntid, k, fwd.count, self.alphas,
                  self.aidx, self.nxa, ct.qpos, ct.qvel, ct.act, nom.qpos, nom.qvel, nom.act, p.ctrl, self.kff,
                  self.kfb, self.fail, p.ctrl_lo, p.ctrl_hi], [self.ctrl_c])
    fwd.step(ct, self.ctrl_c, self.warm, k)

  def _looped_step(self) -> None:
    self._candidate_step(0)
    self.fwd.advance()

  def _candidate_end(self) -> None:
    p, fwd, ct = self.p, self.fwd, self.ctraj
    fwd.count.zero_()  # back to absolute step indices
    fwd.sense(ct, self.ctrl_c, self.warm, p.horizon)
    p.cost.evaluate(ct, self.ccost)
    self._launch(_take_better, p.nworld, [self.ccost], [self.trial, self.take])
    for src, dst in zip((ct.ctrl, ct.qpos, ct.qvel, ct.act, ct.sensordata),
                        (self.ctrl_next, *[getattr(self.ntraj, f) for f in ("qpos", "qvel", "act", "sensordata")])):
      if dst.size:
        self._launch(_copy_where, dst.shape, [self.take, src], [dst])
    self._launch(_increment, 1, [self.aidx])

  def _accept(self) -> None:
    p, o = self.p, self.opt
    self._launch(_ilqr_accept, p.nworld,
                 [self.ftol, float(o["mu_min"]), float(o["mu_max"]), float(o["mu_factor"]), self.nominal,
                  self.trial, self.dv], [self.mu, self.status, self.improved])
    self._launch(_copy_where, p.ctrl.shape, [self.improved, self.ctrl_next], [p.ctrl])
    self._launch(_increment, 1, [self.it])
    self._record(self.trial, self.ctrl_next, self.ntraj)  # row `it` + 1
    self._launch(_pack_monitor, p.nworld, [self.best, self.status], [self.monitor])

  def run(self, ctrl0, *, maxiter, ftol, quiet, log_every, callback=None):
    self.ftol.fill_(ftol)  # on the device, so the captured graph reads the current value
    return super().run(ctrl0, maxiter=maxiter, ftol=ftol, quiet=quiet, log_every=log_every, callback=callback)

  def _finish(self, nit, done, t0, maxiter, message=None, hist=None):
    status = self.status.numpy()
    done = status == 1
    if message is None and (status != 0).all():
      stalled = int((status == 2).sum())
      message = (f"converged in all {done.size} worlds" if not stalled else
                 f"converged in {int(done.sum())} of {done.size} worlds; in {stalled} the line search found no "
                 f"decrease at the largest regularization (mu_max)")
    return super()._finish(nit, done, t0, maxiter, message, hist)


class _LBFGS(_Solver):
  """scipy's L-BFGS-B on all worlds' controls stacked (their costs summed).

  Worlds are independent, so the summed cost's gradient is each world's own gradient; the line
  search and curvature pairs are shared, which suits small problems. An evaluation is one graph
  replay between one upload of the controls and one read of cost and gradient; per world, the best
  controls evaluated are returned.
  """

  method = "lbfgs"

  def __init__(self, problem, options, capacity, capture):
    super().__init__(problem, options, capacity, capture)
    n = problem.nworld
    self.packed = wp.zeros(problem.ctrl.size + n, dtype=float, device=problem.scene.device)

  def _stages(self):
    return [(self._evaluate, 1)]

  def _evaluate(self) -> None:
    p = self.p
    traj = self._gradient()
    self._record(self.cost, p.ctrl, traj)
    m = p.ctrl.size
    wp.copy(self.packed, p.ctrl.grad.flatten(), count=m)
    wp.copy(self.packed, self.cost, dest_offset=m, count=p.nworld)
    self._tape.zero()

  def run(self, ctrl0, *, maxiter, ftol, quiet, log_every, callback=None):
    from scipy.optimize import Bounds, minimize
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    self.p._refresh_constants()
    self._start(ctrl0)
    p = self.p
    shape, m = p.ctrl.shape, p.ctrl.size
    x0 = ctrl0.numpy().astype(np.float64).ravel()
    last = {}
    history = []

    def fun(x):
      p.ctrl.assign(x.reshape(shape).astype(np.float32))
      self._step()
      out = self.packed.numpy().astype(np.float64)  # the one host read of the evaluation
      last["x"], last["cost"] = x.copy(), out[m:]
      last["best"] = np.fmin(last.get("best", out[m:]), out[m:])  # as `_record` keeps it on the device
      return float(out[m:].sum()), out[:m]

    bar = tqdm(total=maxiter, desc=self.method, disable=quiet, leave=False, dynamic_ncols=True, mininterval=0.5)

    def on_iter(xk):
      if not np.array_equal(xk, last.get("x")):
        fun(xk)
      history.append(last["cost"])
      if len(history) % log_every == 0:
        c = last["cost"]
        bar.set_postfix_str(f"best {np.nanmin(c):.4g}  median {np.nanmedian(c):.4g}", refresh=False)
        if callback is not None and callback(len(history) - 1, last["best"].copy()):
          raise StopIteration  # scipy >= 1.11 ends the minimization and returns its result
      bar.update(1)

    try:
      fun(x0)
      history.append(last["cost"])
      res = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=Bounds(p._lo_np.ravel(), p._hi_np.ravel()),
                     callback=on_iter, options={"maxiter": maxiter, "ftol": ftol, "gtol": self.opt["gtol"],
                                                 "maxcor": self.opt["maxcor"], "maxfun": 20 * maxiter})
    finally:
      bar.close()
    return self._finish(len(history) - 1, np.full(p.nworld, bool(res.success)), t0, maxiter,
                        f"L-BFGS-B: {res.message}", hist=np.array(history))


_SOLVERS = {"adam": _Adam, "lbfgs": _LBFGS, "ilqr": _ILQR}


def optimize_trajectory(problem: TrajectoryProblem, method: str = "ilqr", *, maxiter: int | None = None,
                        ftol: float = 1e-6, warm_start=None, shift: int = 1, quiet: bool = False,
                        log_every: int | None = None, capture: bool = True, callback=None,
                        options: dict | None = None) -> TrajectoryResult:
  """Optimizes the controls of every world of `problem`.

  Args:
    problem: the `TrajectoryProblem`.
    method: `"ilqr"` (default), `"adam"` or `"lbfgs"`.
    maxiter: iterations (default: ilqr 100, adam 1000, lbfgs 500).
    ftol: convergence test on the relative cost decrease: iLQR, a world converges when an
      iteration (or the local model's prediction) lowers its cost by at most `ftol * |cost|`; Adam,
      when its best cost fell by at most that between two checks (`log_every` iterations apart);
      L-BFGS, scipy's `ftol`.
    warm_start: a previous `TrajectoryResult` of this problem, or controls `(nworld, nstep, nu)`
      (`wp.array` or array-like), shifted by `shift` steps (the last control is held) and used as
      the initial guess instead of `problem.ctrl_init`: the receding-horizon (MPC) warm start.
    shift: steps to shift `warm_start` by (0: use it as is).
    quiet: no progress bar.
    log_every: iterations between host reads of the costs (progress bar, convergence test): one
      copy of a few bytes per world, the only one in the loop (`log_every=maxiter`: none until the
      end); default: 1 for iLQR and L-BFGS (iLQR stops on it, and its iterations, few and each
      many rollouts, dwarf the read), `maxiter // 100` for Adam.
    capture: replay each iteration as a captured graph (`wp.ScopedCapture`) after the first.
    callback: `callback(nit, fun) -> bool`, called at every host check (every `log_every`
      iterations) with the best cost per world so far `(nworld,)` (already read; no extra transfer);
      returning True stops the solver.
    options: solver settings, e.g. `{"lr": 0.05}`:
      adam: `lr` (ctrl units per step, 0.05), `betas` ((0.9, 0.999)), `eps` (1e-8), `patience`
        (iterations over which the `ftol` test looks back, 100);
      lbfgs: `maxcor` (10), `gtol` (1e-8);
      ilqr: `alphas` (line-search steps, (1, 1/2, ..., 1/32)); Levenberg-Marquardt regularization
        `Quu + mu diag(Quu)`: `mu_init` (1), `mu_min` (1e-4; below it, 0), `mu_max` (1e8),
        `mu_factor` (10): divided after an improving iteration, multiplied after a failed one.

  Returns:
    A `TrajectoryResult`.
  """
  if not isinstance(problem, TrajectoryProblem):
    raise TypeError(f"problem must be a TrajectoryProblem, got {type(problem).__name__}")
  if not isinstance(method, str) or method.lower() not in METHODS:
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
  method = method.lower()
  opts = dict(_OPTIONS[method])
  unknown = set(options or {}) - set(opts)
  if unknown:
    raise ValueError(f"unknown options {sorted(unknown)} for method {method!r}; valid: {sorted(opts)}")
  opts.update(options or {})
  if method == "ilqr":
    opts["alphas"] = tuple(float(a) for a in opts["alphas"])
    if not opts["alphas"] or min(opts["alphas"]) <= 0:
      raise ValueError(f"ilqr alphas must be positive step sizes, got {opts['alphas']}")
  maxiter = _DEFAULT_MAXITER[method] if maxiter is None else maxiter
  if isinstance(maxiter, bool) or not isinstance(maxiter, (int, np.integer)) or maxiter < 1:
    raise ValueError(f"maxiter must be a positive integer, got {maxiter!r}")
  maxiter = int(maxiter)
  if not ftol >= 0:
    raise ValueError(f"ftol must be >= 0, got {ftol!r}")
  if log_every is None:
    log_every = max(1, maxiter // 100) if method == "adam" else 1
  if isinstance(log_every, bool) or not isinstance(log_every, (int, np.integer)) or log_every < 1:
    raise ValueError(f"log_every must be a positive integer, got {log_every!r}")
  if callback is not None and not callable(callback):
    raise TypeError(f"callback must be callable, got {type(callback).__name__}")
  ctrl0 = _warm_start(problem, warm_start, shift)

  key = (method, tuple(sorted((k, str(v)) for k, v in opts.items())), bool(capture))
  solver = problem._solvers.get(key)
  if solver is None or solver.capacity < maxiter + 1:
    solver = _SOLVERS[method](problem, opts, maxiter + 1, bool(capture))
    problem._solvers[key] = solver
  return solver.run(ctrl0, maxiter=maxiter, ftol=float(ftol), quiet=quiet, log_every=int(log_every),
                    callback=callback)


def _warm_start(problem: TrajectoryProblem, warm_start, shift: int) -> wp.array:
  if warm_start is None:
    return problem.ctrl_init
  if isinstance(shift, bool) or not isinstance(shift, (int, np.integer)) or not 0 <= shift < problem.horizon:
    raise ValueError(f"shift must be an integer in [0, horizon={problem.horizon}), got {shift!r}")
  shape = problem.ctrl.shape
  src = warm_start.ctrl if isinstance(warm_start, TrajectoryResult) else warm_start
  if not isinstance(src, wp.array) or src.device != problem.scene.device or src.dtype != wp.float32:
    a = _host(src, "warm_start")
    if a.shape != shape:
      raise ValueError(f"warm_start must have shape (nworld, horizon, nu) = {shape}, got {a.shape}")
    src = wp.array(a.astype(np.float32), dtype=float, device=problem.scene.device)
  elif src.shape != shape:
    raise ValueError(f"warm_start must have shape (nworld, horizon, nu) = {shape}, got {src.shape}")
  out = wp.empty(shape, dtype=float, device=problem.scene.device)
  wp.launch(_shift, dim=shape, inputs=[src, int(shift), problem.ctrl_lo, problem.ctrl_hi], outputs=[out],
            device=problem.scene.device)
  return out
