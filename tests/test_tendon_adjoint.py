"""The analytic adjoint through tendons and site transmissions (issue 26, `diffsim/adjoint/tendons.py`)
against float64 MuJoCo C: a tendon-driven finger pressing on a pad, a free body with thrusters, MJWarp's
pulley test model, and what it refuses.
"""

import os

import mujoco
import mujoco_warp as mjw
import numpy as np
import pytest
import warp as wp
from conftest import DEVICE

import diffsim
from diffsim.adjoint.coverage import analytic_coverage

NSTEP = 20


def _analytic_beats_lanes(scene, ctrl, bound, **state):
  """Both gradients against float64 C: the analytic within `bound` and at least 10x better than the
  lanes on every input; returns the analytic check."""
  ana = diffsim.check_gradients(scene, ctrl, gradient="analytic", **state)
  lanes = diffsim.check_gradients(scene, ctrl, gradient="finite_difference", **state)
  print("analytic:", ana)
  print("lanes:", lanes)
  for k, err in ana.rel_err.items():
    assert err < bound and err < 0.1 * lanes.rel_err[k], (k, err, lanes.rel_err[k])
  return ana

# A three-phalanx finger: a spatial flexor through sites along the palm side (a motor pulls it; its
# friction and its lower length limit act), a spatial extensor with a pulley (a spring with a dead band,
# a damper, a position servo), and a fixed tendon coupling the two distal joints (a spring and a
# limit). The fingertip presses on a pad: contact rows beside the tendon rows. Tendon and actuator
# sensors enter the checked functional.
FINGER = """<mujoco model="tendon_finger">
  <option timestep="0.002"/>
  <default>
    <joint type="hinge" axis="0 1 0" damping="0.02" limited="true" range="-10 100"/>
    <geom type="capsule" size="0.008" mass="0.02"/>
    <site size="0.003"/>
  </default>
  <worldbody>
    <geom name="pad" type="box" pos="0.06 0 -0.075" size="0.03 0.03 0.01"/>
    <body name="proximal" pos="0 0 0">
      <joint name="mcp"/>
      <geom fromto="0 0 0 0.045 0 0"/>
      <site name="p0" pos="0.01 0 -0.012"/>
      <site name="p1" pos="0.04 0 -0.012"/>
      <site name="e0" pos="0.02 0 0.012"/>
      <body name="middle" pos="0.045 0 0">
        <joint name="pip"/>
        <geom fromto="0 0 0 0.03 0 0"/>
        <site name="m0" pos="0.005 0 -0.011"/>
        <site name="m1" pos="0.025 0 -0.011"/>
        <body name="distal" pos="0.03 0 0">
          <joint name="dip"/>
          <geom fromto="0 0 0 0.02 0 0"/>
          <geom name="tip" type="sphere" pos="0.022 0 0" size="0.01" friction="0.8"/>
          <site name="d0" pos="0.006 0 -0.01"/>
        </body>
      </body>
    </body>
    <site name="anchor" pos="-0.03 0 -0.01"/>
    <site name="ext_anchor" pos="-0.03 0 0.015"/>
  </worldbody>
  <tendon>
    <spatial name="flexor" frictionloss="0.01" limited="true" range="0.0925 0.2">
      <site site="anchor"/>
      <site site="p0"/>
      <site site="p1"/>
      <site site="m0"/>
      <site site="m1"/>
      <site site="d0"/>
    </spatial>
    <spatial name="extensor" stiffness="40" springlength="0.055 0.06" damping="0.05">
      <site site="ext_anchor"/>
      <site site="e0"/>
      <pulley divisor="2"/>
      <site site="e0"/>
      <site site="m1"/>
    </spatial>
    <fixed name="coupling" limited="true" range="-0.3 0.3" stiffness="0.5">
      <joint joint="pip" coef="1"/>
      <joint joint="dip" coef="-1.2"/>
    </fixed>
  </tendon>
  <actuator>
    <motor name="pull" tendon="flexor" gear="-1"/>
    <position name="servo" tendon="extensor" kp="5"/>
  </actuator>
  <sensor>
    <tendonpos tendon="flexor"/>
    <tendonvel tendon="coupling"/>
    <actuatorpos actuator="pull"/>
    <actuatorvel actuator="servo"/>
  </sensor>
</mujoco>"""

# A free body with four thrusters (site transmissions: force along each site's z, a yaw torque) and a
# pendulum whose tip site carries an affine actuator with a velocity bias.
THRUSTERS = """<mujoco model="thrusters">
  <option timestep="0.01"/>
  <worldbody>
    <body name="drone" pos="0 0 1" euler="10 -5 20">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.02" mass="0.5"/>
      <site name="r1" pos="0.1 0.1 0" euler="5 0 0"/>
      <site name="r2" pos="-0.1 0.1 0"/>
      <site name="r3" pos="-0.1 -0.1 0" euler="0 -8 0"/>
      <site name="r4" pos="0.1 -0.1 0"/>
      <body name="arm" pos="0 0 -0.05">
        <joint name="hinge" axis="1 0 0" damping="0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.1" size="0.01" mass="0.05"/>
        <site name="tip" pos="0 0 -0.1"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor site="r1" gear="0 0 1 0 0 0.02"/>
    <motor site="r2" gear="0 0 1 0 0 -0.02"/>
    <motor site="r3" gear="0 0 1 0 0 0.02"/>
    <motor site="r4" gear="0 0 1 0 0 -0.02"/>
    <general site="tip" gear="1 0 0 0 0 0" gaintype="affine" gainprm="1 0 0" biastype="affine" biasprm="0 0 -0.1"/>
  </actuator>
  <sensor>
    <framepos objtype="site" objname="tip"/>
  </sensor>
</mujoco>"""


# A two-link arm whose flexor wraps over a sphere at the elbow and whose extensor wraps around a
# cylindrical drum on the upper arm, kept on one side by a side site: both wrapped over the whole
# horizon (the tangent points slide on the geoms as the arm moves).
WRAPPED_ARM = """<mujoco model="wrapped_arm">
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <default>
    <joint type="hinge" axis="0 1 0" damping="0.05"/>
    <geom contype="0" conaffinity="0"/>
  </default>
  <worldbody>
    <site name="origin" pos="-0.05 0 0.02"/>
    <site name="origin2" pos="-0.05 0 -0.01"/>
    <body name="upper">
      <joint name="shoulder"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/>
      <geom name="pulley" type="sphere" pos="0.3 0 0" size="0.04"/>
      <geom name="drum" type="cylinder" pos="0.15 0 0" size="0.03 0.02" euler="90 0 0"/>
      <site name="drum_side" pos="0.15 0 -0.06"/>
      <body name="fore" pos="0.3 0 0">
        <joint name="elbow"/>
        <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.015" mass="0.3"/>
        <site name="insert" pos="0.08 0 0.01"/>
        <site name="insert2" pos="0.06 0 -0.01"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="flexor" stiffness="20" springlength="0.3">
      <site site="origin"/>
      <geom geom="pulley"/>
      <site site="insert"/>
    </spatial>
    <spatial name="extensor">
      <site site="origin2"/>
      <geom geom="drum" sidesite="drum_side"/>
      <site site="insert2"/>
    </spatial>
  </tendon>
  <actuator>
    <motor name="pull" tendon="flexor" gear="-1"/>
    <motor name="pull2" tendon="extensor" gear="-1"/>
  </actuator>
  <sensor>
    <tendonpos tendon="flexor"/>
    <tendonpos tendon="extensor"/>
  </sensor>
</mujoco>"""


# Tendon armature: a two-link arm with a cable through sites on both links (armature 5: about as much
# inertia as the links' own about the shoulder), a fixed tendon with armature coupling the shoulder to
# a second arm on another branch (MuJoCo adds `armature J^T J` only on ancestor pairs of dofs), whose
# joint runs into its limit; a motor on the cable, one on the shoulder.
ARMATURE = """<mujoco model="tendon_armature">
  <option timestep="0.002"/>
  <default>
    <joint type="hinge" axis="0 1 0" damping="0.02"/>
    <geom type="capsule" size="0.02" contype="0" conaffinity="0"/>
  </default>
  <worldbody>
    <site name="s0" pos="-0.05 0 0.03"/>
    <body name="upper">
      <joint name="shoulder"/>
      <geom fromto="0 0 0 0.2 0 0"/>
      <site name="sa" pos="0.15 0 0.02"/>
      <body pos="0.2 0 0">
        <joint name="elbow" axis="0 0.6 0.8"/>
        <geom fromto="0 0 0 0.2 0 0"/>
        <site name="sb" pos="0.1 0.01 0.02"/>
      </body>
    </body>
    <body name="other" pos="0 0.3 0">
      <joint name="other" limited="true" range="-20 20"/>
      <geom fromto="0 0 0 0.2 0 0"/>
    </body>
  </worldbody>
  <tendon>
    <fixed name="couple" armature="0.003">
      <joint joint="shoulder" coef="1"/>
      <joint joint="other" coef="-1"/>
    </fixed>
    <spatial name="cable" armature="5">
      <site site="s0"/>
      <site site="sa"/>
      <site site="sb"/>
    </spatial>
  </tendon>
  <actuator>
    <motor joint="shoulder"/>
    <motor tendon="cable" gear="-1"/>
  </actuator>
  <sensor>
    <tendonpos tendon="cable"/>
  </sensor>
</mujoco>"""


def _settled_finger(mjm):
  d = mujoco.MjData(mjm)
  d.ctrl[:] = [3.0, 0.06]
  for _ in range(600):  # the fingertip on the pad, the flexor at its lower limit
    mujoco.mj_step(mjm, d)
  types = set(d.efc_type[:d.nefc].tolist())
  assert {int(mujoco.mjtConstraint.mjCNSTR_FRICTION_TENDON), int(mujoco.mjtConstraint.mjCNSTR_LIMIT_TENDON),
          int(mujoco.mjtConstraint.mjCNSTR_CONTACT_PYRAMIDAL)} <= types, types
  return d.qpos.copy(), d.qvel.copy()


@pytest.fixture(scope="module")
def finger():
  return diffsim.Scene.from_xml(FINGER, nworld=2, device=DEVICE)


def test_replay_equals_mjwarp(finger):
  """The replayed tendon lengths, passive, actuator and constraint forces equal MJWarp's at the
  settled finger's state."""
  qpos0, qvel0 = _settled_finger(finger.mjm)
  n = finger.nworld
  ro = diffsim.Rollout(finger, 1, gradient="analytic")
  u = wp.array(np.tile(np.float32([[3.0, 0.06]]), (n, 1, 1)), dtype=float, device=finger.device)
  with wp.Tape():
    traj = ro(u, qpos0=qpos0.astype(np.float32), qvel0=qvel0.astype(np.float32))
  ro.adjoint.rebuild()
  ro.adjoint.replay(traj, ro.buffers.qacc, 0, True)
  d = mjw.put_data(finger.mjm, mujoco.MjData(finger.mjm), nworld=n)
  for name in ("qpos", "qvel"):
    getattr(d, name).assign(getattr(traj, name).numpy()[:, 0])
  d.ctrl.assign(u.numpy()[:, 0])
  mjw.step(finger.model, d)
  got = ro.adjoint.values
  for k in ("ten_length", "qfrc_passive", "qfrc_actuator", "qfrc_constraint", "sensordata"):
    want = getattr(d, k).numpy()
    scale = max(np.abs(want).max(), 1.0)
    np.testing.assert_allclose(got[k].numpy(), want, rtol=0, atol=2e-5 * scale, err_msg=k)


def test_tendon_finger(finger):
  """Tendon rows (limit, friction) and contact rows in one solve, springs, dampers and a servo on
  tendons, tendon and actuator sensors. Measured: analytic 2.5e-5 (ctrl), 5.5e-6 (qpos0), 1.5e-5
  (qvel0); the lanes 6.6e-3, 8.8e-4, 8.1e-4."""
  qpos0, qvel0 = _settled_finger(finger.mjm)
  ctrl = np.array([3.0, 0.06]) + np.array([0.3, 0.005]) * np.random.default_rng(1).standard_normal((NSTEP, 2))
  _analytic_beats_lanes(finger, ctrl, 1e-4, qpos0=qpos0, qvel0=qvel0)


def test_thrusters():
  """Site transmissions: the moment `jac^T R gear` turns and moves with the site. Measured: analytic
  3.8e-7 (ctrl), 2.6e-6 (qpos0), 2.4e-7 (qvel0); the lanes 1.1e-4, 6.8e-3, 1.8e-4."""
  scene = diffsim.Scene.from_xml(THRUSTERS, nworld=2, device=DEVICE)
  rng = np.random.default_rng(0)
  qvel0 = 0.3 * rng.standard_normal(scene.nv)
  ctrl = 0.5 * rng.standard_normal((NSTEP, scene.nu))
  _analytic_beats_lanes(scene, ctrl, 1e-5, qvel0=qvel0)


def test_mjwarp_pulley_site():
  """MJWarp's `tendon/pulley_site.xml` (spatial tendons through sites, pulleys dividing them, a motor
  on each). Measured: analytic 9.8e-7 (ctrl), 5.7e-7 (qpos0), 1.7e-7 (qvel0); the lanes 3.2e-4,
  1.3e-3, 2.6e-5."""
  path = os.path.join(os.path.dirname(mjw.__file__), "test_data", "tendon", "pulley_site.xml")
  scene = diffsim.Scene.from_xml(path, nworld=2, device=DEVICE)
  rng = np.random.default_rng(0)
  qvel0 = 0.3 * rng.standard_normal(scene.nv)
  ctrl = 0.5 * rng.standard_normal((NSTEP, scene.nu))
  ana = diffsim.check_gradients(scene, ctrl, qpos0=scene.mjm.key_qpos[0], qvel0=qvel0, gradient="analytic")
  print("analytic:", ana)
  assert ana.max_rel_err < 1e-5, ana


def test_wrapping_tendons():
  """Spatial tendons wrapping around a sphere and a cylinder (`wraps.py`: MJWarp's closed-form tangent
  points within the wrap's branch, the side site's orientation). Measured: analytic 2.4e-7 (ctrl),
  3.3e-7 (qpos0), 7.8e-8 (qvel0); the lanes 2.4e-4, 1.3e-4, 1.5e-5."""
  scene = diffsim.Scene.from_xml(WRAPPED_ARM, nworld=2, device=DEVICE)
  m = scene.mjm
  ctrl = 0.5 + 0.2 * np.random.default_rng(0).standard_normal((NSTEP, 2))
  qpos0, qvel0 = np.array([0.0, 0.3]), np.array([0.5, -0.3])
  d = mujoco.MjData(m)
  d.qpos[:], d.qvel[:] = qpos0, qvel0
  for k in range(NSTEP):  # both tendons stay wrapped (site, two tangent points, site)
    d.ctrl[:] = ctrl[k]
    mujoco.mj_step(m, d)
    assert list(d.ten_wrapnum) == [4, 4], (k, d.ten_wrapnum)
  _analytic_beats_lanes(scene, ctrl, 1e-5, qpos0=qpos0, qvel0=qvel0)


def test_tendon_armature():
  """Tendon armature: `armature J^T J` in the mass matrix on the tree's ancestor pairs and the velocity
  term `J^T armature Jdot v`, replayed from the sites' accelerations; the shoulder's other arm reaches
  its limit (a row beside the armature in the IFT's Hessian). The replay's residual vanishes at MJWarp's
  acceleration. Measured: analytic 3.6e-7 (ctrl), 4.1e-5 (qpos0; 3.9e-5 with the armature removed: the
  limit's), 3.6e-7 (qvel0); the lanes 1.2e-4, 6.3e-4, 3.3e-5."""
  scene = diffsim.Scene.from_xml(ARMATURE, nworld=2, device=DEVICE)
  rng = np.random.default_rng(0)
  ctrl = 0.3 * rng.standard_normal((NSTEP, 2))
  qpos0, qvel0 = np.array([0.3, -0.5, 0.345]), np.array([1.0, -2.0, 0.5])
  # the replay at MJWarp's acceleration: (M + h B) a_e = f, M with the armature, tau with its bias
  ro = diffsim.Rollout(scene, 1, gradient="analytic")
  u = wp.array(np.tile(ctrl[:1].astype(np.float32), (2, 1, 1)), dtype=float, device=scene.device)
  with wp.Tape():
    traj = ro(u, qpos0=qpos0.astype(np.float32), qvel0=qvel0.astype(np.float32))
  ro.adjoint.rebuild()
  ro.adjoint.replay(traj, ro.buffers.qacc, 0, True)
  got = {k: v.numpy() for k, v in ro.adjoint.values.items()}
  r = got["tau_e"] + got["damp"] - got["force"]
  assert np.abs(r).max() < 1e-4 * max(np.abs(got["force"]).max(), 1.0), r
  d = mjw.put_data(scene.mjm, mujoco.MjData(scene.mjm), nworld=2)
  for name in ("qpos", "qvel"):
    getattr(d, name).assign(getattr(traj, name).numpy()[:, 0])
  d.ctrl.assign(u.numpy()[:, 0])
  mjw.step(scene.model, d)
  dv = (d.qvel.numpy() - traj.qvel.numpy()[:, 0]) / scene.dt
  np.testing.assert_allclose(ro.adjoint.qacc_e.numpy(), dv, rtol=0, atol=1e-5 * np.abs(dv).max())
  ana = _analytic_beats_lanes(scene, ctrl, 1e-4, qpos0=qpos0, qvel0=qvel0)
  assert ana.rel_err["ctrl"] < 1e-5 and ana.rel_err["qvel0"] < 1e-5, ana


def test_mjwarp_tendon_armature():
  """MJWarp's `tendon/armature.xml` (a spatial tendon with armature 2 on a pendulum)."""
  path = os.path.join(os.path.dirname(mjw.__file__), "test_data", "tendon", "armature.xml")
  scene = diffsim.Scene.from_xml(path, nworld=2, device=DEVICE)
  ana = diffsim.check_gradients(scene, np.zeros((NSTEP, 0)), qpos0=scene.mjm.key_qpos[0],
                                qvel0=scene.mjm.key_qvel[0], gradient="analytic")
  print("analytic:", ana)
  assert ana.max_rel_err < 1e-5, ana


def test_tendon_damping_implicitfast():
  """implicitfast integrates tendon damping implicitly: `h damping J^T J` joins `M + h B` on the tree's
  ancestor pairs (MJWarp's `_qderiv_tendon_damping`), and `h B a_e` the replayed residual; the arm of
  `test_tendon_armature` with damped tendons (the coupling one across two branches). Measured:
  analytic 3.3e-7 (ctrl), 1.4e-5 (qpos0), 1.8e-7 (qvel0), the lanes 9.3e-5, 1.6e-3, 4.6e-5; with the
  damping left explicit, as Euler takes it, the analytic would read 1.7e-3, 3.4e-3, 1.1e-3."""
  xml = ARMATURE.replace('<option timestep="0.002"/>', '<option timestep="0.002" integrator="implicitfast"/>')
  xml = xml.replace('name="couple" armature="0.003"', 'name="couple" armature="0.003" damping="0.02"')
  xml = xml.replace('name="cable" armature="5"', 'name="cable" armature="5" damping="3"')
  scene = diffsim.Scene.from_xml(xml, nworld=2, device=DEVICE)
  assert analytic_coverage(scene.mjm) is None, analytic_coverage(scene.mjm)
  ctrl = 0.3 * np.random.default_rng(0).standard_normal((NSTEP, 2))
  ana = _analytic_beats_lanes(scene, ctrl, 1e-4, qpos0=np.array([0.3, -0.5, 0.345]), qvel0=np.array([1.0, -2.0, 0.5]))
  assert ana.rel_err["ctrl"] < 1e-5 and ana.rel_err["qvel0"] < 1e-5, ana


def test_transmission_velocity_gains_implicitfast():
  """implicitfast integrates the velocity gains of tendon and site actuators implicitly: `-h vel m m^T`
  (`m` the moment) joins `M + h B` on the tree's ancestor pairs (MJWarp's
  `_qderiv_actuator_passive_actuation_sparse`). The arm of `test_tendon_armature` with a servo on its
  cable (`kv`) and a site actuator on the forearm with a velocity bias. Measured: analytic 1.9e-7
  (ctrl), 1.2e-5 (qpos0), 3.1e-6 (qvel0), the lanes 7.4e-5, 4.1e-4, 1.3e-4; with these terms left
  explicit the analytic would read 2.2e-3, 7.4e-5, 3.3e-4."""
  xml = ARMATURE.replace('<option timestep="0.002"/>', '<option timestep="0.002" integrator="implicitfast"/>')
  xml = xml.replace('<site name="sb" pos="0.1 0.01 0.02"/>',
                    '<site name="sb" pos="0.1 0.01 0.02"/>\n        <site name="tip" pos="0.2 0 0"/>')
  xml = xml.replace('<motor tendon="cable" gear="-1"/>',
                    '<general tendon="cable" gear="-1" biastype="affine" gainprm="40" biasprm="0 -40 -4"/>\n'
                    '    <general site="tip" gear="0 0 1 0 0 0" biastype="affine" biasprm="0 0 -0.5"/>')
  scene = diffsim.Scene.from_xml(xml, nworld=2, device=DEVICE)
  assert analytic_coverage(scene.mjm) is None, analytic_coverage(scene.mjm)
  rng = np.random.default_rng(0)
  ctrl = np.column_stack([0.3 * rng.standard_normal(NSTEP), 0.2 + 0.01 * rng.standard_normal(NSTEP),
                          0.2 * rng.standard_normal(NSTEP)])
  ana = _analytic_beats_lanes(scene, ctrl, 1e-4, qpos0=np.array([0.3, -0.5, 0.345]), qvel0=np.array([1.0, -2.0, 0.5]))
  assert ana.rel_err["ctrl"] < 1e-5 and ana.rel_err["qvel0"] < 1e-5, ana


def test_refused_tendon_damping_on_free_body():
  xml = THRUSTERS.replace('<option timestep="0.01"/>', '<option timestep="0.01" integrator="implicitfast"/>')
  xml = xml.replace('biasprm="0 0 -0.1"', 'biasprm="0 0 0"')  # (its velocity gain would be refused first)
  xml = xml.replace('<joint name="hinge" axis="1 0 0" damping="0.01"/>', '')  # the drone's tree: one free joint
  xml = xml.replace("</worldbody>", '</worldbody><tendon><spatial damping="0.1"><site site="r1"/><site site="tip"/>'
                    '</spatial></tendon>')
  why = analytic_coverage(mujoco.MjModel.from_xml_string(xml))
  assert why.startswith("tendon #0's damping with the implicitfast integrator on a free body"), why


def test_inside_wraps():
  """Side sites inside the wrap geom (MuJoCo's inside wrap: the path touches the circle at one point,
  the root of MuJoCo's Newton iteration, differentiated by the implicit function theorem, `wraps.py`):
  the drum's side site inside the drum, the sphere's flexor given a side site inside the sphere, on the
  forearm (another body: the wrap's branch is chosen at each replayed state, as MJWarp does). Measured:
  analytic 5.1e-7 (ctrl), 2.2e-6 (qpos0), 3.4e-7 (qvel0); the lanes 4.8e-4, 1.4e-3, 1.1e-4."""
  # the geoms moved off the straight paths (an inside wrap pulls its tendon onto the geom)
  xml = WRAPPED_ARM.replace('<site name="drum_side" pos="0.15 0 -0.06"/>',
                            '<site name="drum_side" pos="0.15 0 0.065"/>')
  xml = xml.replace('name="drum" type="cylinder" pos="0.15 0 0"', 'name="drum" type="cylinder" pos="0.15 0 0.06"')
  xml = xml.replace('name="pulley" type="sphere" pos="0.3 0 0"', 'name="pulley" type="sphere" pos="0.3 0 -0.06"')
  xml = xml.replace('<geom geom="pulley"/>', '<geom geom="pulley" sidesite="pulley_side"/>')
  xml = xml.replace('<site name="insert" pos="0.08 0 0.01"/>',
                    '<site name="insert" pos="0.08 0 0.01"/>\n        <site name="pulley_side" pos="0 0 -0.06"/>')
  m = mujoco.MjModel.from_xml_string(xml)
  assert analytic_coverage(m) is None, analytic_coverage(m)
  ctrl = 0.5 + 0.2 * np.random.default_rng(0).standard_normal((NSTEP, 2))
  qpos0, qvel0 = np.array([0.0, 0.3]), np.array([0.5, -0.3])
  d = mujoco.MjData(m)
  d.qpos[:], d.qvel[:] = qpos0, qvel0
  for k in range(NSTEP):  # both tendons touch their geom at one point (site, point, point, site)
    d.ctrl[:] = ctrl[k]
    mujoco.mj_step(m, d)
    assert list(d.ten_wrapnum) == [4, 4], (k, d.ten_wrapnum)
    for t in range(2):
      adr = d.ten_wrapadr[t]
      points = d.wrap_xpos.reshape(-1, 3)
      np.testing.assert_allclose(points[adr + 1], points[adr + 2], atol=1e-12)
  scene = diffsim.Scene.from_xml(xml, nworld=2, device=DEVICE)
  _analytic_beats_lanes(scene, ctrl, 1e-5, qpos0=qpos0, qvel0=qvel0)


def test_refused_reference_site():
  xml = THRUSTERS.replace('<motor site="r1"', '<motor site="r1" refsite="r2"')
  assert "transmission" in analytic_coverage(mujoco.MjModel.from_xml_string(xml))


def test_refused_inertia_beside_tendon_armature():
  """Inertial parameters beside rows and tendon armature: the rows' softness reads the mass matrix at
  qpos0, whose tendon part the invweight adjoint does not replay."""
  why = analytic_coverage(mujoco.MjModel.from_xml_string(ARMATURE), fields=["body_mass"])
  assert why.startswith("inertial parameter body_mass in a model with rows and tendon armature"), why
