"""diffsim's forward rollout against raw `mjw.step` on the model as its MJCF writes it, side by side.

  python -m benchmarks.bench_forward [--device cpu] [--sizes 1 64 1024 2048] [--nstep 50]

Issue 27's bar: a forward-only rollout (`Rollout(..., differentiable=False)`) costs at most 1.1x the
time of the loop a user of MuJoCo Warp would write, `mjw.step` on `mjw.put_model(MJCF)` (the MJCF's
solver settings, MJWarp's float32 floor of 1e-6 on the tolerance) with the controls copied into
`Data.ctrl` before each step. Per model and world count, in one process:

  - both replayed from captured graphs, from the same initial state with the same controls, taking
    turns (`timing.alternate`: a load spike from other processes hits both); `fwd_over_raw` is the
    median of the per-pair time ratios. diffsim's side also records the trajectory (two small copy
    kernels per step) and runs one `mjw.forward` after the last step (the final row of `sensordata`,
    about 1/nstep of the time), and skips the constraint solver in worlds without constraint rows
    (`diffsim/physics.py`, where raw MJWarp runs it: below 1 then);
  - `tolerance`: the solver tolerance diffsim's forward ran at (`Scene.tolerance`, the MJCF's unless
    `SolverSettings` overrides) and `lane_tolerance`, the finite-difference lanes' (not timed here).

Models: cart-pole, SO-101, MJWarp's humanoid (contact-rich) and bench_sysid's 5-link arm
(`bench_rollout.MODELS`). Writes `benchmarks/results/forward_<device>.json` after every row (temp file,
then rename) and prints a Markdown table (`forward_<device>.md`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import warp as wp

import diffsim

from .bench_rollout import MODELS, _graph, controls, load_model, raw_mjwarp
from .save import write_json, write_text
from .timing import alternate, spread

# repeats of the larger cases stop once their rounds take this long (s): keeps a whole run near 10 minutes
BUDGET_S = 40.0


def bench_case(model: str, nworld: int, nstep: int, device: str | None, repeats: int) -> dict:
  """One row: diffsim's captured forward against raw `mjw.step` on the model as written."""
  scene = diffsim.Scene.from_xml(MODELS[model](), nworld=nworld, device=device)
  u = controls(scene.mjm, nworld, nstep)
  ctrl = wp.array(u, dtype=float, device=scene.device)
  fwd = diffsim.Rollout(scene, nstep, differentiable=False)
  fwd(ctrl)  # loads the modules and allocates outside the capture
  raw = raw_mjwarp(scene, u, load_model(model))
  raw()
  fns = {"diffsim": _graph(scene.device, lambda: fwd(ctrl)), "raw": _graph(scene.device, raw)}
  for fn in fns.values():
    fn()
  times = alternate(fns, repeats=repeats, budget_s=BUDGET_S, sync=wp.synchronize)
  t_fwd, t_raw = (float(np.median(times[k])) for k in ("diffsim", "raw"))
  ws = nworld * nstep
  return {
    "model": model, "nworld": nworld, "nstep": nstep, "device": str(scene.device),
    "tolerance": scene.tolerance, "lane_tolerance": scene.lane_tolerance,
    "fwd_s": t_fwd, "raw_s": t_raw, "fwd_wsps": ws / t_fwd, "raw_wsps": ws / t_raw,
    "fwd_over_raw": float(np.median(np.array(times["diffsim"]) / np.array(times["raw"]))),
    "fwd_spread": spread(times["diffsim"]), "raw_spread": spread(times["raw"]), "repeats": len(times["raw"]),
  }


def table(rows: list[dict]) -> str:
  head = ("| model | worlds | steps | diffsim forward (world-steps/s) | raw `mjw.step` as written (world-steps/s) | "
          "diffsim / raw (time) | spread diffsim, raw | repeats |")
  lines = [head, "|" + "---|" * 8]
  for r in rows:
    lines.append(f"| {r['model']} | {r['nworld']} | {r['nstep']} | {r['fwd_wsps']:.3g} | {r['raw_wsps']:.3g} | "
                 f"{r['fwd_over_raw']:.2f} | {r['fwd_spread']:.2f}, {r['raw_spread']:.2f} | {r['repeats']} |")
  lines.append("")
  lines.append(f"diffsim's forward at the model's own solver tolerance ({rows[0]['tolerance']:.3g} as MJWarp runs "
               f"these MJCFs; the finite-difference lanes run at {rows[0]['lane_tolerance']:g}). Spread: (max - min) "
               "/ median of the repeats.")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
  parser.add_argument("--sizes", nargs="+", type=int, default=[1, 64, 1024, 2048], help="world counts")
  parser.add_argument("--nstep", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  parser.add_argument("--update", action="store_true",
                      help="replace only these (model, worlds) rows of an existing forward_<device>.json")
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  from tqdm import tqdm

  argv_saved = sys.argv[1:] if argv is None else list(argv)
  rows, kept = [], []
  with tqdm(total=len(args.models) * len(args.sizes), desc="forward vs raw mjw.step") as bar:
    for m in args.models:
      for n in args.sizes:
        rows.append(bench_case(m, n, args.nstep, args.device, args.repeats))
        device = rows[0]["device"].replace(":", "")
        path = os.path.join(args.out, f"forward_{device}.json")
        if args.update and len(rows) == 1 and os.path.exists(path):
          with open(path) as f:
            kept = json.load(f)
        if kept:
          # the stored run's rows, these replacing theirs, in the stored order; its command line stays
          new = {(r["model"], r["nworld"]): r for r in rows}
          old = [(r["model"], r["nworld"]) for r in kept["rows"]]
          merged = [new.get(k, r) for k, r in zip(old, kept["rows"])] + [r for k, r in new.items() if k not in old]
          payload = {"argv": kept["argv"], "updated_by": kept.get("updated_by", []) + [argv_saved], "rows": merged}
        else:
          payload = {"argv": argv_saved, "rows": rows}
        write_json(path, payload)
        bar.update()
  rows = payload["rows"]
  md = table(rows)
  path = os.path.join(args.out, f"forward_{device}.md")
  write_text(path, md)
  print(md)
  return rows


if __name__ == "__main__":
  main()
