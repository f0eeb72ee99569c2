"""diffsim.optim: the shared Adam against its formula, the callback convention."""

import numpy as np
import warp as wp

from diffsim import optim


def test_adam_matches_the_formula_and_projects():
  """Three steps on (2, 3) variables with per-column scale and bounds, against NumPy."""
  dev = "cpu"
  rng = np.random.default_rng(0)
  x0 = rng.normal(size=(2, 3)).astype(np.float32)
  scale, lo, hi = np.array([1.0, 2.0, 0.5]), np.array([-1.0, -1.0, -0.2]), np.array([1.0, 1.0, 0.2])
  x = wp.array(x0, dtype=float, device=dev)
  adam = optim.Adam(x, wp.array(lo.astype(np.float32), dtype=float, device=dev),
                    wp.array(hi.astype(np.float32), dtype=float, device=dev),
                    scale=wp.array(scale.astype(np.float32), dtype=float, device=dev), lr=0.1)
  ref, m, v = x0.astype(np.float64), np.zeros((2, 3)), np.zeros((2, 3))
  for t in range(1, 4):
    g = rng.normal(size=(2, 3))
    if t == 2:
      g[0, 0] = np.nan  # skipped this step
    adam.step(wp.array(g.astype(np.float32), dtype=float, device=dev))
    gs = np.nan_to_num(g, nan=0.0) * scale
    m = 0.9 * m + 0.1 * gs
    v = 0.999 * v + 0.001 * gs * gs
    step = 0.1 * scale * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    ref = np.clip(ref - step, lo, hi)
  np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5, atol=1e-6)
  assert np.all(x.numpy()[:, 2] <= 0.2) and np.all(x.numpy()[:, 2] >= -0.2)
  adam.reset()
  assert adam.t.numpy()[0] == 0 and not adam.m.numpy().any()


def test_callback_convention():
  seen = []
  it = optim.Iterate(3, 1.5, read_x=lambda: seen.append("read") or np.ones(2))
  assert not optim.stop_requested(lambda i: None, it) and seen == []  # x not read unless asked
  assert optim.stop_requested(lambda i: i.x.sum() == 2.0, it) and seen == ["read"]

  def raises(i):
    raise StopIteration

  assert optim.stop_requested(raises, it)
  assert not optim.stop_requested(None, it)
