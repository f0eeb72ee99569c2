"""Levenberg-Marquardt over every start at once (one linearized rollout per iteration), and its
convergence test at constraint switches.

Each iteration solves `(J^T J + damping diag(J^T J)) d = -J^T r` per start (`NormalEquations.solve`),
projects the step onto the bounds, and tries it with one linearized rollout, whose nominal lane
gives the cost at the trial point and whose Jacobian is the next linearization if the step is
accepted. Stopping tests look at the parameters only: a start stops when its step falls below
`xtol` (relative) or below `stdtol` of the parameters' std (`confidence.data_std`), when an
accepted step lowers the cost by less than `ftol`, or when three ever shorter steps in a row fail to
lower it. Each says that the linearized model has nothing left to give, which is a minimum only
where that model is right.

The Jacobian: `"auto"` (the default) takes `"forward"`, the step Jacobians propagated forward, from the
start where the rollout forms them analytically (`Rollout.jacobian == "analytic"`: no lanes, the
exact derivative of the step at the solver's solution), unless the model can make no constraint row
and the residual Jacobian has no more columns than the analytic step runs reverse passes
(`directional_first`: the directional one is cheaper there), and goes back to directional where
that is cheaper once the trajectories leave the constraints (`_return_directional`: an initial guess
far off swings the model into limits the truth stays clear of). Else it starts with the directional
one (forward mode: `1 + ncol` lanes per world, against `1 + nx + nlayout` for the lanes' step
Jacobians), the derivative of a smooth step map while the nominal trajectories meet no constraint
row, and turns to `"forward"` for good once they do, or once its steps converge linearly (its error,
first order in the parameter step, is that of a difference over the whole trajectory; see `_leave_directional`, `_refine_directional`). Issue 27:
on 64 smooth recordings of bench_sysid's arm, 6 lanes per recording instead of 21.

Where the nominal trajectories cross constraint switches (`Problem.linearize`: a limit or contact
engaging or releasing), the step map jumps (a limit's force starts at a finite value, from its
damping) and the two Jacobians are wrong in different ways: "forward" forms each step's Jacobian
on one side of a switch and misses the jump moving in time (on recordings that drive joints onto
their limits, LM stalls on a slope: `tests/test_sysid_limits.py`), "directional" with forward
differences moves the state along the tangent and catches it, as a coarse sample. So the
convergence test asks the other Jacobian (`second_opinion`) for its step at the stopping point:
  - within the tolerances too: converged, and that step (the Jacobians' disagreement) widens the std;
  - outside, and the cost falls along it: not a minimum. `jacobian="auto"` takes the step and goes
    on with its own Jacobian from there (which converges fast again once past the switches that
    stopped it, where the other converges linearly); an explicit Jacobian stops, not converged, at
    the lower cost;
  - outside, and the cost rises along it: its model is refuted. Converged where the start's own
    step was within the tolerances (half that step widens the std: the rise bounds how far the
    minimum lies along it); where the start's own last step, outside them, failed too, stalled on
    a slope: not converged (the message says what to try).
With `"auto"`, a significant step that fails right after accepted steps whose actual cost reduction
was off the predicted one by more than half asks the other Jacobian at once (if its step does not
lower the cost, LM goes on). Trajectories that cross no switch skip the test: the Jacobian is then
the derivative of a smooth map, and failing steps mean float32 resolution.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..mjmodel import can_make_constraint_rows
from .confidence import data_std
from .normal import NormalEquations
from .problem import Problem
from .result import SolverOutcome

# `"auto"`: a step above this fraction of the one before (twice, once small) is linear convergence
LINEAR_Q = 0.2
# `"auto"` on the analytic step: returns from "forward" to the directional Jacobian at most this often
MAX_RETURNS = 2
# `report(nit, fun, theta)`: the solver's progress (best cost, its parameters); True stops the solver
Report = Callable[[int, float, np.ndarray], bool]


def project(theta, step, lower, upper):
  """`theta + step`, stopping 90% of the way to a bound it would cross (stays strictly inside)."""
  new = theta + step
  lo_hit = new < lower
  hi_hit = new > upper
  new = np.where(lo_hit, theta + 0.9 * (lower - theta), new)
  new = np.where(hi_hit, theta + 0.9 * (upper - theta), new)
  return new


def second_opinion(jacobian: str, central: bool) -> str:
  """The Jacobian the convergence test asks where the trajectories cross constraint switches: forward
  mode with forward differences ("directional-fd"), whose one-sided lanes catch the jumps there; for
  that one itself, the step Jacobians propagated forward."""
  return "forward" if jacobian == "directional-fd" or (jacobian == "directional" and not central) else \
    "directional-fd"


def jacobian_name(jacobian: str, central: bool) -> str:
  """`identify`'s name of an internal Jacobian choice."""
  if jacobian == "directional-fd":
    return "directional (forward differences)" if central else "directional"
  return jacobian


def lm(prob: Problem, x0: np.ndarray, lower: np.ndarray, upper: np.ndarray, *, maxiter: int, ftol: float,
       xtol: float, jacobian: str, report: Report, stdtol: float = 0.1) -> SolverOutcome:
  """Levenberg-Marquardt from `x0` `(nstart, nunknown)` within `[lower, upper]` `(nunknown,)` (the
  parameters first, `prob.nparam`, then the free initial states); see the module docstring.

  Returns:
    A `SolverOutcome` whose `normal` are the normal equations at `x` (of Jacobian `jacobian`, the
    one used last) and `jacobian_std` `(nstart, nparam)` what the Jacobians leave open: the other
    Jacobian's step and the step the last linearization still proposes, divided by `1 - q` where the
    steps shrink by a factor `q` per iteration (linear convergence, with an inexact Jacobian).
  """
  return _LevenbergMarquardt(prob, x0, lower, upper, maxiter=maxiter, ftol=ftol, xtol=xtol, jacobian=jacobian,
                             report=report, stdtol=stdtol).run()


def directional_cheaper(prob: Problem) -> bool:
  """Whether a directional rollout costs less than a forward one on the analytic step's Jacobians:
  the residual Jacobian has no more columns than the analytic step runs reverse passes per step
  (`Rollout.nsweep`). False on the lanes, where "forward" is the expensive one anyway."""
  return getattr(prob.rollout, "jacobian", None) == "analytic" and prob.ncol <= prob.rollout.nsweep


def directional_first(prob: Problem) -> bool:
  """Whether `jacobian="auto"` starts on the directional Jacobian rather than "forward".

  With the lanes, always (`1 + ncol` lanes per world against `1 + nx + nlayout`). With the analytic
  step's Jacobians, where the model can make no constraint row (no contacts, limits, equalities or
  dry friction: the step map is smooth everywhere, and the two Jacobians are the same derivative)
  and the residual Jacobian has no more columns than the analytic step runs reverse passes per step
  (`Rollout.nsweep`: the velocity and activation rows, and the sensor rows that are not state
  selections). A directional rollout steps `1 + ncol` MJWarp worlds per world, while a step's analytic
  Jacobians cost the step, a replay and `nsweep` reverse passes, each about two world steps of a small
  model on the CPU: `mujoco.sysid`'s spring-mass test (1 mass, 1500 steps) takes 0.23 s against 0.29 s
  (`benchmarks/bench_sysid.py`, its test problems). In a model that can make constraint rows "auto"
  would leave the directional Jacobian at the first rollout that meets one (`_leave_directional`),
  which is where an initial guess far off often starts (the arm of the same tests, armatures from
  0.01, swings into its limits): "forward" at once saves that rollout.
  """
  if getattr(prob.rollout, "jacobian", None) != "analytic":
    return True
  return not can_make_constraint_rows(prob.mjm) and directional_cheaper(prob)


class _LevenbergMarquardt:
  """The state of `lm`: per start its unknowns, cost, damping and stopping test."""

  def __init__(self, prob: Problem, x0, lower, upper, *, maxiter, ftol, xtol, jacobian, report, stdtol):
    self.prob, self.lower, self.upper = prob, lower, upper
    self.maxiter, self.ftol, self.xtol, self.stdtol, self.report = maxiter, ftol, xtol, stdtol, report
    self.auto = jacobian == "auto"
    # "auto" starts with the directional Jacobian (1 + ncol lanes, against 1 + nx + nlayout), exact
    # while the nominal trajectories meet no constraint row, and turns to "forward" for good at the
    # first linearization whose trajectories do (`_leave_directional`)
    # with the analytic step's Jacobians (`Rollout.jacobian`) "forward" costs no lanes and is the
    # exact derivative from the start: "auto" takes it at once, unless the directional one costs
    # less (`directional_first`)
    self.jac = ("directional" if directional_first(prob) else "forward") if self.auto else jacobian  # in use
    self.central = prob.rollout.fd.central
    nstart = x0.shape[0]
    self.nparam, self.nunknown = prob.nparam, x0.shape[1]
    self.x = x0.copy()
    self.stopped = np.zeros(nstart, bool)
    self.linear = np.zeros(nstart, int)  # accepted steps in a row that shrank slowly (linear convergence)
    # `_return_directional`: whether "auto" may go back to the cheaper directional Jacobian once the
    # trajectories leave the constraints (not after it converged linearly or stalled), and how often
    self.may_return = self.auto and directional_cheaper(prob)
    self.returns = 0
    self.ne = prob.linearize(self.x, jacobian=self.jac)
    self._leave_directional()
    self.f = self.ne.cost.copy()
    if not np.isfinite(self.f).any():
      raise FloatingPointError("every initial guess diverges (NaN/Inf state): check the model, the data, or the "
                               "bounds; multiple shooting (shooting=k) helps with long or unstable recordings")
    self.initial_signals = prob.samples(0)
    self.damping = np.full(nstart, 1e-3)
    self.damping_growth = np.full(nstart, 2.0)  # the factor of the next rejected step
    self.success = np.zeros(nstart, bool)
    self.reason = np.array(["maximum number of iterations reached"] * nstart, dtype=object)
    self.why = np.array([None] * nstart, dtype=object)  # the stopping test that fired, before the convergence test
    self.said = np.array([""] * nstart, dtype=object)  # its message
    self.rejected = np.zeros(nstart, int)  # steps rejected in a row
    # the last proposal: predicted reduction, size in std, within the stopping test, within the std
    self.pred, self.size = np.zeros(nstart), np.zeros(nstart)
    self.small, self.noise = np.zeros(nstart, bool), np.zeros(nstart, bool)
    self.last = np.zeros(nstart)  # relative size of the last accepted step
    self.fit = np.ones(nstart)  # its actual / predicted cost reduction
    self.jac_std = np.zeros((nstart, self.nparam))
    self.hist = {"fun": [self.f.copy()], "x": [self.x[:, :self.nparam].copy()], "lambda": [self.damping.copy()]}
    self.nit = 0
    self.interrupted = False
    # relative step measure: float32 resolves about 6e-8 of a value, and float32 rollouts reproduce
    # trajectories to about 1e-6, so the default xtol (1e-6) stops where further steps are noise
    self.typical = np.abs(x0[:, :self.nparam]) * 1e-3 + 1e-12

  def run(self) -> SolverOutcome:
    while True:
      if self._convergence_test():
        break
      live = ~self.stopped & (self.why == None)  # noqa: E711
      if not live.any() or self.nit >= self.maxiter:
        break
      if self._iterate(live):
        break
    self._remaining_step()
    return SolverOutcome(x=self.x, fun=self.f, history=self.hist, nit=self.nit, success=self.success,
                         message=self.reason, initial_signals=self.initial_signals, normal=self.ne,
                         jacobian=self.jac, jacobian_std=self.jac_std, interrupted=self.interrupted)

  def _leave_directional(self) -> None:
    """`"auto"` on the directional Jacobian: turns to `"forward"` (and relinearizes at `x`) once the
    nominal trajectories of a running start meet constraint rows, or once its steps converge
    linearly. A directional lane moves the state by the parameter's step times the tangent, a
    perturbation not chosen for the state, which crosses the constraints' kinks and jumps; without
    constraint rows the step is smooth and the two Jacobians are the same derivative
    (`tests/test_sysid.py` checks both against float64 MuJoCo), but the directional one is a forward
    difference of the whole trajectory (relative parameter step `eps["param"]`), whose error, first
    order in the step, grows with the trajectory's curvature in the parameters: where that is large
    (a pendulum swinging wide) LM converges linearly with it (two small accepted steps in a row each
    above `LINEAR_Q` of the one before), where the step Jacobians, differenced one step at a time,
    converge fast."""
    if not self.auto or self.jac != "directional":
      return
    constrained = self.ne.constrained if self.ne.constrained is not None else self.ne.changes
    live = ~self.stopped
    if not (constrained[live] > 0).any() and not (self.linear[live] >= 2).any():
      return
    if (self.linear[live] >= 2).any():
      self.may_return = False
    self.jac = "forward"
    self.ne = self.prob.linearize(self.x, jacobian=self.jac)
    self.f = self.ne.cost.copy()

  def _return_directional(self) -> None:
    """`"auto"` on "forward" from the analytic step, where the directional Jacobian costs less
    (`directional_cheaper`): goes back to it once the nominal trajectories at every running start's
    parameters meet no constraint row, the next trial's rollout forming it. An initial guess far off
    often swings a model into its limits where the truth stays clear of them (`mujoco.sysid`'s arm
    test, armatures from 0.01: `benchmarks/bench_sysid.py`, its test problems); "forward" takes the
    constrained iterations, directional the smooth rest. At most `MAX_RETURNS` times, and never after
    the directional Jacobian converged linearly or stalled (`_leave_directional`,
    `_refine_directional`)."""
    if not self.may_return or self.jac != "forward" or self.returns >= MAX_RETURNS:
      return
    live = ~self.stopped & (self.why == None)  # noqa: E711
    if not live.any() or (self.ne.constrained[live] > 0).any() or (self.ne.changes[live] > 0).any():
      return
    self.jac = "directional"
    self.returns += 1

  def _refine_directional(self) -> None:
    """`"auto"` on the directional Jacobian: where a start's steps stopped lowering the cost before
    they fell within the tolerances (three rejected in a row), turns to `"forward"` and goes on.
    The directional Jacobian is a forward difference of the whole trajectory (relative parameter step
    `eps["param"]`): its error, first order in the step, grows with the trajectory's curvature in the
    parameters and makes LM converge linearly, to a floor above float32's where the trajectory is
    strongly nonlinear in them (a pendulum swinging wide); the step Jacobians difference one step
    at a time."""
    if not self.auto or self.jac != "directional":
      return
    stuck = ~self.stopped & (self.why == "rejected")
    if not stuck.any():
      return
    self.jac = "forward"
    self.may_return = False
    self.ne = self.prob.linearize(self.x, jacobian=self.jac)
    self.f = self.ne.cost.copy()
    self.why[stuck], self.said[stuck], self.rejected[stuck] = None, "", 0
    self.damping[stuck] = np.minimum(self.damping[stuck], 1e-3)
    self.damping_growth[stuck] = 2.0

  # -- one step ---------------------------------------------------------------------------------------

  def _rel_step(self, d: np.ndarray, s: int) -> float:
    n = self.nparam
    return float(np.max(np.abs(d[:n]) / (np.abs(self.x[s, :n]) + self.typical[s]), initial=0.0))

  def _propose(self, lin: NormalEquations, s: int, damping: float):
    """LM step of start `s` from linearization `lin`: `(step, predicted cost reduction, damping)`."""
    d = lin.diag(s)
    d = np.maximum(d, 1e-12 * max(d.max(), 1e-300))
    g = lin.g(s)
    x = self.x
    for _ in range(20):
      dlt = project(x[s], lin.solve(s, damping * d), self.lower, self.upper) - x[s]
      p = -(g @ dlt + 0.5 * lin.quad(s, dlt))
      if p > 0 or not np.any(g):
        break
      damping *= 10.0  # no predicted decrease (round-off in a near-singular system, or the bounds): damp more
    return dlt, float(p), damping

  def _within(self, lin: NormalEquations, s: int, dlt, tol: float | None = None) -> tuple[bool, float, str]:
    """Whether step `dlt` of start `s` is within the tolerances (`xtol`, or `tol` times the std), its
    size in std, and which test holds.

    The std is the one the misfit left would give as white noise. Not `data_std`'s default, which
    counts a misfit correlated along time as fewer samples: right at the minimum, but away from it
    the misfit is the parameters' error, correlated too, and that std would call any step noise."""
    tol = self.stdtol if tol is None else tol
    std = data_std(lin, s, self.f[s], self.prob.nresidual, self.nunknown, correlated=False)
    k = float(np.max(np.abs(dlt[:self.nparam]) / np.maximum(std, 1e-300), initial=0.0))
    if self._rel_step(dlt, s) <= self.xtol:
      return True, k, f"relative step below xtol={self.xtol:g}"
    # steps far inside the uncertainty the remaining misfit leaves change nothing that matters
    return k <= tol, k, f"step below {tol:g} of the parameter std"

  def _iterate(self, live: np.ndarray) -> bool:
    """One LM iteration of the running starts `live`; True when the callback asks to stop."""
    x, f, ne = self.x, self.f, self.ne
    trial = x.copy()
    for s in np.nonzero(live)[0]:
      dlt, self.pred[s], self.damping[s] = self._propose(ne, s, self.damping[s])
      self.small[s], self.size[s], text = self._within(ne, s, dlt)
      # a step within 1 std that raises the cost: float32 resolution (see the convergence test)
      self.noise[s] = self._within(ne, s, dlt, 1.0)[0]
      trial[s] = x[s] + dlt
      if not self.pred[s] > 0:
        self.why[s], self.said[s] = "descent", "no descent direction left (zero gradient, or round-off)"
      elif self.small[s]:
        # the model predicts nothing to gain beyond the tolerances: no rollout needed
        self.why[s], self.said[s] = "step", text
    run = live & (self.why == None)  # noqa: E711
    if not run.any():
      return False
    trial[~run] = x[~run]
    trial_lin = self.prob.linearize(trial, jacobian=self.jac)
    self.nit += 1
    for s in np.nonzero(run)[0]:
      if trial_lin.cost[s] < f[s]:
        self._accept(s, trial[s], trial_lin)
      else:
        self._reject(s)
    self._leave_directional()
    self._return_directional()
    return self._log()

  def _accept(self, s: int, trial: np.ndarray, trial_lin: NormalEquations) -> None:
    f, ft = self.f, trial_lin.cost[s]
    rho = (f[s] - ft) / max(self.pred[s], 1e-300)
    rel = (f[s] - ft) / max(f[s], 1e-300)
    rel_step = self._rel_step(trial - self.x[s], s)
    # steps that shrink by less than LINEAR_Q per iteration, once small: linear convergence (see
    # `_leave_directional`)
    slow = self.last[s] > 0 and rel_step < 1e-2 and rel_step > LINEAR_Q * self.last[s]
    self.linear[s] = self.linear[s] + 1 if slow else 0
    self.last[s] = rel_step
    self.x[s], f[s] = trial, ft
    self.ne.take(s, trial_lin)
    self.damping[s] *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
    self.damping_growth[s] = 2.0
    self.rejected[s] = 0
    self.fit[s] = rho
    if rel <= self.ftol:
      self.why[s], self.said[s] = "ftol", f"relative cost reduction below ftol={self.ftol:g}"
    elif f[s] == 0.0:
      self.why[s], self.said[s] = "zero", "zero cost"

  def _reject(self, s: int) -> None:
    self.damping[s] *= self.damping_growth[s]
    self.damping_growth[s] *= 2.0
    self.rejected[s] += 1
    if self.rejected[s] >= 3:
      # no decrease along ever shorter steps: a minimum within float32 precision if the last was
      # within the tolerances (see the convergence test), else a stall
      self.why[s], self.said[s] = "rejected", "the cost cannot be reduced further (float32 precision)"
    elif self.auto and self.rejected[s] == 1 and abs(self.fit[s] - 1.0) > 0.5 and not self.noise[s] \
        and self.ne.changes[s] > 0:
      # a significant step failed after the model's predictions had stopped matching the cost (on
      # recordings that reach joint limits the cost fell several times as much as predicted): ask the
      # other Jacobian now rather than after two more failed steps
      self.why[s] = "doubt"

  def _log(self) -> bool:
    """Records the iteration and reports it; True (and every start stopped) when the callback asks to stop."""
    n = self.nparam
    self.hist["fun"].append(self.f.copy())
    self.hist["x"].append(self.x[:, :n].copy())
    self.hist["lambda"].append(self.damping.copy())
    best = int(np.argmin(self.f))
    if not self.report(self.nit, float(self.f.min()), self.x[best, :n].copy()):
      return False
    self.interrupted = True
    self.stopped[:] = True
    self.success[:] = False
    self.reason[:] = f"stopped by the callback after {self.nit} iterations"
    return True

  # -- the convergence test ---------------------------------------------------------------------------

  def _finish(self, s: int, ok: bool, text: str) -> None:
    self.stopped[s], self.success[s], self.reason[s] = True, ok, text

  def _stall(self, s: int, tail: str = "") -> None:
    self._finish(s, False, f"stalled, not converged: {self.rejected[s]} ever shorter steps that the linearized model "
                           f"predicted to lower the cost (the last by {self.pred[s]:.3g}, {self.size[s]:.3g} std) "
                           f"raised it{tail}; the cost is not at a minimum. The trajectories cross constraint "
                           f"switches ({int(self.ne.changes[s])} times: limits or contacts engaging or releasing), "
                           "where the cost jumps and finite-difference Jacobians are inexact: try multiple shooting "
                           "(shooting=k) to shorten the rollouts across them, other starting points (starts=4), or "
                           "another finite-difference step (eps=...)")

  def _convergence_test(self) -> bool:
    """The convergence test of the starts a stopping test stopped; True when the callback asks to stop."""
    self._refine_directional()
    pending = [s for s in np.nonzero(~self.stopped & (self.why != None))[0]]  # noqa: E711
    ask = [s for s in pending if self.ne.changes[s] > 0 and self.why[s] != "zero"]
    for s in pending:
      if s in ask:
        continue
      if self.why[s] == "descent" and not np.any(np.diag(self.ne.Htt[s])):
        self._finish(s, False, "not converged: the residuals depend on none of the parameters (a zero Jacobian: "
                               "check that the parameters act on the recorded signals, and that eps['param'] is "
                               "not below float32 resolution)")
      else:
        self._finish(s, True, self.said[s])
    if not ask:
      return False
    other = second_opinion(self.jac, self.central)
    moves = self._ask(ask, other)
    if not moves:
      return False
    self._try(moves, other)
    return self._log()

  def _ask(self, ask: list[int], other: str) -> dict[int, tuple[np.ndarray, float]]:
    """The other Jacobian's step at the stopping point of each start in `ask`: decides the starts
    whose step is within the tolerances; returns `{start: (trial point, step size in std)}` of the rest."""
    name, oname = jacobian_name(self.jac, self.central), jacobian_name(other, self.central)
    other_lin = self.prob.linearize(self.x, jacobian=other)
    moves = {}
    for s in ask:
      dlt, _, _ = self._propose(other_lin, s, min(self.damping[s], 1e-3))
      ok, k, text = self._within(other_lin, s, dlt)
      if self.why[s] == "doubt" and (ok or self.nit >= self.maxiter):
        self.why[s] = None  # nothing better from the other Jacobian: LM goes on with this one
      elif ok:
        # a minimum by the other Jacobian's model too (where the start's own steps failed, the cost
        # refuted its model: the two disagree, and the std says by how much)
        self.jac_std[s] = np.abs(dlt[:self.nparam])
        own = self.said[s] if self.why[s] != "rejected" or self.noise[s] else \
          f"the {name} Jacobian's steps raised the cost (the last {self.size[s]:.2g} std)"
        self._finish(s, True, f"{own}; the {oname} Jacobian agrees ({text}: {k:.2g} std)")
      elif self.nit >= self.maxiter:
        self._finish(s, False, f"maximum number of iterations reached: the {name} Jacobian stopped "
                               f"({self.said[s] or self.why[s]}), but the {oname} Jacobian proposes a step of "
                               f"{k:.2g} std that there was no iteration left to try")
      else:
        moves[s] = (self.x[s] + dlt, k)
    return moves

  def _try(self, moves: dict[int, tuple[np.ndarray, float]], other: str) -> None:
    """Tries the other Jacobian's steps `moves` with one rollout: takes those that lower the cost."""
    name, oname = jacobian_name(self.jac, self.central), jacobian_name(other, self.central)
    alt = self.x.copy()
    for s, (point, _) in moves.items():
      alt[s] = point
    trial_lin = self.prob.linearize(alt, jacobian=other)
    self.nit += 1
    lower_cost = [s for s in moves if trial_lin.cost[s] < self.f[s]]
    for s, (_, k) in moves.items():
      if s in lower_cost:
        continue
      if self.why[s] == "doubt":
        self.why[s] = None
      elif self.why[s] == "rejected" and not self.noise[s]:
        self._stall(s, f", and so did the {oname} Jacobian's step ({k:.2g} std)")
      else:
        self.jac_std[s] = 0.5 * np.abs(alt[s, :self.nparam] - self.x[s, :self.nparam])
        self._finish(s, True, f"{self.said[s]}; the {oname} Jacobian's step ({k:.2g} std) raised the cost")
    for s in lower_cost:
      f0, k = self.f[s], moves[s][1]
      self.x[s], self.f[s] = alt[s], trial_lin.cost[s]
      self.ne.take(s, trial_lin)
      if not self.auto:
        self._finish(s, False, f"not converged: the {name} Jacobian stopped at cost {f0:.4g}, but the {oname} "
                               f"Jacobian's step ({k:.2g} std) lowers it to {self.f[s]:.4g}: "
                               f"{int(self.ne.changes[s])} constraint switches along the trajectories make the two "
                               "differ. The result is that lower point; jacobian='auto' (the default) takes such "
                               "steps and goes on")
      self.damping[s], self.damping_growth[s] = min(self.damping[s], 1e-3), 2.0
      self.rejected[s], self.fit[s], self.why[s], self.said[s] = 0, 1.0, None, ""
    if lower_cost and self.auto:
      # back to this Jacobian from the lower point: the other one's step got LM past the switches
      # that stalled it, and near the minimum it converges fast again (the other, a coarse sample of
      # the jumps, converges linearly: on tests/test_sysid_limits.py's arm, several times the iterations)
      back = self.prob.linearize(self.x, jacobian=self.jac)
      for s in lower_cost:
        self.ne.take(s, back)

  def _remaining_step(self) -> None:
    """Adds to `jac_std` the step the last linearization still proposes: the distance left to its
    fixed point, `1 / (1 - q)` times the step where the steps shrink by `q` per iteration."""
    for s in range(self.x.shape[0]):
      dlt, _, _ = self._propose(self.ne, s, min(self.damping[s], 1e-3))
      q = min(0.9, self._rel_step(dlt, s) / self.last[s]) if self.last[s] > 0 else 0.0
      self.jac_std[s] = np.hypot(self.jac_std[s], np.abs(dlt[:self.nparam]) / (1.0 - q))
