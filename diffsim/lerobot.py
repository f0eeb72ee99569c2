"""LeRobot datasets (codebase v2.1 and v3.0) as recordings for system identification.

A LeRobot dataset is a folder with `meta/info.json` and parquet files of frames (pyarrow reads
them; the camera videos are not needed and not read). Each episode becomes one `Recording`:

  =====================  ==========================================================================
  LeRobot                diffsim
  =====================  ==========================================================================
  `frame_index / fps`    `time` (the float32 `timestamp` column is checked against it, 1e-4 s)
  `observation.state`    `qpos`, mapped by joint name and converted to radians
  `action`               `ctrl` of the position actuators on those joints (goal positions, radians)
  =====================  ==========================================================================

Layouts (from LeRobot's `datasets/utils.py` and its v2.1 -> v3.0 converter):
  - v2.1 (and v2.0): `data/chunk-{episode_index // chunks_size:03d}/episode_{episode_index:06d}.parquet`,
    one file per episode; episodes listed in `meta/episodes.jsonl`; stats in
    `meta/episodes_stats.jsonl` (v2.0: `meta/stats.json`).
  - v3.0: `data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet`, many episodes per file; the
    episode table `meta/episodes/chunk-*/file-*.parquet` names each episode's file
    (`data/chunk_index`, `data/file_index`), its `length` and its range of the global `index`
    column (`dataset_from_index`, `dataset_to_index`); the frames are those rows whose
    `episode_index` is the episode's; stats in `meta/stats.json`.
  The paths are read from `info.json`'s `data_path` when it has one.

Timing. Row `k` holds the state read at frame `k` and the goal position sent right after it, so
`ctrl[k]` is held from frame `k` to frame `k + 1` (zero-order hold of the goal position, as the
servos hold it), and the simulation is compared with the data only at frame times. When the frame
period is a whole number of model steps (to 1e-5, see `diffsim.data.sim_steps`) the frames are
used as recorded. When it is not (30 fps against `timestep=0.002`: 16.67 steps), each frame is put
at its nearest model step: intervals of 17, 17 and 16 steps, each frame's time moved by at most half a
step, and a warning says by how much and which timestep would be exact (1/510 s: 17 steps per
frame). Times come from frame indices, never from a clock in the wrong unit, so the data's sparse-
sample guard is raised to the frame period when a model step is very short.

Units: `"degrees"` (`use_degrees=True`, LeRobot's default from 0.4.4) or `"normalized"`
(`RANGE_M100_100`, earlier versions; radians need the arm's calibration file); the gripper is
`RANGE_0_100` in both. The conversions, after LeRobot's `motors_bus.py`, are in `diffsim.motors`.
The values do not say which: `units=None` takes degrees when a body joint goes beyond +-100 in
the data or in the dataset's stats (normalized values cannot), normalized when a calibration is
given, and otherwise refuses to guess. What was assumed is said in a warning.

Robot types: `so100_follower`, `so101_follower` (LeRobot up to 0.4.2), `so_follower` (0.4.3 on);
datasets from before mid-2025 (`so100`, `so101`) name motors `main_shoulder_pan`, ..., read the
same way (the prefix and `.pos` are dropped), but LeRobot's calibration then put zero elsewhere:
give their offsets in `joint_map`.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tempfile
import warnings
from typing import Mapping

import mujoco
import numpy as np

from .data.files import as_mjmodel, atomic_write
from .data.recording import PERIOD_RTOL, TIME_RTOL, DataError, Recording
from .data.validation import MAX_STEPS_PER_SAMPLE, group_messages, validate
from .motors import RANGE_0_100, SO_MOTORS, TICKS_PER_TURN, check_calibration, from_joint, motor_name, \
  read_calibration, to_joint

__all__ = ["load_lerobot", "save_lerobot", "is_lerobot_dataset", "SO_MOTORS", "TICKS_PER_TURN"]

_V2, _V3 = ("v2.0", "v2.1"), ("v3.0",)
_V2_DATA = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
_V3_DATA = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
_V3_EPISODES = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
_TIMESTAMP_TOL = 1e-4  # s; LeRobot's own check of timestamps against fps (check_timestamps_sync)
_FEATURES = ("observation.state", "action")


def is_lerobot_dataset(path) -> bool:
  """Whether `path` is a folder with `meta/info.json` (how `diffsim sysid` recognizes a dataset)."""
  return os.path.isdir(path) and os.path.isfile(os.path.join(path, "meta", "info.json"))


def _pq():
  try:
    import pyarrow.parquet as pq
  except ImportError:  # pragma: no cover - a dependency of diffsim
    raise ImportError("reading LeRobot datasets needs pyarrow: pip install pyarrow") from None
  return pq


# -- reading the layout ------------------------------------------------------------------------------


class _Dataset:
  """`meta/info.json` and the episode table of a dataset folder."""

  def __init__(self, root: str):
    self.root = root
    self.name = os.path.basename(os.path.normpath(root))
    info_path = os.path.join(root, "meta", "info.json")
    if not os.path.isfile(info_path):
      raise DataError(f"{root}: not a LeRobot dataset (no meta/info.json); give the dataset's root folder, the one "
                      "that holds meta/ and data/")
    try:
      with open(info_path) as f:
        self.info = json.load(f)
    except (OSError, ValueError) as e:
      raise DataError(f"{info_path}: cannot read ({e})") from None
    self.version = str(self.info.get("codebase_version", ""))
    if self.version not in _V2 + _V3:
      raise DataError(f"{self.name}: unknown codebase_version {self.version!r} in meta/info.json; diffsim reads "
                      f"LeRobot datasets v2.1 and v3.0 (convert older ones with LeRobot's "
                      f"convert_dataset_v21_to_v30 and the converters before it)")
    try:
      self.fps = float(self.info["fps"])
    except (KeyError, TypeError, ValueError):
      raise DataError(f"{self.name}: meta/info.json has no valid 'fps' (frames per second)") from None
    if not (self.fps > 0 and math.isfinite(self.fps)):
      raise DataError(f"{self.name}: meta/info.json gives fps = {self.info['fps']!r}; it must be positive")
    self.robot_type = self.info.get("robot_type")
    features = self.info.get("features") or {}
    self.names, self.legacy = {}, False
    for key in _FEATURES:
      if key not in features:
        have = sorted(k for k in features if not str(k).startswith("observation.images"))
        raise DataError(f"{self.name}: the dataset has no {key!r} feature (meta/info.json lists {have}); system "
                        f"identification needs the joint positions ('observation.state') and the goal positions sent "
                        f"to the servos ('action')")
      names = features[key].get("names")
      if isinstance(names, dict) and len(names) == 1:  # older datasets: {"motors": [...]}
        names = next(iter(names.values()))
      if not isinstance(names, (list, tuple)) or not names:
        raise DataError(f"{self.name}: feature {key!r} has no list of names in meta/info.json, so its columns cannot "
                        f"be matched to joints")
      self.names[key] = [motor_name(n) for n in names]
      self.legacy |= any(str(n).startswith("main_") for n in names)
    self.episodes = self._episodes()

  def _episodes(self) -> dict[int, dict]:
    """`{episode_index: {"length", "path"}}`."""
    meta = os.path.join(self.root, "meta")
    eps: dict[int, dict] = {}
    if self.version in _V2:
      data_path = self.info.get("data_path") or _V2_DATA
      chunks = int(self.info.get("chunks_size") or 1000)
      path = os.path.join(meta, "episodes.jsonl")
      if os.path.isfile(path):
        with open(path) as f:
          rows = [json.loads(line) for line in f if line.strip()]
        lengths = {int(r["episode_index"]): int(r.get("length", -1)) for r in rows}
      else:
        lengths = {i: -1 for i in range(int(self.info.get("total_episodes") or 0))}
      for i, n in lengths.items():
        eps[i] = {"length": n, "path": data_path.format(episode_chunk=i // chunks, episode_index=i)}
      return eps
    data_path = self.info.get("data_path") or _V3_DATA
    folder = os.path.join(meta, "episodes")
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if f.endswith(".parquet"))
    if not files:
      raise DataError(f"{self.name}: a v3.0 dataset without episode metadata (meta/episodes/chunk-*/file-*.parquet)")
    pq = _pq()
    cols = ["episode_index", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
            "dataset_to_index"]
    for path in files:
      have = pq.read_schema(path).names
      missing = [c for c in cols if c not in have]
      if missing:
        raise DataError(f"{self.name}: {os.path.relpath(path, self.root)} lacks the column(s) {missing} of a v3.0 "
                        "episode table")
      t = pq.read_table(path, columns=cols).to_pydict()
      for k in range(len(t["episode_index"])):
        i = int(t["episode_index"][k])
        eps[i] = {"length": int(t["length"][k]),
                  "path": data_path.format(chunk_index=int(t["data/chunk_index"][k]),
                                           file_index=int(t["data/file_index"][k])),
                  "from": int(t["dataset_from_index"][k]), "to": int(t["dataset_to_index"][k])}
    return eps

  def select(self, episodes) -> list[int]:
    n = len(self.episodes)
    if episodes is None:
      return sorted(self.episodes)
    if isinstance(episodes, slice):
      episodes = range(*episodes.indices(max(self.episodes, default=-1) + 1))
    elif isinstance(episodes, (int, np.integer)):
      episodes = [episodes]
    out = []
    for e in episodes:
      if not isinstance(e, (int, np.integer)) or isinstance(e, bool):
        raise ValueError(f"episodes must be integers (episode_index), got {e!r}")
      if int(e) not in self.episodes:
        have = sorted(self.episodes)
        span = f"{have[0]}-{have[-1]}" if have == list(range(have[0], have[-1] + 1)) else str(have) if have else "none"
        raise DataError(f"{self.name}: episode {int(e)} is out of range: the dataset has {n} episode(s) ({span}); "
                        f"choose among those (command line: --episodes 0:{n})")
      out.append(int(e))
    if not out:
      raise DataError(f"{self.name}: no episodes selected (the dataset has {n})")
    return out

  def stats_range(self) -> dict[str, np.ndarray]:
    """Largest |min|, |max| of each feature per column over the whole dataset, from its stats (if any)."""
    out: dict[str, np.ndarray] = {}

    def add(stats):
      for key in _FEATURES:
        s = stats.get(key) if isinstance(stats, dict) else None
        if not isinstance(s, dict) or "min" not in s or "max" not in s:
          continue
        try:
          v = np.maximum(np.abs(np.asarray(s["min"], float)).ravel(), np.abs(np.asarray(s["max"], float)).ravel())
        except (TypeError, ValueError):
          continue
        if v.shape == (len(self.names[key]),):
          out[key] = v if key not in out else np.maximum(out[key], v)

    try:
      path = os.path.join(self.root, "meta", "stats.json")
      if os.path.isfile(path):
        with open(path) as f:
          add(json.load(f))
      path = os.path.join(self.root, "meta", "episodes_stats.jsonl")
      if os.path.isfile(path):
        with open(path) as f:
          for line in f:
            if line.strip():
              add(json.loads(line).get("stats", {}))
    except (OSError, ValueError):
      pass  # stats are evidence for the units, not required
    return out

  def read(self, ep: int, cache: dict) -> dict[str, np.ndarray]:
    """One episode's columns: `timestamp`, `frame_index` (T,), `observation.state`, `action` (T, n)."""
    info = self.episodes[ep]
    path = os.path.join(self.root, info["path"])
    where = f"{self.name} episode {ep}"
    if path not in cache:
      if not os.path.isfile(path):
        raise DataError(f"{where}: its data file {info['path']} is missing; is the download complete?")
      pq = _pq()
      names = pq.read_schema(path).names
      missing = [c for c in ("timestamp", "frame_index") + _FEATURES if c not in names]
      if missing:
        raise DataError(f"{where}: {info['path']} has no column(s) {missing}; its columns are {names}")
      cols = ["timestamp", "frame_index", *_FEATURES] + (["episode_index"] if "episode_index" in names else [])
      cache[path] = pq.read_table(path, columns=cols)
    table = cache[path]
    if "episode_index" in table.column_names:  # v3.0 files hold many episodes
      import pyarrow.compute as pc

      table = table.filter(pc.equal(table.column("episode_index"), ep))
    if table.num_rows == 0:
      raise DataError(f"{where}: no frames with episode_index {ep} in {info['path']}, though meta/episodes names "
                      "that file; the metadata and the data disagree")
    if info["length"] >= 0 and table.num_rows != info["length"]:
      raise DataError(f"{where}: {table.num_rows} frames in {info['path']}, but meta/episodes gives length "
                      f"{info['length']}; the dataset is incomplete or its metadata stale")
    out = {"timestamp": np.asarray(table.column("timestamp").to_numpy(), dtype=np.float64),
           "frame_index": np.asarray(table.column("frame_index").to_numpy(), dtype=np.int64)}
    for key in _FEATURES:
      out[key] = _matrix(table.column(key), len(self.names[key]), f"{where}: {key!r}")
    return out


def _matrix(column, width: int, where: str) -> np.ndarray:
  """A (fixed-size) list column of floats as a `(T, width)` float64 array."""
  import pyarrow as pa

  arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
  if pa.types.is_fixed_size_list(arr.type) or pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
    lengths = np.asarray(arr.value_lengths().to_numpy(zero_copy_only=False))
    if lengths.size and (lengths != width).any():
      raise DataError(f"{where}: rows of {int(lengths[lengths != width][0])} values where meta/info.json names "
                      f"{width}")
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float64).reshape(len(arr), width)
  raise DataError(f"{where}: expected a list of {width} floats per frame, found arrow type {arr.type}")


# -- units and the joint map -------------------------------------------------------------------------


def _parse_map_entry(motor: str, entry):
  """`joint`, `(joint, scale)` or `(joint, scale, offset_rad)` -> (joint, scale, offset); `None` drops the motor."""
  if entry is None:
    return None
  if isinstance(entry, str):
    return entry, 1.0, 0.0
  if isinstance(entry, (tuple, list)) and 1 <= len(entry) <= 3 and isinstance(entry[0], str):
    scale = float(entry[1]) if len(entry) > 1 else 1.0
    offset = float(entry[2]) if len(entry) > 2 else 0.0
    if scale == 0.0:
      raise ValueError(f"joint_map[{motor!r}]: the scale must not be 0")
    return entry[0], scale, offset
  raise ValueError(f"joint_map[{motor!r}] must be a joint name, (joint, scale) or (joint, scale, offset_rad), or None "
                   f"to leave the motor out; got {entry!r}")


def _mapping(mjm, motors: list[str], joint_map, name: str) -> list[dict]:
  """Each model joint's source: motor column, scale, offset, and the actuators it drives."""
  given = {} if joint_map is None else {motor_name(k): v for k, v in dict(joint_map).items()}
  unknown = sorted(set(given) - set(motors))
  if unknown:
    raise ValueError(f"joint_map names motors {unknown} that {name} does not record; its motors are {motors}")
  jnames = [mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(mjm.njnt)]
  rows, used = [], {}
  for m in motors:
    entry = _parse_map_entry(m, given[m]) if m in given else (m, 1.0, 0.0)
    if entry is None:
      continue
    joint, scale, offset = entry
    j = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_JOINT, joint)
    if j < 0:
      if m in given:
        raise DataError(f"joint_map maps motor {m!r} to {joint!r}, which is no joint of the model; its joints are "
                        f"{jnames}")
      continue  # a motor the model does not have; the check below names model joints left without data
    if int(mjm.jnt_type[j]) not in (2, 3):
      raise DataError(f"motor {m!r} maps to joint {joint!r}, which is not a hinge or slide joint")
    if joint in used:
      raise DataError(f"motors {used[joint]!r} and {m!r} both map to joint {joint!r}")
    used[joint] = m
    acts = [a for a in range(mjm.nu) if mjm.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT
            and mjm.actuator_trnid[a, 0] == j]
    for a in acts:
      servo = mjm.actuator_biastype[a] == mujoco.mjtBias.mjBIAS_AFFINE and mjm.actuator_biasprm[a, 1] < 0
      if not servo:
        aname = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, a)
        raise DataError(f"actuator {aname!r} on joint {joint!r} is not a position servo (<position>), but LeRobot's "
                        f"'action' is a goal position; model the servo as <position kp=...> on the joint")
    rows.append({"motor": m, "col": motors.index(m), "joint": j, "qpos": int(mjm.jnt_qposadr[j]), "scale": scale,
                 "offset": offset, "actuators": acts, "range": mjm.jnt_range[j].copy() if mjm.jnt_limited[j] else None,
                 "gripper": m in RANGE_0_100})
  missing = [jnames[j] or f"#{j}" for j in range(mjm.njnt) if (jnames[j] or f"#{j}") not in used]
  if missing:
    raise DataError(f"the model's joint(s) {missing} get no column of {name}, whose motors are {motors}: map them "
                    f"with joint_map={{motor: joint}} or identify with a model of the recorded arm alone (every qpos "
                    f"must be recorded)")
  driven = {a for r in rows for a in r["actuators"]}
  undriven = [mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, a) for a in range(mjm.nu) if a not in driven]
  if undriven:
    raise DataError(f"actuator(s) {undriven} of the model act on no recorded joint, so the dataset's 'action' "
                    "cannot give their controls")
  for r in rows:
    if r["gripper"] and r["range"] is None:
      raise DataError(f"joint {jnames[r['joint']]!r} (motor {r['motor']!r}, recorded 0..100) has no range in the "
                      "model to map 0..100 onto; give it range=\"lo hi\"")
  return rows


def _decide_units(ds: _Dataset, rows: list[dict], frames: list[dict], units, calibration) -> tuple[str, str | None]:
  """The units of the body joints, and the warning that says what was assumed (None when told)."""
  if units is not None:
    if units not in ("degrees", "normalized"):
      raise ValueError(f"units must be 'degrees' or 'normalized' (LeRobot's RANGE_M100_100), got {units!r}")
    return units, None
  body = [r for r in rows if not r["gripper"]]
  if not body:
    return "degrees", None  # nothing to convert but grippers
  peak, where = 0.0, ""
  for key in _FEATURES:
    for fr in frames:
      for r in body:
        c = ds.names[key].index(r["motor"])
        v = float(np.max(np.abs(fr[key][:, c])))
        if v > peak:
          peak, where = v, f"{key} {r['motor']}.pos in the data"
    stats = ds.stats_range().get(key)
    if stats is not None:
      for r in body:
        c = ds.names[key].index(r["motor"])
        if stats[c] > peak:
          peak, where = float(stats[c]), f"{key} {r['motor']}.pos in the dataset's stats"
  if peak > 100.0 + 1e-3:
    return "degrees", (f"{ds.name}: units taken as degrees, because {where} reaches {peak:.4g}, beyond the +-100 of "
                       f"LeRobot's normalized range; pass units='degrees' (--units degrees) to say so")
  hint = {"so_follower": "LeRobot 0.4.3 on; degrees are the default from 0.4.4",
          "so100_follower": "LeRobot 0.4.2 or earlier, normalized by default",
          "so101_follower": "LeRobot 0.4.2 or earlier, normalized by default"}.get(ds.robot_type, "")
  robot = f" (robot_type {ds.robot_type!r}: {hint})" if hint else ""
  if calibration is not None:
    return "normalized", (f"{ds.name}: units taken as normalized (RANGE_M100_100) with the calibration given, as "
                          f"every body joint stays within +-100 (largest {peak:.4g}){robot}; pass "
                          f"units='normalized' (--units normalized) to say so")
  raise DataError(f"{ds.name}: the body joints stay within +-100 everywhere (largest {peak:.4g}, {where}), which fits "
                  f"both degrees and LeRobot's normalized RANGE_M100_100{robot}; the values cannot tell which. Say "
                  f"which: units='degrees' (--units degrees) if the arm was recorded with use_degrees=True, else "
                  f"units='normalized' with the arm's calibration (--units normalized --calibration FILE; LeRobot "
                  f"keeps it as ~/.cache/huggingface/lerobot/calibration/robots/<robot_type>/<id>.json)")


# -- timing ------------------------------------------------------------------------------------------


def _frame_times(ds: _Dataset, ep: int, fr: dict) -> np.ndarray:
  """Checks timestamps and frame indices; returns `frame_index / fps`, `(T,)` float64."""
  where = f"{ds.name} episode {ep}"
  ts, fi = fr["timestamp"], fr["frame_index"]
  if len(ts) < 2:
    raise DataError(f"{where}: {len(ts)} frame(s); identification needs at least 2")
  if not np.isfinite(ts).all():
    k = int(np.argmax(~np.isfinite(ts)))
    raise DataError(f"{where}: timestamp of frame {int(fi[k])} is {ts[k]}; drop the episode (episodes=...)")
  d = np.diff(ts)
  if (d <= 0).any():
    k = int(np.argmax(d <= 0)) + 1
    raise DataError(f"{where}: timestamps must increase, but frame {int(fi[k])} has timestamp {ts[k]:.6g} s after "
                    f"{ts[k - 1]:.6g} s at frame {int(fi[k - 1])}; the episode is damaged: drop it (episodes=..., "
                    f"--episodes) or rerecord it")
  if (np.diff(fi) <= 0).any():
    k = int(np.argmax(np.diff(fi) <= 0)) + 1
    raise DataError(f"{where}: frame_index must increase, but row {k} has frame_index {int(fi[k])} after "
                    f"{int(fi[k - 1])}; the episode is damaged: drop it (episodes=..., --episodes)")
  t = fi / ds.fps
  expect = ts[0] + (t - t[0])
  tol = _TIMESTAMP_TOL + 2.0 * np.finfo(np.float32).eps * np.abs(ts)  # timestamps are float32
  if (np.abs(ts - expect) > tol).any():
    k = int(np.argmax(np.abs(ts - expect) > tol))
    rate = (len(ts) - 1) / (ts[-1] - ts[0])
    raise DataError(f"{where}: meta/info.json says fps = {ds.info['fps']}, but the timestamps disagree: frame "
                    f"{int(fi[k])} is at {ts[k]:.6g} s, not {expect[k]:.6g} s (the timestamps run at {rate:.4g} "
                    f"frames per second); correct 'fps' in meta/info.json or the timestamps")
  return t


def _on_model_steps(ds: _Dataset, times: list[np.ndarray], dt: float) -> tuple[list[np.ndarray], str | None]:
  """Frame times as they are when the frame period is a whole number of steps (to 1e-5), else each at its
  nearest step; with the warning that says so."""
  period = 1.0 / ds.fps
  steps = period / dt
  n = round(steps)
  if n >= 1 and abs(steps - n) <= max(TIME_RTOL, PERIOD_RTOL * n):
    return times, None  # validate states any drift of the model's clock
  if steps < 1.0:
    raise DataError(f"{ds.name}: frames at {ds.fps:g} fps ({period:.6g} s) are closer than one model step "
                    f"({dt:.6g} s); set <option timestep=\"{period / math.ceil(1.0 / steps)!r}\"/> or smaller")
  out, shift = [], 0.0
  for t in times:
    s = np.rint(t / dt) * dt
    shift = max(shift, float(np.max(np.abs(s - t))))
    out.append(s)
  fine = math.ceil(steps)
  return out, (f"{ds.name}: frames at {ds.fps:g} fps ({period:.9g} s) are {steps:.4g} steps of the model's "
               f"{dt:.9g} s timestep, not a whole number: each frame is compared with the simulation at its nearest "
               f"step (frame times moved by up to {shift:.3g} s, {shift / period:.2g} of a frame) and its action is "
               f"held from that step to the next frame's. For exact timing set <option "
               f"timestep=\"{period / fine!r}\"/> ({fine} steps per frame)")


# -- the loader --------------------------------------------------------------------------------------


def load_lerobot(path, model=None, *, episodes=None, units: str | None = None, calibration=None,
                 joint_map: Mapping | None = None) -> list[Recording]:
  """Reads episodes of a LeRobot dataset (v2.1 or v3.0) as recordings of the model's joints.

  Args:
    path: the dataset folder (with `meta/info.json`).
    model: MJCF path or string, `mujoco.MjModel` or `Scene` whose joints the data are mapped to
      (default: the bundled SO-101, `so101/so101_new_calib.xml`). Its timestep sets the timing (see
      the module docstring).
    episodes: `episode_index`es to read: an int, a list, a `range` or a `slice` (default: all).
    units: of the body joints: `"degrees"` or `"normalized"` (LeRobot's `RANGE_M100_100`); `None`:
      detect (degrees when a value goes beyond +-100, normalized when a calibration is given, else
      an error asking), with a warning that says what was assumed.
    calibration: LeRobot's calibration of the arm (a JSON path or the dict
      `{motor: {id, drive_mode, homing_offset, range_min, range_max}}`); needed for normalized units.
    joint_map: `{motor: joint}` where motors are LeRobot's names without `.pos` (`"shoulder_pan"`)
      and joints the model's; a value `(joint, scale)` or `(joint, scale, offset_rad)` flips a sign
      or moves the zero (`q = scale * q_lerobot + offset`; for the 0..100 gripper, a negative scale
      maps 100 to the lower end of the joint's range), `None` leaves a motor out. Default: each
      motor to the joint of the same name (the SO-100 / SO-101 against `so101_new_calib.xml`).

  Returns:
    One validated `Recording` per episode: `time` (T,) from `frame_index / fps`, `qpos` (T, nq)
    from `observation.state`, `ctrl` (T, nu) from `action`, in radians; `qvel` is not recorded.

  Raises:
    diffsim.data.DataError: a missing feature, an unknown `codebase_version`, an episode out of
      range, a NaN frame, timestamps that do not increase or disagree with `fps`, normalized data
      without a calibration, a calibration for other motors, joints the data do not cover.
  """
  from .scene import asset_path

  root = os.fspath(path)
  if not os.path.exists(root):
    raise FileNotFoundError(f"LeRobot dataset not found: {root!r}")
  mjm = as_mjmodel(model if model is not None else asset_path("so101", "so101_new_calib.xml"))
  ds = _Dataset(root)
  selected = ds.select(episodes)
  if ds.names["observation.state"] != ds.names["action"]:
    missing = [m for m in ds.names["observation.state"] if m not in ds.names["action"]]
    if missing:
      raise DataError(f"{ds.name}: 'action' has no column for motor(s) {missing} of 'observation.state' "
                      f"({ds.names['action']}); the goal positions of every recorded joint are needed")
  rows = _mapping(mjm, ds.names["observation.state"], joint_map, ds.name)
  cal = read_calibration(calibration) if calibration is not None else None
  if cal is not None:
    check_calibration(ds.name, cal, rows)
  cache: dict = {}
  frames = [ds.read(ep, cache) for ep in selected]
  for ep, fr in zip(selected, frames):
    for key in _FEATURES:
      bad = ~np.isfinite(fr[key])
      if bad.any():
        k, c = (int(i) for i in np.argwhere(bad)[0])
        raise DataError(f"{ds.name} episode {ep}: {key} {ds.names[key][c]}.pos is {fr[key][k, c]} at frame "
                        f"{int(fr['frame_index'][k])} ({int(bad.sum())} such value(s)); drop the episode "
                        f"(episodes=..., --episodes) or repair those frames")
  times = [_frame_times(ds, ep, fr) for ep, fr in zip(selected, frames)]
  unit, note = _decide_units(ds, rows, frames, units, cal)
  if unit == "normalized" and any(not r["gripper"] for r in rows) and cal is None:
    raise DataError(f"{ds.name}: normalized joint values (RANGE_M100_100) need the arm's calibration to become "
                    f"radians: calibration=FILE (--calibration FILE), LeRobot's "
                    f"calibration/robots/<robot_type>/<id>.json of the arm that recorded the dataset")
  dt = float(mjm.opt.timestep)
  times, timing = _on_model_steps(ds, times, dt)
  for msg in (note, timing):
    if msg:
      warnings.warn(msg, stacklevel=2)
  if ds.legacy:
    warnings.warn(f"{ds.name}: motor names with the 'main_' prefix: a dataset recorded before mid-2025, when "
                  "LeRobot's calibration put the zero of each joint elsewhere than so101_new_calib.xml's (the middle "
                  "of its range); give each joint's zero as an offset in joint_map", stacklevel=2)
  # the frame period is no millisecond mistake: let the sparse-sample guard pass every frame interval
  limit = max(MAX_STEPS_PER_SAMPLE, max(int(np.rint(np.max(np.diff(t)) / dt)) for t in times))
  recs = []
  with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for ep, fr, t in zip(selected, frames, times):
      qpos = np.tile(mjm.qpos0, (len(t), 1))
      ctrl = np.zeros((len(t), mjm.nu))
      acol = {m: i for i, m in enumerate(ds.names["action"])}
      for r in rows:
        qpos[:, r["qpos"]] = to_joint(fr["observation.state"][:, r["col"]], r, unit, cal)
        goal = to_joint(fr["action"][:, acol[r["motor"]]], r, unit, cal)
        for a in r["actuators"]:
          ctrl[:, a] = mjm.actuator_gear[a, 0] * goal
      rec = Recording(time=t, ctrl=ctrl if mjm.nu else None, qpos=qpos, source=f"{ds.name} episode {ep}")
      recs.append(validate(rec, mjm, max_steps_per_sample=limit))
  for msg in group_messages(str(w.message) for w in seen):  # one drift warning, not one per episode
    warnings.warn(msg, stacklevel=2)
  return recs


# -- writing (simulated datasets, tests, tutorials) --------------------------------------------------


def save_lerobot(path, recordings, model=None, *, version: str = "v3.0", units: str = "degrees", calibration=None,
                 joint_map: Mapping | None = None, fps: float | None = None, robot_type: str = "so_follower",
                 task: str = "system identification", episodes_per_file: int | None = None,
                 overwrite: bool = False) -> None:
  """Writes recordings as a LeRobot dataset (`meta/` and parquet `data/`, no videos), e.g. simulated data.

  The inverse of `load_lerobot`: `qpos` becomes `observation.state`, each joint's actuator's `ctrl`
  `action` (float32, LeRobot's schema and layout for `version` "v2.1" or "v3.0"), in `units`.

  Args:
    path: the dataset folder to create (written in a temporary folder beside it, then renamed).
    recordings: `Recording`s with `qpos` and `ctrl`, each on a uniform grid of period `1 / fps`.
    model: as in `load_lerobot` (default: the bundled SO-101).
    version: `"v2.1"` (a file per episode) or `"v3.0"` (episodes share files).
    units, calibration, joint_map: as in `load_lerobot`; normalized values are clamped to +-100.
    fps: frames per second (default: from the recordings' sample period, rounded to an integer).
    robot_type: `info.json`'s `robot_type`.
    task: the one task of every episode.
    episodes_per_file: v3.0: episodes per data file (default: all in one).
    overwrite: replace an existing folder at `path`.
  """
  import pyarrow as pa

  from .scene import asset_path

  pq = _pq()
  if version not in ("v2.1", "v3.0"):
    raise ValueError(f"version must be 'v2.1' or 'v3.0', got {version!r}")
  if units not in ("degrees", "normalized"):
    raise ValueError(f"units must be 'degrees' or 'normalized', got {units!r}")
  recs = [recordings] if isinstance(recordings, Recording) else list(recordings)
  if not recs or any(r.qpos is None or r.ctrl is None for r in recs):
    raise ValueError("save_lerobot needs recordings with qpos and ctrl")
  mjm = as_mjmodel(model if model is not None else asset_path("so101", "so101_new_calib.xml"))
  periods = np.concatenate([np.diff(r.time) for r in recs])
  if fps is None:
    fps = float(round(1.0 / float(np.median(periods))))
  if np.abs(periods * fps - 1.0).max() > PERIOD_RTOL:
    raise ValueError(f"recordings must be sampled at 1 / fps = {1.0 / fps:.9g} s; resample them first")
  motors = list(SO_MOTORS) if joint_map is None else [motor_name(m) for m in joint_map]
  rows = _mapping(mjm, motors, joint_map, "the dataset")
  cal = read_calibration(calibration) if calibration is not None else None
  if units == "normalized":
    if cal is None:
      raise ValueError("units='normalized' needs the calibration")
    check_calibration("the dataset", cal, rows)
  names = [f"{r['motor']}.pos" for r in rows]
  nm = len(rows)
  fps_int = int(fps) if float(fps).is_integer() else fps

  def columns(r: Recording):
    state = np.stack([from_joint(r.qpos[:, x["qpos"]], x, units, cal) for x in rows], axis=1)
    action = np.stack([from_joint(r.ctrl[:, x["actuators"][0]] / mjm.actuator_gear[x["actuators"][0], 0], x,
                                     units, cal) if x["actuators"] else state[:, i]
                       for i, x in enumerate(rows)], axis=1)
    return state.astype(np.float32), action.astype(np.float32)

  vec = pa.list_(pa.float32(), nm)

  def table(ep: int, start: int, state, action):
    T = len(state)
    frame = np.arange(T, dtype=np.int64)
    return pa.table({
      "action": pa.FixedSizeListArray.from_arrays(pa.array(action.ravel(), pa.float32()), nm),
      "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(state.ravel(), pa.float32()), nm),
      "timestamp": pa.array((frame / fps).astype(np.float32), pa.float32()),
      "frame_index": pa.array(frame, pa.int64()),
      "episode_index": pa.array(np.full(T, ep, np.int64), pa.int64()),
      "index": pa.array(start + frame, pa.int64()),
      "task_index": pa.array(np.zeros(T, np.int64), pa.int64()),
    }, schema=pa.schema([("action", vec), ("observation.state", vec), ("timestamp", pa.float32()),
                         ("frame_index", pa.int64()), ("episode_index", pa.int64()), ("index", pa.int64()),
                         ("task_index", pa.int64())]))

  def stats(values: np.ndarray) -> dict:
    return {"min": values.min(0).tolist(), "max": values.max(0).tolist(), "mean": values.mean(0).tolist(),
            "std": values.std(0).tolist(), "count": [int(len(values))]}

  root = os.path.abspath(os.fspath(path))
  if os.path.exists(root) and not overwrite:
    raise FileExistsError(f"{root} exists; pass overwrite=True to replace it")
  parent = os.path.dirname(root)
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(dir=parent, prefix="." + os.path.basename(root) + ".")
  try:
    def write(rel: str, payload) -> None:
      full = os.path.join(tmp, rel)
      os.makedirs(os.path.dirname(full), exist_ok=True)
      if isinstance(payload, (dict, list)):
        data = json.dumps(payload, indent=2).encode()
      elif isinstance(payload, str):
        data = payload.encode()
      else:
        buf = io.BytesIO()
        pq.write_table(payload, buf)
        data = buf.getvalue()
      atomic_write(full, lambda f: f.write(data))

    feats = {
      "action": {"dtype": "float32", "shape": [nm], "names": names},
      "observation.state": {"dtype": "float32", "shape": [nm], "names": names},
      "timestamp": {"dtype": "float32", "shape": [1], "names": None},
      "frame_index": {"dtype": "int64", "shape": [1], "names": None},
      "episode_index": {"dtype": "int64", "shape": [1], "names": None},
      "index": {"dtype": "int64", "shape": [1], "names": None},
      "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    tables, start, ep_rows, all_state, all_action = [], 0, [], [], []
    for ep, r in enumerate(recs):
      state, action = columns(r)
      tables.append(table(ep, start, state, action))
      ep_rows.append({"episode_index": ep, "length": len(state), "from": start, "to": start + len(state),
                      "stats": {"observation.state": stats(state), "action": stats(action)}})
      all_state.append(state)
      all_action.append(action)
      start += len(state)
    info = {"codebase_version": version, "robot_type": robot_type, "total_episodes": len(recs),
            "total_frames": start, "total_tasks": 1}
    if version == "v2.1":
      chunks = 1000
      info.update({"total_videos": 0, "total_chunks": (len(recs) - 1) // chunks + 1, "chunks_size": chunks,
                   "fps": fps_int, "splits": {"train": f"0:{len(recs)}"}, "data_path": _V2_DATA, "video_path": None,
                   "features": feats})
      for e, t in zip(ep_rows, tables):
        write(_V2_DATA.format(episode_chunk=e["episode_index"] // chunks, episode_index=e["episode_index"]), t)
      write("meta/episodes.jsonl", "".join(json.dumps({"episode_index": e["episode_index"], "tasks": [task],
                                                       "length": e["length"]}) + "\n" for e in ep_rows))
      write("meta/tasks.jsonl", json.dumps({"task_index": 0, "task": task}) + "\n")
      write("meta/episodes_stats.jsonl", "".join(json.dumps({"episode_index": e["episode_index"], "stats": e["stats"]})
                                                 + "\n" for e in ep_rows))
    else:
      per = episodes_per_file or len(recs)
      info.update({"chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "fps": fps_int,
                   "splits": {"train": f"0:{len(recs)}"}, "data_path": _V3_DATA, "video_path": None,
                   "features": {k: dict(v, fps=fps_int) for k, v in feats.items()}})
      ep_table = {"episode_index": [], "tasks": [], "length": [], "data/chunk_index": [], "data/file_index": [],
                  "dataset_from_index": [], "dataset_to_index": [], "meta/episodes/chunk_index": [],
                  "meta/episodes/file_index": []}
      for f0 in range(0, len(recs), per):
        file_index = f0 // per
        write(_V3_DATA.format(chunk_index=0, file_index=file_index), pa.concat_tables(tables[f0:f0 + per]))
        for e in ep_rows[f0:f0 + per]:
          for k, v in (("episode_index", e["episode_index"]), ("tasks", [task]), ("length", e["length"]),
                       ("data/chunk_index", 0), ("data/file_index", file_index), ("dataset_from_index", e["from"]),
                       ("dataset_to_index", e["to"]), ("meta/episodes/chunk_index", 0),
                       ("meta/episodes/file_index", 0)):
            ep_table[k].append(v)
      for key in ("observation.state", "action"):
        for s in ("min", "max", "mean", "std", "count"):
          ep_table[f"stats/{key}/{s}"] = [e["stats"][key][s] for e in ep_rows]
      write(_V3_EPISODES.format(chunk_index=0, file_index=0), pa.table(ep_table))
      write("meta/tasks.parquet", pa.table({"task_index": pa.array([0], pa.int64()), "task": [task]}))
      write("meta/stats.json", {"observation.state": stats(np.concatenate(all_state)),
                                "action": stats(np.concatenate(all_action))})
    write("meta/info.json", info)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's folder is private
    if os.path.exists(root):
      shutil.rmtree(root)
    os.rename(tmp, root)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
