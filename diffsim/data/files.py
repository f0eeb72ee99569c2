"""Recordings in files: `.npz` (one or several trajectories) and CSV (columns named after MuJoCo
elements), read with `load` (which validates) and written atomically (`atomic_write`).
"""

from __future__ import annotations

import csv
import os
import re

import mujoco
import numpy as np

from .. import joints
from ..atomic import atomic_write
from .columns import csv_columns
from .recording import DataError, Recording
from .validation import validate

__all__ = ["load", "load_npz", "load_csv", "save_npz", "save_csv", "atomic_write", "as_mjmodel"]

def as_mjmodel(model) -> mujoco.MjModel | None:
  if model is None or isinstance(model, mujoco.MjModel):
    return model
  if hasattr(model, "mjm"):  # a Scene
    return model.mjm
  from ..scene import load_mjmodel

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


def _is_number(text: str) -> bool:
  try:
    float(text)
  except ValueError:
    return False
  return True


def load_csv(path, mjm: mujoco.MjModel) -> Recording:
  """Reads a CSV file with a header naming columns by MuJoCo names (see `diffsim.data`)."""
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
  cols = csv_columns(mjm)
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
