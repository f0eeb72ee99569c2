"""LeRobot datasets (v2.1, v3.0): layout, units, timing, errors, and servo parameters recovered from them.

The datasets are simulated with float64 MuJoCo C from the SO-101 with known servo kp, damping,
armature and frictionloss, at 30 fps against a model whose timestep is 1/480 s as `MjSpec.to_xml`
writes it (0.00208333: 16 steps are 1.6e-6 short of a frame, the case of the resampling bug).
"""

import json
import os
import re
import warnings

import mujoco
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import diffsim
from diffsim import cli
from diffsim import data as D
from diffsim import lerobot as L

from conftest import DEVICE

FPS = 30
SO101 = diffsim.asset_path("so101", "so101_new_calib.xml")
MOTORS = list(L.SO_MOTORS)
# the arm's calibration (LeRobot's MotorCalibration, encoder ticks); ranges of a few thousand ticks
CALIBRATION = {m: {"id": i + 1, "drive_mode": 0, "homing_offset": 40 * i - 100, "range_min": 780 + 37 * i,
                   "range_max": 3290 - 23 * i} for i, m in enumerate(MOTORS)}
CALIBRATION["wrist_roll"].update(range_min=0, range_max=4095)  # LeRobot's full-turn motor
# the "real" servos, relative to the MJCF values: the elbow's in the v2.1 dataset, the shoulder's in the v3.0 one
TRUTH = {"actuator_gainprm:elbow_flex": 1.2, "dof_damping:elbow_flex": 1.3, "dof_armature:elbow_flex": 1.25,
         "dof_damping:shoulder_lift": 0.8, "dof_frictionloss:shoulder_lift": 1.4}
ELBOW = ["actuator_gainprm:elbow_flex", "dof_damping:elbow_flex", "dof_armature:elbow_flex"]
SHOULDER = ["dof_damping:shoulder_lift", "dof_frictionloss:shoulder_lift"]


def _model_xml(tmp, timestep="0.00208333"):
  """The SO-101 with another timestep, written as a file beside its meshes' absolute path."""
  spec = mujoco.MjSpec.from_file(SO101)
  spec.meshdir = os.path.join(os.path.dirname(SO101), "assets")
  spec.option.timestep = float(timestep)
  xml = spec.to_xml()
  assert f'timestep="{timestep}"' in xml  # how to_xml writes 1/480 s
  path = os.path.join(tmp, f"so101_{timestep}.xml")
  with open(path, "w") as f:
    f.write(xml)
  return path


def _truth(path, names):
  m = mujoco.MjModel.from_xml_path(path)
  for name in names:
    factor = TRUTH[name]
    field, joint = name.split(":")
    if field == "actuator_gainprm":
      a = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, joint)
      m.actuator_gainprm[a, 0] *= factor
      m.actuator_biasprm[a, 1] = -m.actuator_gainprm[a, 0]
    else:
      getattr(m, field)[m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, joint)]] *= factor
  mujoco.mj_setConst(m, mujoco.MjData(m))  # armature-derived constants follow, as for the identified model
  return m


def _episode(m, seed, nframe):
  """Goal positions at 30 fps (held between frames) and the joint angles read at each frame (float64 C)."""
  rng = np.random.default_rng(seed)
  t = np.arange(nframe) / FPS
  freq, phase = rng.uniform(0.8, 1.6, 6), rng.uniform(0, 2 * np.pi, 6)
  center = np.array([0.0, 0.2, -0.3, 0.3, 0.0, 0.5])
  amp = np.array([0.3, 0.3, 0.4, 0.3, 0.5, 0.3])
  ctrl = center + amp * np.sin(2 * np.pi * freq * t[:, None] + phase)
  substeps = int(round(1.0 / (FPS * m.opt.timestep)))
  # from rest near the first goal, as a teleoperated arm moves (the servos stay mostly below their force limit)
  return D.simulate(m, ctrl, qpos0=ctrl[0] - 0.05, substeps=substeps, record=("qpos",))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """Two datasets of two episodes each: v2.1 in degrees (other elbow servo), v3.0 normalized (other shoulder
  servo; a file per episode)."""
  tmp = tmp_path_factory.mktemp("lerobot")
  model = _model_xml(str(tmp))
  recs = {"v21": [_episode(_truth(model, ELBOW), seed, 25) for seed in (1, 2)],
          "v30": [_episode(_truth(model, SHOULDER), seed, 25) for seed in (3, 4)]}
  L.save_lerobot(tmp / "v21", recs["v21"], model, version="v2.1", units="degrees", robot_type="so101_follower")
  L.save_lerobot(tmp / "v30", recs["v30"], model, version="v3.0", units="normalized", calibration=CALIBRATION,
                 episodes_per_file=1)
  (tmp / "so101_follower.json").write_text(json.dumps(CALIBRATION, indent=2))
  return {"tmp": tmp, "model": model, "recs": recs, "v21": tmp / "v21", "v30": tmp / "v30",
          "calibration": str(tmp / "so101_follower.json")}


def _load(path, model, **kw):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the timing statement (tested below)
    return L.load_lerobot(path, model, **kw)


# -- the layout ------------------------------------------------------------------------------------------------------


def test_v21_layout_and_schema(setup):
  root = setup["v21"]
  info = json.loads((root / "meta/info.json").read_text())
  assert info["codebase_version"] == "v2.1" and info["fps"] == 30 and info["chunks_size"] == 1000
  assert info["data_path"] == "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
  assert info["features"]["observation.state"]["names"] == [f"{m}.pos" for m in MOTORS]
  eps = [json.loads(line) for line in (root / "meta/episodes.jsonl").read_text().splitlines()]
  assert eps == [{"episode_index": i, "tasks": ["system identification"], "length": 25} for i in (0, 1)]
  assert (root / "meta/tasks.jsonl").is_file() and (root / "meta/episodes_stats.jsonl").is_file()
  t = pq.read_table(root / "data/chunk-000/episode_000001.parquet")
  assert t.schema.field("observation.state").type == pa.list_(pa.float32(), 6)  # fixed_size_list<float>[6]
  assert t.schema.field("action").type == pa.list_(pa.float32(), 6)
  assert t.schema.field("timestamp").type == pa.float32()
  for c in ("frame_index", "episode_index", "index", "task_index"):
    assert t.schema.field(c).type == pa.int64()
  np.testing.assert_array_equal(t.column("index").to_numpy(), 25 + np.arange(25))  # global index
  np.testing.assert_allclose(t.column("timestamp").to_numpy(), np.arange(25) / 30, rtol=1e-7)
  # degrees are the joint angles (zero: the middle of the range, so101_new_calib's zero)
  state = np.stack(t.column("observation.state").to_numpy(zero_copy_only=False))
  q = setup["recs"]["v21"][1].qpos
  np.testing.assert_allclose(state[:, :5], np.rad2deg(q[:, :5]), rtol=1e-6, atol=1e-5)
  lo, hi = mujoco.MjModel.from_xml_path(setup["model"]).jnt_range[5]
  np.testing.assert_allclose(state[:, 5], (q[:, 5] - lo) / (hi - lo) * 100, rtol=1e-6, atol=1e-5)  # 0..100


def test_v30_layout_and_schema(setup):
  root = setup["v30"]
  info = json.loads((root / "meta/info.json").read_text())
  assert info["codebase_version"] == "v3.0"
  assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
  ep = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
  assert ep["episode_index"] == [0, 1] and ep["length"] == [25, 25]
  assert ep["data/chunk_index"] == [0, 0] and ep["data/file_index"] == [0, 1]
  assert ep["dataset_from_index"] == [0, 25] and ep["dataset_to_index"] == [25, 50]  # of the global index
  assert pq.read_table(root / "meta/tasks.parquet").column("task").to_pylist() == ["system identification"]
  assert "observation.state" in json.loads((root / "meta/stats.json").read_text())
  t = pq.read_table(root / "data/chunk-000/file-001.parquet")
  assert set(t.column("episode_index").to_pylist()) == {1}
  # RANGE_M100_100 from the joint angle through the calibration's ticks
  state = np.stack(t.column("observation.state").to_numpy(zero_copy_only=False))
  c = CALIBRATION["elbow_flex"]
  ticks = setup["recs"]["v30"][1].qpos[:, 2] * 4095 / (2 * np.pi) + (c["range_min"] + c["range_max"]) / 2
  np.testing.assert_allclose(state[:, 2], (ticks - c["range_min"]) / (c["range_max"] - c["range_min"]) * 200 - 100,
                             rtol=1e-6, atol=1e-4)


def test_both_layouts_load_the_same_recordings(setup):
  a = _load(setup["v21"], setup["model"], units="degrees")
  b = _load(setup["v30"], setup["model"], calibration=setup["calibration"], units="normalized")
  for got, recs in ((a, setup["recs"]["v21"]), (b, setup["recs"]["v30"])):
    for r, rec in zip(got, recs):
      np.testing.assert_allclose(r.qpos, rec.qpos, atol=2e-6)  # float32 storage
      np.testing.assert_allclose(r.ctrl, rec.ctrl, atol=2e-6)
      np.testing.assert_array_equal(r.time, np.arange(25) / 30)  # frame_index / fps, exactly
  assert [r.source for r in b] == ["v30 episode 0", "v30 episode 1"]
  (one,) = _load(setup["v30"], setup["model"], episodes=[1], calibration=CALIBRATION, units="normalized")
  np.testing.assert_array_equal(one.qpos, b[1].qpos)  # read from file-001, filtered on episode_index


def test_units_are_detected_and_the_assumption_stated(setup, tmp_path):
  msgs = _messages(L.load_lerobot, setup["v30"], setup["model"], calibration=setup["calibration"])
  assert any(re.match(r"v30: units taken as normalized \(RANGE_M100_100\) with the calibration given, as every body "
                      r"joint stays within \+-100", m) for m in msgs), msgs
  # a joint beyond 100 (degrees) can only be degrees
  big = [D.Recording(time=r.time, ctrl=r.ctrl, qpos=r.qpos + np.array([0, 0, 0, 0, 1.6, 0]), source="x")
         for r in setup["recs"]["v21"]]
  L.save_lerobot(tmp_path / "deg", big, setup["model"], version="v2.1")
  msgs = _messages(L.load_lerobot, tmp_path / "deg", setup["model"])
  assert any(re.match(r"deg: units taken as degrees, because observation.state wrist_roll.pos in the data reaches "
                      r"1\d\d(\.\d+)?, beyond the \+-100", m) for m in msgs), msgs


def _messages(fn, *args, **kw):
  """The warnings `fn` gives, whatever the filters outside."""
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    fn(*args, **kw)
  return [str(x.message) for x in w]


def test_frames_off_the_step_grid_are_put_at_their_nearest_step(setup):
  # the stock SO-101 (timestep 0.002): 16.67 steps per frame
  msgs = _messages(L.load_lerobot, setup["v21"], units="degrees")
  assert msgs == ["v21: frames at 30 fps (0.0333333333 s) are 16.67 steps of the model's 0.002 s timestep, not a whole "
                  "number: each frame is compared with the simulation at its nearest step (frame times moved by up to "
                  "0.000667 s, 0.02 of a frame) and its action is held from that step to the next frame's. For exact "
                  "timing set <option timestep=\"0.00196078431372549\"/> (17 steps per frame)"], msgs
  a, _ = _load(setup["v21"], None, units="degrees")
  steps = D.sim_steps(a.time, 0.002)
  np.testing.assert_array_equal(steps, np.rint(np.arange(25) / 30 / 0.002))
  assert set(np.diff(steps)) == {16, 17}
  # the 1/480 s model written with six digits: the frames are used as recorded, and the drift is stated once
  msgs = _messages(L.load_lerobot, setup["v21"], setup["model"], units="degrees")
  assert len(msgs) == 1 and msgs[0].startswith("v21 episode 0 and 1 more: the sample interval (0.0333333333 s) is 16 "
                                               "model steps of 0.00208333 s only to 1.6e-06 (relative)"), msgs


def test_joint_map_flips_signs_moves_zeros_and_names_other_joints(setup):
  (ref, _) = _load(setup["v21"], setup["model"], units="degrees")
  flip = {"elbow_flex": ("elbow_flex", -1.0, 0.1), "gripper": ("gripper", -1)}
  (r, _) = _load(setup["v21"], setup["model"], units="degrees", joint_map=flip)
  np.testing.assert_allclose(r.qpos[:, 2], 0.1 - ref.qpos[:, 2], atol=1e-12)
  lo, hi = mujoco.MjModel.from_xml_path(setup["model"]).jnt_range[5]
  np.testing.assert_allclose(r.qpos[:, 5], hi + lo - ref.qpos[:, 5], atol=1e-12)
  np.testing.assert_array_equal(r.qpos[:, :2], ref.qpos[:, :2])
  with pytest.raises(D.DataError, match=r"joint_map maps motor 'elbow_flex' to 'elbow', which is no joint of the "
                                        r"model"):
    L.load_lerobot(setup["v21"], setup["model"], units="degrees", joint_map={"elbow_flex": "elbow"})
  with pytest.raises(D.DataError, match=r"the model's joint\(s\) \['elbow_flex'\] get no column of v21"):
    L.load_lerobot(setup["v21"], setup["model"], units="degrees", joint_map={"elbow_flex": None})


def test_legacy_names_are_read(setup, tmp_path):
  # datasets from before mid-2025: robot_type so100, names {"motors": ["main_shoulder_pan", ...]}
  root = tmp_path / "old"
  L.save_lerobot(root, setup["recs"]["v21"][:1], setup["model"], version="v2.1", robot_type="so100")
  info = json.loads((root / "meta/info.json").read_text())
  for k in ("observation.state", "action"):
    info["features"][k]["names"] = {"motors": [f"main_{m}" for m in MOTORS]}
  (root / "meta/info.json").write_text(json.dumps(info))
  msgs = _messages(L.load_lerobot, root, setup["model"], units="degrees")
  assert any("'main_' prefix: a dataset recorded before mid-2025" in m for m in msgs), msgs
  (r,) = _load(root, setup["model"], units="degrees")
  np.testing.assert_allclose(r.qpos, setup["recs"]["v21"][0].qpos, atol=2e-6)


# -- errors ----------------------------------------------------------------------------------------------------------


def _copy_dataset(src, dst):
  import shutil

  shutil.copytree(src, dst)
  return dst


def _rewrite(path, **columns):
  t = pq.read_table(path)
  for name, fn in columns.items():
    i = t.schema.get_field_index(name)
    t = t.set_column(i, t.schema.field(i), fn(t.column(name)))
  pq.write_table(t, path)


def _nan_row(col):
  v = np.stack(col.to_numpy(zero_copy_only=False)).astype(np.float32)
  v[7, 2] = np.nan
  return pa.FixedSizeListArray.from_arrays(pa.array(v.ravel(), pa.float32()), 6)


def _swap_timestamps(col):
  v = col.to_numpy().copy()
  v[5], v[6] = v[6], v[5]
  return pa.array(v, pa.float32())


def _edit_info(**changes):
  def edit(root):
    info = json.loads((root / "meta/info.json").read_text())
    for k, v in changes.items():
      if v is None:
        del info["features"][k]
      else:
        info[k] = v
    (root / "meta/info.json").write_text(json.dumps(info))
  return edit


@pytest.mark.parametrize("which, edit, kw, error, message", [
  ("v21", _edit_info(**{"observation.state": None}), {}, D.DataError,
   r"v21: the dataset has no 'observation.state' feature \(meta/info.json lists \['action', 'episode_index', "),
  ("v30", _edit_info(codebase_version="v1.6"), {}, D.DataError,
   r"unknown codebase_version 'v1.6' in meta/info.json; diffsim reads LeRobot datasets v2.1 and v3.0"),
  ("v21", None, {"episodes": [0, 5]}, D.DataError,
   r"v21: episode 5 is out of range: the dataset has 2 episode\(s\) \(0-1\); .* --episodes 0:2"),
  ("v30", lambda r: _rewrite(r / "data/chunk-000/file-001.parquet", **{"observation.state": _nan_row}), {},
   D.DataError, r"v30 episode 1: observation.state elbow_flex.pos is nan at frame 7 .* drop the episode"),
  ("v21", lambda r: _rewrite(r / "data/chunk-000/episode_000000.parquet", timestamp=_swap_timestamps), {},
   D.DataError, r"v21 episode 0: timestamps must increase, but frame 6 has timestamp 0.166667 s after 0.2 s"),
  ("v30", None, {"calibration": None, "units": "normalized"}, D.DataError,
   r"v30: normalized joint values \(RANGE_M100_100\) need the arm's calibration .*\(--calibration FILE\)"),
  ("v30", None, {"calibration": {f"motor{i}": CALIBRATION["elbow_flex"] for i in range(6)}, "units": None}, D.DataError,
   r"calibration: a calibration for motors \['motor0', .*\], but v30 records \['shoulder_pan', .*\] too; is it "
   r"another robot's calibration\?"),
  ("v21", _edit_info(fps=25), {}, D.DataError,
   r"v21 episode 0: meta/info.json says fps = 25, but the timestamps disagree: frame 1 is at 0.0333333 s, not 0.04 s "
   r"\(the timestamps run at 30 frames per second\)"),
  ("v21", None, {"units": None}, D.DataError,
   r"v21: the body joints stay within \+-100 everywhere .* fits both degrees and LeRobot's normalized .* Say which: "
   r"units='degrees' \(--units degrees\)"),
])
def test_errors_name_the_problem_and_the_fix(setup, tmp_path, which, edit, kw, error, message):
  root = _copy_dataset(setup[which], tmp_path / which)
  if edit is not None:
    edit(root)
  kw = {**({"calibration": CALIBRATION, "units": "normalized"} if which == "v30" else {"units": "degrees"}), **kw}
  with pytest.raises(error, match=message):
    L.load_lerobot(root, setup["model"], **kw)


def test_cli_refuses_bad_datasets_before_any_kernel(setup, tmp_path, capsys):
  # a device that does not exist: building a Scene before the data were checked would say so instead
  base = [setup["model"], str(setup["v21"]), "--param", "dof_damping:elbow_flex", "--out", str(tmp_path / "o"),
          "--device", "nonexistent"]
  cases = [
    ([], "the body joints stay within +-100 everywhere"),
    (["--units", "normalized"], "need the arm's calibration"),
    (["--units", "degrees", "--episodes", "0:3"], "episode 2 is out of range"),
    (["--units", "degrees", "--calibration", str(tmp_path / "nope.json")], "calibration file not found"),
  ]
  for extra, message in cases:
    assert cli.main(["sysid", *base, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err, err
  (tmp_path / "folder").mkdir()
  assert cli.main(["sysid", setup["model"], str(tmp_path / "folder"), "--param", "dof_damping:elbow_flex"]) == 2
  assert "is a folder but not a LeRobot dataset (no meta/info.json)" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    cli.main(["sysid", *base, "--episodes", "a:b"])
  assert "--episodes takes episode indices" in capsys.readouterr().err


def test_cli_episode_specs():
  assert cli.parse_episodes("0:10") == list(range(10))
  assert cli.parse_episodes("3") == [3]
  assert cli.parse_episodes("0,2,5") == [0, 2, 5]
  assert cli.parse_episodes("0:3,12") == [0, 1, 2, 12]
  assert cli.parse_episodes("4:") == slice(4, None)


# -- recovery of the servos ------------------------------------------------------------------------------------------


def _check(res, names, rtol):
  for name in names:
    field, joint = name.split(":")
    m = mujoco.MjModel.from_xml_path(SO101)
    if field == "actuator_gainprm":
      nominal = m.actuator_gainprm[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, joint), 0]
    else:
      nominal = getattr(m, field)[m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, joint)]]
    true = nominal * TRUTH[name]
    x, s = res.x[name], res.std[name]
    assert abs(res.x0[name] / true - 1) > 0.1, name  # the MJCF value is well away from the truth
    print(f"{name}: {x:.6g} (truth {true:.6g}, rel. error {x / true - 1:.2e}, std {s:.2g})")
    assert abs(x / true - 1) < rtol, (name, x, true, s)
    assert abs(x - true) < 5 * s + 1e-6 * true, (name, x, true, s)  # and its std says how close


def test_recovers_kp_damping_armature_from_v21_in_degrees(setup):
  recs = _load(setup["v21"], setup["model"], units="degrees")
  res = diffsim.sysid.identify(setup["model"], recs, ELBOW, device=DEVICE, maxiter=20)
  assert res.success, res.message
  _check(res, ELBOW, rtol=1e-4)  # noise-free but for float32 storage (sysid: 1e-7..1e-5 on smooth systems)


def test_recovers_damping_and_friction_from_v30_normalized_with_a_calibration_file(setup, tmp_path):
  # through the command line: dataset folder, --units normalized, --calibration FILE
  names = SHOULDER
  out = tmp_path / "out"
  argv = ["sysid", setup["model"], str(setup["v30"]), "--units", "normalized", "--calibration", setup["calibration"],
          "--episodes", "0:2", "--out", str(out), "--no-plots", "--quiet", "--device", DEVICE, "--maxiter", "20"]
  for n in names:
    argv += ["--param", n]
  assert cli.main(argv) == 0
  saved = json.loads((out / "params.json").read_text())

  class Res:
    x = {n: saved[n]["value"] for n in names}
    std = {n: saved[n]["std"] for n in names}
    x0 = {n: saved[n]["initial"] for n in names}

  _check(Res, names, rtol=1e-3)  # frictionloss, non-smooth: about 1e-4 on noise-free data (diffsim.sysid)
