"""The identification problem on the device: worlds, rollouts, residuals and their linearization.

`Problem` turns recordings into MJWarp worlds (`worlds.Worlds`, tiled over the starts), allocates
every buffer once, and gives the solvers what they need:

  - `linearize(x)`: cost and Gauss-Newton normal equations at the unknowns `x` from one linearized
    rollout. The residual Jacobian `J` comes from
      - `"forward"`: tangent-linear propagation of the per-step Jacobians of a linearized rollout
        (`1 + nx + nlayout` lanes per world): `dx_{k+1}/dtheta = A_k dx_k/dtheta + P_k`,
        `ds_k/dtheta = C_k dx_k/dtheta + Q_k`, one kernel per step inside the rollout's step graph;
      - `"directional"`: forward mode (`Rollout(directions=ncol)`): a lane per column (a
        parameter, or an unknown initial state coordinate) steps the state moved along that
        column's tangent: `1 + ncol` lanes. Fewer lanes when the parameters are few against the
        state, but less precise: a lane moves the state by the parameter's step times the tangent,
        so the perturbation grows with the sensitivity and crosses the kinks of constraint forces
        (`benchmarks/bench_sysid.py` compares both; `tests/test_sysid.py` checks both against
        float64 MuJoCo);
      - `"tape"`: reverse mode, one backward sweep per residual block (sample x signal, all worlds
        at once), growing with the square of the recording's length: for checks.
    The nominal lane also gives the cost at the trial point, so LM needs no extra rollout to accept
    or reject a step.
  - `gradient()`: the cost's gradient by one `tape.backward()` sweep (Adam).

Both are captured as graphs on first use and replayed after (`Rollout.stages`: the step is one graph
replayed `nstep` times, so capturing costs one step whatever the recording's length).
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

from ..graph import Replay
from ..joints import tangent_grad_np
from ..params import Param
from ..rollout import Rollout, Trajectory
from ..scene import Scene, SolverSettings, copy_mjmodel, load_mjmodel
from . import residuals as kernels
from .normal import NormalEquations
from .parameters import param_columns
from .worlds import Unknowns, Worlds, column_weights, segments


def autocorrelation(num: np.ndarray, den: np.ndarray) -> np.ndarray:
  """Lag-1 autocorrelation `(nstart,)` from its summed products `num` and squares `den` (0 where undefined)."""
  with np.errstate(invalid="ignore", over="ignore"):
    return np.where(np.isfinite(num) & (den > 0), num / np.where(den > 0, den, 1.0), 0.0)


class Buffers:
  """The problem's device arrays (float32 unless said), allocated once; `w` runs over all `nworld`
  worlds (the starts' worlds one after the other).

  Attributes:
    ctrl: `(nworld, nstep, nu)`; qpos0 `(nworld, nq)`, qvel0 `(nworld, nv)` (written for each
      linearization: the initial states solved for), act0 `(nworld, na)`.
    sample_step: `(nworld, nsample)` int, simulation step of each sample slot (-1: padding);
      step_sample `(nworld, nstep + 1)` int, its inverse (-1: no sample).
    measured: `{"qpos": (nworld, nsample, nq), "qvel": ..., "sensordata": ...}`.
    weight: `(nworld, nsample, nsignal)`.
    residual: `(nworld, nsample, nsignal)` weighted residuals of the last rollout.
    residual_jac: `(nworld, nsample, nsignal, ncol)` their Jacobian (columns: the layout's
      parameter coordinates, then the world's nuisance block).
    tangent0: `(nworld, nx, ncol)` initial state tangents: a nuisance column moves its world's
      initial state; tangents: two more (in, out) for the tangent-linear sweep.
    world_start: `(nworld,)` int, the start of each world.
    param_column: `(nlayout,)` int, identified coordinate of each layout coordinate.
    theta, theta_grad: `(nstart, nparam)` identified values, and the cost's gradient (Adam).
    cost: `(nstart,)` the cost of each start (Adam's tape).
    changes: `(nworld,)` int, constraint-set changes along the nominal trajectory of the last
      linearized rollout; constrained: `(nworld,)` int, its steps with constraint rows;
      last_signature: `(nworld,)` int, the previous step's (see `residuals.constraint_changes`).
  """

  def __init__(self, scene: Scene, worlds: Worlds, unknowns: Unknowns, param_column: np.ndarray, nstart: int,
               ncol: int, nlayout: int):
    dev, nworld, nv = scene.device, scene.nworld, scene.nv
    tile = lambda a: np.concatenate([a] * nstart, axis=0)
    f32 = lambda a, **kw: wp.array(np.ascontiguousarray(tile(a)).astype(np.float32), dtype=float, device=dev, **kw)
    self.ctrl = f32(worlds.ctrl)
    self.act0 = f32(worlds.act0)
    self.qpos0 = f32(worlds.qpos0, requires_grad=True)
    self.qvel0 = f32(worlds.qvel0, requires_grad=True)
    sample_step = tile(worlds.sample_step)
    self.sample_step = wp.array(sample_step, dtype=int, device=dev)
    step_sample = np.full((nworld, worlds.nstep + 1), -1, np.int32)
    for w, row in enumerate(sample_step):
      for j, k in enumerate(row):
        if k >= 0:
          step_sample[w, k] = j
    self.step_sample = wp.array(step_sample, dtype=int, device=dev)
    self.measured = {k: f32(v) for k, v in worlds.measured.items()}
    self.weight = f32(worlds.weight)
    shape = (nworld, worlds.nsample, worlds.nsignal)
    self.residual = wp.zeros(shape, dtype=float, device=dev, requires_grad=True)
    self.residual_jac = wp.zeros((*shape, ncol), dtype=float, device=dev)
    tangent0 = np.zeros((nworld, scene.nx, ncol), np.float32)
    nq_block = unknowns.nblock_qpos
    for w in range(nworld):
      if worlds.fit_qpos[w % worlds.nseg]:
        tangent0[w, :nv, nlayout:nlayout + nv] = np.eye(nv)
      if worlds.fit_qvel[w % worlds.nseg]:
        tangent0[w, nv:2 * nv, nlayout + nq_block:nlayout + nq_block + nv] = np.eye(nv)
    self.tangent0 = wp.array(tangent0, dtype=float, device=dev)
    self.tangents = [wp.zeros((nworld, scene.nx, ncol), dtype=float, device=dev) for _ in range(2)]  # in, out
    self.world_start = wp.array(np.repeat(np.arange(nstart, dtype=np.int32), worlds.nseg), dtype=int, device=dev)
    self.param_column = wp.array(param_column, dtype=int, device=dev)
    self.cost = wp.zeros(nstart, dtype=float, device=dev, requires_grad=True)
    self.cost_seed = wp.ones(nstart, dtype=float, device=dev)  # d(total)/d(cost of each start)
    self.theta = wp.zeros((nstart, unknowns.nparam), dtype=float, device=dev)
    self.theta_grad = wp.zeros((nstart, unknowns.nparam), dtype=float, device=dev)
    self.changes = wp.zeros(nworld, dtype=int, device=dev)
    self.constrained = wp.zeros(nworld, dtype=int, device=dev)
    self.last_signature = wp.zeros(nworld, dtype=int, device=dev)


class Problem:
  """Worlds, buffers and kernels of one identification problem (allocated once).

  Args:
    model: the model (MJCF path or XML, `MjSpec` or `MjModel`; copied).
    recs: validated recordings (`worlds.as_recordings`).
    params: the rollout's `Param`s (unbounded: the solvers enforce the bounds per identified coordinate).
    weights, normalize: residual weights (`worlds.column_weights`).
    shooting: samples per segment (`None`: one per recording).
    nstart: initial guesses side by side.
    device, solver_settings: Warp device and MJWarp constraint solver settings of the `Scene`.
    central, eps: finite differences of the step Jacobians (`Rollout`).
    fit_qvel0, fit_qpos0: which initial states are unknowns (see `identify`).
    capture: replay the linearized rollout and the tape as captured graphs.
    column_weight: the residual weight of every column (`worlds.column_weights`), given instead of
      `weights`/`normalize`: a shard of a larger problem normalizes over all its recordings.
    step_jacobian: how the rollout forms its step Jacobians (`Rollout`'s `jacobian`): `"auto"`, the
      analytic step's where it covers the model, or `"finite_difference"`, the lanes.

  Attributes:
    mjm, scene, rollout, layout: the host model, the batched scene, the linearized rollout and its
      parameters' layout (`nlayout` coordinates: one per dof of a dof field).
    worlds: host arrays of one start (`Worlds`); unknowns: the unknowns of a start (`Unknowns`).
    nstart, nworld: starts, and worlds in all (`nstart * nseg`).
    nparam, nunknown: identified parameter coordinates, and unknowns per start.
    ncol: columns of a world's residual Jacobian as the rollouts form it (`nlayout + nblock`).
    nresidual: weighted residuals per start.
    buffers: the device arrays (`Buffers`).
    nrollout: rollouts run so far; last_x: `(nstart, nunknown)` the unknowns last linearized at.
    trajectory: the `Trajectory` the last rollout wrote.
    autocorrelation: `(num, den)`, each `(nstart,)`: the sums whose ratio is `NormalEquations.rho`
      at the last linearization (shards add theirs before dividing).
  """

  def __init__(self, model, recs, params: list[Param], *, weights, normalize: bool | str, shooting: int | None,
               nstart: int, device, solver_settings: SolverSettings | None, central: bool, eps,
               fit_qvel0: bool | None = None, fit_qpos0: bool = False, capture: bool = True,
               column_weight: dict[str, np.ndarray] | None = None, step_jacobian: str = "auto"):
    mjm = copy_mjmodel(model) if isinstance(model, mujoco.MjModel) else load_mjmodel(model)
    self.mjm = mjm
    colw = column_weights(mjm, recs, weights, normalize) if column_weight is None else column_weight
    self.worlds = Worlds(mjm, recs, segments(recs, shooting), colw, fit_qvel0=fit_qvel0, fit_qpos0=fit_qpos0)
    self.nstart = int(nstart)
    self.nworld = self.nstart * self.worlds.nseg
    self.nresidual, self.nseries = self.worlds.nresidual, self.worlds.nseries
    self.scene = Scene(mjm, nworld=self.nworld, device=device, solver=solver_settings)
    self.params = params
    # controls are data here: no Jacobian columns (and lanes) for them; its MJWarp Data and analytic
    # step made on first use (`_main`): LM may linearize with the forward-mode rollout only
    self.rollout = Rollout(self.scene, self.worlds.nstep, params=params, differentiable=True, central=central,
                           ctrl_jacobian=False, eps=eps, jacobian=step_jacobian, lazy=True)
    self.rollout.reserve_linearization()  # its parameter rows: a forward-mode rollout's graphs read them too
    self.layout = self.rollout.layout
    # identified coordinates: the layout's, except that the dofs of one joint share one (see
    # parameters.joint_groups); the rollout perturbs each dof in its own lane and `linearize` sums
    # their Jacobian columns
    self.param_column = param_columns(params, mjm)
    self.unknowns = Unknowns(mjm, self.worlds, int(self.param_column.max(initial=-1)) + 1)
    self.nparam, self.nunknown = self.unknowns.nparam, self.unknowns.nunknown
    self.ncol = self.layout.nparam + self.unknowns.nblock
    self.buffers = Buffers(self.scene, self.worlds, self.unknowns, self.param_column, self.nstart, self.ncol,
                           self.layout.nparam)
    self.nrollout = 0
    self.last_x = None
    self.trajectory: Trajectory | None = None
    self.autocorrelation = None
    self._capture = capture
    self._linearized = None  # the main rollout's replay (`_main`)
    self._directional = {}  # forward-mode rollouts and their replays by central differences
    self._gradient = None  # Adam's tape gradient, captured on first use

  # -- writing the unknowns -------------------------------------------------------------------------

  def set_theta(self, theta: np.ndarray) -> None:
    """Writes `(nstart, nparam)` identified values into the worlds of each start."""
    self.buffers.theta.assign(np.asarray(theta, dtype=np.float32))
    self._scatter()

  def set_x(self, x: np.ndarray) -> None:
    """Writes the unknowns `(nstart, nunknown)`: parameters and free initial states."""
    x = np.asarray(x, dtype=np.float64)
    self.set_theta(x[:, :self.nparam])
    if self.unknowns.nfree:
      states = [self.unknowns.initial_state(xs) for xs in x]
      self.buffers.qpos0.assign(np.concatenate([q for q, _ in states]).astype(np.float32))
      self.buffers.qvel0.assign(np.concatenate([v for _, v in states]).astype(np.float32))

  def _scatter(self) -> None:
    b = self.buffers
    for p, off in zip(self.layout.params, self.layout.offsets):
      wp.launch(kernels.scatter_theta, dim=(self.nworld, p.dim), device=self.scene.device,
                inputs=[b.theta, b.param_column, int(off), b.world_start], outputs=[p.value])

  # -- rollouts ---------------------------------------------------------------------------------------

  def _main(self) -> Replay:
    """The main rollout's linearized replay, made (with the rollout's buffers) on first use."""
    if self._linearized is None:
      self.rollout.build()  # Gauss-Newton linearizes it inside captured graphs
      self._linearized = Replay(self.scene.device, self._stages(), self._capture)
    return self._linearized

  def _stages(self) -> list:
    """The linearized rollout, residuals and their Jacobian by the tangent-linear sweep, as stages to
    capture (`Rollout.stages`)."""
    b = self.buffers
    stages, traj = self.rollout.stages(b.ctrl, qpos0=b.qpos0, qvel0=b.qvel0, act0=b.act0, linearize=True,
                                       after_step=self._propagate_step)

    def start():
      wp.copy(b.tangents[0], b.tangent0)
      b.residual_jac.zero_()
      b.changes.zero_()
      b.constrained.zero_()

    def finish():
      self.trajectory = traj
      self._residuals(traj)

    return [(start, 1)] + stages + [(finish, 1)]

  def _propagate_step(self, k0: int, count: wp.array) -> None:
    """One step of the tangent-linear sweep (d(residual)/d(unknowns) from the step Jacobians), run
    right after the rollout forms step `k0 + count[0]`'s Jacobians."""
    s, b = self.scene, self.buffers
    step_jac, sensor_jac = self.rollout.jacobians()
    wp.launch(kernels.tangent_linear, dim=(self.nworld, self.ncol), device=s.device,
              inputs=[s.nv, s.nu, self.layout.nparam, k0, count, self.worlds.nstep, b.step_sample, step_jac,
                      sensor_jac, b.weight, b.tangents[0]],
              outputs=[b.tangents[1], b.residual_jac])
    wp.copy(b.tangents[0], b.tangents[1])
    self._count_changes(self.rollout, k0, count)

  def _count_changes(self, rollout: Rollout, k0: int, count: wp.array) -> None:
    d = rollout.nominal_data  # nominal worlds first (the lanes' or the analytic step's)
    wp.launch(kernels.constraint_changes, dim=self.nworld, device=self.scene.device,
              inputs=[k0, count, d.nefc, d.efc.type],
              outputs=[self.buffers.last_signature, self.buffers.changes, self.buffers.constrained])

  @property
  def forward_mode(self) -> Rollout:
    """jacobian="directional": a forward-mode rollout with a lane per column of the residual
    Jacobian (parameters, then the world's nuisance block), built on first use, with the
    differences of `rollout` (central or forward)."""
    return self._forward_mode(self.rollout.fd.central)[0]

  def _forward_mode(self, central: bool) -> tuple[Rollout, Replay]:
    """The forward-mode rollout with central or forward differences and its replay, built on first
    use ("directional-fd": forward differences whatever `rollout`'s, the convergence test's second
    opinion, see `lm`). It needs no more model rows per world than `rollout`
    (`1 + ncol <= 1 + nx + nlayout` lanes), so `rollout`'s graphs stay valid."""
    if central not in self._directional:
      fd = self.rollout.fd
      ro = Rollout(self.scene, self.worlds.nstep, params=self.params, central=central, eps=fd.eps,
                   ctrl_jacobian=False, directions=self.ncol, lazy=True)  # lazy: no forward-only Data
      self._directional[central] = ro, Replay(self.scene.device, self._directional_stages(ro), self._capture)
    return self._directional[central]

  def _directional_stages(self, ro: Rollout) -> list:
    """Forward-mode rollout, residuals and their Jacobian from the tangents, as stages to capture."""
    b = self.buffers
    stages, traj = ro.stages(b.ctrl, qpos0=b.qpos0, qvel0=b.qvel0, act0=b.act0, linearize=True,
                             tangent0=b.tangent0, after_step=lambda k0, count: self._count_changes(ro, k0, count))
    state_tangent, sensor_tangent = ro.tangents()

    def finish():
      self.trajectory = traj
      self._residuals(traj)
      wp.launch(kernels.residual_jacobian, dim=(self.nworld, self.worlds.nsample, self.ncol), device=self.scene.device,
                inputs=[self.scene.nv, b.sample_step, state_tangent, sensor_tangent, b.weight],
                outputs=[b.residual_jac])

    def start():
      b.changes.zero_()
      b.constrained.zero_()

    return [(start, 1)] + stages + [(finish, 1)]

  def _replay(self, ro: Rollout, replay: Replay) -> None:
    self.nrollout += 1
    if self.layout.eager_constants:
      ro.update_constants()  # graphs replay the parameter writes, not set_const (`ParamLayout.eager_constants`)
    replay()

  def _residuals(self, traj: Trajectory) -> None:
    s, b = self.scene, self.buffers
    wp.launch(kernels.residuals, dim=(self.nworld, self.worlds.nsample), device=s.device,
              inputs=[s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, s.dof_jntid, b.sample_step, traj.qpos, traj.qvel,
                      traj.sensordata, b.measured["qpos"], b.measured["qvel"], b.measured["sensordata"], b.weight],
              outputs=[b.residual])

  # -- linearization ----------------------------------------------------------------------------------

  def linearize(self, x: np.ndarray, *, jacobian: str = "forward") -> NormalEquations:
    """Cost and normal equations of each start at the unknowns `x` `(nstart, nunknown)`.

    One linearized rollout (`jacobian`: "forward", "directional", "directional-fd" (forward mode
    with forward differences whatever `central`), or "tape"). The nuisance blocks of different
    worlds do not interact, so `J^T J` is block-arrow shaped (`NormalEquations`).

    Also counts, per start, the steps at which a world's nominal constraint rows changed (a limit
    or contact row appearing or vanishing; not a row changing regime, a kink). There the step map
    jumps (a limit's force starts at a finite value, from its damping), and the trajectory's
    dependence on the parameters has a term from the jump moving in time, which step Jacobians,
    formed from lanes on one side of the switch, leave out (see `lm`).
    """
    self.set_x(x)
    self.last_x = np.array(x, dtype=np.float64, copy=True)
    if jacobian == "tape":
      res, res_jac = self.tape_jacobian()
      changes = constrained = np.zeros(self.nworld, np.int64)
    else:
      if jacobian in ("directional", "directional-fd"):
        self._replay(*self._forward_mode(self.rollout.fd.central and jacobian == "directional"))
      else:
        self._replay(self.rollout, self._main())
      res = self.buffers.residual.numpy().astype(np.float64)
      res_jac = self.buffers.residual_jac.numpy().astype(np.float64)
      changes = self.buffers.changes.numpy().astype(np.int64)
      constrained = self.buffers.constrained.numpy().astype(np.int64)
    return self._normal_equations(res, res_jac, changes, constrained)

  def _normal_equations(self, res: np.ndarray, res_jac: np.ndarray, changes: np.ndarray,
                        constrained: np.ndarray) -> NormalEquations:
    """`NormalEquations` from the residuals `(nworld, nsample, nsignal)`, their Jacobian (`(..., ncol)`),
    the constraint changes and the steps with constraint rows `(nworld,)`."""
    cost = self._costs(res)
    nparam, nblock, nstart, nseg = self.nparam, self.unknowns.nblock, self.nstart, self.worlds.nseg
    nlayout = self.layout.nparam
    # residual autocorrelation between consecutive samples of a world, pooled over its signals
    rt = res.reshape(nstart, nseg, self.worlds.nsample, self.worlds.nsignal)
    with np.errstate(invalid="ignore", over="ignore"):
      num = np.einsum("gwti,gwti->g", rt[:, :, 1:], rt[:, :, :-1])
      den = np.einsum("gwti,gwti->g", rt[:, :, :-1], rt[:, :, :-1])
    self.autocorrelation = num, den
    rho = autocorrelation(num, den)
    changes = changes.reshape(nstart, nseg).sum(axis=1)
    constrained = constrained.reshape(nstart, nseg).sum(axis=1)
    jac = res_jac.reshape(self.nworld, -1, self.ncol)
    if nparam < nlayout:  # chain rule: an identified coordinate moves every dof it stands for
      tie = np.zeros((nlayout, nparam))
      tie[np.arange(nlayout), self.param_column] = 1.0
      jac = np.concatenate([jac[..., :nlayout] @ tie, jac[..., nlayout:]], axis=-1)
    res = res.reshape(self.nworld, -1)
    bad = ~np.isfinite(np.repeat(cost, nseg))
    jac[bad] = 0.0
    res[bad] = 0.0
    hw = np.einsum("wri,wrj->wij", jac, jac)  # (nworld, ncol, ncol)
    gw = np.einsum("wri,wr->wi", jac, res)
    free = np.tile(self.unknowns.free, nstart)
    nfree = self.unknowns.nfree
    return NormalEquations(
      cost=cost,
      Htt=hw[:, :nparam, :nparam].reshape(nstart, nseg, nparam, nparam).sum(axis=1),
      Htn=hw[free, :nparam, nparam:].reshape(nstart, nfree, nparam, nblock),
      Hnn=hw[free, nparam:, nparam:].reshape(nstart, nfree, nblock, nblock),
      gt=gw[:, :nparam].reshape(nstart, nseg, nparam).sum(axis=1),
      gn=gw[free, nparam:].reshape(nstart, nfree, nblock),
      rho=rho, changes=changes, constrained=constrained)

  def _costs(self, res: np.ndarray) -> np.ndarray:
    r = res.reshape(self.nstart, -1)
    c = 0.5 * np.einsum("gi,gi->g", r, r)
    return np.where(np.isfinite(c), c, np.inf)

  def tape_jacobian(self) -> tuple[np.ndarray, np.ndarray]:
    """Residuals `(nworld, nsample, nsignal)` at the unknowns last written, and their Jacobian
    `(nworld, nsample, nsignal, ncol)` by reverse mode: one backward pass per residual block
    (sample, signal)."""
    self.nrollout += 1
    b, u, nv = self.buffers, self.unknowns, self.scene.nv
    with wp.Tape() as tape:
      self.trajectory = self.rollout(b.ctrl, qpos0=b.qpos0, qvel0=b.qvel0, act0=b.act0)
      self._residuals(self.trajectory)
    res = b.residual.numpy().astype(np.float64)
    jac = np.zeros((self.nworld, self.worlds.nsample, self.worlds.nsignal, self.ncol))
    weight = self.worlds.weight
    active = np.nonzero(weight.reshape(-1, self.worlds.nsignal).any(axis=0))[0]
    slots = np.nonzero(weight.any(axis=(0, 2)))[0]
    nlayout, nq_block = self.layout.nparam, u.nblock_qpos
    fit_qpos = np.tile(self.worlds.fit_qpos, self.nstart)[:, None]
    fit_qvel = np.tile(self.worlds.fit_qvel, self.nstart)[:, None]
    for j in slots:
      for i in active:
        tape.zero()
        b.residual.grad.zero_()
        wp.launch(kernels.seed_residual, dim=self.nworld, inputs=[int(j), int(i)], outputs=[b.residual.grad],
                  device=self.scene.device)
        tape.backward()
        for p, off in zip(self.layout.params, self.layout.offsets):
          jac[:, j, i, off:off + p.dim] = p.value.grad.numpy()
        if nq_block:
          jac[:, j, i, nlayout:nlayout + nv] = self._tangent_grad(b.qpos0.grad.numpy()) * fit_qpos
        if u.nblock > nq_block:
          jac[:, j, i, nlayout + nq_block:] = b.qvel0.grad.numpy() * fit_qvel
    tape.zero()
    return res, jac

  def _tangent_grad(self, grad_qpos: np.ndarray) -> np.ndarray:
    """d/d(tangent qpos0) `(nworld, nv)` from d/d(qpos0) `(nworld, nq)`."""
    qpos = self.buffers.qpos0.numpy().astype(np.float64)
    return np.stack([tangent_grad_np(self.mjm, q, g) for q, g in zip(qpos, grad_qpos)])

  # -- first order ----------------------------------------------------------------------------------

  def gradient(self) -> np.ndarray:
    """Cost of each start at `buffers.theta` and its gradient into `buffers.theta_grad` (tape, one
    backward pass).

    The rollout on the tape and its backward pass are captured once and replayed (launched from
    Python, an MJWarp step costs milliseconds on the CPU)."""
    self._scatter()
    if self.layout.eager_constants:
      self.rollout.update_constants()  # graphs replay the parameter writes, not set_const (`ParamLayout.eager_constants`)
    if self._gradient is None:
      self.rollout.build()
      self._gradient = Replay(self.scene.device, self._gradient_stage, self._capture)
    self.nrollout += 1
    self._gradient()
    c = self.buffers.cost.numpy().astype(np.float64)
    return np.where(np.isfinite(c), c, np.inf)

  def _gradient_stage(self) -> None:
    s, b = self.scene, self.buffers
    b.cost.zero_()
    with wp.Tape() as tape:
      self.trajectory = self.rollout(b.ctrl, qpos0=b.qpos0, qvel0=b.qvel0, act0=b.act0)
      self._residuals(self.trajectory)
      wp.launch(kernels.half_sum_squares, dim=(self.nworld, self.worlds.nsample, self.worlds.nsignal),
                device=s.device, inputs=[b.residual, b.world_start], outputs=[b.cost])
    tape.backward(grads={b.cost: b.cost_seed})
    b.theta_grad.zero_()
    for p, off in zip(self.layout.params, self.layout.offsets):
      wp.launch(kernels.gather_grad, dim=(self.nworld, p.dim), device=s.device,
                inputs=[p.value.grad, b.param_column, int(off), b.world_start], outputs=[b.theta_grad])
    tape.zero()

  # -- output -----------------------------------------------------------------------------------------

  def samples(self, start: int = 0) -> list[dict[str, np.ndarray]]:
    """Simulated signals of the last rollout at every recorded row, per recording (start `start`):
    `{kind: (nrow, columns)}`, NaN where a recording does not measure the kind."""
    recs = self.worlds.recs
    out = [{k: np.full_like(getattr(r, k), np.nan) for k in r.kinds} for r in recs]
    traj = self.trajectory
    qpos, qvel, sens = (a.numpy() for a in (traj.qpos, traj.qvel, traj.sensordata))
    for g, sg in enumerate(self.worlds.segs):
      w = start * self.worlds.nseg + g
      for j, row in enumerate(range(sg.row0, sg.row1 + 1)):
        if j == 0 and sg.row0 > 0:
          continue  # this row belongs to the previous segment
        k = self.worlds.sample_step[g, j]
        for kind, src in (("qpos", qpos), ("qvel", qvel), ("sensordata", sens)):
          if kind in out[sg.rec]:
            out[sg.rec][kind][row] = src[w, k]
    return out
