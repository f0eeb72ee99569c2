"""JAX interop: DLPack views of diffsim arrays and of JAX arrays share memory."""

import numpy as np
import pytest
import warp as wp

import diffsim
from diffsim import interop

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def test_trajectory_param_views_share_memory(cartpole):
  ctrl = wp.array(np.full((cartpole.nworld, 4, cartpole.nu), 0.1, np.float32), dtype=float, device=cartpole.device)
  traj = diffsim.rollout(cartpole, ctrl)
  views = interop.to_jax(traj)
  assert set(views) == {"qpos", "qvel", "act", "sensordata", "ctrl"}
  for k, j in views.items():
    a = getattr(traj, k)
    assert j.shape == a.shape and j.dtype == jnp.float32
    if a.size:
      assert j.unsafe_buffer_pointer() == a.ptr, k
  np.testing.assert_array_equal(np.asarray(views["qpos"]), traj.qpos.numpy())
  # a Warp write shows in the JAX view (JAX itself never writes in place)
  traj.qvel.fill_(2.5)
  assert float(jnp.max(jnp.abs(views["qvel"] - 2.5))) == 0.0

  mass = diffsim.Param("body_mass", "pole").bind(cartpole)
  j = interop.to_jax(mass)
  assert j.unsafe_buffer_pointer() == mass.value.ptr and j.shape == (cartpole.nworld, 1)
  mass.value.fill_(0.42)
  np.testing.assert_allclose(np.asarray(j), 0.42)


def test_from_jax_zero_copy(cartpole):
  x = jnp.arange(2 * 3 * cartpole.nu, dtype=jnp.float32).reshape(2, 3, cartpole.nu) / 10
  a = interop.from_jax(x)
  assert a.ptr == x.unsafe_buffer_pointer() and a.shape == x.shape and a.device == cartpole.device
  a.fill_(0.5)  # a Warp write into the JAX buffer shows on the JAX side
  np.testing.assert_array_equal(np.asarray(x), 0.5)
  # usable as controls
  traj = diffsim.rollout(cartpole, a)
  assert traj.qpos.shape == (2, 4, cartpole.nq)
  with pytest.raises(TypeError, match="float32"):
    interop.from_jax(jnp.zeros(3, dtype=jnp.int32))


def test_to_jax_refuses_to_copy():
  a = wp.zeros((4, 6), dtype=float, device="cpu")
  with pytest.raises(ValueError, match="contiguous"):
    interop.to_jax(a[:, 1:])
  with pytest.raises(ValueError, match="copied"):
    interop.to_jax(wp.zeros(10, dtype=float, device="cpu")[1:])  # 4-byte offset: unaligned
