"""Gauss-Newton normal equations in block-arrow form, solved by eliminating the initial states (Schur).

Per start, the unknowns are the parameters `theta` (`nparam`), then one nuisance block (an initial
state, `nblock` values) per world whose initial state is solved for (`nfree` of them). A world's
residuals depend on the parameters and on its own block only, so

  J^T J = [ H_tt    H_tn_1  ...  H_tn_m ]        J^T r = [ g_t   ]
          [ H_tn_1' H_nn_1              ]                [ g_n_1 ]
          [ ...            ...          ]                [ ...   ]
          [ H_tn_m'               H_nn_m]                [ g_n_m ]

and each block `H_nn_i` is eliminated on its own:
`S = H_tt - sum_i H_tn_i H_nn_i^-1 H_tn_i'` (the Schur complement), so thousands of shooting
segments cost thousands of small `nblock x nblock` solves, not one large one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class NormalEquations:
  """`J^T J` and `J^T r` of every start, in block-arrow form (t: the parameters theta, n: the nuisance
  unknowns, initial states), with what `linearize` measured along the way."""

  cost: np.ndarray  # (nstart,) 0.5 |r|^2
  Htt: np.ndarray  # (nstart, nparam, nparam)
  Htn: np.ndarray  # (nstart, nfree, nparam, nblock)
  Hnn: np.ndarray  # (nstart, nfree, nblock, nblock)
  gt: np.ndarray  # (nstart, nparam)
  gn: np.ndarray  # (nstart, nfree, nblock)
  rho: np.ndarray  # (nstart,) lag-1 autocorrelation of the residuals along time (see `confidence.data_std`)
  changes: np.ndarray  # (nstart,) constraint-set changes along the nominal trajectories (see `Problem.linearize`)
  constrained: np.ndarray | None = None  # (nstart,) steps with constraint rows along them, worlds summed

  def take(self, s: int, other: NormalEquations) -> None:
    """Copies start `s` of `other` into this one."""
    for f in ("cost", "Htt", "Htn", "Hnn", "gt", "gn", "rho", "changes", "constrained"):
      if getattr(self, f) is not None:
        getattr(self, f)[s] = getattr(other, f)[s]

  def g(self, s: int) -> np.ndarray:
    """`(nunknown,)` gradient `J^T r` of start `s`."""
    return np.concatenate([self.gt[s], self.gn[s].reshape(-1)])

  def quad(self, s: int, d: np.ndarray) -> float:
    """`d^T H d` for start `s`."""
    nparam, (nfree, nblock) = self.gt.shape[1], self.gn.shape[1:]
    dt, dn = d[:nparam], d[nparam:].reshape(nfree, nblock)
    return float(dt @ self.Htt[s] @ dt + 2.0 * np.einsum("i,mik,mk->", dt, self.Htn[s], dn)
                 + np.einsum("mi,mij,mj->", dn, self.Hnn[s], dn))

  def diag(self, s: int) -> np.ndarray:
    """`(nunknown,)` diagonal of `J^T J` of start `s`."""
    return np.concatenate([np.diag(self.Htt[s]), np.einsum("mkk->mk", self.Hnn[s]).reshape(-1)])

  def solve(self, s: int, damp: np.ndarray) -> np.ndarray:
    """Solves `(H + diag(damp)) d = -g` for start `s` by eliminating the nuisance blocks (Schur)."""
    nparam, (nfree, nblock) = self.gt.shape[1], self.gn.shape[1:]
    At = self.Htt[s] + np.diag(damp[:nparam])
    if nfree == 0:
      return _solve(At, -self.gt[s])
    An = self.Hnn[s] + damp[nparam:].reshape(nfree, nblock)[:, :, None] * np.eye(nblock)
    An_inv_Hnt = np.linalg.solve(An, np.transpose(self.Htn[s], (0, 2, 1)))  # (nfree, nblock, nparam)
    An_inv_gn = np.linalg.solve(An, self.gn[s][..., None])[..., 0]  # (nfree, nblock)
    schur = At - np.einsum("mik,mkj->ij", self.Htn[s], An_inv_Hnt)
    rhs = -self.gt[s] + np.einsum("mik,mk->i", self.Htn[s], An_inv_gn)
    dt = _solve(schur, rhs)
    dn = -An_inv_gn - np.einsum("mkj,j->mk", An_inv_Hnt, dt)
    return np.concatenate([dt, dn.reshape(-1)])

  def schur(self, s: int) -> np.ndarray:
    """`(nparam, nparam)` parameter block of `J^T J` with the nuisance unknowns eliminated: the
    inverse of the parameters' covariance (up to the residual variance)."""
    nblock = self.gn.shape[2]
    if self.gn.shape[1] == 0:
      return self.Htt[s].copy()
    d = np.einsum("mkk->mk", self.Hnn[s])
    # a nuisance direction with no effect at all is pinned (it cannot inform the parameters)
    eye = np.eye(nblock)
    reg = np.where(d > 0, 0.0, 1.0)[:, :, None] * eye + 1e-12 * d.max(initial=0.0) * eye
    Hnn_inv_Hnt = np.linalg.solve(self.Hnn[s] + reg, np.transpose(self.Htn[s], (0, 2, 1)))
    return self.Htt[s] - np.einsum("mik,mkj->ij", self.Htn[s], Hnn_inv_Hnt)


def _solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
  try:
    return np.linalg.solve(A, b)
  except np.linalg.LinAlgError:
    return np.linalg.lstsq(A, b, rcond=None)[0]
