"""Two checkouts of diffsim side by side: the same solver workloads, timed alternately.

For refactors that must not change behaviour or speed (issue 14): each round runs every workload in a
fresh process of the base checkout (a `git worktree` of `--base`) and of this one, alternating, so that
load from other processes hits both alike; the final costs must agree and the times are compared by
their medians.

Workloads (warm: each is run once before it is timed, to compile kernels and capture graphs):
  - trajectory optimization, cart-pole swing-up, 16 worlds, 100 steps: iLQR 15, Adam 100, L-BFGS 30
    iterations (`ftol=0`, so every version runs every iteration);
  - system identification, the pendulum of `tests/models.py` (damping and mass from 400 samples of
    float64 MuJoCo C): Levenberg-Marquardt and Adam, 20 iterations.

Run: `python -m benchmarks.bench_versions --base REV [--rounds 2]`; writes
`benchmarks/results/versions_cpu.{json,md}`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from .save import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# runs in a child process with the checkout to time first on sys.path; speaks both argument styles
# (`method`/`maxiter`/`progress` since issue 14, `solver`/`iters`/`quiet` before)
_CHILD = r"""
import inspect, json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
import numpy as np, warp as wp
wp.config.quiet = True
import diffsim, models
from diffsim import sysid
from diffsim.losses import QposCost, QvelCost, CtrlCost
new = "maxiter" in inspect.signature(sysid.identify).parameters
out = {}
scene = diffsim.Scene.from_xml(diffsim.asset_path("cartpole.xml"), nworld=16, device="cpu")
cost = [QposCost([0.0, np.pi], terminal=[1.0, 100.0]), QvelCost(0.0, terminal=[1.0, 10.0]), CtrlCost(0.1)]
problem = diffsim.TrajectoryProblem(scene, cost, horizon=100)
bar = {"progress": False} if new else {"quiet": True}
for method, n in (("ilqr", 15), ("adam", 100), ("lbfgs", 30)):
  diffsim.optimize_trajectory(problem, method, maxiter=2, **bar)
  t = time.perf_counter()
  r = diffsim.optimize_trajectory(problem, method, maxiter=n, ftol=0.0, **bar)
  out[f"trajopt {method}"] = (time.perf_counter() - t, float(np.median(r.fun)))
rec = diffsim.data.simulate(models.PENDULUM, 0.5 * np.sin(np.linspace(0, 6, 400))[:, None])
for method in ("lm", "adam"):
  kw = dict(method=method, maxiter=20, progress=False) if new else dict(solver=method, iters=20)
  args = (models.PENDULUM, rec, ["dof_damping:hinge", "body_mass:pole"])
  sysid.identify(*args, device="cpu", x0={"dof_damping:hinge": 0.2}, **kw)
  t = time.perf_counter()
  r = sysid.identify(*args, device="cpu", x0={"dof_damping:hinge": 0.2}, **kw)
  out[f"sysid {method}"] = (time.perf_counter() - t, float(r.fun))
print("RESULT " + json.dumps(out))
"""


def _run(checkout: str) -> dict:
  proc = subprocess.run([sys.executable, "-c", _CHILD, checkout], capture_output=True, text=True, check=True)
  line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
  return json.loads(line[len("RESULT "):])


def table(rows: list[dict]) -> str:
  lines = ["| workload | base (s) | this (s) | this / base | final cost, base | final cost, this |",
           "|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['workload']} | {r['base_s']:.2f} | {r['this_s']:.2f} | {r['ratio']:.2f} | {r['base_fun']:.6g} | "
                 f"{r['this_fun']:.6g} |")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--base", required=True, help="git revision to compare against")
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as tmp:
    base = os.path.join(tmp, "base")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", base, args.base], check=True,
                   capture_output=True)
    try:
      runs = {"base": [], "this": []}
      for _ in range(args.rounds):
        runs["base"].append(_run(base))
        runs["this"].append(_run(ROOT))
    finally:
      subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base], check=False, capture_output=True)
  rows = []
  for w in runs["this"][0]:
    b = [r[w][0] for r in runs["base"]]
    t = [r[w][0] for r in runs["this"]]
    rows.append({"workload": w, "base_s": float(np.median(b)), "this_s": float(np.median(t)),
                 "ratio": float(np.median(t) / np.median(b)), "base_fun": runs["base"][0][w][1],
                 "this_fun": runs["this"][0][w][1], "base_runs": b, "this_runs": t})
  argv_saved = sys.argv[1:] if argv is None else list(argv)
  write_json(os.path.join(args.out, "versions_cpu.json"), {"argv": argv_saved, "rows": rows})
  md = os.path.join(args.out, "versions_cpu.md")
  with open(md + ".tmp", "w") as f:
    f.write(table(rows) + "\n")
  os.replace(md + ".tmp", md)
  print(table(rows))
  return rows


if __name__ == "__main__":
  main()
