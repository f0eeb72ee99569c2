"""Gradient quality: tape gradients against central differences of float64 MuJoCo C (README table).

Each case is one `diffsim.check_gradients` call of `tests/test_gradients.py`, with the same model,
inputs, seeds and parameters (2 worlds, each with its own inputs; default settings, so the analytic
adjoint where it covers the model and its parameters, else the lanes with their default steps):
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
import importlib.util
import os
import sys
import time

import numpy as np

from .bench_rollout import write_json

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _models():
  """`tests/models.py`: the test models, shared with tests/test_gradients.py."""
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


def _cartpole(scene, nstep):
  import diffsim

  rng = np.random.default_rng(0 if nstep == 100 else 7)
  if nstep == 100:  # test_cartpole_gradients
    params = [diffsim.Param("body_mass", "pole"), diffsim.Param("dof_damping", "hinge"),
              diffsim.Param("opt.gravity", components=[2])]
    return dict(ctrl=0.5 * rng.standard_normal((100, 1)), qpos0=[0.1, 0.3], qvel0=[0.0, 0.5], params=params)
  # test_long_horizon_gradients (and --quick, at its length)
  return dict(ctrl=0.5 * rng.standard_normal((nstep, 1)), qpos0=[0.1, 0.3], wrt=("ctrl", "qpos0", "qvel0"))


def _ball_free(scene, nstep):
  import diffsim

  m = scene.mjm
  rng = np.random.default_rng(1)
  qpos0 = m.qpos0.copy()
  qpos0[1:5] = np.array([0.9, 0.2, 0.3, 0.1]) / np.linalg.norm([0.9, 0.2, 0.3, 0.1])
  qvel0 = 0.5 * rng.standard_normal(m.nv)
  qvel0[7:10] = [1.0, 3.0, -2.0]
  params = [diffsim.Param("body_mass", "bob"), diffsim.Param("dof_damping", "ball")]
  return dict(ctrl=0.3 * rng.standard_normal((nstep, m.nu)), qpos0=qpos0, qvel0=qvel0, params=params)


def _rolling_ball(scene, nstep):
  import diffsim

  rng = np.random.default_rng(2)
  params = [diffsim.Param("body_mass", "ball"), diffsim.Param("dof_damping", "ball")]
  return dict(ctrl=2.0 + 0.5 * rng.standard_normal((nstep, 1)), qvel0=[0.3, 0, 0, 0, 6.0, 0], params=params)


def _so101(scene, nstep):
  import diffsim

  nu = scene.nu
  if nstep == 40:  # test_so101_gradients
    rng = np.random.default_rng(0)
    ctrl = np.tile(0.3 * rng.standard_normal(nu), (40, 1)) + 0.05 * rng.standard_normal((40, nu))
    params = [diffsim.Param("dof_damping", "elbow_flex"), diffsim.Param("dof_armature", "shoulder_lift"),
              diffsim.Param("actuator_gainprm", "elbow_flex")]
    return dict(ctrl=ctrl, params=params)
  # test_long_horizon_gradients draws the cart-pole's controls first from the same generator
  rng = np.random.default_rng(7)
  rng.standard_normal((300, 1))
  ctrl = np.tile(0.3 * rng.standard_normal(nu), (nstep, 1)) + 0.05 * rng.standard_normal((nstep, nu))
  return dict(ctrl=ctrl, params=[diffsim.Param("dof_damping", "elbow_flex")], wrt=("qvel0", "params"))


# name: (README label, scene, steps, inputs, short names of the parameters in the README)
CASES = {
  "cartpole_100": ("cart-pole, 100 steps", "cartpole", 100, _cartpole,
                   {"body_mass:pole": "mass", "dof_damping:hinge": "damping", "opt.gravity": "gravity"}),
  "cartpole_300": ("cart-pole, 300 steps", "cartpole", 300, _cartpole, {}),
  "ball_free_60": ("hinge + ball joint + spinning free body, 60 steps", "ball_free", 60, _ball_free,
                   {"body_mass:bob": "mass", "dof_damping:ball": "damping"}),
  "rolling_ball_60": ("ball rolling on a plane (contact), 60 steps", "rolling_ball", 60, _rolling_ball,
                      {"body_mass:ball": "mass", "dof_damping:ball": "damping"}),
  "so101_40": ("SO-101 arm (dry friction, saturating servos, self-collision), 40 steps", "so101", 40, _so101,
               {"dof_damping:elbow_flex": "damping", "dof_armature:shoulder_lift": "armature",
                "actuator_gainprm:elbow_flex": "kp"}),
  "so101_300": ("SO-101 arm, 300 steps", "so101", 300, _so101, {"dof_damping:elbow_flex": "damping"}),
}


def run_case(name: str, scene, nstep: int | None = None) -> dict:
  """One case's `check_gradients` (at `nstep` steps instead of the case's, for quick checks)."""
  from diffsim.gradcheck import check_gradients

  label, _, steps, inputs, short = CASES[name]
  nstep = steps if nstep is None else nstep
  kw = inputs(scene, nstep)
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
    short = CASES[r["case"]][4] if r.get("case") in CASES else {}
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
    key = CASES[name][1]
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
