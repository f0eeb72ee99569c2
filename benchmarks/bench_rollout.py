"""Rollout and gradient throughput, side by side in one run.

For each model and world count it measures, in one process:
  - forward world-steps/s of a diffsim rollout launched from Python (eager) and replayed from a
    captured graph, and of raw `mujoco_warp.step` replayed from a graph on the same `Data`, from
    the same initial state with the same controls (copied into `Data.ctrl` before each step, as any
    MJWarp rollout must). The two graphs are replayed alternately (a load spike from other processes
    hits both) and `fwd_over_raw` is the median of the per-pair time ratios: diffsim's forward
    overhead. Its known parts: one `mjw.forward` after the last step (the final row of
    `sensordata`, ~1/nstep of a step) and two small copy kernels per step (state in, state and
    sensors out to the trajectory arrays);
  - gradient cost: time of forward + Jacobians + backward (captured) divided by the captured
    forward time, and that ratio divided by the number of perturbation lanes (how close the
    finite-difference adjoint comes to its own lower bound of one MJWarp step per lane);
  - `mujoco.rollout` (MuJoCo C, float64) with one thread per CPU this process may use and with
    one thread (diffsim's CPU kernels run on one thread), and raw `mjw.step` and `mujoco.rollout`
    on the model as its MJCF writes it: its own solver tolerance (floored at 1e-6 by MJWarp), where
    diffsim's scene runs to its own (`SolverSettings`, 0 by default, so that all lanes take the same
    path; `tolerance` in each row), which the other columns share;
  - `fwd_spread`: (max - min) / median of the captured forward's repeats;
  - one-time costs, apart from the steady state: `compile_s`, per model, the first forward and
    gradient call minus a second one at 1 world and 2 steps (Warp kernel compilation, or loading
    from `~/.cache/warp`, and MJWarp set-up, in this process); and per row `first_fwd_s` and
    `first_grad_s`, the first eager call (allocation and any one-time cost left, plus one run).
Models: cart-pole, the SO-101 arm, and MJWarp's test humanoid (contact-rich). Gradients that would
need more than `--grad-max-worlds` MJWarp worlds (default 40,000 on CPU) are skipped.

Run: `python -m benchmarks.bench_rollout [--device cpu] [--sizes 1 64 1024] [--nstep 50]`.
Prints a Markdown table and writes `benchmarks/results/rollout_<device>.json` after every row
(temp file, then rename), so an interrupted run keeps the rows it finished.
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

from .save import write_json
from .timing import alternate, spread


def _humanoid() -> str:
  """MJWarp's test humanoid: 27 dofs, 21 motors, contact-rich (feet and body on the floor)."""
  import mujoco_warp

  return os.path.join(os.path.dirname(mujoco_warp.__file__), "test_data", "humanoid", "humanoid.xml")


def _arm5() -> str:
  """bench_sysid's 5-link arm (`mujoco.sysid`'s test arm): limited hinges that it never reaches, contacts
  off, so MJWarp could have constraint rows but has none (what `diffsim.physics` skips the solver for)."""
  from .bench_sysid import ARM_XML

  return ARM_XML


MODELS = {
  "cartpole": lambda: diffsim.asset_path("cartpole.xml"),
  "so101": lambda: diffsim.asset_path("so101", "so101_new_calib.xml"),
  "humanoid": _humanoid,
  "arm5": _arm5,
}


def load_model(model: str) -> mujoco.MjModel:
  """`MODELS[model]` as MuJoCo compiles it (a path or an XML string)."""
  src = MODELS[model]()
  return mujoco.MjModel.from_xml_string(src) if src.lstrip().startswith("<") else mujoco.MjModel.from_xml_path(src)


def _wall(fn) -> float:
  """Wall time of one call of `fn` (s), device work included."""
  t = time.perf_counter()
  fn()
  wp.synchronize()
  return time.perf_counter() - t


def _time(fn, repeats: int) -> float:
  """Median wall time of `fn` (s), after the caller's warm-up: at least `repeats` runs, more while
  their spread is above 10% (`timing.alternate`)."""
  return float(np.median(_alternate({"fn": fn}, repeats)["fn"]))


def _alternate(fns: dict, repeats: int) -> dict[str, list[float]]:
  """Wall times of each function, taking turns each round (`timing.alternate`: at least `repeats`
  rounds, more while a spread is above 10%)."""
  return alternate(fns, repeats=repeats, sync=wp.synchronize)


def _graph(device, fn):
  """`fn` captured once; returns a function that replays it."""
  with wp.ScopedCapture(device=device) as cap:
    fn()
  return lambda: wp.capture_launch(cap.graph)


@wp.kernel
def _final_qpos_loss(qpos: wp.array3d[float], nstep: int, loss: wp.array[float]):
  w, i = wp.tid()
  wp.atomic_add(loss, 0, qpos[w, nstep, i] * qpos[w, nstep, i])


def controls(mjm, nworld: int, nstep: int, seed: int = 0) -> np.ndarray:
  """`(nworld, nstep, nu)` float32 controls in the middle 40% of each control range."""
  rng = np.random.default_rng(seed)
  lo, hi = mjm.actuator_ctrlrange.T
  return (lo + (hi - lo) * rng.uniform(0.3, 0.7, (nworld, nstep, mjm.nu))).astype(np.float32)


def gradient_fn(ro, ctrl: wp.array):
  """One tape gradient of the final-qpos loss through `ro` into `ctrl.grad` (to run or capture)."""
  scene, nstep = ro.scene, ro.nstep
  loss = wp.zeros(1, dtype=float, device=scene.device, requires_grad=True)

  def gradient():
    loss.zero_()
    ctrl.grad.zero_()
    tape = wp.Tape()
    with tape:
      traj = ro(ctrl)
      wp.launch(_final_qpos_loss, dim=(scene.nworld, scene.nq), inputs=[traj.qpos, nstep], outputs=[loss],
                device=scene.device)
    tape.backward(loss)

  return gradient


def raw_mjwarp(scene, u: np.ndarray, mjm: mujoco.MjModel | None = None):
  """Raw MJWarp: from `qpos0` at rest, `u[:, k]` copied into `Data.ctrl` before step `k`, no
  trajectory kept. On the scene's model and one-lane `Data` (the forward rollout's too; both set the
  whole state before they step), or, given `mjm`, on that model as MJWarp's `put_model` makes it
  (the user's solver tolerance, not diffsim's fixed iterations). Returns the function to capture."""
  import mujoco_warp as mjw

  nworld, nstep, nu = u.shape
  model, d = scene.model, scene.data(1)
  if mjm is not None:
    with wp.ScopedDevice(scene.device):
      model = mjw.put_model(mjm)
      d = mjw.put_data(mjm, mujoco.MjData(mjm), nworld=nworld)
  qpos0 = wp.array(np.tile(scene.mjm.qpos0, (nworld, 1)).astype(np.float32), dtype=float, device=scene.device)
  ctrl = wp.array(np.ascontiguousarray(u.transpose(1, 0, 2)), dtype=float, device=scene.device)  # (nstep, nworld, nu)

  def run():
    wp.copy(d.qpos, qpos0)
    for a in (d.qvel, d.act, d.qacc_warmstart, d.time):
      a.zero_()
    for k in range(nstep):
      if nu:
        wp.copy(d.ctrl, ctrl, src_offset=k * nworld * nu, count=nworld * nu)
      mjw.step(model, d)

  return run


def compile_time(model: str, device) -> float:
  """One-time cost of the model's first forward and gradient call in this process (Warp compiles
  its kernels or loads them from `~/.cache/warp`; MJWarp sets up): at 1 world and 2 steps, the
  first call minus a second."""
  scene = diffsim.Scene.from_xml(MODELS[model](), nworld=1, device=device)
  ctrl = wp.array(controls(scene.mjm, 1, 2), dtype=float, device=scene.device, requires_grad=True)
  fwd = diffsim.Rollout(scene, 2, differentiable=False)
  gradient = gradient_fn(diffsim.Rollout(scene, 2), ctrl)

  def both():
    fwd(ctrl)
    gradient()

  first = _wall(both)
  return max(first - _wall(both), 0.0)


def bench_case(model: str, nworld: int, nstep: int, device: str, repeats: int,
               grad_max_worlds: int | None = None) -> dict:
  """One row. The gradient is skipped (None) where its `nlane * nworld` MJWarp worlds exceed
  `grad_max_worlds` (memory and time on small machines)."""
  import mujoco.rollout

  scene = diffsim.Scene.from_xml(MODELS[model](), nworld=nworld, device=device)
  u = controls(scene.mjm, nworld, nstep)
  ctrl = wp.array(u, dtype=float, device=scene.device, requires_grad=True)

  fwd = diffsim.Rollout(scene, nstep, differentiable=False)
  first_fwd = _wall(lambda: fwd(ctrl))
  eager = _time(lambda: fwd(ctrl), repeats)
  replay_fwd = _graph(scene.device, lambda: fwd(ctrl))
  replay_raw = _graph(scene.device, raw_mjwarp(scene, u))
  # the model as its MJCF writes it: diffsim's scene solves to its own tolerance (so that all lanes
  # take the same path); a user's own MJWarp or MuJoCo loop stops at the model's
  user = load_model(model)
  replay_user = _graph(scene.device, raw_mjwarp(scene, u, user))
  times = _alternate({"fwd": replay_fwd, "raw": replay_raw, "user": replay_user}, max(repeats, 3))
  captured, raw, raw_user = (float(np.median(times[k])) for k in ("fwd", "raw", "user"))
  fwd_over_raw = float(np.median(np.array(times["fwd"]) / np.array(times["raw"])))
  fwd_over_user = float(np.median(np.array(times["fwd"]) / np.array(times["user"])))

  nlane = lane_count(scene)
  grad = first_grad = None
  if grad_max_worlds is None or nlane * nworld <= grad_max_worlds:
    # the lanes (the analytic adjoint, where it covers a model, is timed in bench_adjoint.py)
    ro = diffsim.Rollout(scene, nstep, gradient="finite_difference")  # allocates the nlane * nworld worlds
    assert ro.fd.nlane == nlane
    gradient = gradient_fn(ro, ctrl)
    first_grad = _wall(gradient)
    grad = _time(_graph(scene.device, gradient), repeats)

  # MuJoCo C, float64: one thread, and one thread per CPU this process may use; on diffsim's model
  # (its tolerance) and on the model as written
  nthread = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
  u64 = u.astype(np.float64)
  c_times = {}
  for key, mjm, threads in (("", scene.mjm, nthread), ("_1thread", scene.mjm, 1), ("_user", user, nthread)):
    datas = [mujoco.MjData(mjm) for _ in range(threads)]
    state0 = np.zeros((nworld, mujoco.mj_stateSize(mjm, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
    mujoco.mj_getState(mjm, datas[0], state0[0], mujoco.mjtState.mjSTATE_FULLPHYSICS)
    state0[:] = state0[0]
    mujoco.rollout.rollout(mjm, datas, state0, u64)
    c_times[key] = _time(lambda: mujoco.rollout.rollout(mjm, datas, state0, u64), repeats)

  ws = nworld * nstep
  return {
    "model": model, "nworld": nworld, "nstep": nstep, "device": str(scene.device), "nlane": nlane,
    "tolerance": scene.tolerance, "lane_tolerance": scene.lane_tolerance,
    "fwd_eager_wsps": ws / eager, "fwd_captured_wsps": ws / captured, "mjw_step_captured_wsps": ws / raw,
    "mjw_step_user_wsps": ws / raw_user,
    "mujoco_rollout_wsps": ws / c_times[""], "mujoco_rollout_nthread": nthread,
    "mujoco_rollout_1thread_wsps": ws / c_times["_1thread"], "mujoco_rollout_user_wsps": ws / c_times["_user"],
    "grad_s": grad, "fwd_s": captured, "raw_s": raw, "fwd_over_raw": fwd_over_raw, "fwd_over_user": fwd_over_user,
    "fwd_spread": spread(times["fwd"]), "fwd_repeats": len(times["fwd"]),
    "grad_over_fwd": None if grad is None else grad / captured,
    "grad_over_fwd_per_lane": None if grad is None else grad / captured / nlane,
    "first_fwd_s": first_fwd, "first_grad_s": first_grad,
  }


def lane_count(scene) -> int:
  """Perturbation lanes of a default differentiable `Rollout` (central differences over the state
  and the controls, plus the qpos guard lanes of a model with position constraints)."""
  return 1 + 2 * (scene.nx + scene.nu) + (2 * scene.nv if scene.has_position_constraints else 0)


def bench_determinism(model: str, nworld: int, nstep: int, device: str, repeats: int) -> dict:
  """Captured forward and gradient time with `diffsim.set_deterministic` off and on, and whether two
  replays give bitwise equal trajectories and gradients (on the CPU they always do: its kernels run
  sequentially). `ncon` counts the contacts of the last step over all worlds (MJWarp orders contacts
  and constraint rows racily on the GPU)."""
  out = {"model": model, "nworld": nworld, "nstep": nstep}
  for flag in (False, True):
    diffsim.set_deterministic(flag)
    try:
      scene = diffsim.Scene.from_xml(MODELS[model](), nworld=nworld, device=device)
      u = controls(scene.mjm, nworld, nstep)
      ctrl = wp.array(u, dtype=float, device=scene.device, requires_grad=True)
      fwd = diffsim.Rollout(scene, nstep, differentiable=False)
      traj = fwd(ctrl)  # eager first: compiles
      replay_fwd = _graph(scene.device, lambda: fwd(ctrl))
      gradient = gradient_fn(diffsim.Rollout(scene, nstep, gradient="finite_difference"), ctrl)
      gradient()
      replay_grad = _graph(scene.device, gradient)
      key = "on" if flag else "off"
      runs = []
      for _ in range(2):
        replay_fwd()
        replay_grad()
        wp.synchronize()
        runs.append((traj.qpos.numpy().copy(), traj.sensordata.numpy().copy(), ctrl.grad.numpy().copy()))
      out[f"ncon_{key}"] = int(scene.data(1).nacon.numpy().sum())
      out[f"fwd_bitwise_{key}"] = all(np.array_equal(a, b) for a, b in zip(runs[0][:2], runs[1][:2]))
      out[f"grad_bitwise_{key}"] = bool(np.array_equal(runs[0][2], runs[1][2]))
      out[f"fwd_s_{key}"] = _time(replay_fwd, repeats)
      out[f"grad_s_{key}"] = _time(replay_grad, repeats)
      out["device"] = str(scene.device)
    finally:
      diffsim.set_deterministic(False)
  out["fwd_cost"] = out["fwd_s_on"] / out["fwd_s_off"]
  out["grad_cost"] = out["grad_s_on"] / out["grad_s_off"]
  return out


def determinism_table(rows: list[dict]) -> str:
  head = ("| model | worlds | steps | contacts (last step) | fwd on / off | grad on / off | bitwise repeat off: "
          "fwd, grad | on: fwd, grad |")
  lines = [head, "|" + "---|" * 8]
  yes = lambda b: "yes" if b else "no"
  for r in rows:
    lines.append(f"| {r['model']} | {r['nworld']} | {r['nstep']} | {r['ncon_on']} | {r['fwd_cost']:.2f}x | "
                 f"{r['grad_cost']:.2f}x | {yes(r['fwd_bitwise_off'])}, {yes(r['grad_bitwise_off'])} | "
                 f"{yes(r['fwd_bitwise_on'])}, {yes(r['grad_bitwise_on'])} |")
  return "\n".join(lines)


def _fmt(x, spec: str) -> str:
  return "skipped" if x is None else format(x, spec)


def table(rows: list[dict]) -> str:
  head = ("| model | worlds | steps | fwd eager (ws/s) | fwd captured (ws/s) | raw mjw.step (ws/s) | captured / raw "
          "(time) | raw mjw.step, model as written (ws/s) | captured / as written (time) | mujoco.rollout "
          "(ws/s): all threads, 1 thread, as written | captured / mujoco.rollout | grad / fwd | grad / fwd / lanes | "
          "lanes | fwd spread | compile (s) |")
  lines = [head, "|" + "---|" * 16]
  g = lambda r, k: _fmt(r.get(k), ".3g")
  for r in rows:
    lines.append(
      f"| {r['model']} | {r['nworld']} | {r['nstep']} | {r['fwd_eager_wsps']:.3g} | {r['fwd_captured_wsps']:.3g} | "
      f"{r['mjw_step_captured_wsps']:.3g} | {r['fwd_over_raw']:.2f} | {g(r, 'mjw_step_user_wsps')} | "
      f"{_fmt(r.get('fwd_over_user'), '.2f')} | {r['mujoco_rollout_wsps']:.3g} ({r['mujoco_rollout_nthread']}), "
      f"{g(r, 'mujoco_rollout_1thread_wsps')}, {g(r, 'mujoco_rollout_user_wsps')} | "
      f"{r['fwd_captured_wsps'] / r['mujoco_rollout_wsps']:.2f} | {_fmt(r['grad_over_fwd'], '.1f')} | "
      f"{_fmt(r['grad_over_fwd_per_lane'], '.2f')} | {r['nlane']} | {_fmt(r.get('fwd_spread'), '.2f')} | "
      f"{_fmt(r.get('compile_s'), '.1f')} |")
  lines.append("")
  tol, lane_tol = rows[0].get("tolerance", 0.0), rows[0].get("lane_tolerance", rows[0].get("tolerance", 0.0))
  lanes = ("" if lane_tol == tol else f"; the perturbation lanes run at {lane_tol:g}, so that they all take their "
           "nominal world's path")
  lines.append(f"As written: the MJCF's own solver tolerance; the other columns run diffsim's forward (tolerance "
               f"{tol:g}{lanes}). fwd spread: (max - min) / median of the captured forward's repeats.")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
  parser.add_argument("--sizes", nargs="+", type=int, default=[1, 64, 1024], help="world counts")
  parser.add_argument("--nstep", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--grad-max-worlds", type=int, default=None,
                      help="skip gradients needing more MJWarp worlds (lanes x worlds); default: 40,000 on CPU")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  from tqdm import tqdm

  cap = args.grad_max_worlds
  if cap is None and wp.get_device(args.device).is_cpu:
    cap = 40_000
  argv_saved = sys.argv[1:] if argv is None else list(argv)
  rows = []
  with tqdm(total=len(args.models) * len(args.sizes), desc="benchmarks") as bar:
    for m in args.models:
      compile_s = compile_time(m, args.device)
      for n in args.sizes:
        rows.append({**bench_case(m, n, args.nstep, args.device, args.repeats, cap), "compile_s": compile_s})
        device = rows[0]["device"].replace(":", "")
        write_json(os.path.join(args.out, f"rollout_{device}.json"), {"argv": argv_saved, "rows": rows})
        bar.update()
  print(table(rows))
  return rows


if __name__ == "__main__":
  main()
