"""The same gradient by diffsim and by MJX (`jax.grad` through `mjx.step`), side by side.

Case (issue #5): cart-pole (`diffsim.asset_path("cartpole.xml")`), `nstep` = 100 steps from the
model's `qpos0` at rest, fixed random controls in [-0.4, 0.4] (inside the control range, so no
clamping kinks), loss = sum of squares of the final `qpos` of each world; the gradient is
d(loss)/d(ctrl), `(nworld, nstep, nu)`, at 1, 64 and 1024 worlds.

  - diffsim: a `diffsim.Rollout(scene, nstep, gradient="finite_difference")` (the perturbation lanes;
    the analytic adjoint against MJX is in `bench_adjoint.py`) recorded on a `wp.Tape`, a loss kernel and
    `tape.backward`, all captured once with `wp.ScopedCapture` and replayed with
    `wp.capture_launch` (as `bench_rollout.py` does); forward: a non-differentiable `Rollout`,
    captured the same way.
  - MJX: `jax.jit(jax.vmap(jax.grad(loss)))` with `jax.lax.scan` over `mjx.step`; forward: the
    same scan without `grad`. Timed after a warm-up (compile) call, with `block_until_ready`.

Each row reports both times, the ratio diffsim / MJX (below 1: diffsim faster; the median of
per-round ratios, the sides taking turns (`timing.alternate`), so that load from other processes hits
both alike; more rounds while a spread is above 10%), the forward throughputs, and the relative error
between the two gradients (`|g_diffsim - g_mjx| / |g_mjx|`, Frobenius norms over all worlds) and the
largest final-`qpos` difference, as checks that both compute the same thing (diffsim's step Jacobians
are central finite differences in float32). Each size runs twice (`--cores all 1`): unpinned, where
XLA spreads over every core and Warp uses one, and with every thread of the process pinned to one CPU
(`timing.pinned`), one core each. "First call" is compilation (XLA, cold: a new jit per row; Warp's
kernels from `~/.cache/warp`, labelled warm or cold) plus one run, reported apart.

Run: `python -m benchmarks.bench_mjx [--device cpu] [--sizes 1 64 1024] [--nstep 100] [--repeats 3]`.
Needs `pip install "jax[cpu]" mujoco-mjx` (diffsim's `jax` extra has JAX, not MJX; mujoco-mjx 3.17
is the newest release and runs with mujoco 4.0). Prints a Markdown table and writes
`benchmarks/results/mjx_<device>.json` after every row. On a 2-core CPU the default sizes take ~7 minutes.

Where diffsim is slower, and why (measured figures: `benchmarks/results/cpu.md`, mjx section):
  - Not the adjoint: diffsim's gradient costs ~(1 + 2 nz) = 11 MJWarp steps per step (nz = 2 nv +
    na + nu = 5 on cart-pole), about 11x its own forward at many worlds (less at 1 world, where
    launch overhead dominates and the lanes ride in the same launches), near MJX's own gradient /
    forward ratio.
  - It is the forward step itself: MJWarp on the CPU runs fewer world-steps/s than MJX,
    because Warp runs each CPU kernel launch single-threaded (a loop over the launch's threads) and
    an MJWarp step is many small launches, whereas XLA fuses MJX's vmapped step into a few
    vectorized loops and can spread them over both cores. That slower step, times 11 lanes, makes
    the gradient slower.
  - diffsim targets the GPU, where the 11 x nworld lanes of a step run in parallel in one captured
    graph; run this file with `--device cuda:0` there (JAX stays on its own default device, named in
    the `jax_device` field) for the comparison that matters to diffsim's goal.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import mujoco
import numpy as np
import warp as wp

import diffsim

from .bench_rollout import _graph, _wall, controls, gradient_fn
from .save import write_json
from .timing import alternate, cpus, pinned, spread

def mjx_case(mjm: mujoco.MjModel, u: np.ndarray) -> dict:
  """MJX forward and gradient of the final-state loss, batched over worlds with `vmap`: compiled
  and run once; returns the results and the two calls to time."""
  import jax
  import jax.numpy as jnp
  from mujoco import mjx

  m = mjx.put_model(mjm)
  d0 = mjx.make_data(m)

  def final_qpos(ctrl):  # (nstep, nu) -> (nq,)
    def step(d, c):
      return mjx.step(m, d.replace(ctrl=c)), None

    d, _ = jax.lax.scan(step, d0, ctrl)
    return d.qpos

  def loss(ctrl):
    return jnp.sum(final_qpos(ctrl) ** 2)

  fwd = jax.jit(jax.vmap(final_qpos))
  grad = jax.jit(jax.vmap(jax.grad(loss)))
  uj = jnp.asarray(u)

  t = time.perf_counter()
  g = np.asarray(grad(uj).block_until_ready())
  qpos = np.asarray(fwd(uj).block_until_ready())
  first_call_s = time.perf_counter() - t
  return {"grad": g, "qpos": qpos, "first_call_s": first_call_s, "device": str(jax.devices()[0].platform),
          "run_grad": lambda: grad(uj).block_until_ready(), "run_fwd": lambda: fwd(uj).block_until_ready()}


def diffsim_case(u: np.ndarray, device) -> dict:
  """diffsim forward and gradient of the same loss, each run eagerly once (compiling), captured;
  returns the results and the two graph replays to time."""
  nworld, nstep, _ = u.shape
  t0 = time.perf_counter()
  scene = diffsim.Scene.from_xml(diffsim.asset_path("cartpole.xml"), nworld=nworld, device=device)
  ctrl = wp.array(u, dtype=float, device=scene.device, requires_grad=True)

  fwd = diffsim.Rollout(scene, nstep, differentiable=False)
  fwd_traj = fwd(ctrl)
  wp.synchronize()
  first_call_s = time.perf_counter() - t0
  replay_fwd = _graph(scene.device, lambda: fwd(ctrl))
  _wall(replay_fwd)
  qpos = fwd_traj.qpos.numpy()[:, nstep]  # the replay rewrote the same buffers

  def captured_gradient(ro):
    """The gradient through `ro`, run eagerly once, then captured; returns (its replay, the gradient)."""
    gradient = gradient_fn(ro, ctrl)
    gradient()
    wp.synchronize()
    replay = _graph(scene.device, gradient)
    _wall(replay)
    return replay, ctrl.grad.numpy().copy()  # a copy: on the CPU .numpy() is a view of ctrl.grad

  t1 = time.perf_counter()
  ro = diffsim.Rollout(scene, nstep, gradient="finite_difference")  # central differences, the default
  replay_grad, grad = captured_gradient(ro)  # the eager call compiles the Jacobian and adjoint kernels
  first_call_s += time.perf_counter() - t1
  # forward differences: 1 + nx + nu lanes instead of 1 + 2 (nx + nu), less precise (README, gradient quality)
  ro_fd = diffsim.Rollout(scene, nstep, central=False, gradient="finite_difference")
  replay_grad_fd, grad_fd = captured_gradient(ro_fd)
  return {"grad": grad, "grad_fd": grad_fd, "qpos": qpos, "first_call_s": first_call_s, "device": str(scene.device),
          "nlane": ro.fd.nlane, "nlane_fd": ro_fd.fd.nlane, "run_grad": replay_grad, "run_grad_fd": replay_grad_fd,
          "run_fwd": replay_fwd}


def bench_case(nworld: int, nstep: int, device, repeats: int, ncpu: int | None = None) -> dict:
  """One row: both gradients and forwards at `nworld` worlds, every thread of this process pinned to
  `ncpu` CPUs (`None`: all of them; see `timing.pinned`)."""
  mjm = mujoco.MjModel.from_xml_path(diffsim.asset_path("cartpole.xml"))
  u = controls(mjm, nworld, nstep)
  with pinned(ncpu):
    ds = diffsim_case(u, device)
    mx = mjx_case(mjm, u)
    # interleaved, so that a load spike from other processes hits both sides alike
    times = alternate({"ds_grad": ds["run_grad"], "mx_grad": mx["run_grad"], "ds_fwd": ds["run_fwd"],
                       "mx_fwd": mx["run_fwd"], "ds_grad_fd": ds["run_grad_fd"]}, repeats=repeats, sync=wp.synchronize)
  ds["grad_s"], mx["grad_s"], ds["fwd_s"], mx["fwd_s"], ds["grad_fd_s"] = (float(np.median(times[k])) for k in times)
  ratio = lambda a, b: float(np.median(np.array(times[a]) / np.array(times[b])))  # per-pair, then median
  err = lambda g: float(np.linalg.norm(g - mx["grad"]) / max(np.linalg.norm(mx["grad"]), 1e-30))
  rel = err(ds["grad"])
  qpos_err = float(np.abs(ds["qpos"] - mx["qpos"]).max())
  ws = nworld * nstep
  return {
    "model": "cartpole", "nworld": nworld, "nstep": nstep, "device": ds["device"], "jax_device": mx["device"],
    "cores": len(cpus()) if ncpu is None else ncpu, "nlane": ds["nlane"],
    "mjx_fwd_s": mx["fwd_s"], "mjx_fwd_wsps": ws / mx["fwd_s"], "mjx_grad_s": mx["grad_s"],
    "diffsim_fwd_s": ds["fwd_s"], "diffsim_fwd_wsps": ws / ds["fwd_s"], "diffsim_grad_s": ds["grad_s"],
    "grad_ratio": ratio("ds_grad", "mx_grad"), "fwd_ratio": ratio("ds_fwd", "mx_fwd"),
    "repeats": len(times["ds_grad"]), "spread": {k: spread(v) for k, v in times.items()},
    "grad_rel_err": rel, "final_qpos_max_abs_diff": qpos_err,
    "nlane_fd": ds["nlane_fd"], "diffsim_grad_fd_s": ds["grad_fd_s"], "grad_fd_ratio": ratio("ds_grad_fd", "mx_grad"),
    "grad_fd_rel_err": err(ds["grad_fd"]),
    "mjx_first_call_s": mx["first_call_s"], "diffsim_first_call_s": ds["first_call_s"],
  }


def table(rows: list[dict]) -> str:
  head = ("| worlds | steps | cores | MJX fwd (ws/s) | diffsim fwd (ws/s) | MJX grad (s) | diffsim grad (s) | "
          "diffsim / MJX (grad) | grad rel. err | forward differences: diffsim / MJX (grad), rel. err | "
          "runs, largest spread | first call MJX / diffsim (s), caches |")
  lines = [head, "|" + "---|" * 12]
  for r in rows:
    sp = max(r["spread"].values()) if "spread" in r else None
    lines.append(
      f"| {r['nworld']} | {r['nstep']} | {r.get('cores', '?')} | {r['mjx_fwd_wsps']:.3g} | {r['diffsim_fwd_wsps']:.3g} | "
      f"{r['mjx_grad_s']:.3g} | {r['diffsim_grad_s']:.3g} | {r['grad_ratio']:.2f} | {r['grad_rel_err']:.1e} | "
      f"{r['grad_fd_ratio']:.2f}, {r['grad_fd_rel_err']:.1e} | "
      f"{r['repeats']}, {'-' if sp is None else f'{100 * sp:.0f}%'} | "
      f"{r['mjx_first_call_s']:.0f} / {r['diffsim_first_call_s']:.0f}, "
      f"XLA {r.get('xla_cache', '?')} / Warp {r.get('warp_cache', '?')} |")
  return "\n".join(lines)


def versions() -> dict:
  import importlib.metadata as md

  out = {}
  for name in ("mujoco", "mujoco-mjx", "mujoco-warp", "warp-lang", "jax", "jaxlib"):
    try:
      out[name] = md.version(name)
    except md.PackageNotFoundError:
      out[name] = None
  out["cpu_count"] = os.cpu_count()
  return out


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="diffsim's device: cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--sizes", nargs="+", type=int, default=[1, 64, 1024], help="world counts")
  parser.add_argument("--nstep", type=int, default=100)
  parser.add_argument("--repeats", type=int, default=3, help="timed rounds at least (more while the spread is "
                      "above 10%%, up to 3x as many)")
  parser.add_argument("--cores", nargs="+", default=["all", "1"],
                      help="rows per size: every thread pinned to this many CPUs ('all': unpinned)")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  try:
    import jax  # noqa: F401
    from mujoco import mjx  # noqa: F401
  except ImportError as e:  # benchmarks.run reports the section as skipped
    raise ImportError(f"bench_mjx needs JAX and MJX: pip install 'jax[cpu]' mujoco-mjx ({e})") from None
  wp.config.log_level = wp.LOG_WARNING
  wp.init()
  # first calls compare caches: MJX compiles with XLA in this process (no persistent cache: cold);
  # Warp loads kernels from its disk cache when an earlier run left them there (warm)
  cache = wp.config.kernel_cache_dir
  warp_cache = "warm" if cache and os.path.isdir(cache) and os.listdir(cache) else "cold"

  rows = []
  for n in args.sizes:
    for cores in args.cores:
      ncpu = None if cores == "all" else int(cores)
      # a new jit per row: XLA compiles again (cold), Warp loads the kernels the first row compiled
      rows.append({**bench_case(n, args.nstep, args.device, args.repeats, ncpu), "warp_cache": warp_cache,
                   "xla_cache": "cold"})
      warp_cache = "warm"
      print(f"[bench_mjx] {n} worlds, {cores} cores: diffsim {rows[-1]['diffsim_grad_s']:.3g} s, "
            f"MJX {rows[-1]['mjx_grad_s']:.3g} s", file=sys.stderr, flush=True)
    # after every row: a run stopped by a timeout keeps the rows it finished
    write_json(os.path.join(args.out, f"mjx_{rows[0]['device'].replace(':', '')}.json"),
               {"argv": list(argv if argv is not None else sys.argv[1:]), "versions": versions(), "rows": rows})
  print(table(rows))
  return rows


if __name__ == "__main__":
  try:
    main()
  except ImportError as e:
    sys.exit(f"bench_mjx: {e}")
