"""Forward rollouts against float64 MuJoCo C, per-world parameters, capture and determinism."""

import copy

import mujoco
import numpy as np
import pytest
import warp as wp

import diffsim
from diffsim.gradcheck import mujoco_rollout, set_mjmodel_params
from diffsim.graph import capture


def _ctrl(scene, nstep, seed=0, scale=0.5):
  rng = np.random.default_rng(seed)
  return (scale * rng.standard_normal((scene.nworld, nstep, scene.nu))).astype(np.float32)


def test_cartpole_matches_mj_step_200_steps(cartpole):
  u = _ctrl(cartpole, 200)
  qpos0 = np.array([[0.1, 0.3], [-0.2, 2.0]], np.float32)
  qvel0 = np.array([[0.0, 1.0], [0.5, -1.0]], np.float32)
  traj = diffsim.rollout(cartpole, wp.array(u, dtype=float), qpos0=qpos0, qvel0=qvel0)
  for w in range(2):
    ref = mujoco_rollout(cartpole.mjm, u[w].astype(np.float64), qpos0=qpos0[w], qvel0=qvel0[w])
    np.testing.assert_allclose(traj.qpos.numpy()[w], ref["qpos"], atol=2e-4)
    np.testing.assert_allclose(traj.qvel.numpy()[w], ref["qvel"], atol=2e-3)
    np.testing.assert_allclose(traj.sensordata.numpy()[w], ref["sensordata"], atol=2e-3)


def test_ball_and_free_joints_match_mj_step_200_steps(ball_free):
  m = ball_free.mjm
  u = _ctrl(ball_free, 200, scale=0.2)
  qpos0 = m.qpos0.copy()
  qpos0[1:5] = np.array([0.9, 0.2, 0.3, 0.1]) / np.linalg.norm([0.9, 0.2, 0.3, 0.1])
  qvel0 = np.zeros(m.nv)
  qvel0[7:10] = [1.0, 3.0, -2.0]  # spin the free body
  traj = diffsim.rollout(ball_free, wp.array(u, dtype=float), qpos0=qpos0, qvel0=qvel0)
  ref = mujoco_rollout(m, u[0].astype(np.float64), qpos0=qpos0, qvel0=qvel0)
  np.testing.assert_allclose(traj.qpos.numpy()[0], ref["qpos"], atol=1e-3)
  np.testing.assert_allclose(traj.sensordata.numpy()[0], ref["sensordata"], atol=1e-3)
  # quaternions stay unit
  q = traj.qpos.numpy()[0]
  np.testing.assert_allclose(np.linalg.norm(q[:, 8:12], axis=1), 1.0, atol=1e-5)


def test_contact_model_matches_mj_step_and_raw_mjwarp(sliding_box):
  """A box pushed across a plane (6 N against 4.9 N of friction; four corner contacts), 200 steps: diffsim's
  forward pass against float64 MuJoCo C and against MJWarp's own `step` loop on the same model."""
  import mujoco_warp as mjw

  m = sliding_box.mjm
  u = (6.0 + 0.5 * np.random.default_rng(3).standard_normal((sliding_box.nworld, 200, 1))).astype(np.float32)
  traj = diffsim.rollout(sliding_box, wp.array(u, dtype=float))
  qpos = traj.qpos.numpy()
  # raw MJWarp, as a user would step it (its own solver tolerance, not diffsim's)
  with wp.ScopedDevice(sliding_box.device):
    mjm = copy.deepcopy(m)
    mjm.opt.tolerance = 1e-8
    model = mjw.put_model(mjm)
    d = mjw.put_data(mjm, mujoco.MjData(mjm), nworld=sliding_box.nworld)
    raw = np.zeros_like(qpos)
    raw[:, 0] = d.qpos.numpy()
    for k in range(200):
      d.ctrl.assign(u[:, k])
      mjw.step(model, d)
      raw[:, k + 1] = d.qpos.numpy()
  for w in range(sliding_box.nworld):
    ref = mujoco_rollout(m, u[w].astype(np.float64))
    assert ref["qpos"][-1, 0] > 0.5  # the box did slide (0.55 m)
    # measured: within 7e-6 of C and 9e-6 of raw MJWarp
    np.testing.assert_allclose(qpos[w], ref["qpos"], atol=5e-5)
    np.testing.assert_allclose(qpos[w], raw[w], atol=5e-5)


def test_per_world_parameters_match_mujoco(cartpole):
  """Each world simulates its own pole mass (derived constants included)."""
  mass = diffsim.Param("body_mass", "pole")
  mass.bind(cartpole)
  mass.assign([[0.3], [0.9]])
  u = _ctrl(cartpole, 100, seed=1)
  traj = diffsim.rollout(cartpole, wp.array(u, dtype=float), qpos0=[0.0, 0.5], params=[mass])
  for w, value in enumerate([0.3, 0.9]):
    mjm = _copy(cartpole.mjm)
    set_mjmodel_params(mjm, {mass: [value]})
    ref = mujoco_rollout(mjm, u[w].astype(np.float64), qpos0=[0.0, 0.5])
    np.testing.assert_allclose(traj.qpos.numpy()[w], ref["qpos"], atol=2e-4)
  # the two worlds really differ
  assert np.abs(traj.qpos.numpy()[0] - traj.qpos.numpy()[1]).max() > 1e-2
  # a later rollout without the parameter simulates the MJCF model again
  plain = diffsim.rollout(cartpole, wp.array(u, dtype=float), qpos0=[0.0, 0.5])
  ref = mujoco_rollout(cartpole.mjm, u[1].astype(np.float64), qpos0=[0.0, 0.5])
  np.testing.assert_allclose(plain.qpos.numpy()[1], ref["qpos"], atol=2e-4)


def test_position_servo_gain_keeps_bias_consistent(so101):
  """actuator_gainprm of a position actuator is kp: biasprm[1] follows as -kp."""
  kp = diffsim.Param("actuator_gainprm", "elbow_flex")
  kp.bind(so101)
  kp.assign([30.0])
  u = np.tile(np.array([0.0, 0.3, -0.4, 0.2, 0.0, 0.1], np.float32), (so101.nworld, 50, 1))
  traj = diffsim.rollout(so101, wp.array(u, dtype=float), params=[kp])
  mjm = _copy(so101.mjm)
  set_mjmodel_params(mjm, {kp: [30.0]})
  act = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, "elbow_flex")
  assert mjm.actuator_biasprm[act, 1] == -30.0
  ref = mujoco_rollout(mjm, u[0].astype(np.float64))
  np.testing.assert_allclose(traj.qpos.numpy()[0], ref["qpos"], atol=2e-4)


def test_outside_a_tape_runs_one_lane(cartpole):
  u = wp.array(_ctrl(cartpole, 10), dtype=float)
  diffsim.rollout(cartpole, u)
  forward = [ro for key, ro in cartpole.memo["rollouts"].items() if key[0] == 10 and not key[2]]
  assert forward and all(ro.fd.nlane == 1 for ro in forward)


@wp.kernel
def _final_angle_loss(qpos: wp.array3d[float], nstep: int, loss: wp.array[float]):
  w = wp.tid()
  a = qpos[w, nstep, 1] - 3.14159
  wp.atomic_add(loss, 0, a * a)


def _gradient_step(ro, ctrl, loss):
  tape = wp.Tape()
  with tape:
    traj = ro(ctrl)
    wp.launch(_final_angle_loss, dim=ro.scene.nworld, inputs=[traj.qpos, ro.nstep], outputs=[loss])
  tape.backward(loss)


def test_captured_graph_replays_eager_gradients(cartpole):
  nstep = 30
  damping = diffsim.Param("dof_damping", "hinge")
  ro = diffsim.Rollout(cartpole, nstep, params=[damping])
  ctrl = wp.array(_ctrl(cartpole, nstep, seed=3), dtype=float, requires_grad=True)
  loss = wp.zeros(1, dtype=float, requires_grad=True)

  def iteration():
    loss.zero_()
    ctrl.grad.zero_()
    damping.value.grad.zero_()
    _gradient_step(ro, ctrl, loss)

  iteration()
  eager = ctrl.grad.numpy().copy(), damping.value.grad.numpy().copy(), loss.numpy().copy()
  assert np.abs(eager[0]).max() > 0
  with wp.ScopedCapture(device=cartpole.device) as capture:
    iteration()
  ctrl.grad.zero_()
  wp.capture_launch(capture.graph)
  np.testing.assert_array_equal(ctrl.grad.numpy(), eager[0])
  np.testing.assert_array_equal(damping.value.grad.numpy(), eager[1])
  np.testing.assert_array_equal(loss.numpy(), eager[2])


@pytest.mark.parametrize("forward_mode", [False, True], ids=["jacobians", "tangents"])
def test_looped_step_graph_replays_eager_linearization(ball_free, forward_mode):
  # Rollout.stages: one captured step replayed nstep times (a device counter advances the step
  # index) writes the same trajectory and step Jacobians (forward mode: tangents) as the eager
  # rollout, bit for bit
  nstep = 12
  params = [diffsim.Param("dof_damping", "ball")]
  if forward_mode:
    ndir = 3 + 1  # the 3 damping components and one direction of the initial state
    ro = diffsim.Rollout(ball_free, nstep, params=params, directions=ndir)
    t0 = np.zeros((1, ball_free.nx, ndir), np.float32)
    t0[0, :, 3] = np.random.default_rng(3).standard_normal(ball_free.nx)
    kw = {"tangent0": wp.array(t0, dtype=float)}
    derivatives = ro.tangents
  else:
    ro = diffsim.Rollout(ball_free, nstep, params=params)
    kw = {}
    derivatives = ro.jacobians
  ctrl = wp.array(_ctrl(ball_free, nstep, seed=5), dtype=float)
  qvel0 = np.zeros((ball_free.nworld, ball_free.nv), np.float32)
  qvel0[:, 1:4] = [2.0, -1.0, 3.0]
  qvel0 = wp.array(qvel0, dtype=float)
  traj = ro(ctrl, qvel0=qvel0, linearize=True, **kw)
  eager = [a.numpy().copy() for a in (traj.qpos, traj.qvel, traj.sensordata, *derivatives())]
  if forward_mode:
    assert (np.abs(eager[3][:, -1]).max(axis=1) > 0).all()  # every direction has moved the final state
  stages, traj = ro.stages(ctrl, qvel0=qvel0, linearize=True, **kw)
  assert [reps for _, reps in stages] == [1, nstep, 1]
  graphs, _ = capture(ball_free.device, stages)
  for a in (traj.qpos, traj.qvel, traj.sensordata, *derivatives()):
    a.zero_()
  for _ in range(2):  # the counter restarts with every replay of the first stage
    for graph, reps in graphs:
      for _ in range(reps):
        wp.capture_launch(graph)
    for a, b in zip((traj.qpos, traj.qvel, traj.sensordata, *derivatives()), eager):
      np.testing.assert_array_equal(a.numpy(), b)


def test_lazy_rollout_builds_on_first_use(cartpole):
  # lazy=True (system identification's main rollout, which LM may never run): no analytic step
  # until the first call, then the same trajectory and Jacobians, bit for bit; first used inside a
  # graph capture it is refused with the fix named
  nstep = 10
  damping = diffsim.Param("dof_damping", "hinge")
  ctrl = wp.array(_ctrl(cartpole, nstep, seed=9), dtype=float)
  eager = diffsim.Rollout(cartpole, nstep, params=[damping], ctrl_jacobian=False)
  assert eager.jacobian == "analytic"
  ref = [a.numpy().copy() for a in (eager(ctrl, linearize=True).qpos, *eager.jacobians())]
  lazy = diffsim.Rollout(cartpole, nstep, params=[damping], ctrl_jacobian=False, lazy=True)
  lazy.reserve_linearization()
  assert lazy._adjoint is None and lazy.nsweep == eager.nsweep and lazy.nlane == 1
  got = [a.numpy() for a in (lazy(ctrl, linearize=True).qpos, *lazy.jacobians())]
  assert lazy._adjoint is not None
  for g, r in zip(got, ref):
    np.testing.assert_array_equal(g, r)
  unbuilt = diffsim.Rollout(cartpole, nstep, params=[damping], lazy=True)
  with pytest.raises(RuntimeError, match=r"call its build\(\) before capturing"):
    with wp.ScopedCapture(device=cartpole.device):
      unbuilt(ctrl)
  # forward mode (sysid's directional rollout): its forward-only Data only at a forward-only call
  tangents = diffsim.Rollout(cartpole, nstep, params=[damping], directions=1, lazy=True)
  tangents(ctrl, linearize=True)
  assert tangents.forward_stepper._data is None
  np.testing.assert_array_equal(tangents(ctrl).qpos.numpy(), ref[0])
  assert tangents.forward_stepper._data is not None


def test_jacobians_without_control_columns(cartpole):
  # ctrl_jacobian=False (system identification): 2 nu fewer lanes, the same state and parameter
  # columns, zero control columns; a tape asking for the control gradient is refused
  nstep = 10
  damping = diffsim.Param("dof_damping", "hinge")
  full = diffsim.Rollout(cartpole, nstep, params=[damping])
  lean = diffsim.Rollout(cartpole, nstep, params=[damping], ctrl_jacobian=False)
  assert lean.fd.nlane == full.fd.nlane - 2 * cartpole.nu
  ctrl = wp.array(_ctrl(cartpole, nstep, seed=7), dtype=float)
  ref = [a.numpy().copy() for a in (full(ctrl, linearize=True).qpos, *full.jacobians())]
  got = [a.numpy() for a in (lean(ctrl, linearize=True).qpos, *lean.jacobians())]
  nx, nu = cartpole.nx, cartpole.nu
  np.testing.assert_array_equal(got[0], ref[0])
  for g, r in zip(got[1:], ref[1:]):
    np.testing.assert_allclose(np.delete(g, np.s_[nx:nx + nu], axis=-1), np.delete(r, np.s_[nx:nx + nu], axis=-1),
                               rtol=1e-6, atol=1e-6)
    assert not g[..., nx:nx + nu].any()
  assert ref[1][..., nx:nx + nu].any()  # the state depends on the control (the sensors here do not)
  grad_ctrl = wp.array(_ctrl(cartpole, nstep, seed=7), dtype=float, requires_grad=True)
  with pytest.raises(ValueError, match="ctrl_jacobian=False"):
    with wp.Tape():
      lean(grad_ctrl)


def test_set_deterministic_reaches_the_kernels_that_launch():
  """Warp copies `wp.config.deterministic` into a module when the module is made (at import), so the
  switch must set the option of the modules that launch; checked on each launch of a gradient.
  (Bitwise equality is checked too, but CPU kernels run sequentially: that proves little here.)"""
  from unittest import mock

  import mujoco_warp as mjw

  run_to_run = wp.DeterministicMode.RUN_TO_RUN
  launches = []
  launch = wp.launch

  def spy(kernel, *args, **kwargs):
    launches.append((kernel.func.__module__, kernel.key, kernel.module.options["deterministic"]))
    return launch(kernel, *args, **kwargs)

  diffsim.set_deterministic(True)
  try:
    scene = diffsim.Scene.from_xml(diffsim.asset_path("cartpole.xml"), nworld=3, device="cpu")
    ctrl = wp.array(_ctrl(scene, 20, seed=4), dtype=float, requires_grad=True)
    for gradient in ("finite_difference", "analytic"):
      ro = diffsim.Rollout(scene, 20, gradient=gradient)
      grads = []
      with mock.patch.object(wp, "launch", spy):
        for _ in range(2):
          loss = wp.zeros(1, dtype=float, requires_grad=True)
          ctrl.grad.zero_()
          _gradient_step(ro, ctrl, loss)
          grads.append(ctrl.grad.numpy().copy())
      np.testing.assert_array_equal(grads[0], grads[1])
    assert scene.model.opt.deterministic == mjw.DeterminismType.ALL
    det = {(m, k) for m, k, mode in launches if mode == run_to_run}
    # diffsim's adjoint, whose initial-state gradients sum over the worlds
    assert {("diffsim.rollout", "_adjoint_step"), ("diffsim.rollout", "_initial_grad")} <= det
    # the analytic adjoint's replay, whose reverse pass sums into shared adjoints with atomics
    assert {("diffsim.adjoint.kinematics", "_kinematics"), ("diffsim.adjoint.kinematics", "_cinert")} <= det
    # MJWarp's kernels with float atomics (built per mode by opt.deterministic), and only those: its
    # others do not compile in that mode, as a global wp.config.deterministic would have them
    mjw_modes = {mode for m, _, mode in launches if m.startswith("mujoco_warp")}
    assert mjw_modes == {run_to_run, wp.DeterministicMode.NOT_GUARANTEED}
    assert wp.config.deterministic == wp.DeterministicMode.NOT_GUARANTEED
    # _initial_grad updates each coordinate of the initial state once per world, in a loop Warp's
    # static record count misses
    assert wp.get_module_options("diffsim.rollout")["deterministic_max_records"] >= max(scene.nq, scene.nv)
  finally:
    diffsim.set_deterministic(False)
  for name in diffsim.scene.DETERMINISTIC_MODULES:
    assert wp.get_module_options(name)["deterministic"] == wp.DeterministicMode.NOT_GUARANTEED, name


def _copy(mjm):
  import copy

  return copy.deepcopy(mjm)
