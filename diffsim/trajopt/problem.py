"""`TrajectoryProblem`: a scene, a horizon, initial states, a cost and control bounds, per world."""

from __future__ import annotations

import copy

import numpy as np
import warp as wp

from .. import losses
from ..graph import Replay
from ..rollout import Rollout, Trajectory
from .checks import clipped_controls, initial_state, per_world_step

JACOBIANS = ("auto", "analytic", "finite_difference")  # how a linearized rollout forms its step Jacobians


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
      `"analytic"`, `"finite_difference"`).
    jacobian: how a linearized rollout (iLQR's, `run(..., linearize=True)`) forms its step
      Jacobians A = dx'/dx, B = dx'/du: `"auto"` (default) the analytic step Jacobians where the
      model is covered (`diffsim.adjoint.analytic_coverage`), else the finite-difference lanes;
      `"analytic"` (an error naming what it does not cover); `"finite_difference"` the lanes.

  Raises:
    ValueError, KeyError, TypeError: for a horizon below 1, a cost naming an unknown joint, site,
      sensor or actuator, an array of the wrong shape, or bounds with `lo > hi`; all before any
      kernel is launched.

  Attributes:
    scene, horizon, nworld, cost (`losses.Cost`), rollout (`diffsim.Rollout`), jacobian.
    ctrl: `wp.array3d[float]` `(nworld, nstep, nu)` the solvers' working controls (with grad).
    ctrl_init, ctrl_lo, ctrl_hi: `wp.array3d[float]` `(nworld, nstep, nu)`.
    ctrl_lo_np, ctrl_hi_np: read-only float32 host copies of the bounds `(nworld, nstep, nu)`.
    qpos0, qvel0, act0: `wp.array2d[float]` `(nworld, nq | nv | na)`.
    solvers: the solvers `optimize_trajectory` built for this problem, keyed by method, options and
      capture: a later call reuses their buffers and captured graphs.
  """

  def __init__(self, scene, cost, *, horizon: int, qpos0=None, qvel0=None, act0=None, ctrl_lo=None, ctrl_hi=None,
               ctrl_init=None, params=None, central: bool = True, eps: float | dict | None = None,
               gradient: str = "auto", jacobian: str = "auto"):
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
      raise ValueError(f"horizon must be a positive number of steps, got {horizon!r}")
    if jacobian not in JACOBIANS:
      raise ValueError(f"jacobian must be one of {JACOBIANS}, got {jacobian!r}")
    if scene.nu == 0:
      raise ValueError("the model has no actuators, so there are no controls to optimize")
    nworld, nstep, nu = scene.nworld, int(horizon), scene.nu
    qpos0 = initial_state(qpos0, "qpos0", nworld, scene.nq, scene.mjm.qpos0)
    qvel0 = initial_state(qvel0, "qvel0", nworld, scene.nv, np.zeros(scene.nv))
    act0 = initial_state(act0, "act0", nworld, scene.na, np.zeros(scene.na))
    lo, hi = self._bounds(scene, ctrl_lo, ctrl_hi, nstep)
    guess = clipped_controls(ctrl_init, "ctrl_init", nworld, nstep, nu, lo, hi)
    self.scene, self.horizon, self.nworld = scene, nstep, nworld
    self.cost = cost if isinstance(cost, losses.Cost) else losses.Cost(scene, nstep, cost)
    if self.cost.scene is not scene or self.cost.nstep != nstep:
      raise ValueError("the Cost was bound to another scene or horizon")

    def device_array(a, grad=False):
      return wp.array(np.ascontiguousarray(a, dtype=np.float32), dtype=float, device=scene.device,
                      requires_grad=grad)

    self.ctrl_lo, self.ctrl_hi = device_array(lo), device_array(hi)
    self.ctrl_lo_np, self.ctrl_hi_np = lo.astype(np.float32), hi.astype(np.float32)
    self.ctrl_lo_np.flags.writeable = self.ctrl_hi_np.flags.writeable = False
    self.ctrl_init = device_array(guess)
    self.ctrl = device_array(guess, True)
    self.qpos0, self.qvel0, self.act0 = device_array(qpos0), device_array(qvel0), device_array(act0)
    self.jacobian = jacobian
    self._rollout_options = dict(params=params, central=central, eps=eps, gradient=gradient)
    self.rollout = self.make_rollout(jacobian)
    self.solvers: dict = {}
    self._evaluation = None  # the evaluation's graph replay, made on first use

  def make_rollout(self, jacobian: str) -> Rollout:
    """A `Rollout` of this problem's scene, horizon, parameters and difference scheme whose
    linearized calls form their step Jacobians as `jacobian` says (see the class's Args)."""
    if jacobian not in JACOBIANS:
      raise ValueError(f"jacobian must be one of {JACOBIANS}, got {jacobian!r}")
    return Rollout(self.scene, self.horizon, jacobian=jacobian, **self._rollout_options)

  def with_cost(self, cost) -> TrajectoryProblem:
    """The same problem with another cost (a list of terms or a bound `losses.Cost`): the stage of
    a staged solve, such as the contact-reaching warm start (`diffsim.trajopt`'s docstring).

    It shares this problem's scene, rollout, initial states, bounds and guess (a `reset` of either
    applies to both) and has its own working controls, solvers and graphs; pass its result as
    `warm_start=..., shift=0` to `optimize_trajectory` of this problem.
    """
    other = copy.copy(self)
    other.cost = cost if isinstance(cost, losses.Cost) else losses.Cost(self.scene, self.horizon, cost)
    if other.cost.scene is not self.scene or other.cost.nstep != self.horizon:
      raise ValueError("the Cost was bound to another scene or horizon")
    other.ctrl = wp.clone(self.ctrl_init, requires_grad=True)
    other.solvers, other._evaluation = {}, None
    return other

  @staticmethod
  def _bounds(scene, ctrl_lo, ctrl_hi, nstep: int) -> tuple[np.ndarray, np.ndarray]:
    """Control bounds `(nworld, nstep, nu)` float64, checked against each other and the ctrlrange."""
    nworld, nu = scene.nworld, scene.nu
    clamp_lo, clamp_hi = scene.ctrl_lo.numpy(), scene.ctrl_hi.numpy()
    lo = per_world_step(clamp_lo if ctrl_lo is None else ctrl_lo, "ctrl_lo", nworld, nstep, nu)
    hi = per_world_step(clamp_hi if ctrl_hi is None else ctrl_hi, "ctrl_hi", nworld, nstep, nu)
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
      raise ValueError("control bounds contain NaN")
    for what, (low, high) in (("", (lo, hi)), (" after intersecting them with the actuators' ctrlrange",
                                                (np.maximum(lo, clamp_lo), np.minimum(hi, clamp_hi)))):
      if np.any(low > high):
        world, step, actuator = np.argwhere(low > high)[0]
        raise ValueError(f"control bounds have ctrl_lo > ctrl_hi{what} (first at world {world}, step {step}, "
                         f"actuator {actuator}: {low[world, step, actuator]} > {high[world, step, actuator]})")
    return lo, hi

  def _clip(self, ctrl, name: str = "ctrl") -> np.ndarray:
    """Controls of any shape the constructor takes for `ctrl_init`, as `(nworld, nstep, nu)` float64
    clipped to the bounds (a ValueError naming `name` for a wrong shape or NaN/Inf)."""
    return clipped_controls(ctrl, name, self.nworld, self.horizon, self.scene.nu, self.ctrl_lo_np, self.ctrl_hi_np)

  def reset(self, *, qpos0=None, qvel0=None, act0=None, ctrl_init=None) -> None:
    """Sets new initial states and/or a new guess (for receding-horizon loops); keeps solvers and graphs.

    Arguments take the shapes of the constructor's; `None` keeps the current value.
    """
    scene = self.scene
    for arr, x, name, width in ((self.qpos0, qpos0, "qpos0", scene.nq), (self.qvel0, qvel0, "qvel0", scene.nv),
                                (self.act0, act0, "act0", scene.na)):
      if x is not None:
        arr.assign(initial_state(x, name, self.nworld, width, None).astype(np.float32))
    if ctrl_init is not None:
      self.ctrl_init.assign(self._clip(ctrl_init, "ctrl_init").astype(np.float32))

  def run(self, ctrl: wp.array, *, linearize: bool = False) -> Trajectory:
    """Rollout of `ctrl` `(nworld, nstep, nu)` from the problem's initial states (the rollout's buffers,
    recorded on an active tape; `linearize=True` also forms the step Jacobians, `rollout.jacobians()`)."""
    return self.rollout(ctrl, qpos0=self.qpos0, qvel0=self.qvel0, act0=self.act0, linearize=linearize)

  def refresh_constants(self) -> None:
    """Recomputes constants derived from inertial parameters (`set_const`), which graphs do not: call
    before replaying graphs whose rollouts read changed parameters."""
    if self.rollout.layout.eager_constants:
      self.rollout.update_constants()

  def evaluate(self, ctrl=None) -> tuple[np.ndarray, Trajectory]:
    """Cost per world `(nworld,)` and trajectory of `ctrl` (default: the guess), clipped to the bounds.

    The trajectory is the rollout's buffers (overwritten by the next call). The rollout and cost are
    captured as a graph on the first call and replayed after.
    """
    if ctrl is not None:
      self.ctrl.assign(self._clip(ctrl).astype(np.float32))
    else:
      wp.copy(self.ctrl, self.ctrl_init)
    self.refresh_constants()
    if self._evaluation is None:
      self._evaluation_cost = wp.zeros(self.nworld, dtype=float, device=self.scene.device)

      def stage():
        self._evaluation_trajectory = self.run(self.ctrl)
        self.cost.evaluate(self._evaluation_trajectory, self._evaluation_cost)

      self._evaluation = Replay(self.scene.device, stage)
    self._evaluation()
    # a copy: on the CPU .numpy() is a view
    return self._evaluation_cost.numpy().copy(), self._evaluation_trajectory

  def replay_mujoco(self, ctrl=None) -> dict[str, np.ndarray]:
    """Replays `ctrl` (default: the guess; e.g. `result.x`) open-loop in float64 MuJoCo C
    (`mujoco.mj_step`), world by world with its own initial state and parameter values: the check
    that a plan works outside diffsim's float32 simulation.

    Returns:
      `qpos (nworld, nstep + 1, nq)`, `qvel`, `act` and `sensordata (nworld, nstep + 1, ns)` (see
      `diffsim.gradcheck.mujoco_rollout`).
    """
    import copy

    from ..gradcheck import mujoco_rollout, set_mjmodel_params

    ctrl = self._clip(self.ctrl_init.numpy() if ctrl is None else ctrl)
    ctrl = ctrl.astype(np.float32).astype(np.float64)  # what the float32 simulation applied
    qpos0, qvel0, act0 = (a.numpy().astype(np.float64) for a in (self.qpos0, self.qvel0, self.act0))
    params = self.rollout.params
    runs = []
    for world in range(self.nworld):
      mjm = self.scene.mjm
      if params:
        mjm = copy.deepcopy(mjm)
        set_mjmodel_params(mjm, {p: p.value.numpy()[world].astype(np.float64) for p in params})
      runs.append(mujoco_rollout(mjm, ctrl[world], qpos0=qpos0[world], qvel0=qvel0[world], act0=act0[world]))
    return {k: np.stack([r[k] for r in runs]) for k in runs[0]}

  def __repr__(self) -> str:
    return (f"TrajectoryProblem(nworld={self.nworld}, horizon={self.horizon}, nu={self.scene.nu}, "
            f"terms={[type(t).__name__ for t in self.cost.terms]})")
