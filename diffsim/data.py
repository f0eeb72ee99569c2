"""Recorded trajectories for system identification: format, loading, validation, resampling.

A recording is one trajectory of `T` rows. Row `k` holds what was measured at `time[k]`; the control
`ctrl[k]` is applied from `time[k]` until `time[k + 1]`. The initial state of the simulation is
row 0: `qvel` from the file when present, else (`qvel0` if given, else) estimated from `qpos` by
finite differences and then solved for together with the parameters (`diffsim.sysid.identify`,
which can also refine a noisy initial position: `fit_qpos0=True`).

NPZ (`numpy.savez`), one trajectory per file, or several with a leading axis `N` on every key:

  ==============  ==================  =====================================================
  key             shape               meaning
  ==============  ==================  =====================================================
  `time`          `(T,)` or `(N, T)`  sample times, s, strictly increasing
  `ctrl`          `(T, nu)`           controls (MuJoCo `d.ctrl`); optional when `nu == 0`
  `qpos`          `(T, nq)`           joint positions (m, rad; quaternions w, x, y, z)
  `qvel`          `(T, nv)`           joint velocities (m/s, rad/s)
  `sensordata`    `(T, nsensordata)`  MuJoCo sensor outputs (`d.sensordata`)
  `act`           `(T, na)`           actuator activations (optional; used for the initial state)
  `qpos0`         `(nq,)`             initial positions when `qpos` is not recorded (optional)
  `qvel0`         `(nv,)`             initial velocities when `qvel` is not recorded (optional)
  ==============  ==================  =====================================================

At least one of `qpos`, `qvel`, `sensordata` must be present; all arrays have one row per time
sample. Columns follow the model's order (`mjm.jnt_qposadr`, `mjm.sensor_adr`, actuator ids).

CSV, one trajectory per file: a header row naming the columns, then one row per sample.
`time` is required; other columns are named after MuJoCo elements, with the kind as a prefix:
`ctrl:<actuator>`, `qpos:<joint>`, `qvel:<joint>`, `act:<actuator>`, `sensor:<sensor>`.
Elements with several values take an index: `qpos:<free joint>[3]` (its quaternion w),
`sensor:<framepos sensor>[2]` (z). A bare name is accepted when it names exactly one element
(an actuator means `ctrl`, a sensor `sensor`, a joint `qpos`); raw vector indices such as
`qpos[3]` or `ctrl[0]` also work. Every control column and, if any is given, every `qpos`
(`qvel`) column of the model must be present; any subset of sensors may be.

Sampling: sample times must be multiples of the model timestep `dt` after `time[0]` (e.g. a
50 Hz recording of a model with `timestep=0.002` is simulated with 10 steps per row; rows may be
irregular as long as each interval is a multiple of `dt`). An interval within 1e-5 (relative) of a
whole number of steps counts as that many (a timestep written with six digits), and `validate`
warns how far the simulation's clock then drifts from the recording's (`clock_drift`). Other
recordings can be put on such a grid with `resample` (CLI: `--resample`), which interpolates
measurements linearly and holds controls (a new time within 1% of a period of a recorded one takes
that sample's values and control). LeRobot datasets: `load_lerobot` (`diffsim.lerobot`).
One interval may span at most `MAX_STEPS_PER_SAMPLE` (500) model steps (1 s at
`timestep=0.002`): times in milliseconds instead of seconds give 1000 times the true count,
at least 1000, and would make identification run for hours, so validation refuses them. Data
that really are this sparse pass with `max_steps_per_sample=N` (`load`, `validate`,
`diffsim.sysid.identify`; CLI: `--max-steps-per-sample N`).

Sensor rows follow `mj_step`: the sensors of row `k` are those MuJoCo computes from the
state of row `k` with `ctrl[k]`. To record with MuJoCo C (or use `simulate`):

  for k in range(T):
    time[k], qpos[k], qvel[k] = d.time, d.qpos, d.qvel
    d.ctrl = ctrl[k]
    for i in range(substeps):
      mujoco.mj_step(m, d)
      if i == 0:
        sensordata[k] = d.sensordata  # computed from row k's state inside the first step
"""

from __future__ import annotations

import csv
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, replace

import mujoco
import numpy as np

from . import joints

__all__ = ["Recording", "DataError", "load", "load_npz", "load_csv", "load_lerobot", "save_npz", "save_csv",
           "validate", "resample", "sim_steps", "clock_drift", "group_messages", "simulate", "estimate_qvel",
           "MAX_STEPS_PER_SAMPLE",
           "initial_state_warning"]

_KINDS = ("qpos", "qvel", "sensordata")  # measured signals, in residual order
TIME_RTOL = 1e-4  # sample times may deviate from the dt grid by this fraction of dt (float round-off)
# A sample interval may differ from a whole number n of steps by this fraction of n dt: a timestep written
# with six digits (1/480 s as 0.00208333) is 2e-7 relative off, 16 of its steps against 1/30 s 1.6e-6.
PERIOD_RTOL = 1e-5
# `resample` takes a new sample time this close to an original one (fraction of the new period) as that sample
_SNAP_RTOL = 1e-2
# Largest plausible magnitude of any recorded value in SI units (float32 resolves 1e-7 of it)
_ABSURD = 1e6
# Most model steps one sample interval may span (`validate`'s `max_steps_per_sample` default). Times
# logged in ms give 1000x the true count, >= 1000, so the limit is below that: 500 steps is 1 s at
# timestep 0.002 (sparser than identification data usually are). Raise it for data that really are sparse.
MAX_STEPS_PER_SAMPLE = 500


class DataError(ValueError):
  """Recorded data that cannot be used; the message names the problem and how to fix it."""


@dataclass
class Recording:
  """One recorded trajectory of `T` rows (see the module docstring for the conventions).

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


# -- structural checks (no model needed) ------------------------------------------------------------


def _check_structure(rec: Recording) -> None:
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


def _column_name(mjm, kind: str, i: int) -> str:
  """The CSV name of column `i` of `kind` (`qpos:elbow`, `ctrl:servo`, `sensor:tip[2]`), else `kind[i]`."""
  for name, (k, j) in _columns(mjm).items():
    if k == kind and j == i and ":" in name:
      return name
  return f"{kind}[{i}]"


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
      name = "time" if col is None else _column_name(mjm, kind, int(col))
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
      f"{src}: {_column_name(mjm, kind, i)} reaches {v[row]:.6g} at row {row}, far outside its range [{lo:.4g}, "
      f"{hi:.4g}] {'rad' if hinge else ''}: likely {hint}. Convert the column to SI units (rad, m)")


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


def _drift_warning(rec: Recording, dt: float) -> str | None:
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
  _check_structure(rec)
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
  msg = _drift_warning(rec, float(mjm.opt.timestep))
  if msg:
    warnings.warn(msg, stacklevel=2)
  return rec


# -- files ------------------------------------------------------------------------------------------


def as_mjmodel(model) -> mujoco.MjModel | None:
  if model is None or isinstance(model, mujoco.MjModel):
    return model
  if hasattr(model, "mjm"):  # a Scene
    return model.mjm
  from .scene import load_mjmodel

  return load_mjmodel(model)


def load(path, model=None, *, resample_to_grid: bool = False,
         max_steps_per_sample: int | None = None) -> list[Recording]:
  """Loads and validates recordings from an `.npz` or `.csv` file.

  Args:
    path: file path; `.npz` may hold several trajectories (leading axis), `.csv` holds one.
    model: MJCF path or string, `mujoco.MjModel` or `Scene`; needed for CSV (column names) and
      for the model checks. Without it, only model-independent checks run (NPZ only).
    resample_to_grid: resample recordings whose times are off the model timestep grid.
    max_steps_per_sample: most model steps one sample interval may span (see `validate`).

  Returns:
    A list of `Recording`s.
  """
  mjm = as_mjmodel(model)
  path = os.fspath(path)
  if not os.path.exists(path):
    raise FileNotFoundError(f"recorded data not found: {path!r}")
  ext = os.path.splitext(path)[1].lower()
  if ext == ".npz":
    recs = load_npz(path)
  elif ext == ".csv":
    if mjm is None:
      raise ValueError(f"{path}: reading CSV needs the model (its columns are named by joints, actuators, sensors)")
    recs = [load_csv(path, mjm)]
  else:
    raise DataError(f"{path}: unknown data format {ext!r}; use .npz (numpy.savez) or .csv (see diffsim.data)")
  return [validate(r, mjm, resample_to_grid=resample_to_grid, max_steps_per_sample=max_steps_per_sample)
          for r in recs]


def load_npz(path) -> list[Recording]:
  """Reads an `.npz` file: one trajectory, or several along a leading axis (no model checks)."""
  path = os.fspath(path)
  name = os.path.basename(path)
  try:
    with np.load(path, allow_pickle=False) as z:
      arrays = {k: np.asarray(z[k]) for k in z.files}
  except Exception as e:
    raise DataError(f"{name}: cannot read as .npz ({e})") from None
  known = {"time", "ctrl", "qpos", "qvel", "sensordata", "act", "sensor_mask", "qpos0", "qvel0"}
  unknown = sorted(set(arrays) - known)
  if unknown:
    raise DataError(f"{name}: unknown key(s) {unknown}; expected {sorted(known)} (see diffsim.data)")
  if "time" not in arrays:
    raise DataError(f"{name}: missing 'time' (sample times in s, shape (T,)); keys are {sorted(arrays)}")
  # several trajectories: a leading axis on the 2-D signals
  batched = any(arrays[k].ndim == 3 for k in ("ctrl", "qpos", "qvel", "sensordata", "act") if k in arrays)
  if not batched:
    return [Recording(**{k: v for k, v in arrays.items()}, source=name)]
  counts = {k: arrays[k].shape[0] for k in ("ctrl", "qpos", "qvel", "sensordata", "act") if k in arrays}
  if any(arrays[k].ndim != 3 for k in counts):
    raise DataError(f"{name}: some signals have a trajectory axis and some do not: "
                    f"{ {k: arrays[k].shape for k in counts} }; use (N, T, columns) for all")
  if len(set(counts.values())) != 1:
    raise DataError(f"{name}: signals disagree on the number of trajectories: {counts}")
  n = next(iter(counts.values()))
  t = arrays["time"]
  if t.ndim == 2 and t.shape[0] != n:
    raise DataError(f"{name}: 'time' has {t.shape[0]} trajectories but the signals have {n}")
  recs = []
  for k in ("qpos0", "qvel0"):
    if k in arrays and arrays[k].ndim == 2 and arrays[k].shape[0] != n:
      raise DataError(f"{name}: {k!r} has {arrays[k].shape[0]} rows but there are {n} trajectories")
  for i in range(n):
    kw = {k: arrays[k][i] for k in counts}
    for k in ("qpos0", "qvel0"):
      if k in arrays:
        kw[k] = arrays[k][i] if arrays[k].ndim == 2 else arrays[k]
    recs.append(Recording(time=t[i] if t.ndim == 2 else t, sensor_mask=arrays.get("sensor_mask"), source=f"{name}[{i}]",
                          **kw))
  return recs


def atomic_write(path: str, write) -> None:
  """Writes through a temporary file in the same folder, then renames: never leaves a partial file."""
  path = os.fspath(path)
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      write(f)
    # mkstemp makes the file private (0600); give it the mode a plain open() would (umask applied)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def save_npz(path, recordings) -> None:
  """Writes one recording, or several of equal length (leading axis), to an `.npz` file."""
  recs = [recordings] if isinstance(recordings, Recording) else list(recordings)
  if not recs:
    raise ValueError("no recordings to save")
  keys = [k for k in ("time", "ctrl", "qpos", "qvel", "sensordata", "act", "qpos0", "qvel0")
          if getattr(recs[0], k) is not None]
  if any([k for k in keys if getattr(r, k) is None] or r.nrow != recs[0].nrow for r in recs):
    raise ValueError("several recordings in one .npz need the same keys and the same number of rows; "
                     "save them to separate files")
  if len(recs) == 1:
    arrays = {k: getattr(recs[0], k) for k in keys}
  else:
    arrays = {k: np.stack([getattr(r, k) for r in recs]) for k in keys}
  if recs[0].sensor_mask is not None:
    arrays["sensor_mask"] = recs[0].sensor_mask
  atomic_write(path, lambda f: np.savez(f, **arrays))


def _columns(mjm: mujoco.MjModel) -> dict[str, tuple[str, int]]:
  """Every accepted CSV column name: `name -> (kind, index into the kind's vector)`."""
  cols: dict[str, tuple[str, int]] = {}
  bare: dict[str, list[tuple[str, int]]] = {}

  def add(kind, name, start, size, prefixes):
    for i in range(size):
      for p in prefixes:
        key = f"{p}:{name}" + (f"[{i}]" if size > 1 else "")
        cols[key] = (kind, start + i)
      bare.setdefault(name + (f"[{i}]" if size > 1 else ""), []).append((kind, start + i))

  nq_j, nv_j = joints.QPOS_WIDTH, joints.DOF_WIDTH
  for j in range(mjm.njnt):
    name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j)
    if name:
      t = int(mjm.jnt_type[j])
      add("qpos", name, int(mjm.jnt_qposadr[j]), nq_j[t], ["qpos"])
      cols.update({f"qvel:{name}" + (f"[{i}]" if nv_j[t] > 1 else ""): ("qvel", int(mjm.jnt_dofadr[j]) + i)
                   for i in range(nv_j[t])})
  for a in range(mjm.nu):
    name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, a)
    if name:
      add("ctrl", name, a, 1, ["ctrl"])
      if mjm.actuator_actadr[a] >= 0:
        for i in range(int(mjm.actuator_actnum[a])):
          key = f"act:{name}" + (f"[{i}]" if mjm.actuator_actnum[a] > 1 else "")
          cols[key] = ("act", int(mjm.actuator_actadr[a]) + i)
  for s in range(mjm.nsensor):
    name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_SENSOR, s)
    if name:
      add("sensordata", name, int(mjm.sensor_adr[s]), int(mjm.sensor_dim[s]), ["sensor", "sensordata"])
  sizes = (("qpos", mjm.nq), ("qvel", mjm.nv), ("ctrl", mjm.nu), ("act", mjm.na), ("sensordata", mjm.nsensordata))
  for kind, n in sizes:
    for i in range(n):
      cols[f"{kind}[{i}]"] = (kind, i)
  for name, hits in bare.items():
    if len(hits) == 1 and name not in cols:
      cols[name] = hits[0]
    elif len(hits) > 1:
      cols.setdefault(name, ("ambiguous", -1))
  return cols


def _is_number(text: str) -> bool:
  try:
    float(text)
  except ValueError:
    return False
  return True


def load_csv(path, mjm: mujoco.MjModel) -> Recording:
  """Reads a CSV file with a header naming columns by MuJoCo names (see the module docstring)."""
  path = os.fspath(path)
  name = os.path.basename(path)
  with open(path, newline="") as f:
    header = next(csv.reader(f), None)
  if not header:
    raise DataError(f"{name}: empty CSV file; expected a header row such as 'time,ctrl:<actuator>,qpos:<joint>'")
  header = [h.strip() for h in header]
  if any(header) and all(_is_number(h) for h in header if h):
    raise DataError(f"{name}: the first row ({','.join(header[:4])}{',...' if len(header) > 4 else ''}) holds numbers, "
                    "not column names; the CSV needs a header row naming its columns: 'time', then joint, actuator "
                    "and sensor names, e.g. 'time,ctrl:<actuator>,qpos:<joint>,sensor:<sensor>' (see diffsim.data)")
  try:
    values = np.genfromtxt(path, delimiter=",", skip_header=1, dtype=np.float64, ndmin=2,
                           invalid_raise=True)
  except ValueError as e:
    raise DataError(f"{name}: malformed CSV rows ({e})") from None
  if values.size == 0:
    raise DataError(f"{name}: no data rows after the header")
  if values.shape[1] != len(header):
    raise DataError(f"{name}: the header has {len(header)} columns but the rows have {values.shape[1]}")
  dups = sorted({h for h in header if header.count(h) > 1})
  if dups:
    raise DataError(f"{name}: duplicate column(s) {dups}")
  if "time" not in header:
    raise DataError(f"{name}: no 'time' column; the header must name a 'time' column (s)")
  cols = _columns(mjm)
  sizes = {"ctrl": mjm.nu, "qpos": mjm.nq, "qvel": mjm.nv, "act": mjm.na, "sensordata": mjm.nsensordata}
  out = {k: np.full((values.shape[0], n), np.nan) for k, n in sizes.items()}
  seen = {k: np.zeros(n, bool) for k, n in sizes.items()}
  for c, h in enumerate(header):
    if h == "time":
      continue
    kind, i = cols.get(h, (None, -1))
    if kind is None:
      m = re.match(r"^(ctrl|qpos|qvel|act|sensor|sensordata):", h)
      hint = (f"known {m.group(1)} columns: {sorted(k for k in cols if k.startswith(m.group(1) + ':'))[:20]}"
              if m else "prefix it with ctrl:, qpos:, qvel:, act: or sensor:")
      raise DataError(f"{name}: column {h!r} names nothing in the model ({hint}); remove extra columns")
    if kind == "ambiguous":
      raise DataError(f"{name}: column {h!r} names several elements (e.g. a joint and an actuator); "
                      f"write 'ctrl:{h}', 'qpos:{h}' or 'sensor:{h}'")
    if seen[kind][i]:
      raise DataError(f"{name}: column {h!r} repeats {kind}[{i}]")
    seen[kind][i] = True
    out[kind][:, i] = values[:, c]
  if mjm.nu and not seen["ctrl"].all():
    missing = [mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, i) or f"ctrl[{i}]"
               for i in np.nonzero(~seen["ctrl"])[0]]
    raise DataError(f"{name}: missing control column(s) for actuator(s) {missing}; every actuator needs "
                    "a 'ctrl:<actuator>' column")
  rec = {"time": values[:, header.index("time")], "ctrl": out["ctrl"] if mjm.nu else None}
  for kind in ("qpos", "qvel", "act"):
    if seen[kind].any():
      if not seen[kind].all():
        raise DataError(f"{name}: {kind} columns are given for only some coordinates "
                        f"(missing indices {np.nonzero(~seen[kind])[0].tolist()}); give all {sizes[kind]} or none")
      rec[kind] = out[kind]
  mask = None
  if seen["sensordata"].any():
    rec["sensordata"] = out["sensordata"]
    mask = seen["sensordata"] if not seen["sensordata"].all() else None
  return Recording(**rec, sensor_mask=mask, source=name)


def save_csv(path, rec: Recording, mjm: mujoco.MjModel) -> None:
  """Writes a recording as CSV with `kind:<name>` columns (elements must be named)."""
  header, columns = ["time"], [rec.time]

  def add(kind, prefix, objtype, ids, adr, size, values):
    for e in ids:
      nm = mujoco.mj_id2name(mjm, objtype, e)
      for i in range(size(e)):
        header.append(f"{prefix}:{nm}" + (f"[{i}]" if size(e) > 1 else "") if nm else f"{kind}[{adr(e) + i}]")
        columns.append(values[:, adr(e) + i])

  nq_j, nv_j = joints.QPOS_WIDTH, joints.DOF_WIDTH
  J = mujoco.mjtObj.mjOBJ_JOINT
  if rec.ctrl is not None:
    add("ctrl", "ctrl", mujoco.mjtObj.mjOBJ_ACTUATOR, range(mjm.nu), lambda e: e, lambda e: 1, rec.ctrl)
  if rec.qpos is not None:
    add("qpos", "qpos", J, range(mjm.njnt), lambda e: mjm.jnt_qposadr[e], lambda e: nq_j[int(mjm.jnt_type[e])],
        rec.qpos)
  if rec.qvel is not None:
    add("qvel", "qvel", J, range(mjm.njnt), lambda e: mjm.jnt_dofadr[e], lambda e: nv_j[int(mjm.jnt_type[e])], rec.qvel)
  if rec.sensordata is not None:
    mask = rec.sensor_mask if rec.sensor_mask is not None else np.ones(mjm.nsensordata, bool)
    ids = [s for s in range(mjm.nsensor) if mask[mjm.sensor_adr[s]]]
    add("sensordata", "sensor", mujoco.mjtObj.mjOBJ_SENSOR, ids, lambda e: mjm.sensor_adr[e],
        lambda e: mjm.sensor_dim[e], rec.sensordata)
  table = np.stack(columns, axis=1)

  def write(f):
    f.write((",".join(header) + "\n").encode())
    np.savetxt(f, table, delimiter=",", fmt="%.17g")

  atomic_write(path, write)


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


# -- resampling and estimation ----------------------------------------------------------------------


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
  _check_structure(rec)
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


# -- synthetic recordings ---------------------------------------------------------------------------


def simulate(model, ctrl, *, qpos0=None, qvel0=None, substeps: int = 1, noise: dict | None = None,
             seed: int = 0, record=("qpos", "qvel", "sensordata")) -> Recording:
  """Records a trajectory with MuJoCo C (float64, `mujoco.mj_step`), e.g. to test identification.

  Args:
    model: MJCF path or string, `mujoco.MjModel` (not modified) or `mujoco.MjSpec`.
    ctrl: `(T, nu)` controls, one row per sample.
    qpos0: `(nq,)` initial positions (default: the model's `qpos0`).
    qvel0: `(nv,)` initial velocities (default 0).
    substeps: simulation steps per sample (sample period = `substeps * timestep`).
    noise: Gaussian measurement noise std per signal, e.g. `{"qpos": 1e-3}` (rad, m, ...).
    seed: noise seed.
    record: which signals to keep among `"qpos"`, `"qvel"`, `"sensordata"`, `"act"`.

  Returns:
    A `Recording` with `T` rows.
  """
  from .scene import load_mjmodel

  mjm = load_mjmodel(model)
  ctrl = np.asarray(ctrl, dtype=np.float64)
  if ctrl.ndim != 2 or ctrl.shape[1] != mjm.nu:
    raise ValueError(f"ctrl must have shape (T, nu={mjm.nu}), got {ctrl.shape}")
  d = mujoco.MjData(mjm)
  if qpos0 is not None:
    d.qpos[:] = qpos0
  if qvel0 is not None:
    d.qvel[:] = qvel0
  T = ctrl.shape[0]
  out = {k: np.zeros((T, n)) for k, n in (("qpos", mjm.nq), ("qvel", mjm.nv), ("act", mjm.na),
                                            ("sensordata", mjm.nsensordata))}
  time = np.zeros(T)
  for k in range(T):
    time[k] = d.time
    out["qpos"][k], out["qvel"][k], out["act"][k] = d.qpos, d.qvel, d.act
    d.ctrl[:] = ctrl[k]
    for i in range(substeps):
      mujoco.mj_step(mjm, d)
      if i == 0:
        out["sensordata"][k] = d.sensordata
  time = np.arange(T) * substeps * mjm.opt.timestep  # exact grid, free of accumulated round-off
  q0, v0 = out["qpos"][0].copy(), out["qvel"][0].copy()
  rng = np.random.default_rng(seed)
  for k, std in (noise or {}).items():
    if k not in out:
      raise ValueError(f"noise key {k!r} must be one of {sorted(out)}")
    out[k] = out[k] + rng.normal(0.0, std, out[k].shape)
  bad = sorted(set(record) - set(out))
  if bad:
    raise ValueError(f"record {bad}: choose among {sorted(out)}")
  empty = {"sensordata": mjm.nsensordata == 0, "act": mjm.na == 0}
  keep = {k: out[k] for k in record if not empty.get(k, False)}
  # the initial state travels with the recording when the signals that carry it are not recorded
  if "qpos" not in keep:
    keep["qpos0"] = q0
  if "qvel" not in keep:
    keep["qvel0"] = v0
  return Recording(time=time, ctrl=ctrl.copy(), **keep, source="simulated")


def __getattr__(name: str):
  # diffsim.data.load_lerobot lives in diffsim.lerobot, which builds on this module: imported on first use
  if name == "load_lerobot":
    from .lerobot import load_lerobot

    return load_lerobot
  raise AttributeError(f"module 'diffsim.data' has no attribute {name!r}")
