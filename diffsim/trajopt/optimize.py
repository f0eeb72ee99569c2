"""`optimize_trajectory`: checks the arguments, picks (or reuses) a solver, and runs it."""

from __future__ import annotations

import numpy as np
import warp as wp

from .. import optim
from .adam import AdamSolver
from .checks import host_array
from .ilqr import ILQRSolver
from .lbfgs import LINE_SEARCHES, LBFGSSolver
from .problem import JACOBIANS, TrajectoryProblem
from .result import TrajectoryResult

SOLVERS = {"ilqr": ILQRSolver, "adam": AdamSolver, "lbfgs": LBFGSSolver}
METHODS = tuple(SOLVERS)


def optimize_trajectory(problem: TrajectoryProblem, method: str = "ilqr", *, maxiter: int | None = None,
                        ftol: float = 1e-6, warm_start=None, shift: int = 1, progress: bool = True,
                        log_every: int | None = None, capture: bool = True, callback=None,
                        options: dict | None = None, min_progress: float = 1e-4) -> TrajectoryResult:
  """Optimizes the controls of every world of `problem`.

  Args:
    problem: the `TrajectoryProblem`.
    method: `"ilqr"` (default), `"adam"` or `"lbfgs"`.
    maxiter: iterations (default: ilqr 100, adam 1000, lbfgs 500).
    ftol: convergence test on the relative cost decrease: iLQR, a world converges when an
      iteration (or the local model's prediction) lowers its cost by at most `ftol * |cost|`; Adam,
      when its best cost fell by at most that over `patience` iterations (tested every `log_every`);
      L-BFGS, scipy's `ftol` (per world with `line_search="per_world"`).
    warm_start: a previous `TrajectoryResult` of this problem, or controls `(nworld, nstep, nu)`
      (`wp.array` or array-like), shifted by `shift` steps (the last control is held) and used as
      the initial guess instead of `problem.ctrl_init`: the receding-horizon (MPC) warm start.
    shift: steps to shift `warm_start` by (0: use it as is).
    progress: show a progress bar (tqdm).
    log_every: iterations between host reads of the costs (progress bar, convergence test,
      callback): one copy of a few bytes per world, the only one in the loop (`log_every=maxiter`:
      none until the end); default: 1 for iLQR and L-BFGS (iLQR stops on it, and its iterations,
      few and each many rollouts, dwarf the read), `maxiter // 100` for Adam.
    capture: replay each iteration as a captured graph (`wp.ScopedCapture`) after the first.
    callback: `callback(iterate)`, called at every host check with a `diffsim.optim.Iterate`:
      `nit`, `fun` the best cost per world so far `(nworld,)` (already read; no extra transfer)
      and `x` the best controls `(nworld, nstep, nu)` (read from the device on first access).
      Returning True, or raising `StopIteration`, stops the solver.
    options: solver settings, e.g. `{"lr": 0.05}`:
      adam: `lr` (ctrl units per step, 0.05), `betas` ((0.9, 0.999)), `eps` (1e-8), `patience`
        (iterations over which the `ftol` test looks back, 100);
      lbfgs: `maxcor` (10), `gtol` (1e-8), `line_search` (`"shared"`, the default: scipy's L-BFGS-B
        on all worlds' controls stacked, one step length for all; `"per_world"`: one L-BFGS per
        world, its own curvature pairs, step lengths and stopping test, `trajopt.batched_lbfgs`;
        see `trajopt.lbfgs` for when each does better);
      ilqr: `alphas` (line-search steps, (1, 1/2, ..., 1/32)); Levenberg-Marquardt regularization
        `Quu + mu diag(Quu)`: `mu_init` (1), `mu_min` (1e-4; below it, 0), `mu_max` (1e8),
        `mu_factor` (10): divided after an improving iteration, multiplied after a failed one;
        `loop_steps` (None: by device): True captures the rollouts' step once and replays it
        `horizon` times per rollout (the CPU's default, where capturing an MJWarp step is slow),
        False captures an iteration as one graph (a GPU's default). Both give the same iterates.
        `jacobian` (None: the problem's, `"auto"` unless set): the step Jacobians, `"auto"` (analytic
        where the model is covered, else the lanes), `"analytic"` or `"finite_difference"` (the
        lanes); see `TrajectoryProblem`.

    min_progress: a world whose best cost fell by less than this fraction of its initial cost is
      not a success, whatever the stop test said (the result's message names it and what to try):
      a flat start, such as an object held by static friction, otherwise reads as convergence.

  Returns:
    A `TrajectoryResult`.

  Raises:
    TypeError, ValueError: for a wrong argument, before any kernel is launched.
  """
  if not isinstance(problem, TrajectoryProblem):
    raise TypeError(f"problem must be a TrajectoryProblem, got {type(problem).__name__}")
  if not isinstance(method, str) or method.lower() not in METHODS:
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
  method = method.lower()
  solver_class = SOLVERS[method]
  options = _check_options(method, solver_class.defaults, options)
  maxiter = optim.check_maxiter(solver_class.default_maxiter if maxiter is None else maxiter)
  if not ftol >= 0:
    raise ValueError(f"ftol must be >= 0, got {ftol!r}")
  if not min_progress >= 0:
    raise ValueError(f"min_progress must be >= 0, got {min_progress!r}")
  if log_every is None:
    log_every = max(1, maxiter // 100) if method == "adam" else 1
  if isinstance(log_every, bool) or not isinstance(log_every, (int, np.integer)) or log_every < 1:
    raise ValueError(f"log_every must be a positive integer, got {log_every!r}")
  optim.check_callback(callback)
  ctrl0 = _initial_controls(problem, warm_start, shift)

  key = (method, tuple(sorted((k, str(v)) for k, v in options.items())), bool(capture))
  solver = problem.solvers.get(key)
  if solver is None or solver.capacity < maxiter + 1:
    solver = solver_class(problem, options, maxiter + 1, bool(capture))
    problem.solvers[key] = solver
  solver.min_progress = float(min_progress)
  return solver.run(ctrl0, maxiter=maxiter, ftol=float(ftol), progress=bool(progress), log_every=int(log_every),
                    callback=callback)


def _check_options(method: str, defaults: dict, options: dict | None) -> dict:
  """The method's options, defaults filled in; a ValueError for an unknown or invalid one."""
  unknown = set(options or {}) - set(defaults)
  if unknown:
    raise ValueError(f"unknown options {sorted(unknown)} for method {method!r}; valid: {sorted(defaults)}")
  checked = {**defaults, **(options or {})}
  if method == "lbfgs" and checked["line_search"] not in LINE_SEARCHES:
    raise ValueError(f"lbfgs line_search must be one of {LINE_SEARCHES}, got {checked['line_search']!r}")
  if method == "ilqr":
    checked["alphas"] = tuple(float(a) for a in checked["alphas"])
    if not checked["alphas"] or min(checked["alphas"]) <= 0:
      raise ValueError(f"ilqr alphas must be positive step sizes, got {checked['alphas']}")
    if checked["loop_steps"] not in (None, True, False):
      raise ValueError(f"ilqr loop_steps must be None, True or False, got {checked['loop_steps']!r}")
    if checked["jacobian"] is not None and checked["jacobian"] not in JACOBIANS:
      raise ValueError(f"ilqr jacobian must be None or one of {JACOBIANS}, got {checked['jacobian']!r}")
  return checked


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
  world, step, i = wp.tid()
  # the last control is held, as a receding-horizon controller has nothing better to guess
  src_step = wp.min(step + shift, src.shape[1] - 1)
  dst[world, step, i] = wp.clamp(src[world, src_step, i], lo[world, step, i], hi[world, step, i])


def _initial_controls(problem: TrajectoryProblem, warm_start, shift: int) -> wp.array:
  """`problem.ctrl_init`, or `warm_start`'s controls shifted by `shift` steps and clipped to the bounds."""
  if warm_start is None:
    return problem.ctrl_init
  if isinstance(shift, bool) or not isinstance(shift, (int, np.integer)) or not 0 <= shift < problem.horizon:
    raise ValueError(f"shift must be an integer in [0, horizon={problem.horizon}), got {shift!r}")
  shape, device = problem.ctrl.shape, problem.scene.device
  src = warm_start.ctrl if isinstance(warm_start, TrajectoryResult) else warm_start
  if not isinstance(src, wp.array) or src.device != device or src.dtype != wp.float32:
    a = host_array(src, "warm_start")
    if a.shape != shape:
      raise ValueError(f"warm_start must have shape (nworld, horizon, nu) = {shape}, got {a.shape}")
    src = wp.array(a.astype(np.float32), dtype=float, device=device)
  elif src.shape != shape:
    raise ValueError(f"warm_start must have shape (nworld, horizon, nu) = {shape}, got {src.shape}")
  out = wp.empty(shape, dtype=float, device=device)
  wp.launch(_shift, dim=shape, inputs=[src, int(shift), problem.ctrl_lo, problem.ctrl_hi], outputs=[out],
            device=device)
  return out
