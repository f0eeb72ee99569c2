"""The analytic adjoint through contacts (issue 26, `diffsim/adjoint/contacts.py`) against float64
MuJoCo C: primitive pairs, pyramidal cones of every `condim`, mesh contacts (the SO-101's
self-collision, the pick scene's cube), and what it refuses.

The contact set of each step is the forward's, frozen: a gradient is the derivative of the step with
that set, which is MuJoCo's derivative wherever no contact appears or vanishes within a
finite-difference step (the references here are checked for that: a coarser step agrees).
"""

import os

import mujoco
import numpy as np
import pytest
import warp as wp
from conftest import DEVICE

import diffsim
from diffsim.adjoint.coverage import analytic_coverage
from diffsim.gradcheck import check_gradients

NSTEP = 20

# Five independent objects on one floor, one compile: a box sliding (4 box-plane contacts, condim 3),
# a ball spinning and rolling with torsional and rolling friction (condim 6), a capsule lying on a
# table box (condim 4, box-capsule), a cylinder rolling on its side (plane-cylinder), a marble on a
# dome (sphere-sphere). The floor's friction is below every object's, which each contact takes (no
# tie of the max, where friction has no derivative). Mixed condims in one model (rows of different
# counts side by side) once hid a stale-row bug that no single-object model showed.
CONTACT_ZOO = """
<mujoco model="contact_zoo">
  <option timestep="0.005"/>
  <worldbody>
    <geom name="floor" type="plane" size="6 3 0.1" friction="0.3"/>
    <body name="box" pos="0 0 0.05">
      <freejoint name="box"/>
      <geom name="box" type="box" size="0.05 0.05 0.05" mass="1" friction="0.5"/>
    </body>
    <body name="ball" pos="1 0 0.05">
      <freejoint name="ball"/>
      <geom name="ball" type="sphere" size="0.05" mass="0.5" condim="6" friction="0.8 0.02 0.005"/>
    </body>
    <geom name="table" type="box" pos="2 0 0.05" size="0.2 0.2 0.05"/>
    <body name="capsule" pos="2 0 0.13">
      <freejoint name="capsule"/>
      <geom name="capsule" type="capsule" fromto="-0.08 0 0 0.08 0 0" size="0.03" mass="0.4" condim="4"
            friction="0.7 0.01"/>
    </body>
    <body name="cylinder" pos="3 0 0.05" euler="90 0 0">
      <freejoint name="cylinder"/>
      <geom name="cylinder" type="cylinder" size="0.05 0.1" mass="0.6" friction="1"/>
    </body>
    <geom name="dome" type="sphere" pos="4 0 0.1" size="0.1"/>
    <body name="marble" pos="4.01 0 0.25">
      <freejoint name="marble"/>
      <geom name="marble" type="sphere" size="0.05" mass="0.2"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push_box" joint="box" gear="1 0 0 0 0 0"/>
    <motor name="twist_ball" joint="ball" gear="0 0 0 0 0 0.05"/>
    <motor name="push_capsule" joint="capsule" gear="0 1 0 0 0 0"/>
    <motor name="push_cylinder" joint="cylinder" gear="1 0 0 0 0 0"/>
  </actuator>
  <sensor>
    <framepos name="box_pos" objtype="geom" objname="box"/>
    <framequat name="capsule_quat" objtype="body" objname="capsule"/>
  </sensor>
</mujoco>
"""
ZOO_DOFS = dict(box=slice(0, 6), ball=slice(6, 12), capsule=slice(12, 18), cylinder=slice(18, 24),
                marble=slice(24, 30))


def _rel(a: np.ndarray, b: np.ndarray) -> float:
  """Largest relative error over the checked worlds (leading axis)."""
  a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
  return float(np.max(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)))


def _zoo_errors(res) -> dict:
  """Each zoo object's error on its own dofs' columns (qpos0, qvel0) and, for the actuated ones, its
  control."""
  errs = {(name, k): _rel(res.tape[k][:, cols], res.fd[k][:, cols]) for name, cols in ZOO_DOFS.items()
          for k in ("qpos0", "qvel0")}
  for i, name in enumerate(("box", "ball", "capsule", "cylinder")):
    errs[name, "ctrl"] = _rel(res.tape["ctrl"][..., i], res.fd["ctrl"][..., i])
  return errs


@pytest.fixture(scope="module")
def zoo():
  return diffsim.Scene.from_xml(CONTACT_ZOO, nworld=2, device=DEVICE)


def _zoo_inputs(mjm):
  d = mujoco.MjData(mjm)
  for _ in range(200):  # settle on the floor and the table
    mujoco.mj_step(mjm, d)
  qpos0 = d.qpos.copy()
  qpos0[28:35] = [4.01, 0, 0.1 + np.sqrt(0.1499**2 - 0.01**2), 1, 0, 0, 0]  # 0.1 mm into the dome, 1 cm off its top
  qvel0 = np.zeros(mjm.nv)
  qvel0[[0, 6, 11, 13, 18, 22]] = [0.3, 0.3, 5.0, 0.2, 0.3, 6.0]  # slide, spin, slide, roll
  ctrl = np.array([8.0, 1.0, 3.0, 2.0]) + 0.5 * np.random.default_rng(0).standard_normal((NSTEP, 4))
  d.qpos[:], d.qvel[:] = qpos0, qvel0
  mujoco.mj_forward(mjm, d)
  pairs = {tuple(sorted((mjm.geom(c.geom1).name, mjm.geom(c.geom2).name))): int(c.dim) for c in d.contact[:d.ncon]}
  assert pairs == {("box", "floor"): 3, ("ball", "floor"): 6, ("capsule", "table"): 4, ("cylinder", "floor"): 3,
                   ("dome", "marble"): 3}, pairs
  return ctrl, qpos0, qvel0


def _check_zoo(scene, bound: float) -> None:
  """Every zoo object's error (its own dofs' columns and actuator) below `bound` against float64 C,
  and the analytic adjoint at least 10x better than the lanes on the same check."""
  ctrl, qpos0, qvel0 = _zoo_inputs(scene.mjm)
  res = check_gradients(scene, ctrl, qpos0=qpos0, qvel0=qvel0, gradient="analytic")
  lanes = check_gradients(scene, ctrl, qpos0=qpos0, qvel0=qvel0, gradient="finite_difference")
  errs = _zoo_errors(res)
  print({k: f"{v:.1e}" for k, v in errs.items()})
  print("analytic:", res)
  print("lanes:", lanes)
  bad = {k: v for k, v in errs.items() if v > bound}
  assert not bad, bad
  for k in ("ctrl", "qpos0", "qvel0"):
    assert res.rel_err[k] < 0.1 * lanes.rel_err[k], (k, res.rel_err[k], lanes.rel_err[k])


def test_primitive_pairs_and_condims(zoo):
  """Each object's gradient against float64 C, and the analytic adjoint against the lanes.
  Measured (CPU): analytic 6e-7 (capsule) .. 4.4e-5 (box); the lanes 1.8e-4 .. 2.1e-2."""
  _check_zoo(zoo, 2e-4)


def test_elliptic_cones():
  """The zoo with elliptic cones (`cones.py`: the Newton solver's zones and the cone's Hessian block;
  the spinning ball's condim-6 rows, the box's corners, impratio 1.5). Measured: analytic 2.8e-5 (ctrl),
  2.0e-5 (qpos0), 1.2e-5 (qvel0), worst object 5.2e-5 (the ball's ctrl); the lanes 1.8e-3, 0.21, 4.8e-2.
  (At impratio 3 a box corner's contact switches within C's difference step: both methods read 1.0
  against that reference.)"""
  xml = CONTACT_ZOO.replace('<option timestep="0.005"/>', '<option timestep="0.005" cone="elliptic" impratio="1.5"/>')
  scene = diffsim.Scene.from_xml(xml, nworld=2, device=DEVICE)
  assert analytic_coverage(scene.mjm) is None
  _check_zoo(scene, 1e-3)


# Round pairs: a capsule lying across a bar (the crossing point slides along both), one lying along
# a log (parallel: a segment end on the other's side) and a pebble rolling onto a bar's side.
ROUND_PAIRS = """
<mujoco model="round_pairs">
  <option timestep="0.005"/>
  <worldbody>
    <geom name="bar" type="capsule" fromto="-0.3 0 0.2 0.3 0 0.2" size="0.03"/>
    <body name="cross" pos="0.05 0 0.2595" euler="0 0 70">
      <freejoint/>
      <geom name="cross" type="capsule" fromto="-0.15 0 0 0.15 0 0" size="0.03" mass="0.3"/>
    </body>
    <geom name="bar2" type="capsule" fromto="1 -0.3 0.2 1 0.3 0.2" size="0.03"/>
    <body name="pebble" pos="1.01 0.1 0.2795">
      <freejoint/>
      <geom name="pebble" type="sphere" size="0.05" mass="0.2"/>
    </body>
    <geom name="log" type="capsule" fromto="2 -0.3 0.2 2 0.3 0.2" size="0.03"/>
    <body name="rod" pos="2.005 0.1 0.2595">
      <freejoint/>
      <geom name="rod" type="capsule" fromto="0 -0.1 0 0 0.1 0" size="0.03" mass="0.2"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_round_pairs():
  """Capsule cores are segments: the core point of a capsule slides along its axis unless it is a
  segment end (`_ROUND` mode). The reference's step is 1e-7: a kink near the crossing makes C's
  central difference err in proportion to it there (the cross's qpos0: 1.1e-4 at 1e-6). Measured:
  cross 1.3e-5 (qpos0) / 6.1e-7 (qvel0), pebble 1.7e-5 / 1.7e-6, rod 6.5e-6 / 4.0e-5; the lanes
  1.0e-2 / 2.0e-4, 4.4e-3 / 5.2e-4, 1.0e-2 / 1.2e-1. With rigid core points (before) the rod, lying
  along the log, erred by 3.6."""
  m = mujoco.MjModel.from_xml_string(ROUND_PAIRS)
  scene = diffsim.Scene.from_xml(ROUND_PAIRS, nworld=2, device=DEVICE)
  qvel0 = 0.1 * np.random.default_rng(6).standard_normal(m.nv)
  res = check_gradients(scene, np.zeros((NSTEP, 0)), qvel0=qvel0, wrt=("qpos0", "qvel0"), gradient="analytic", h=1e-7)
  errs = {(name, k): _rel(res.tape[k][:, 6 * i:6 * i + 6], res.fd[k][:, 6 * i:6 * i + 6])
          for i, name in enumerate(("cross", "pebble", "rod")) for k in ("qpos0", "qvel0")}
  print({k: f"{v:.1e}" for k, v in errs.items()})
  bad = {k: v for k, v in errs.items() if v > 5e-4}
  assert not bad, bad


def test_geom_friction(zoo):
  """`geom_friction` as a parameter (issue 26): each contact's friction is its geoms' mixed value
  (the larger, or the higher priority's), differentiated through the pyramid edges and their
  impedance. Measured: ball 1.5e-6, cylinder 3.8e-6, table (under the capsule) 9.7e-6, box 2.9e-4
  (its four corners sliding); the lanes 2.9e-3, 8.0e-3, 3.4e-3, 5.3e-4."""
  ctrl, qpos0, qvel0 = _zoo_inputs(zoo.mjm)
  params = [diffsim.Param("geom_friction", "box", components=[0]), diffsim.Param("geom_friction", "ball"),
            diffsim.Param("geom_friction", "table", components=[0, 1]),
            diffsim.Param("geom_friction", "cylinder", components=[0])]
  res = check_gradients(zoo, ctrl, qpos0=qpos0, qvel0=qvel0, params=params, wrt=("params",), gradient="analytic")
  lanes = check_gradients(zoo, ctrl, qpos0=qpos0, qvel0=qvel0, params=params, wrt=("params",),
                          gradient="finite_difference")
  print("analytic:", res)
  print("lanes:", lanes)
  for k, err in res.rel_err.items():
    assert err < 1e-3 and err < lanes.rel_err[k], (k, err, lanes.rel_err[k])


def test_contact_softness_parameters(zoo):
  """`geom_solref` and `geom_solimp` as parameters (issue 26): each contact's are its geoms' mixed by
  `solmix` (`_contact_solparams`), differentiated through the rows' impedance, stiffness and damping.
  Measured: the box's solref 9.2e-5, the ball's solimp (dmin, dmax, width) 3.1e-5, the floor's
  timeconst (under every object) 1.6e-5; the lanes 6.1e-2, 5.7e-3, 3.3e-3."""
  ctrl, qpos0, qvel0 = _zoo_inputs(zoo.mjm)
  params = [diffsim.Param("geom_solref", "box"), diffsim.Param("geom_solimp", "ball", components=[0, 1, 2]),
            diffsim.Param("geom_solref", "floor", components=[0])]
  res = check_gradients(zoo, ctrl, qpos0=qpos0, qvel0=qvel0, params=params, wrt=("params",), gradient="analytic")
  lanes = check_gradients(zoo, ctrl, qpos0=qpos0, qvel0=qvel0, params=params, wrt=("params",),
                          gradient="finite_difference")
  print("analytic:", res)
  print("lanes:", lanes)
  for k, err in res.rel_err.items():
    assert err < 1e-3 and err < 0.1 * lanes.rel_err[k], (k, err, lanes.rel_err[k])


def test_inertial_parameters_through_invweight(zoo):
  """Masses and inertias in a model with contacts: besides the dynamics, they set every row's
  softness through `body_invweight0`, which `mj_setConst` derives from the mass matrix at `qpos0`
  (`invweight.py`). Measured: masses 5.8e-7 (ball) .. 7.5e-6 (box), the ball's inertia 3.1e-6; holding
  `body_invweight0` fixed instead erred by 4e-2 .. 0.2, the lanes by 2.2e-4 .. 1.3e-2."""
  ctrl, qpos0, qvel0 = _zoo_inputs(zoo.mjm)
  params = [diffsim.Param("body_mass", b) for b in ("box", "ball", "capsule", "cylinder")] + \
    [diffsim.Param("body_inertia", "ball")]
  res = check_gradients(zoo, ctrl, qpos0=qpos0, qvel0=qvel0, params=params, wrt=("params",), gradient="analytic")
  print(res)
  assert res.max_rel_err < 5e-5, res


def test_sticking_box(sliding_box):
  """Static friction: a settled box pushed below its friction limit (2 N against 4.9 N) stays put;
  the pyramid edges that hold it are all quadratic rows. Measured 4e-5."""
  m = sliding_box.mjm
  d = mujoco.MjData(m)
  for _ in range(400):
    mujoco.mj_step(m, d)
  u = 2.0 + 0.3 * np.random.default_rng(5).standard_normal((NSTEP, 1))
  res = check_gradients(sliding_box, u, qpos0=d.qpos.copy(), qvel0=d.qvel.copy(), wrt=("ctrl", "qvel0"),
                        gradient="analytic")
  print(res)
  assert res.max_rel_err < 1e-3, res


# The SO-101 (mesh links, convex collision) with its shoulder touching its lower arm: one contact
# (shoulder - lower_arm), and a pose with two.
SO101_TOUCHING = {"one": [0.27, -0.732, 1.568, 0.541, 0.109, 0.46], "two": [0.225, 1.238, 0.42, 1.369, 0.344, 0.319]}


@pytest.mark.parametrize("pose", sorted(SO101_TOUCHING))
def test_so101_self_collision(so101, pose):
  """Mesh-mesh contacts: the normal turns with the mesh whose polygon lies along it (here geom 2's:
  cosine 1.0 against geom 1's 0.97-0.999). Pose one: the other mesh's vertex on that face, rigid on
  its body. Pose two: MJWarp's clipping puts both contact points where an edge of the lower arm
  crosses the side planes of the shoulder's polygon; each slides along that edge
  (`_mesh_edge_points`). Measured (world 0, the pose held): pose one 3.6e-6 (ctrl), 2.0e-6 (qpos0),
  6.7e-7 (qvel0), the lanes 3.1e-3, 4.4e-4, 1.1e-4; pose two 7.5e-7, 2.4e-6, 4.9e-7, the lanes
  4.3e-3, 5.3e-3, 1.4e-3 (with the points rigid on the arm, as before: 3.5e-4, 7.0e-3, 8.1e-4).
  World 1 (inputs offset by 0.05) is left out: its contact comes and goes within the horizon, where
  neither method has a derivative."""
  m = so101.mjm
  q = np.array(SO101_TOUCHING[pose])
  d = mujoco.MjData(m)
  d.qpos[:] = q
  mujoco.mj_forward(m, d)
  assert d.ncon == {"one": 1, "two": 2}[pose]
  u = np.tile(q, (NSTEP, 1))  # hold the pose (position servos)
  res = check_gradients(so101, u, qpos0=q, gradient="analytic", worlds=[0])
  print(res)
  assert res.max_rel_err < 1e-4, res


def test_pick_scene_cube(request):
  """The shipped pick scene: the cube (a box) resting on the floor beside the SO-101, its geom sensors
  (`block_pos`, `block_quat`) in the checked functional. The scene's noslip solver is switched off:
  the adjoint does not cover it. Measured 2e-5; the lanes 1.5e-2."""
  spec = mujoco.MjSpec.from_file(diffsim.asset_path("so101", "pick_scene.xml"))
  spec.option.noslip_iterations = 0
  m = spec.compile()
  scene = diffsim.Scene.from_xml(m, nworld=2, device=DEVICE)
  d = mujoco.MjData(m)
  for _ in range(200):
    mujoco.mj_step(m, d)
  assert d.ncon >= 4  # the cube's corners on the floor
  q = d.qpos.copy()
  u = np.tile(q[:m.nu], (NSTEP, 1)) + 0.05 * np.random.default_rng(4).standard_normal((NSTEP, m.nu))
  res = check_gradients(scene, u, qpos0=q, qvel0=d.qvel.copy(), gradient="analytic")
  print(res)
  assert res.max_rel_err < 2e-4, res


# A box dropped tilted and spinning: its corners land at steps 13, 18, 19 and 20 of 40.
DROPPED_BOX = """
<mujoco model="dropped_box">
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="2 2 .1" friction="0.6"/>
    <body name="box" pos="0 0 0.08" euler="10 20 0">
      <freejoint/>
      <geom type="box" size="0.05 0.04 0.03" mass="0.4" friction="0.6"/>
    </body>
  </worldbody>
  <sensor>
    <framepos name="box_pos" objtype="body" objname="box"/>
  </sensor>
</mujoco>
"""


def test_contacts_made_mid_horizon():
  """Making contact has no derivative inside the step where it happens; the adjoint differentiates
  each step with the forward's contact set, which is float64 C's own derivative wherever an
  infinitesimal change of the inputs leaves every contact's first step where it is. The lanes'
  differences (qpos steps of 1e-4) can move it, or cross a landing corner's switch: measured
  analytic 7.8e-5, the lanes 8.7e-4."""
  m = mujoco.MjModel.from_xml_string(DROPPED_BOX)
  d = mujoco.MjData(m)
  qvel0 = np.array([0.3, 0.1, -0.2, 1.0, -2.0, 0.5])
  d.qvel[:] = qvel0
  ncon = []
  for _ in range(40):
    mujoco.mj_step(m, d)
    ncon.append(d.ncon)
  assert ncon[0] == 0 and ncon[-1] == 4 and ncon.index(4) > ncon.index(1) + 3  # corners land one by one
  scene = diffsim.Scene.from_xml(DROPPED_BOX, nworld=2, device=DEVICE)
  res = check_gradients(scene, np.zeros((40, 0)), qvel0=qvel0, wrt=("qpos0", "qvel0"), gradient="analytic")
  print(res)
  assert res.max_rel_err < 5e-4, res


def test_mjwarp_mug():
  """MJWarp's mug scene (`mug/mug.xml`: the mug's collision geoms are a cylinder base and boxes; its
  mesh is visual only), tilted 4 degrees onto its base's rim and rocking and spinning: the contact
  point slides around the rim as the mug turns (`_rim_direction`). Measured: analytic 7.2e-5 (qpos0),
  6.4e-5 (qvel0), the lanes 3.8e-3, 4.5e-3 (the analytic was 1.9e-3 before the rim direction kept
  float32's accuracy near upright). From the keyframe (standing flat, its rim at distance 0) MJWarp's
  own step departs from C's (README's sweep), so that start checks nothing of the adjoint."""
  import mujoco_warp as mjw

  path = os.path.join(os.path.dirname(mjw.__file__), "test_data", "mug", "mug.xml")
  scene = diffsim.Scene.from_xml(path, nworld=2, device=DEVICE)
  m = scene.mjm
  d = mujoco.MjData(m)
  mujoco.mju_euler2Quat(d.qpos[3:7], np.deg2rad([4.0, 0.0, 0.0]), "xyz")
  mujoco.mj_kinematics(m, d)
  mujoco.mj_collision(m, d)
  d.qpos[2] -= d.contact.dist[:d.ncon].min() + 1e-4  # the rim's lowest point 0.1 mm into the table
  qvel0 = np.array([0.05, -0.02, 0.0, 0.5, 0.2, -0.3])
  res = check_gradients(scene, np.zeros((NSTEP, 0)), qpos0=d.qpos.copy(), qvel0=qvel0, gradient="analytic")
  lanes = check_gradients(scene, np.zeros((NSTEP, 0)), qpos0=d.qpos.copy(), qvel0=qvel0,
                          gradient="finite_difference")
  print("analytic:", res)
  print("lanes:", lanes)
  for k in ("qpos0", "qvel0"):
    assert res.rel_err[k] < 3e-4 and res.rel_err[k] < 0.1 * lanes.rel_err[k], (k, res, lanes)


def test_mjwarp_primitives():
  """MJWarp's `primitives.xml` (750 dofs, 150 primitive bodies; the lanes would need 43 GB), settled
  300 steps in C (219 contacts: cylinder-box, sphere-box, sphere-capsule, capsule-ellipsoid,
  ellipsoid-cylinder, sphere-sphere), one step: directional derivatives along random directions of
  the initial velocity against float64 C's (the full gradient's 1,500 C rollouts take 2 minutes; it
  measured 1.2e-4). Beyond one step C is no reference here: MJWarp's forward departs from C's by 4e-4
  in qvel per step (its convex collision of ellipsoids and cylinders is not C's), and from the
  model's start C's own differences disagree (steps 1e-6 and 1e-5). Measured: each direction's error
  1.3e-6 .. 1.9e-6 of the gradient's norm."""
  import mujoco_warp as mjw

  from diffsim.gradcheck import linear_functional, mujoco_rollout

  path = os.path.join(os.path.dirname(mjw.__file__), "test_data", "primitives.xml")
  m = mujoco.MjModel.from_xml_path(path)
  d = mujoco.MjData(m)
  for _ in range(300):
    mujoco.mj_step(m, d)
  scene = diffsim.Scene.from_xml(path, nworld=1, device=DEVICE, nconmax=2 * d.ncon, njmax=2 * d.nefc)
  q32, v32 = (x.astype(np.float32) for x in (d.qpos, d.qvel))
  rng = np.random.default_rng(0)
  W = {"qpos": rng.standard_normal((2, m.nq)), "qvel": rng.standard_normal((2, m.nv))}
  qvel0 = wp.array(v32[None], dtype=float, requires_grad=True, device=scene.device)
  loss = wp.zeros(1, dtype=float, requires_grad=True, device=scene.device)
  tape = wp.Tape()
  with tape:
    traj = diffsim.rollout(scene, wp.zeros((1, 1, 0), dtype=float, device=scene.device),
                           qpos0=wp.array(q32[None], dtype=float, device=scene.device), qvel0=qvel0,
                           gradient="analytic")
    for k, w in W.items():
      wp.launch(linear_functional, dim=(1, 2, w.shape[1]), device=scene.device,
                inputs=[getattr(traj, k), wp.array(w[None].astype(np.float32), dtype=float, device=scene.device)],
                outputs=[loss])
  tape.backward(loss)
  g = qvel0.grad.numpy()[0].astype(np.float64)

  def f(v):
    out = mujoco_rollout(m, np.zeros((1, 0)), qpos0=q32.astype(np.float64), qvel0=v)
    return sum(np.sum(w * out[k]) for k, w in W.items())

  for _ in range(3):
    u = rng.standard_normal(m.nv)
    u /= np.linalg.norm(u)
    fd = (f(v32 + 1e-6 * u) - f(v32 - 1e-6 * u)) / 2e-6
    err = abs(fd - g @ u) / np.linalg.norm(g)
    print(f"direction: C {fd:.6g}, analytic {g @ u:.6g}, error / |g| {err:.2e}")
    assert err < 2e-5, err


def test_refused_contact_features():
  """What the contact rows do not model sends `auto` to the lanes with the reason, and makes
  `gradient="analytic"` an error naming it."""
  base = """<mujoco><option {opt}/><worldbody><geom type="plane" size="1 1 .1" {geom}/>
    <body pos="0 0 .1"><freejoint/><geom type="sphere" size=".1"/></body></worldbody></mujoco>"""
  for opt, geom, why in (('noslip_iterations="3"', "", "noslip"), ("", 'adhesion="1"', "adhesive"),
                        ("", 'surfacevel="1 0 0"', "surface velocity")):
    m = mujoco.MjModel.from_xml_string(base.format(opt=opt, geom=geom))
    assert why in analytic_coverage(m), analytic_coverage(m)
  m = mujoco.MjModel.from_xml_string(base.format(opt="", geom=""))
  assert analytic_coverage(m) is None
  # inertial parameters in a model with contacts: the rows' impedance reads body_invweight0, which the
  # adjoint differentiates for masses and inertias, not for body_ipos (its Jacobians move with it)
  assert analytic_coverage(m, ["body_mass", "body_inertia"]) is None
  assert "body_ipos" in analytic_coverage(m, ["body_ipos"])
  scene = diffsim.Scene.from_xml(base.format(opt='noslip_iterations="3"', geom=""), nworld=1, device=DEVICE)
  with pytest.raises(ValueError, match="the noslip solver"):
    diffsim.Rollout(scene, 3, gradient="analytic")
  assert diffsim.Rollout(scene, 3).gradient == "finite_difference"
