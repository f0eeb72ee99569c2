"""The whole benchmark suite in one run, each row a ratio measured side by side.

  python -m benchmarks.run [--device cpu|cuda:0] [--sizes 1 64 1024 2048] [--quick]

Sections (each skipped with a note when its optional dependency is missing; one that fails is
reported as failed and the others still run):
  rollout      forward world-steps/s: diffsim (eager, captured) vs raw `mjw.step` vs `mujoco.rollout`;
               gradient cost (forward+backward over forward, and per perturbation lane); compile time;
               cart-pole, SO-101 and MJWarp's humanoid (contact-rich)
  adjoint      gradient / forward of the analytic adjoint beside the lanes and MJX's `jax.grad`, cart-pole,
               SO-101 and humanoid without contacts, 1, 64 and 1,024 worlds
  determinism  captured forward and gradient time with `set_deterministic` off and on, and whether
               replays are bitwise equal; cart-pole and the humanoid (contacts) at the largest size
               (64 worlds on the CPU, where kernels run sequentially and repeat anyway)
  mjx          the same gradient with `jax.grad` through `mjx.step` (needs `diffsim[jax]`, mujoco-mjx)
  trajopt      time to reach a cost threshold per solver (cart-pole swing-up, SO-101 reach); host
               reads, writes, Python launches and graph replays per optimizer iteration
  sysid        diffsim vs `mujoco.sysid` on the same data, 1 and 64 trajectories (needs mujoco[sysid])
  contact      gradient error against float64 MuJoCo C, unresolved constraint switches, memory and time
               over MuJoCo Warp's own test models (2 worlds, 20 steps; each model in its own process)
  distributed  1 vs 2 Ray workers: gradient of 1,024 cart-pole worlds, iLQR on 64 SO-101 reach worlds,
               sysid of 64 recordings; bytes per call (needs diffsim[ray])
  startup      `import diffsim` and a whole `diffsim sysid` process (spring-mass, 500 samples), warm cache
  render       world-frames/s of diffsim's batched ray tracer (MJWarp) vs `mujoco.Renderer` world by world,
               1, 16 and 64 cart-pole worlds at 160x120 and 320x240

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

SECTIONS = ("rollout", "adjoint", "determinism", "mjx", "trajopt", "sysid", "contact", "distributed", "startup",
            "render")


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
  parser.add_argument("--determinism-models", nargs="+", default=["cartpole", "humanoid"],
                      choices=list(bench_rollout.MODELS))
  parser.add_argument("--determinism-size", type=int, default=None,
                      help="worlds of the determinism section (default: the largest --sizes on a GPU; 64 on the "
                           "CPU, whose kernels run sequentially, so the mode changes only the cost measured)")
  parser.add_argument("--grad-max-worlds", type=int, default=None,
                      help="rollout section: skip gradients needing more MJWarp worlds (lanes x worlds); "
                           "default: bench_rollout's (40,000 on the CPU)")
  parser.add_argument("--mjx-nstep", type=int, default=100,
                      help="steps of the MJX comparison (default 100, the setting of issue #5's reference times)")
  parser.add_argument("--update", action="store_true",
                      help="keep the other sections of an existing <device>.json and replace those run now")
  parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the suite runs")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  if args.quick:
    args.sizes, args.nstep, args.mjx_nstep, args.repeats = [2], 3, 3, 1
  device = (args.device or ("cuda:0" if wp.is_cuda_available() else "cpu")).replace(":", "")
  common = ["--nstep", str(args.nstep), "--repeats", str(args.repeats), "--out", args.out]
  if args.device:
    common += ["--device", args.device]
  sizes = ["--sizes", *map(str, args.sizes)]
  this_argv = sys.argv[1:] if argv is None else list(argv)
  report = {"argv": this_argv, "sections": {}, "argv_by_section": {}}
  path = os.path.join(args.out, f"{device}.json")
  if args.update and os.path.exists(path):
    with open(path) as f:
      old = json.load(f)
    report["sections"] = {k: v for k, v in old.get("sections", {}).items() if k not in args.sections}
    report["argv_by_section"] = {k: old.get("argv_by_section", {}).get(k, old.get("argv"))
                                 for k in report["sections"]}
  sections = {
    "rollout": ("bench_rollout", common + sizes + (["--models", "cartpole"] if args.quick else [])
                + ([] if args.grad_max_worlds is None else ["--grad-max-worlds", str(args.grad_max_worlds)])),
    "mjx": ("bench_mjx", ["--nstep", str(args.mjx_nstep)] + common[2:] + sizes),
    "adjoint": ("bench_adjoint", common + sizes + (["--models", "cartpole"] if args.quick else ["--mjx"])),
    "trajopt": ("bench_trajopt", common + (["--quick"] if args.quick else [])),
    "sysid": ("bench_sysid", common + (["--quick"] if args.quick else [])),
    "contact": ("bench_contact_gradients", common[4:] + (["--quick"] if args.quick else [])),  # --out, --device
    "distributed": ("bench_distributed", common + (["--quick"] if args.quick else [])),
    "startup": ("bench_startup", ["--repeats", str(args.repeats)] + (["--quick"] if args.quick else [])),
    "render": ("bench_render", common[2:] + (["--sizes", "2", "--resolutions", "32x24", "--nframe", "3"]
                                             if args.quick else [])),
  }
  titles = {"rollout": "Rollout and gradient throughput", "adjoint": "Analytic adjoint: gradient / forward",
            "determinism": "Determinism", "mjx": "mjx", "trajopt": "trajopt", "sysid": "sysid",
            "contact": "Gradients through contact (MJWarp test models)",
            "distributed": "Scale-out with Ray (1 vs 2 workers)",
            "startup": "Start-up (import, a whole diffsim sysid process)",
            "render": "Rendering (MJWarp's batched ray tracer vs mujoco.Renderer)"}

  def markdown() -> list[str]:
    md = []
    for name in SECTIONS:
      if name in report["sections"]:
        md += [f"## {titles[name]}", "", _text(name, report["sections"][name]), ""]
        if report.get("errors", {}).get(name):
          md += [report["errors"][name], ""]
    return md

  for name in SECTIONS:
    if name not in args.sections:
      continue
    report["argv_by_section"][name] = this_argv
    if name == "determinism":
      n = args.determinism_size or (max(args.sizes) if wp.get_device(args.device).is_cuda or args.quick
                                    else min(64, max(args.sizes)))
      rows, text = [], ""
      for model in args.determinism_models:
        try:
          rows.append(bench_rollout.bench_determinism(model, n, args.nstep, args.device, args.repeats))
        except Exception:
          text += f"{model} failed:\n```\n{traceback.format_exc()[-2000:]}\n```\n"
        report["sections"][name] = rows
        _write(args.out, device, report, markdown())
      if text:
        report.setdefault("errors", {})[name] = text
    else:
      rows, text = _section(*sections[name])
    report["sections"][name] = rows if rows is not None else text
    _write(args.out, device, report, markdown())
  md = markdown()
  print("\n".join(md))
  return report


def _text(name: str, rows) -> str:
  """The Markdown of a section from its rows (or its "skipped: ..." / "failed: ..." note)."""
  if isinstance(rows, str):
    return rows
  if name == "determinism":
    return bench_rollout.determinism_table(rows)
  module = {"rollout": "bench_rollout", "adjoint": "bench_adjoint", "mjx": "bench_mjx", "trajopt": "bench_trajopt",
            "sysid": "bench_sysid", "contact": "bench_contact_gradients", "distributed": "bench_distributed",
            "startup": "bench_startup", "render": "bench_render"}[name]
  return importlib.import_module(f"benchmarks.{module}").table(rows)


if __name__ == "__main__":
  main()
