"""Input checks of trajectory problems (host only: they run before anything is allocated or launched)."""

from __future__ import annotations

import numpy as np
import warp as wp


def host_array(x, name: str) -> np.ndarray:
  """`x` (a `wp.array` or array-like) as a float64 NumPy array, or a TypeError naming `name`."""
  if isinstance(x, wp.array):
    return x.numpy().astype(np.float64)
  try:
    return np.asarray(x, dtype=np.float64)
  except (TypeError, ValueError) as e:
    raise TypeError(f"{name} must be an array of numbers, got {type(x).__name__}: {e}") from None


def per_world_step(x, name: str, nworld: int, nstep: int, nu: int) -> np.ndarray:
  """Broadcasts (), (nu,), (nworld, nu), (nstep, nu) or a 3-D array broadcastable to
  (nworld, nstep, nu) (e.g. (nworld, 1, nu), (1, nstep, nu)) to (nworld, nstep, nu)."""
  a = host_array(x, name)
  if a.ndim == 2 and a.shape[1] == nu and nworld == nstep and nworld > 1:
    raise ValueError(f"{name} of shape {a.shape} is ambiguous: nworld and horizon are both {nworld}; pass "
                     f"(nworld, 1, nu) for one value per world or (1, horizon, nu) for one per step")
  if a.ndim == 2 and a.shape == (nworld, nu):
    a = a[:, None]
  elif a.ndim == 2 and a.shape == (nstep, nu):
    a = a[None]
  ok = a.ndim == 0 or a.shape == (nu,) or (a.ndim == 3 and a.shape[0] in (1, nworld) and a.shape[1] in (1, nstep)
                                            and a.shape[2] == nu)
  if not ok:
    raise ValueError(f"{name} must have shape (nworld={nworld}, horizon={nstep}, nu={nu}), or one that broadcasts "
                     f"to it ((nworld, 1, nu), (1, horizon, nu)), (nworld, nu), (horizon, nu), (nu,) or be a "
                     f"scalar; got {a.shape}")
  return np.broadcast_to(a, (nworld, nstep, nu))


def initial_state(x, name: str, nworld: int, width: int, default: np.ndarray | None) -> np.ndarray:
  """`(nworld, width)` initial state from `(nworld, width)` or `(width,)` (`None`: `default`)."""
  a = default if x is None else host_array(x, name)
  if a.ndim == 1 and a.shape[0] == width:
    a = np.broadcast_to(a, (nworld, width))
  if a.shape != (nworld, width):
    raise ValueError(f"{name} must have shape (nworld={nworld}, {width}) or ({width},), got {a.shape}")
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{name} contains NaN/Inf")
  return a


def clipped_controls(x, name: str, nworld: int, nstep: int, nu: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
  """Controls `(nworld, nstep, nu)` from any shape `per_world_step` takes (`None`: zeros), clipped to
  `[lo, hi]`."""
  ctrl = np.zeros((nworld, nstep, nu)) if x is None else per_world_step(x, name, nworld, nstep, nu)
  if not np.all(np.isfinite(ctrl)):
    raise ValueError(f"{name} contains NaN/Inf")
  return np.clip(ctrl, lo, hi)
