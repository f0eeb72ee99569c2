"""The lanes' linearization: tolerance 0 against lanes that follow their nominal world, side by side.

  python -m benchmarks.bench_lanes [--device cpu] [--models ...] [--nworld 16] [--nstep 20]

Per model, the captured `Rollout(..., gradient="finite_difference")(ctrl, linearize=True)` (forward,
every perturbation lane, the step Jacobians) with diffsim's default lanes (`SolverSettings()`,
`lanes="tolerance"`: every lane at tolerance 0, so each runs until its line search stalls) and with
`SolverSettings(lanes="nominal")` (`diffsim.lane_solver`: the batch at 1e-12, no lane stopping
before its nominal world or its central difference's partner), the two graphs replayed in turns
(`timing.alternate`); `speedup` is the median of the per-pair time ratios, `niter_*` the mean solver
iterations of the last step's worlds. The
gradient errors against float64 MuJoCo C are in `tests/test_lane_solver.py` and
`bench_contact_gradients --lanes tolerance|nominal`. Writes `benchmarks/results/lanes_<device>.json`.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import warp as wp

import diffsim

from .bench_rollout import MODELS, controls
from .save import write_json, write_text
from .timing import alternate, spread

# lanes per world are many on the humanoid (205): fewer worlds there
WORLDS = {"humanoid": 4}


def bench_case(model: str, nworld: int, nstep: int, device: str | None, repeats: int) -> dict:
  fns, niter = {}, {}
  for key, settings in (("zero", diffsim.SolverSettings(lanes="tolerance")),
                        ("nominal", diffsim.SolverSettings(lanes="nominal"))):
    scene = diffsim.Scene.from_xml(MODELS[model](), nworld=nworld, device=device, solver=settings)
    ctrl = wp.array(controls(scene.mjm, nworld, nstep), dtype=float, device=scene.device)
    ro = diffsim.Rollout(scene, nstep, gradient="finite_difference")
    ro(ctrl, linearize=True)  # allocates and loads outside the capture
    with wp.ScopedCapture(device=scene.device) as cap:
      ro(ctrl, linearize=True)
    fns[key] = (lambda g=cap.graph: wp.capture_launch(g))
    fns[key]()
    niter[key] = float(ro.fd.data.solver_niter.numpy().mean())
    nlane = ro.fd.nlane
  times = alternate(fns, repeats=repeats, sync=wp.synchronize, budget_s=60.0)
  return {
    "model": model, "nworld": nworld, "nstep": nstep, "nlane": nlane, "device": str(scene.device),
    "zero_s": float(np.median(times["zero"])), "nominal_s": float(np.median(times["nominal"])),
    "speedup": float(np.median(np.array(times["zero"]) / np.array(times["nominal"]))),
    "niter_zero": niter["zero"], "niter_nominal": niter["nominal"],
    "spread": max(spread(times["zero"]), spread(times["nominal"])), "repeats": len(times["zero"]),
  }


def table(rows: list[dict]) -> str:
  lines = ["| model | worlds x lanes | steps | tolerance 0 (s) | lanes follow nominal (s) | speed-up | "
           "last step's solver iterations, 0 / nominal | spread |", "|" + "---|" * 8]
  for r in rows:
    lines.append(f"| {r['model']} | {r['nworld']} x {r['nlane']} | {r['nstep']} | {r['zero_s']:.3g} | "
                 f"{r['nominal_s']:.3g} | {r['speedup']:.2f}x | {r['niter_zero']:.2f} / {r['niter_nominal']:.2f} | "
                 f"{r['spread']:.2f} |")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None)
  parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
  parser.add_argument("--nworld", type=int, default=16)
  parser.add_argument("--nstep", type=int, default=20)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  argv_saved = sys.argv[1:] if argv is None else list(argv)
  rows = []
  for m in args.models:
    rows.append(bench_case(m, min(args.nworld, WORLDS.get(m, args.nworld)), args.nstep, args.device, args.repeats))
    device = rows[0]["device"].replace(":", "")
    write_json(os.path.join(args.out, f"lanes_{device}.json"), {"argv": argv_saved, "rows": rows})
    print(table(rows[-1:]).splitlines()[-1], flush=True)
  md = table(rows)
  path = os.path.join(args.out, f"lanes_{device}.md")
  write_text(path, md)
  print(md)
  return rows


if __name__ == "__main__":
  main()
