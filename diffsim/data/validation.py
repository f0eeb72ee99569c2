"""`validate`: a recording against a model (column counts, plausible SI values, the step grid, sparse
samples), with errors that say how to fix the data; `group_messages` folds repeated warnings.
"""

from __future__ import annotations

import re
import warnings

import mujoco
import numpy as np

from .columns import csv_column
from .recording import DataError, Recording, check_structure
from .timing import drift_warning, resample, sim_steps

__all__ = ["validate", "group_messages", "MAX_STEPS_PER_SAMPLE"]

# Largest plausible magnitude of any recorded value in SI units (float32 resolves 1e-7 of it)
_ABSURD = 1e6
# Most model steps one sample interval may span (`validate`'s `max_steps_per_sample` default). Times
# logged in ms give 1000x the true count, >= 1000, so the limit is below that: 500 steps is 1 s at
# timestep 0.002 (sparser than identification data usually are). Raise it for data that really are sparse.
MAX_STEPS_PER_SAMPLE = 500


def _names(mjm, objtype, n) -> list[str]:
  return [mujoco.mj_id2name(mjm, objtype, i) or f"#{i}" for i in range(n)]


def _check_model(rec: Recording, mjm: mujoco.MjModel) -> None:
  src = rec.source
  sizes = {"ctrl": (mjm.nu, "actuators", _names(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, mjm.nu)),
           "qpos": (mjm.nq, "qpos coordinates (nq)", None),
           "qvel": (mjm.nv, "degrees of freedom (nv)", None),
           "sensordata": (mjm.nsensordata, "sensor values (nsensordata)", None),
           "act": (mjm.na, "activations (na)", None)}
  for k, n in (("qpos0", mjm.nq), ("qvel0", mjm.nv)):
    v = getattr(rec, k)
    if v is not None and v.shape != (n,):
      raise DataError(f"{src}: {k!r} has {v.shape[0]} values but the model has {n}; "
                      "is this recording for another model?")
  if rec.ctrl is None and mjm.nu:
    raise DataError(f"{src}: missing 'ctrl'; the model has {mjm.nu} actuators "
                    f"{sizes['ctrl'][2]}, so 'ctrl' must have shape (T, {mjm.nu})")
  for k, (n, what, names) in sizes.items():
    v = getattr(rec, k)
    if v is None or v.shape[1] == n:
      continue
    hint = f" {names}" if names else ""
    if k == "sensordata" and n == 0:
      hint = "; the model has no <sensor>: drop 'sensordata' or add the sensors to the MJCF"
    raise DataError(f"{src}: {k!r} has {v.shape[1]} columns but the model has {n} {what}{hint}; "
                    "is this recording for another model?")
  if rec.sensor_mask is not None and rec.sensor_mask.shape != (mjm.nsensordata,):
    raise DataError(f"{src}: sensor_mask must have shape ({mjm.nsensordata},), got {rec.sensor_mask.shape}")
  _check_magnitudes(rec, mjm)
  sim_steps(rec.time, float(mjm.opt.timestep), source=src)


def _check_magnitudes(rec: Recording, mjm: mujoco.MjModel) -> None:
  """Refuses values no SI recording holds: the float32 simulation would overflow (SVD failures), or, for
  a joint angle far outside its range, the unit is likely wrong (degrees, encoder ticks)."""
  src = rec.source
  for kind in ("time", "ctrl", "qpos", "qvel", "sensordata", "act"):
    v = getattr(rec, kind)
    if v is None or not v.size:
      continue
    a = np.abs(np.nan_to_num(v, nan=0.0))
    if a.max() > _ABSURD:
      row, col = np.unravel_index(int(np.argmax(a)), a.shape) if a.ndim == 2 else (int(np.argmax(a)), None)
      name = "time" if col is None else csv_column(mjm, kind, int(col))
      raise DataError(
        f"{src}: {name} reaches {v[row] if col is None else v[row, col]:.3g} (row {row}), beyond any plausible value "
        f"in SI units (|value| <= {_ABSURD:.0e}; the simulation runs in float32). Is the column in other units (mm "
        f"instead of m, encoder ticks instead of rad, us instead of s) or the export corrupt? Convert it to SI units "
        f"(m, rad, s, N) or drop it")
  # joint and control ranges: a hinge angle many ranges away from its limits is in degrees or ticks
  checks = []
  if rec.qpos is not None:
    for j in range(mjm.njnt):
      if mjm.jnt_limited[j] and int(mjm.jnt_type[j]) in (2, 3):
        checks.append(("qpos", int(mjm.jnt_qposadr[j]), mjm.jnt_range[j], int(mjm.jnt_type[j]) == 3))
  if rec.ctrl is not None:
    for a in range(mjm.nu):  # position servos on a joint: their control is a joint position
      servo = mjm.actuator_biastype[a] == mujoco.mjtBias.mjBIAS_AFFINE and mjm.actuator_biasprm[a, 1] < 0
      if mjm.actuator_ctrllimited[a] and servo and mjm.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT:
        hinge = int(mjm.jnt_type[mjm.actuator_trnid[a, 0]]) == 3
        checks.append(("ctrl", a, mjm.actuator_ctrlrange[a], hinge))
  for kind, i, (lo, hi), hinge in checks:
    v = getattr(rec, kind)[:, i]
    width = max(hi - lo, 1e-3)
    far = (v < lo - 2.0 * width - 0.5) | (v > hi + 2.0 * width + 0.5)
    if not far.any():
      continue
    row = int(np.argmax(np.where(far, np.abs(v), -np.inf)))
    hint = ("degrees instead of radians (multiply by pi/180) or raw encoder ticks (convert with the servo's "
            "calibration)" if hinge else "other units (mm instead of m?) or raw encoder counts")
    raise DataError(
      f"{src}: {csv_column(mjm, kind, i)} reaches {v[row]:.6g} at row {row}, far outside its range [{lo:.4g}, "
      f"{hi:.4g}] {'rad' if hinge else ''}: likely {hint}. Convert the column to SI units (rad, m)")


def group_messages(messages) -> list[str]:
  """Folds messages `"<source>: <text>"` with the same text into one, `"<first source> and N more: <text>"`.

  A message already folded (`"a and 3 more: ..."`) counts as 4 sources; the same sources seen again
  (a recording validated twice) count once.
  """
  groups: dict[str, dict] = {}
  for m in messages:
    src, sep, text = str(m).partition(": ")
    if not sep:
      src, text = "", str(m)
    g = groups.setdefault(text, {"first": None, "plain": [], "folded": set()})
    folded = re.fullmatch(r"(.*) and (\d+) more", src)
    if folded:
      g["folded"].add((folded.group(1), int(folded.group(2)) + 1))
      src = folded.group(1)
    elif src not in g["plain"]:
      g["plain"].append(src)
    g["first"] = src if g["first"] is None else g["first"]
  out = []
  for text, g in groups.items():
    count = max(len(g["plain"]), sum(n for _, n in g["folded"]))
    if not g["first"]:
      out.append(text)
    else:
      out.append(f"{g['first']}{f' and {count - 1} more' if count > 1 else ''}: {text}")
  return out


def _check_steps_per_sample(rec: Recording, dt: float, limit: int | None) -> None:
  """Refuses a sample interval of more than `limit` model steps (e.g. times in ms, not s)."""
  limit = MAX_STEPS_PER_SAMPLE if limit is None else limit
  if not (isinstance(limit, (int, np.integer)) and limit >= 1):
    raise ValueError(f"max_steps_per_sample must be a positive integer, got {limit!r}")
  steps = np.rint(np.diff(rec.time) / dt)
  i = int(np.argmax(steps)) + 1
  if steps[i - 1] <= limit:
    return
  total = int(round((rec.time[-1] - rec.time[0]) / dt))
  raise DataError(
    f"{rec.source}: sample interval time[{i}] - time[{i - 1}] = {rec.time[i] - rec.time[i - 1]:.9g} s is "
    f"{int(steps[i - 1]):,} model steps of {dt:.9g} s (the limit is {limit:,} per interval; the {rec.nrow} rows would "
    f"take {total:,} simulation steps). Is 'time' in milliseconds? It must be in seconds: divide it by 1000. If the "
    f"samples really are this far apart, raise the limit: max_steps_per_sample=N in diffsim.data.load/validate "
    f"and diffsim.sysid.identify, or --max-steps-per-sample N on the command line")


def validate(rec: Recording, mjm: mujoco.MjModel | None = None, *, resample_to_grid: bool = False,
             max_steps_per_sample: int | None = None) -> Recording:
  """Checks a recording; returns it (resampled onto the model's step grid if asked).

  Args:
    rec: the recording.
    mjm: the model; without it only model-independent checks run.
    resample_to_grid: when the sample times are not multiples of the model timestep, resample
      (see `resample`) instead of raising.
    max_steps_per_sample: most model steps one sample interval may span (default
      `MAX_STEPS_PER_SAMPLE`, 500): a guard against times in milliseconds.

  Raises:
    DataError: naming the problem (NaN/Inf, non-increasing time, lengths or column counts that
      disagree, sample times off the timestep grid or implausibly far apart) and how to fix it.
  """
  check_structure(rec)
  if mjm is None:
    return rec
  _check_steps_per_sample(rec, float(mjm.opt.timestep), max_steps_per_sample)
  if resample_to_grid:
    try:
      sim_steps(rec.time, float(mjm.opt.timestep), source=rec.source)
    except DataError:
      dt = float(mjm.opt.timestep)
      period = max(1, int(round(float(np.median(np.diff(rec.time))) / dt))) * dt
      rec = resample(rec, period, mjm=mjm)
  _check_model(rec, mjm)
  msg = drift_warning(rec, float(mjm.opt.timestep))
  if msg:
    warnings.warn(msg, stacklevel=2)
  return rec
