"""The lanes' self-check at the kinks of the actuation pipeline (issue 36, item 4): actuator force
clamps (forcerange) and joints' and tendons' actuatorfrcrange join the constraint rows in each lane
world's signature, so a column takes the side that keeps the nominal clamp state, and one whose
every lane crosses a clamp is flagged by a `GradientWarning` that names the actuator, joint or
tendon and the step. And the analytic adjoint through tendons' actuatorfrcrange."""

import warnings

import mujoco
import numpy as np
import pytest
import warp as wp

import diffsim
from conftest import DEVICE
from diffsim.adjoint import analytic_coverage
from test_adjoint import ACTFRC_ARM

# A motor whose force saturates (forcerange) and one whose control is clamped (ctrlrange).
CLAMPS = """<mujoco model="clamps">
  <option timestep="0.005"/>
  <worldbody>
    <body name="link">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.3"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="elbow_motor" joint="hinge" forcelimited="true" forcerange="-0.5 0.5"/>
    <motor name="wrist" joint="hinge" ctrllimited="true" ctrlrange="-0.2 0.2"/>
  </actuator>
</mujoco>"""


# Two motors pulling one fixed tendon whose summed actuator force is clamped (actuatorfrcrange).
TENDON_CLAMP = """<mujoco model="tendon_clamp">
  <option timestep="0.005"/>
  <default>
    <joint type="hinge" axis="0 1 0" damping="0.1"/>
    <geom type="capsule" size="0.02" mass="0.3"/>
  </default>
  <worldbody>
    <body>
      <joint name="j1"/>
      <geom fromto="0 0 0 0.2 0 0"/>
      <body pos="0.2 0 0">
        <joint name="j2"/>
        <geom fromto="0 0 0 0.15 0 0"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <fixed name="coupler" actuatorfrcrange="-0.5 0.5">
      <joint joint="j1" coef="1"/>
      <joint joint="j2" coef="0.5"/>
    </fixed>
  </tendon>
  <actuator>
    <motor name="pull_a" tendon="coupler"/>
    <motor name="pull_b" tendon="coupler"/>
  </actuator>
</mujoco>"""


def _arm_inputs(scale: float):
  rng = np.random.default_rng(3)
  ctrl = np.column_stack([0.3 * np.sin(np.linspace(0, 6, 40)), 0.8 * rng.standard_normal(40),
                          0.5 * np.cos(np.linspace(0, 5, 40))])
  return scale * ctrl, scale * np.array([0.5, -1.0])


def _actfrc_margin(mjm, ctrl, qvel0) -> float:
  """Smallest distance of a limited joint's summed actuator force from its actuatorfrcrange, float64 C."""
  d = mujoco.MjData(mjm)
  d.qvel[:] = qvel0
  r = mjm.jnt_actfrcrange
  margin = np.inf
  for k in range(len(ctrl)):
    d.ctrl[:] = ctrl[k]
    mujoco.mj_step(mjm, d)
    margin = min(margin, np.min(np.minimum(d.qfrc_actuator - r[:, 0], r[:, 1] - d.qfrc_actuator)))
  return margin


def test_joint_actuatorfrcrange_flagged():
  """`test_joint_actuator_force_limits`' horizon: the central lanes now keep the side of the
  shoulder's clamp (ctrl 1.5e-4 of float64 C, was 0.74 straddling it; qvel0 7.1e-4) and stay quiet;
  forward differences have no other side, and the warning names the joint."""
  scene = diffsim.Scene.from_xml(ACTFRC_ARM, nworld=2, device=DEVICE)
  ctrl, qvel0 = _arm_inputs(1.0)
  with warnings.catch_warnings():
    warnings.simplefilter("error", diffsim.GradientWarning)
    central = diffsim.check_gradients(scene, ctrl, qvel0=qvel0, wrt=("ctrl", "qvel0"), gradient="finite_difference")
  print("central lanes:", central)
  assert central.rel_err["ctrl"] < 1e-3 and central.rel_err["qvel0"] < 2e-3, central.rel_err
  with pytest.warns(diffsim.GradientWarning, match=r"actuator force clamp \(actuatorfrcrange\) of joint 'shoulder' "
                                                   r"at step \d+ in world \d"):
    forward = diffsim.check_gradients(scene, ctrl, qvel0=qvel0, wrt=("ctrl", "qvel0"), gradient="finite_difference",
                                      central=False)
  print("forward lanes:", forward)


def _clamps_rollout(scene, ctrl: np.ndarray, central: bool) -> None:
  c = wp.array(np.broadcast_to(ctrl, (scene.nworld, *ctrl.shape)).astype(np.float32), dtype=float, device=DEVICE,
               requires_grad=True)
  with wp.Tape():
    diffsim.rollout(scene, c, central=central, gradient="finite_difference")


def test_forcerange_flagged_ctrlrange_not():
  """The motor's control 4e-4 below its force bound at step 5: its forward lane (ctrl step 1e-3)
  saturates, flagged by name; the clamped control (beyond and at the wrist's ctrlrange) is not a
  kink the lanes straddle (they step inside it), and central differences take the unsaturated side."""
  scene = diffsim.Scene.from_xml(CLAMPS, nworld=1, device=DEVICE)
  ctrl = np.zeros((12, 2))
  ctrl[:, 0] = 0.3
  ctrl[5, 0] = 0.4996
  ctrl[8, 0] = 0.9  # saturated on both lanes: no kink straddled
  ctrl[:, 1] = np.where(np.arange(12) % 3 == 0, 0.5, 0.2)  # beyond the ctrlrange, or at it
  with pytest.warns(diffsim.GradientWarning, match=r"1 finite-difference Jacobian column\(s\) in 1 world-step\(s\), "
                                                   r"first world 0 at step 5.*force clamp \(forcerange\) of actuator "
                                                   r"'elbow_motor' at step 5 in world 0") as record:
    _clamps_rollout(scene, ctrl, central=False)
  assert not any("wrist" in str(w.message) for w in record)
  with warnings.catch_warnings():
    warnings.simplefilter("error", diffsim.GradientWarning)
    _clamps_rollout(scene, ctrl, central=True)


def test_tendon_actuatorfrcrange_flagged():
  """The tendon's two motors sum to 4e-4 below its actuatorfrcrange at step 3: a forward lane of
  either control saturates the tendon (MJWarp scales both forces to the bound), flagged naming the
  tendon; central differences take the unsaturated side."""
  scene = diffsim.Scene.from_xml(TENDON_CLAMP, nworld=1, device=DEVICE)
  ctrl = np.full((8, 2), 0.1)
  ctrl[3] = [0.25, 0.2496]
  ctrl[6] = [0.6, 0.3]  # saturated on every lane
  with pytest.warns(diffsim.GradientWarning, match=r"2 finite-difference Jacobian column\(s\) in 1 world-step\(s\), "
                                                   r"first world 0 at step 3.*actuator force clamp "
                                                   r"\(actuatorfrcrange\) of tendon 'coupler' at step 3 in world 0"):
    _clamps_rollout(scene, ctrl, central=False)
  with warnings.catch_warnings():
    warnings.simplefilter("error", diffsim.GradientWarning)
    _clamps_rollout(scene, ctrl, central=True)


def test_smooth_horizon_quiet():
  """A horizon far from every clamp (the arm without gravity, its inputs scaled by 0.1: 0.18 N m or
  more from each actuatorfrcrange in float64 C): no warning, central or forward."""
  weightless = ACTFRC_ARM.replace('integrator="implicitfast"', 'integrator="implicitfast" gravity="0 0 0"')
  scene = diffsim.Scene.from_xml(weightless, nworld=1, device=DEVICE)
  ctrl, qvel0 = _arm_inputs(0.1)
  margin = _actfrc_margin(scene.mjm, ctrl, qvel0)
  print('margin', margin)
  assert margin > 0.1
  with warnings.catch_warnings():
    warnings.simplefilter("error", diffsim.GradientWarning)
    for central in (True, False):
      lanes = diffsim.check_gradients(scene, ctrl, qvel0=qvel0, wrt=("ctrl", "qvel0"), gradient="finite_difference",
                                      central=central)
      print("central" if central else "forward", lanes)
      assert max(lanes.rel_err.values()) < 1e-2, lanes.rel_err


def test_tendon_actuatorfrcrange_analytic():
  """The analytic adjoint through the tendon's clamp (its two motors' forces scaled into the range,
  MJWarp's `_tendon_actuator_force_clamp`), clamped at 20 of 40 steps in float64 C. Measured:
  analytic 2.2e-7 (ctrl), 7.9e-8 (qvel0); the lanes 2.0e-4, 8.3e-4, quiet. With implicitfast and a
  velocity gain on the tendon's actuators (dropped while clamped, not replayed) it stays refused."""
  scene = diffsim.Scene.from_xml(TENDON_CLAMP, nworld=2, device=DEVICE)
  assert analytic_coverage(scene.mjm) is None, analytic_coverage(scene.mjm)
  rng = np.random.default_rng(5)
  ctrl = np.column_stack([0.4 * np.sin(np.linspace(0, 6, 40)) + 0.2 * rng.standard_normal(40),
                          0.3 * np.cos(np.linspace(0, 4, 40))])
  qvel0 = np.array([0.5, -1.0])
  d = mujoco.MjData(scene.mjm)
  d.qvel[:] = qvel0
  r = scene.mjm.tendon_actfrcrange[0]
  clamped = np.zeros(40, bool)
  for k in range(40):
    d.ctrl[:] = ctrl[k]
    mujoco.mj_step(scene.mjm, d)
    clamped[k] = not r[0] + 1e-9 < d.actuator_force.sum() < r[1] - 1e-9
  assert 5 <= clamped.sum() <= 35, clamped.sum()
  ana = diffsim.check_gradients(scene, ctrl, qvel0=qvel0, wrt=("ctrl", "qvel0"), gradient="analytic")
  with warnings.catch_warnings():
    warnings.simplefilter("error", diffsim.GradientWarning)
    lanes = diffsim.check_gradients(scene, ctrl, qvel0=qvel0, wrt=("ctrl", "qvel0"), gradient="finite_difference")
  print("analytic:", ana)
  print("lanes:", lanes)
  for k, err in ana.rel_err.items():
    assert err < 1e-5 and err < 0.1 * lanes.rel_err[k], (k, err, lanes.rel_err[k])
  servo = TENDON_CLAMP.replace('<option timestep="0.005"/>', '<option timestep="0.005" integrator="implicitfast"/>')
  servo = servo.replace('<motor name="pull_b" tendon="coupler"/>',
                        '<position name="pull_b" tendon="coupler" kp="2" kv="0.1"/>')
  assert "actuatorfrcrange" in analytic_coverage(mujoco.MjModel.from_xml_string(servo))
