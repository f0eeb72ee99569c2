"""Sample times against the model's step grid: steps per sample, clock drift, resampling, and velocities
by finite differences of the recorded positions.
"""

from __future__ import annotations

from dataclasses import replace

import mujoco
import numpy as np

from .. import joints
from .recording import PERIOD_RTOL, TIME_RTOL, DataError, Recording, check_structure

__all__ = ["sim_steps", "clock_drift", "drift_warning", "resample", "estimate_qvel"]

# `resample` takes a new sample time this close to an original one (fraction of the new period) as that sample
_SNAP_RTOL = 1e-2


def sim_steps(time: np.ndarray, dt: float, *, source: str = "recording") -> np.ndarray:
  """Simulation step index of each sample, `(T,)` int64: the whole steps of every interval, summed.

  An interval `time[i] - time[i - 1]` is `n >= 1` steps when it is within `1e-4` of a step (float
  round-off) or `1e-5 n` (relative) of `n dt`: a timestep written with few digits (1/480 s as
  `0.00208333`, how `MjSpec.to_xml` writes it) makes 16 steps 1.6e-6 shorter than a 30 fps frame,
  and the simulation's clock then drifts from the recording's by that much per sample
  (`clock_drift`; `validate` warns when it exceeds round-off).

  Raises:
    DataError: when a sample interval is not a whole number of steps `dt`.
  """
  time = np.asarray(time, dtype=np.float64)
  rel = np.diff(time) / dt
  steps = np.rint(rel)
  bad = (np.abs(rel - steps) > np.maximum(TIME_RTOL, PERIOD_RTOL * steps)) | (steps < 1)
  n = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
  if bad.any():
    i = int(np.argmax(bad)) + 1
    period = float(np.median(np.diff(time)))
    k = max(1, int(round(period / dt)))
    # the divisor of the period nearest dt: this count of steps, when nearly whole, else one more (never coarser)
    r = period / dt
    fine = max(1, int(round(r)) if abs(r - round(r)) <= 1e-3 * r else int(np.ceil(r)))
    raise DataError(
      f"{source}: sample interval time[{i}] - time[{i - 1}] = {time[i] - time[i - 1]:.9g} s is not a multiple of "
      f"the model timestep {dt:.9g} s, so controls cannot be held for whole steps. Resample the recording onto a "
      f"{k * dt:.9g} s grid with diffsim.data.resample(rec, period={k * dt:.9g}) (command line: --resample), or "
      f"set <option timestep=...> in the MJCF to a divisor of the sample period ({period:.9g} s), written with all "
      f"its digits, e.g. timestep=\"{period / fine!r}\" ({fine} steps per sample)")
  return n


def clock_drift(time: np.ndarray, dt: float) -> np.ndarray:
  """How far the simulation's clock is behind the recording's at each sample, `(T,)` float64, s.

  Sample `i` is compared with the simulation after `sim_steps(time, dt)[i]` steps, at
  `time[0] + steps * dt`; `time[i]` minus that is the drift (round-off, or a timestep that is not
  exactly a divisor of the sample period, see `sim_steps`).
  """
  time = np.asarray(time, dtype=np.float64)
  return (time - time[0]) - sim_steps(time, dt) * dt


def drift_warning(rec: Recording, dt: float) -> str | None:
  """Says how fast the simulation's clock drifts from `rec`'s when the drift is more than round-off.

  The text after `source: ` is the same for every recording with this sample period and model
  (`group_messages` folds them into one).
  """
  drift = clock_drift(rec.time, dt)
  i = int(np.argmax(np.abs(drift)))
  if abs(drift[i]) <= TIME_RTOL * dt:
    return None
  steps = sim_steps(rec.time, dt)
  per = steps[i] / i
  rate = drift[i] / i  # s per sample
  period = per * dt + rate
  whole = abs(per - round(per)) < 1e-9
  exact = f"{float(period / per)!r}" if whole else "a divisor of the sample period"
  return (f"{rec.source}: the sample interval ({period:.9g} s) is {per:.6g} model steps of {dt:.9g} s only to "
          f"{abs(rate) / period:.2g} (relative), so the simulation's clock drifts from the recording's by {rate:.2g} s "
          f"per sample ({abs(rate) / dt:.2g} of a step; sample k is compared with the state after {per:.6g} k steps); "
          f"for exact timing write the timestep with all its digits (timestep=\"{exact}\")")


def resample(rec: Recording, period: float, *, mjm: mujoco.MjModel | None = None) -> Recording:
  """Puts a recording on a uniform grid `time[0] + i * period` (choose `period` a multiple of dt).

  Measurements (`qpos`, `qvel`, `sensordata`, `act`) are interpolated linearly (quaternions
  renormalized when `mjm` is given); controls are held (zero-order hold: the control in force at
  each new sample time), matching how they were applied.

  Args:
    rec: the recording.
    period: new sample period, s.
    mjm: the model, to renormalize quaternions in `qpos`.
  """
  check_structure(rec)
  if not period > 0:
    raise ValueError(f"period must be positive, got {period}")
  n = int(np.floor((rec.time[-1] - rec.time[0]) / period + 1e-9)) + 1
  t = rec.time[0] + period * np.arange(n)
  # A new time within _SNAP_RTOL of a period of an original sample is that sample: its values and its control.
  # Else a grid that drifts from the recording by round-off (16 steps of 0.00208333 s against 1/30 s frames:
  # 5e-8 s earlier per frame) would take every control from the frame before, one frame late.
  j = np.clip(np.searchsorted(rec.time, t), 1, rec.nrow - 1)
  j = np.where(np.abs(rec.time[j - 1] - t) <= np.abs(rec.time[j] - t), j - 1, j)
  at = np.where(np.abs(rec.time[j] - t) <= _SNAP_RTOL * period, rec.time[j], t)

  def interp(v):
    if v is None:
      return None
    return np.stack([np.interp(at, rec.time, v[:, i]) for i in range(v.shape[1])], axis=1).reshape(n, v.shape[1])

  qpos = interp(rec.qpos)
  if qpos is not None:
    for adr in ([] if mjm is None else joints.quat_addresses(mjm)):
      q = qpos[:, adr:adr + 4]
      qpos[:, adr:adr + 4] = q / np.linalg.norm(q, axis=1, keepdims=True)
  ctrl = None
  if rec.ctrl is not None:
    idx = np.clip(np.searchsorted(rec.time, at, side="right") - 1, 0, rec.nrow - 1)
    ctrl = rec.ctrl[idx]
  return replace(rec, time=t, ctrl=ctrl, qpos=qpos, qvel=interp(rec.qvel), sensordata=interp(rec.sensordata),
                 act=interp(rec.act), source=f"{rec.source} (resampled to {period:.6g} s)")


def estimate_qvel(rec: Recording, mjm: mujoco.MjModel, row: int) -> np.ndarray:
  """Joint velocity at `row` from `qpos` by finite differences (second order), `(nv,)` float64."""
  if rec.qpos is None:
    raise DataError(f"{rec.source}: cannot estimate qvel without qpos")
  T = rec.nrow

  def diff(a, b):  # (qpos[b] - qpos[a]) / (time[b] - time[a]) in the tangent space
    v = np.zeros(mjm.nv)
    mujoco.mj_differentiatePos(mjm, v, float(rec.time[b] - rec.time[a]), rec.qpos[a], rec.qpos[b])
    return v

  if T == 2:
    return diff(0, 1)
  if 0 < row < T - 1:
    # non-uniform three-point derivative at the middle point
    h1, h2 = rec.time[row] - rec.time[row - 1], rec.time[row + 1] - rec.time[row]
    return (h2 * diff(row - 1, row) + h1 * diff(row, row + 1)) / (h1 + h2)
  a, b, c = (row, row + 1, row + 2) if row == 0 else (row, row - 1, row - 2)
  # one-sided second-order difference (on a uniform grid: (-3 q_a + 4 q_b - q_c) / 2h)
  hab, hac = rec.time[b] - rec.time[a], rec.time[c] - rec.time[a]
  vab, vac = diff(a, b), diff(a, c)
  return (vab * hac / (hac - hab)) - (vac * hab / (hac - hab))
