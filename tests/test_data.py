"""Recorded data: formats, validation errors, resampling (host only: no kernels run here)."""

import warnings

import mujoco
import numpy as np
import pytest

import diffsim
from diffsim import data as D
from diffsim.data import validation

import models  # tests/models.py

PENDULUM = models.PENDULUM  # a pendulum with a motor, joint-angle and tip-position sensors (3 values)


@pytest.fixture(scope="module")
def mjm():
  return mujoco.MjModel.from_xml_string(PENDULUM)


@pytest.fixture(scope="module")
def rec(mjm):
  t = np.arange(40) * 0.02
  ctrl = np.sin(3 * t)[:, None]
  return D.simulate(mjm, ctrl, qpos0=[0.2], substeps=2)


def _copy(rec, **kw):
  fields = {k: (None if getattr(rec, k) is None else np.array(getattr(rec, k), copy=True))
            for k in ("time", "ctrl", "qpos", "qvel", "sensordata", "act", "sensor_mask", "qpos0", "qvel0")}
  fields.update(kw)
  return D.Recording(**fields, source="test.npz")


def test_simulate_matches_mj_step(mjm, rec):
  d = mujoco.MjData(mjm)
  d.qpos[0] = 0.2
  for k in range(rec.nrow):
    np.testing.assert_allclose(rec.qpos[k], d.qpos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rec.qvel[k], d.qvel, rtol=0, atol=1e-12)
    d.ctrl[:] = rec.ctrl[k]
    mujoco.mj_step(mjm, d)
    np.testing.assert_allclose(rec.sensordata[k], d.sensordata, rtol=0, atol=1e-12)  # row k: state k, ctrl k
    mujoco.mj_step(mjm, d)
  np.testing.assert_allclose(np.diff(rec.time), 0.02)
  np.testing.assert_array_equal(D.sim_steps(rec.time, 0.01), 2 * np.arange(rec.nrow))


def test_npz_roundtrip_single_and_batched(tmp_path, mjm, rec):
  p = tmp_path / "one.npz"
  D.save_npz(p, rec)
  (r,) = D.load(p, mjm)
  for k in ("time", "ctrl", "qpos", "qvel", "sensordata"):
    np.testing.assert_array_equal(getattr(r, k), getattr(rec, k))
  p2 = tmp_path / "two.npz"
  D.save_npz(p2, [rec, _copy(rec, qpos=rec.qpos + 1.0)])
  recs = D.load(p2, mjm)
  assert len(recs) == 2 and recs[1].source == "two.npz[1]"
  np.testing.assert_array_equal(recs[1].qpos, rec.qpos + 1.0)


def test_saved_files_get_the_usual_permissions(tmp_path, rec):
  # written through a private temporary file and a rename, yet readable as a plain open() would make it
  import os

  umask = os.umask(0o022)
  try:
    D.save_npz(tmp_path / "r.npz", rec)
  finally:
    os.umask(umask)
  assert (tmp_path / "r.npz").stat().st_mode & 0o777 == 0o644
  assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_csv_roundtrip_with_names(tmp_path, mjm, rec):
  p = tmp_path / "rec.csv"
  D.save_csv(p, rec, mjm)
  header = open(p).readline().strip().split(",")
  assert header == ["time", "ctrl:torque", "qpos:hinge", "qvel:hinge", "sensor:angle", "sensor:tip_pos[0]",
                    "sensor:tip_pos[1]", "sensor:tip_pos[2]"]
  (r,) = D.load(p, mjm)
  for k in ("time", "ctrl", "qpos", "qvel", "sensordata"):
    np.testing.assert_array_equal(getattr(r, k), getattr(rec, k))
  assert r.sensor_mask is None


def test_csv_bare_names_and_sensor_subset(tmp_path, mjm, rec):
  # bare names resolve when unique; a subset of sensors is allowed and masked
  p = tmp_path / "bare.csv"
  cols = np.stack([rec.time, rec.ctrl[:, 0], rec.qpos[:, 0], rec.sensordata[:, 0]], axis=1)
  np.savetxt(p, cols, delimiter=",", header="time,torque,hinge,angle", comments="")
  (r,) = D.load(p, mjm)
  np.testing.assert_array_equal(r.ctrl[:, 0], rec.ctrl[:, 0])
  np.testing.assert_array_equal(r.qpos[:, 0], rec.qpos[:, 0])
  assert r.qvel is None
  np.testing.assert_array_equal(r.sensor_mask, [True, False, False, False])
  np.testing.assert_array_equal(r.sensordata[:, 0], rec.sensordata[:, 0])


def _write_csv(path, header, rows):
  with open(path, "w") as f:
    f.write(",".join(header) + "\n")
    for row in rows:
      f.write(",".join(str(v) for v in row) + "\n")


@pytest.mark.parametrize("header, message", [
  (["time", "ctrl:torque", "qpos:hinge", "foo"], "column 'foo' names nothing in the model"),
  (["time", "qpos:hinge"], "missing control column(s) for actuator(s) ['torque']"),
  (["ctrl:torque", "qpos:hinge"], "no 'time' column"),
  (["time", "ctrl:torque", "qpos:hinge", "qpos:hinge"], "duplicate column(s) ['qpos:hinge']"),
  (["time", "ctrl:torque", "qpos:nope"], "known qpos columns: ['qpos:hinge']"),
])
def test_csv_errors(tmp_path, mjm, header, message):
  p = tmp_path / "bad.csv"
  _write_csv(p, header, [[0.01 * i] * len(header) for i in range(3)])
  with pytest.raises(D.DataError) as e:
    D.load(p, mjm)
  assert message in str(e.value)


def test_csv_ambiguous_bare_name(tmp_path):
  # SO-101 names its actuators after their joints: a bare name must get a prefix
  so101 = mujoco.MjModel.from_xml_path(diffsim.asset_path("so101", "so101_new_calib.xml"))
  names = [mujoco.mj_id2name(so101, mujoco.mjtObj.mjOBJ_ACTUATOR, i) for i in range(so101.nu)]
  p = tmp_path / "so.csv"
  header = ["time"] + [f"ctrl:{n}" for n in names] + ["elbow_flex"]
  _write_csv(p, header, [[0.002 * i] * len(header) for i in range(3)])
  with pytest.raises(D.DataError, match="names several elements.*'qpos:elbow_flex'"):
    D.load(p, so101)


def test_csv_empty_cell_is_reported_as_nan(tmp_path, mjm):
  p = tmp_path / "gap.csv"
  with open(p, "w") as f:
    f.write("time,ctrl:torque,qpos:hinge\n0,0,0.1\n0.01,0,\n0.02,0,0.1\n")
  with pytest.raises(D.DataError, match=r"'qpos' contains 1 NaN/Inf value\(s\), the first at row 1"):
    D.load(p, mjm)


# every validation error, with the words that name the problem and the fix
@pytest.mark.parametrize("change, message", [
  (dict(qpos="nan@5"), r"'qpos' contains 1 NaN/Inf value\(s\), the first at row 5, column 0 .* drop or interpolate"),
  (dict(ctrl="inf@3"), r"'ctrl' contains 1 NaN/Inf value\(s\), the first at row 3"),
  (dict(sensordata="nan@7"), r"'sensordata' contains 1 NaN/Inf"),
  (dict(time="nan@2"), r"'time' contains 1 NaN/Inf"),
  (dict(time="dup@4"), r"'time' must be strictly increasing, but time\[4\] = .* <= time\[3\] .* sort the rows"),
  (dict(time="swap@6"), r"'time' must be strictly increasing"),
  (dict(qvel="short"), r"'qvel' has 39 rows but 'time' has 40: every array needs one row per time sample"),
  (dict(ctrl="wide"), r"'ctrl' has 2 columns but the model has 1 actuators \['torque'\]"),
  (dict(qpos="wide"), r"'qpos' has 2 columns but the model has 1 qpos coordinates"),
  (dict(qvel="wide"), r"'qvel' has 2 columns but the model has 1 degrees of freedom"),
  (dict(sensordata="narrow"), r"'sensordata' has 3 columns but the model has 4 sensor values"),
  (dict(ctrl=None), r"missing 'ctrl'; the model has 1 actuators \['torque'\]"),
  (dict(qpos=None, qvel=None, sensordata=None), r"nothing measured; give at least one of 'qpos'"),
  (dict(time="offgrid"), r"time\[1\] - time\[0\] = 0.015 s is not a multiple of the model timestep 0.01 s.*"
                         r"diffsim.data.resample\(rec, period=0.02\).*--resample.*<option timestep=...>"),
  (dict(time="irregular"), r"time\[11\] - time\[10\] = 0.025 s is not a multiple"),
  (dict(qpos0=np.zeros(3)), r"'qpos0' has 3 values but the model has 1"),
])
def test_validation_errors(mjm, rec, change, message):
  kw = {}
  for k, how in change.items():
    base = None if getattr(rec, k) is None else np.array(getattr(rec, k), dtype=float, copy=True)
    if how is None or isinstance(how, np.ndarray):
      kw[k] = how
    elif how.startswith(("nan@", "inf@")):
      row = int(how[4:])
      v = base
      v[row] = np.nan if how.startswith("nan") else np.inf
      if v.ndim == 2:
        v[row, 1:] = 0.0
      kw[k] = v
    elif how.startswith("dup@"):
      i = int(how[4:])
      base[i] = base[i - 1]
      kw[k] = base
    elif how.startswith("swap@"):
      i = int(how[5:])
      base[i], base[i - 1] = base[i - 1], base[i]
      kw[k] = base
    elif how == "short":
      kw[k] = base[:-1]
    elif how == "wide":
      kw[k] = np.concatenate([base, base], axis=1)
    elif how == "narrow":
      kw[k] = base[:, :3]
    elif how == "offgrid":
      kw[k] = np.arange(rec.nrow) * 0.015
    elif how == "irregular":
      t = np.arange(rec.nrow) * 0.02
      t[11:] += 0.005
      kw[k] = t
  bad = _copy(rec, **kw)
  with pytest.raises(D.DataError, match=message) as e:
    D.validate(bad, mjm)
  assert "test.npz" in str(e.value)  # the message names the source


def test_millisecond_times_are_refused(tmp_path, monkeypatch, mjm, rec):
  # 0.02 s samples logged as 20 "s": 2,000 steps of 0.01 s per row; the fit would seem to hang
  ms = _copy(rec, time=rec.time * 1000)
  message = (r"test.npz: sample interval time\[1\] - time\[0\] = 20 s is 2,000 model steps of 0.01 s \(the limit is "
             r"500 per interval; the 40 rows would take 78,000 simulation steps\)\. Is 'time' in milliseconds\? .*"
             r"divide it by 1000\. .*max_steps_per_sample=N in diffsim.data.load/validate")
  with pytest.raises(D.DataError, match=message):
    D.validate(ms, mjm)
  with pytest.raises(D.DataError, match=r"in milliseconds"):  # refused before resampling, not after
    D.validate(ms, mjm, resample_to_grid=True)
  # one step per sample, the case a limit of 1000 would miss: in ms it is exactly 1000 steps
  with pytest.raises(D.DataError, match=r"= 10 s is 1,000 model steps"):
    D.validate(_copy(rec, time=np.arange(rec.nrow) * 0.01 * 1000), mjm)
  # up to the limit passes; sparse data pass with a higher limit (keyword or module default)
  D.validate(_copy(rec, time=np.arange(rec.nrow) * 0.01 * D.MAX_STEPS_PER_SAMPLE), mjm)
  assert D.validate(ms, mjm, max_steps_per_sample=2000) is ms
  with pytest.raises(ValueError, match="max_steps_per_sample must be a positive integer"):
    D.validate(ms, mjm, max_steps_per_sample=0)
  p = tmp_path / "ms.npz"
  D.save_npz(p, ms)
  with pytest.raises(D.DataError, match=r"ms.npz: sample interval .* in milliseconds"):
    D.load(p, mjm)
  (r,) = D.load(p, mjm, max_steps_per_sample=2000)
  np.testing.assert_array_equal(r.time, ms.time)
  monkeypatch.setattr(validation, "MAX_STEPS_PER_SAMPLE", 2000)  # the default is read where it is defined
  D.validate(ms, mjm)


def test_csv_without_header(tmp_path, mjm, rec):
  # numbers only: the first row used to be read as column names ("duplicate column(s) ['0']")
  p = tmp_path / "noheader.csv"
  D.save_csv(p, rec, mjm)
  lines = open(p).read().splitlines(keepends=True)
  p.write_text("".join(lines[1:]))
  message = (r"noheader.csv: the first row \(0,0,0.2\d*,0,\.\.\.\) holds numbers, not column names; the CSV needs a "
             r"header row naming its columns: 'time', then joint")
  with pytest.raises(D.DataError, match=message):
    D.load(p, mjm)


def test_initial_state_warning_fits_the_source(tmp_path, mjm, rec):
  # sensors only, no initial state: the advice must be one the user can follow for that kind of file
  sensors = _copy(rec, qpos=None, qvel=None)
  in_memory = D.Recording(time=rec.time, ctrl=rec.ctrl, sensordata=rec.sensordata)
  assert D.initial_state_warning(in_memory).endswith("give it as Recording(qpos0=..., qvel0=...)")
  D.save_csv(tmp_path / "s.csv", sensors, mjm)
  (r,) = D.load(tmp_path / "s.csv", mjm)
  msg = D.initial_state_warning(r)
  assert msg.startswith("s.csv: neither qpos nor qpos0")
  assert "a CSV cannot hold an initial state: add the qpos:<joint> columns, or convert it to .npz with the keys " \
         "'qpos0', 'qvel0'" in msg and "Recording(" not in msg
  (r,) = D.load(tmp_path / "s.csv", mjm, resample_to_grid=True)  # the source names the file, then the resampling
  assert "a CSV cannot" in D.initial_state_warning(D.resample(r, 0.04))
  D.save_npz(tmp_path / "s.npz", [sensors, sensors])
  r = D.load(tmp_path / "s.npz", mjm)[1]
  assert D.initial_state_warning(r).endswith("add the keys 'qpos0' and 'qvel0' to the .npz")
  assert D.initial_state_warning(_copy(sensors, qpos0=[0.2])) is None
  assert D.initial_state_warning(rec) is None


def test_npz_errors(tmp_path, mjm, rec):
  p = tmp_path / "bad.npz"
  np.savez(p, time=rec.time, ctrl=rec.ctrl, qpos=rec.qpos, velocity=rec.qvel)
  with pytest.raises(D.DataError, match=r"unknown key\(s\) \['velocity'\]"):
    D.load(p, mjm)
  np.savez(p, ctrl=rec.ctrl, qpos=rec.qpos)
  with pytest.raises(D.DataError, match="missing 'time'"):
    D.load(p, mjm)
  np.savez(p, time=rec.time, ctrl=np.stack([rec.ctrl] * 2), qpos=np.stack([rec.qpos] * 3))
  with pytest.raises(D.DataError, match="disagree on the number of trajectories"):
    D.load(p, mjm)
  q = tmp_path / "data.txt"
  q.write_text("1,2,3")
  with pytest.raises(D.DataError, match="unknown data format '.txt'"):
    D.load(q, mjm)
  with pytest.raises(FileNotFoundError, match="recorded data not found"):
    D.load(tmp_path / "missing.npz", mjm)


def test_resample_fixes_offgrid_times(mjm):
  # a 75 Hz-ish recording: linear signals interpolate exactly, the control is held
  t = np.arange(30) * 0.015
  ctrl = np.where(np.arange(30) % 2 == 0, 1.0, -1.0)[:, None]
  r = D.Recording(time=t, ctrl=ctrl, qpos=(0.1 + 2.0 * t)[:, None], qvel=np.full((30, 1), 2.0), source="x")
  with pytest.raises(D.DataError):
    D.validate(r, mjm)
  g = D.validate(r, mjm, resample_to_grid=True)
  np.testing.assert_allclose(np.diff(g.time), 0.02)
  np.testing.assert_allclose(g.qpos[:, 0], 0.1 + 2.0 * g.time, atol=1e-12)
  # zero-order hold: the control in force at each new time
  idx = np.searchsorted(t, g.time + 1e-12, side="right") - 1
  np.testing.assert_array_equal(g.ctrl, ctrl[idx])
  assert g.time[-1] <= t[-1] + 1e-12


def test_estimate_qvel_is_second_order(mjm):
  # exact for quadratic motion, at the ends and inside, on an irregular (dt-multiple) grid
  t = np.cumsum([0, 0.01, 0.02, 0.01, 0.03, 0.01])
  q = 0.3 + 1.5 * t - 4.0 * t**2
  r = D.Recording(time=t, ctrl=np.zeros((6, 1)), qpos=q[:, None], source="x")
  for row in range(6):
    np.testing.assert_allclose(D.estimate_qvel(r, mjm, row), [1.5 - 8.0 * t[row]], atol=1e-9)


def test_initial_state_travels_with_sensor_only_recordings(mjm):
  r = D.simulate(mjm, np.zeros((5, 1)), qpos0=[0.4], qvel0=[-1.0], record=("sensordata",))
  assert r.qpos is None and r.qvel is None
  np.testing.assert_array_equal(r.qpos0, [0.4])
  np.testing.assert_array_equal(r.qvel0, [-1.0])
  D.validate(r, mjm)


def test_identify_rejects_bad_data_before_any_kernel(mjm, rec):
  # on a device that does not exist: any device work before validation would fail with another error
  from diffsim import sysid

  bad = _copy(rec, qpos=np.where(np.arange(rec.nrow)[:, None] == 3, np.nan, rec.qpos))
  with pytest.raises(D.DataError, match="NaN/Inf"):
    sysid.identify(PENDULUM, bad, ["dof_damping:hinge"], device="nonexistent")
  with pytest.raises(D.DataError, match="in milliseconds"):  # not a ~78,000-step rollout
    sysid.identify(PENDULUM, _copy(rec, time=rec.time * 1000), ["dof_damping:hinge"], device="nonexistent")
  with pytest.raises(KeyError, match=r"no joint named 'nope' in the model; joints are: \['hinge'\]"):
    sysid.identify(PENDULUM, rec, ["dof_damping:nope"], device="nonexistent")
  with pytest.raises(ValueError, match=r"initial guess \(MJCF value \[0.05\]\) lies outside the bounds"):
    sysid.identify(PENDULUM, rec, ["dof_damping:hinge"], bounds={"dof_damping:hinge": (0.1, 1.0)}, device="nonexistent")
  with pytest.raises(ValueError, match="bounds name unknown parameters"):
    sysid.identify(PENDULUM, rec, ["dof_damping:hinge"], bounds={"body_mass:pole": (0.1, 1.0)}, device="nonexistent")
  with pytest.raises(ValueError, match="duplicate parameters"):
    sysid.identify(PENDULUM, rec, ["dof_damping:hinge", "dof_damping:hinge"], device="nonexistent")
  with pytest.raises(KeyError, match="unknown parameter field 'dof_dampin'"):
    sysid.identify(PENDULUM, rec, ["dof_dampin:hinge"], device="nonexistent")


# -- frame periods that are a whole number of steps only to a few digits (issue 15) ----------------------------------

FRAME_DT = "0.00208333"  # 1/480 s as MjSpec.to_xml writes it: 16 steps are 1.6e-6 (relative) short of 1/30 s


def _frames(nframe=61):
  """A 30 fps recording whose control changes at every frame (the data of a LeRobot episode)."""
  t = np.arange(nframe) / 30.0
  ctrl = np.sin(2.0 * np.arange(nframe))[:, None]  # a new value every frame
  return D.Recording(time=t, ctrl=ctrl, qpos=(0.1 * np.sin(t))[:, None], source="frames")


def test_frame_period_within_1e_5_of_whole_steps_is_accepted_and_the_drift_stated():
  mjm = mujoco.MjModel.from_xml_string(PENDULUM.replace('timestep="0.01"', f'timestep="{FRAME_DT}"'))
  rec = _frames()
  with pytest.warns(UserWarning, match=r"frames: the sample interval \(0.0333333333 s\) is 16 model steps of "
                                       r"0.00208333 s only to 1.6e-06 \(relative\), so the simulation's clock "
                                       r"drifts from the recording's by 5.3e-08 s per sample \(2.6e-05 of a step; "
                                       r"sample k is compared with the state after 16 k steps\)"
                                       r".*timestep=\"0.0020833333333333333\""):
    g = D.validate(rec, mjm)
  assert g is rec  # used as recorded: no resampling, no control moved
  np.testing.assert_array_equal(D.sim_steps(rec.time, mjm.opt.timestep), 16 * np.arange(rec.nrow))
  drift = D.clock_drift(rec.time, mjm.opt.timestep)
  np.testing.assert_allclose(drift, rec.time - 16 * np.arange(rec.nrow) * float(FRAME_DT), atol=1e-15)
  # 1.4e-5 relative is not a whole number of steps: refused, with a timestep written in full as the fix
  off = D.Recording(time=rec.time * (1 + 1.4e-5), ctrl=rec.ctrl, qpos=rec.qpos, source="off")
  with pytest.raises(D.DataError, match=r"is not a multiple of the model timestep 0.00208333 s.*"
                                        r"timestep=\"0.00208336\d*\" \(16 steps per sample\)"):
    D.validate(off, mjm)
  # exact grids (and float round-off of them) warn about nothing
  exact = mujoco.MjModel.from_xml_string(PENDULUM.replace('timestep="0.01"', f'timestep="{1 / 480!r}"'))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    D.validate(rec, exact)


def test_resampled_controls_are_not_held_a_frame_late():
  # Before the fix: resample moved the frames onto a 16 x 0.00208333 s grid that drifts 5e-8 s earlier per frame,
  # looked the control up with a 1e-12 s tolerance, and so gave every sample after the first the control of the
  # frame before (SO-101 elbow damping fitted as 0.060 +- 0.024, truth 0.6).
  rec = _frames()
  g = D.resample(rec, 16 * float(FRAME_DT))
  assert g.nrow == rec.nrow
  np.testing.assert_array_equal(g.ctrl, rec.ctrl)  # each frame's own control
  np.testing.assert_array_equal(g.qpos, rec.qpos)  # and its own measurement, not one interpolated 5e-8 s early
  # between samples (no original sample near) the control in force is held, measurements interpolated
  h = D.resample(rec, 0.5 / 30.0)
  np.testing.assert_array_equal(h.ctrl[1::2], rec.ctrl[:-1])
  np.testing.assert_allclose(h.qpos[1::2, 0], 0.5 * (rec.qpos[:-1, 0] + rec.qpos[1:, 0]))


@pytest.mark.parametrize("kind, value, message", [
  ("qpos", 1e30, r"qpos:hinge reaches 1e\+30 \(row 7\), beyond any plausible value in SI units .* encoder ticks"),
  ("ctrl", -3e8, r"ctrl:torque reaches -3e\+08 \(row 7\)"),
  ("time", 1e9, r"time reaches 1e\+09"),
])
def test_absurd_magnitudes_name_the_column_and_the_likely_unit_mistake(mjm, rec, kind, value, message):
  v = np.array(getattr(rec, kind), copy=True)
  if kind == "time":
    v = v + value
  else:
    v[7] = value
  with pytest.raises(D.DataError, match=message):
    D.validate(_copy(rec, **{kind: v}), mjm)


def test_angles_in_ticks_or_degrees_are_refused_with_the_unit_named():
  mjm = mujoco.MjModel.from_xml_path(diffsim.asset_path("so101", "so101_new_calib.xml"))
  t = np.arange(10) * 0.02
  q = np.zeros((10, 6))
  ticks = q.copy()
  ticks[:, 2] = 2048 + 10 * np.arange(10)  # STS3215 encoder ticks in the elbow's qpos column
  with pytest.raises(D.DataError, match=r"qpos:elbow_flex reaches 2138 at row 9, far outside its range \[-1.69, 1.69\] "
                                        r"rad: likely degrees instead of radians .* raw encoder ticks"):
    D.validate(D.Recording(time=t, ctrl=q, qpos=ticks, source="x"), mjm)
  degrees = q.copy()
  degrees[:, 0] = 90.0  # the target in degrees
  with pytest.raises(D.DataError, match=r"ctrl:shoulder_pan reaches 90 .* likely degrees instead of radians"):
    D.validate(D.Recording(time=t, ctrl=degrees, qpos=q, source="x"), mjm)
  D.validate(D.Recording(time=t, ctrl=q + 1.9, qpos=q - 1.7, source="x"), mjm)  # at the limits: fine


def test_group_messages_folds_the_same_text_from_several_recordings():
  msgs = ["a.npz: drifts 1e-8 s per sample", "b.npz: drifts 1e-8 s per sample", "c.npz: other", "no source"]
  assert D.group_messages(msgs) == ["a.npz and 1 more: drifts 1e-8 s per sample", "c.npz: other", "no source"]
  # a folded message and the same recordings validated again: counted once
  again = ["a.npz and 1 more: drifts", "a.npz: drifts", "b.npz: drifts"]
  assert D.group_messages(again) == ["a.npz and 1 more: drifts"]
