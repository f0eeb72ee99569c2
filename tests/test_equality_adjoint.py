"""The analytic adjoint through connect and weld equality constraints and ball-joint limits (issue 26,
item 3; `diffsim/adjoint/equalities.py`, `ball_limits.py`): the replayed rows against MJWarp's,
gradients against float64 MuJoCo C and against the finite-difference lanes on the same check."""

import mujoco
import mujoco_warp as mjw
import numpy as np
import pytest
import warp as wp
from conftest import DEVICE

import diffsim
from diffsim.adjoint import analytic_coverage

NSTEP = 20

# A four-bar linkage of hinges closed by a body connect (crank, coupler, rocker), and a bob hanging
# from a world site by a site connect (body 2 the world).
FOUR_BAR = """
<mujoco model="four_bar">
  <option timestep="0.005"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <site name="hook" pos="1 0 1.2"/>
    <body name="crank" pos="0 0 1">
      <joint name="crank" axis="0 1 0" damping="0.01"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.15" size="0.02" mass="0.2"/>
      <body name="coupler" pos="0 0 0.15">
        <joint name="coupler" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.4 0 0.1" size="0.02" mass="0.3"/>
      </body>
    </body>
    <body name="rocker" pos="0.4 0 1">
      <joint name="rocker" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.25" size="0.02" mass="0.25"/>
    </body>
    <body name="bob" pos="1 0 1" euler="10 0 0">
      <freejoint/>
      <geom type="box" size="0.03 0.04 0.05" mass="0.3"/>
      <site name="pin" pos="0 0 0.2"/>
    </body>
  </worldbody>
  <equality>
    <connect body1="coupler" body2="rocker" anchor="0.4 0 0.1"/>
    <connect site1="pin" site2="hook"/>
  </equality>
  <actuator>
    <motor name="crank" joint="crank"/>
    <motor name="rocker" joint="rocker" gear="0.5"/>
  </actuator>
</mujoco>
"""

# An actuated hinge arm holding a payload welded to it (a free body, anchor off its centre, turned
# relative to the arm), and a free block welded by sites to the world with half the torque scale.
WELDED = """
<mujoco model="welded">
  <option timestep="0.005"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <site name="dock" pos="1.05 0 1" euler="0 0 20"/>
    <body name="arm" pos="0 0 1">
      <joint name="arm" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.5"/>
    </body>
    <body name="payload" pos="0.36 0 0.98" euler="0 30 10">
      <freejoint/>
      <geom type="box" size="0.04 0.03 0.02" mass="0.2"/>
    </body>
    <body name="block" pos="1 0 1">
      <freejoint/>
      <geom type="box" size="0.05 0.03 0.02" mass="0.4"/>
      <site name="latch" pos="0.05 0 0" euler="0 0 20"/>
    </body>
  </worldbody>
  <equality>
    <weld body1="payload" body2="arm" anchor="0.02 0 0"/>
    <weld site1="latch" site2="dock" torquescale="0.5"/>
  </equality>
  <actuator>
    <motor name="arm" joint="arm"/>
  </actuator>
</mujoco>
"""

# A stick hanging sideways from a limited ball joint (30 degrees), started 31 degrees down: gravity
# holds it against the limit (its row in the quadratic regime), two motors turn it.
BALL_LIMIT = """
<mujoco model="ball_limit">
  <compiler angle="degree"/>
  <option timestep="0.005"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="stick" pos="0 0 1">
      <joint name="ball" type="ball" range="0 30" damping="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.3"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="twist" joint="ball" gear="0 0 1"/>
    <motor name="tilt" joint="ball" gear="0 1 0"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def four_bar():
  return diffsim.Scene.from_xml(FOUR_BAR, nworld=2, device=DEVICE)


@pytest.fixture(scope="module")
def welded():
  return diffsim.Scene.from_xml(WELDED, nworld=2, device=DEVICE)


@pytest.fixture(scope="module")
def ball_limit():
  return diffsim.Scene.from_xml(BALL_LIMIT, nworld=2, device=DEVICE)


def _inputs(scene, seed):
  """Controls `(NSTEP, nu)`, initial `qpos` (None: the model's) and `qvel`."""
  rng = np.random.default_rng(seed)
  ctrl, qpos0, qvel0 = 0.3 * rng.standard_normal((NSTEP, scene.nu)), None, 0.3 * rng.standard_normal(scene.nv)
  if scene.mjm.njnt == 1:  # the ball joint, 31 degrees down, turning slowly
    half = np.radians(31) / 2
    qpos0 = np.array([np.cos(half), 0.0, np.sin(half), 0.0])
    ctrl, qvel0 = 0.05 * ctrl, 0.1 * qvel0
  return ctrl, qpos0, qvel0


def test_covered():
  for xml in (FOUR_BAR, WELDED, BALL_LIMIT):
    assert analytic_coverage(mujoco.MjModel.from_xml_string(xml)) is None
  m = mujoco.MjModel.from_xml_string(WELDED)
  # the rows read body_invweight0, which the adjoint differentiates for masses, not for body_ipos
  assert analytic_coverage(m, ["body_mass", "body_inertia"]) is None
  assert "body_ipos" in analytic_coverage(m, ["body_ipos"])


def test_masses_through_weld_rows(welded):
  """The payload's and the block's masses: the weld rows' softness reads their `body_invweight0`
  (`invweight.py`), the arm's inertia too. Measured: payload 2.0e-4, block 2.1e-5, arm 1.2e-5 (the
  same at C steps 1e-5 .. 1e-7); the lanes 7.8e-2, 9.8e-3, 1.5e-3."""
  ctrl, qpos0, qvel0 = _inputs(welded, 3)
  params = [diffsim.Param("body_mass", "payload"), diffsim.Param("body_mass", "block"),
            diffsim.Param("body_inertia", "arm")]
  res = diffsim.check_gradients(welded, ctrl, qpos0=qpos0, qvel0=qvel0, params=params, wrt=("params",),
                                gradient="analytic")
  print(res)
  assert res.max_rel_err < 1e-3, res


@pytest.mark.parametrize("name", ["four_bar", "welded"])
def test_rows_equal_mjwarp(name, request):
  """The replayed rows' forces `J^T f` equal MJWarp's `qfrc_constraint` at MJWarp's acceleration. MJWarp
  builds the rows from the `cvel` and `cdof_dot` its Data holds (the previous step's); a `forward`
  first makes them the state's own, which the replay (and MuJoCo C) uses."""
  scene = request.getfixturevalue(name)
  ctrl, _, qvel0 = _inputs(scene, 1)
  ctrl = ctrl[:1]
  n = scene.nworld
  ro = diffsim.Rollout(scene, 1, gradient="analytic")
  u = wp.array(np.tile(ctrl.astype(np.float32), (n, 1, 1)), dtype=float, device=scene.device)
  traj = ro(u, qvel0=qvel0.astype(np.float32))
  d = mjw.put_data(scene.mjm, mujoco.MjData(scene.mjm), nworld=n)
  d.qpos.assign(traj.qpos.numpy()[:, 0])
  d.qvel.assign(traj.qvel.numpy()[:, 0])
  d.ctrl.assign(u.numpy()[:, 0])
  mjw.forward(scene.model, d)
  mjw.forward(scene.model, d)
  qacc = wp.array(d.qacc.numpy()[:, None], dtype=float, device=scene.device)
  ro.adjoint.rebuild()
  ro.adjoint.replay(traj, qacc, 0, True)
  v = {k: a.numpy() for k, a in ro.adjoint.values.items()}
  # MJWarp's rows: the equality rows, in equality order
  nefc = d.nefc.numpy()
  for w in range(n):
    rows = [i for i in np.argsort(d.efc.id.numpy()[w, :nefc[w]], kind="stable")
            if d.efc.type.numpy()[w, i] == int(mujoco.mjtConstraint.mjCNSTR_EQUALITY)]
    J = d.efc.J.numpy()[w, rows, :scene.nv]
    np.testing.assert_allclose(v["eq_J"][w], J, rtol=0, atol=1e-6 * np.abs(J).max())
    np.testing.assert_allclose(v["eq_pos"][w], d.efc.pos.numpy()[w, rows], rtol=0, atol=1e-6)
    np.testing.assert_allclose(v["eq_D"][w], d.efc.D.numpy()[w, rows], rtol=1e-5)
    aref = d.efc.aref.numpy()[w, rows]
    np.testing.assert_allclose(v["eq_aref"][w], aref, rtol=0, atol=2e-5 * np.abs(aref).max())
    # the forces `-D (J a - aref)` cancel digits (|J a - aref| << |aref|): float32 rounding of `aref` and
    # `J a`, times D
    want = d.qfrc_constraint.numpy()[w]
    assert np.abs(want).max() > 0.1  # the rows were there to check
    tol = 2e-5 * np.abs(want).max() + 1e-6 * np.abs(J).max() * np.abs(d.efc.D.numpy()[w, rows] * aref).sum()
    np.testing.assert_allclose(v["qfrc_constraint"][w], want, rtol=0, atol=tol)
    # the step's residual at MJWarp's acceleration (the same rounding)
    r = v["tau_e"][w] + v["damp"][w] - v["force"][w]
    assert np.abs(r).max() < 1e-4 * max(np.abs(v["force"][w]).max(), 1.0) + tol


def test_ball_limit_rows_equal_mjwarp(ball_limit):
  """The replayed limit row's force equals MJWarp's `qfrc_constraint` at MJWarp's acceleration."""
  scene, n = ball_limit, ball_limit.nworld
  ctrl, qpos0, qvel0 = _inputs(scene, 1)
  u = wp.array(np.tile(ctrl[:1].astype(np.float32), (n, 1, 1)), dtype=float, device=scene.device)
  ro = diffsim.Rollout(scene, 1, gradient="analytic")
  traj = ro(u, qpos0=qpos0.astype(np.float32), qvel0=qvel0.astype(np.float32))
  d = mjw.put_data(scene.mjm, mujoco.MjData(scene.mjm), nworld=n)
  d.qpos.assign(traj.qpos.numpy()[:, 0])
  d.qvel.assign(traj.qvel.numpy()[:, 0])
  d.ctrl.assign(u.numpy()[:, 0])
  mjw.forward(scene.model, d)
  quadratic = int(mujoco.mjtConstraintState.mjCNSTRSTATE_QUADRATIC)
  assert (d.nefc.numpy() == 1).all() and (d.efc.state.numpy()[:, 0] == quadratic).all()  # one row, quadratic
  ro.adjoint.rebuild()
  ro.adjoint.replay(traj, wp.array(d.qacc.numpy()[:, None], dtype=float, device=scene.device), 0, True)
  want = d.qfrc_constraint.numpy()
  assert np.abs(want).max() > 0.1
  got = ro.adjoint.values["qfrc_constraint"].numpy()
  np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("name", ["four_bar", "welded", "ball_limit"])
def test_gradients(name, request):
  """Against float64 MuJoCo C, every world: within 1e-3 and no worse than the lanes on the same check."""
  scene = request.getfixturevalue(name)
  ctrl, qpos0, qvel0 = _inputs(scene, 2)
  ana = diffsim.check_gradients(scene, ctrl, qpos0=qpos0, qvel0=qvel0, gradient="analytic")
  fd = diffsim.check_gradients(scene, ctrl, qpos0=qpos0, qvel0=qvel0, gradient="finite_difference")
  print("analytic:", ana)
  print("lanes:", fd)
  for k, err in ana.rel_err.items():
    assert err < 1e-3 and err <= fd.rel_err[k], (k, err, fd.rel_err[k])


def test_sparse_rows_equal_mjwarp():
  """nv > 32, where MJWarp builds sparse rows: those read the `body_invweight0` of a jointless body's
  weld root (the connect's and weld's body `tip`, welded to `arm`), which differs from its own."""
  chain = "".join(f'<body pos="{0.1 * i} 1 1"><joint axis="0 1 0"/><geom size="0.02" mass="0.1"/></body>'
                  for i in range(34))
  xml = f"""<mujoco><option timestep="0.005"/><default><geom contype="0" conaffinity="0"/></default><worldbody>{chain}
    <body name="arm" pos="0 0 1"><joint axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.3"/>
      <body name="tip" pos="0.3 0 0"><geom size="0.03" mass="0.2"/><site name="s" pos="0.05 0 0"/></body>
    </body>
    <body name="b" pos="0.35 0 1.2"><freejoint/><geom type="box" size="0.03 0.03 0.03" mass="0.3"/>
      <site name="t" pos="0 0 -0.2"/></body>
    </worldbody><equality><connect site1="s" site2="t"/><weld body1="tip" body2="b"/></equality></mujoco>"""
  scene = diffsim.Scene.from_xml(xml, nworld=1, device=DEVICE)
  m = scene.mjm
  tip = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "tip")
  assert scene.model.is_sparse and m.body_weldid[tip] != tip
  assert abs(m.body_invweight0[tip, 0] - m.body_invweight0[m.body_weldid[tip], 0]) > 0.1
  ro = diffsim.Rollout(scene, 1, gradient="analytic")
  qvel0 = 0.3 * np.random.default_rng(0).standard_normal(scene.nv).astype(np.float32)
  traj = ro(wp.zeros((1, 1, 0), dtype=float, device=scene.device), qvel0=qvel0)
  d = mjw.put_data(m, mujoco.MjData(m), nworld=1)
  d.qpos.assign(traj.qpos.numpy()[:, 0])
  d.qvel.assign(traj.qvel.numpy()[:, 0])
  mjw.forward(scene.model, d)
  mjw.forward(scene.model, d)
  ro.adjoint.rebuild()
  ro.adjoint.replay(traj, wp.array(d.qacc.numpy()[:, None], dtype=float, device=scene.device), 0, True)
  nefc = d.nefc.numpy()[0]
  v = ro.adjoint.values
  np.testing.assert_allclose(v["eq_D"].numpy()[0], d.efc.D.numpy()[0, :nefc], rtol=1e-5)
  aref = d.efc.aref.numpy()[0, :nefc]
  np.testing.assert_allclose(v["eq_aref"].numpy()[0], aref, rtol=0, atol=2e-5 * np.abs(aref).max())
  want = d.qfrc_constraint.numpy()[0]
  np.testing.assert_allclose(v["qfrc_constraint"].numpy()[0], want, rtol=0, atol=1e-5 * np.abs(want).max())
