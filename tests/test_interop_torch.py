"""PyTorch interop: zero-copy views both ways, and `torch_rollout` gradients against diffsim's tape."""

import subprocess
import sys

import numpy as np
import pytest
import warp as wp

import diffsim
from diffsim import interop

torch = pytest.importorskip("torch")

NSTEP = 15


@wp.kernel
def _loss_kernel(qpos: wp.array3d[float], qvel: wp.array3d[float], sensordata: wp.array3d[float], nstep: int,
                 loss: wp.array[float]):
  """sum(qpos[:, -1]^2) + 0.5 sum(qvel[:, -1]^2) + 0.01 sum(sensordata[:, :, 0])."""
  w = wp.tid()
  s = float(0.0)
  for i in range(qpos.shape[2]):
    s += qpos[w, nstep, i] * qpos[w, nstep, i]
  for i in range(qvel.shape[2]):
    s += 0.5 * qvel[w, nstep, i] * qvel[w, nstep, i]
  for k in range(nstep + 1):
    s += 0.01 * sensordata[w, k, 0]
  wp.atomic_add(loss, 0, s)


def _torch_loss(qpos, qvel, sensordata):
  return (qpos[:, -1] ** 2).sum() + 0.5 * (qvel[:, -1] ** 2).sum() + 0.01 * sensordata[:, :, 0].sum()


def _inputs(scene, seed=0):
  rng = np.random.default_rng(seed)
  u = (0.5 * rng.standard_normal((scene.nworld, NSTEP, scene.nu))).astype(np.float32)
  qpos0 = np.array([[0.1, 0.3], [-0.2, 2.0]], np.float32)[: scene.nworld]
  qvel0 = np.array([0.3, -0.5], np.float32)  # (nv,): shared by all worlds
  return u, qpos0, qvel0


def _tape_grads(scene, u, qpos0, qvel0):
  """diffsim's own gradient of the same loss (a Warp kernel on the tape)."""
  ctrl = wp.array(u, dtype=float, device=scene.device, requires_grad=True)
  q0 = wp.array(qpos0, dtype=float, device=scene.device, requires_grad=True)
  v0 = wp.array(qvel0[None], dtype=float, device=scene.device, requires_grad=True)
  loss = wp.zeros(1, dtype=float, device=scene.device, requires_grad=True)
  with wp.Tape() as tape:
    traj = diffsim.rollout(scene, ctrl, qpos0=q0, qvel0=v0)
    wp.launch(_loss_kernel, dim=scene.nworld, inputs=[traj.qpos, traj.qvel, traj.sensordata, NSTEP], outputs=[loss],
              device=scene.device)
  tape.backward(loss)
  return float(loss.numpy()[0]), ctrl.grad.numpy(), q0.grad.numpy(), v0.grad.numpy()[0]


def test_trajectory_param_views_share_memory(cartpole):
  ctrl = wp.array(np.zeros((cartpole.nworld, 4, cartpole.nu), np.float32), dtype=float, device=cartpole.device)
  traj = diffsim.rollout(cartpole, ctrl)
  views = interop.to_torch(traj)
  assert set(views) == {"qpos", "qvel", "act", "sensordata", "ctrl"}
  for k, t in views.items():
    a = getattr(traj, k)
    assert tuple(t.shape) == a.shape and t.dtype == torch.float32
    if a.size:
      assert t.data_ptr() == a.ptr, k
  # torch write -> visible in Warp; Warp write -> visible in torch
  views["qpos"][1, 2, 0] = 123.0
  assert traj.qpos.numpy()[1, 2, 0] == 123.0
  traj.qvel.fill_(2.5)
  assert torch.all(views["qvel"] == 2.5)
  views["ctrl"][0, 3, 0] = -7.0
  assert ctrl.numpy()[0, 3, 0] == -7.0

  mass = diffsim.Param("body_mass", "pole").bind(cartpole)
  t = interop.to_torch(mass)
  assert t.data_ptr() == mass.value.ptr and tuple(t.shape) == (cartpole.nworld, 1)
  t[1, 0] = 0.75
  assert mass.value.numpy()[1, 0] == 0.75
  # with requires_grad the tensor's .grad is the array's .grad (shared)
  tg = interop.to_torch(mass, requires_grad=True)
  assert tg.requires_grad and tg.grad.data_ptr() == mass.value.grad.ptr

  with pytest.raises(ValueError, match="bind"):
    interop.to_torch(diffsim.Param("body_mass", "pole"))


def test_from_torch_controls_zero_copy_and_grad(cartpole):
  u, _, _ = _inputs(cartpole)
  t = torch.from_numpy(u.copy())
  a = interop.from_torch(t, requires_grad=True)
  assert a.ptr == t.data_ptr() and a.shape == tuple(t.shape) and a.device == cartpole.device
  t[0, 0, 0] = 0.25
  assert a.numpy()[0, 0, 0] == 0.25
  a.fill_(0.0)
  assert torch.all(t == 0)
  t.copy_(torch.from_numpy(u))
  # tape.backward writes d(loss)/d(ctrl) straight into t.grad
  loss = wp.zeros(1, dtype=float, device=cartpole.device, requires_grad=True)
  with wp.Tape() as tape:
    traj = diffsim.rollout(cartpole, a)
    wp.launch(_loss_kernel, dim=cartpole.nworld, inputs=[traj.qpos, traj.qvel, traj.sensordata, NSTEP],
              outputs=[loss], device=cartpole.device)
  tape.backward(loss)
  assert t.grad is not None and t.grad.data_ptr() == a.grad.ptr
  assert torch.count_nonzero(t.grad) > 0
  with pytest.raises(TypeError, match="float32"):
    interop.from_torch(torch.zeros(3, dtype=torch.float64))


def test_torch_rollout_gradient_matches_tape(cartpole):
  u, qpos0, qvel0 = _inputs(cartpole)
  loss_ref, g_ctrl, g_qpos0, g_qvel0 = _tape_grads(cartpole, u, qpos0, qvel0)

  ctrl = torch.tensor(u, requires_grad=True)
  q0 = torch.tensor(qpos0, requires_grad=True)
  v0 = torch.tensor(qvel0, requires_grad=True)  # (nv,), broadcast over worlds
  qpos, qvel, sensordata = interop.torch_rollout(cartpole, ctrl, q0, v0)
  assert qpos.shape == (cartpole.nworld, NSTEP + 1, cartpole.nq)
  assert qvel.shape == (cartpole.nworld, NSTEP + 1, cartpole.nv)
  assert sensordata.shape == (cartpole.nworld, NSTEP + 1, cartpole.mjm.nsensordata)
  loss = _torch_loss(qpos, qvel, sensordata)
  np.testing.assert_allclose(loss.item(), loss_ref, rtol=1e-6)
  loss.backward(retain_graph=True)
  for got, ref in ((ctrl.grad, g_ctrl), (q0.grad, g_qpos0), (v0.grad, g_qvel0)):
    assert got.shape == ref.shape
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
  assert np.abs(g_ctrl).max() > 1e-3  # a real gradient, not zeros on both sides

  # a second backward through the same graph gives the same gradient again (no stale accumulation)
  first = ctrl.grad.clone()
  ctrl.grad = None
  loss.backward()
  torch.testing.assert_close(ctrl.grad, first, rtol=0, atol=0)

  # without autograd: same values, no tape
  with torch.no_grad():
    qpos_ng, _, _ = interop.torch_rollout(cartpole, ctrl, q0, v0)
  torch.testing.assert_close(qpos_ng, qpos.detach(), rtol=0, atol=0)


def test_torch_rollout_with_rollout_object(cartpole):
  u, qpos0, qvel0 = _inputs(cartpole)
  _, g_ctrl, _, _ = _tape_grads(cartpole, u, qpos0, qvel0)
  ro = diffsim.Rollout(cartpole, NSTEP)
  ctrl = torch.tensor(u, requires_grad=True)
  out = interop.torch_rollout(ro, ctrl, torch.tensor(qpos0), torch.tensor(qvel0))
  _torch_loss(*out).backward()
  np.testing.assert_allclose(ctrl.grad.numpy(), g_ctrl, rtol=1e-5, atol=1e-6 * np.abs(g_ctrl).max())
  # a second call rewrites the Rollout's Jacobians: the first call's backward must refuse
  first = interop.torch_rollout(ro, ctrl, torch.tensor(qpos0))
  interop.torch_rollout(ro, ctrl, torch.tensor(qpos0))
  with pytest.raises(RuntimeError, match="ran again"):
    _torch_loss(*first).backward()


def test_torch_policy_trains_through_simulator(cartpole):
  """A linear policy of time features, trained through the simulator by torch's L-BFGS, brings the
  cart to where a known policy of the same class puts it (computed in float64 MuJoCo C); checked by
  replaying the trained policy's controls in MuJoCo C (measured: 6e-7 m off after 5 evaluations)."""
  from diffsim.gradcheck import mujoco_rollout

  feats = torch.stack([torch.linspace(0, 1, NSTEP), torch.linspace(1, 0, NSTEP)], -1)  # (nstep, 2)
  q0 = torch.tensor([[0.3, 0.4], [0.3, 0.4]])
  reference = (feats @ torch.tensor([[1.0], [-0.5]]) + 0.2).numpy().astype(np.float64)
  target = mujoco_rollout(cartpole.mjm, reference, qpos0=[0.3, 0.4])["qpos"][-1, 0]
  torch.manual_seed(0)
  policy = torch.nn.Linear(2, cartpole.nu)
  opt = torch.optim.LBFGS(policy.parameters(), max_iter=20, line_search_fn="strong_wolfe")

  def closure():
    opt.zero_grad()
    qpos, _, _ = interop.torch_rollout(cartpole, policy(feats).expand(cartpole.nworld, NSTEP, cartpole.nu), q0)
    loss = ((qpos[:, -1, 0] - target) ** 2).sum()
    loss.backward()
    assert policy.weight.grad is not None and torch.isfinite(policy.weight.grad).all()
    return loss

  start = closure().item()
  opt.step(closure)
  trained = policy(feats).detach().numpy().astype(np.float64)
  miss = mujoco_rollout(cartpole.mjm, trained, qpos0=[0.3, 0.4])["qpos"][-1, 0] - target
  assert start > 1e-3 and abs(miss) < 1e-4, (start, miss)


def test_torch_rollout_rejects_bad_shapes_and_inplace_edits(cartpole):
  with pytest.raises(ValueError, match="ctrl must have shape"):
    interop.torch_rollout(cartpole, torch.zeros(NSTEP, cartpole.nu))
  ctrl = torch.zeros(cartpole.nworld, NSTEP, cartpole.nu, requires_grad=True)
  qpos, _, _ = interop.torch_rollout(cartpole, ctrl)
  loss = (qpos[:, -1] ** 2).sum()
  qpos.mul_(2.0)  # the backward reads this trajectory: torch must refuse it
  with pytest.raises(RuntimeError, match="modified by an inplace operation"):
    loss.backward()


def test_import_diffsim_does_not_import_torch_or_jax():
  code = "import sys, diffsim, diffsim.interop; print('torch' in sys.modules, 'jax' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
  assert out == ["False", "False"]
