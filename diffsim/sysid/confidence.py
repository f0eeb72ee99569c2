"""Confidence of the identified parameters: covariance, std and identifiability warnings.

At the solution, `cov = s^2 (J^T J)^-1` with `s^2 = 2 cost / (nresidual - nunknown)` (the residual
variance; with weights `1 / sigma` it is about 1), marginalized over the initial states solved for
(`NormalEquations.schur`), with `s^2` multiplied by `(1 + rho) / (1 - rho)` for residuals with lag-1
autocorrelation `rho` along time (`data_std`): the misfit of a float32 simulation of noise-free data
drifts (`rho` close to 1), and the plain formula puts the truth tens to hundreds of std away. The
factor is at most the samples per residual series: a series that drifts as one smooth piece (`rho`
at or numerically above 1) counts as one sample, not as fewer. To
that (`SysIdResult.std_data`) the std adds in quadrature what the solver leaves open: the other
Jacobian's step at the solution (their disagreement), the step still proposed (divided by `1 - q`
where steps shrink by `q` per iteration) and `xtol` times the value (the float32 resolution LM
claims, which noise-free data reach). The summary marks a std these dominate as
"Jacobian-limited", and warns when it exceeds 1e-4 of the value.

A parameter the residuals do not depend on, or a combination they do not depend on (an eigenvalue
of `J^T J` scaled to a unit diagonal below `NULL_EIG` of the largest), is reported as not
identifiable, with `std = inf`; a condition number above `COND_WARN` as ill-conditioned, naming the
parameters involved; a positive quantity (mass, damping, ...) whose std exceeds its value as poorly
determined (the servo of a joint the recordings do not move). `tests/test_sysid_errorbars.py`
checks the std against the actual error over noise seeds.
"""

from __future__ import annotations

import numpy as np

from .normal import NormalEquations


class IdentifiabilityWarning(UserWarning):
  """The data do not determine some parameter (or combination) well."""


# Identifiability thresholds on the parameters' information scaled to a unit diagonal (the Gram
# matrix of the unit-normalized Jacobian columns). The columns are float32 forward differences of
# MJWarp rollouts, each off by a relative delta ~ 1e-4..1e-3, so a combination v that the data do
# not depend on at all (true J v = 0, |v| = 1) still shows an eigenvalue |E v|^2 ~ delta^2, up to
# 1e-6 (a pendulum's armature and hinge-axis inertia, which act only as their sum), and a small
# singular value sigma is uncertain by ~delta, so its std (~ 1/sigma) by delta / sigma. Taken
# relative to the largest eigenvalue (>= 1, the trace being n), as the condition number is:
NULL_EIG = 1e-6  # below: no information beyond finite-difference noise (std = inf)
COND_WARN = 1e5  # above (sigma_min / sigma_max < 3e-3): the std may be off by tens of percent

# Residuals whose lag-1 autocorrelation is this close to 1 count as this correlated (see `data_std`)
_RHO_MAX = 1.0 - 1e-6


def _inflation(rho: float, most: float = np.inf) -> float:
  """Variance factor `(1 + rho) / (1 - rho)` of residuals correlated along time with lag-1
  autocorrelation `rho` (an AR(1) process; 1 for white noise, negative `rho` counted as 0), at most
  `most`: the samples per residual series, where a series that drifts as one piece (`rho` at 1)
  still counts as one sample."""
  r = min(max(float(rho), 0.0), _RHO_MAX)
  return min((1.0 + r) / (1.0 - r), most)


def data_std(ne: NormalEquations, s: int, fun: float, nresidual: int, nunknown: int, *,
             correlated: bool = True, nseries: int = 1) -> np.ndarray:
  """`(nparam,)` std of the parameters of start `s` that the misfit left supports: `s^2 (J^T J)^-1`
  with the residual variance `s^2 = 2 cost / (nresidual - nunknown)`, times `_inflation(rho)` for
  residuals correlated along time (`NormalEquations.rho`; `correlated=False`: not), at most the
  samples per series (`nresidual / nseries`: one effective sample per residual series).

  The usual formula counts every residual as an independent sample: right for white measurement
  noise (`rho ~ 0`), but the misfit of a float32 simulation of noise-free data, or of a model
  that lacks some physics, drifts smoothly (`rho` close to 1), and there it puts the truth tens to
  hundreds of std away (`benchmarks/bench_sysid.py`'s arm, smooth and at joint limits); the AR(1)
  factor (one effective sample per correlation length) brings it to a few std.
  """
  s2 = 2.0 * fun / max(nresidual - nunknown, 1) * (_inflation(ne.rho[s], nresidual / max(nseries, 1))
                                                    if correlated else 1.0)
  return np.sqrt(s2 * np.clip(np.diag(np.linalg.pinv(ne.schur(s))), 0.0, None))


def confidence(ne: NormalEquations, s: int, fun: float, nresidual: int, nunknown: int, labels: list[str], *,
               theta: np.ndarray | None = None, jacobian_std: np.ndarray | None = None,
               resolution: float = 2.0 ** -24, cond_warn: float = COND_WARN, null_eig: float = NULL_EIG,
               positive: np.ndarray | None = None, nseries: int = 1):
  """Covariance of the parameters from the Gauss-Newton Hessian, and identifiability warnings.

  The parameters' information matrix is `J^T J` with the nuisance unknowns (initial states)
  eliminated (`NormalEquations.schur`), so their uncertainty counts. The analysis works on it scaled
  to a unit diagonal (the correlation form), so units and magnitudes (a parameter at zero, say) do
  not matter: a zero column of `J` means the data do not depend on a parameter; a (near-)zero
  eigenvalue that only a combination of some (or of them and the initial state) does.

  The covariance is the data's (`data_std`: the misfit, correlated along time) plus, on the
  diagonal, what the solver leaves open: `jacobian_std` (the Jacobians' disagreement and the step
  still proposed, see `lm`) and the relative `resolution` of the float32 solve (LM: its `xtol`,
  the relative step below which it calls further steps float32 noise: parameters from noise-free
  float64 data land that close to the truth, often farther than the data's std alone allows).
  A std that the solver's terms dominate is named in a warning when it exceeds 1e-4 of the value.

  Args:
    ne: normal equations at the solution; `s`: the start.
    fun: cost at the solution.
    nresidual: number of weighted residuals; `nunknown`: number of unknowns (parameters and nuisance).
    labels: `(nparam,)` names of the parameters.
    theta: `(nparam,)` the values (for the resolution); `jacobian_std`: `(nparam,)`, default 0.
    resolution: relative resolution of the values (default: float32's, 2^-24).
    cond_warn: warn when the condition number of the scaled parameter information exceeds this.
    null_eig: eigenvalues of the scaled information below this fraction of the largest (and
      parameters keeping less than this fraction of their information once the initial states are
      eliminated) count as zero: float32 finite-difference Jacobians resolve no finer.
    nseries: residual series (a world's signal along time), for `data_std`'s bound on the inflation.
    positive: `(nparam,)` which parameters are positive quantities (lower bound 0 or above): one
      whose std exceeds its value is named in a warning. The scaled analysis above cannot see that:
      a parameter the data barely touch (the servo of a joint that does not move) keeps a column
      independent of the others, only tiny, and its std, however large, would otherwise pass unnamed.

  Returns:
    `(cov (nparam, nparam), std (nparam,), corr (nparam, nparam), cond, warnings, data_std (nparam,))`.
  """
  n = len(labels)
  s2 = 2.0 * fun / max(nresidual - nunknown, 1) * _inflation(ne.rho[s], nresidual / max(nseries, 1))
  theta = np.zeros(n) if theta is None else np.asarray(theta, dtype=np.float64)
  jstd = np.zeros(n) if jacobian_std is None else np.asarray(jacobian_std, dtype=np.float64)
  info = _ScaledInformation(ne, s, null_eig)
  cov = np.full((n, n), np.nan)
  keep = info.keep
  if keep.size:
    cov[np.ix_(keep, keep)] = s2 * info.pinv * info.scale[:, None] * info.scale[None, :]
  data = np.sqrt(np.clip(np.diag(cov), 0.0, None))
  jstd = np.hypot(jstd, np.abs(theta) * max(resolution, 2.0 ** -24))
  cov[keep, keep] += jstd[keep] ** 2
  std = np.sqrt(np.clip(np.diag(cov), 0.0, None))
  bad = info.zero | info.combination
  data[bad] = np.inf
  std[bad] = np.inf
  cov[bad, :] = np.nan
  cov[:, bad] = np.nan
  msgs = _warnings(info, labels, theta, std, data, jstd, cond_warn, positive)
  with np.errstate(invalid="ignore", divide="ignore"):
    corr = cov / np.outer(std, std)
  return cov, std, corr, info.cond, msgs, data


class _ScaledInformation:
  """The parameters' information (`NormalEquations.schur`) scaled to a unit diagonal: which
  parameters it does not determine, its eigenvectors, condition number and pseudo-inverse."""

  def __init__(self, ne: NormalEquations, s: int, null_eig: float):
    plain = np.diag(ne.Htt[s]).copy()
    schur = ne.schur(s)
    diag = np.diag(schur).copy()
    self.zero = plain <= 1e-24 * max(plain.max(initial=0.0), 1e-300)
    # information lost to the nuisance unknowns almost entirely: only a combination is determined
    lost = ~self.zero & (diag <= null_eig * plain)
    self.keep = np.nonzero(~self.zero & ~lost)[0]
    self.combination = lost.copy()
    self.cond = np.inf
    self.eigvec = None
    if self.keep.size:
      self.scale = 1.0 / np.sqrt(diag[self.keep])
      scaled = schur[np.ix_(self.keep, self.keep)] * self.scale[:, None] * self.scale[None, :]
      lam, self.eigvec = np.linalg.eigh(scaled)
      null = lam <= null_eig * lam[-1]
      self.pinv = (self.eigvec[:, ~null] / lam[~null]) @ self.eigvec[:, ~null].T
      if null.any():
        self.combination[self.keep[np.abs(self.eigvec[:, null]).max(axis=1) > 0.1]] = True
      self.cond = float(lam[-1] / max(lam[0], 1e-300))


def _warnings(info: _ScaledInformation, labels, theta, std, data, jstd, cond_warn, positive) -> list[str]:
  """The identifiability messages of `confidence`."""
  msgs = []
  keep = info.keep
  none = np.nonzero(info.zero)[0]
  if none.size:
    msgs.append("not identifiable from this data: " + ", ".join(labels[i] for i in none)
                + " (the residuals do not depend on it; excite it, or fix it at a known value)")
  if info.combination.any():
    msgs.append("not identifiable from this data: " + ", ".join(labels[i] for i in np.nonzero(info.combination)[0])
                + " (only a combination of them, or with the unknown initial state, affects the residuals; "
                  "fix all but one, or add data that separates them)")
  elif info.eigvec is not None and np.isfinite(info.cond) and info.cond > cond_warn:
    v = np.abs(info.eigvec[:, 0])
    worst = [labels[keep[i]] for i in np.argsort(-v)[:max(2, int((v > 0.3).sum()))]]
    msgs.append(f"ill-conditioned (condition number {info.cond:.2g} of the scaled Gauss-Newton Hessian): "
                f"{', '.join(worst)} are nearly interchangeable in this data; their std is large")
  vague = [i for i in keep if positive is not None and positive[i] and np.isfinite(std[i]) and std[i] > abs(theta[i])]
  if vague:
    msgs.append("poorly determined by this data: " + ", ".join(
      f"{labels[i]} (std {std[i]:.2g} exceeds the value {theta[i]:.2g})" for i in vague)
      + ": the recordings barely excite it; add motion that does, or fix it at a known value")
  limited = [i for i in keep if jstd[i] > data[i] and jstd[i] > 1e-4 * abs(theta[i])]
  if limited:
    msgs.append("the Jacobian limits the precision of " + ", ".join(
      f"{labels[i]} (std {std[i]:.2g}, of which the data's {data[i]:.2g})" for i in limited)
      + ": the two finite-difference Jacobians disagree there, or the solver stopped with a step left "
        "(constraint switches along the trajectories make the cost non-smooth); the std includes it")
  return msgs
