"""A recorded trajectory: `Recording`, `DataError`, and the checks that need no model.

The conventions (rows, units, what is optional) are in `diffsim.data`'s docstring.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = ["Recording", "DataError", "check_structure", "initial_state_warning", "TIME_RTOL", "PERIOD_RTOL"]

_KINDS = ("qpos", "qvel", "sensordata")  # measured signals, in residual order
TIME_RTOL = 1e-4  # sample times may deviate from the dt grid by this fraction of dt (float round-off)
# A sample interval may differ from a whole number n of steps by this fraction of n dt: a timestep written
# with six digits (1/480 s as 0.00208333) is 2e-7 relative off, 16 of its steps against 1/30 s 1.6e-6.
PERIOD_RTOL = 1e-5


class DataError(ValueError):
  """Recorded data that cannot be used; the message names the problem and how to fix it."""


@dataclass
class Recording:
  """One recorded trajectory of `T` rows (see `diffsim.data` for the conventions).

  Attributes:
    time: `(T,)` float64 sample times, s.
    ctrl: `(T, nu)` float64 controls (`ctrl[k]` held from `time[k]` to `time[k + 1]`), or `None`.
    qpos: `(T, nq)` float64 joint positions, or `None`.
    qvel: `(T, nv)` float64 joint velocities, or `None`.
    sensordata: `(T, nsensordata)` float64 sensor values, or `None`.
    act: `(T, na)` float64 activations, or `None`.
    sensor_mask: `(nsensordata,)` bool, which sensor columns were measured (`None`: all).
    qpos0: `(nq,)` initial positions, when `qpos` is not recorded (else row 0 of `qpos`).
    qvel0: `(nv,)` initial velocities, when `qvel` is not recorded (else row 0 of `qvel`, or an
      estimate from `qpos`).
    source: where it came from, used in error messages.
  """

  time: np.ndarray
  ctrl: np.ndarray | None = None
  qpos: np.ndarray | None = None
  qvel: np.ndarray | None = None
  sensordata: np.ndarray | None = None
  act: np.ndarray | None = None
  sensor_mask: np.ndarray | None = None
  qpos0: np.ndarray | None = None
  qvel0: np.ndarray | None = None
  source: str = "recording"

  def __post_init__(self):
    for k in ("time", "ctrl", "qpos", "qvel", "sensordata", "act", "qpos0", "qvel0"):
      v = getattr(self, k)
      if v is not None:
        try:
          setattr(self, k, np.asarray(v, dtype=np.float64))
        except (TypeError, ValueError) as e:
          raise DataError(f"{self.source}: {k!r} is not numeric ({e})") from None
    if self.sensor_mask is not None:
      self.sensor_mask = np.asarray(self.sensor_mask, dtype=bool)

  @property
  def nrow(self) -> int:
    return int(self.time.shape[0])

  @property
  def kinds(self) -> list[str]:
    """The measured signals among `qpos`, `qvel`, `sensordata`."""
    return [k for k in _KINDS if getattr(self, k) is not None]

  def duration(self) -> float:
    return float(self.time[-1] - self.time[0])


def check_structure(rec: Recording) -> None:
  src = rec.source
  t = rec.time
  if t is None:
    raise DataError(f"{src}: missing 'time' (sample times in s, shape (T,))")
  if t.ndim != 1:
    raise DataError(f"{src}: 'time' must have shape (T,), got {t.shape}")
  if t.shape[0] < 2:
    raise DataError(f"{src}: needs at least 2 time samples, got {t.shape[0]}")
  if not rec.kinds:
    raise DataError(f"{src}: nothing measured; give at least one of 'qpos' (T, nq), 'qvel' (T, nv) or "
                    "'sensordata' (T, nsensordata)")
  T = t.shape[0]
  for k in ("ctrl", "qpos", "qvel", "sensordata", "act"):
    v = getattr(rec, k)
    if v is None:
      continue
    if v.ndim != 2:
      raise DataError(f"{src}: {k!r} must have shape (T, columns), got {v.shape}")
    if v.shape[0] != T:
      raise DataError(f"{src}: {k!r} has {v.shape[0]} rows but 'time' has {T}: every array needs one row per "
                      "time sample (trim the longer one or fix the export)")
  for k in ("qpos0", "qvel0"):
    v = getattr(rec, k)
    if v is not None and v.ndim != 1:
      raise DataError(f"{src}: {k!r} (initial state) must have shape (n,), got {v.shape}")
  for k in ("time", "ctrl", "qpos", "qvel", "sensordata", "act", "qpos0", "qvel0"):
    v = getattr(rec, k)
    if v is None:
      continue
    bad = ~np.isfinite(v)
    if k == "sensordata" and rec.sensor_mask is not None and v.ndim == 2 and rec.sensor_mask.shape == v.shape[1:]:
      bad &= rec.sensor_mask[None, :]  # unmeasured sensor columns are NaN by design
    if bad.any():
      idx = np.argwhere(bad)[0]
      where = (f"row {idx[0]}" + (f", column {idx[1]}" if v.ndim == 2 else "")) if k not in ("qpos0", "qvel0") \
        else f"index {idx[0]}"
      if k in ("qpos0", "qvel0"):
        raise DataError(f"{src}: {k!r} contains NaN/Inf at {where}; give a finite initial state")
      raise DataError(f"{src}: {k!r} contains {int(bad.sum())} NaN/Inf value(s), the first at {where} "
                      f"(time {t[idx[0]] if np.isfinite(t[idx[0]]) else 'n/a'}); drop or interpolate those "
                      "samples before identification")
  dt = np.diff(t)
  if np.any(dt <= 0):
    i = int(np.argmax(dt <= 0)) + 1
    raise DataError(f"{src}: 'time' must be strictly increasing, but time[{i}] = {t[i]:.9g} <= time[{i - 1}] = "
                    f"{t[i - 1]:.9g}; sort the rows by time and drop duplicate samples")


def initial_state_warning(rec: Recording) -> str | None:
  """Why `rec`'s initial position is unknown and how to give it, for its source; `None` if known.

  A recording without `qpos` or `qpos0` starts from the model's `qpos0` at rest (`sysid.identify`
  warns). The advice fits where it came from: a CSV has no place for the initial state.
  """
  if rec.qpos is not None or rec.qpos0 is not None:
    return None
  src = rec.source
  msg = f"{src}: neither qpos nor qpos0, so its initial state is the model's qpos0 at rest; "
  kind = re.search(r"\.(csv|npz)(\[\d+\])?( \(|$)", src, re.IGNORECASE)
  if kind and kind.group(1).lower() == "csv":
    return msg + ("a CSV cannot hold an initial state: add the qpos:<joint> columns, or convert it to .npz with "
                  "the keys 'qpos0', 'qvel0' (set them on diffsim.data.load_csv's result, then save_npz)")
  if kind:
    return msg + "add the keys 'qpos0' and 'qvel0' to the .npz"
  return msg + "give it as Recording(qpos0=..., qvel0=...)"
