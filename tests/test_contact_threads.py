"""The analytic adjoint's contact kernels walk the filled contact slots in contiguous shares per thread
(`diffsim/adjoint/contact_threads.py`, issue 35): every filled slot exactly once, and a world's gradient
the same whichever threads its contacts fall to."""

import mujoco
import numpy as np
import pytest
import warp as wp
from conftest import DEVICE
from test_contact_adjoint import CONTACT_ZOO

import diffsim
from diffsim.adjoint.contact_threads import contact_range


@wp.kernel
def _count_visits(nthread: int, nacon: wp.array[int], nc: int, visits: wp.array[int]):
  t = wp.tid()
  span = contact_range(t, nthread, nacon, nc)
  for c in range(span[0], span[1]):
    wp.atomic_add(visits, c, 1)


@pytest.mark.parametrize("nthread", [1, 3, 7, 48, 100])
def test_each_filled_slot_once(nthread):
  nc = 48
  for nacon in (0, 1, 5, 47, 48, 60):  # 60: MJWarp counted more contacts than it has slots
    visits = wp.zeros(nc, dtype=int, device=DEVICE)
    wp.launch(_count_visits, dim=nthread, device=DEVICE,
              inputs=[nthread, wp.array([nacon], dtype=int, device=DEVICE), nc, visits])
    want = (np.arange(nc) < min(nacon, nc)).astype(np.int32)
    np.testing.assert_array_equal(visits.numpy(), want, err_msg=f"nthread {nthread}, nacon {nacon}")


@wp.kernel
def _final_state_loss(qpos: wp.array3d[float], qvel: wp.array3d[float], nstep: int, loss: wp.array[float]):
  w, i = wp.tid()
  if i < qpos.shape[2]:
    wp.atomic_add(loss, 0, qpos[w, nstep, i] * qpos[w, nstep, i])
  if i < qvel.shape[2]:
    wp.atomic_add(loss, 0, qvel[w, nstep, i] * qvel[w, nstep, i])


def _gradients(mjm, ctrl, qpos0, qvel0):
  """Analytic tape gradients of the final state's squared norm, per world: ctrl, qpos0, qvel0."""
  nworld, nstep = ctrl.shape[:2]
  scene = diffsim.Scene(mjm, nworld=nworld, device=DEVICE)
  ro = diffsim.Rollout(scene, nstep, gradient="analytic")
  arrays = [wp.array(x.astype(np.float32), dtype=float, device=scene.device, requires_grad=True)
            for x in (ctrl, qpos0, qvel0)]
  loss = wp.zeros(1, dtype=float, device=scene.device, requires_grad=True)
  tape = wp.Tape()
  with tape:
    traj = ro(arrays[0], qpos0=arrays[1], qvel0=arrays[2])
    wp.launch(_final_state_loss, dim=(nworld, max(scene.nq, scene.nv)), device=scene.device,
              inputs=[traj.qpos, traj.qvel, nstep], outputs=[loss])
  tape.backward(loss)
  return [a.grad.numpy() for a in arrays], int(ro.adjoint.contacts.data.nacon.numpy()[0])


def test_world_gradients_independent_of_thread_shares():
  """Three zoo worlds, the second's box lifted off the floor (its four contacts missing): the contacts
  of the first and third worlds then straddle two threads' shares, yet each world's gradients match
  those of the same world alone (one thread, all of its contacts), to float32 summation order."""
  mjm = mujoco.MjModel.from_xml_string(CONTACT_ZOO)
  d = mujoco.MjData(mjm)
  for _ in range(200):  # settle on the floor and the table
    mujoco.mj_step(mjm, d)
  nstep = 8
  rng = np.random.default_rng(1)
  qpos0 = np.tile(d.qpos, (3, 1))
  qpos0[1, 2] += 0.05  # the box, 5 cm up
  qvel0 = 0.2 * rng.standard_normal((3, mjm.nv))
  ctrl = np.array([4.0, 1.0, 2.0, 1.0]) + 0.5 * rng.standard_normal((3, nstep, mjm.nu))
  together, nacon = _gradients(mjm, ctrl, qpos0, qvel0)
  assert nacon % 3 != 0, nacon  # the shares do not fall on the worlds' boundaries
  for w in range(3):
    alone, _ = _gradients(mjm, ctrl[w:w + 1], qpos0[w:w + 1], qvel0[w:w + 1])
    for name, a, b in zip(("ctrl", "qpos0", "qvel0"), together, alone):
      rel = np.linalg.norm(a[w] - b[0]) / np.linalg.norm(b[0])
      print(w, name, nacon, f"{rel:.1e}")
      assert rel < 1e-5, (w, name, rel)
