"""Acceleration-stage sensors in the analytic adjoint (issue 36): accelerometers, touch, force and
torque sensors read the solver's acceleration `a`, which the adjoint reaches through the implicit
function theorem with their adjoint of `a` as an extra seed (`AnalyticStep.reverse`). Checked against
float64 MuJoCo C differences, and their Jacobian rows against `mujoco.mjd_transitionFD`."""

import mujoco
import numpy as np
import pytest
import warp as wp
from conftest import DEVICE

import diffsim
from diffsim.adjoint.coverage import analytic_coverage
from diffsim.gradcheck import check_gradients

# An IMU on each body of a two-link arm, the elbow's transmitted force and torque, and a box pushed
# across the floor (below its friction limit) with an IMU on top, a touch pad under it (larger than
# its footprint: C's ray test on the pad's edge would flicker) and a force-torque sensor between its
# top and the skid that carries the contacts (their forces enter that body's cfrc_ext).
IMU_ACC = """
<mujoco model="imu_acc">
  <option timestep="0.005"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="0.5"/>
    <body name="box" pos="0 0 0.04998">
      <freejoint name="box"/>
      <geom name="top" type="box" pos="0 0 0.025" size="0.05 0.05 0.025" mass="0.5"/>
      <site name="box_imu" pos="0.02 0.01 0.05" euler="0 0 30"/>
      <body name="skid" pos="0 0 -0.025">
        <geom name="skid" type="box" size="0.05 0.05 0.025" mass="0.5" friction="0.5"/>
        <site name="pad" type="box" pos="0 0 -0.02" size="0.06 0.06 0.01"/>
        <site name="skid_ft" pos="0.01 0 0.025" euler="0 0 20"/>
      </body>
    </body>
    <body name="upper" pos="1 0 0.6">
      <joint name="shoulder" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.02" mass="0.3"/>
      <site name="upper_imu" pos="0.2 0 0.02" euler="10 20 30"/>
      <body name="lower" pos="0.25 0 0">
        <joint name="elbow" type="hinge" axis="0 1 0" damping="0.05"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.2"/>
        <site name="elbow" euler="0 15 0"/>
        <site name="tip" pos="0.2 0 0" euler="30 0 0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="box" gear="1 0 0 0 0 0"/>
    <motor name="shoulder" joint="shoulder"/>
    <motor name="elbow" joint="elbow"/>
  </actuator>
  <sensor>
    <touch name="pad" site="pad"/>
    <accelerometer name="box_acc" site="box_imu"/>
    <accelerometer name="upper_acc" site="upper_imu"/>
    <accelerometer name="tip_acc" site="tip"/>
    <force name="elbow_force" site="elbow"/>
    <torque name="elbow_torque" site="elbow"/>
    <force name="skid_force" site="skid_ft"/>
    <torque name="skid_torque" site="skid_ft"/>
  </sensor>
</mujoco>
"""
NSTEP = 20


@pytest.fixture(scope="module")
def imu_acc():
  return diffsim.Scene.from_xml(IMU_ACC, nworld=2, device=DEVICE)


def _inputs(mjm):
  """A settled box pushed with 2 N (it sticks: every pyramid edge is a quadratic row) and a swinging arm."""
  d = mujoco.MjData(mjm)
  for _ in range(400):
    mujoco.mj_step(mjm, d)
  rng = np.random.default_rng(7)
  ctrl = np.column_stack([2.0 + 0.3 * rng.standard_normal(NSTEP), 0.3 * np.sin(np.linspace(0, 4, NSTEP)),
                          0.2 * rng.standard_normal(NSTEP)])
  qvel0 = d.qvel.copy()
  qvel0[6:] = [1.0, -2.0]
  return ctrl, d.qpos.copy(), qvel0


def test_covered(imu_acc):
  assert analytic_coverage(imu_acc.mjm) is None, analytic_coverage(imu_acc.mjm)


def test_replayed_values_match_mjwarp(imu_acc):
  """The replay's acceleration-stage sensors equal MJWarp's sensordata (float32 rounding)."""
  ctrl, qpos0, qvel0 = _inputs(imu_acc.mjm)
  r = diffsim.Rollout(imu_acc, NSTEP, gradient="analytic")
  nw = imu_acc.nworld
  u = wp.array(np.tile(ctrl.astype(np.float32), (nw, 1, 1)), dtype=float, device=imu_acc.device, requires_grad=True)
  with wp.Tape():
    traj = r(u, qpos0=qpos0.astype(np.float32), qvel0=qvel0.astype(np.float32))
  a = r.adjoint
  ref = traj.sensordata.numpy()
  for k in (0, NSTEP // 2, NSTEP):
    a.replay(traj, r.buffers.qacc, k, True)
    got = a.sensordata.numpy()
    np.testing.assert_allclose(got, ref[:, k], rtol=2e-4, atol=2e-4 * np.abs(ref[:, k]).max())


@pytest.mark.parametrize("wrt", [("ctrl",), ("qpos0", "qvel0")])
def test_acc_sensor_gradients(imu_acc, wrt):
  """Accelerometers (on the free box and the arm), touch (the box's normal force) and the elbow's
  force and torque in the checked functional, against float64 MuJoCo C. Measured: analytic 4.9e-7
  (ctrl), 2.3e-5 (qpos0), 4.4e-5 (qvel0); the lanes 1.3e-4, 2.4e-3, 9.8e-3 (their differences cross
  contact rows' switches, and say so). Each sensor alone: 3e-7 .. 3.3e-5."""
  ctrl, qpos0, qvel0 = _inputs(imu_acc.mjm)
  res = check_gradients(imu_acc, ctrl, qpos0=qpos0, qvel0=qvel0, wrt=wrt, signals=("sensordata",),
                        gradient="analytic")
  print(res)
  assert res.max_rel_err < 1e-4, res
