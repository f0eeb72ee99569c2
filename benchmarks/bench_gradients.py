"""Gradient quality: tape gradients against central differences of float64 MuJoCo C (README table).

Each case is one `diffsim.check_gradients` call of `tests/test_gradients.py`: its model and inputs
(seeds, parameters) are `tests/models.py`'s `GRADIENT_CASES`, which both import (2 worlds, each with
its own inputs; default settings, so the analytic adjoint where it covers the model and its
parameters, else the lanes with their default steps):
the relative error of the gradient of a random linear functional of the whole trajectory, per
input, the worse of the 2 worlds. The test asserts tolerances on these; this script stores the
measured values (`benchmarks/results/gradients_<device>.{json,md}`), from which
`benchmarks/readme.py` renders the README's "Gradient quality" table. That table's humanoid row
comes from `bench_contact_gradients.py`'s stored sweep (`contact_gradients_<device>.json`).

Run: `python -m benchmarks.bench_gradients [--device cpu] [--cases cartpole_100 ...]` (about 4
minutes on 2 CPU cores with warm kernels). `--quick`: the cart-pole case at 10 steps.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
import time

from .save import write_json

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def _models():
  """`tests/models.py`: the test models and the gradient checks' inputs, shared with the tests."""
  spec = importlib.util.spec_from_file_location("diffsim_test_models", os.path.join(_ROOT, "tests", "models.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _scene(name: str, device):
  import diffsim

  models = _models()
  src = {"cartpole": lambda: diffsim.asset_path("cartpole.xml"), "ball_free": lambda: models.BALL_FREE,
         "rolling_ball": lambda: models.ROLLING_BALL, "so101": models.so101_spec}[name]()
  return diffsim.Scene.from_xml(src, nworld=2, device=device)


# `tests/models.py`'s GRADIENT_CASES: (README label, short names of the parameters in the README)
CASES = {
  "cartpole_100": ("cart-pole, 100 steps",
                   {"body_mass:pole": "mass", "dof_damping:hinge": "damping", "opt.gravity": "gravity"}),
  "cartpole_300": ("cart-pole, 300 steps", {}),
  "ball_free_60": ("hinge + ball joint + spinning free body, 60 steps",
                   {"body_mass:bob": "mass", "dof_damping:ball": "damping"}),
  "rolling_ball_60": ("ball rolling on a plane (contact), 60 steps",
                      {"body_mass:ball": "mass", "dof_damping:ball": "damping"}),
  "so101_40": ("SO-101 arm (dry friction, saturating servos, self-collision), 40 steps",
               {"dof_damping:elbow_flex": "damping", "dof_armature:shoulder_lift": "armature",
                "actuator_gainprm:elbow_flex": "kp"}),
  "so101_300": ("SO-101 arm, 300 steps", {"dof_damping:elbow_flex": "damping"}),
}


def run_case(name: str, scene, nstep: int | None = None) -> dict:
  """One case's `check_gradients` (at `nstep` steps instead of the case's, for quick checks)."""
  from diffsim.gradcheck import check_gradients

  label = CASES[name][0]
  steps = _models().GRADIENT_CASES[name][1]
  nstep = steps if nstep is None else nstep
  kw = _models().gradient_inputs(name, scene, nstep)
  t0 = time.perf_counter()
  res = check_gradients(scene, kw.pop("ctrl"), **kw)
  # what the default gradient="auto" took for this model and these parameters
  from diffsim.adjoint import analytic_coverage

  covered = analytic_coverage(scene.mjm, [p.field for p in kw.get("params", ())]) is None
  return {"case": name, "label": label if nstep == steps else f"{label} (at {nstep} steps)", "nstep": nstep,
          "gradient": "analytic" if covered else "lanes",
          "nworld": scene.nworld, "device": str(scene.device), "rel_err": dict(res.rel_err),
          "rel_err_by_world": {k: [float(e) for e in v] for k, v in res.rel_err_by_world.items()},
          "wall_s": time.perf_counter() - t0}


def _e(x: float) -> str:
  m, e = f"{x:.1e}".split("e")
  return f"{m}e{int(e)}"


def table(rows: list[dict]) -> str:
  """The README's table: per case the error of each input group, parameters by short name."""
  out = ["| model | gradient | ctrl | qpos0 | qvel0 | parameters |", "|---|---|---|---|---|---|"]
  for r in rows:
    err = r["rel_err"]
    short = CASES[r["case"]][1] if r.get("case") in CASES else {}
    cell = lambda k: _e(err[k]) if k in err else ""
    params = ", ".join(f"{short.get(k, k)} {_e(v)}" for k, v in err.items() if k not in ("ctrl", "qpos0", "qvel0"))
    out.append(f"| {r['label']} | {r.get('gradient', 'lanes')} | {cell('ctrl')} | {cell('qpos0')} | {cell('qvel0')} | {params} |")
  return "\n".join(out)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
  parser.add_argument("--quick", action="store_true", help="the 300-step cart-pole case at 10 steps")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  argv = sys.argv[1:] if argv is None else list(argv)
  args = parser.parse_args(argv)
  import warp as wp

  wp.config.log_level = wp.LOG_WARNING
  cases = [("cartpole_300", 10)] if args.quick else [(c, None) for c in args.cases]
  scenes, rows = {}, []
  for name, nstep in cases:
    key = _models().GRADIENT_CASES[name][0]
    if key not in scenes:
      scenes[key] = _scene(key, args.device)
    rows.append(run_case(name, scenes[key], nstep))
    print(table(rows[-1:]).splitlines()[-1], f"({rows[-1]['wall_s']:.1f} s)", flush=True)
    device = rows[-1]["device"].split(":")[0]
    write_json(os.path.join(args.out, f"gradients_{device}.json"), {"argv": argv, "rows": rows})
    md = os.path.join(args.out, f"gradients_{device}.md")
    with open(md + ".tmp", "w") as f:
      f.write(table(rows) + "\n")
    os.replace(md + ".tmp", md)
  return rows


if __name__ == "__main__":
  main()
