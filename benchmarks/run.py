"""The whole benchmark suite in one run, each row a ratio measured side by side.

  python -m benchmarks.run [--device cpu|cuda:0] [--sizes 1 64 1024 2048] [--quick]

Sections (each skipped with a note when its optional dependency is missing; one that fails is
reported as failed and the others still run):
  rollout      forward world-steps/s: diffsim (eager, captured) vs raw `mjw.step` vs `mujoco.rollout`;
               gradient cost (forward+backward over forward, and per perturbation lane); compile time;
               cart-pole, SO-101 and MJWarp's humanoid (contact-rich)
  determinism  captured forward and gradient time with `set_deterministic` off and on, and whether
               replays are bitwise equal; cart-pole and SO-101 (self-collision) at the largest size
  mjx          the same gradient with `jax.grad` through `mjx.step` (needs `diffsim[jax]`, mujoco-mjx)
  trajopt      time to reach a cost threshold per solver (cart-pole swing-up, SO-101 reach); host
               reads, writes, Python launches and graph replays per optimizer iteration
  sysid        diffsim vs `mujoco.sysid` on the same data, 1 and 64 trajectories (needs mujoco[sysid])

Writes `benchmarks/results/<device>.json` and `<device>.md` after every section (temp file, then
rename), so an interrupted run keeps the sections it finished.
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


def _section(module: str, argv: list[str]):
  """Runs `benchmarks.<module>.main(argv)`; returns (rows, markdown), or (None, why) when an optional
  dependency is missing or the section fails (one broken section must not lose the others)."""
  try:
    mod = importlib.import_module(f"benchmarks.{module}")
    rows = mod.main(argv)
  except ImportError as e:
    return None, f"skipped: {e}"
  except (Exception, SystemExit):
    return None, "failed:\n```\n" + traceback.format_exc()[-2000:] + "\n```"
  return rows, mod.table(rows)


def _write(out: str, device: str, report: dict, md: list[str]) -> None:
  os.makedirs(out, exist_ok=True)
  for ext, payload in (("json", json.dumps(report, indent=1, default=str)), ("md", "\n".join(md))):
    path = os.path.join(out, f"{device}.{ext}")
    with open(path + ".tmp", "w") as f:
      f.write(payload)
    os.replace(path + ".tmp", path)


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None)
  parser.add_argument("--sizes", nargs="+", type=int, default=[1, 64, 1024])
  parser.add_argument("--nstep", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
  parser.add_argument("--determinism-models", nargs="+", default=["cartpole", "so101"],
                      choices=list(bench_rollout.MODELS))
  parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the suite runs")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  if args.quick:
    args.sizes, args.nstep, args.repeats = [2], 3, 1
  device = (args.device or ("cuda:0" if wp.is_cuda_available() else "cpu")).replace(":", "")
  common = ["--nstep", str(args.nstep), "--repeats", str(args.repeats), "--out", args.out]
  if args.device:
    common += ["--device", args.device]
  sizes = ["--sizes", *map(str, args.sizes)]
  report = {"argv": sys.argv[1:] if argv is None else list(argv), "sections": {}}
  md = []
  sections = {
    "rollout": ("bench_rollout", common + sizes + (["--models", "cartpole"] if args.quick else [])),
    "mjx": ("bench_mjx", common + sizes),
    "trajopt": ("bench_trajopt", common + (["--quick"] if args.quick else [])),
    "sysid": ("bench_sysid", common + (["--quick"] if args.quick else [])),
  }
  titles = {"rollout": "Rollout and gradient throughput", "determinism": "Determinism", "mjx": "mjx",
            "trajopt": "trajopt", "sysid": "sysid"}

  for name in SECTIONS:
    if name not in args.sections:
      continue
    if name == "determinism":
      n = max(args.sizes)
      rows, text = [], ""
      for model in args.determinism_models:
        try:
          rows.append(bench_rollout.bench_determinism(model, n, args.nstep, args.device, args.repeats))
        except Exception:
          text += f"{model} failed:\n```\n{traceback.format_exc()[-2000:]}\n```\n"
        report["sections"][name] = rows
        _write(args.out, device, report, md + [f"## {titles[name]}", "", bench_rollout.determinism_table(rows)])
      text = bench_rollout.determinism_table(rows) + ("\n\n" + text if text else "")
    else:
      rows, text = _section(*sections[name])
    report["sections"][name] = rows if rows is not None else text
    md += [f"## {titles[name]}", "", text, ""]
    _write(args.out, device, report, md)
  print("\n".join(md))
  return report


if __name__ == "__main__":
  main()
