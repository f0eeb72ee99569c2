"""The whole benchmark suite in one run, each row a ratio measured side by side.

  python -m benchmarks.run [--device cpu|cuda:0] [--sizes 1 64 1024 2048] [--quick]

Sections (each skipped with a note when its optional dependency is missing):
  rollout      forward world-steps/s: diffsim (eager, captured) vs raw `mjw.step` vs `mujoco.rollout`;
               gradient cost (forward+backward over forward, and per perturbation lane); compile time;
               cart-pole, SO-101 and MJWarp's humanoid (contact-rich)
  determinism  captured forward and gradient time with `set_deterministic` off and on
  mjx          the same gradient with `jax.grad` through `mjx.step` (needs `diffsim[jax]`, mujoco-mjx)
  trajopt      time to reach a cost threshold per solver (cart-pole swing-up, SO-101 reach); host
               reads, writes, Python launches and graph replays per optimizer iteration
  sysid        diffsim vs `mujoco.sysid` on the same data, 1 and 64 trajectories

Writes `benchmarks/results/<device>.json` and `<device>.md` (temp file, then rename).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback

import warp as wp

from benchmarks import bench_rollout

SECTIONS = ("rollout", "determinism", "mjx", "trajopt", "sysid")


def _optional(module: str, argv: list[str]):
  """Runs `benchmarks.<module>.main(argv)`; returns (rows, markdown) or (None, reason)."""
  try:
    mod = importlib.import_module(f"benchmarks.{module}")
  except ImportError as e:
    return None, f"skipped: {e}"
  try:
    rows = mod.main(argv)
  except ImportError as e:  # optional dependency missing at run time
    return None, f"skipped: {e}"
  return rows, mod.table(rows)


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None)
  parser.add_argument("--sizes", nargs="+", type=int, default=[1, 64, 1024])
  parser.add_argument("--nstep", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
  parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the suite runs")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  if args.quick:
    args.sizes, args.nstep, args.repeats = [2], 3, 1
  common = ["--nstep", str(args.nstep), "--repeats", str(args.repeats), "--out", args.out]
  if args.device:
    common += ["--device", args.device]
  sizes = ["--sizes", *map(str, args.sizes)]
  report = {"argv": sys.argv[1:] if argv is None else list(argv), "sections": {}}
  md = []

  if "rollout" in args.sections:
    rows = bench_rollout.main(common + sizes + (["--models", "cartpole"] if args.quick else []))
    report["sections"]["rollout"] = rows
    md += ["## Rollout and gradient throughput", "", bench_rollout.table(rows), ""]
  if "determinism" in args.sections:
    n = min(64, max(args.sizes))
    row = bench_rollout.bench_determinism("cartpole", n, args.nstep, args.device, args.repeats)
    report["sections"]["determinism"] = row
    md += ["## Determinism", "", f"cart-pole, {n} worlds, {args.nstep} steps, {row['device']}: forward "
           f"{row['fwd_cost']:.2f}x, gradient {row['grad_cost']:.2f}x the time with `set_deterministic(True)`.", ""]
  for name, module, extra in (("mjx", "bench_mjx", sizes), ("trajopt", "bench_trajopt", []),
                              ("sysid", "bench_sysid", [])):
    if name not in args.sections:
      continue
    quick = ["--quick"] if args.quick and name != "mjx" else []
    try:
      rows, text = _optional(module, common + extra + quick)
    except Exception:  # one broken section must not lose the others' results
      rows, text = None, "failed:\n```\n" + traceback.format_exc()[-2000:] + "\n```"
    report["sections"][name] = rows if rows is not None else text
    md += [f"## {name}", "", text, ""]

  device = (args.device or ("cuda:0" if wp.is_cuda_available() else "cpu")).replace(":", "")
  os.makedirs(args.out, exist_ok=True)
  for ext, payload in (("json", json.dumps(report, indent=1, default=str)), ("md", "\n".join(md))):
    path = os.path.join(args.out, f"{device}.{ext}")
    with open(path + ".tmp", "w") as f:
      f.write(payload)
    os.replace(path + ".tmp", path)
  print("\n".join(md))
  return report


if __name__ == "__main__":
  main()
