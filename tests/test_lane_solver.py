"""`diffsim.lane_solver`: perturbation lanes that never stop their constraint solve before their
nominal world or their central difference's partner (`SolverSettings(lanes="nominal")`)."""

import mujoco
import mujoco_warp as mjw
import numpy as np
import pytest
import warp as wp

import diffsim
import models
from conftest import DEVICE
from diffsim.gradcheck import check_gradients
from diffsim.physics import Physics


def _replay(scene, d, step, nstep):
  """Per step qpos and solver_niter of a captured `step()` replayed `nstep` times."""
  step()  # loads the modules outside the capture
  with wp.ScopedCapture(device=scene.device) as cap:
    step()
  qpos, niter = [], []
  for _ in range(nstep):
    wp.capture_launch(cap.graph)
    qpos.append(d.qpos.numpy().copy())
    niter.append(d.solver_niter.numpy().copy())
  return np.array(qpos), np.array(niter)


def _data(scene, nworld, ctrl):
  d = mjw.put_data(scene.mjm, mujoco.MjData(scene.mjm), nworld=nworld)
  d.ctrl.assign(np.asarray(ctrl, np.float32))
  return d


def test_without_lanes_it_is_mjwarps_solve_bit_for_bit():
  # MJWarp's Newton solve, copied with one kernel added to its loop: where no world is a lane it must
  # give mjw.step's result exactly (this pins the copy to the MJWarp version installed)
  scene = diffsim.Scene.from_xml(models.SLIDING_BOX, nworld=3, device="cpu")
  ctrl = [[0.0], [2.0], [6.0]]
  mine = _data(scene, 3, ctrl)
  raw = _data(scene, 3, ctrl)
  got = _replay(scene, mine, Physics(scene.model, mine, follow=3).step, 40)
  want = _replay(scene, raw, lambda: mjw.step(scene.model, raw), 40)
  np.testing.assert_array_equal(got[0], want[0])
  rows = got[1] > 0  # Physics skips the solver in a world without rows
  np.testing.assert_array_equal(got[1][rows], want[1][rows])


def test_no_lane_stops_before_its_nominal_world_or_its_partner(so101):
  # 2 worlds x 3 lanes (nominal, then the two sides of one central difference), the lanes' controls
  # nudged, every world at 1e-12: every lane runs at least its nominal world's iterations, the two
  # sides the same number, and far fewer than at tolerance 0
  from diffsim.lane_solver import FOLLOW_TOLERANCE

  rng = np.random.default_rng(0)
  base = 0.3 * rng.standard_normal((2, so101.nu))
  ctrl = np.concatenate([base, base + 1e-3, base - 1e-3])
  tol = wp.array([FOLLOW_TOLERANCE], dtype=float, device=so101.device)
  d = _data(so101, 6, ctrl)
  _, niter = _replay(so101, d, Physics(so101.model, d, tolerance=tol, follow=2, pairs=True).step, 30)
  lanes, nominal = niter[:, 2:], np.tile(niter[:, :2], (1, 2))
  assert (lanes >= nominal).all()
  np.testing.assert_array_equal(niter[:, 2:4], niter[:, 4:6])
  zero = _data(so101, 6, ctrl)
  _, at_zero = _replay(so101, zero, Physics(so101.model, zero, tolerance=so101.lane_tolerance_array).step, 30)
  assert niter.mean() < 0.6 * at_zero.mean()  # measured: 1.0 against 2.0


@pytest.fixture(scope="module")
def so101_nominal():
  return diffsim.Scene.from_xml(models.so101_spec(), nworld=2, device=DEVICE,
                                solver=diffsim.SolverSettings(lanes="nominal"))


def test_lane_gradients_as_exact_as_at_tolerance_zero(so101, so101_nominal):
  """The README's SO-101 gradient case (dry friction, saturating servos), lanes against float64
  MuJoCo C: lanes that follow their nominal world keep each input's error (measured, tolerance 0 /
  following: ctrl 9.4e-5 / 1.0e-4, qpos0 2.7e-4 / 2.6e-4, qvel0 2.4e-4 / 2.2e-4, damping 2.5e-5 /
  5.8e-5, armature 9.5e-4 / 7.4e-4, gain 5.5e-5 / 4.5e-5)."""
  assert so101.lane_stop == "nominal"  # "auto" on the SO-101 (100 iterations allowed)
  zero = diffsim.Scene.from_xml(models.so101_spec(), nworld=2, device=DEVICE,
                                solver=diffsim.SolverSettings(lanes="tolerance"))
  assert zero.lane_stop == "tolerance" and so101_nominal.lane_stop == "nominal"
  kw = models.gradient_inputs("so101_40", zero)
  ctrl = kw.pop("ctrl")
  ref = check_gradients(zero, ctrl, gradient="finite_difference", **kw)
  kw = models.gradient_inputs("so101_40", so101_nominal)
  ctrl = kw.pop("ctrl")
  got = check_gradients(so101_nominal, ctrl, gradient="finite_difference", **kw)
  print("tolerance 0:", ref, "\nnominal:", got)
  for name, err in got.rel_err.items():
    assert err < max(1.5 * ref.rel_err[name], 1e-4), f"{name}: {err:.2e} against {ref.rel_err[name]:.2e} at 0"


def test_auto_lanes_follow_the_iteration_cap():
  """`lanes="auto"` keeps tolerance 0 where the MJCF caps the solver at 10 iterations or fewer."""
  capped = diffsim.Scene.from_xml(models.SLIDING_BOX.replace('<option timestep="0.005"/>',
                                                             '<option timestep="0.005" iterations="4"/>'),
                                  nworld=1, device="cpu")
  assert capped.mjm.opt.iterations == 4 and capped.lane_stop == "tolerance"
  assert diffsim.Scene.from_xml(models.SLIDING_BOX, nworld=1, device="cpu").lane_stop == "nominal"  # MuJoCo's 100
  few = diffsim.Scene.from_xml(models.SLIDING_BOX, nworld=1, device="cpu", solver=diffsim.SolverSettings(iterations=8))
  assert few.lane_stop == "tolerance"


def test_lanes_setting_is_checked():
  with pytest.raises(ValueError, match="SolverSettings.lanes must be one of"):
    diffsim.Scene.from_xml(models.SLIDING_BOX, nworld=1, device="cpu", solver=diffsim.SolverSettings(lanes="fast"))
