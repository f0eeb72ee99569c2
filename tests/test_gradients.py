"""Tape gradients and forward-mode tangents against central differences of float64 MuJoCo C rollouts.

`check_gradients` differentiates a random linear functional of the whole trajectory (qpos, qvel,
act, sensordata), written as a Warp kernel, so each check covers every output's adjoint.
"""

import copy

import mujoco
import numpy as np
import pytest
import warp as wp

import diffsim
from diffsim.gradcheck import check_gradients, mujoco_rollout

import models

TOL = 1e-2  # the bar where the physics is kinked (contacts, dry friction, saturating servos)


def _assert_close(res, tol: dict[str, float]):
  """Each input's relative error (worst checked world) below its tolerance, `tol[name]` or `tol["*"]`.

  Tolerances sit about 10x above the error measured on this CPU (noted beside each), and at most
  `TOL`, so a bug worth a fraction of a percent of the gradient (a dropped step's term) fails.
  """
  print(res)
  for name, err in res.rel_err.items():
    assert np.linalg.norm(res.fd[name]) > 1e-6, f"{name}: reference gradient is zero, the check would be empty"
    bound = tol.get(name, tol["*"])
    assert err < bound, f"{name}: relative error {err:.2e} >= {bound} ({res})"


def _check(case: str, scene, gradient: str = "auto"):
  """`check_gradients` of `models.GRADIENT_CASES[case]` (the cases the README's table reports)."""
  kw = models.gradient_inputs(case, scene)
  return check_gradients(scene, kw.pop("ctrl"), gradient=gradient, **kw)


def test_cartpole_gradients(cartpole):
  res = _check("cartpole_100", cartpole)
  # measured: 2-6e-5; the hinge damping 1.0e-3 (world 1, where its gradient is mostly cancelled)
  _assert_close(res, {"*": 3e-4, "dof_damping:hinge": TOL})


def test_ball_and_free_joint_gradients(ball_free):
  res = _check("ball_free_60", ball_free)
  # measured: ctrl 8e-5, qvel0 1e-4, damping 3e-4, qpos0 4e-4, mass 1.2e-3
  _assert_close(res, {"*": 1e-3, "qpos0": 4e-3, "dof_damping:ball": 3e-3, "body_mass:bob": TOL})


def test_contact_gradients_rolling_ball(rolling_ball):
  """A ball pushed across a plane: one soft contact, rolling with friction."""
  res = _check("rolling_ball_60", rolling_ball)
  # measured (the analytic adjoint, the default since it covers contacts and masses there): ctrl 4.2e-7,
  # mass 8.0e-8, qvel0 2.0e-6, qpos0 4.4e-6 (the lanes: 1.9e-4, 1.5e-4, 4.6e-4, 9e-4). The ball's damping
  # errs by 9.7e-3 on the adjoint as on the lanes (9.8e-3 / 8.9e-3, worlds 0 / 1, whatever the
  # parameter's step): the two agree with each other, so the difference from C is MJWarp's step's, not
  # the gradient's; not yet explained, held at TOL
  _assert_close(res, {"*": 2e-3, "qvel0": 5e-3, "qpos0": TOL, "dof_damping:ball": TOL})


def test_self_check_flags_a_box_tipping_onto_its_edge(sliding_box):
  """A limit of the lanes, reported rather than hidden. A box at rest on a plane (its corners 1.7e-5 m
  deep) pushed at its centre rocks onto its front edge within two steps, its back corners lifting
  by less than a micrometre: no qpos step that float32 resolves keeps the contact rows, so the
  lanes' derivative there is not MuJoCo's (measured: off by 2.4-3.5x on the initial position). The
  self-check must warn, naming the steps (0-3, measured)."""
  m = sliding_box.mjm
  d = mujoco.MjData(m)
  for _ in range(400):  # settle
    mujoco.mj_step(m, d)
  u = 6.0 + 0.5 * np.random.default_rng(4).standard_normal((60, 1))
  with pytest.warns(diffsim.GradientWarning, match=r"first world 0 at step 0"):
    res = check_gradients(sliding_box, u, qpos0=d.qpos.copy(), qvel0=np.tile(d.qvel, (2, 1)), wrt=("qpos0",),
                          gradient="finite_difference")
  print(res)
  assert res.rel_err["qpos0"] > 0.5  # the warning is earned


def test_so101_gradients(so101):
  """The SO-101 arm with dry friction (frictionloss) and saturating servos (forcerange), at the
  default steps users run: both kink the forces in the controls, so the default control step there
  is the small one (`KINKED_CTRL_EPS`; the general 1e-2 errs by 6e-2 on the controls here). The
  default gradient is now the analytic adjoint (it covers the self-collision and the armature beside
  the limits), so the lanes are checked too."""
  res = _check("so101_40", so101)
  # measured: 1.1e-7 .. 8.1e-7 on the analytic adjoint
  _assert_close(res, {"*": TOL})
  res = _check("so101_40", so101, gradient="finite_difference")
  # measured: 2.5e-5 (damping) to 9.5e-4 (armature)
  _assert_close(res, {"*": TOL})


def test_long_horizon_gradients(cartpole, so101):
  """300 steps, longer than any trajectory optimized in the tutorials (200-250): float32 errors and
  kinks compound along the adjoint recursion, so a short check could hide them."""
  res = _check("cartpole_300", cartpole)
  _assert_close(res, {"*": 1e-3})  # measured: 5e-5 (ctrl, qvel0), 1.4e-4 (qpos0)
  res = _check("so101_300", so101)
  _assert_close(res, {"*": TOL, "dof_damping:elbow_flex": 2e-3})  # measured: qvel0 4.2e-3, damping 1.7e-4


def _step_errors(scene, jac, qpos0, qvel0, ctrl):
  """Per step, the largest error of `[A B]` (world 0) relative to `mjd_transitionFD`'s largest entry."""
  m = scene.mjm
  d = mujoco.MjData(m)
  d.qpos[:], d.qvel[:] = qpos0, qvel0
  nx = 2 * m.nv + m.na
  err = []
  for k in range(ctrl.shape[0]):
    d.ctrl[:] = ctrl[k]
    A, B = np.zeros((nx, nx)), np.zeros((nx, m.nu))
    mujoco.mjd_transitionFD(m, d, 1e-6, True, A, B, None, None)
    ref = np.concatenate([A, B], 1)
    err.append(np.abs(jac[k, :, :nx + m.nu] - ref).max() / np.abs(ref).max())
    mujoco.mj_step(m, d)
  return np.array(err)


@pytest.mark.parametrize("central", [True, False], ids=["central", "forward"])
def test_self_check_marks_every_unreliable_step(so101, central):
  """`Rollout.switches` (the gradient's self-check) against MuJoCo's own derivatives, SO-101, 40 steps.

  Dry friction switches between sticking and sliding within a step of the lanes. Central differences
  keep a clean side (or the guard lanes) and stay clean; forward differences have one lane per
  control and velocity, and where it switches the column is off by up to 50%. Every step the
  self-check calls clean must match `mjd_transitionFD`; the forward case must flag the steps it gets
  wrong (measured: 3 of 40, with errors 0.09-0.55; clean steps within 2.3e-2).
  """
  m = so101.mjm
  rng = np.random.default_rng(0)
  ctrl = (np.tile(0.3 * rng.standard_normal(m.nu), (40, 1)) + 0.05 * rng.standard_normal((40, m.nu))).astype(np.float32)
  ro = diffsim.Rollout(so101, 40, central=central, jacobian="finite_difference")
  ro(wp.array(np.tile(ctrl[None], (so101.nworld, 1, 1)), dtype=float), linearize=True)
  flagged = ro.switches().numpy()[0, :40] > 0
  err = _step_errors(so101, ro.jacobians()[0].numpy()[0], m.qpos0, np.zeros(m.nv), ctrl.astype(np.float64))
  print("flagged steps", np.nonzero(flagged)[0], "errors there", err[flagged], "largest clean", err[~flagged].max())
  assert err[~flagged].max() < 5e-2
  if central:
    assert not flagged.any()
  else:
    assert flagged.sum() >= 1 and err[flagged].max() > 5e-2
    with pytest.warns(diffsim.GradientWarning, match=r"world 0 at step \d+.*constraint switch"):
      diffsim.check_switches(ro)


@pytest.mark.parametrize("name", ["cartpole", "ball_free", "constrained"])
def test_step_jacobians_match_mjd_transitionFD(name, request):
  """Per-step A, B, C, D of the lanes against MuJoCo's own finite-difference derivatives (tangent space).

  "constrained" has no contacts but a loop closed by an equality constraint, a joint resting 0.8 mm
  past its limit and an activation state: position constraints with the ~1 mm impedance width of
  contacts, so the default qpos step must be the small one (1e-4; a 1e-3 step is off by 400% here).
  Inside that width the impedance is curved (errors up to 3e-3 of the block at 1e-4: tolerance 1e-2,
  the smooth models' 2e-3), and its curvature jumps at the midpoint (0.5 mm), where a 1e-4 difference
  errs by ~3e-2 (README, "Gradient quality"); the limit rests away from it.
  """
  scene = request.getfixturevalue(name)
  m = scene.mjm
  nstep = 5
  rng = np.random.default_rng(5)
  u = np.tile(0.3 * rng.standard_normal((1, nstep, m.nu)).astype(np.float32), (scene.nworld, 1, 1))
  qpos0 = m.qpos0.copy()
  qpos0[: min(2, m.nq)] = [0.2, 0.7][: min(2, m.nq)]
  qvel0 = 0.5 * rng.standard_normal(m.nv)
  tol = 2e-3
  if name == "ball_free":
    qpos0[1:5] = np.array([0.9, 0.2, 0.3, 0.1]) / np.linalg.norm([0.9, 0.2, 0.3, 0.1])
  if name == "constrained":
    assert not scene.has_contacts and scene.has_position_constraints
    qpos0[:] = [0.0, 0.0, 0.0, 0.5008]  # the loop closed as compiled; the arm 0.8 mm past its limit
    qvel0[:] = [0.5, -0.5, 0.5, 0.0]
    tol = 1e-2
  ro = diffsim.Rollout(scene, nstep, jacobian="finite_difference")  # the analytic step's: tests/test_jacobians.py
  ro(wp.array(u, dtype=float), qpos0=qpos0, qvel0=qvel0, linearize=True)
  jac, sjac = (a.numpy()[0] for a in ro.jacobians())
  d = mujoco.MjData(m)
  d.qpos[:], d.qvel[:] = qpos0, qvel0
  nx = 2 * m.nv + m.na
  for k in range(nstep):
    d.ctrl[:] = u[0, k]
    A, B = np.zeros((nx, nx)), np.zeros((nx, m.nu))
    C, D = np.zeros((m.nsensordata, nx)), np.zeros((m.nsensordata, m.nu))
    mujoco.mjd_transitionFD(m, d, 1e-6, True, A, B, C, D)
    for ours, ref, whole in ((jac[k, :, :nx], A, (A, B)), (jac[k, :, nx:], B, (A, B)),
                             (sjac[k, :, :nx], C, (C, D)), (sjac[k, :, nx:], D, (C, D))):
      # relative to the block, or where the block is exactly zero, to the Jacobian it is part of
      scale = np.abs(ref).max() or max(np.abs(w).max() for w in whole)
      np.testing.assert_allclose(ours, ref, atol=tol * max(scale, 1e-9))
    if name == "constrained":
      assert d.efc_type.tolist().count(mujoco.mjtConstraint.mjCNSTR_LIMIT_JOINT) == 1  # the limit is active
    mujoco.mj_step(m, d)


@wp.kernel
def _tip_release_states(
  sensordata: wp.array3d[float],  # (nworld, nstep + 1, ns): angle, tip_pos (3), tip_vel (3)
  nstep: int,
  x0: wp.array[wp.vec3],
  v0: wp.array[wp.vec3],
):
  w = wp.tid()
  x0[w] = wp.vec3(sensordata[w, nstep, 1], sensordata[w, nstep, 2], sensordata[w, nstep, 3])
  v0[w] = wp.vec3(sensordata[w, nstep, 4], sensordata[w, nstep, 5], sensordata[w, nstep, 6])


@wp.kernel
def _landing_loss(x: wp.array2d[wp.vec3], nflight: int, target: wp.vec3, loss: wp.array[float]):
  w = wp.tid()
  e = x[w, nflight] - target
  wp.atomic_add(loss, 0, wp.dot(e, e))


def test_gravity_kernel_composes_with_rollout(cartpole):
  """The pole tip is released at the end of a rollout and flies ballistically to a target; the
  gradient of the landing error with respect to the cart controls crosses both on one tape."""
  m = cartpole.mjm
  nstep, nflight, dt_flight = 40, 30, 0.01
  target = np.array([0.5, 0.0, -0.8])
  g = np.array([0.0, 0.0, -9.81])
  u = np.tile(np.linspace(-0.8, 0.8, nstep, dtype=np.float32)[None, :, None], (cartpole.nworld, 1, 1))
  ctrl = wp.array(u, dtype=float, requires_grad=True)
  n = cartpole.nworld
  x0 = wp.zeros(n, dtype=wp.vec3, requires_grad=True)
  v0 = wp.zeros(n, dtype=wp.vec3, requires_grad=True)
  loss = wp.zeros(1, dtype=float, requires_grad=True)
  tape = wp.Tape()
  with tape:
    traj = diffsim.rollout(cartpole, ctrl, qpos0=[0.0, 0.4])
    wp.launch(_tip_release_states, dim=n, inputs=[traj.sensordata, nstep], outputs=[x0, v0])
    x, _ = diffsim.kernels.ballistic(x0, v0, nstep=nflight, dt=dt_flight, gravity=g)
    wp.launch(_landing_loss, dim=n, inputs=[x, nflight, wp.vec3(*target)], outputs=[loss])
  tape.backward(loss)
  grad = ctrl.grad.numpy()[0, :, 0]

  def landing_error(u0):
    ref = mujoco_rollout(m, u0[:, None], qpos0=[0.0, 0.4])
    xk, vk = ref["sensordata"][nstep, 1:4], ref["sensordata"][nstep, 4:7]
    for _ in range(nflight):  # the same semi-implicit Euler as integrate_gravity
      vk = vk + g * dt_flight
      xk = xk + vk * dt_flight
    return float(np.sum((xk - target) ** 2))

  u0 = u[0, :, 0].astype(np.float64)
  h = 1e-6
  fd = np.array([(landing_error(u0 + h * e) - landing_error(u0 - h * e)) / (2 * h) for e in np.eye(nstep)])
  assert np.isclose(loss.numpy()[0] / n, landing_error(u0), rtol=1e-3)
  assert np.linalg.norm(fd) > 1e-3
  rel = np.linalg.norm(grad - fd) / np.linalg.norm(fd)
  assert rel < TOL, f"relative error {rel:.2e}"


def test_more_parameter_fields(cartpole):
  """Inertia, center of mass, stiffness, armature and actuator gain, each against MuJoCo C."""
  rng = np.random.default_rng(3)
  params = [diffsim.Param("body_inertia", "pole"), diffsim.Param("body_ipos", "pole", components=[2]),
            diffsim.Param("jnt_stiffness", "hinge"), diffsim.Param("dof_armature", "slider"),
            diffsim.Param("actuator_gainprm", "push")]
  for p in params:
    p.bind(cartpole)
  params[2].assign([0.5])  # a spring on the hinge (0 in the MJCF)
  params[3].assign([0.05])
  res = check_gradients(cartpole, 0.5 * rng.standard_normal((60, 1)), qpos0=[0.1, 0.3], params=params,
                        wrt=("params",))
  # measured: 4e-5 (inertia, ipos, stiffness), 1.2e-4 (gain); the slider armature 3.5e-3 (float32 set_const)
  _assert_close(res, {"*": 1e-3, "dof_armature:slider": TOL})


def _mujoco_tangents(mjm, params, theta, ctrl, qpos0, qvel0, direction, delta=1e-6):
  """Central differences of a float64 MuJoCo C rollout along `direction` = (theta `(nparam,)`,
  initial state `(2 nv,)`, tangent space): `(dx (nstep + 1, 2 nv), ds (nstep + 1, ns))`."""
  from diffsim.gradcheck import set_mjmodel_params

  dth, dx0 = direction
  out = []
  for sign in (1.0, -1.0):
    m = copy.deepcopy(mjm)
    offs = np.cumsum([0] + [p.dim for p in params])
    set_mjmodel_params(m, {p: theta[o:o + p.dim] + sign * delta * dth[o:o + p.dim] for p, o in zip(params, offs)})
    q = qpos0.copy()
    mujoco.mj_integratePos(m, q, sign * delta * dx0[:m.nv], 1.0)
    out.append((m, mujoco_rollout(m, ctrl, qpos0=q, qvel0=qvel0 + sign * delta * dx0[m.nv:])))
  (m, p), (_, n) = out
  dq = np.zeros((ctrl.shape[0] + 1, m.nv))
  for k in range(ctrl.shape[0] + 1):
    mujoco.mj_differentiatePos(m, dq[k], 2 * delta, n["qpos"][k], p["qpos"][k])
  return np.concatenate([dq, (p["qvel"] - n["qvel"]) / (2 * delta)], 1), (p["sensordata"] - n["sensordata"]) / (2 * delta)


@pytest.mark.parametrize("central", [True, False], ids=["central", "forward"])
def test_forward_mode_tangents_match_mujoco(ball_free, central):
  """Forward mode (`Rollout(directions=)`): tangents of every state and sensor along directions that
  move a parameter (mass, the ball's damping) or the initial state (random, all joints, quaternions
  included), against central differences of float64 MuJoCo C rollouts.

  Checked as the tape gradients are: a random linear functional of every output, per direction
  (also with forward differences, as system identification's `jacobian="directional"` uses them);
  with central differences also the state tangent of every step.
  """
  m = ball_free.mjm
  rng = np.random.default_rng(1)
  nstep, nw = 60, ball_free.nworld
  qpos0 = np.tile(m.qpos0, (nw, 1))
  qpos0[:, 1:5] = np.array([0.9, 0.2, 0.3, 0.1]) / np.linalg.norm([0.9, 0.2, 0.3, 0.1])
  qvel0 = 0.5 * rng.standard_normal((nw, m.nv))
  qvel0[:, 7:10] = [1.0, 3.0, -2.0]
  ctrl = 0.3 * rng.standard_normal((nw, nstep, m.nu))
  params = [diffsim.Param("body_mass", "bob"), diffsim.Param("dof_damping", "ball")]
  nparam, nx, ndir = 4, 2 * m.nv, 6
  t0 = np.zeros((nw, nx, ndir), np.float32)
  t0[:, :, nparam:] = rng.standard_normal((nw, nx, 2))
  ro = diffsim.Rollout(ball_free, nstep, params=params, directions=ndir, central=central)
  assert ro.fd.nlane == 1 + (2 if central else 1) * ndir
  ro(wp.array(ctrl.astype(np.float32), dtype=float), qpos0=qpos0, qvel0=qvel0, linearize=True,
     tangent0=wp.array(t0, dtype=float))
  dX, dS = (a.numpy().astype(np.float64) for a in ro.tangents())
  theta = np.concatenate([p.numpy()[0] for p in params]).astype(np.float64)
  weights = rng.standard_normal((nx + m.nsensordata, nstep + 1))
  for w in range(nw):
    got, ref = np.zeros(ndir), np.zeros(ndir)
    for c in range(ndir):
      direction = (np.eye(nparam)[c] if c < nparam else np.zeros(nparam), t0[w, :, c].astype(np.float64))
      rx, rs = _mujoco_tangents(m, params, theta, ctrl[w].astype(np.float32).astype(np.float64), qpos0[w],
                                qvel0[w], direction)
      got[c] = np.sum(weights.T * np.concatenate([dX[w, :, :, c], dS[w, :, :, c]], 1))
      ref[c] = np.sum(weights.T * np.concatenate([rx, rs], 1))
      if central:
        err = np.linalg.norm(dX[w, :, :, c] - rx) / np.linalg.norm(rx)
        assert err < TOL, f"world {w}, direction {c}: state tangents, relative error {err:.2e}"
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert err < TOL, f"world {w}: linear functional of all tangents, relative error {err:.2e}"


def test_converged_solver_tolerance_keeps_the_gradient(so101):
  """`SolverSettings(tolerance=1e-12)` (opt-in; the lanes' default is 0) stops a lane once another solver
  iteration would not change its solution: on the SO-101, whose dry friction and servo limits make
  constraint rows every step, the same lane gradient (measured 3.9e-5 apart) for a fifth of the
  solver iterations (`benchmarks/results/tolerance_cpu.md`)."""
  assert diffsim.SolverSettings().tolerance is None
  assert so101.lane_tolerance == 0.0 and so101.lane_tolerance_array.numpy()[0] == 0.0
  # rollouts without lanes: the MJCF's 1e-8 as MJWarp runs it, floored at 1e-6
  assert so101.tolerance == float(so101.model.opt.tolerance.numpy()[0]) == np.float32(1e-6)
  tiny = diffsim.Scene.from_xml(so101.mjm, nworld=2, device=so101.device,
                                solver=diffsim.SolverSettings(tolerance=1e-12))
  assert float(tiny.model.opt.tolerance.numpy()[0]) == np.float32(1e-12)
  assert tiny.lane_tolerance == tiny.tolerance == 1e-12 and tiny.lane_tolerance_array is None

  def grad(scene, u):
    ctrl = wp.array(u, dtype=float, requires_grad=True, device=scene.device)
    tape = wp.Tape()
    with tape:
      traj = diffsim.rollout(scene, ctrl, gradient="finite_difference")
    tape.backward(grads={traj.qpos: wp.array(np.ones(traj.qpos.shape, np.float32), dtype=float, device=scene.device)})
    return ctrl.grad.numpy().astype(np.float64)

  rng = np.random.default_rng(0)
  u = (np.tile(0.3 * rng.standard_normal(so101.nu), (2, 30, 1)) + 0.05 * rng.standard_normal((2, 30, so101.nu)))
  g, g0 = grad(tiny, u.astype(np.float32)), grad(so101, u.astype(np.float32))
  assert np.linalg.norm(g - g0) < 5e-4 * np.linalg.norm(g0)
