"""Trajectory optimization: time to reach a cost threshold per solver, and host traffic per iteration.

Problems (defined by the tutorials, imported from `tutorials/`):
  - cartpole: the swing-up of tutorial 02 (2 s, 200 steps, hanging start, 10 N motor);
  - so101: the reach of tutorial 03 (random start and target per world, end-effector site cost).

For each problem every solver (`ilqr`, `adam`, `lbfgs`) runs from the same guess after a warm-up
call that compiles the kernels and captures the graphs (one-time costs, reported apart as
`warmup_s`). The timed run, repeated `--repeats` times (3) from the same guess, reads the best cost
per world after every iteration (`log_every=1`, one small read) to timestamp it. Reported per solver:
  - `time_to_threshold_s` / `iters_to_threshold`: first time every world's best cost is within
    `--rtol` (10%) of the lowest final cost any solver found for that world (`null`: never), and
    `time_to_2x_s` / `iters_to_2x` for within 100% (a solution of the task, not yet refined): the
    median over the runs, each run's in `time_to_threshold_runs_s` / `time_to_2x_runs_s`, and
    `spread`, (max - min) / median of the runs' wall times (`wall_s`: the median; `wall_runs_s`);
    iterations, costs and success come from the first run (the others repeat it on the CPU);
  - the final success rate of the task itself: cart-pole, pole within 0.1 rad of upright and
    turning slower than 0.5 rad/s; SO-101, end effector within 1 cm of its target;
  - host traffic per iteration: device-to-host reads (`wp.array.numpy`, `.list`), host-to-device
    writes (`.assign`), Python kernel launches and graph replays, counted by wrapping those Warp
    functions in two runs of different lengths (`log_every` = the run length, so no progress read)
    and differencing, which cancels set-up and result copies. The issue's target is 0 reads and
    writes for Adam and iLQR; L-BFGS (scipy on the host) needs one write and one read per
    function evaluation;
  - iLQR only: `first_iter_one_graph_s` / `first_iter_looped_s`, its first iteration on a fresh
    problem (graph capture included, kernels compiled) with the iteration captured as one graph
    (the GPU's default) and with the rollouts' step captured once and replayed per step (the CPU's).

Push (`--problems push`, tutorial 08: the SO-101 pushes the pick scene's cube 5-15 cm to a target
per world, 1 s in 2 ms steps): the figure is the issue's own bar, the time until 90% of the worlds'
plans, replayed open-loop in float64 MuJoCo C, end with the cube within 2 cm of its target. The
solvers start from the tutorial's scripted plans made to stop short (`PUSH_EXTRA`: the pads stop
3 cm before the target, where the tutorial's push 1 cm past it), so that no world meets the bar at
the start (the tutorial's own start meets it in most worlds: its figures measure the refinement,
this one the solvers' reach). Every `--check-every` iterations a callback replays the best plans so
far in C (its time is subtracted) and stops the solver once the bar is met. L-BFGS and Adam take
analytic-adjoint tape gradients, iLQR the step Jacobians its rollout forms (`Rollout.jacobian`: the
analytic step's where it covers the model, as here). Written apart, to
`trajopt_push_<device>.json` (the cost-threshold problems' file and README rows are unchanged).
Sizes: CPU 10 worlds, CUDA 64.

Run: `python -m benchmarks.bench_trajopt [--device cpu] [--problems cartpole so101 push] [--repeats 3] [--quick]`.
Prints a Markdown table and writes `benchmarks/results/trajopt_<device>.json` after every problem
(temp file, then rename).
Sizes: CPU, cart-pole 4 worlds and SO-101 8 worlds over 0.3 s; CUDA, 1,024 and 2,048 worlds (the
tutorials' full sizes). `--quick`: 2 worlds, short horizons, 3 iterations (checks that it runs).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
import time

import numpy as np
import warp as wp

import diffsim

from .save import write_json

_TUTORIALS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tutorials")
SOLVERS = ("ilqr", "adam", "lbfgs")
# iterations per solver (maxiter) and options, as in the tutorials
ITERS = {"cartpole": {"ilqr": 40, "adam": 300, "lbfgs": 150}, "so101": {"ilqr": 30, "adam": 200, "lbfgs": 100},
         "push": {"ilqr": 15, "adam": 300, "lbfgs": 40}}
OPTIONS = {"cartpole": {"ilqr": {}, "adam": {"lr": 0.15}, "lbfgs": {}},
           "so101": {"ilqr": {}, "adam": {"lr": 0.02}, "lbfgs": {}},
           "push": {"ilqr": {}, "adam": {"lr": 0.01}, "lbfgs": {}}}
PUSH_EXTRA = -0.03  # m, the push's start plans stop this far past (here: short of) the target


def _tutorial(name: str):
  """The tutorial module `tutorials/<name>.py` (file names start with digits: not importable by name)."""
  spec = importlib.util.spec_from_file_location(f"tutorial_{name}", os.path.join(_TUTORIALS, f"{name}.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def make_problem(name: str, nworld: int, quick: bool, device):
  """`(problem, success)`: the problem and a function of a `TrajectoryResult` -> success per world."""
  if name == "cartpole":
    tut = _tutorial("02_cartpole_swingup")
    problem = tut.swingup_problem(nworld=nworld, horizon=0.3 if quick else 2.0, device=device)

    def success(res):
      q, v = res.trajectory.qpos.numpy()[:, -1, 1], res.trajectory.qvel.numpy()[:, -1, 1]
      return (np.abs(q - np.pi) < 0.1) & (np.abs(v) < 0.5)

    return problem, success
  if name == "so101":
    tut = _tutorial("03_so101_reach")
    problem, targets = tut.reach_problem(nworld=nworld, duration=0.05 if quick else 0.3, timestep=0.01,
                                         device=device)

    def success(res):
      site = res.trajectory.sensordata.numpy()[:, -1, :3]  # the framepos sensor of the site
      return np.linalg.norm(site - targets, axis=1) < 0.01

    return problem, success
  raise ValueError(f"unknown problem {name!r}; choose from cartpole, so101")


@contextlib.contextmanager
def count_host_traffic():
  """Counts, while active, Warp host reads, host writes, Python kernel launches and graph replays.

  Yields a dict `{"reads", "writes", "launches", "replays"}` updated in place. Wraps the Warp
  functions the solvers call (`wp.array.numpy`, `.list`, `.assign`, cross-device `wp.copy`,
  `wp.launch`, `wp.capture_launch`) and restores them on exit.
  """
  counts = {"reads": 0, "writes": 0, "launches": 0, "replays": 0}
  saved = {}

  def wrap(owner, attr, key, when=None):
    real = getattr(owner, attr)
    saved[(owner, attr)] = real

    def fn(*args, **kwargs):
      if when is None or when(*args, **kwargs):
        counts[key] += 1
      return real(*args, **kwargs)

    setattr(owner, attr, fn)

  cross = lambda dest, src, *a, **k: getattr(dest, "device", None) != getattr(src, "device", None)
  wrap(wp.array, "numpy", "reads")
  wrap(wp.array, "list", "reads")
  wrap(wp.array, "assign", "writes")
  wrap(wp, "copy", "reads", cross)
  wrap(wp, "launch", "launches")
  wrap(wp, "capture_launch", "replays")
  try:
    yield counts
  finally:
    for (owner, attr), real in saved.items():
      setattr(owner, attr, real)


def traffic_per_iteration(problem, method: str, options: dict, n0: int = 2, n1: int = 6) -> dict:
  """Host traffic of one iteration: counts of a run of `n1` iterations minus one of `n0`, over `n1 - n0`."""
  from diffsim.trajopt.solver import Solver

  counts, nits = [], []
  # a solver is cached per problem for runs up to its capacity: make (and capture) it first
  diffsim.optimize_trajectory(problem, method, maxiter=n1, ftol=0.0, log_every=n1, progress=False, options=options)
  zero_gradient = Solver._zero_gradient
  for n in (n0, n1):
    with count_host_traffic() as c:
      def uncounted(self, start, c=c):
        # the result's one-off check of worlds that made no progress yet (a host read of the start's
        # gradient, iLQR's an eager gradient there; run after n0 iterations in a world still on its
        # start): no iteration's traffic
        saved = dict(c)
        out = zero_gradient(self, start)
        c.update(saved)
        return out

      Solver._zero_gradient = uncounted
      try:
        res = diffsim.optimize_trajectory(problem, method, maxiter=n, ftol=0.0, log_every=n, progress=False,
                                          options=options)
      finally:
        Solver._zero_gradient = zero_gradient
    counts.append(dict(c))
    nits.append(res.nit)
  dn = max(nits[1] - nits[0], 1)
  return {k: (counts[1][k] - counts[0][k]) / dn for k in counts[0]}


def ilqr_first_iteration(name: str, nworld: int, device, quick: bool, options: dict) -> dict:
  """Seconds of iLQR's first iteration, graph capture included (kernels already compiled), with the
  whole iteration captured as one graph (`one_graph`, the option `loop_steps=False`, the GPU's default)
  and with the rollouts' step captured once and replayed per step (`looped`, `loop_steps=True`, the
  CPU's default); a fresh problem each."""
  out = {}
  for key, loop in (("one_graph", False), ("looped", True)):
    problem, _ = make_problem(name, nworld, quick, device)
    t = time.perf_counter()
    diffsim.optimize_trajectory(problem, "ilqr", maxiter=1, progress=False, options={**options, "loop_steps": loop})
    out[key] = time.perf_counter() - t
  return out


def bench_problem(name: str, nworld: int, device, quick: bool, rtol: float, solvers=SOLVERS,
                  repeats: int = 1) -> list[dict]:
  t = time.perf_counter()
  problem, success = make_problem(name, nworld, quick, device)
  setup_s = time.perf_counter() - t
  runs = {}
  for method in solvers:
    maxiter = 3 if quick else ITERS[name][method]
    opts = OPTIONS[name][method]
    # warm-up: compiles the kernels and captures the graphs of this solver (cached on the problem).
    # One iteration (the callback stops at the first check); maxiter stays the timed run's because
    # a solver is cached for runs up to its capacity, maxiter + 1: a smaller one would be rebuilt,
    # and its graphs recaptured, inside the timed run
    t = time.perf_counter()
    diffsim.optimize_trajectory(problem, method, maxiter=maxiter, log_every=1, progress=False, options=opts,
                                callback=lambda iterate: True)
    warmup_s = time.perf_counter() - t
    results, stamps, walls = [], [], []
    for _ in range(max(int(repeats), 1)):
      stamps.append([])

      def stamp(iterate):
        stamps[-1].append((iterate.nit, time.perf_counter() - t0, iterate.fun.copy()))
        return False

      t0 = time.perf_counter()
      results.append(diffsim.optimize_trajectory(problem, method, maxiter=maxiter, ftol=0.0, log_every=1,
                                                 progress=False, options=opts, callback=stamp))
      walls.append(time.perf_counter() - t0)
    runs[method] = dict(res=results[0], stamps=stamps, walls=walls, warmup_s=warmup_s, maxiter=maxiter, opts=opts)
  # the reference per world: the lowest final cost of any solver
  ref = np.min([r["res"].fun for r in runs.values()], axis=0)
  rows = []
  for method, r in runs.items():
    res = r["res"]
    # per run, (iterations, seconds) to each threshold; None where a run never got there
    per_run = {tol: [next(((nit, s) for nit, s, fun in st if np.all(fun <= ref + tol * np.abs(ref))), None)
                     for st in r["stamps"]] for tol in (1.0, rtol)}
    hits = {tol: None if any(h is None for h in hs) else (hs[0][0], float(np.median([h[1] for h in hs])))
            for tol, hs in per_run.items()}
    runs_s = {tol: [None if h is None else h[1] for h in hs] for tol, hs in per_run.items()}
    wall = float(np.median(r["walls"]))
    traffic = traffic_per_iteration(problem, method, r["opts"])
    first = ilqr_first_iteration(name, nworld, device, quick, r["opts"]) if method == "ilqr" else {}
    ok = success(res)
    rows.append({
      "problem": name, "method": method, "nworld": problem.nworld, "horizon": problem.horizon,
      "dt": problem.scene.dt, "device": str(problem.scene.device), "maxiter": r["maxiter"], "nit": res.nit,
      "wall_s": wall, "s_per_iter": wall / max(res.nit, 1), "warmup_s": r["warmup_s"],
      "setup_s": setup_s, "rtol": rtol, "repeats": len(r["walls"]), "wall_runs_s": r["walls"],
      "spread": (max(r["walls"]) - min(r["walls"])) / max(wall, 1e-300),
      "time_to_threshold_s": None if hits[rtol] is None else hits[rtol][1],
      "iters_to_threshold": None if hits[rtol] is None else hits[rtol][0],
      "time_to_threshold_runs_s": runs_s[rtol],
      "time_to_2x_s": None if hits[1.0] is None else hits[1.0][1],
      "iters_to_2x": None if hits[1.0] is None else hits[1.0][0],
      "time_to_2x_runs_s": runs_s[1.0],
      "initial_cost_median": float(np.median(res.history[0])),
      "final_cost_median": float(np.median(res.fun)), "final_cost_max": float(np.max(res.fun)),
      "success_rate": float(np.mean(ok)),
      **{f"{k}_per_iter": v for k, v in traffic.items()},
      **{f"first_iter_{k}_s": v for k, v in first.items()},
    })
  return rows


def bench_push(nworld: int, device, quick: bool, solvers=SOLVERS, repeats: int = 1, check_every: int = 1,
               bar: float = 0.9) -> list[dict]:
  """Per solver: time and iterations until `bar` of the worlds' best plans end within 2 cm of their
  targets in MuJoCo C (tutorial 08's push; the C replays' time not counted), median of `repeats` runs."""
  tut = _tutorial("08_so101_push")
  t = time.perf_counter()
  problem, _, judge = tut.push_problem(nworld, duration=0.3 if quick else 1.0, extra=PUSH_EXTRA, device=device)
  setup_s = time.perf_counter() - t
  start_rate = float(np.mean(judge(problem.ctrl_init.numpy())[1] < 0.02))
  rows = []
  for method in solvers:
    maxiter = 3 if quick else ITERS["push"][method]
    opts = OPTIONS["push"][method]
    t = time.perf_counter()
    diffsim.optimize_trajectory(problem, method, maxiter=maxiter, progress=False, options=opts,
                                callback=lambda iterate: True)
    warmup_s = time.perf_counter() - t
    runs = []
    for _ in range(max(int(repeats), 1)):
      run = {"judge_s": 0.0, "hit": None, "rates": []}

      def check(iterate, run=run):
        if iterate.nit % check_every:
          return False
        tj = time.perf_counter()
        rate = float(np.mean(judge(iterate.x)[1] < 0.02))
        run["judge_s"] += time.perf_counter() - tj
        run["rates"].append([iterate.nit, rate])
        if rate >= bar:
          run["hit"] = (iterate.nit, time.perf_counter() - t0 - run["judge_s"])
          return True
        return False

      t0 = time.perf_counter()
      res = diffsim.optimize_trajectory(problem, method, maxiter=maxiter, ftol=0.0, log_every=1, progress=False,
                                        options=opts, callback=check)
      run["wall_s"] = time.perf_counter() - t0 - run["judge_s"]
      run["nit"] = res.nit
      run["final_rate"] = float(np.mean(judge(res.x)[1] < 0.02))
      runs.append(run)
    hits = [r["hit"] for r in runs]
    walls = [r["wall_s"] for r in runs]
    reached = all(h is not None for h in hits)
    rows.append({
      "problem": "push", "method": method, "nworld": problem.nworld, "horizon": problem.horizon,
      "dt": problem.scene.dt, "device": str(problem.scene.device), "maxiter": maxiter, "bar": bar,
      "derivatives": problem.rollout.jacobian if method == "ilqr" else problem.rollout.gradient, "options": opts,
      "start_rate": start_rate, "repeats": len(runs), "setup_s": setup_s, "warmup_s": warmup_s,
      "time_to_bar_s": float(np.median([h[1] for h in hits])) if reached else None,
      "iters_to_bar": hits[0][0] if reached else None,
      "time_to_bar_runs_s": [None if h is None else h[1] for h in hits],
      "wall_s": float(np.median(walls)), "wall_runs_s": walls, "nit": runs[0]["nit"],
      "s_per_iter": float(np.median(walls)) / max(runs[0]["nit"], 1),
      "final_rate": runs[0]["final_rate"], "rates": runs[0]["rates"],
    })
  return rows


def push_table(rows: list[dict]) -> str:
  head = ("| problem | worlds | steps | solver (derivatives) | time to bar | iterations | s/iter | runs | "
          "C success at stop |")
  lines = [head, "|" + "---|" * (head.count("|") - 1)]
  for r in rows:
    hit = "not reached" if r["time_to_bar_s"] is None else f"{r['time_to_bar_s']:.1f} s"
    runs = ", ".join("-" if x is None else f"{x:.1f}" for x in r["time_to_bar_runs_s"])
    lines.append(f"| push | {r['nworld']} | {r['horizon']} | {r['method']} ({r['derivatives']}) | {hit} | "
                 f"{r['iters_to_bar'] if r['iters_to_bar'] is not None else r['nit']} | {r['s_per_iter']:.2f} | "
                 f"{runs} s | {100 * r['final_rate']:.0f}% |")
  if rows:
    lines.append("")
    lines.append(f"Bar: {100 * rows[0]['bar']:.0f}% of the worlds within 2 cm of their targets, replayed in float64 "
                 f"MuJoCo C (the scripted start: {100 * rows[0]['start_rate']:.0f}%); times: median of the runs, "
                 "C replays not counted, warm-up (compilation, graph capture) apart.")
  return "\n".join(lines)


def table(rows: list[dict]) -> str:
  head = ("| problem | worlds | steps | solver | iters | time to 2x best | time to threshold | s/iter | runs, spread | "
          "final success | reads/iter | writes/iter | launches/iter | replays/iter | warm-up |")
  lines = [head, "|" + "---|" * (head.count("|") - 1)]
  for r in rows:
    hit = lambda t, i: "not reached" if t is None else f"{t:.2f} s ({i} it)"
    lines.append(f"| {r['problem']} | {r['nworld']} | {r['horizon']} | {r['method']} | {r['nit']} | "
                 f"{hit(r['time_to_2x_s'], r['iters_to_2x'])} | "
                 f"{hit(r['time_to_threshold_s'], r['iters_to_threshold'])} | "
                 f"{r['s_per_iter']:.3f} | {r.get('repeats', 1)}, {100 * r.get('spread', 0.0):.0f}% | "
                 f"{100 * r['success_rate']:.0f}% | {r['reads_per_iter']:.2f} | "
                 f"{r['writes_per_iter']:.2f} | {r['launches_per_iter']:.1f} | {r['replays_per_iter']:.1f} | "
                 f"{r['warmup_s']:.1f} s |")
  rtol = rows[0]["rtol"] if rows else 0.1
  for r in rows:
    if "first_iter_looped_s" in r:
      lines.append("")
      lines.append(f"{r['problem']}, iLQR's first iteration (graph capture included): one graph "
                   f"{r['first_iter_one_graph_s']:.2f} s, step graph replayed per step "
                   f"{r['first_iter_looped_s']:.2f} s ({r['first_iter_one_graph_s'] / r['first_iter_looped_s']:.1f}x)")
  lines.append("")
  lines.append(f"Threshold: every world within {100 * rtol:.0f}% of the lowest final cost any solver reached for "
               "it (2x best: within 100%); times: the median of the runs, spread: (max - min) / median of their "
               "wall times. Traffic: per iteration, with no progress reads (see `count_host_traffic`).")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None)
  parser.add_argument("--problems", nargs="+", default=["cartpole", "so101"], choices=["cartpole", "so101", "push"])
  parser.add_argument("--solvers", nargs="+", default=list(SOLVERS), choices=SOLVERS)
  parser.add_argument("--nworld", type=int, nargs="+", default=None,
                      help="worlds per problem (default: CPU 4 and 8, CUDA 1024 and 2048)")
  parser.add_argument("--rtol", type=float, default=0.1)
  parser.add_argument("--repeats", type=int, default=3, help="timed runs per solver (median and spread reported)")
  parser.add_argument("--check-every", type=int, default=1, help="push: iterations between C checks")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args, _ = parser.parse_known_args(argv)  # benchmarks.run passes --nstep/--repeats to every section
  wp.config.log_level = wp.LOG_WARNING
  device = wp.get_device(args.device)
  sizes = {"cartpole": 4, "so101": 8, "push": 10} if device.is_cpu else {"cartpole": 1024, "so101": 2048, "push": 64}
  if args.quick:
    sizes = {"cartpole": 2, "so101": 2, "push": 2}
  if args.nworld:
    sizes.update(zip(args.problems, args.nworld))
  rows, push_rows = [], []
  path = os.path.join(args.out, f"trajopt_{str(device).replace(':', '')}.json")
  if "push" in args.problems:
    print(f"bench_trajopt: push, {sizes['push']} worlds, solvers {args.solvers}", flush=True)
    push_rows = bench_push(sizes["push"], device, args.quick, args.solvers, args.repeats, args.check_every)
    write_json(os.path.join(args.out, f"trajopt_push_{str(device).replace(':', '')}.json"),
               {"argv": sys.argv[1:] if argv is None else list(argv), "rows": push_rows})
    print(push_table(push_rows))
  for name in [p for p in args.problems if p != "push"]:
    print(f"bench_trajopt: {name}, {sizes[name]} worlds, solvers {args.solvers}", flush=True)
    rows += bench_problem(name, sizes[name], device, args.quick, args.rtol, args.solvers, args.repeats)
    # after every problem: a run stopped by a timeout keeps the problems it finished
    write_json(path, {"argv": sys.argv[1:] if argv is None else list(argv), "rows": rows})
  if rows:
    print(table(rows))
  return rows + push_rows


if __name__ == "__main__":
  main()
