"""Tutorial 8: a robot from a USD stage, end to end: load it, simulate it, identify its link masses.

The robot is a two-link arm authored the way Isaac Sim, Isaac Lab and Newton assets are: a
UsdPhysics stage with an `ArticulationRootAPI` on the robot's Xform, `RigidBodyAPI` and `MassAPI` on
each link, revolute joints with limits (degrees) and position drives (`DriveAPI`, gains per
degree), capsule colliders with a physics material. This script writes two such stages with `pxr`
(`pip install "diffsim[usd]"`): the "true" robot, and our model of it with wrong link masses.

1. `diffsim.Scene.from_usd` converts the model stage (see `diffsim/usd.py` for what is kept and what
   is lost) and batches it over worlds; `scene.usd_paths` maps the names `Param` takes to the prims;
   `scene.to_xml` writes the converted MJCF to read or edit.
2. The true stage drives the arm through two reaching motions, simulated with MuJoCo C (float64):
   the recordings.
3. `diffsim.sysid.identify` takes the model stage's path as it takes an MJCF path, fits the two
   masses (named after the link prims) to both recordings, and writes `params.json`, `model.xml`
   (the converted stage with the identified masses) and plots.

Run:
  python tutorials/10_usd_sysid.py                  # writes out/10_usd_sysid/
  python tutorials/10_usd_sysid.py --device cuda:0
  python tutorials/10_usd_sysid.py --test           # short, checks the recovered values

The same from the command line, on the files this script writes:
  diffsim sysid out/10_usd_sysid/arm_model.usda out/10_usd_sysid/run*.npz \\
      --param body_mass:upper_arm --param body_mass:forearm --out out/10_usd_sysid/cli
"""

import argparse
import os
import sys

import numpy as np

import diffsim

TRUTH = {"body_mass:upper_arm": 1.2, "body_mass:forearm": 0.7}
GUESS = {"body_mass:upper_arm": 0.9, "body_mass:forearm": 0.9}


def write_arm(path: str, masses: dict) -> str:
  """A two-link arm hanging from a fixed pivot, swinging in the x-z plane, as a UsdPhysics stage."""
  from pxr import Gf, Sdf, Usd, UsdGeom, UsdPhysics, UsdShade

  stage = Usd.Stage.CreateNew(path)
  UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
  UsdGeom.SetStageMetersPerUnit(stage, 1.0)
  UsdPhysics.SetStageKilogramsPerUnit(stage, 1.0)
  stage.SetDefaultPrim(UsdGeom.Xform.Define(stage, "/World").GetPrim())
  scene = UsdPhysics.Scene.Define(stage, "/World/PhysicsScene")
  scene.CreateGravityDirectionAttr(Gf.Vec3f(0, 0, -1))
  scene.CreateGravityMagnitudeAttr(9.81)
  # PhysX's step rate (its schema's attribute; usd-core reads it as a plain attribute): 100 Hz
  scene.GetPrim().CreateAttribute("physxScene:timeStepsPerSecond", Sdf.ValueTypeNames.UInt).Set(100)
  rubber = UsdShade.Material.Define(stage, "/World/Looks/rubber")
  UsdPhysics.MaterialAPI.Apply(rubber.GetPrim()).CreateDynamicFrictionAttr(0.9)
  UsdPhysics.ArticulationRootAPI.Apply(UsdGeom.Xform.Define(stage, "/World/arm").GetPrim())
  parent = None
  for i, (link, length) in enumerate((("upper_arm", 0.4), ("forearm", 0.3))):
    top = 1.0 - (0.0 if i == 0 else 0.4)  # each link hangs below its joint
    x = UsdGeom.Xform.Define(stage, f"/World/arm/{link}")
    x.AddTranslateOp().Set(Gf.Vec3d(0, 0, top))
    UsdPhysics.RigidBodyAPI.Apply(x.GetPrim())
    mass = UsdPhysics.MassAPI.Apply(x.GetPrim())
    mass.CreateMassAttr(masses[f"body_mass:{link}"])
    mass.CreateCenterOfMassAttr(Gf.Vec3f(0, 0, -length / 2))
    mass.CreateDiagonalInertiaAttr(Gf.Vec3f(0.01, 0.01, 0.001))  # authored, so the mass acts through m g d
    cap = UsdGeom.Capsule.Define(stage, f"/World/arm/{link}/collider")
    cap.CreateRadiusAttr(0.03)
    cap.CreateHeightAttr(length - 0.06)
    cap.AddTranslateOp().Set(Gf.Vec3d(0, 0, -length / 2))
    UsdPhysics.CollisionAPI.Apply(cap.GetPrim())
    UsdShade.MaterialBindingAPI.Apply(cap.GetPrim()).Bind(rubber, UsdShade.Tokens.weakerThanDescendants, "physics")
    joint = UsdPhysics.RevoluteJoint.Define(stage, f"/World/arm/joints/{'shoulder' if i == 0 else 'elbow'}")
    if parent:
      joint.CreateBody0Rel().SetTargets([parent])
    joint.CreateBody1Rel().SetTargets([x.GetPath()])
    joint.CreateLocalPos0Attr(Gf.Vec3f(0, 0, 1.0) if i == 0 else Gf.Vec3f(0, 0, -0.4))
    joint.CreateLocalPos1Attr(Gf.Vec3f(0, 0, 0))
    joint.CreateAxisAttr("Y")
    joint.CreateLowerLimitAttr(-150.0)  # degrees
    joint.CreateUpperLimitAttr(150.0)
    drive = UsdPhysics.DriveAPI.Apply(joint.GetPrim(), "angular")
    drive.CreateStiffnessAttr(0.5)  # N m per degree: 28.6 N m/rad
    drive.CreateDampingAttr(0.02)  # N m s per degree
    drive.CreateMaxForceAttr(50.0)
    parent = x.GetPath()
  stage.GetRootLayer().Save()
  return path


def make_recordings(truth_path: str, nrow: int, out: str) -> list[str]:
  """The true arm, simulated in MuJoCo C (float64) through two reaching motions at 100 Hz; the `.npz` paths."""
  from diffsim.usd import usd_to_spec

  truth_xml = usd_to_spec(truth_path).spec.to_xml()
  t = np.arange(nrow) * 0.01
  paths = []
  for i, (a, b) in enumerate([(0.8, -0.6), (-0.5, 0.9)]):
    ctrl = np.stack([a * np.sin(2 * np.pi * 0.6 * t), b * np.sin(2 * np.pi * 1.1 * t + 0.5)], axis=1)
    rec = diffsim.data.simulate(truth_xml, ctrl, qpos0=[0.2 * i, -0.1])
    path = os.path.join(out, f"run{i}.npz")
    diffsim.data.save_npz(path, rec)
    paths.append(path)
  return paths


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda if available, else cpu)")
  parser.add_argument("--iters", type=int, default=20, help="maximum Levenberg-Marquardt iterations")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  parser.add_argument("--test", action="store_true", help="short run that checks the result (for CI)")
  args = parser.parse_args(argv)

  import warp as wp

  wp.config.log_level = wp.LOG_WARNING
  out = os.path.join(args.out, "10_usd_sysid")
  os.makedirs(out, exist_ok=True)
  model = write_arm(os.path.join(out, "arm_model.usda"), GUESS)
  truth = write_arm(os.path.join(out, "arm_truth.usda"), TRUTH)

  scene = diffsim.Scene.from_usd(model, nworld=2, device=args.device)
  print(f"{model}: {scene.mjm.nbody - 1} bodies, {scene.nu} actuators; names -> prims:")
  for kind, names in scene.usd_paths.items():
    print(f"  {kind:8s} " + ", ".join(f"{n} = {p}" for n, p in names.items()))
  scene.to_xml(os.path.join(out, "arm_model.xml"))

  paths = make_recordings(truth, 61 if args.test else 301, out)
  res = diffsim.sysid.identify(model, paths, list(TRUTH), device=args.device, maxiter=args.iters,
                               progress=not args.test)
  res.save(out, truth=TRUTH)
  print(f"{'parameter':22s} {'truth':>7s} {'guess':>7s} {'identified':>11s} {'rel. error':>10s}")
  errors = {}
  for name, true in TRUTH.items():
    errors[name] = abs(res.x[name] / true - 1.0)
    print(f"{name:22s} {true:7.3f} {res.x0[name]:7.3f} {res.x[name]:11.6f} {errors[name]:10.2e}")
  print(res.summary())
  print(f"wrote {out}/: arm_model.usda, arm_model.xml, run0.npz, run1.npz, params.json, model.xml, signals.png, "
        "cost.png, params.png")
  if args.test:
    ok = res.success and all(e < 1e-3 for e in errors.values())
    print("test", "passed" if ok else "FAILED")
    return 0 if ok else 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
