"""Tutorial 7: identify the SO-101's servos from a LeRobot dataset (v2.1 or v3.0, 30 fps).

SO-101 owners record their arm with LeRobot: `observation.state` (the joint angles the servos
report) and `action` (the goal positions sent to them), 30 frames per second, as parquet files
under `data/` with `meta/info.json` beside them. diffsim reads such a folder directly
(`diffsim.data.load_lerobot`, or `diffsim sysid MODEL DATASET_DIR` on the command line): it maps
the motors to the MJCF joints by name, converts degrees (or LeRobot's normalized -100..100 with
the arm's calibration file) to radians, holds each goal position until the next frame and compares
the simulation with the data at the frame times.

Here the tutorial first writes such a dataset itself: a "real" arm whose servos differ from the
MJCF (position gain kp, damping, rotor armature, dry friction) follows smooth goal positions for a
few episodes, simulated with float64 MuJoCo C, and its joint angles are stored as a servo bus reads
them (whole encoder ticks, 360 / 4095 degrees). Then it identifies the servo parameters from the
folder, as it would from your own, and plots measured against identified joint trajectories.

The model's timestep is a divisor of the frame period (1/600 s: 20 steps per frame), written with
all its digits. With the stock `timestep="0.002"` (16.67 steps per frame) the frames are put at
their nearest model step instead, and diffsim says so.

Your own dataset (see the README, "LeRobot datasets"):
  diffsim sysid so101.xml ~/.cache/huggingface/lerobot/<user>/<dataset> --units degrees --episodes 0:10 \\
      --param actuator_gainprm:elbow_flex --param dof_damping:elbow_flex --param dof_armature:elbow_flex

Run:
  python tutorials/07_sysid_lerobot.py --device cuda:0       # 5 joints x 4 parameters, 6 episodes of 4 s
  python tutorials/07_sysid_lerobot.py --test                # the elbow, 2 episodes of 1 s (CPU, CI)
"""

import argparse
import json
import os
import sys

import mujoco
import numpy as np

import diffsim
from diffsim import lerobot

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"]
FIELDS = ["actuator_gainprm", "dof_damping", "dof_armature", "dof_frictionloss"]
# the "real" servos, relative to the MJCF values, per joint
FACTORS = {
  "actuator_gainprm": [1.15, 0.9, 1.2, 1.1, 0.85],
  "dof_damping": [1.2, 1.4, 1.3, 1.1, 0.9],
  "dof_armature": [1.2, 1.3, 1.25, 1.1, 0.9],
  "dof_frictionloss": [1.5, 1.3, 1.4, 1.2, 0.8],
}
FPS = 30
TIMESTEP = 1.0 / 600  # 20 steps per frame


def write_model(out: str) -> str:
  """The bundled SO-101 with a timestep that divides the frame period, written with all its digits."""
  path = diffsim.asset_path("so101", "so101_new_calib.xml")
  spec = mujoco.MjSpec.from_file(path)
  spec.meshdir = os.path.join(os.path.dirname(path), "assets")
  spec.option.timestep = TIMESTEP
  # MjSpec.to_xml writes six digits (0.00166667: 20 steps 2e-7 short of a frame); write them all
  xml = spec.to_xml().replace(f'timestep="{TIMESTEP:.6g}"', f'timestep="{TIMESTEP!r}"')
  model = os.path.join(out, "so101_600hz.xml")
  with open(model, "w") as f:
    f.write(xml)
  return model


def real_arm(model: str, joints: list[str]) -> tuple[mujoco.MjModel, dict]:
  """The arm that "recorded" the dataset: its servos differ from the MJCF's on `joints`."""
  m = mujoco.MjModel.from_xml_path(model)
  true = {}
  for f in FIELDS:
    vals = []
    for j in joints:
      k = FACTORS[f][JOINTS.index(j)]
      if f == "actuator_gainprm":
        a = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, j)
        m.actuator_gainprm[a, 0] *= k
        m.actuator_biasprm[a, 1] = -m.actuator_gainprm[a, 0]  # a <position> servo: bias -kp
        vals.append(m.actuator_gainprm[a, 0])
      else:
        adr = m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j)]
        getattr(m, f)[adr] *= k
        vals.append(getattr(m, f)[adr])
    true[f] = np.array(vals)
  mujoco.mj_setConst(m, mujoco.MjData(m))  # constants derived from the armature follow it
  return m, true


def episode(m: mujoco.MjModel, seed: int, seconds: float) -> diffsim.data.Recording:
  """Smooth goal positions (a teleoperator's), the arm starting at rest near the first; angles in whole ticks."""
  rng = np.random.default_rng(seed)
  t = np.arange(int(round(seconds * FPS)) + 1) / FPS
  center = np.array([0.0, 0.2, -0.3, 0.3, 0.0, 0.5]) + rng.uniform(-0.2, 0.2, 6)
  amp = np.array([0.4, 0.3, 0.5, 0.4, 0.6, 0.3])
  ctrl = center.copy()
  for _ in range(3):  # three sines per joint
    ctrl = ctrl + amp / 3 * np.sin(2 * np.pi * rng.uniform(0.3, 1.5, 6) * t[:, None] + rng.uniform(0, 2 * np.pi, 6))
  ctrl = np.clip(ctrl, m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1])
  rec = diffsim.data.simulate(m, ctrl, qpos0=ctrl[0], substeps=int(round(1 / (FPS * m.opt.timestep))),
                              record=("qpos",))
  tick = 2 * np.pi / lerobot.TICKS_PER_TURN
  rec.qpos[:, :5] = np.round(rec.qpos[:, :5] / tick) * tick  # what the servo bus reports
  return rec


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda if available, else cpu)")
  parser.add_argument("--iters", type=int, default=20, help="maximum Levenberg-Marquardt iterations")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  parser.add_argument("--test", action="store_true", help="short run that checks the result (for CI)")
  parser.add_argument("--format", choices=("v2.1", "v3.0"), default="v3.0", help="LeRobot codebase version")
  parser.add_argument("--units", choices=("degrees", "normalized"), default="degrees",
                      help="degrees (LeRobot >= 0.4.4) or normalized -100..100 (earlier; with a calibration file)")
  parser.add_argument("--episodes", type=int, default=None, help="episodes to record (default 6, test 2)")
  parser.add_argument("--seconds", type=float, default=None, help="length of an episode, s (default 4, test 1)")
  args = parser.parse_args(argv)

  import warp as wp

  wp.config.log_level = wp.LOG_WARNING
  out = os.path.join(args.out, "07_sysid_lerobot")
  os.makedirs(out, exist_ok=True)
  joints = ["elbow_flex"] if args.test else JOINTS
  nep = args.episodes or (2 if args.test else 6)
  seconds = args.seconds or (1.0 if args.test else 4.0)

  # 1. the dataset, as LeRobot writes it (meta/info.json, parquet data; no videos)
  model = write_model(out)
  arm, true = real_arm(model, joints)
  recs = [episode(arm, seed, seconds) for seed in range(nep)]
  dataset = os.path.join(out, "so101_dataset")
  calibration = None
  if args.units == "normalized":  # the arm's calibration file, as LeRobot keeps it
    calibration = os.path.join(out, "so101_follower.json")
    cal = {j: {"id": i + 1, "drive_mode": 0, "homing_offset": 0, "range_min": 800 + 20 * i, "range_max": 3300 - 30 * i}
           for i, j in enumerate(lerobot.SO_MOTORS)}
    cal["wrist_roll"].update(range_min=0, range_max=4095)
    with open(calibration, "w") as f:
      json.dump(cal, f, indent=2)
  lerobot.save_lerobot(dataset, recs, model, version=args.format, units=args.units, calibration=calibration,
                       overwrite=True)
  print(f"wrote a LeRobot {args.format} dataset ({args.units}): {nep} episodes of {seconds:g} s at {FPS} fps, "
        f"{dataset}")

  # 2. read it back as recordings of the model's joints, and identify the servos
  data = diffsim.data.load_lerobot(dataset, model, units=args.units, calibration=calibration)
  params = [diffsim.Param(f, joints, name=f) for f in FIELDS]
  # angles in whole encoder ticks are noisy: solve for each episode's initial position too
  res = diffsim.sysid.identify(model, data, params, fit_qpos0=True, device=args.device, maxiter=args.iters,
                               progress=not args.test)
  res.save(out, truth=true)

  print(f"{'':18s}" + "".join(f"{j:>22s}" for j in joints))
  inside = {}
  for f in FIELDS:
    x, s = np.atleast_1d(res.x[f]), np.atleast_1d(res.std[f])
    print(f"{f:18s}" + "".join(f"{v:>12.4g} ± {e:<7.2g}" for v, e in zip(x, s)))
    print(f"{'  truth':18s}" + "".join(f"{v:>12.4g}{'':10s}" for v in true[f]))
    print(f"{'  initial (MJCF)':18s}" + "".join(f"{v:>12.4g}{'':10s}" for v in np.atleast_1d(res.x0[f])))
    inside[f] = np.abs(x - true[f]) <= 3.0 * s
  for w in res.warnings:
    print("warning:", w)
  print(res.summary())
  print(f"truth within 3 std: {sum(int(v.sum()) for v in inside.values())} of {sum(v.size for v in inside.values())}")
  print(f"wrote {out}/: so101_dataset/, params.json, model.xml, signals*.png (measured against identified), cost.png, "
        "params.png")
  print(f"the same from the command line: diffsim sysid {model} {dataset} --units {args.units}"
        + (f" --calibration {calibration}" if calibration else "")
        + "".join(f" --param {f}:{j}" for f in FIELDS for j in joints[:1]) + (" ..." if len(joints) > 1 else ""))
  if args.test:
    rel = {f: np.abs(np.atleast_1d(res.x[f]) / true[f] - 1.0) for f in FIELDS}
    # tick-quantized data: every estimate consistent with its std; kp, damping and armature within a few percent
    ok = (res.fun < 0.1 * res.fun0 and all(v.all() for v in inside.values())
          and all((rel[f] < 0.05).all() for f in ("actuator_gainprm", "dof_damping", "dof_armature")))
    print("relative errors:", {f: np.round(v, 4).tolist() for f, v in rel.items()})
    print("test", "passed" if ok else "FAILED")
    return 0 if ok else 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
