"""What `identify` returns (`SysIdResult`), what its solvers hand it (`SolverOutcome`), and saving to a folder."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np

from .. import data as _data
from ..optim import OptimizeResult
from .mjcf import write_mjcf


@dataclass
class SolverOutcome:
  """What a solver (`lm`, `adam`) hands `identify`, per start.

  Attributes:
    x: `(nstart, nunknown)` the unknowns (parameters, then initial states); fun: `(nstart,)` costs.
    history: `{"fun", "x", "lambda"}`, lists of `(nstart,)`, `(nstart, nparam)`, `(nstart,)` per iteration.
    nit: iterations; success: `(nstart,)` bool; message: `(nstart,)` why each stopped.
    normal: LM's normal equations at `x` (`None` for Adam); jacobian: the Jacobian they came from.
    jacobian_std: `(nstart, nparam)` what the Jacobians leave open (see `lm`), 0 for Adam.
    initial_signals: simulated signals of start 0 at the initial guess (`Problem.samples`).
    interrupted: whether the callback stopped the solver.
  """

  x: np.ndarray
  fun: np.ndarray
  history: dict
  nit: int
  success: np.ndarray
  message: np.ndarray
  initial_signals: list
  normal: Any = None
  jacobian: str = "forward"
  jacobian_std: np.ndarray | None = None
  interrupted: bool = False


@dataclass
class Signals:
  """Measured and simulated signals of each recording, for `diffsim.plot.sysid_plots`.

  Attributes:
    model: the host `MjModel` (names of joints and sensors).
    recordings: the `diffsim.data.Recording`s.
    before, after: per recording, the simulated `{kind: (nrow, columns)}` at its rows, at the
      initial guess and at the solution (of the best start).
  """

  model: mujoco.MjModel
  recordings: list
  before: list
  after: list


@dataclass(kw_only=True)
class SysIdResult(OptimizeResult):
  """Outcome of `identify` (scipy-style: `x`, `fun`, `nit`, `success`, `message`, `history`, `time`, `method`).

  Attributes:
    x: identified value by parameter name (float, or `(dim,)` array for vector parameters).
    fun: final cost `0.5 |r|^2` (weighted residuals).
    nit: iterations.
    success: whether the solver converged to a minimum: a stopping test fired and, where the
      trajectories cross constraint switches, the other Jacobian found no step beyond the
      tolerances that lowers the cost (see `diffsim.sysid.lm`). `False` for a stall, with a
      message that says what to try, and when the callback stopped the solver.
    message: why the solver stopped, plus identifiability warnings.
    history: `{"fun": (nit + 1,), "x": (nit + 1, nparam), "lambda": (nit + 1,)}` of the best start.
    time: seconds spent solving (the first iteration includes kernel compilation when the cache is cold).
    method: `"lm"` or `"adam"`.
    std: standard deviation by name (same shapes; `inf` where the data do not determine it): the
      data's (`std_data`) with what the solver leaves open added in quadrature, the Jacobians'
      disagreement and the step still proposed at the end (see `diffsim.sysid.confidence`).
    std_data: the part of `std` the data support, by name (the misfit left, correlated along time).
    x0: initial guess by name (of the best start, with `starts`).
    fun0: cost at the initial guess (of the best start, like `x0` and `history`).
    nfev: rollouts run.
    labels: `(nparam,)` name of each identified scalar (dof fields: one per joint, as MJCF stores them).
    theta, theta0, theta_std, theta_std_data: `(nparam,)` flat values.
    cov: `(nparam, nparam)` covariance; corr: its correlation matrix.
    cond: condition number of the scaled Gauss-Newton Hessian.
    warnings: identifiability warnings.
    starts_fun: `(nstart,)` final cost of every start; starts_fun0: `(nstart,)` their initial costs.
    nresidual: number of weighted residuals.
    sim_worlds: MJWarp worlds the solver's differentiated rollout steps (worlds times lanes).
    jacobian: the residual Jacobian LM used last (`"forward"`, `"directional"`, `"tape"`).
    constraint_changes: steps at which the nominal trajectories' constraint rows changed (limits or
      contacts engaging or releasing), summed over the worlds, at the solution.
    bounds: `{name: (lower, upper)}`.
    initial_qpos: `(nq,)` initial position of each recording (row 0, or solved for: `fit_qpos0`).
    initial_qvel: `(nv,)` initial velocity of each recording: measured, or solved for together
      with the parameters when the recording has no `qvel` (see `fit_qvel0`).
    derivatives: `{name: phrase}`, how the solver differentiated each parameter (finite-difference
      lanes or the analytic adjoint) and whether the adjoint covers it in this model.
    save_error: why writing `identify(out=...)`'s files failed, or `None` (the files were written).
    signals: measured and simulated signals for the plots (`Signals`), or `None`.
    source: the model as `identify` got it (an MJCF path made absolute, XML, `MjSpec` or `MjModel`):
      `save` writes `model.xml` from it.
    params: the identified `Param`s.
  """

  std: dict
  x0: dict
  fun0: float
  nfev: int
  labels: list
  theta: np.ndarray
  theta0: np.ndarray
  theta_std: np.ndarray
  cov: np.ndarray
  corr: np.ndarray
  cond: float
  warnings: list
  starts_fun: np.ndarray
  nresidual: int
  method: str = "lm"
  starts_fun0: np.ndarray = field(default_factory=lambda: np.zeros(0))
  sim_worlds: int = 0
  std_data: dict = field(default_factory=dict)
  theta_std_data: np.ndarray = field(default_factory=lambda: np.zeros(0))
  jacobian: str = "forward"
  constraint_changes: int = 0
  bounds: dict = field(default_factory=dict)
  initial_qpos: list = field(default_factory=list)
  initial_qvel: list = field(default_factory=list)
  save_error: str | None = None
  derivatives: dict = field(default_factory=dict)
  signals: Signals | None = field(default=None, repr=False)
  source: object = field(default=None, repr=False)
  params: list = field(default_factory=list, repr=False)

  def summary(self) -> str:
    """One line: cost before and after, iterations, time, and each parameter with its std."""
    parts = []
    for name in self.x:
      v, s, v0 = (np.atleast_1d(d[name]) for d in (self.x, self.std, self.x0))
      fmt = lambda a: ", ".join(f"{e:.6g}" for e in a) if a.size > 1 else f"{a[0]:.6g}"
      # a std that the data alone would put below half its value comes mostly from the solver
      sdata = np.atleast_1d(self.std_data.get(name, s))
      note = " (Jacobian-limited)" if np.any(np.isfinite(s) & (sdata < 0.5 * s)) else ""
      parts.append(f"{name} = {fmt(v)} ± {fmt(s)}{note} (from {fmt(v0)})")
    status = "converged" if self.success else "NOT converged"
    if np.size(self.starts_fun0) > 1:
      status += f" (best of {np.size(self.starts_fun0)} starts)"
    return (f"sysid {status}: cost {self.fun0:.4g} -> {self.fun:.4g} in {self.nit} iterations "
            f"({self.time:.1f} s); " + "; ".join(parts))

  def save(self, out, *, plots: bool = True, truth: dict | None = None) -> dict[str, str]:
    """Writes `params.json`, the identified `model.xml` and PNG plots into folder `out`.

    Every file goes through a temporary file and a rename, so a failure leaves earlier files intact.
    `params.json` comes first (a failure there raises at once); when `model.xml` cannot be written
    (the identified values do not compile, e.g. a body inertia violating the triangle inequality),
    the plots are still written, and then a `ValueError` says why. The results of an earlier run in
    `out` are replaced, and its plots that this run does not draw (`signals_2.png` of a run with
    more recordings, or all of them with `plots=False`) are removed, so the folder holds one run.
    A folder whose `model.xml` is the input model is refused before anything is written.

    Args:
      out: folder (created if missing).
      plots: write `signals.png` (measured vs simulated before/after), `cost.png`, `params.png`.
      truth: `{name: value}` drawn as reference lines in `params.png` (for synthetic data).

    Returns:
      `{kind: path}` with kinds `params_json`, `model`, `signals` (`signals_1`, ...), `cost`,
      `params_plot`.
    """
    out = os.fspath(out)
    check_out(out, self.source)
    earlier = os.path.isfile(os.path.join(out, "params.json"))
    os.makedirs(out, exist_ok=True)
    files = {}
    path = os.path.join(out, "params.json")
    _data.atomic_write(path, lambda f: f.write(json.dumps(self.to_json(), indent=2).encode()))
    files["params_json"] = path
    failed = None
    if self.source is not None and not isinstance(self.source, mujoco.MjModel):
      path = os.path.join(out, "model.xml")
      try:
        write_mjcf(self.source, self.params, self.theta, path)
        files["model"] = path
      except ValueError as e:
        failed = e
    else:
      warnings.warn("the model was given as an MjModel, which cannot be written back as MJCF; pass the MJCF "
                    "path to identify() to get model.xml", stacklevel=2)
    if plots and self.signals is not None:
      from .. import plot

      files.update(plot.sysid_plots(self, out, truth=truth))
    if earlier:  # an earlier run's plots that this one did not redraw would pass for this run's
      from ..plot import PLOT_FILES

      written = {os.path.basename(f) for f in files.values()}
      for name in PLOT_FILES:
        if name not in written and os.path.isfile(os.path.join(out, name)):
          os.remove(os.path.join(out, name))
    if failed is not None:
      raise ValueError(f"model.xml not written: {failed} ({', '.join(os.path.basename(f) for f in files.values())} "
                       f"written to {out})")
    return files

  def to_json(self) -> dict:
    """`{name: {"initial", "value", "std", "std_data", "lower", "upper"}}`, JSON-ready (inf and NaN: `null`)."""

    def conv(a):
      a = np.atleast_1d(np.asarray(a, dtype=np.float64))
      vals = [float(e) if np.isfinite(e) else None for e in a]
      return vals[0] if len(vals) == 1 else vals

    return {name: {"initial": conv(self.x0[name]), "value": conv(self.x[name]), "std": conv(self.std[name]),
                   "std_data": conv(self.std_data.get(name, self.std[name])),
                   "lower": conv(self.bounds[name][0]), "upper": conv(self.bounds[name][1])}
            for name in self.x}


def check_out(out, source) -> None:
  """Refuses an output folder that is a file, or whose `model.xml` would replace the input model."""
  out = os.fspath(out)
  if os.path.exists(out) and not os.path.isdir(out):
    raise ValueError(f"out={out!r} is a file, not a folder: pass a folder for params.json, model.xml and the plots")
  if isinstance(source, str) and os.path.isfile(source) and \
      os.path.realpath(os.path.join(out, "model.xml")) == os.path.realpath(source):
    raise ValueError(f"writing the identified model to {os.path.join(out, 'model.xml')!r} would overwrite the input "
                     f"model {source!r}: choose another output folder")
