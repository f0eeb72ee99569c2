"""Adam on every world's controls (`diffsim.optim.Adam`), projected onto the control bounds."""

from __future__ import annotations

from .. import optim
from .solver import Solver, increment


class AdamSolver(Solver):
  """Adam on every world's controls, projected onto the bounds after each step.

  An iteration evaluates the cost of the current controls (history row `iterations[0]`) and its
  gradient (`tape.backward()`: the analytic adjoint where it covers the model, else the lanes, as
  the problem's `gradient` says), keeps the best controls so far, then steps; `maxiter` steps take
  `maxiter + 1` evaluations.
  """

  method = "adam"
  extra_evals = 1
  defaults = {"lr": 0.05, "betas": (0.9, 0.999), "eps": 1e-8, "patience": 100}
  default_maxiter = 1000

  def __init__(self, problem, options, capacity, capture):
    super().__init__(problem, options, capacity, capture)
    self.adam = optim.Adam(problem.ctrl, problem.ctrl_lo, problem.ctrl_hi, lr=options["lr"], betas=options["betas"],
                           eps=options["eps"])
    self.keeps_start_gradient = True

  def start(self, ctrl0):
    super().start(ctrl0)
    self.adam.reset()

  def stages(self):
    return [(self.iteration, 1)]

  def iteration(self) -> None:
    problem = self.problem
    trajectory, tape = self.gradient()
    self.record(self.cost, problem.ctrl, trajectory)
    self.keep_start_gradient()
    self.adam.step(problem.ctrl.grad)
    self.launch(increment, 1, [self.iterations])
    tape.zero()
