"""Scale-out with Ray (`diffsim.distributed`): 1 vs 2 workers on one machine, side by side in one run.

One diffsim process uses one CPU core (Warp runs each CPU kernel on one thread); Ray actors give the
others. One `Cluster` of `--workers` (2) workers runs each job on 1 worker (all worlds on worker 0)
and on all of them (a contiguous shard each), and this process runs it without Ray (`local`: what
the actors add), the three taking turns in each of `--repeats` rounds (a load spike from other
processes hits all three); reported: the median wall time of each and `speedup`, the median of the
per-round ratios 1 worker / all workers (the issue's target on 2 cores: 1.6x). Each configuration's
first call (the workers build the scene or problem, load the kernels from `~/.cache/warp`, capture
the graphs, then run the job) is timed apart (`first_s`), not in the medians. Jobs:

  - gradient: the tape gradient of a quadratic cost of 1,024 cart-pole worlds over 100 steps with
    respect to the controls and initial states (`Cluster.rollout(..., trajectory=False)`: the
    controls and initial states go out, the costs and gradients come back; each worker, and this
    process, replays the call as a captured graph);
  - trajopt: iLQR on 64 SO-101 reach worlds (tutorial 03 at bench_trajopt's CPU size: 0.3 s in
    10 ms steps), `--iters` (10) iterations (`ftol=0`: every run does the same work). Shard k draws
    its worlds' starts and targets with the seed of its first world, so the runs solve different
    draws of the same distribution; the success rate (end effector within 1 cm) is reported.

  - sysid: Levenberg-Marquardt on bench_sysid's smooth armature problem (issue 27's bar: 64
    recordings of its 5-link arm, 500 steps, the armatures of the 5 joints from the truth times
    1.3), the recordings split between the workers (`cluster.identify`: each worker builds the
    problem of its recordings once, then linearizes at the unknowns the driver sends; the driver
    sums the normal equations and solves), `--sysid-jacobian` (`auto`, the default), `--sysid-iters`
    (30) at most; beside `mujoco.sysid` on the same data (bench_sysid's `run_mujoco_sysid`) on all
    cores and pinned to one, both joining the rounds (`sysid_s`, `sysid_1core_s`; `speedup_vs_sysid`:
    the median of the per-round ratios mujoco.sysid / all workers, `speedup_1_vs_sysid_1core`:
    mujoco.sysid on one core / 1 worker, whose Warp runs on one core). `local`
    is bench_sysid's `run_diffsim`: the whole call, the problem built each time, where the workers
    keep theirs between calls (their first call builds it: `first_s`).

  - sysid_limits (`--jobs sysid_limits`, not by default): the same on bench_sysid's limits problem
    (issue 35's bar: 32 recordings of 500 steps, every fourth driven onto a joint limit, the 5
    armatures from 0.01 within [0.001, 1]), `--sysid-iters` at most (give 50, as bench_sysid does).

Bytes crossing per call (`Traffic`: the pickled sizes of what goes to the workers and comes back,
Ray's own control messages not counted), and for the gradient also with the trajectory sent back;
for trajopt per iteration (nothing crosses while the solvers iterate); for sysid per LM iteration (one
linearization: the unknowns out, the normal-equation blocks back), and the first call's shipment of
the model and the recordings.

Run: `python -m benchmarks.bench_distributed [--repeats 5] [--workers 2] [--jobs ...] [--merge] [--quick]`.
Writes `benchmarks/results/distributed_<device>.{json,md}` after every job (`--merge`: keeping the rows
of the jobs not run). `--quick`: 16 cart-pole worlds over 10 steps, 4 reach worlds over 0.05 s and 4
arm recordings of 20 steps, 2 iterations, 1 repeat (checks that it runs).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

from .save import write_json

_TUTORIALS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tutorials")
SIZES = {"gradient": (1024, 100), "trajopt": (64, 0.3), "sysid": (64, 500),  # worlds and steps (trajopt: horizon, s)
         "sysid_limits": (32, 500)}
QUICK = {"gradient": (16, 10), "trajopt": (4, 0.05), "sysid": (4, 20), "sysid_limits": (4, 200)}
JOBS = ("gradient", "trajopt", "sysid", "sysid_limits")


def _tutorial(name: str):
  spec = importlib.util.spec_from_file_location(f"tutorial_{name}", os.path.join(_TUTORIALS, f"{name}.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def reach(worlds: range, device: str, duration: float = 0.3):
  """Tutorial 03's reach for the worlds `worlds` (10 ms steps), drawn with the seed `worlds.start`."""
  problem, _ = _tutorial("03_so101_reach").reach_problem(nworld=len(worlds), duration=duration, timestep=0.01,
                                                         seed=worlds.start, device=device)
  return problem


def reach_success(result, nworld: int, duration: float, shard_starts) -> float:
  """Fraction of worlds whose end effector ends within 1 cm of its target (targets redrawn as `reach`)."""
  tut = _tutorial("03_so101_reach")
  bounds = list(shard_starts) + [nworld]
  targets = []
  for a, b in zip(bounds[:-1], bounds[1:]):
    _, t = tut.reach_problem(nworld=b - a, duration=duration, timestep=0.01, seed=a, device="cpu")
    targets.append(t)
  site = result.trajectory.sensordata.numpy()[:, -1, :3]  # the framepos sensor of the site
  return float(np.mean(np.linalg.norm(site - np.concatenate(targets), axis=1) < 0.01))


def _cost():
  from diffsim.losses import CtrlCost, QposCost, QvelCost

  return [QposCost([0.0, np.pi], running=1.0, terminal=[1.0, 100.0]), QvelCost(0.0, running=0.1), CtrlCost(0.1)]


def _gradient_inputs(nworld: int, nstep: int):
  rng = np.random.default_rng(0)
  ctrl = rng.uniform(-1.0, 1.0, (nworld, nstep, 1)).astype(np.float32)
  qpos0 = np.zeros((nworld, 2), np.float32)
  qpos0[:, 1] = rng.uniform(-0.1, 0.1, nworld)
  return ctrl, qpos0


def local_gradient(model: str, ctrl: np.ndarray, qpos0: np.ndarray):
  """The same gradient in this process, without Ray, captured as a worker captures it: returns a
  function of no arguments that copies the controls in, replays the graph and reads the costs and
  gradients back."""
  import warp as wp

  import diffsim

  nworld, nstep, _ = ctrl.shape
  scene = diffsim.Scene.from_xml(model, nworld=nworld, device="cpu")
  ro = diffsim.Rollout(scene, nstep)
  cost = diffsim.losses.Cost(scene, nstep, _cost())
  u = wp.zeros(ctrl.shape, dtype=float, device="cpu", requires_grad=True)
  q = wp.zeros(qpos0.shape, dtype=float, device="cpu", requires_grad=True)
  v = wp.zeros(qpos0.shape, dtype=float, device="cpu", requires_grad=True)
  out = wp.zeros(nworld, dtype=float, device="cpu", requires_grad=True)
  out.grad = wp.ones(nworld, dtype=float, device="cpu")

  def gradient():
    for a in (u, q, v):
      a.grad.zero_()
    tape = wp.Tape()
    with tape:
      traj = ro(u, qpos0=q, qvel0=v)
      cost.evaluate(traj, out)
    tape.backward()

  u.assign(ctrl)
  q.assign(qpos0)
  gradient()  # eagerly first: loads the kernels
  with wp.ScopedCapture(device="cpu") as cap:
    gradient()

  def run():
    u.assign(ctrl)
    q.assign(qpos0)
    wp.capture_launch(cap.graph)
    return out.numpy().copy(), u.grad.numpy().copy()

  return run


def _wall(fn) -> float:
  t = time.perf_counter()
  fn()
  return time.perf_counter() - t


def _rounds(fns: dict, repeats: int) -> dict[str, list[float]]:
  """Wall times of each function over `repeats` rounds, taking turns (order reversed every other round)."""
  times = {k: [] for k in fns}
  for r in range(repeats):
    for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
      times[k].append(_wall(fns[k]))
  return times


def _summary(times: dict, first: dict) -> dict:
  med = {k: float(np.median(v)) for k, v in times.items()}
  ratios = np.array(times["1"]) / np.array(times["all"])
  return {"local_s": med["local"], "one_worker_s": med["1"], "all_workers_s": med["all"],
          "speedup": float(np.median(ratios)), "speedup_runs": ratios.tolist(),
          "times_s": times, "first_s": first,
          "spread": {k: float((max(v) - min(v)) / np.median(v)) for k, v in times.items()}}


def bench_gradient(cluster, nworld: int, nstep: int, repeats: int) -> dict:
  import diffsim

  model = diffsim.asset_path("cartpole.xml")
  ctrl, qpos0 = _gradient_inputs(nworld, nstep)
  cost = _cost()
  call = {"1": lambda: cluster.rollout(model, ctrl, qpos0=qpos0, cost=cost, trajectory=False, workers=1),
          "all": lambda: cluster.rollout(model, ctrl, qpos0=qpos0, cost=cost, trajectory=False)}
  first, traffic, grads = {}, {}, {}
  t = time.perf_counter()
  local = local_gradient(model, ctrl, qpos0)
  grads["local"] = local()[1]
  first["local"] = time.perf_counter() - t
  for k, fn in call.items():
    t = time.perf_counter()
    res = fn()
    first[k] = time.perf_counter() - t
    traffic[k] = res.traffic
    grads[k] = res.grad["ctrl"]
  times = _rounds({"local": local, **call}, repeats)
  full = cluster.rollout(model, ctrl, qpos0=qpos0, cost=cost).traffic  # with the trajectory sent back
  return {
    "job": "gradient", "model": "cartpole", "nworld": nworld, "nstep": nstep, "workers": cluster.workers,
    **_summary(times, first),
    "bytes_sent": traffic["all"].sent, "bytes_received": traffic["all"].received,
    "bytes_sent_1": traffic["1"].sent, "bytes_received_1": traffic["1"].received,
    "bytes_received_with_trajectory": full.received,
    "input_bytes": ctrl.nbytes + qpos0.nbytes,
    "grad_equal_local": all(np.array_equal(grads[k], grads["local"]) for k in ("1", "all")),
  }


def bench_trajopt(cluster, nworld: int, duration: float, iters: int, repeats: int) -> dict:
  import functools

  import diffsim
  from diffsim.distributed.cluster import shards

  make = functools.partial(reach, duration=duration)
  kw = dict(maxiter=iters, ftol=0.0)
  call = {"1": lambda: cluster.optimize_trajectory(make, nworld, "ilqr", workers=1, **kw),
          "all": lambda: cluster.optimize_trajectory(make, nworld, "ilqr", **kw)}
  first, traffic, results = {}, {}, {}
  t = time.perf_counter()
  problem = reach(range(nworld), "cpu", duration)
  local = lambda: diffsim.optimize_trajectory(problem, "ilqr", progress=False, **kw)
  results["local"] = local()
  first["local"] = time.perf_counter() - t
  for k, fn in call.items():
    t = time.perf_counter()
    results[k] = fn()
    first[k] = time.perf_counter() - t
    traffic[k] = cluster.last_traffic
  times = _rounds({"local": local, **call}, repeats)
  res = results["all"]
  starts = [w.start for w in shards(nworld, cluster.workers)]
  return {
    "job": "trajopt", "model": "so101_reach", "nworld": nworld, "nstep": problem.horizon, "workers": cluster.workers,
    "method": "ilqr", "nit": res.nit, **_summary(times, first),
    "bytes_sent": traffic["all"].sent, "bytes_received": traffic["all"].received,
    "bytes_per_iter": traffic["all"].total / max(res.nit, 1),
    "bytes_sent_1": traffic["1"].sent, "bytes_received_1": traffic["1"].received,
    "success_rate": reach_success(res, nworld, duration, starts),
    "success_rate_1": reach_success(results["1"], nworld, duration, [0]),
    "local_equals_1_worker": bool(np.array_equal(results["local"].x, results["1"].x)),
  }


def _spin(n: int) -> float:
  t = time.perf_counter()
  s = 0
  for i in range(n):
    s += i
  return time.perf_counter() - t


def parallel_capacity(n: int = 10_000_000) -> float:
  """The CPUs this machine gives two busy processes right now: `2 t1 / t2`, where `t1` is a pure-Python
  loop's time alone and `t2` the time of two at once in two forked processes (2.0 on two idle cores;
  about 1 where other sessions keep one core busy). Measured beside a scale-out row, whose 2-worker
  figures mean little where it is near 1."""
  import multiprocessing as mp

  one = min(_spin(n) for _ in range(2))
  ctx = mp.get_context("fork")
  t = time.perf_counter()
  procs = [ctx.Process(target=_spin, args=(n,)) for _ in range(2)]
  for p in procs:
    p.start()
  for p in procs:
    p.join()
  return float(2.0 * one / (time.perf_counter() - t))


def bench_sysid(cluster, ntraj: int, steps: int, iters: int, repeats: int, jacobian: str = "auto",
                tolerance: float | None = None, limits: bool = False) -> dict:
  import warnings

  from diffsim import SolverSettings, sysid

  from . import bench_sysid as bs

  prob = bs.Problem(ntraj, steps, ("armature",), limits=limits)
  guess, recs, names, bounds = bs.identify_inputs(prob)  # as bench_sysid's run_diffsim gives them
  settings = None if tolerance is None else SolverSettings(tolerance=tolerance)
  kw = dict(bounds=bounds, normalize="recording", maxiter=iters, device="cpu", jacobian=jacobian,
            progress=False, solver_settings=settings)
  calls = []  # (what, Traffic) of every map the driver makes
  plain_map = cluster.map

  def logged(job, args, **kwargs):
    out = plain_map(job, args, **kwargs)
    calls.append((kwargs.get("what", ""), cluster.last_traffic))
    return out

  def on_cluster(n):
    def run():
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", sysid.IdentifiabilityWarning)
        return cluster.identify(guess, recs, names, workers=n, **kw)
    return run

  call = {"local": lambda: bs.run_diffsim(prob, iters, "cpu", jacobian, settings), "1": on_cluster(1),
          "all": on_cluster(None),
          "sysid": lambda: bs.run_mujoco_sysid(prob, iters),
          "sysid_1core": lambda: bs._pinned_call(1, bs.run_mujoco_sysid, prob, iters)}
  first, results = {}, {}
  cluster.map = logged
  try:
    for k, fn in call.items():
      del calls[:]
      t = time.perf_counter()
      results[k] = fn()
      first[k] = time.perf_counter() - t
      if k == "all":
        first_calls = list(calls)
    del calls[:]
    results["all"] = call["all"]()  # a warm call: what crosses per iteration once the workers hold the problem
    warm_calls = list(calls)
    capacity = [parallel_capacity()]
    times = _rounds(call, repeats)
    capacity.append(parallel_capacity())
  finally:
    del cluster.map  # back to the class's method
  lin = [t for what, t in warm_calls if what.startswith("sysid linearize")]
  shipped = sum(t.total for what, t in first_calls) - sum(t.total for what, t in warm_calls)
  res, one = results["all"], results["1"]
  theta = lambda r: np.asarray(r["theta"] if isinstance(r, dict) else r.theta)
  row = {
    "job": "sysid_limits" if limits else "sysid", "model": "arm5", "at_limit": sum(1 for a in prob.at_limit if a), "nworld": ntraj, "nstep": steps, "workers": cluster.workers, "jacobian": jacobian,
    "nit": res.nit, "nfev": res.nfev, **_summary(times, first),
    "sysid_s": float(np.median(times["sysid"])),
    "speedup_vs_sysid": float(np.median(np.array(times["sysid"]) / np.array(times["all"]))),
    "speedup_vs_sysid_1": float(np.median(np.array(times["sysid"]) / np.array(times["1"]))),
    "sysid_1core_s": float(np.median(times["sysid_1core"])),
    "speedup_1_vs_sysid_1core": float(np.median(np.array(times["sysid_1core"]) / np.array(times["1"]))),
    "params": "armature", "sim_worlds": int(res.sim_worlds), "z": float(np.max(np.abs(res.theta - prob.truth)
                                                                                / res.theta_std)),
    "success": bool(res.success),
    "parallel_capacity": capacity,  # CPUs two busy processes got, before and after the rounds
    "sysid_nit": results["sysid"]["nit"], "sysid_err": prob.rel_error(theta(results["sysid"])),
    "err": prob.rel_error(res.theta), "err_1": prob.rel_error(one.theta),
    "err_local": prob.rel_error(theta(results["local"])),
    "max_rel_diff_x_all_vs_1": float(np.max(np.abs(res.theta / one.theta - 1.0))),
    "max_rel_diff_x_1_vs_local": float(np.max(np.abs(one.theta / theta(results["local"]) - 1.0))),
    "bytes_per_iter": float(np.median([t.total for t in lin])) if lin else 0.0,
    "bytes_sent_per_iter": float(np.median([t.sent for t in lin])) if lin else 0.0,
    "bytes_received_per_iter": float(np.median([t.received for t in lin])) if lin else 0.0,
    "bytes_sent": sum(t.sent for _, t in warm_calls), "bytes_received": sum(t.received for _, t in warm_calls),
    "bytes_shipped_first_call": shipped,
    "input_bytes": int(prob.ctrl.nbytes + prob.sensordata.nbytes),
  }
  return row


def _kb(n: float) -> str:
  return f"{n / 1024:.0f} KiB" if n >= 10 * 1024 else f"{n / 1024:.1f} KiB"


def table(rows: list[dict]) -> str:
  head = ("| job | worlds | steps | no Ray (s) | 1 worker (s) | {w} workers (s) | speedup, {w} vs 1 | one-time: "
          "1, {w} (s) | bytes out, back per call | per iteration |")
  w = rows[0]["workers"] if rows else 2
  lines = [head.format(w=w), "|" + "---|" * 10]
  for r in rows:
    per_iter = _kb(r["bytes_per_iter"]) if "bytes_per_iter" in r else "-"
    back = _kb(r["bytes_received"])
    if "bytes_received_with_trajectory" in r:
      back += f" ({_kb(r['bytes_received_with_trajectory'])} with the trajectory)"
    job = r["job"]
    if job == "trajopt":
      job += f" (iLQR, {r['nit']} it, success {100 * r['success_rate']:.0f}%)"
    if job.startswith("sysid"):
      if r.get("at_limit"):
        job += f", {r['at_limit']} of {r['nworld']} recordings at the limits"
      job += (f" (LM {r['jacobian']}, {r['nit']} it; mujoco.sysid {r['sysid_s']:.2f} s: {r['speedup_vs_sysid']:.2f}x "
              f"with {r['workers']} workers, {r['speedup_vs_sysid_1']:.2f}x with 1")
      if "sysid_1core_s" in r:
        job += (f"; mujoco.sysid on 1 core {r['sysid_1core_s']:.2f} s: {r['speedup_1_vs_sysid_1core']:.2f}x with 1 "
                f"worker; max rel. error {r['err']:.1e}, diffsim {r['sim_worlds']} worlds")
      if "parallel_capacity" in r:
        job += f"; CPUs free for 2 processes: {', '.join(f'{c:.1f}' for c in r['parallel_capacity'])} before, after"
      job += ")"
    # the first call's extra time over a warm one: build, kernel load, graph capture
    warm = {"1": r["one_worker_s"], "all": r["all_workers_s"]}
    first = ", ".join(f"{max(r['first_s'][k] - warm[k], 0.0):.1f}" for k in ("1", "all"))
    lines.append(f"| {job} | {r['nworld']} | {r['nstep']} | {r['local_s']:.3f} | {r['one_worker_s']:.3f} | "
                 f"{r['all_workers_s']:.3f} | {r['speedup']:.2f}x | {first} | {_kb(r['bytes_sent'])}, {back} | "
                 f"{per_iter} |")
  lines.append("")
  start_s = rows[0].get("cluster_start_s") if rows else None
  start = "" if start_s is None else f" Ray and its {w} workers started in {start_s:.1f} s."
  lines.append("Medians of the rounds (the three take turns); speedup: the median of the per-round ratios. One-time: "
               "the first call's extra time over a warm one (the workers build the scene or problem, load the kernels, "
               "capture the graphs; excluded from the medians). Bytes: pickled sizes of what crossed between this "
               f"process and the workers (Ray's control messages not counted).{start}")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--jobs", nargs="+", default=["gradient", "trajopt", "sysid"], choices=list(JOBS),
                      help="sysid_limits: bench_sysid's limits problem (32 recordings of 500 steps, every fourth "
                           "driven onto a joint limit, armatures from 0.01; issue 35's bar), not run by default")
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--iters", type=int, default=10, help="iLQR iterations of the trajopt job")
  parser.add_argument("--sysid-iters", type=int, default=30, help="most LM iterations of the sysid job")
  parser.add_argument("--sysid-jacobian", default="auto", choices=["auto", "forward", "directional"])
  parser.add_argument("--sysid-tolerance", type=float, default=None,
                      help="the sysid job's solver tolerance (default: SolverSettings'); results go to a "
                           "_tol<value> file")
  parser.add_argument("--merge", action="store_true",
                      help="keep the rows of the jobs not run from the existing results file (rerun some jobs only)")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args, _ = parser.parse_known_args(argv)  # benchmarks.run passes --nstep/--sizes to every section
  import warp as wp

  import diffsim.distributed as dd

  wp.config.log_level = wp.LOG_WARNING
  sizes = QUICK if args.quick else SIZES
  repeats, iters = (1, 2) if args.quick else (args.repeats, args.iters)
  argv_saved = sys.argv[1:] if argv is None else list(argv)
  rows = []
  name = "distributed" if args.sysid_tolerance is None else f"distributed_tol{args.sysid_tolerance:g}"
  path = os.path.join(args.out, f"{name}_cpu.json")
  if args.merge and os.path.isfile(path):
    import json

    with open(path) as f:
      rows = [r for r in json.load(f)["rows"] if r["job"] not in args.jobs]
  t = time.perf_counter()
  with dd.Cluster(args.workers, device="cpu", timeout=300.0) as cluster:
    start_s = time.perf_counter() - t
    for job in args.jobs:
      print(f"bench_distributed: {job}, {sizes[job][0]} worlds, 1 vs {args.workers} workers", flush=True)
      if job == "gradient":
        row = bench_gradient(cluster, *sizes[job], repeats)
      elif job == "trajopt":
        row = bench_trajopt(cluster, *sizes[job], iters, repeats)
      else:
        row = bench_sysid(cluster, *sizes[job], 2 if args.quick else args.sysid_iters, repeats, args.sysid_jacobian,
                          args.sysid_tolerance, limits=job == "sysid_limits")
        row["solver_tolerance"] = args.sysid_tolerance
      row["cluster_start_s"] = start_s
      row["argv"] = argv_saved
      rows = [r for r in rows if r["job"] != job] + [row]
      rows.sort(key=lambda r: JOBS.index(r["job"]))
      write_json(path, {"argv": argv_saved, "rows": rows})
      md = os.path.join(args.out, f"{name}_cpu.md")
      with open(md + ".tmp", "w") as f:
        f.write(table(rows) + "\n")
      os.replace(md + ".tmp", md)
  print(table(rows))
  return rows


if __name__ == "__main__":
  main()
