"""Rollouts of many worlds, differentiable on a `wp.Tape`.

`rollout(scene, ctrl)` steps every world `nstep` times. Inside `with wp.Tape() as tape:` it also
forms each step's Jacobians (`step.FiniteDifferenceStep`) and records one backward function that
runs the adjoint recursion with kernels only:

  lam_N = dL/dx_N + S_N^T dL/ds_N
  lam_k = J_k[:, x]^T lam_{k+1} + S_k[:, x]^T dL/ds_k + dL/dx_k
  dL/du_k = J_k[:, u]^T lam_{k+1} + S_k[:, u]^T dL/ds_k
  dL/dtheta = sum_k J_k[:, theta]^T lam_{k+1} + S_k[:, theta]^T dL/ds_k

in the tangent space of `qpos` (quaternion gradients are mapped to and from it).

Where the model allows (`adjoint.analytic_coverage`), the tape's backward pass does not need the
Jacobians: `gradient="auto"` (the default) takes diffsim's analytic adjoint (`adjoint.AnalyticStep`:
one MJWarp world per world forward, a reverse sweep through the smooth dynamics backward), and says
which it took and why (`Rollout.gradient`, `Rollout.gradient_reason`, one log line on the `diffsim`
logger). `gradient="finite_difference"` keeps the lanes; `gradient="analytic"` on a model it does not
cover is an error naming the feature. Linearized calls (`linearize=True`, iLQR and Gauss-Newton)
form whole step Jacobians the same way: `jacobian="auto"` (the default) takes them from the analytic
step (`adjoint.AnalyticJacobian`: one reverse sweep of the replay per row) where it covers the model,
else from the lanes (`Rollout.jacobian`, `Rollout.jacobian_reason`). Forward mode always uses the
lanes.

`Rollout` is the same with every buffer allocated once, for loops and graph capture. With
`directions=m` it runs in forward mode instead: a linearized rollout propagates `m` tangents of
the trajectory (`Rollout.tangents()`), one lane each, for when only a few derivatives of every
state and sensor are needed (system identification with a handful of parameters).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import warp as wp

from .joints import BALL, FREE, load_quat, tangent_grad
from .kernels import init_state
from .params import Param, ParamLayout
from .rollout_checks import DivergenceError, GradientWarning, as_state, check_ctrl, check_finite, check_finite_inputs
from .rollout_checks import check_switches
from .scene import off_tape
from .step import FiniteDifferenceStep, resolve_eps

__all__ = ["Trajectory", "Rollout", "rollout", "DivergenceError", "GradientWarning", "check_switches"]

_log = logging.getLogger("diffsim")
GRADIENTS = ("auto", "analytic", "finite_difference")  # how a Rollout forms tape gradients
JACOBIANS = GRADIENTS  # and step Jacobians (linearized calls)


@dataclass
class Trajectory:
  """States and sensors of every world along a rollout (all `wp.array`s with gradients).

  Attributes:
    qpos: `(nworld, nstep + 1, nq)` positions; row 0 is the initial state.
    qvel: `(nworld, nstep + 1, nv)` velocities.
    act: `(nworld, nstep + 1, na)` actuator activations.
    sensordata: `(nworld, nstep + 1, nsensordata)`; row k is what MuJoCo computes inside the step
      from state k with `ctrl[:, k]` (row `nstep`: final state, control held at `ctrl[:, nstep - 1]`).
    ctrl: `(nworld, nstep, nu)` the controls applied.
    dt: timestep, s.
  """

  qpos: wp.array
  qvel: wp.array
  act: wp.array
  sensordata: wp.array
  ctrl: wp.array
  dt: float

  @property
  def nstep(self) -> int:
    return self.qpos.shape[1] - 1

  @property
  def nworld(self) -> int:
    return self.qpos.shape[0]

  @property
  def time(self) -> np.ndarray:
    """`(nstep + 1,)` s."""
    return np.arange(self.nstep + 1) * self.dt

  def numpy(self) -> dict[str, np.ndarray]:
    """Host copies of all arrays, by name (copies on the CPU too, where `wp.array.numpy()` is a view)."""
    return {k: getattr(self, k).numpy().copy() for k in ("qpos", "qvel", "act", "sensordata", "ctrl")}


class _Buffers:
  """Per-rollout arrays: trajectory, Jacobians and adjoint workspace."""

  def __init__(self, scene, nstep: int, fd: FiniteDifferenceStep, analytic: bool = False):
    n, dev = scene.nworld, scene.device
    self.scene, self.nstep, self.fd = scene, nstep, fd
    z = lambda *shape: wp.zeros(shape, dtype=float, device=dev)
    g = lambda *shape: wp.zeros(shape, dtype=float, device=dev, requires_grad=True)
    self.qpos = g(n, nstep + 1, scene.nq)
    self.qvel = g(n, nstep + 1, scene.nv)
    self.act = g(n, nstep + 1, scene.na)
    self.sensordata = g(n, nstep + 1, scene.nsensordata)
    self.warm = z(n, scene.nv)
    # per step, the Jacobian columns whose lanes all changed the constraint set (`FiniteDifferenceStep`)
    self.switches = wp.zeros((n, nstep + 1), dtype=int, device=dev)
    self.kinks = wp.zeros((n, nstep + 1), dtype=int, device=dev)  # and 1 + the actuation kink they straddle
    # defaults and grad sinks, allocated here so a captured graph never points at freed memory
    self.qpos0 = wp.array(scene.mjm.qpos0.reshape(1, -1).astype(np.float32), dtype=float, device=dev)
    self.qvel0 = z(1, scene.nv)
    self.act0 = z(1, scene.na)
    self.sinks = (z(1, scene.nq), z(1, scene.nv), z(1, scene.na))
    if fd.ndir:
      # forward mode: tangents of states and sensors, no adjoint
      self.jac = z(n, nstep + 1, scene.nx, fd.ndir)
      self.sjac = z(n, nstep + 1, scene.nsensordata, fd.ndir)
      self.tangent0 = z(1, scene.nx, fd.ndir)  # default: parameters only
      self.lam = self.theta_grad = self.ctrl_grad = None
    elif fd.differentiable:
      # the analytic adjoint keeps each step's acceleration, not Jacobians (`jacobian_buffers`)
      self.jac = self.sjac = None
      if not analytic:
        self.jacobian_buffers()
      # the analytic step's accelerations, the final state's too (its acceleration sensors)
      self.qacc = z(n, nstep + 1, scene.nv) if analytic else None
      self.lam = z(n, nstep + 1, scene.nx)
      self.theta_grad = z(n, max(fd.nparam, 1))
      self.ctrl_grad = z(n, nstep, scene.nu)  # used when ctrl has no .grad
    else:
      self.jac = self.sjac = self.lam = self.theta_grad = self.ctrl_grad = self.qacc = None

  def jacobian_buffers(self) -> None:
    """Allocates the step Jacobians `(nworld, nstep, nx, nz)` and `(nworld, nstep + 1, ns, nz)`."""
    if self.jac is None:
      s, fd, n = self.scene, self.fd, self.scene.nworld
      if s.device.is_capturing:
        raise RuntimeError("a Rollout using the analytic adjoint was first linearized inside a graph capture; "
                           "call it once with linearize=True before capturing")
      self.jac = wp.zeros((n, self.nstep, s.nx, fd.nz), dtype=float, device=s.device)
      self.sjac = wp.zeros((n, self.nstep + 1, s.nsensordata, fd.nz), dtype=float, device=s.device)


@wp.kernel
def _adjoint_step(
  # Model:
  nv: int,
  na: int,
  nu: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  k: int,
  with_state: int,
  jac: wp.array4d[float],  # (nworld, nstep, nx, nz)
  sjac: wp.array4d[float],  # (nworld, nstep + 1, ns, nz)
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qpos_grad: wp.array3d[float],
  qvel_grad: wp.array3d[float],
  act_grad: wp.array3d[float],
  sensordata_grad: wp.array3d[float],
  # Out:
  lam: wp.array3d[float],  # (nworld, nstep + 1, nx) tangent-space state adjoints
  ctrl_grad: wp.array3d[float],  # (nworld, nstep, nu) accumulated
  theta_grad: wp.array2d[float],  # (nworld, nparam) accumulated
):
  w, c = wp.tid()
  nx = 2 * nv + na
  g = float(0.0)
  if with_state != 0:
    for i in range(nx):
      g += jac[w, k, i, c] * lam[w, k + 1, i]
  for s in range(sjac.shape[2]):
    g += sjac[w, k, s, c] * sensordata_grad[w, k, s]
  if c < nv:
    lam[w, k, c] = g + tangent_grad(c, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, qpos[w], k, qpos_grad[w], k)
  elif c < 2 * nv:
    lam[w, k, c] = g + qvel_grad[w, k, c - nv]
  elif c < nx:
    lam[w, k, c] = g + act_grad[w, k, c - 2 * nv]
  elif c < nx + nu:
    kc = wp.min(k, ctrl_grad.shape[1] - 1)
    ctrl_grad[w, kc, c - nx] += g
  else:
    theta_grad[w, c - nx - nu] += g


@wp.kernel
def _initial_grad(
  # Model:
  njnt: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  # In:
  qpos: wp.array3d[float],
  lam: wp.array3d[float],
  # Out:
  qpos0_grad: wp.array2d[float],  # (nworld or 1, nq); worlds sharing a row add up
  qvel0_grad: wp.array2d[float],  # (nworld or 1, nv)
  act0_grad: wp.array2d[float],  # (nworld or 1, na)
):
  w = wp.tid()
  nv = qvel0_grad.shape[1]
  rq = w % qpos0_grad.shape[0]
  for j in range(njnt):
    typ = jnt_type[j]
    qadr = jnt_qposadr[j]
    dadr = jnt_dofadr[j]
    if typ == FREE:
      for i in range(3):
        wp.atomic_add(qpos0_grad, rq, qadr + i, lam[w, 0, dadr + i])
      qadr += 3
      dadr += 3
    if typ == FREE or typ == BALL:
      # pull back through v = 2 Im(conj(q) dq): g = 2 q * (0, lam)
      q = load_quat(qpos[w], 0, qadr)
      v = wp.quat(lam[w, 0, dadr], lam[w, 0, dadr + 1], lam[w, 0, dadr + 2], 0.0)
      g = 2.0 * (q * v)
      wp.atomic_add(qpos0_grad, rq, qadr, g[3])
      wp.atomic_add(qpos0_grad, rq, qadr + 1, g[0])
      wp.atomic_add(qpos0_grad, rq, qadr + 2, g[1])
      wp.atomic_add(qpos0_grad, rq, qadr + 3, g[2])
    else:
      wp.atomic_add(qpos0_grad, rq, qadr, lam[w, 0, dadr])
  for i in range(nv):
    wp.atomic_add(qvel0_grad, w % qvel0_grad.shape[0], i, lam[w, 0, nv + i])
  for i in range(act0_grad.shape[1]):
    wp.atomic_add(act0_grad, w % act0_grad.shape[0], i, lam[w, 0, 2 * nv + i])


@wp.kernel
def _scatter_add(
  src: wp.array2d[float],  # (nworld, nparam)
  offset: int,
  dst: wp.array2d[float],  # (nworld, dim)
):
  w, i = wp.tid()
  dst[w, i] += src[w, offset + i]


@wp.kernel
def _seed_tangents(
  tangent0: wp.array3d[float],  # (nworld or 1, nx, ndir)
  dx_out: wp.array4d[float],  # (nworld, nstep + 1, nx, ndir)
):
  w, i, c = wp.tid()
  dx_out[w, 0, i, c] = tangent0[w % tangent0.shape[0], i, c]


@dataclass
class _Call:
  """What one rollout call reads and writes, and the stepper that runs it."""

  b: _Buffers
  ctrl: wp.array
  state0: tuple  # (qpos0, qvel0, act0) device arrays
  tangent0: wp.array | None  # (nworld or 1, nx, ndir) forward mode's initial tangents
  differentiate: bool
  stepper: FiniteDifferenceStep  # or adjoint.AnalyticStep
  traj: Trajectory
  analytic: bool = False


class Rollout:
  """A rollout of `nstep` steps with every buffer allocated once, for loops and graph capture.

  Args:
    scene: the `Scene`.
    nstep: number of steps.
    params: `Param`s applied to the model (and differentiated on a tape).
    differentiable: form Jacobians when recorded on a tape (lanes: `1 + 2 nz`).
    central: central differences (default) or forward differences (half the lanes).
    ctrl_jacobian: form the Jacobians' control columns (default); `False` saves their lanes when
      only state and parameter derivatives are needed (then `ctrl` may not require grad on a tape).
    eps: finite-difference steps (a float, or a dict by input group; see `FiniteDifferenceStep`).
    check: after each call, raise `DivergenceError` on NaN/Inf and, when differentiating, warn where
      a step's Jacobian crossed a constraint switch (`check_switches`; host reads); off in captures.
    directions: forward mode with `m` tangent directions (`0`: off). Then `linearize=True` forms no
      Jacobians: it propagates the tangents `dx_k[:, c] = d x_k / d alpha_c` of the trajectory
      along `m` directions `alpha_c` of the inputs — the initial state along `tangent0[:, :, c]`
      (an argument of the call, default 0) and, for `c < nparam`, parameter `c` by one unit — and
      `tangents()` returns them. `1 + m` lanes (forward differences) or `1 + 2 m` (central) instead
      of `1 + nx + nparam (+ nu)`; no tape gradients (no adjoint).
    guard: guard lanes for the qpos columns (`FiniteDifferenceStep`; default: in models with
      position constraints).
    gradient: how a tape's backward pass is formed: `"auto"` (default: the analytic adjoint where
      `analytic_coverage` allows, else the lanes), `"analytic"` (an error naming the first feature
      it does not cover) or `"finite_difference"` (the lanes). `gradient` and `gradient_reason`
      say what was chosen and why.
    jacobian: how linearized calls form the step and sensor Jacobians, with the same choices
      (default: as `gradient`): `"auto"` the analytic step's (`adjoint.AnalyticJacobian`, no
      perturbation lanes) where `analytic_coverage` allows, else the lanes. `jacobian` and
      `jacobian_reason` say which and why.
    lazy: make the analytic step and the one-lane stepper's MJWarp Data on first use, not here
      (`build`, and the first forward-only call; run or build before capturing the first call).

  Calling it returns the same `Trajectory` arrays every time (overwritten). Inside a tape it
  records its backward pass; `tape.backward` then accumulates into `ctrl.grad`, `qpos0.grad`,
  `qvel0.grad`, `act0.grad` (for those that have `.grad`) and each `Param.value.grad`.

  Attributes besides the arguments: `buffers`, the arrays a call writes (trajectory, step
  Jacobians when linearized, the solver's accelerations `qacc` for the analytic adjoint); `ncall`,
  the calls so far, so a holder of an earlier call's outputs can tell that they were overwritten.
  """

  def __init__(self, scene, nstep: int, *, params: Sequence[Param] | None = None, differentiable: bool = True,
               central: bool = True, ctrl_jacobian: bool = True, eps: float | dict | None = None,
               check: bool = False, directions: int = 0, guard: bool | None = None, gradient: str = "auto",
               jacobian: str | None = None, lazy: bool = False):
    if not isinstance(nstep, (int, np.integer)) or nstep < 1:
      raise ValueError(f"nstep must be a positive integer, got {nstep!r}")
    if gradient not in GRADIENTS:
      raise ValueError(f"gradient must be one of {GRADIENTS}, got {gradient!r}")
    jacobian = gradient if jacobian is None else jacobian
    if jacobian not in JACOBIANS:
      raise ValueError(f"jacobian must be one of {JACOBIANS}, got {jacobian!r}")
    # building launches kernels (MJWarp's memory probe, parameter rows): keep them off a user's tape
    with off_tape():
      self.scene = scene
      self.nstep = int(nstep)
      self.ncall = 0
      self.layout = ParamLayout(scene, params)
      self.gradient, self.gradient_reason = _choose_gradient(scene, self.layout, gradient, differentiable, directions)
      self.jacobian, self.jacobian_reason = (self.gradient, self.gradient_reason) if jacobian == gradient else \
        _choose_gradient(scene, self.layout, jacobian, differentiable, directions, what="jacobian")
      analytic = "analytic" in (self.gradient, self.jacobian)
      # with the analytic step the lanes serve only what it does not form: their worlds are made then
      self.fd = FiniteDifferenceStep(scene, self.layout.nparam, differentiable=differentiable, central=central,
                                     ctrl_jacobian=ctrl_jacobian, eps=eps, directions=directions, guard=guard,
                                     lazy=analytic)
      self.check = check
      self.buffers = _Buffers(scene, self.nstep, self.fd, analytic)
      # the last differentiable call's switch counts (`run` without buffers, as `rollout` calls it, makes its own)
      self._switches, self._kinks = self.buffers.switches, self.buffers.kinks
      # the one-lane stepper (and its MJWarp Data) for forward-only calls, made here and not on first
      # use (unless `lazy`): put_data inside a graph capture would be recorded instead of run
      self._fwd = FiniteDifferenceStep(scene, self.layout.nparam, differentiable=False, lazy=lazy) \
        if differentiable else self.fd
      # and the parameters' per-lane model rows, for the same reason
      self.layout.reserve(1 if analytic else self.fd.nlane)
      self._analytic = analytic
      self._adjoint = self._linearizer = None
      self._built = self._reserved = False
      if not lazy:
        self.build()

  def build(self) -> None:
    """Makes what `lazy=True` left for first use: the analytic step's arrays and launches
    (`adjoint.AnalyticStep`, `AnalyticJacobian`) and the one-lane stepper's MJWarp Data they step
    (a Rollout without them makes that Data at its first forward-only call). A no-op once built.

    It allocates, so it must run outside a graph capture: call it before capturing a lazy Rollout's
    first call. A Rollout that may never run (system identification's main rollout while LM
    linearizes with a forward-mode one) saves a `put_data` and the analytic step's set-up."""
    if self._built:
      return
    if self.scene.device.is_capturing:
      raise RuntimeError("a Rollout built with lazy=True was first used inside a graph capture, where it cannot "
                         "allocate its MJWarp Data and analytic step; call its build() before capturing")
    with off_tape():
      self._lanes()
      if self._analytic:
        from .adjoint import AnalyticJacobian, AnalyticStep

        # the analytic adjoint's arrays and launches, made after the parameter rows they read; it steps
        # the one-lane stepper's Data (without it, forward-only calls make that Data)
        self._fwd.data
        self._adjoint = AnalyticStep(self.scene, self.layout, self._fwd)
        if self.jacobian == "analytic":
          self._linearizer = AnalyticJacobian(self._adjoint, ctrl_jacobian=self.fd.ctrl_jacobian)
    self._built = True

  @property
  def adjoint(self):
    """The analytic step (`adjoint.AnalyticStep`) where the tape gradients or the Jacobians are
    analytic, else None (made on first use with `lazy=True`)."""
    self.build()
    return self._adjoint

  @property
  def params(self) -> list[Param]:
    return self.layout.params

  @property
  def forward_stepper(self) -> FiniteDifferenceStep:
    """The one-lane stepper of forward-only calls, for custom per-step loops (a closed-loop rollout
    that computes each step's control from the state, as iLQR's line search does): call `begin()`,
    then `step(traj, ctrl, warm, k)` for each step and `sense(traj, ctrl, warm, nstep)`."""
    return self._fwd

  def __call__(self, ctrl: wp.array, *, qpos0=None, qvel0=None, act0=None, linearize: bool = False,
               tangent0=None) -> Trajectory:
    return self.run(ctrl, qpos0=qpos0, qvel0=qvel0, act0=act0, buffers=self.buffers, linearize=linearize,
                    tangent0=tangent0)

  def update_constants(self) -> None:
    """Writes the parameters and recomputes derived constants (`set_const`) outside a graph.

    A captured graph replays the parameter writes but not `set_const` (it allocates); call this
    after changing an inertial parameter (`body_mass`, `body_inertia`, `dof_armature`, ...) and
    before replaying.
    """
    fd = self.fd
    self.layout.apply(fd.nlane, fd.param_lane0, fd.central, fd.eps["param"])

  def reserve_linearization(self) -> None:
    """Allocates the step Jacobians and the perturbation lanes now, outside any graph capture. A
    Rollout whose tape gradients are analytic makes them on its first `linearize=True` call;
    call this first when that call will be captured (iLQR, Gauss-Newton). A lazy Rollout makes
    its lanes at `build`."""
    if self.fd.differentiable and not self.fd.ndir:
      self.buffers.jacobian_buffers()
      # the lanes' parameter rows all the same (a few floats per lane): a forward-mode Rollout of the
      # same parameters made later (Gauss-Newton's second opinion) then finds them and leaves the
      # arrays this Rollout's graphs read in place
      self.layout.reserve(self.fd.nlane)
      self._reserved = True
      if self._built:
        self._lanes()
        if self._analytic:  # its launches (and the Jacobians' tiled replay) read the rows just reallocated
          (self._linearizer or self._adjoint).rebuild()

  def _lanes(self) -> None:
    """The lane worlds of linearized calls, once reserved (the analytic step's Jacobians need none)."""
    if self._reserved and self.jacobian != "analytic":
      self.fd.data

  def jacobians(self) -> tuple[wp.array, wp.array]:
    """`(J, S)` of the last differentiable call: `(nworld, nstep, nx, nz)`, `(nworld, nstep + 1, ns, nz)`."""
    if self.fd.ndir:
      raise RuntimeError("a Rollout built with directions= forms tangents, not step Jacobians; read tangents()")
    if self.buffers.jac is None:
      raise RuntimeError("no step Jacobians yet: this Rollout takes tape gradients from the analytic adjoint; "
                         "call it with linearize=True first")
    return self.buffers.jac, self.buffers.sjac

  @property
  def nsweep(self) -> int:
    """Reverse passes of the analytic step's replay that a linearized call runs per step
    (`adjoint.AnalyticJacobian.nsweep`); 0 with the lanes' Jacobians."""
    if self.jacobian != "analytic":
      return 0
    from .adjoint.jacobian import sweep_count

    return sweep_count(self.scene.mjm)

  @property
  def nlane(self) -> int:
    """MJWarp worlds per world that a linearized call steps: 1 with the analytic step's Jacobians."""
    return 1 if self.jacobian == "analytic" else self.fd.nlane

  @property
  def nominal_data(self):
    """The MJWarp `Data` whose first `nworld` worlds ran the last linearized call's nominal
    trajectories (the lanes' worlds, or the analytic step's own), e.g. to read constraint rows."""
    return self._fwd.data if self.jacobian == "analytic" else self.fd.data

  def switches(self) -> wp.array:
    """`(nworld, nstep + 1)` int: per world and step of the last differentiable call, the Jacobian
    columns (tangent directions in forward mode) whose every finite-difference lane crossed a
    constraint switch, a contact or limit row appearing, vanishing or changing regime inside the
    step (0 where the gradient is clean; see `FiniteDifferenceStep` and `check_switches`)."""
    return self._switches

  def kinks(self) -> wp.array:
    """`(nworld, nstep + 1)` int beside `switches()`: 1 + the actuation kink (an actuator's forcerange,
    a joint's or tendon's actuatorfrcrange, `lane_solver.kink_name`) that a counted column's lanes
    straddle, 0 where none."""
    return self._kinks

  def tangents(self) -> tuple[wp.array, wp.array]:
    """Forward mode (`directions=m`): the tangents of the last linearized call,
    `dX` `(nworld, nstep + 1, nx, m)` (state rows: qpos in the tangent space, qvel, act) and
    `dS` `(nworld, nstep + 1, nsensordata, m)`, column `c` the derivative along direction `c`."""
    if not self.fd.ndir:
      raise RuntimeError("tangents() needs a Rollout built with directions=m (forward mode)")
    return self.buffers.jac, self.buffers.sjac

  def run(self, ctrl, *, qpos0=None, qvel0=None, act0=None, buffers=None, linearize: bool = False,
          tangent0=None) -> Trajectory:
    """Runs the rollout; see the class docstring. `linearize=True` forms the Jacobians (read them
    with `jacobians()`) without a tape, e.g. for iLQR or Gauss-Newton; in forward mode the tangents
    from `tangent0` (read them with `tangents()`)."""
    b = buffers or _Buffers(self.scene, self.nstep, self.fd, self._analytic)
    self.ncall += 1
    tape = wp._src.context.runtime.tape
    if tape is not None and self.fd.ndir:
      raise RuntimeError("a Rollout built with directions= (forward mode) has no backward pass for a tape; "
                         "build one without directions for tape gradients")
    if tape is not None and ctrl.requires_grad and not self.fd.ctrl_jacobian:
      raise ValueError("ctrl requires grad on a tape, but this Rollout was built with ctrl_jacobian=False; "
                       "build it with ctrl_jacobian=True, or pass ctrl without requires_grad")
    call = self._prepare(ctrl, qpos0, qvel0, act0, b, differentiate=tape is not None or linearize, linearize=linearize,
                         tangent0=tangent0)
    if call.differentiate:
      self._switches, self._kinks = b.switches, b.kinks
    traj = call.traj
    # MJWarp kernels have no adjoints: keep every launch below off the tape
    wp._src.context.runtime.tape = None
    try:
      self._prologue(call)
      for k in range(self.nstep):
        self._step(call, k)
      self._epilogue(call)
    finally:
      wp._src.context.runtime.tape = tape

    if tape is not None:
      inputs = [a for a in (qpos0, qvel0, act0) if isinstance(a, wp.array) and a.requires_grad]
      arrays = [b.qpos, b.qvel, b.act, b.sensordata] + ([ctrl] if ctrl.requires_grad else []) + inputs
      arrays += [p.value for p in self.layout.params]
      q0, v0, a0 = call.state0
      tape.record_func(lambda: self._backward(traj, b, q0, v0, a0, call.analytic), arrays)
    if self.check:
      check_finite(traj)
      if call.differentiate:
        check_switches(self)
    return traj

  def stages(self, ctrl, *, qpos0=None, qvel0=None, act0=None, linearize: bool = False, tangent0=None,
             after_step: Callable[[int, wp.array], None] | None = None) -> tuple[list, Trajectory]:
    """The rollout as graph-capture stages, for loops that replay it (no tape).

    Returns `(stages, traj)`: `stages` is `[(fn, repeats)]` — the start, one step repeated `nstep`
    times (a device-side counter advances the step index) and the final sensors — to capture with
    `diffsim.graph.capture` and replay in order; `traj` is the `Trajectory` the replays write. The
    arrays passed are the ones every replay reads. Capturing one step instead of `nstep` makes the
    capture cost independent of the horizon (on the CPU, capturing an MJWarp step costs tens of ms).

    `after_step(k0, count)` launches kernels that run after each step and after the final sensors
    (e.g. a tangent-linear sweep over the step Jacobians); they read the step just formed as
    `k0 + count[0]` (`count`: `(1,)` int device array).
    """
    call = self._prepare(ctrl, qpos0, qvel0, act0, self.buffers, differentiate=linearize, tangent0=tangent0,
                         linearize=linearize)
    if linearize:
      self._switches, self._kinks = self.buffers.switches, self.buffers.kinks
    count = call.stepper.count

    def step():
      self._step(call, 0)
      if after_step is not None:
        after_step(0, count)
      call.stepper.advance()

    def last():
      count.zero_()  # back to absolute step indices
      self._epilogue(call)
      if after_step is not None:
        after_step(self.nstep, count)

    return [(lambda: self._prologue(call), 1), (step, self.nstep), (last, 1)], call.traj

  def _prepare(self, ctrl, qpos0, qvel0, act0, b: _Buffers, *, differentiate: bool, tangent0=None,
               linearize: bool = False) -> _Call:
    """Checks the inputs of a call (host only) and picks its stepper."""
    scene = self.scene
    if check_ctrl(scene, ctrl) != self.nstep:
      raise ValueError(f"ctrl has {ctrl.shape[1]} steps but this Rollout was built for nstep={self.nstep}")
    n = scene.nworld
    state0 = (as_state(qpos0, "qpos0", n, scene.nq, scene, b.qpos0),
              as_state(qvel0, "qvel0", n, scene.nv, scene, b.qvel0),
              as_state(act0, "act0", n, scene.na, scene, b.act0))
    # analytic: the analytic step runs the call (its adjoint on a tape; its Jacobians when linearized)
    analytic = differentiate and (self.jacobian if linearize else self.gradient) == "analytic"
    if differentiate and not self.fd.ndir and (linearize or not analytic):
      b.jacobian_buffers()
    if differentiate and not analytic and not self.fd.ndir:
      self.fd.data  # the lane worlds, allocated now if this is their first use
    if differentiate and not self.fd.differentiable:
      raise RuntimeError("this Rollout was built with differentiable=False but is recorded on a tape or asked "
                         "to linearize; build it with differentiable=True")
    if tangent0 is not None and not self.fd.ndir:
      raise ValueError("tangent0 is for forward mode; build the Rollout with directions=m")
    if self.fd.ndir:
      shape = (scene.nx, self.fd.ndir)
      if tangent0 is None:
        tangent0 = b.tangent0
      elif not isinstance(tangent0, wp.array) or tangent0.dtype != wp.float32 or tangent0.device != scene.device:
        raise TypeError(f"tangent0 must be a float32 wp.array on {scene.device} of shape (nworld, {shape[0]}, "
                        f"{shape[1]}) or (1, ...)")
      elif tangent0.ndim != 3 or tangent0.shape[1:] != shape or tangent0.shape[0] not in (1, n):
        raise ValueError(f"tangent0 must have shape (nworld={n}, nx={shape[0]}, directions={shape[1]}) or "
                         f"(1, {shape[0]}, {shape[1]}), got {tangent0.shape}")
    self.build()  # a lazy Rollout's first call (outside a capture: `build`)
    if not differentiate:
      self._fwd.data  # a lazy Rollout's first forward-only call: its one-lane Data, allocated now
    stepper = (self._linearizer if linearize else self._adjoint) if analytic else self.fd if differentiate else \
      self._fwd
    return _Call(b, ctrl, state0, tangent0, differentiate, stepper,
                 Trajectory(b.qpos, b.qvel, b.act, b.sensordata, ctrl, scene.dt), analytic)

  def _prologue(self, call: _Call) -> None:
    b, fd, stepper = call.b, self.fd, call.stepper
    differentiate = call.differentiate
    lane0 = fd.param_lane0 if differentiate and not call.analytic else -1
    self.layout.apply(stepper.nlane, lane0, fd.central, fd.eps["param"])
    stepper.begin()
    if differentiate and fd.ndir and not call.analytic:
      wp.launch(_seed_tangents, dim=(self.scene.nworld, self.scene.nx, fd.ndir), device=self.scene.device,
                inputs=[call.tangent0], outputs=[b.jac])
    elif differentiate:
      # the trajectory belongs to this call: drop adjoints left from an earlier backward pass
      for a in (b.qpos, b.qvel, b.act, b.sensordata):
        a.grad.zero_()
    if differentiate:
      b.switches.zero_()
      b.kinks.zero_()
    wp.launch(init_state, dim=self.scene.nworld, device=self.scene.device, inputs=list(call.state0),
              outputs=[b.qpos, b.qvel, b.act, b.warm])

  def _step(self, call: _Call, k: int) -> None:
    b = call.b
    if call.analytic:
      call.stepper.step(call.traj, call.ctrl, b.warm, k, qacc=b.qacc, jac=b.jac, sjac=b.sjac)
      return
    call.stepper.step(call.traj, call.ctrl, b.warm, k, h_param=self.layout.h, jac=b.jac, sjac=b.sjac,
                      switches=b.switches, kinks=b.kinks)

  def _epilogue(self, call: _Call) -> None:
    b = call.b
    extra = dict(qacc=b.qacc) if call.analytic else {}  # the final state's acceleration (its sensors)
    call.stepper.sense(call.traj, call.ctrl, b.warm, self.nstep, h_param=self.layout.h, jac=b.jac,
                       sjac=b.sjac, switches=b.switches, kinks=b.kinks, **extra)

  def _backward(self, traj: Trajectory, b: _Buffers, qpos0, qvel0, act0, analytic: bool = False) -> None:
    scene, fd = self.scene, self.fd
    ctrl_grad = traj.ctrl.grad if traj.ctrl.grad is not None else b.ctrl_grad
    b.theta_grad.zero_()
    if analytic:
      # state adjoints into b.lam, parameter adjoints straight into each Param's value.grad
      self.adjoint.backward(traj, b.qacc, b.lam, ctrl_grad, self.nstep)
    else:
      for k in range(self.nstep, -1, -1):
        wp.launch(_adjoint_step, dim=(scene.nworld, fd.nz), device=scene.device,
                  inputs=[scene.nv, scene.na, scene.nu, scene.jnt_type, scene.jnt_qposadr, scene.jnt_dofadr,
                          scene.dof_jntid, k, int(k < self.nstep), b.jac, b.sjac, b.qpos, b.qpos.grad,
                          b.qvel.grad, b.act.grad, b.sensordata.grad],
                  outputs=[b.lam, ctrl_grad, b.theta_grad])
    n = scene.nworld
    grads = [a.grad if a.grad is not None else sink for a, sink in zip((qpos0, qvel0, act0), b.sinks)]
    wp.launch(_initial_grad, dim=n, device=scene.device,
              inputs=[scene.mjm.njnt, scene.jnt_type, scene.jnt_qposadr, scene.jnt_dofadr, b.qpos, b.lam],
              outputs=grads)
    if analytic:
      return
    for p, off in zip(self.layout.params, self.layout.offsets):
      wp.launch(_scatter_add, dim=(n, p.dim), device=scene.device, inputs=[b.theta_grad, int(off)],
                outputs=[p.value.grad])


def _choose_gradient(scene, layout: ParamLayout, gradient: str, differentiable: bool, directions: int,
                     what: str = "gradient"):
  """`(choice, reason)`: which backward pass a Rollout's tape gradients use (or, `what="jacobian"`,
  which step its linearized calls form), and why."""
  if gradient == "analytic" and directions:
    raise ValueError(f"forward mode (directions=) propagates tangents through the finite-difference lanes; "
                     f"use {what}='finite_difference' or 'auto' with directions")
  if gradient == "finite_difference" or not differentiable or directions:
    why = "asked for" if gradient == "finite_difference" else "forward mode" if directions else "not differentiable"
    return "finite_difference", why
  from .adjoint import analytic_coverage

  uncovered = analytic_coverage(scene.mjm, [p.field for p in layout.params])
  if uncovered is None:
    return "analytic", "every feature of the model is covered"
  if gradient == "analytic":
    raise ValueError(f"{what}='analytic': the analytic adjoint does not cover {uncovered}; "
                     f"use {what}='finite_difference' or 'auto'")
  reason = f"the analytic adjoint does not cover {uncovered}"
  if what == "gradient":
    _log.info("diffsim: finite-difference gradients: %s", reason)
  return "finite_difference", reason


def rollout(scene, ctrl: wp.array, *, qpos0=None, qvel0=None, act0=None, params: Sequence[Param] | None = None,
            central: bool = True, eps: float | dict | None = None, check: bool = True,
            gradient: str = "auto") -> Trajectory:
  """Steps every world of `scene` through `ctrl`; differentiable inside a `wp.Tape`.

  Args:
    scene: the `Scene`.
    ctrl: `wp.array3d[float]` `(nworld, nstep, nu)` controls on the scene's device.
    qpos0: `(nworld, nq)` or `(nq,)` initial positions (`wp.array` with `requires_grad` for
      gradients, or array-like); default: the model's `qpos0`.
    qvel0: `(nworld, nv)` or `(nv,)` initial velocities; default 0.
    act0: `(nworld, na)` or `(na,)` initial activations; default 0.
    params: `Param`s applied to every world (per-world values) and differentiated.
    central, eps: finite-difference scheme of the step Jacobians (see `FiniteDifferenceStep`).
    gradient: `"auto"`, `"analytic"` or `"finite_difference"` (see `Rollout`).
    check: validate inputs for NaN/Inf before, and the state after (raises `DivergenceError`);
      on a tape also the gradient's self-check (`check_switches`: a `GradientWarning` where a step's
      Jacobian crossed a constraint switch on every lane).

  Returns:
    A new `Trajectory`; after `tape.backward(loss)`, `ctrl.grad`, `qpos0.grad`, `qvel0.grad` and
    each `param.value.grad` hold d(loss)/d(that).
  """
  nstep = check_ctrl(scene, ctrl)
  params = list(params or [])
  differentiate = wp._src.context.runtime.tape is not None
  steps = tuple(sorted(resolve_eps(eps, scene).items()))
  key = (nstep, tuple(id(p) for p in params), differentiate, bool(central), steps, gradient)
  # a Rollout holds its Params, so their ids stay unique while cached
  cache = scene.memo.setdefault("rollouts", {})
  ro = cache.get(key)
  if ro is None:
    ro = Rollout(scene, nstep, params=params, differentiable=differentiate, central=central, eps=eps,
                 gradient=gradient)
    cache[key] = ro
  if check:
    # validate before any rollout kernel runs
    for name, x, width in (("qpos0", qpos0, scene.nq), ("qvel0", qvel0, scene.nv), ("act0", act0, scene.na)):
      if x is not None:
        as_state(x, name, scene.nworld, width, scene, None)
    check_finite_inputs(scene, {"ctrl": ctrl, **{n: a for n, a in (("qpos0", qpos0), ("qvel0", qvel0),
                                                                      ("act0", act0)) if isinstance(a, wp.array)}})
    for p in ro.params:
      check_finite_inputs(scene, {f"param {p.name!r}": p.value.reshape((scene.nworld, 1, p.dim))})
  traj = ro.run(ctrl, qpos0=qpos0, qvel0=qvel0, act0=act0)
  if check:
    check_finite(traj)
    if differentiate:
      check_switches(ro)
  return traj
