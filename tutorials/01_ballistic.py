"""Tutorial 1: aim 2,048 point masses at 2,048 targets with the ballistic kernel and Adam.

Every point leaves its own launch position and must hit its own target on the ground after a fixed
flight time. The flight is `diffsim.kernels.integrate_gravity`, an ordinary Warp kernel: recorded on
a `wp.Tape`, `tape.backward()` gives d(miss distance)/d(launch velocity), and `diffsim.optim.Adam`
follows it. As in Warp's optimization examples, an iteration (forward, backward, update, log) is
captured once as a graph and replayed: no Python launches and no host reads inside the loop (Adam
keeps its step count on the device, which `warp.optim.Adam`, counting on the host, cannot do in a
graph). The exact answer is known (constant gravity), which makes the result easy to judge.

  python tutorials/01_ballistic.py               # 2,048 points, writes out/01_ballistic/
  python tutorials/01_ballistic.py --test        # 16 points, checks the aim (for the test suite)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import warp as wp

import diffsim
from diffsim import optim


@wp.kernel
def _launch(
  # In:
  x0: wp.array[wp.vec3],  # (npoint,) m
  v0: wp.array2d[float],  # (npoint, 3) m/s, the variables of Adam
  # Out:
  x_out: wp.array2d[wp.vec3],  # (npoint, nstep + 1)
  v_out: wp.array2d[wp.vec3],
):
  i = wp.tid()
  x_out[i, 0] = x0[i]
  v_out[i, 0] = wp.vec3(v0[i, 0], v0[i, 1], v0[i, 2])


@wp.kernel
def _miss(
  # In:
  x: wp.array2d[wp.vec3],  # (npoint, nstep + 1) m
  target: wp.array[wp.vec3],  # (npoint,) m
  # Out:
  loss_out: wp.array[float],  # (1,) m^2, summed over points
):
  i = wp.tid()
  d = x[i, x.shape[1] - 1] - target[i]
  wp.atomic_add(loss_out, 0, wp.dot(d, d))


@wp.kernel
def _log(
  # In:
  loss: wp.array[float],  # (1,) m^2
  scale: float,
  # Out:
  it_out: wp.array[int],  # (1,) history rows written, advanced here
  history_out: wp.array[float],  # (iters + 1,) mean squared miss per iteration, m^2
):
  history_out[it_out[0]] = loss[0] * scale
  it_out[0] = it_out[0] + 1


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda:0 if available, else cpu)")
  parser.add_argument("--iters", type=int, default=300, help="Adam iterations")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  parser.add_argument("--test", action="store_true", help="few points and iterations; checks the result")
  parser.add_argument("--npoint", type=int, default=2048)
  args = parser.parse_args(argv)
  if args.test:
    args.npoint, args.iters = 16, 120

  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  wp.config.log_level = wp.LOG_WARNING  # no kernel-loading logs between the results
  device = diffsim.scene.resolve_device(args.device)
  n, dt, nstep = args.npoint, 0.01, 80  # a 0.8 s flight
  gravity = (0.0, 0.0, -9.81)
  rng = np.random.default_rng(0)
  x0_np = np.column_stack([rng.uniform(-0.5, 0.5, n), rng.uniform(-0.5, 0.5, n), rng.uniform(0.5, 1.5, n)])
  target_np = np.column_stack([rng.uniform(1.0, 4.0, n), rng.uniform(-2.0, 2.0, n), np.zeros(n)])

  # every buffer allocated once; the loop only launches kernels
  x0 = wp.array(x0_np, dtype=wp.vec3, device=device)
  target = wp.array(target_np, dtype=wp.vec3, device=device)
  v0 = wp.zeros((n, 3), dtype=float, device=device, requires_grad=True)
  x = wp.zeros((n, nstep + 1), dtype=wp.vec3, device=device, requires_grad=True)
  v = wp.zeros((n, nstep + 1), dtype=wp.vec3, device=device, requires_grad=True)
  loss = wp.zeros(1, dtype=float, device=device, requires_grad=True)
  g = wp.vec3(*gravity)

  def forward():
    loss.zero_()
    wp.launch(_launch, dim=n, inputs=[x0, v0], outputs=[x, v], device=device)
    for k in range(nstep):
      wp.launch(diffsim.kernels.integrate_gravity, dim=n, inputs=[g, dt, x, v, k], outputs=[x, v], device=device)
    wp.launch(_miss, dim=n, inputs=[x, target], outputs=[loss], device=device)

  unbounded = wp.array([-np.inf], dtype=float, device=device), wp.array([np.inf], dtype=float, device=device)
  adam = optim.Adam(v0, *unbounded, lr=0.2)  # lr in m/s
  it = wp.zeros(1, dtype=int, device=device)
  hist = wp.zeros(args.iters + 1, dtype=float, device=device)

  def iteration():
    tape = wp.Tape()
    with tape:
      forward()
    tape.backward(loss)
    adam.step(v0.grad)
    wp.launch(_log, dim=1, inputs=[loss, 1.0 / n], outputs=[it, hist], device=device)
    tape.zero()

  replay = diffsim.graph.Replay(device, iteration)  # captured on the first call, replayed after
  t0 = time.perf_counter()
  for _ in range(args.iters):
    replay()
  forward()
  wp.launch(_log, dim=1, inputs=[loss, 1.0 / n], outputs=[it, hist], device=device)
  history = hist.numpy()  # the loop's log, read once: row k is the loss before update k + 1
  elapsed = time.perf_counter() - t0

  xs = x.numpy()
  miss = np.linalg.norm(xs[:, -1] - target_np, axis=1)
  # exact launch velocity of semi-implicit Euler: x_N = x0 + N dt v0 + dt^2 g N (N + 1) / 2
  t_f = nstep * dt
  v_exact = (target_np - x0_np - dt * dt * np.array(gravity) * nstep * (nstep + 1) / 2) / t_f
  v_err = np.linalg.norm(v0.numpy() - v_exact, axis=1)

  out = os.path.join(args.out, "01_ballistic")
  os.makedirs(out, exist_ok=True)
  fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
  for i in range(min(n, 12)):
    horiz = np.linalg.norm(xs[i, :, :2] - x0_np[i, :2], axis=1)
    ax0.plot(horiz, xs[i, :, 2], lw=1)
    ax0.plot(np.linalg.norm(target_np[i, :2] - x0_np[i, :2]), target_np[i, 2], "kx")
  ax0.set(xlabel="horizontal distance from launch (m)", ylabel="height (m)", title="flights (x: targets)")
  ax1.semilogy(history)
  ax1.set(xlabel="Adam iteration", ylabel="mean squared miss (m$^2$)", title="loss")
  fig.tight_layout()
  path = os.path.join(out, "flights.png")
  fig.savefig(path, dpi=120)
  plt.close(fig)
  print(f"01_ballistic: {n} points, miss max {1000 * miss.max():.2f} mm / median {1000 * np.median(miss):.2f} mm, "
        f"launch velocity error max {v_err.max():.2e} m/s, after {args.iters} Adam iterations in {elapsed:.1f} s "
        f"(wrote {path})")
  if args.test:
    # the launch velocities must approach the exact ones; 120 iterations from rest reach a few mm
    ok = history[-1] < 1e-3 * history[0] and miss.max() < 0.02
    print("test", "passed" if ok else "FAILED")
    return 0 if ok else 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
