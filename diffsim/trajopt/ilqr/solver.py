"""iLQR's host loop: linearize, backward pass, closed-loop line search, acceptance, as captured graphs."""

from __future__ import annotations

import numpy as np
import warp as wp

from ...kernels import init_state
from ...rollout import Trajectory
from ..solver import Solver, copy_where, increment, sum_cost, take_better
from .backward import backward_pass, backward_scratch
from .cost import cost_channels, cost_gradient
from .forward import accept, feedback, pack_monitor


class ILQRSolver(Solver):
  """Iterative LQR with the rollout's step Jacobians; every world has its own regularization.

  An iteration linearizes the rollout of the nominal controls, takes the cost gradient from a tape
  and its Gauss-Newton curvature from the built-in terms, runs the Riccati recursion with
  box-constrained gains, then rolls out the closed-loop policy for each line-search step `alpha`
  and keeps, per world, the lowest cost if it beats the nominal (`alpha` indexed on the device).

  The option `loop_steps` chooses the graphs of an iteration. False: one graph (a GPU's default:
  launching a graph costs microseconds there, capturing one little). True (the CPU's default):
  the rollouts' step is captured once and replayed `horizon` times, between graphs of the rest, as
  capturing an MJWarp step on the CPU costs tens of ms and replaying a graph almost nothing
  (`benchmarks/bench_trajopt.py` measures both: `first_iter_one_graph_s`, `first_iter_looped_s` in
  `benchmarks/results/trajopt_<device>.json`).

  The option `jacobian` chooses the step Jacobians: None (default) as the problem's `jacobian`
  says (`"auto"` unless set: analytic where the model is covered, else the lanes); `"auto"`,
  `"analytic"` or `"finite_difference"` other than the problem's gives the solver a `Rollout` of
  its own (`problem.make_rollout`), made once with the solver.
  """

  method = "ilqr"
  defaults = {"alphas": (1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125), "mu_init": 1.0, "mu_min": 1e-4, "mu_max": 1e8,
              "mu_factor": 10.0, "loop_steps": None, "jacobian": None}
  default_maxiter = 100

  def __init__(self, problem, options, capacity, capture):
    super().__init__(problem, options, capacity, capture)
    scene, nstep, nworld = problem.scene, problem.horizon, problem.nworld
    jacobian = options["jacobian"]
    own = jacobian is not None and jacobian != problem.jacobian
    self.rollout = problem.make_rollout(jacobian) if own else problem.rollout
    self.rollout.reserve_linearization()  # its graphs linearize the rollout
    nu, nx = scene.nu, scene.nx
    self.nxa = nx + (nu if problem.cost.has_rate else 0)
    nxa = self.nxa

    def zeros(*shape, dtype=float):
      return wp.zeros(shape, dtype=dtype, device=scene.device)

    self.nominal = wp.zeros(nworld, dtype=float, device=scene.device, requires_grad=True)
    self.trial, self.candidate_cost, self.dv, self.mu = zeros(nworld), zeros(nworld), zeros(nworld), zeros(nworld)
    self.ftol = zeros(1)
    self.fail, self.status, self.improved = zeros(nworld, dtype=int), zeros(nworld, dtype=int), zeros(nworld, dtype=int)
    self.monitor = zeros(2, nworld)  # best cost and status, packed for the host check
    self.alpha_index = zeros(1, dtype=int)  # the line-search step of the candidate being rolled out
    self.alphas = wp.array(np.asarray(options["alphas"], np.float32), dtype=float, device=scene.device)
    self.gx, self.gu = zeros(nworld, nstep + 1, nx), zeros(nworld, nstep, nu)
    self.kff, self.kfb = zeros(nworld, nstep, nu), zeros(nworld, nstep, nu, nxa)
    self.channels = cost_channels(problem.cost)
    self.value, self.qterms, self.scratch = backward_scratch(nworld, nu, nxa, scene.device)
    # closed-loop rollouts: candidate and best-candidate trajectories, the Rollout's one-lane stepper
    self.warm = zeros(nworld, scene.nv)

    def trajectory():
      return Trajectory(zeros(nworld, nstep + 1, scene.nq), zeros(nworld, nstep + 1, scene.nv),
                        zeros(nworld, nstep + 1, scene.na), zeros(nworld, nstep + 1, scene.nsensordata),
                        zeros(nworld, nstep, nu), scene.dt)

    self.candidate, self.best_candidate = trajectory(), trajectory()  # best_candidate.ctrl: the next nominal
    self.nominal_trajectory = None  # the linearized rollout's buffers, set when the stages are made
    self.stepper = self.rollout.forward_stepper
    loop_steps = options["loop_steps"]
    self.loop_steps = not scene.device.is_cuda if loop_steps is None else bool(loop_steps)

  def start(self, ctrl0):
    super().start(ctrl0)
    self.mu.fill_(float(self.options["mu_init"]))
    self.status.zero_()
    self.kff.zero_()  # the box QPs warm-start from the last iteration's steps, but not across runs

  def read_best(self):
    monitor = self.monitor.numpy()  # best cost and status in one copy
    self._status = monitor[1]
    return monitor[0].astype(np.float64)

  def converged(self, nit, best, ftol):
    return self._status != 0

  def stages(self):
    problem = self.problem
    nstep, nalpha = problem.horizon, len(self.options["alphas"])
    if self.loop_steps:
      # the rollouts' step is one graph replayed `horizon` times (a device counter advances it), so
      # capturing an iteration costs a few steps whatever the horizon
      linearize, self.nominal_trajectory = self.rollout.stages(problem.ctrl, qpos0=problem.qpos0,
                                                               qvel0=problem.qvel0, act0=problem.act0,
                                                               linearize=True)
      candidate = [(self._candidate_start, 1), (self._looped_step, nstep), (self._candidate_end, 1)]
      return linearize + [(self._solve, 1)] + candidate * nalpha + [(self._accept, 1)]

    def iteration():
      self.nominal_trajectory = self.rollout(problem.ctrl, qpos0=problem.qpos0, qvel0=problem.qvel0,
                                             act0=problem.act0, linearize=True)
      self._solve()
      for _ in range(nalpha):
        self._candidate_start()
        for step in range(nstep):
          self._candidate_step(step)
        self._candidate_end()
      self._accept()

    return [(iteration, 1)]  # one graph

  def _solve(self) -> None:
    """Cost gradient along the linearized nominal trajectory, then the Riccati recursion."""
    problem, scene, nominal = self.problem, self.problem.scene, self.nominal_trajectory
    nworld, nstep = problem.nworld, problem.horizon
    jac, sjac = self.rollout.jacobians()
    # cost gradient along the nominal trajectory (any term, kernels included) from a tape
    problem.ctrl.grad.zero_()
    self.total.zero_()
    tape = wp.Tape()
    with tape:
      problem.cost.evaluate(nominal, self.nominal)
      self.launch(sum_cost, nworld, [self.nominal], [self.total])
    tape.backward(loss=self.total)
    self.launch(cost_gradient, (nworld, nstep + 1),
                [scene.nv, scene.na, scene.jnt_type, scene.jnt_qposadr, scene.jnt_dofadr, scene.dof_jntid,
                 nominal.qpos, nominal.qpos.grad, nominal.qvel.grad, nominal.act.grad, nominal.sensordata.grad,
                 problem.ctrl.grad, sjac], [self.gx, self.gu])
    tape.zero()
    self.record(self.nominal, problem.ctrl, nominal)  # row `iterations`: the cost of the nominal controls
    self.launch(backward_pass, nworld,
                [scene.nx, self.nxa, jac, sjac, problem.ctrl, problem.ctrl_lo, problem.ctrl_hi, self.gx, self.gu,
                 self.channels, self.mu, self.value, self.qterms, self.scratch],
                [self.kff, self.kfb, self.dv, self.fail])
    wp.copy(self.trial, self.nominal)
    self.alpha_index.zero_()

  # closed-loop rollout with step `alphas[alpha_index]`, kept where it beats the best so far

  def _candidate_start(self) -> None:
    problem, candidate = self.problem, self.candidate
    self.stepper.begin()
    self.launch(init_state, problem.nworld, [problem.qpos0, problem.qvel0, problem.act0],
                [candidate.qpos, candidate.qvel, candidate.act, self.warm])

  def _candidate_step(self, step: int) -> None:
    """Step `step` (plus the stepper's counter) of the closed-loop rollout."""
    problem, scene, candidate, nominal = self.problem, self.problem.scene, self.candidate, self.nominal_trajectory
    self.launch(feedback, problem.nworld,
                [scene.nv, scene.na, scene.jnt_type, scene.jnt_qposadr, scene.jnt_dofadr, scene.dof_jntid, step,
                 self.stepper.count, self.alphas, self.alpha_index, self.nxa, candidate.qpos, candidate.qvel,
                 candidate.act, nominal.qpos, nominal.qvel, nominal.act, problem.ctrl, self.kff, self.kfb, self.fail,
                 problem.ctrl_lo, problem.ctrl_hi], [candidate.ctrl])
    self.stepper.step(candidate, candidate.ctrl, self.warm, step)

  def _looped_step(self) -> None:
    self._candidate_step(0)
    self.stepper.advance()

  def _candidate_end(self) -> None:
    problem, candidate = self.problem, self.candidate
    self.stepper.count.zero_()  # back to absolute step indices
    self.stepper.sense(candidate, candidate.ctrl, self.warm, problem.horizon)
    problem.cost.evaluate(candidate, self.candidate_cost)
    self.launch(take_better, problem.nworld, [self.candidate_cost], [self.trial, self.better])
    for field in ("ctrl", "qpos", "qvel", "act", "sensordata"):
      dst = getattr(self.best_candidate, field)
      if dst.size:
        self.launch(copy_where, dst.shape, [self.better, getattr(candidate, field)], [dst])
    self.launch(increment, 1, [self.alpha_index])

  def _accept(self) -> None:
    problem, options = self.problem, self.options
    self.launch(accept, problem.nworld,
                [self.ftol, float(options["mu_min"]), float(options["mu_max"]), float(options["mu_factor"]),
                 self.nominal, self.trial, self.dv], [self.mu, self.status, self.improved])
    self.launch(copy_where, problem.ctrl.shape, [self.improved, self.best_candidate.ctrl], [problem.ctrl])
    self.launch(increment, 1, [self.iterations])
    self.record(self.trial, self.best_candidate.ctrl, self.best_candidate)  # row `iterations` + 1
    self.launch(pack_monitor, problem.nworld, [self.best, self.status], [self.monitor])

  def run(self, ctrl0, *, maxiter, ftol, progress, log_every, callback=None):
    self.ftol.fill_(ftol)  # on the device, so the captured graph reads the current value
    if self.rollout is not self.problem.rollout and self.rollout.layout.eager_constants:
      self.rollout.update_constants()  # the problem refreshes its own rollout only
    return super().run(ctrl0, maxiter=maxiter, ftol=ftol, progress=progress, log_every=log_every, callback=callback)

  def finish(self, nit, done, t0, maxiter, message=None, history=None):
    status = self.status.numpy()
    done = status == 1
    if message is None and (status != 0).all():
      stalled = int((status == 2).sum())
      message = (f"converged in all {done.size} worlds" if not stalled else
                 f"converged in {int(done.sum())} of {done.size} worlds; in {stalled} the line search found no "
                 f"decrease at the largest regularization (mu_max)")
    return super().finish(nit, done, t0, maxiter, message, history)
