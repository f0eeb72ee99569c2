"""Positions of LeRobot's SO-100 / SO-101 servos (Feetech STS3215) as joint positions, and back.

Units (LeRobot's `motors_bus.py`, `_normalize`; STS3215 servos: 4096 ticks per turn):
  - `"degrees"` (`use_degrees=True`, LeRobot's default from 0.4.4):
    `deg = (ticks - (range_min + range_max) / 2) * 360 / 4095`; zero is the middle of the
    calibrated range, the zero of `so101_new_calib.xml`.
  - `"normalized"` (`RANGE_M100_100`, earlier versions):
    `v = (clamp(ticks, range_min, range_max) - range_min) / (range_max - range_min) * 200 - 100`
    (negated when `drive_mode` is 1); radians need the arm's calibration file,
    `calibration/robots/<robot_type>/<id>.json` in LeRobot's cache (`~/.cache/huggingface/lerobot`):
    `rad = v / 200 * (range_max - range_min) * 2 pi / 4095`.
  - The gripper is `RANGE_0_100` in both (0 closed, 100 open), mapped linearly onto the gripper
    joint's range (0 to its lower limit).

A joint map row (`diffsim.lerobot` builds them from the model and `joint_map`) says how a motor's
column becomes a joint position: `motor`, `gripper` (a `RANGE_0_100` motor), the joint's `range`,
and `scale`, `offset` (rad) applied after the unit conversion.
"""

from __future__ import annotations

import json
import os
from typing import Mapping

import numpy as np

from .data.recording import DataError

__all__ = ["SO_MOTORS", "TICKS_PER_TURN", "RANGE_0_100", "motor_name", "read_calibration", "check_calibration",
           "to_joint", "from_joint"]

# The SO-100 / SO-101 motors, in LeRobot's order; also the joint and actuator names of so101_new_calib.xml
SO_MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
RANGE_0_100 = ("gripper",)  # motors LeRobot normalizes to 0..100 whatever use_degrees says
TICKS_PER_TURN = 4095  # LeRobot's max_res of the STS3215 (4096 positions): degrees = ticks * 360 / 4095


def motor_name(name: str) -> str:
  """LeRobot's column name to the motor name: `shoulder_pan.pos` and `main_shoulder_pan` -> `shoulder_pan`."""
  name = str(name)
  if name.endswith(".pos"):
    name = name[:-4]
  if name.startswith("main_"):
    name = name[5:]
  return name


def read_calibration(calibration) -> dict[str, dict]:
  """LeRobot's calibration (a JSON path or its dict) as `{motor: {range_min, range_max, drive_mode}}`, with
  `"__source__"` naming where it came from for error messages."""
  if isinstance(calibration, (str, os.PathLike)):
    path = os.fspath(calibration)
    if not os.path.isfile(path):
      raise FileNotFoundError(f"calibration file not found: {path!r} (LeRobot keeps it as "
                              "~/.cache/huggingface/lerobot/calibration/robots/<robot_type>/<id>.json)")
    try:
      with open(path) as f:
        calibration = json.load(f)
    except ValueError as e:
      raise DataError(f"{path}: not a JSON calibration file ({e})") from None
    src = os.path.basename(path)
  else:
    src = "calibration"
  if not isinstance(calibration, Mapping) or not calibration:
    raise DataError(f"{src}: expected LeRobot's calibration, {{motor: {{id, drive_mode, homing_offset, range_min, "
                    f"range_max}}}}")
  out = {}
  for motor, c in calibration.items():
    if not isinstance(c, Mapping) or not {"range_min", "range_max"} <= set(c):
      raise DataError(f"{src}: motor {motor!r} needs range_min and range_max (LeRobot's MotorCalibration)")
    lo, hi = float(c["range_min"]), float(c["range_max"])
    if not hi > lo:
      raise DataError(f"{src}: motor {motor!r} has range_min {lo:g} >= range_max {hi:g}; recalibrate the arm")
    out[motor_name(motor)] = {"range_min": lo, "range_max": hi, "drive_mode": int(c.get("drive_mode", 0) or 0)}
  out["__source__"] = src  # type: ignore[assignment]
  return out


def to_joint(values: np.ndarray, r: dict, units: str, calibration) -> np.ndarray:
  """One motor's column in LeRobot units to the joint's position (rad, or m for a slide)."""
  if r["gripper"]:
    lo, hi = r["range"]
    f = values / 100.0
    return (lo + f * (hi - lo)) if r["scale"] > 0 else (hi - f * (hi - lo))
  if units == "degrees":
    q = np.deg2rad(values)
  else:
    c = calibration[r["motor"]]
    sign = -1.0 if c["drive_mode"] else 1.0
    q = sign * values / 200.0 * (c["range_max"] - c["range_min"]) * 2.0 * np.pi / TICKS_PER_TURN
  return r["scale"] * q + r["offset"]


def from_joint(q: np.ndarray, r: dict, units: str, calibration) -> np.ndarray:
  """The inverse of `to_joint` (for `save_lerobot`), with LeRobot's clamp of normalized values."""
  if r["gripper"]:
    lo, hi = r["range"]
    f = (q - lo) / (hi - lo) if r["scale"] > 0 else (hi - q) / (hi - lo)
    return np.clip(100.0 * f, 0.0, 100.0)
  q = (q - r["offset"]) / r["scale"]
  if units == "degrees":
    return np.rad2deg(q)
  c = calibration[r["motor"]]
  sign = -1.0 if c["drive_mode"] else 1.0
  v = sign * q * TICKS_PER_TURN / (2.0 * np.pi) * 200.0 / (c["range_max"] - c["range_min"])
  return np.clip(v, -100.0, 100.0)


def check_calibration(ds_name: str, calibration: dict, rows: list[dict]) -> None:
  """DataError unless `calibration` covers every body (non-gripper) motor of the joint map `rows`."""
  need = [r["motor"] for r in rows if not r["gripper"]]
  have = sorted(k for k in calibration if k != "__source__")
  missing = [m for m in need if m not in calibration]
  if missing:
    raise DataError(f"{calibration['__source__']}: a calibration for motors {have}, but {ds_name} records "
                    f"{missing} too; is it another robot's calibration? Give the file of the arm that recorded the "
                    f"dataset (calibration/robots/<robot_type>/<id>.json)")
