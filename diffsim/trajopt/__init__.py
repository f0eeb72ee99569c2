"""Trajectory optimization of many worlds at once: Adam, L-BFGS and iLQR on MJWarp rollouts.

A `TrajectoryProblem` is a scene, a horizon, initial states per world, a `Cost`, control bounds and
an initial control guess. Every world is its own problem (its own initial state, targets and model
parameters); the solvers advance all of them together:

  - `"adam"`: first-order, gradients from `tape.backward()`, projected onto the control bounds
    (the analytic adjoint where it covers the model, else the lanes: `Rollout`'s `gradient`);
  - `"lbfgs"`: scipy's L-BFGS-B on the stacked controls (one host transfer per evaluation), or one
    L-BFGS per world (`options={"line_search": "per_world"}`, `batched_lbfgs.py`);
  - `"ilqr"`: iterative LQR (Gauss-Newton on the cost, the step Jacobians `ro.jacobians()` of the
    rollout as dynamics, analytic or from the lanes as `jacobian` says), box-constrained gains, a
    closed-loop line search and Levenberg-Marquardt regularization, all per world.

Adam and iLQR iterate without host copies: an iteration (forward, backward, update, bookkeeping)
is captured once as a few graphs (`wp.ScopedCapture`) and replayed (iLQR on the CPU: its rollouts'
step is one graph replayed per step, as capturing every step would cost seconds); the host reads
the best cost per world only every `log_every` iterations, to update the progress bar and test for
convergence. `optimize_trajectory` speaks as `diffsim.optim` says every diffsim optimizer does.

Step Jacobians: iLQR linearizes with `problem.jacobian` (`"auto"`: analytic step Jacobians where
the model is covered, else the finite-difference lanes; `"analytic"`; `"finite_difference"`), or
its own `options={"jacobian": ...}`.

Plans that start out of contact. A pusher at rest that does not touch the object gives a cost on
the object's pose a zero gradient in the controls (the object feels nothing the pusher does, and
iLQR's lanes, tiny perturbations of its force, do not reach it either): first-order solvers stop
at the start, and the result says so per world (`zero_gradient`, `reasons`, `success` False, the
message names the zero gradient). The strategy is a contact-reaching warm start, two stages:
  1. `problem.with_cost(terms + [reach])`, where `reach` is a running term that draws the pusher
     to the object (a `QposCost` or `SiteCost` to a point just inside the face opposite the
     target), a few L-BFGS iterations: its gradient is never zero, and the pusher arrives and
     starts the push;
  2. the real cost from that plan, `optimize_trajectory(problem, "adam", warm_start=first,
     shift=0)`: in contact, the analytic gradient is informative.
Chosen by measurement on tutorial 11's capsule push (4 worlds, plans replayed in float64 MuJoCo
C; README): with Adam in the second stage every world ends within 2 cm; with L-BFGS (one line
search shared by the stacked worlds) or iLQR, one world of the four stays farther; from rest,
without the first stage, no solver moves.

Where things are: `problem.py` (the problem), `optimize.py` (`optimize_trajectory`, the methods),
`result.py`, `solver.py` (the host loop the solvers share), `adam.py`, `lbfgs.py` (and `batched_lbfgs.py`, one L-BFGS
per world), `ilqr/`.

Example:
  scene = diffsim.Scene.from_xml(diffsim.asset_path("cartpole.xml"), nworld=4)
  cost = [QposCost([0.0, np.pi], terminal=[1.0, 100.0]), QvelCost(0.0, terminal=[1.0, 10.0]), CtrlCost(0.1)]
  problem = diffsim.TrajectoryProblem(scene, cost, horizon=200)  # swing up from hanging in 2 s
  result = diffsim.optimize_trajectory(problem, method="ilqr")
  result.x  # (nworld, horizon, nu) optimized controls
"""

from .optimize import METHODS as METHODS
from .optimize import optimize_trajectory as optimize_trajectory
from .problem import TrajectoryProblem as TrajectoryProblem
from .result import TrajectoryResult as TrajectoryResult

__all__ = ["TrajectoryProblem", "TrajectoryResult", "optimize_trajectory", "METHODS"]
