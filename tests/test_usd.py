"""USD stages (diffsim.usd, Scene.from_usd): what the import keeps, checked against the values the
test stages author (tests/usd_stages.py) and against MJCF written by hand for the same scene."""

import hashlib
import json
import math
import sys

import mujoco
import numpy as np
import pytest

import diffsim
from diffsim import cli
from diffsim import data as D
from diffsim.scene import load_mjmodel
from diffsim.usd import UsdError, usd_to_spec

from usd_stages import ARM, arm_mjcf, write_arm_stage, write_bad_stage, write_pendulum_stage, write_stage_from_mjmodel

pytestmark = pytest.mark.filterwarnings("ignore:.*not kept in the MuJoCo model")


@pytest.fixture(scope="module")
def arm_path(tmp_path_factory):
  return write_arm_stage(tmp_path_factory.mktemp("usd") / "arm.usda")


@pytest.fixture(scope="module")
def arm_scene(arm_path):
  return diffsim.Scene.from_usd(arm_path, nworld=2, device="cpu")


def _digest(path):
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def test_from_usd_keeps_what_the_stage_authors(arm_scene):
  m, f32 = arm_scene.mjm, lambda v: np.float32(v).astype(np.float64)
  assert arm_scene.nworld == 2 and m.nq == 2 + 7 + 7 and m.nu == 2
  # names: the prims' leaf names where unique, their paths kept on the scene
  assert arm_scene.usd_paths["body"] == {"base": "/World/arm/base", "link1": "/World/arm/link1",
                                         "link2": "/World/arm/link2", "box": "/World/box", "rock": "/World/rock"}
  assert arm_scene.usd_paths["joint"]["shoulder"] == "/World/arm/joints/shoulder"
  assert arm_scene.usd_paths["actuator"] == {"shoulder": "/World/arm/joints/shoulder",
                                             "slider": "/World/arm/joints/slider"}
  # masses, centres of mass, inertias as authored (MassAPI); link2 and box: mass only
  for name, mass in ARM["mass"].items():
    assert m.body(name).mass[0] == pytest.approx(f32(mass), rel=1e-12), name
  for name, inertia in ARM["inertia"].items():
    np.testing.assert_allclose(m.body(name).inertia, f32(inertia), rtol=1e-12)
    np.testing.assert_allclose(m.body(name).ipos, f32(ARM["com"][name]), rtol=1e-12, atol=1e-15)
  np.testing.assert_allclose(m.body("link2").inertia, 0.3 * np.array([0.03**2 + 0.03**2, 0.06**2 + 0.03**2,
                                                                      0.06**2 + 0.03**2]) / 3 * f32(1) / 0.3 * f32(0.3),
                             rtol=1e-6)  # a 0.12 x 0.06 x 0.06 box (a scaled Cube) of the authored mass
  # rock: no MassAPI, its material's density times the octahedron's volume (4/3 r^3)
  assert m.body("rock").mass[0] == pytest.approx(ARM["rock_density"] * 4 / 3 * 0.06**3, rel=1e-6)
  # joints: types, axes (in the child's frame), limits in radians, armature
  sh, sl = m.joint("shoulder"), m.joint("slider")
  assert sh.type[0] == mujoco.mjtJoint.mjJNT_HINGE and sl.type[0] == mujoco.mjtJoint.mjJNT_SLIDE
  np.testing.assert_allclose(sh.axis, [0, 1, 0], atol=1e-7)
  np.testing.assert_allclose(sl.axis, [1, 0, 0], atol=1e-7)
  np.testing.assert_allclose(sh.range, np.radians(ARM["shoulder"]["limits_deg"]), rtol=1e-7)
  np.testing.assert_allclose(sl.range, f32(ARM["slider"]["limits"]), rtol=1e-12)
  assert m.dof_armature[sh.dofadr[0]] == pytest.approx(f32(ARM["shoulder"]["armature"]), rel=1e-12)
  assert m.joint("box").type[0] == m.joint("rock").type[0] == mujoco.mjtJoint.mjJNT_FREE
  assert m.body("base").jntnum[0] == 0 and m.body("base").parentid[0] == 0  # fixed to the world
  # drives: PD servos, gains per radian (authored per degree), maxForce as the force range
  kp, kd = f32(ARM["shoulder"]["kp_per_deg"]) * 180 / math.pi, f32(ARM["shoulder"]["kd_per_deg"]) * 180 / math.pi
  a = m.actuator("shoulder")
  np.testing.assert_allclose([a.gainprm[0], *a.biasprm[:3]], [kp, 0, -kp, -kd], rtol=1e-12)
  np.testing.assert_allclose(a.forcerange, [-10, 10])
  np.testing.assert_allclose(a.ctrlrange, sh.range)
  a = m.actuator("slider")
  np.testing.assert_allclose([a.gainprm[0], *a.biasprm[:3]], [200, 0, -200, -5], rtol=1e-12)
  np.testing.assert_allclose(a.forcerange, [-50, 50])
  # friction: the material's dynamic coefficient; static friction and restitution reported lost
  assert m.geom("World_box_collision").friction[0] == pytest.approx(f32(0.8), rel=1e-12)
  assert m.geom("ground").friction[0] == pytest.approx(f32(0.4), rel=1e-12)
  assert m.geom("World_rock_collision").type[0] == mujoco.mjtGeom.mjGEOM_MESH
  lost = " ".join(arm_scene.usd_lost)
  assert "static friction" in lost and "restitution" in lost and "/World/Looks/rubber" in lost
  np.testing.assert_allclose(m.opt.gravity, [0, 0, -f32(9.81)], rtol=1e-12)


def test_usd_dynamics_match_handwritten_mjcf(arm_scene):
  """100 steps of float64 MuJoCo C: the converted model against the MJCF written by hand, with the
  drives moving the arm and the box and the mesh in contact with the ground."""
  mu, mh = arm_scene.mjm, mujoco.MjModel.from_xml_string(arm_mjcf())
  assert (mu.nq, mu.nv, mu.nu, mu.ngeom) == (mh.nq, mh.nv, mh.nu, mh.ngeom)
  du, dh = mujoco.MjData(mu), mujoco.MjData(mh)
  rng = np.random.default_rng(0)
  ncon, err = 0, 0.0
  for t in range(100):
    ctrl = [0.8 * math.sin(0.1 * t), 0.05 + 0.05 * math.cos(0.07 * t)] + 0.01 * rng.standard_normal(2)
    du.ctrl[:] = dh.ctrl[:] = ctrl
    mujoco.mj_step(mu, du)
    mujoco.mj_step(mh, dh)
    err = max(err, np.abs(du.qpos - dh.qpos).max(), np.abs(du.qvel - dh.qvel).max())
    ncon = max(ncon, du.ncon)
  assert ncon >= 3  # the box and the rock rest on the ground: friction matters
  assert abs(du.qpos[0]) > 0.1 and abs(du.qpos[1]) > 0.01  # the drives moved both joints
  assert err < 1e-6, err


def test_to_xml_writes_the_converted_model(arm_scene, arm_path, tmp_path):
  before = _digest(arm_path)
  out = tmp_path / "arm.xml"
  arm_scene.to_xml(out)
  back = mujoco.MjModel.from_xml_path(str(out))
  # MuJoCo's XML writer prints most reals to 9 significant digits (float32 values such as 0.30000001
  # come back as 0.3), ranges and actuator parameters to 6 (-28.64789 as -28.6479): to_xml's precision
  np.testing.assert_allclose(back.body_mass, arm_scene.mjm.body_mass, rtol=1e-7)
  np.testing.assert_allclose(back.actuator_biasprm, arm_scene.mjm.actuator_biasprm, rtol=1e-5)
  np.testing.assert_allclose(back.jnt_range, arm_scene.mjm.jnt_range, rtol=1e-5)
  assert _digest(arm_path) == before  # nothing the user authored is modified
  m = load_mjmodel(arm_path)  # load_mjmodel takes .usda paths too
  assert m.nbody == arm_scene.mjm.nbody and _digest(arm_path) == before
  with pytest.raises(TypeError, match="from_usd"):
    diffsim.Scene.from_xml(arm_mjcf(), nworld=1, device="cpu").to_xml(tmp_path / "x.xml")


@pytest.mark.parametrize("kind, message", [
  ("no_physics", "has no rigid bodies"),
  ("d6_free", "D6 joint /World/d6 .* leaves rotX, rotY, rotZ free"),
  ("spherical_limited", "spherical joint /World/ball .* has cone limits"),
  ("loop", "kinematic loop"),
  ("broken", "could not open the USD stage .*Expected } .* in </World/c>"),
])
def test_bad_stages_get_clear_errors(tmp_path, kind, message):
  path = write_bad_stage(tmp_path / f"{kind}.usda", kind)
  before = _digest(path)
  with pytest.raises(UsdError, match=message):
    diffsim.Scene.from_usd(path, device="cpu")
  assert _digest(path) == before


def test_missing_file_and_missing_extra(tmp_path, monkeypatch):
  with pytest.raises(FileNotFoundError, match="USD file not found"):
    diffsim.Scene.from_usd(tmp_path / "nope.usda", device="cpu")
  with pytest.raises(ValueError, match="importer must be"):
    usd_to_spec(tmp_path / "nope.usda", importer="physx")
  path = write_pendulum_stage(tmp_path / "p.usda")
  monkeypatch.setitem(sys.modules, "pxr", None)  # as if usd-core were not installed
  with pytest.raises(ImportError, match=r'pip install "diffsim\[usd\]"'):
    diffsim.Scene.from_usd(path, device="cpu")


def test_cli_sysid_on_a_usd_stage(tmp_path, capsys):
  """`diffsim sysid pendulum.usda run.npz`: the pole's mass recovered from data the true mass made."""
  guess = write_pendulum_stage(tmp_path / "pendulum.usda", mass=0.5)
  truth = usd_to_spec(write_pendulum_stage(tmp_path / "truth.usda", mass=0.6)).spec.to_xml()
  t = np.arange(101) * 0.01
  ctrl = (0.6 * np.sin(2 * np.pi * 0.8 * t) + 0.3 * np.sin(2 * np.pi * 2.1 * t))[:, None]
  D.save_npz(tmp_path / "run.npz", D.simulate(truth, ctrl, qpos0=[0.2]))
  out = tmp_path / "out"
  rc = cli.main(["sysid", guess, str(tmp_path / "run.npz"), "--param", "body_mass:pole", "--out", str(out),
                 "--no-plots", "-q", "--device", "cpu"])
  assert rc == 0, capsys.readouterr()
  got = json.loads((out / "params.json").read_text())
  value = got["params"]["body_mass:pole"] if "params" in got else got["body_mass:pole"]
  value = value["value"] if isinstance(value, dict) else value
  assert value == pytest.approx(0.6, rel=1e-4)
  back = mujoco.MjModel.from_xml_path(str(out / "model.xml"))  # the converted stage, identified mass written in
  assert back.body("pole").mass[0] == pytest.approx(0.6, rel=1e-4)


def _rollout(m, nstep=200):
  d = mujoco.MjData(m)
  out = np.empty((nstep, m.nq))
  for t in range(nstep):
    d.ctrl[:] = 0.5 * np.sin(0.05 * t + np.arange(m.nu))
    mujoco.mj_step(m, d)
    out[t] = d.qpos
  return out


def test_so101_round_trip(tmp_path):
  """The shipped SO-101 MJCF written as a UsdPhysics stage and read back: the model agrees to float32
  (USD's attribute precision) and a 200-step rollout differs only by what UsdPhysics cannot hold."""
  src = mujoco.MjModel.from_xml_path(diffsim.asset_path("so101", "so101_new_calib.xml"))
  imported = usd_to_spec(write_stage_from_mjmodel(src, tmp_path / "so101.usda"))
  back = imported.spec.compile()
  assert (back.nq, back.nu, back.nbody) == (src.nq, src.nu, src.nbody)
  assert [back.joint(j).name for j in range(back.njnt)] == [src.joint(j).name for j in range(src.njnt)]
  for field, rtol in (("body_mass", 1e-7), ("body_inertia", 1e-6), ("dof_armature", 1e-7),
                      ("actuator_gainprm", 1e-7), ("actuator_biasprm", 1e-7)):
    np.testing.assert_allclose(getattr(back, field), getattr(src, field), rtol=rtol, atol=1e-9, err_msg=field)
  for field in ("body_pos", "body_quat", "body_ipos", "jnt_axis", "jnt_pos", "jnt_range"):
    np.testing.assert_allclose(getattr(back, field), getattr(src, field), atol=2e-7, err_msg=field)
  np.testing.assert_allclose(back.actuator_forcerange, src.actuator_forcerange, rtol=1e-7)
  assert back.opt.timestep == src.opt.timestep
  # what UsdPhysics has no place for: joint damping and frictionloss (MuJoCo's passive forces)
  assert np.all(back.dof_damping == 0) and np.all(back.dof_frictionloss == 0) and src.dof_damping.min() > 0
  q_src = _rollout(src)
  assert np.abs(_rollout(back) - q_src).max() > 0.1  # without them the arm swings much further
  spec = imported.spec
  for j in range(src.njnt):  # put them back by name: what is left is USD's float32 storage
    spec.joint(src.joint(j).name).damping = [src.dof_damping[src.jnt_dofadr[j]], 0, 0]
    spec.joint(src.joint(j).name).frictionloss = src.dof_frictionloss[src.jnt_dofadr[j]]
  err = np.abs(_rollout(spec.compile()) - q_src).max()
  assert err < 5e-6, err  # 2.0e-6 rad measured: masses, inertias and frames stored in float32


def test_mass_and_inertia_without_centre_of_mass(tmp_path):
  """MassAPI with mass and inertia but no centerOfMass: the centre of mass is the colliders'."""
  from pxr import Gf, UsdGeom

  import usd_stages as S

  stage = S._stage(tmp_path / "com.usda")
  S._body(stage, "/World/b", (0, 0, 1), mass=2.0, inertia=(0.2, 0.25, 0.3))
  cube = UsdGeom.Cube.Define(stage, "/World/b/collider")
  cube.AddTranslateOp().Set(Gf.Vec3d(0.1, -0.05, 0.02))
  S._collider(cube.GetPrim())
  stage.GetRootLayer().Save()
  m = load_mjmodel(str(tmp_path / "com.usda"))
  np.testing.assert_allclose(m.body("b").ipos, [0.1, -0.05, 0.02], atol=1e-12)
  np.testing.assert_allclose(m.body("b").inertia, [0.2, 0.25, 0.3], rtol=1e-7)
  assert m.body("b").mass[0] == 2.0


def test_a_model_that_does_not_compile_names_the_prim(tmp_path):
  import usd_stages as S

  stage = S._stage(tmp_path / "inertia.usda")
  S._body(stage, "/World/b", (0, 0, 1), mass=2.0, inertia=(0.1, 0.1, 0.3))  # A + B < C: no such body
  stage.GetRootLayer().Save()
  with pytest.raises(UsdError, match=r"does not compile \(prim /World/b\): inertia must satisfy A \+ B >= C"):
    diffsim.Scene.from_usd(tmp_path / "inertia.usda", device="cpu")


def test_bench_usd_runs_tiny():
  """The README's importer table's diffsim row comes from this benchmark (one environment per importer)."""
  from benchmarks import bench_usd

  res = bench_usd.main(["--importer", "diffsim", "--repeats", "1", "--no-so101"])
  for layout in ("arm", "arm_root_on_link"):
    row = res[layout]
    assert all(row[k] for k in ("masses", "limits", "drives", "friction", "armature")), row
    assert row["qpos_err_100"] < 1e-6
  assert res["install_mb"] > 50  # usd-core's files
