"""USD importers side by side: install size, load time, and what each keeps of the test stages.

The stages are `tests/usd_stages.py`'s: the arm (ArticulationRootAPI on an Xform above the links, the
layout of Isaac and Newton assets; MassAPI, revolute and prismatic joints with limits and drives,
materials, a free box, a mesh collider), the same with the ArticulationRootAPI moved onto the base
link, and the shipped SO-101 written as a stage. Each importer's model is compared with the MJCF
written by hand for the arm: masses, limits, actuators, friction, armature, and 100 steps of float64
MuJoCo C (the largest |qpos| difference).

The importers cannot share one environment (mujoco-usd pins mujoco 4.0.1 and usd-core 25.11), so run
this once per environment:

  python -m benchmarks.bench_usd --importer diffsim                        # pip install "diffsim[usd]"
  VENV/bin/python -m benchmarks.bench_usd --importer newton                # + newton newton-usd-schemas
  VENV/bin/python -m benchmarks.bench_usd --importer mujoco-usd            # mujoco==4.0.1 mujoco-usd==4.0.1

Install size: the bytes of the distributions' files (`importlib.metadata`) that the importer adds to
an environment holding diffsim's own dependencies (warp-lang, mujoco): usd-core for diffsim; usd-core,
newton and newton-usd-schemas for Newton; mujoco-usd, usd-core 25.11 and newton-usd-schemas (and the
mujoco 4.0.1 wheels that replace 4.0.0) for mujoco-usd.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTS = {"diffsim": ["usd-core"], "newton": ["usd-core", "newton", "newton-usd-schemas"],
         "mujoco-usd": ["mujoco-usd", "usd-core", "newton-usd-schemas", "mujoco", "mujoco-core", "mujoco-studio",
                        "mujoco-studio-wasm"]}
COLD_IMPORT = {"diffsim": "import pxr.UsdPhysics, pxr.UsdShade", "newton": "import newton, pxr.UsdPhysics",
               "mujoco-usd": "import mujoco"}


def _stages_module():
  spec = importlib.util.spec_from_file_location("diffsim_usd_stages", os.path.join(ROOT, "tests", "usd_stages.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def install_mb(importer: str) -> float:
  total = 0
  for name in DISTS[importer]:
    try:
      dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
      continue
    total += sum(f.size or 0 for f in dist.files or [])
  return total / 2**20


def load(importer: str, path: str):
  """The compiled MjModel of `path` read by `importer`."""
  import mujoco

  if importer == "mujoco-usd":
    return mujoco.MjSpec.from_file(path).compile()
  if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
  from diffsim.usd import usd_to_spec

  return usd_to_spec(path, importer="newton" if importer == "newton" else "diffsim").spec.compile()


def compare(m, h) -> dict:
  """What the imported arm `m` keeps of the hand-written MJCF `h`."""
  import mujoco

  # rtol 1e-5: an importer that goes through MJCF text (Newton) prints ranges and gains to 6 digits
  out = {"masses": bool(m.nbody == h.nbody and np.allclose(m.body_mass, h.body_mass, rtol=1e-5)),
         "limits": bool(m.njnt == h.njnt and np.allclose(m.jnt_range, h.jnt_range, rtol=1e-5)),
         "drives": bool(m.nu == h.nu and np.allclose(m.actuator_biasprm[:, :3], h.actuator_biasprm[:, :3], rtol=1e-5)),
         "friction": bool(m.ngeom == h.ngeom and np.allclose(m.geom_friction[:, 0], h.geom_friction[:, 0], rtol=1e-5)),
         "armature": bool(m.nv == h.nv and np.allclose(m.dof_armature, h.dof_armature, rtol=1e-5))}
  if m.nq == h.nq and m.nu == h.nu:
    dm, dh = mujoco.MjData(m), mujoco.MjData(h)
    err = 0.0
    for t in range(100):
      dm.ctrl[:] = dh.ctrl[:] = [0.8 * math.sin(0.1 * t), 0.05 + 0.05 * math.cos(0.07 * t)]
      mujoco.mj_step(m, dm)
      mujoco.mj_step(h, dh)
      err = max(err, float(np.abs(dm.qpos - dh.qpos).max()))
    out["qpos_err_100"] = err
  else:
    out["qpos_err_100"] = None
  return out


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--importer", choices=tuple(DISTS), default="diffsim")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--no-so101", action="store_true", help="skip the SO-101 stage")
  args = p.parse_args(argv)
  import mujoco

  stages = _stages_module()
  res = {"importer": args.importer, "install_mb": round(install_mb(args.importer), 1)}
  cold = subprocess.run([sys.executable, "-c", f"import time; t = time.perf_counter(); {COLD_IMPORT[args.importer]}; "
                         "print(time.perf_counter() - t)"], capture_output=True, text=True, cwd=ROOT)
  res["import_s"] = float(cold.stdout.strip().splitlines()[-1]) if cold.returncode == 0 else None
  with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
    warnings.simplefilter("ignore")
    arm = stages.write_arm_stage(os.path.join(tmp, "arm.usda"))
    hand = mujoco.MjModel.from_xml_string(stages.arm_mjcf())
    from pxr import Usd, UsdPhysics

    # the ArticulationRootAPI on the base link instead of the Xform above it: a file of its own (an
    # edited layer stays in USD's layer registry, where an importer in this process would find it)
    on_link = stages.write_arm_stage(os.path.join(tmp, "arm_rootlink.usda"))
    st = Usd.Stage.Open(on_link)
    st.GetPrimAtPath("/World/arm").RemoveAPI(UsdPhysics.ArticulationRootAPI)
    UsdPhysics.ArticulationRootAPI.Apply(st.GetPrimAtPath("/World/arm/base"))
    st.GetRootLayer().Save()
    for label, path in (("arm", arm), ("arm_root_on_link", on_link)):
      times, m, error = [], None, None
      for _ in range(args.repeats):
        t = time.perf_counter()
        try:
          m = load(args.importer, path)
        except Exception as e:  # what the importer says about this layout is the result
          error = " ".join(str(e).split())[:200]
          break
        times.append(time.perf_counter() - t)
      res[label] = {"error": error} if error else {"first_load_s": times[0], "load_s": statistics.median(times),
                                                    **compare(m, hand)}
    if not args.no_so101:
      src = mujoco.MjModel.from_xml_path(os.path.join(ROOT, "diffsim", "assets", "so101", "so101_new_calib.xml"))
      so = stages.write_stage_from_mjmodel(src, os.path.join(tmp, "so101.usda"))
      t = time.perf_counter()
      try:
        m = load(args.importer, so)
        res["so101"] = {"load_s": time.perf_counter() - t, "nbody": m.nbody, "nu": m.nu,
                        "mass_rel_err": float(np.abs(m.body_mass[1:] / src.body_mass[1:] - 1).max())}
      except Exception as e:
        res["so101"] = {"error": " ".join(str(e).split())[:200]}
  print(res)
  return res


if __name__ == "__main__":
  main()
