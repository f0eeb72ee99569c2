"""`identify`: checks the input, builds the problem, runs the solver and assembles the result."""

from __future__ import annotations

import os
import time
import warnings
from typing import Callable, Sequence

import mujoco
import numpy as np

from .. import optim
from ..params import Param
from ..scene import SolverSettings, copy_mjmodel, load_mjmodel
from ..sharding import sharding
from .adam import OPTIONS as ADAM_OPTIONS
from .adam import adam
from .confidence import IdentifiabilityWarning, confidence
from .lm import jacobian_name, lm
from .mjcf import identified_spec
from .parameters import ParamVector, initial_guesses, parse_param
from .problem import Problem
from .result import Signals, SolverOutcome, SysIdResult, check_out
from .worlds import as_recordings

METHODS = ("lm", "adam")
JACOBIANS = ("auto", "forward", "directional", "tape", "finite_difference")
OPTIONS = {"lm": {}, "adam": ADAM_OPTIONS}  # `options` of each method, with their defaults


def identify(model, data, params: Sequence[str | Param], *, method: str = "lm", maxiter: int = 30,
             options: dict | None = None, bounds: dict | None = None, weights: dict | None = None,
             normalize: bool | str = True, shooting: int | None = None, starts=1, spread: float = 1.0, seed: int = 0,
             x0: dict | None = None, ftol: float = 1e-10, xtol: float = 1e-6, jacobian: str = "auto",
             resample: bool = False, max_steps_per_sample: int | None = None, fit_qvel0: bool | None = None,
             fit_qpos0: bool = False, device=None, solver_settings: SolverSettings | None = None,
             central: bool = False, eps: float | dict | None = None, out=None, plots: bool = True,
             progress: bool = True, callback: Callable | None = None, workers: int | None = None,
             address: str | None = None) -> SysIdResult:
  """Identifies model parameters from recorded trajectories.

  Args:
    model: MJCF path or XML string, `mujoco.MjSpec` or `mujoco.MjModel`; its values are the
      initial guess (a path or spec is needed to write `model.xml`).
    data: a recording or a list of them: `.npz` / `.csv` paths, `diffsim.data.Recording`s, or
      dicts of arrays (see `diffsim.data` for the format). All share one parameter set.
    params: `"field:element"` strings (`"body_mass:ball"`, `"dof_damping:slide"`, `"opt.gravity"`)
      or `diffsim.Param`s. A dof field of a ball or free joint is one value for all its dofs, as
      MJCF stores it (`dof_damping:ball` is one damping, not three).
    method: `"lm"` (Levenberg-Marquardt, `diffsim.sysid.lm`) or `"adam"` (`diffsim.sysid.adam`).
    maxiter: maximum iterations (0: evaluate the initial guess), each one linearized rollout at a
      trial point (the convergence test's trial of the other Jacobian's step counts as one; its
      linearization at the stopping point, and `"auto"`'s return to its own Jacobian after that
      step, are rollouts that do not, see `nfev`).
    options: solver settings; adam: `{"lr": 0.05}` (step, relative to each parameter's initial
      magnitude); lm: none.
    bounds: `{name: (lower, upper)}`; default `(0, inf)` for positive quantities, else unbounded.
    weights: residual weight multipliers: `{"qpos"|"qvel"|"sensordata": w}` per signal kind,
      `{"qpos:<joint>"|"qvel:<joint>"|"sensor:<name>": w}` per column.
    normalize: divide residuals by the RMS spread of the measured signals of the same unit (joint
      angles, joint lengths, each sensor), so signals in different units count alike (default);
      `weights` multiply on top. For the confidence, weights should be proportional to
      1 / (noise std) of each signal: pass them via `weights` (and `normalize=False`) when known.
      `"recording"`: each recording's columns divided by their own norm over its rows after the
      first, over sqrt(2) (`mujoco.sysid`'s `normalize_residual`, per recording and column): every
      recording weighs alike whatever its amplitude or length, the objective of `mujoco.sysid`.
    shooting: multiple shooting: restart from the measured state every `shooting` samples (each
      segment runs in its own world); `None`: one rollout per recording.
    starts: number of initial guesses solved in parallel worlds (the first is the MJCF value or
      `x0`, the others random within a factor `1 + spread`), or an array `(nstart, nparam)`.
    spread: spread of random initial guesses (see `starts`).
    seed: seed of the random initial guesses.
    x0: `{name: value}` initial guess overriding the MJCF value.
    ftol, xtol: LM stops when the relative cost reduction or the relative step falls below these
      (`xtol` also floors each std: the relative resolution LM claims, see `diffsim.sysid.confidence`).
    jacobian: `"auto"` (default): `"directional"` while the nominal trajectories meet no constraint
      row (a smooth step: the same derivative with `1 + nparam` lanes per world; `1 + 2 nv + nparam`
      for the lanes' step Jacobians), else `"forward"`. Where the analytic step's Jacobians cover the
      model (`diffsim.adjoint.analytic_coverage`; no lanes), `"forward"` from the start on a model
      that can make constraint rows, and `"directional"` only while it is the cheaper one (no more
      columns than the step's velocity, activation and swept sensor rows): from the start on a
      model that cannot, or once the trajectories leave the constraints
      (`diffsim.sysid.lm.directional_first`, `_return_directional`); either way with the step of
      `"directional"` (forward differences) taken where that lowers the cost further (trajectories that cross constraint
      switches, see `diffsim.sysid.lm`); `"forward"` (step Jacobians propagated forward) or
      `"directional"` (forward mode: a lane per column of the Jacobian; fewer lanes, less precise)
      alone, each checked by the other where it stops (not converged where the other lowers the
      cost); `"tape"` (reverse mode, one backward pass per residual block: for checks; much
      slower, unchecked); or `"finite_difference"`: `"auto"` with the lanes' step Jacobians whatever
      the adjoint covers. See `diffsim.sysid.problem`.
    resample: resample recordings whose sample times are off the timestep grid instead of failing.
    max_steps_per_sample: most model steps one sample interval may span (default
      `diffsim.data.MAX_STEPS_PER_SAMPLE`, 500): longer intervals are refused as likely times in
      milliseconds; raise it for recordings that really are this sparse.
    fit_qvel0: solve for the initial velocity of each world (recording, or shooting segment) together
      with the parameters, starting from a finite-difference estimate from `qpos`. `None` (default):
      for worlds whose initial velocity is not measured (no `qvel`, no `qvel0`); `True`: for all
      (noisy `qvel`); `False`: never (use the estimate as is). LM only; Adam keeps the estimate.
    fit_qpos0: also solve for the initial position of each world (a tangent-space offset from the
      measured row), with that row counted as a measurement: for noisy position data, where
      pinning the simulation to one noisy sample biases the parameters, by more than the std says
      (which counts the other samples' noise, not that one's: tests/test_sysid_errorbars.py). LM only.
    device: Warp device (`None`: CUDA if available, else CPU).
    solver_settings: MJWarp constraint solver settings (`diffsim.SolverSettings`).
    central, eps: finite-difference scheme of the Jacobians (see `diffsim.Rollout`). Forward
      differences by default: the Jacobian only steers the LM steps (the residuals, computed
      exactly, set the minimum), and they need half the lanes of central ones. The convergence
      test's directional Jacobian differences forward whatever `central` (its one-sided lanes
      catch the jumps at constraint switches).
    out: folder to write `params.json`, `model.xml` and plots into (`None`: write nothing); an
      earlier run's results there are replaced. A folder that is a file, or whose `model.xml` is
      the input model, and a parameter that `model.xml` cannot hold are refused before any kernel
      runs; if writing fails after the solve (e.g. identified inertias that violate the triangle
      inequality), a warning says why and the result is returned all the same (see
      `SysIdResult.save`).
    plots: write PNG plots when `out` is given.
    progress: show a tqdm progress bar.
    callback: `callback(iterate)` after every iteration, with a `diffsim.optim.Iterate` (`nit`,
      `fun`: the best start's cost, `x`: its `{name: value}`); returning True (or raising
      `StopIteration`) stops the solver, which returns its best point so far, not converged.
    workers: Ray workers to split the recordings between (`diffsim.distributed`; needs
      `pip install "diffsim[ray]"`), and the starts too where there are more workers than recordings:
      each builds the problem of its shard once, and at each iteration returns its normal equations
      (Adam: its gradient) for the driver to sum and solve; the result equals one process's to
      float32 rounding. `None` (default): one process, no Ray, unless `address` is given (then one
      worker per CPU or GPU of that cluster, at most one per recording and start). At most
      recordings x starts (shooting segments are not split further). Or a held
      `diffsim.distributed.Cluster` (`cluster.identify(...)`): its workers keep their problems
      (scene, buffers, captured graphs) for the next call on the same data.
    address: join the Ray cluster at `"host:port"` (`ray start --head` prints it) instead of
      starting a local one with `num_cpus=workers`; see `diffsim.distributed.Cluster`. `device`
      then says `"cpu"` or `"cuda"` per worker (default: a GPU per worker where there is one).

  Returns:
    A `SysIdResult`.

  Raises:
    diffsim.data.DataError: bad recorded data (before any kernel runs).
    ValueError, KeyError: bad parameters, bounds or options, `workers < 1`, more workers than
      recordings x starts (before any kernel runs).
    ImportError, ConnectionError, diffsim.distributed.WorkerError: with `workers` or `address`: Ray
      missing (the message names the extra), nothing answering at `address`, a worker lost.
  """
  opts = _check_options(method, jacobian, maxiter, options, callback)
  sharded = workers is not None or address is not None
  held = None  # a cluster the caller holds (and closes)
  if sharded:
    sharder = sharding("identify")  # diffsim.distributed's (Ray), imported on first use
    held, workers = sharder.workers(workers, address)
  source = model
  if isinstance(model, (str, os.PathLike)) and not str(model).lstrip().startswith("<"):
    source = os.path.abspath(os.fspath(model))
  mjm = copy_mjmodel(model) if isinstance(model, mujoco.MjModel) else load_mjmodel(source)
  recs = as_recordings(data, mjm, resample, max_steps_per_sample)
  vector = _parameters(mjm, params, bounds)
  theta0 = initial_guesses(vector, starts, spread, seed, x0)
  if out is not None:
    _check_writable(out, source, vector)
  cluster = held or (sharder.start(workers, address, device, len(recs), theta0.shape[0]) if sharded else None)
  try:
    t0 = time.perf_counter()
    # the rollout's copies carry no bounds (sysid enforces them, per identified coordinate)
    rollout_params = [Param(p.field, p.element, components=p.components, name=p.name) for p in vector.params]
    kw = dict(weights=weights, normalize=normalize, shooting=shooting, nstart=theta0.shape[0],
              solver_settings=solver_settings, central=central, eps=eps, fit_qvel0=fit_qvel0, fit_qpos0=fit_qpos0,
              step_jacobian="finite_difference" if jacobian == "finite_difference" else "auto")
    # "finite_difference": LM's "auto" on the lanes' step Jacobians
    jacobian = "auto" if jacobian == "finite_difference" else jacobian
    if cluster is None:
      prob = Problem(mjm, recs, rollout_params, device=device, **kw)
    else:
      prob = sharder.problem(cluster, mjm, recs, rollout_params, workers=workers, **kw)
    res = _solve(prob, vector, theta0, opts, method=method, maxiter=maxiter, ftol=ftol, xtol=xtol, jacobian=jacobian,
                 central=central, progress=progress, callback=callback, t0=t0, source=source)
  finally:
    if cluster is not None and held is None:
      cluster.close()
  for m in res.warnings:
    warnings.warn(m, IdentifiabilityWarning, stacklevel=2)
  if out is not None:
    try:
      res.save(out, plots=plots)
    except Exception as e:  # the solve is worth more than the files: return it whatever happened
      res.save_error = str(e)
      warnings.warn(f"identify: the solve finished and its result is returned, but writing it to {os.fspath(out)!r} "
                    f"failed: {e}", stacklevel=2)
  return res


def _solve(prob, vector: ParamVector, theta0, opts, *, method, maxiter, ftol, xtol, jacobian, central, progress,
           callback, t0, source) -> SysIdResult:
  """Runs the solver on `prob` (a `Problem`, or a `diffsim.distributed.sysid.ShardedProblem`) and
  assembles the result."""
  bar = optim.progress_bar(maxiter, "sysid", progress)
  try:
    report = _reporter(bar, callback, vector)
    if method == "lm":
      # unknowns: the parameters, then the initial states solved for (unbounded)
      nfree = prob.nunknown - prob.nparam
      lower = np.concatenate([vector.lower, np.full(nfree, -np.inf)])
      upper = np.concatenate([vector.upper, np.full(nfree, np.inf)])
      outcome = lm(prob, prob.unknowns.initial(theta0), lower, upper, maxiter=maxiter, ftol=ftol, xtol=xtol,
                   jacobian=jacobian, report=report)
    else:
      # Adam keeps the initial states at their measured or estimated values
      outcome = adam(prob, theta0, vector.lower, vector.upper, maxiter=maxiter, lr=opts["lr"], report=report)
      outcome.x = prob.unknowns.initial(outcome.x)
  finally:
    bar.close()
  return _assemble(prob, vector, theta0, outcome, method=method, jacobian=jacobian, central=central, xtol=xtol,
                   t0=t0, source=source)


def _derivative_paths(prob, vector: ParamVector, method: str, used: str) -> dict[str, str]:
  """`{name: phrase}`: how the solver differentiated each parameter, and whether the analytic adjoint
  covers it in this model (`diffsim.adjoint.analytic_coverage`)."""
  from ..adjoint import analytic_coverage

  out = {}
  for p in vector.params:
    why = analytic_coverage(prob.mjm, [p.field])
    adjoint = "the analytic adjoint covers it" if why is None else f"the analytic adjoint does not cover {why}"
    if method == "lm" and used != "tape":
      # LM's whole Jacobians: the analytic step's where the rollout forms them, else the lanes'
      analytic = used == "forward" and getattr(getattr(prob, "rollout", None), "jacobian", None) == "analytic"
      how = "step Jacobians" if used == "forward" else "tangents (forward mode)"
      source = "analytic step" if analytic else "finite-difference lanes"
      out[p.name] = f"{source} (LM's {jacobian_name(used, False)} Jacobian from {how}; {adjoint})"
    else:
      # the rollout's choice (`Rollout.gradient`); a sharded problem's workers each make their own
      path = getattr(getattr(prob, "rollout", None), "gradient", None)
      path = {"analytic": "analytic adjoint", "finite_difference": "finite-difference lanes"}.get(path, "workers'")
      out[p.name] = f"{path} tape gradient ({adjoint})"
  return out


def _check_options(method, jacobian, maxiter, options, callback) -> dict:
  """The solver's options with their defaults; ValueErrors for bad arguments, before any work."""
  if method not in METHODS:
    raise ValueError(f"method must be 'lm' or 'adam', got {method!r}")
  if jacobian not in JACOBIANS:
    raise ValueError(f"jacobian must be 'auto', 'forward', 'directional', 'tape' or 'finite_difference', "
                     f"got {jacobian!r}")
  optim.check_maxiter(maxiter, allow_zero=True)
  optim.check_callback(callback)
  valid = OPTIONS[method]
  unknown = sorted(set(options or {}) - set(valid))
  if unknown:
    raise ValueError(f"unknown options {unknown} for method {method!r}; valid: {sorted(valid)}")
  opts = {**valid, **(options or {})}
  lr = opts.get("lr", 1.0)
  if isinstance(lr, bool) or not isinstance(lr, (int, float, np.floating)) or not 0 < lr < np.inf:
    raise ValueError(f"options['lr'] must be a positive number, got {lr!r}")
  return opts


def _parameters(mjm: mujoco.MjModel, params, bounds: dict | None) -> ParamVector:
  """The identified parameters, checked on the host model (`ParamVector.check`)."""
  bounds = dict(bounds or {})
  plist = [parse_param(p, bounds) for p in ([params] if isinstance(params, (str, Param)) else params)]
  unknown = sorted(set(bounds) - {p.name for p in plist})
  if unknown:
    raise ValueError(f"bounds name unknown parameters {unknown}; parameters are {[p.name for p in plist]}")
  # the MJCF values in float64 (Param.nominal goes through the float32 device model)
  return ParamVector.check(mjm, plist)


def _check_writable(out, source, vector: ParamVector) -> None:
  """Refuses an output folder, or a parameter `model.xml` cannot hold, before the solve."""
  check_out(out, source)
  if not isinstance(source, mujoco.MjModel):
    try:
      identified_spec(source, vector.params, vector.nominal)
    except ValueError as e:
      raise ValueError(f"cannot write the identified parameters to model.xml: {e}") from None


def _reporter(bar, callback, vector: ParamVector):
  """The solvers' `report(nit, fun, theta) -> stop`: the progress bar, then the user's callback."""

  def report(nit: int, fun: float, theta: np.ndarray) -> bool:
    bar.update(nit - bar.n)
    bar.set_postfix(cost=f"{fun:.4g}")
    return optim.stop_requested(callback, optim.Iterate(nit, fun, read_x=lambda: vector.named(theta)))

  return report


def _assemble(prob: Problem, vector: ParamVector, theta0: np.ndarray, outcome: SolverOutcome, *, method: str,
              jacobian: str, central: bool, xtol: float, t0: float, source) -> SysIdResult:
  """The `SysIdResult` of the best start: its final state, confidence and signals."""
  xs, f, hist = outcome.x, outcome.fun, outcome.history
  best = int(np.argmin(f))
  theta = xs[:, :prob.nparam]
  used = outcome.jacobian
  # final state: cost, curvature for the confidence, and the simulated signals for the plots; LM
  # usually ends on a rollout at the accepted point, which already has all three
  if method == "lm" and np.array_equal(prob.last_x[best], xs[best]):
    ne, fun, sb, after = outcome.normal, float(f[best]), best, prob.samples(best)
  else:
    ne = prob.linearize(np.repeat(xs[best:best + 1], prob.nstart, axis=0), jacobian=used)
    fun, sb, after = float(ne.cost[0]), 0, prob.samples(0)
  wall = time.perf_counter() - t0
  jac_std = outcome.jacobian_std[best] if outcome.jacobian_std is not None else np.zeros(prob.nparam)
  cov, std, corr, cond, msgs, data_std = confidence(
    ne, sb, fun, prob.nresidual, prob.nunknown, vector.labels, nseries=prob.nseries, theta=theta[best],
    jacobian_std=jac_std,
    resolution=xtol if method == "lm" else 2.0 ** -24,
    # at a minimum only: elsewhere the misfit is the error
    positive=(vector.lower >= 0.0) if outcome.success[best] else None)
  message = str(outcome.message[best]) + "".join(f"; warning: {m}" for m in msgs)
  # the solver's differentiated rollout: LM's linearization, or the tape's (Adam)
  sim_ro = prob.forward_mode if method == "lm" and used == "directional" else prob.rollout
  qpos0, qvel0 = prob.unknowns.initial_state(xs[best])
  first = [g for g, sg in enumerate(prob.worlds.segs) if sg.row0 == 0]  # each recording's first world
  return SysIdResult(
    x=vector.named(theta[best]), fun=fun, nit=int(outcome.nit), success=bool(outcome.success[best]), message=message,
    history={k: np.array([h[best] for h in hist[k]]) for k in ("fun", "x", "lambda")}, time=wall, method=method,
    std=vector.named(std), std_data=vector.named(data_std), x0=vector.named(theta0[best]),
    fun0=float(hist["fun"][0][best]), nfev=prob.nrollout, labels=vector.labels, theta=theta[best].copy(),
    theta0=theta0[best].copy(), theta_std=std, theta_std_data=data_std, cov=cov, corr=corr, cond=cond, warnings=msgs,
    starts_fun=np.asarray(f, dtype=np.float64), starts_fun0=np.asarray(hist["fun"][0], dtype=np.float64),
    nresidual=prob.nresidual, sim_worlds=getattr(sim_ro, "nlane", sim_ro.fd.nlane) * prob.nworld,
    jacobian=jacobian_name(used, central), constraint_changes=int(ne.changes[sb]),
    bounds={p.name: (lo, hi) for p, lo, hi in zip(vector.params, vector.named(vector.lower).values(),
                                                  vector.named(vector.upper).values())},
    initial_qpos=[qpos0[g] for g in first], initial_qvel=[qvel0[g] for g in first],
    derivatives=_derivative_paths(prob, vector, method, used),
    signals=Signals(prob.mjm, prob.worlds.recs, outcome.initial_signals, after), source=source,
    params=vector.params)
