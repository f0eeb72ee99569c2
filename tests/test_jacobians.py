"""The analytic step Jacobians (`adjoint.AnalyticJacobian`, issue 35) against float64 MuJoCo C, every
world and step: `[A B]` and `[C D]` against `mjd_transitionFD` at the rollout's own states, the
parameter columns against central differences of `mj_step` in float64, and both beside the lanes.
Steps where C's own difference straddles a kink (a friction or cone row changing zone within 1e-6:
its derivative at eps 1e-6 and 1e-7 differ) are not references; at most a quarter may be such.

The bar: within 1e-4 of C's (relative to the block's largest entry) wherever the lanes are within
1e-3; the rows of contacts (pyramidal and elliptic cones), joint and tendon limits, tendon friction
and equalities are all among these models' steps.
"""

import copy

import mujoco
import numpy as np
import pytest
import warp as wp
from conftest import DEVICE
from test_contact_adjoint import CONTACT_ZOO
from test_equality_adjoint import FOUR_BAR
from test_tendon_adjoint import FINGER, _settled_finger

import diffsim
import models

TOL = 1e-4  # the bar, relative to the block's largest entry
LANES_CLEAN = 1e-3  # steps where the lanes are this close to C: no switch within a difference step
REF_STABLE = 2e-5  # C's derivative at eps 1e-6 and 1e-7 this close: no kink (row switch) within the step


def _c_blocks(m: mujoco.MjModel, qpos, qvel, act, ctrl, params) -> tuple[np.ndarray, np.ndarray]:
  """`[A B P]` and `[C D Q]` of MuJoCo C in float64 at one state: `mjd_transitionFD` (eps 1e-6,
  centered) and central differences of `mj_step` in each parameter `(field, index, h)`; and whether
  `[A B]` is the same at eps 1e-7 (`REF_STABLE`)."""

  def data(model):
    d = mujoco.MjData(model)
    d.qpos[:], d.qvel[:], d.ctrl[:] = qpos, qvel, ctrl
    if m.na:
      d.act[:] = act
    return d

  d = data(m)
  nx = 2 * m.nv + m.na
  A, B = np.zeros((nx, nx)), np.zeros((nx, m.nu))
  C, D = np.zeros((m.nsensordata, nx)), np.zeros((m.nsensordata, m.nu))
  mujoco.mjd_transitionFD(m, d, 1e-6, True, A, B, C, D)
  # a reference is a derivative only where a 10x finer difference agrees (no kink within the step)
  A2, B2 = np.zeros_like(A), np.zeros_like(B)
  mujoco.mjd_transitionFD(m, d, 1e-7, True, A2, B2, None, None)
  stable = np.abs(np.concatenate([A - A2, B - B2], 1)).max() <= REF_STABLE * np.abs(np.concatenate([A, B], 1)).max()
  mujoco.mj_step(m, d)
  q_next = d.qpos.copy()
  P, Q = np.zeros((nx, len(params))), np.zeros((m.nsensordata, len(params)))
  for c, (field, index, h) in enumerate(params):
    outs = []
    for sign in (1.0, -1.0):
      mc = copy.copy(m)
      getattr(mc, field).flat[index] += sign * h
      mujoco.mj_setConst(mc, mujoco.MjData(mc))  # body_invweight0 and the like, as diffsim's rows see them
      dc = data(mc)
      mujoco.mj_forward(mc, dc)
      s = dc.sensordata.copy()
      mujoco.mj_step(mc, dc)
      dq = np.zeros(m.nv)
      mujoco.mj_differentiatePos(m, dq, 1.0, q_next, dc.qpos)
      outs.append((np.concatenate([dq, dc.qvel, dc.act]), s))
    P[:, c] = (outs[0][0] - outs[1][0]) / (2 * h)
    Q[:, c] = (outs[0][1] - outs[1][1]) / (2 * h)
  return np.concatenate([A, B, P], 1), np.concatenate([C, D, Q], 1), stable


def _compare(scene, nstep, *, ctrl, qpos0=None, qvel0=None, params=(), c_params=()):
  """Largest relative errors of the analytic and lane Jacobians against C over every world and
  step, on the steps where the lanes are clean; returns (analytic, lanes, clean steps, steps)."""
  m = scene.mjm
  u = wp.array(np.asarray(ctrl, np.float32), dtype=float, device=scene.device)
  out = {}
  for how in ("analytic", "finite_difference"):
    ro = diffsim.Rollout(scene, nstep, params=list(params), jacobian=how)
    assert ro.jacobian == how, ro.jacobian_reason
    traj = ro(u, qpos0=qpos0, qvel0=qvel0, linearize=True)
    out[how] = [a.numpy().astype(np.float64) for a in ro.jacobians()]
    states = traj.numpy()
  nx, nu = scene.nx, scene.nu
  keep = np.r_[0:nx + nu, nx + nu + np.arange(len(c_params))]
  worst = {"analytic": 0.0, "finite_difference": 0.0}
  clean, worst_all, unstable = 0, 0.0, 0
  for w in range(scene.nworld):
    for k in range(nstep):
      ref, sref, stable = _c_blocks(m, states["qpos"][w, k], states["qvel"][w, k], states["act"][w, k],
                            np.asarray(ctrl)[w, k], c_params)
      err = {}
      for how, (J, S) in out.items():
        e = np.abs(J[w, k][:, keep] - ref).max() / np.abs(ref).max()
        if m.nsensordata:
          e = max(e, np.abs(S[w, k][:, keep] - sref).max() / max(np.abs(sref).max(), 1e-9))
        err[how] = e
      if not stable:
        unstable += 1
        continue
      worst_all = max(worst_all, err["analytic"])
      if err["finite_difference"] > LANES_CLEAN:
        continue
      clean += 1
      for how in err:
        worst[how] = max(worst[how], err[how])
  print(f"{m.nv} dofs: analytic {worst['analytic']:.2e}, lanes {worst['finite_difference']:.2e} on the {clean} of "
        f"{scene.nworld * nstep} world-steps where the lanes are clean; analytic {worst_all:.2e} on all "
        f"{scene.nworld * nstep - unstable} where C's own reference is a derivative")
  assert unstable <= scene.nworld * nstep // 4, f"C's reference straddles a kink at {unstable} world-steps"
  return worst["analytic"], worst["finite_difference"], clean, scene.nworld * nstep, worst_all


def _ctrl(scene, nstep, seed, scale=0.3):
  rng = np.random.default_rng(seed)
  return scale * rng.standard_normal((scene.nworld, nstep, scene.nu))


def test_smooth_models(cartpole, ball_free):
  """Hinges, a slide, a ball joint and a spinning free body, with mass and damping columns."""
  a, _, clean, n, _ = _compare(cartpole, 8, ctrl=_ctrl(cartpole, 8, 0), qpos0=[0.1, 0.3],
                            params=[diffsim.Param("body_mass", "pole"), diffsim.Param("dof_damping", "hinge")],
                            c_params=[("body_mass", cartpole.mjm.body("pole").id, 1e-4),
                                      ("dof_damping", cartpole.mjm.joint("hinge").dofadr[0], 1e-4)])
  assert clean == n and a < TOL  # measured 1e-7
  q = ball_free.mjm.qpos0.copy()
  q[1:5] = np.array([0.9, 0.2, 0.3, 0.1]) / np.linalg.norm([0.9, 0.2, 0.3, 0.1])
  v = np.zeros(ball_free.nv)
  v[7:10] = [1.0, 3.0, -2.0]
  a, _, clean, n, _ = _compare(ball_free, 6, ctrl=_ctrl(ball_free, 6, 1), qpos0=q, qvel0=v,
                            params=[diffsim.Param("body_mass", "bob")],
                            c_params=[("body_mass", ball_free.mjm.body("bob").id, 1e-4)])
  assert clean == n and a < TOL  # measured 9e-7


def test_contacts_pyramidal_and_elliptic():
  """The contact zoo (box, spinning ball, capsule on a table, cylinder, marble on a dome) with
  pyramidal and with elliptic cones, settled so every contact carries load."""
  for cone in ("", ' cone="elliptic" impratio="1.5"'):
    xml = CONTACT_ZOO.replace('<option timestep="0.005"/>', f'<option timestep="0.005"{cone}/>')
    scene = diffsim.Scene.from_xml(xml, nworld=2, device=DEVICE)
    m = scene.mjm
    d = mujoco.MjData(m)
    for _ in range(100):
      mujoco.mj_step(m, d)
    assert d.ncon >= 8
    a, lanes, clean, n, a_all = _compare(scene, 4, ctrl=_ctrl(scene, 4, 2, 0.5), qpos0=d.qpos.copy(), qvel0=d.qvel.copy(),
                                         params=[diffsim.Param("body_mass", "box")],
                                         c_params=[("body_mass", m.body("box").id, 1e-4)])
    assert a_all < TOL, (cone, a, lanes, clean)


def test_tendon_limit_friction_and_contact():
  """The tendon finger pressed on its pad: tendon limit and friction rows and a contact."""
  scene = diffsim.Scene.from_xml(FINGER, nworld=2, device=DEVICE)
  qpos, qvel = _settled_finger(scene.mjm)
  ctrl = np.tile([3.0, 0.06], (2, 4, 1)) + 0.01 * np.random.default_rng(3).standard_normal((2, 4, 2))
  a, lanes, clean, n, a_all = _compare(scene, 4, ctrl=ctrl, qpos0=qpos, qvel0=qvel)
  assert a_all < TOL, (a, lanes, clean)


def test_limits_friction_sensors_and_inertia():
  """Joint limits and dof friction (tests/models.py's LIMITED, driven onto its limits), joint position
  and velocity sensors (selection rows) beside a frame sensor (a sweep), and mass and armature
  columns, which reach the rows' softness through invweight0 (formed once per rollout)."""
  xml = models.LIMITED.replace("</actuator>", """</actuator>
  <sensor><jointpos joint="swing"/><jointvel joint="slide"/><framepos objtype="body" objname="slider"/></sensor>""")
  scene = diffsim.Scene.from_xml(xml, nworld=2, device=DEVICE)
  m = scene.mjm
  params = [diffsim.Param("body_mass", "slider"), diffsim.Param("dof_armature", "swing")]
  c_params = [("body_mass", m.body("slider").id, 1e-4), ("dof_armature", m.joint("swing").dofadr[0], 1e-5)]
  ctrl = np.tile([[[1.5, 2.5]]], (2, 8, 1)) + 0.2 * np.random.default_rng(6).standard_normal((2, 8, 2))
  qpos0 = np.array([0.301, 0.1005])  # both joints just past their upper limits, pushed on
  assert diffsim.Rollout(scene, 8, params=params)._linearizer._swept == [2, 3, 4]  # the frame sensor's rows
  a, lanes, clean, n, a_all = _compare(scene, 8, ctrl=ctrl, qpos0=qpos0, params=params, c_params=c_params)
  d = mujoco.MjData(m)
  d.qpos[:] = qpos0
  limited = 0
  for k in range(8):  # world 0 in C: steps with a limit row
    d.ctrl[:] = ctrl[0, k]
    mujoco.mj_step(m, d)
    limited += mujoco.mjtConstraint.mjCNSTR_LIMIT_JOINT in d.efc_type[:d.nefc].tolist()
  assert limited >= 4, limited
  assert a_all < TOL, (a, lanes, clean)


def test_equality_loop():
  """A four-bar closed by a connect equality."""
  scene = diffsim.Scene.from_xml(FOUR_BAR, nworld=2, device=DEVICE)
  a, lanes, clean, n, a_all = _compare(scene, 6, ctrl=_ctrl(scene, 6, 4), qvel0=0.3 * np.ones(scene.nv))
  assert a_all < TOL, (a, lanes, clean)


def test_rollout_choice_and_fallback(cartpole):
  """`jacobian="auto"` takes the analytic step where it covers the model and says so; `"analytic"`
  on an uncovered model is an error naming the feature, and `"auto"` falls back to the lanes with
  that reason."""
  ro = diffsim.Rollout(cartpole, 2)
  assert ro.jacobian == "analytic" and ro.nlane == 1
  ro = diffsim.Rollout(cartpole, 2, jacobian="finite_difference")
  assert ro.jacobian == "finite_difference" and ro.nlane == ro.fd.nlane > 1
  xml = """<mujoco><worldbody><body><joint name="j" type="hinge" range="-1 1" limited="true"/>
    <geom size="0.1" mass="1"/></body></worldbody><actuator><motor joint="j"/></actuator>
    <sensor><jointlimitfrc joint="j"/></sensor></mujoco>"""
  scene = diffsim.Scene.from_xml(xml, nworld=1, device=DEVICE)
  with pytest.raises(ValueError, match="jacobian='analytic'.*jointlimitfrc"):
    diffsim.Rollout(scene, 2, jacobian="analytic")
  ro = diffsim.Rollout(scene, 2)
  assert ro.jacobian == "finite_difference" and "jointlimitfrc" in ro.jacobian_reason
  with pytest.raises(ValueError, match="jacobian must be one of"):
    diffsim.Rollout(cartpole, 2, jacobian="lanes")


def test_acceleration_sensor_rows():
  """Accelerometers, touch and force-torque sensors (`tests/test_acc_sensors.py`'s box and arm):
  their rows are sweeps through the step's implicit function theorem."""
  from test_acc_sensors import IMU_ACC, _inputs

  scene = diffsim.Scene.from_xml(IMU_ACC, nworld=2, device=DEVICE)
  ctrl, qpos0, qvel0 = _inputs(scene.mjm)
  a, lanes, clean, n, a_all = _compare(scene, 4, ctrl=np.tile(ctrl[:4], (2, 1, 1)), qpos0=qpos0, qvel0=qvel0)
  assert a_all < TOL, (a, lanes, clean)


def _jacobians(scene, nstep, ctrl, *, batch_worlds, **kw):
  from diffsim.adjoint import jacobian

  saved, jacobian.BATCH_WORLDS = jacobian.BATCH_WORLDS, batch_worlds
  try:
    ro = diffsim.Rollout(scene, nstep, jacobian="analytic", **{k: v for k, v in kw.items() if k == "params"})
  finally:
    jacobian.BATCH_WORLDS = saved
  u = wp.array(np.asarray(ctrl, np.float32), dtype=float, device=scene.device)
  ro(u, qpos0=kw.get("qpos0"), qvel0=kw.get("qvel0"), linearize=True)
  return ro._linearizer.copies, [a.numpy().astype(np.float64) for a in ro.jacobians()]


def test_tiled_sweeps_match_one_sweep_per_row():
  """A step's sweeps as one reverse pass of a tiled replay give the one-sweep-per-row Jacobians:
  limits with sensors (a selection and a frame sensor) and mass and armature columns (invweight0),
  a connect equality, acceleration sensors (the IMU arm with contacts off), and the IMU arm's box
  sticking on the floor with pyramidal and elliptic cones (its contacts collided once and tiled to
  every copy, `ContactRows.tile`; touch, force and torque sensors read them)."""
  from test_acc_sensors import IMU_ACC, _inputs

  from diffsim.adjoint.jacobian import sweep_count

  limited = diffsim.Scene.from_xml(models.LIMITED.replace("</actuator>", """</actuator>
    <sensor><jointpos joint="swing"/><framepos objtype="body" objname="slider"/></sensor>"""), nworld=2,
                                   device=DEVICE)
  four_bar = diffsim.Scene.from_xml(FOUR_BAR, nworld=1, device=DEVICE)
  imu = diffsim.Scene.from_xml(IMU_ACC.replace('<option timestep="0.005"/>', '<option timestep="0.005"><flag contact="disable"/></option>'),
                               nworld=1, device=DEVICE)
  assert imu.mjm.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT
  ctrl, q_imu, v_imu = _inputs(imu.mjm)
  touching = [diffsim.Scene.from_xml(IMU_ACC.replace('<option timestep="0.005"/>', f'<option timestep="0.005"{cone}/>'),
                                     nworld=1, device=DEVICE) for cone in ("", ' cone="elliptic"')]
  cases = [
    (limited, np.tile([[[1.5, 2.5]]], (2, 3, 1)), dict(qpos0=np.array([0.301, 0.1005]), params=[
      diffsim.Param("body_mass", "slider"), diffsim.Param("dof_armature", "swing")])),
    (four_bar, _ctrl(four_bar, 3, 4), dict(qvel0=0.3 * np.ones(four_bar.nv))),
    (imu, ctrl[None, :3], dict(qpos0=q_imu, qvel0=v_imu)),
  ] + [(t, ctrl[None, :3], dict(qpos0=q_imu, qvel0=v_imu, params=[diffsim.Param("body_mass", "box")]))
       for t in touching]
  for scene, u, kw in cases:
    one, (J1, S1) = _jacobians(scene, 3, u, batch_worlds=1, **kw)
    alls, (J2, S2) = _jacobians(scene, 3, u, batch_worlds=1024, **kw)
    assert one == 1 and alls == sweep_count(scene.mjm) > 1, (one, alls)
    assert np.abs(J2 - J1).max() <= 1e-6 * np.abs(J1).max()  # measured: bit for bit
    if scene.nsensordata:
      assert np.abs(S2 - S1).max() <= 1e-6 * np.abs(S1).max()
