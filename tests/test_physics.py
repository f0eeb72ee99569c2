"""`diffsim.physics.Physics`: MJWarp's step with the constraint solver only where a world has rows."""

import dataclasses

import mujoco
import mujoco_warp as mjw
import numpy as np
import pytest
import warp as wp

import diffsim
from diffsim.gradcheck import mujoco_rollout
from diffsim.physics import Physics, skips_solver

from models import LIMITED_PENDULUM, SLIDING_BOX


def _data(scene, qpos, qvel, ctrl):
  d = mjw.put_data(scene.mjm, mujoco.MjData(scene.mjm), nworld=len(qpos))
  d.qpos.assign(np.asarray(qpos, np.float32))
  d.qvel.assign(np.asarray(qvel, np.float32))
  d.ctrl.assign(np.asarray(ctrl, np.float32))
  return d


def _replay(scene, d, step, nstep):
  """Replays a captured graph of `step()` `nstep` times; per step qpos, qvel, nefc and solver_niter."""
  start = [(a, a.numpy().copy()) for a in (d.qpos, d.qvel, d.qacc_warmstart, d.time)]
  step()  # loads the modules outside the capture
  with wp.ScopedCapture(device=scene.device) as cap:
    step()
  for a, value in start:
    a.assign(value)
  out = {k: [] for k in ("qpos", "qvel", "nefc", "niter")}
  for _ in range(nstep):
    wp.capture_launch(cap.graph)
    for k, a in (("qpos", d.qpos), ("qvel", d.qvel), ("nefc", d.nefc), ("niter", d.solver_niter)):
      out[k].append(a.numpy().copy())
  return {k: np.array(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def limited():
  return diffsim.Scene.from_xml(LIMITED_PENDULUM, nworld=2, device="cpu")


def test_worlds_without_rows_skip_the_solver_and_match_mujoco_c(limited):
  # world 0 swings onto its limit and off again, world 1 swings freely: the captured graph must take
  # the solver where a world has rows and skip it where none has, step by step
  qpos0, qvel0, ctrl = [[0.3], [0.0]], [[3.0], [0.5]], [[0.4], [0.0]]
  phys = Physics(limited.model, _data(limited, qpos0, qvel0, ctrl))
  assert phys.own
  got = _replay(limited, phys.data, phys.step, 200)
  on_limit = got["nefc"][:, 0] > 0
  assert on_limit.any() and not on_limit.all(), "world 0 should touch the limit for a while"
  assert (got["nefc"][:, 1] == 0).all()
  np.testing.assert_array_equal(got["niter"] > 0, got["nefc"] > 0)  # the solver ran exactly where rows were
  for w in range(2):
    ref = mujoco_rollout(limited.mjm, np.full((200, 1), ctrl[w][0]), qpos0=np.array(qpos0[w], float),
                         qvel0=np.array(qvel0[w], float))
    np.testing.assert_allclose(got["qpos"][:, w], ref["qpos"][1:], atol=2e-4)
    np.testing.assert_allclose(got["qvel"][:, w], ref["qvel"][1:], atol=5e-3)


def test_worlds_with_rows_get_the_solver_result_bit_for_bit():
  # a box resting on the floor: contact rows in every world and step, so Physics runs MJWarp's solver
  # exactly as mjw.step does
  scene = diffsim.Scene.from_xml(SLIDING_BOX, nworld=3, device="cpu")
  qpos = np.tile(scene.mjm.qpos0, (3, 1))
  qvel = np.zeros((3, scene.nv))
  ctrl = [[0.0], [1.0], [2.0]]
  raw = _data(scene, qpos, qvel, ctrl)
  phys = Physics(scene.model, _data(scene, qpos, qvel, ctrl))
  want = _replay(scene, raw, lambda: mjw.step(scene.model, raw), 60)
  got = _replay(scene, phys.data, phys.step, 60)
  assert (got["nefc"] > 0).all()
  for k in ("qpos", "qvel", "niter"):
    np.testing.assert_array_equal(got[k], want[k])


def test_lanes_solve_at_their_own_tolerance_on_the_shared_model():
  # the lanes' Physics runs MJWarp's solver at tolerance 0 on the Model whose own (the MJCF's, floored
  # at 1e-6 by MJWarp) forward-only rollouts use: its graph, captured while its array was swapped in,
  # keeps reading it on replay, bit for bit mjw.step at tolerance 0, and the model keeps its own
  scene = diffsim.Scene.from_xml(SLIDING_BOX, nworld=2, device="cpu")
  assert scene.tolerance == np.float32(1e-6) and scene.lane_tolerance == 0.0
  assert scene.mjm.opt.tolerance == 0.0  # float64 C converges as far as the lanes
  own = scene.model.opt.tolerance
  start = (np.tile(scene.mjm.qpos0, (2, 1)), np.zeros((2, scene.nv)), [[3.0], [6.0]])
  lanes = Physics(scene.model, _data(scene, *start), tolerance=scene.lane_tolerance_array)
  plain = Physics(scene.model, _data(scene, *start))
  got = _replay(scene, lanes.data, lanes.step, 40)
  assert scene.model.opt.tolerance is own
  at_own = _replay(scene, plain.data, plain.step, 40)
  zero = dataclasses.replace(scene.model, opt=dataclasses.replace(scene.model.opt, tolerance=scene.lane_tolerance_array))
  raw = _data(scene, *start)
  want = _replay(scene, raw, lambda: mjw.step(zero, raw), 40)
  for k in ("qpos", "qvel"):
    np.testing.assert_array_equal(got[k], want[k])
  rows = got["nefc"] > 0  # where a world has none, Physics skips the solver (niter 0) and mjw.step does not
  np.testing.assert_array_equal(got["niter"][rows], want["niter"][rows])
  # tolerance 0 iterates until the line search stalls (measured: 6 iterations per step against 2)
  assert at_own["niter"].mean() < 0.5 * got["niter"].mean()
  np.testing.assert_allclose(at_own["qpos"], got["qpos"], atol=1e-5)


def test_forward_sets_the_unconstrained_acceleration(limited):
  # mjw.forward's outputs where no world has rows: qacc = M^-1 qfrc_smooth, no constraint force
  d = _data(limited, [[0.1], [-0.2]], [[1.0], [0.0]], [[0.3], [-0.1]])
  Physics(limited.model, d).forward()
  mjd = mujoco.MjData(limited.mjm)
  for w in range(2):
    mjd.qpos[:], mjd.qvel[:], mjd.ctrl[:] = d.qpos.numpy()[w], d.qvel.numpy()[w], d.ctrl.numpy()[w]
    mujoco.mj_forward(limited.mjm, mjd)
    np.testing.assert_allclose(d.qacc.numpy()[w], mjd.qacc, rtol=1e-5)
    np.testing.assert_allclose(d.sensordata.numpy()[w], mjd.sensordata, atol=1e-6)
  np.testing.assert_array_equal(d.qfrc_constraint.numpy(), 0.0)
  np.testing.assert_array_equal(d.solver_niter.numpy(), 0)


def test_models_it_does_not_cover_run_mjw_step():
  mjm = mujoco.MjModel.from_xml_string(LIMITED_PENDULUM.replace('integrator="implicitfast"', 'integrator="RK4"'))
  m = mjw.put_model(mjm)
  assert not skips_solver(m, mjw.put_data(mjm, mujoco.MjData(mjm), nworld=1))
