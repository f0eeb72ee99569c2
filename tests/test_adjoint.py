"""The analytic adjoint (`diffsim.adjoint`): its replayed forward values against MJWarp's, its
gradients against float64 MuJoCo C and against the finite-difference lanes, selection, capture and
determinism."""

import logging
import os

import mujoco
import mujoco_warp as mjw
import numpy as np
import pytest
import warp as wp

import diffsim
import models
from conftest import DEVICE
from diffsim.adjoint import analytic_coverage


@pytest.fixture(scope="session")
def smooth():
  return diffsim.Scene.from_xml(models.SMOOTH, nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def limited():
  return diffsim.Scene.from_xml(models.LIMITED, nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def coupled():
  return diffsim.Scene.from_xml(models.COUPLED, nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def implicitfast():
  return diffsim.Scene.from_xml(models.IMPLICITFAST, nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def implicitfast_free():
  return diffsim.Scene.from_xml(models.IMPLICITFAST_FREE, nworld=2, device=DEVICE)


@pytest.fixture(scope="session")
def so101_free():
  """The SO-101 with contacts disabled: joint limits and dof friction, no contacts."""
  spec = models.so101_spec()
  spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
  return diffsim.Scene.from_xml(spec, nworld=2, device=DEVICE)


def _inputs(scene, nstep, seed=0, ctrl_scale=0.3, qvel_scale=0.5):
  rng = np.random.default_rng(seed)
  return 0.0 + ctrl_scale * rng.normal(size=(nstep, scene.nu)), qvel_scale * rng.normal(size=scene.nv)


def _spin_inputs(scene, nstep, seed=0):
  """The last free joint spins fast about an axis off its principal ones: its gyroscopic forces matter
  (without implicitfast's free-body term the gradient is off by 7e-3)."""
  ctrl, qvel = _inputs(scene, nstep, seed)
  qvel[-3:] = [4.0, -3.0, 6.0]
  return ctrl, qvel


def _limited_inputs(nstep, seed=0):
  """The swing joint pressed into its upper limit (limit row active, its friction row saturated),
  the slider held by its friction (friction row in the quadratic regime)."""
  rng = np.random.default_rng(seed)
  ctrl = np.array([1.5, 0.1]) + 0.05 * rng.normal(size=(nstep, 2))
  return ctrl, np.array([0.302, 0.0]), np.zeros(2)


def test_replay_equals_mjwarp(smooth, limited, coupled, implicitfast, implicitfast_free):
  """The replayed dynamics of one step equal MJWarp's own values at the same state, its residual
  `tau_ID(a_e) + h B a_e - f` vanishes at MJWarp's acceleration, and the integrated acceleration `a_e`
  is MJWarp's velocity change."""
  ctrl_s, qvel_s = _inputs(smooth, 1)
  ctrl_c, qvel_c = _inputs(coupled, 1)
  ctrl_i, qvel_i = _inputs(implicitfast, 1)
  ctrl_f, qvel_f = _spin_inputs(implicitfast_free, 1)
  for scene, (ctrl, qpos0, qvel0) in ((smooth, (ctrl_s, None, qvel_s)), (limited, _limited_inputs(1)),
                                      (coupled, (ctrl_c, None, qvel_c)), (implicitfast, (ctrl_i, None, qvel_i)),
                                      (implicitfast_free, (ctrl_f, None, qvel_f))):
    n = scene.nworld
    ro = diffsim.Rollout(scene, 1, gradient="analytic")
    u = wp.array(np.tile(ctrl.astype(np.float32), (n, 1, 1)), dtype=float, device=scene.device, requires_grad=True)
    kw = dict(qvel0=qvel0.astype(np.float32))
    if qpos0 is not None:
      kw["qpos0"] = qpos0.astype(np.float32)
    act0 = np.full(scene.na, 0.2, np.float32)
    with wp.Tape():
      traj = ro(u, act0=act0, **kw)
    ro.adjoint.rebuild()
    ro.adjoint.replay(traj, ro.buffers.qacc, 0, True)
    # MJWarp at the same state
    d = mjw.put_data(scene.mjm, mujoco.MjData(scene.mjm), nworld=n)
    for name in ("qpos", "qvel", "act"):
      getattr(d, name).assign(getattr(traj, name).numpy()[:, 0])
    d.ctrl.assign(u.numpy()[:, 0])
    mjw.step(scene.model, d)
    got = {k: v.numpy() for k, v in ro.adjoint.values.items()}
    want = dict(xpos=d.xpos.numpy(), xquat=d.xquat.numpy(), xipos=d.xipos.numpy(), cinert=d.cinert.numpy(),
                cdof=d.cdof.numpy(), qfrc_passive=d.qfrc_passive.numpy(), qfrc_actuator=d.qfrc_actuator.numpy(),
                actuator_force=d.actuator_force.numpy(), qfrc_constraint=d.qfrc_constraint.numpy(),
                act=d.act.numpy(), sensordata=d.sensordata.numpy())
    for k, w in want.items():
      if w.size == 0:
        continue
      g = got[k][..., :w.shape[-1]] if k in ("act", "sensordata", "actuator_force") else got[k]
      scale = max(np.abs(w).max(), 1.0)
      np.testing.assert_allclose(g, w, rtol=0, atol=2e-5 * scale, err_msg=f"{scene.mjm} {k}")
    # the step's residual at MJWarp's acceleration: (M + h B) a_e = f (Euler's damping, implicitfast's
    # velocity derivatives)
    r = got["tau_e"] + got["damp"] - got["force"]
    assert np.abs(r).max() < 1e-4 * max(np.abs(got["force"]).max(), 1.0)
    dv = (d.qvel.numpy() - traj.qvel.numpy()[:, 0]) / scene.dt
    np.testing.assert_allclose(ro.adjoint.qacc_e.numpy(), dv, rtol=0, atol=1e-5 * max(np.abs(dv).max(), 1.0),
                               err_msg=f"{scene.mjm} a_e")
    if scene in (limited, coupled):
      assert np.abs(want["qfrc_constraint"]).max() > 0.1  # the rows were there to check


# (fixture, nstep, inputs, bound on the analytic error): measured 3e-7 (so101_free) .. 2e-5 (smooth,
# limited), the lanes 2e-5 .. 6e-3 (CPU)
CASES = {
  "cartpole": ("cartpole", 100, None, 1e-5),
  "ball_free": ("ball_free", 60, None, 2e-5),
  "smooth": ("smooth", 40, None, 4e-4),
  "limited": ("limited", 40, "limited", 1e-4),
  "coupled": ("coupled", 40, None, 1e-4),
  "implicitfast": ("implicitfast", 40, None, 1e-4),
  "implicitfast_free": ("implicitfast_free", 40, "spin", 3e-5),
  "so101_free": ("so101_free", 30, None, 1e-5),
}


@pytest.mark.parametrize("case", list(CASES))
def test_gradients_match_mujoco_and_lanes(case, request):
  """Against float64 MuJoCo C: within the bound and no worse than the lanes; and analytic and lanes
  agree within the lanes' own error."""
  fixture, nstep, kind, bound = CASES[case]
  scene = request.getfixturevalue(fixture)
  if kind == "limited":
    ctrl, qpos0, qvel0 = _limited_inputs(nstep)
  elif kind == "spin":
    (ctrl, qvel0), qpos0 = _spin_inputs(scene, nstep), None
  else:
    (ctrl, qvel0), qpos0 = _inputs(scene, nstep), None
  worlds = [0] if case == "so101_free" else None
  kw = dict(qpos0=qpos0, qvel0=qvel0, worlds=worlds, spread=0.0 if kind == "limited" else 0.05)
  ana = diffsim.check_gradients(scene, ctrl, gradient="analytic", **kw)
  fd = diffsim.check_gradients(scene, ctrl, gradient="finite_difference", **kw)
  for k in ana.rel_err:
    assert ana.rel_err[k] < bound, f"{case} {k}: {ana}"
    assert ana.rel_err[k] <= max(fd.rel_err[k], bound), f"{case} {k}: analytic {ana} lanes {fd}"
    diff = np.linalg.norm(ana.tape[k] - fd.tape[k]) / np.linalg.norm(fd.fd[k])
    assert diff <= fd.rel_err[k] + ana.rel_err[k] + 1e-6, f"{case} {k}: analytic and lanes differ by {diff:.2e}"


def test_parameter_gradients(smooth):
  """Every covered parameter field, against float64 MuJoCo C."""
  P = diffsim.Param
  params = [P("body_mass", "bob"), P("body_inertia", "floater"), P("body_ipos", "tip"), P("dof_damping", "h2"),
            P("dof_armature", "base"), P("jnt_stiffness", "s2"), P("actuator_gainprm", "pos"),
            P("actuator_biasprm", "filt"), P("actuator_dynprm", "filt", components=[0]), P("opt.gravity"),
            P("actuator_gear", "base", components=[0])]
  ctrl, qvel0 = _inputs(smooth, 30)
  r = diffsim.check_gradients(smooth, ctrl, qvel0=qvel0, params=params, wrt=("params",), gradient="analytic")
  # each parameter on its own (measured 1e-6 .. 1.4e-4)
  for p in params:
    assert r.rel_err[p.name] < 1e-3, f"{p.name}: {r}"


def test_inertial_parameters_through_invweight(limited, coupled):
  """Masses and armature in models with limit, friction and joint-equality rows: their softness reads
  `dof_invweight0`, derived from the mass matrix at `qpos0` (`invweight.py`). Measured: the slider's
  mass 1.2e-4, armature 2.1e-5 (limited); masses 3.0e-7 .. 1.1e-6, armature 1.3e-6 (coupled); the
  lanes 2.1e-3, 3.9e-3; 6.2e-4 .. 8.9e-3, 1.4e-3."""
  ctrl, qpos0, qvel0 = _limited_inputs(40)
  params = [diffsim.Param("body_mass", "slider"), diffsim.Param("dof_armature")]
  res = diffsim.check_gradients(limited, ctrl, qpos0=qpos0, qvel0=qvel0, params=params, wrt=("params",),
                                gradient="analytic", spread=0.0)
  print(res)
  assert res.max_rel_err < 1e-3, res
  m = coupled.mjm
  ctrl, qvel0 = _inputs(coupled, 40)
  params = [diffsim.Param("body_mass", m.body(i).name) for i in range(1, m.nbody)] + [diffsim.Param("dof_armature")]
  res = diffsim.check_gradients(coupled, ctrl, qvel0=qvel0, params=params, wrt=("params",), gradient="analytic")
  print(res)
  assert res.max_rel_err < 1e-5, res


def test_friction_parameter_gradient(limited):
  ctrl, qpos0, qvel0 = _limited_inputs(30)
  p = diffsim.Param("dof_frictionloss")
  r = diffsim.check_gradients(limited, ctrl, qpos0=qpos0, qvel0=qvel0, params=[p], wrt=("params",), spread=0.0,
                              gradient="analytic")
  assert r.rel_err[p.name] < 1e-4, r


def test_selection(cartpole, so101, caplog):
  """`auto` takes the analytic adjoint where it covers the model and says why not where it does
  not; `analytic` on an uncovered model is an error naming the feature, before any kernel runs."""
  ro = diffsim.Rollout(cartpole, 5)
  assert ro.gradient == "analytic" and ro.buffers.jac is None  # no Jacobians stored
  assert diffsim.Rollout(so101, 5).gradient == "analytic"  # its contacts are covered
  spec = models.so101_spec()
  spec.option.noslip_iterations = 3
  noslip = diffsim.Scene.from_xml(spec, nworld=2, device=so101.device)
  with caplog.at_level(logging.INFO, logger="diffsim"):
    ro = diffsim.Rollout(noslip, 5)
  assert ro.gradient == "finite_difference" and "noslip" in ro.gradient_reason
  assert any("noslip" in r.getMessage() for r in caplog.records)
  with pytest.raises(ValueError, match="does not cover the noslip solver"):
    diffsim.Rollout(noslip, 5, gradient="analytic")
  with pytest.raises(ValueError, match="gradient must be one of"):
    diffsim.Rollout(cartpole, 5, gradient="adjoint")
  assert diffsim.Rollout(cartpole, 5, gradient="finite_difference").gradient == "finite_difference"
  # parameters it cannot differentiate, and inertial ones where constraint rows read dof_invweight0
  ro = diffsim.Rollout(cartpole, 5, params=[diffsim.Param("dof_solref")])
  assert ro.gradient == "finite_difference" and "dof_solref" in ro.gradient_reason
  spec = models.so101_spec()
  spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
  m = spec.compile()
  assert analytic_coverage(m) is None
  assert analytic_coverage(m, ["dof_armature", "body_mass"]) is None  # through dof_invweight0 (invweight.py)
  assert "body_invweight0" in analytic_coverage(m, ["body_ipos"])
  # implicit and RK4 integrators and sleeping bodies are not covered; implicitfast's free bodies are
  m = mujoco.MjModel.from_xml_path(diffsim.asset_path("cartpole.xml"))
  m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
  assert "rk4" in analytic_coverage(m)
  m = mujoco.MjModel.from_xml_string(models.BALL_FREE)
  m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_SLEEP
  assert "sleep" in analytic_coverage(m)
  m = mujoco.MjModel.from_xml_string(models.BALL_FREE)
  m.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
  assert analytic_coverage(m) is None


def test_linearize_takes_the_analytic_step(cartpole):
  """iLQR and Gauss-Newton linearize with the analytic step's Jacobians by default (no lanes made;
  their values: tests/test_jacobians.py), made on the first linearized call."""
  ro = diffsim.Rollout(cartpole, 10)
  assert ro.jacobian == "analytic" and ro.fd._data is None
  ctrl = wp.array(np.zeros((2, 10, cartpole.nu), np.float32), dtype=float, device=cartpole.device)
  with pytest.raises(RuntimeError, match="linearize=True first"):
    ro.jacobians()
  ro(ctrl, linearize=True)
  assert ro.jacobians()[0].shape == (2, 10, cartpole.nx, ro.fd.nz)
  assert ro.fd._data is None  # still no lane worlds


def test_capture_repeats_bitwise(ball_free):
  """The whole tape gradient captured as one graph (no host reads in it), replayed twice: the same
  bits, equal to the eager gradient, with deterministic mode on."""
  scene, nstep = ball_free, 20
  diffsim.set_deterministic(True)
  try:
    ro = diffsim.Rollout(scene, nstep, gradient="analytic")
    rng = np.random.default_rng(3)
    ctrl = wp.array(0.3 * rng.normal(size=(2, nstep, scene.nu)).astype(np.float32), dtype=float,
                    device=scene.device, requires_grad=True)
    loss = wp.zeros(1, dtype=float, device=scene.device, requires_grad=True)
    weights = wp.array(rng.normal(size=(2, nstep + 1, scene.nq)).astype(np.float32), dtype=float,
                       device=scene.device)

    def gradient():
      loss.zero_()
      ctrl.grad.zero_()
      tape = wp.Tape()
      with tape:
        traj = ro(ctrl)
        wp.launch(diffsim.gradcheck.linear_functional, dim=(2, nstep + 1, scene.nq),
                  inputs=[traj.qpos, weights], outputs=[loss], device=scene.device)
      tape.backward(loss)

    gradient()
    eager = ctrl.grad.numpy().copy()
    with wp.ScopedCapture(device=scene.device) as cap:
      gradient()
    runs = []
    for _ in range(2):
      wp.capture_launch(cap.graph)
      runs.append(ctrl.grad.numpy().copy())
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_allclose(runs[0], eager, rtol=1e-5, atol=1e-6)
    assert np.abs(eager).max() > 0
  finally:
    diffsim.set_deterministic(False)


def test_humanoid_without_contacts():
  """MJWarp's humanoid with contacts disabled (free root, 21 limited hinges): analytic within
  1e-4 of float64 C over 20 steps, where the lanes err by about 2e-2 (measured 1.3e-5 and 1.6e-2)."""
  path = os.path.join(os.path.dirname(mjw.__file__), "test_data", "humanoid", "humanoid.xml")
  spec = mujoco.MjSpec.from_file(path)
  spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
  scene = diffsim.Scene.from_xml(spec, nworld=1, device=DEVICE)
  ctrl, qvel0 = _inputs(scene, 20, seed=1)
  r = diffsim.check_gradients(scene, ctrl, qvel0=0.6 * qvel0, wrt=("ctrl", "qvel0"), gradient="analytic")
  assert r.max_rel_err < 1e-4, r


# A two-link arm under implicitfast: position servos with a velocity gain and a motor beside the
# shoulder's servo, every joint's summed actuator force clamped to its actuatorfrcrange.
ACTFRC_ARM = """<mujoco model="actfrc_arm">
  <option timestep="0.005" integrator="implicitfast"/>
  <default>
    <joint type="hinge" axis="0 1 0" damping="0.05"/>
    <geom type="capsule" size="0.02" mass="0.3"/>
  </default>
  <worldbody>
    <body name="upper">
      <joint name="shoulder" actuatorfrcrange="-1.2 1.5"/>
      <geom fromto="0 0 0 0.25 0 0"/>
      <body pos="0.25 0 0">
        <joint name="elbow" actuatorfrcrange="-0.4 0.4"/>
        <geom fromto="0 0 0 0.2 0 0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position joint="shoulder" kp="8" kv="0.4"/>
    <motor joint="shoulder"/>
    <position joint="elbow" kp="4" kv="0.2"/>
  </actuator>
</mujoco>"""


def test_joint_actuator_force_limits():
  """Joints' `actuatorfrcrange`: the summed actuator force clamped per dof, and implicitfast's velocity
  gain dropped while the joint is clamped (MJWarp's `_jnt_actfrc_clamped`); the horizon crosses
  in and out of both ranges. Measured: analytic 3.8e-7 (ctrl), 3.4e-7 (qvel0); the lanes 1.5e-4 and
  7.1e-4. At two steps the shoulder's force sits within the lanes' control step of its limit: the
  lanes' signature now holds each clamp's side, so the column takes the side that keeps the nominal
  one (0.74 off before, straddling the kink); forward differences, with no other side, are flagged
  by name (`tests/test_lane_kinks.py`)."""
  scene = diffsim.Scene.from_xml(ACTFRC_ARM, nworld=2, device=DEVICE)
  assert analytic_coverage(scene.mjm) is None
  rng = np.random.default_rng(3)
  ctrl = np.column_stack([0.3 * np.sin(np.linspace(0, 6, 40)), 0.8 * rng.standard_normal(40),
                          0.5 * np.cos(np.linspace(0, 5, 40))])
  qvel0 = np.array([0.5, -1.0])
  d = mujoco.MjData(scene.mjm)
  d.qvel[:] = qvel0
  clamped = np.zeros((40, 2), bool)
  for k in range(40):
    d.ctrl[:] = ctrl[k]
    mujoco.mj_step(scene.mjm, d)
    r = scene.mjm.jnt_actfrcrange
    clamped[k] = (d.qfrc_actuator <= r[:, 0] + 1e-12) | (d.qfrc_actuator >= r[:, 1] - 1e-12)
  assert clamped.any(axis=0).all() and (~clamped).any(axis=0).all(), clamped.sum(axis=0)
  ana = diffsim.check_gradients(scene, ctrl, qvel0=qvel0, wrt=("ctrl", "qvel0"), gradient="analytic")
  lanes = diffsim.check_gradients(scene, ctrl, qvel0=qvel0, wrt=("ctrl", "qvel0"), gradient="finite_difference")
  print("analytic:", ana)
  print("lanes:", lanes)
  for k, err in ana.rel_err.items():
    assert err < 1e-5 and err < 0.1 * lanes.rel_err[k], (k, err, lanes.rel_err[k])


# A free-floating base carrying a ball-jointed pendulum and a motorized hinge: an IMU site (gyro,
# velocimeter) on the pendulum, the ball joint's quaternion and angular velocity, the hinge's
# actuator force (clamped by its actuatorfrcrange).
IMU = """<mujoco model="imu">
  <option timestep="0.005" gravity="0 0 -9.81"/>
  <worldbody>
    <body name="base" pos="0 0 1">
      <freejoint/>
      <geom type="box" size="0.1 0.08 0.03" mass="1"/>
      <body name="pendulum" pos="0.05 0 -0.03">
        <joint name="ball" type="ball" damping="0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0.02 -0.2" size="0.015" mass="0.2"/>
        <site name="imu" pos="0 0.02 -0.2" euler="10 20 30"/>
      </body>
      <body name="arm" pos="-0.05 0 0.03">
        <joint name="hinge" axis="0 1 0" actuatorfrcrange="-0.3 0.3"/>
        <geom type="capsule" fromto="0 0 0 -0.15 0 0.05" size="0.01" mass="0.1"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="hinge"/>
  </actuator>
  <sensor>
    <gyro site="imu"/>
    <velocimeter site="imu"/>
    <ballquat joint="ball"/>
    <ballangvel joint="ball"/>
    <jointactuatorfrc joint="hinge"/>
  </sensor>
</mujoco>"""


def test_imu_and_joint_sensors():
  """Gyro and velocimeter (the site's angular and linear velocity in its own frame), ballquat,
  ballangvel and jointactuatorfrc in the checked functional. Measured: analytic 1.3e-6 (ctrl), 9.7e-7
  (qpos0), 7.1e-7 (qvel0); the lanes 4.1e-3, 1.1e-2, 1.0e-3 (ctrl 8.0e-2 while they straddled the
  hinge's clamp, before their signature held its side; see `test_joint_actuator_force_limits`)."""
  scene = diffsim.Scene.from_xml(IMU, nworld=2, device=DEVICE)
  assert analytic_coverage(scene.mjm) is None, analytic_coverage(scene.mjm)
  rng = np.random.default_rng(4)
  ctrl = 0.4 * rng.standard_normal((30, 1))
  qpos0 = scene.mjm.qpos0.copy()
  qpos0[7:11] = [0.9, 0.3, -0.2, 0.1]
  qpos0[7:11] /= np.linalg.norm(qpos0[7:11])
  qvel0 = 0.5 * rng.standard_normal(scene.nv)
  ana = diffsim.check_gradients(scene, ctrl, qpos0=qpos0, qvel0=qvel0, signals=("sensordata",),
                                gradient="analytic")
  lanes = diffsim.check_gradients(scene, ctrl, qpos0=qpos0, qvel0=qvel0, signals=("sensordata",),
                                  gradient="finite_difference")
  print("analytic:", ana)
  print("lanes:", lanes)
  for k, err in ana.rel_err.items():
    assert err < 1e-5 and err < 0.1 * lanes.rel_err[k], (k, err, lanes.rel_err[k])
