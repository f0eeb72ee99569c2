"""Linearization: the analytic step's Jacobians against the finite-difference lanes', side by side.

  python -m benchmarks.bench_linearize [--device cpu] [--models so101 ...] [--nworld 64] [--nstep 20]

Per model, a captured linearized rollout (`Rollout.stages(linearize=True)`, as iLQR and Gauss-Newton
replay it: forward, then every step's `A`, `B` and sensor Jacobians) with `jacobian="analytic"`
(`adjoint.AnalyticJacobian`: one reverse sweep of the replayed step per velocity, activation and
sensor row) and with `jacobian="finite_difference"` (`1 + 2 nz` lanes per world), and the captured
forward-only rollout, replayed in turns (`timing.alternate`); `speedup` is lanes / analytic, the
median of the per-round ratios. `diff` is the largest difference of the two `[A B]` relative to
their largest entry, over the world-steps whose lanes crossed no constraint switch (`Rollout.switches`;
where they do, the lanes' difference is no derivative); the lanes' own error against float64 MuJoCo C
is in `tests/test_gradients.py`, the analytic one's in `tests/test_jacobians.py`. `sweeps`: the
reverse sweeps per step (velocity and activation rows and the sensors that are no selection); where
`sweeps * worlds <= adjoint.jacobian.BATCH_WORLDS` they run as one reverse pass of a tiled replay, timed
beside one pass per row ("one pass per row", same Jacobians, checked bit for bit). Writes `benchmarks/results/linearize_<device>.json`
and `.md`.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import warp as wp

import diffsim
from diffsim.graph import Replay

from .bench_rollout import MODELS, controls
from .save import write_json, write_text
from .timing import alternate, spread

WORLDS = {"humanoid": 8}  # 205 lanes per world there


def bench_case(model: str, nworld: int, nstep: int, device: str | None, repeats: int) -> dict:
  scene = diffsim.Scene.from_xml(MODELS[model](), nworld=nworld, device=device)
  ctrl = wp.array(controls(scene.mjm, nworld, nstep), dtype=float, device=scene.device)
  fns, jac, nlane = {}, {}, {}
  for key in ("analytic", "finite_difference"):
    ro = diffsim.Rollout(scene, nstep, jacobian=key)
    assert ro.jacobian == key, ro.jacobian_reason
    ro.reserve_linearization()
    fns[key] = Replay(scene.device, ro.stages(ctrl, linearize=True)[0])
    fns[key]()
    jac[key] = ro.jacobians()[0].numpy()[..., :scene.nx + scene.nu]
    nlane[key] = ro.nlane
    if key == "analytic":
      lin = ro._linearizer
      sweeps = scene.nv + scene.na + len(lin._swept)
    else:
      clean = ro.switches().numpy()[:, :nstep] == 0  # world-steps whose lanes crossed no constraint switch
    if key == "analytic":
      fns["forward"] = Replay(scene.device, ro.stages(ctrl)[0])
      fns["forward"]()
      copies = lin.copies
      if copies > 1:  # the step's sweeps in one tiled pass: beside it, one pass per row
        from diffsim.adjoint import jacobian as J

        saved, J.BATCH_WORLDS = J.BATCH_WORLDS, 1
        try:
          per_row = diffsim.Rollout(scene, nstep, jacobian=key)
        finally:
          J.BATCH_WORLDS = saved
        per_row.reserve_linearization()
        fns["per_row"] = Replay(scene.device, per_row.stages(ctrl, linearize=True)[0])
        fns["per_row"]()
        assert np.array_equal(per_row.jacobians()[0].numpy()[..., :scene.nx + scene.nu], jac[key])
  times = alternate(fns, repeats=repeats, sync=wp.synchronize, budget_s=60.0)
  med = {k: float(np.median(v)) for k, v in times.items()}
  a, f = jac["analytic"][clean], jac["finite_difference"][clean]
  return {
    "model": model, "nworld": nworld, "nstep": nstep, "device": str(scene.device), "nv": scene.nv,
    "nsensordata": scene.nsensordata, "sweeps": sweeps,
    "nlane": nlane["finite_difference"], "analytic_s": med["analytic"], "lanes_s": med["finite_difference"],
    "forward_s": med["forward"], "copies": copies, "per_row_s": med.get("per_row"),
    "speedup": float(np.median(np.array(times["finite_difference"]) / np.array(times["analytic"]))),
    "diff": float(np.abs(a - f).max() / np.abs(f).max()), "clean_steps": int(clean.sum()),
    "spread": max(spread(v) for v in times.values()), "repeats": len(times["analytic"]),
  }


def table(rows: list[dict]) -> str:
  lines = ["| model | worlds | steps | analytic: sweeps per step | analytic (s) | one pass per row (s) | "
           "lanes per world | lanes (s) | speed-up | analytic / forward | [A B] analytic vs lanes | spread |",
           "|" + "---|" * 12]
  for r in rows:
    per_row = f"{r['per_row_s']:.3g}" if r.get("per_row_s") else "(same)"
    lines.append(f"| {r['model']} | {r['nworld']} | {r['nstep']} | {r['sweeps']} | {r['analytic_s']:.3g} | "
                 f"{per_row} | {r['nlane']} | {r['lanes_s']:.3g} | {r['speedup']:.2f}x | "
                 f"{r['analytic_s'] / r['forward_s']:.1f}x | {r['diff']:.1e} | {r['spread']:.2f} |")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None)
  parser.add_argument("--models", nargs="+", default=["cartpole", "so101", "arm5", "humanoid"], choices=list(MODELS))
  parser.add_argument("--nworld", type=int, nargs="+", default=[64, 1])
  parser.add_argument("--nstep", type=int, default=20)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  argv_saved = sys.argv[1:] if argv is None else list(argv)
  rows = []
  for nworld, m in ((n, m) for n in args.nworld for m in args.models):
    rows.append(bench_case(m, min(nworld, WORLDS.get(m, nworld)), args.nstep, args.device, args.repeats))
    device = rows[0]["device"].replace(":", "")
    write_json(os.path.join(args.out, f"linearize_{device}.json"), {"argv": argv_saved, "rows": rows})
    print(table(rows[-1:]).splitlines()[-1], flush=True)
  md = table(rows)
  write_text(os.path.join(args.out, f"linearize_{device}.md"), md)
  print(md)
  return rows


if __name__ == "__main__":
  main()
