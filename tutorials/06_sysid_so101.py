"""Tutorial 6: identify the SO-101 arm's servo damping, armature and friction, with confidence.

The SO-101 is driven by Feetech STS3215 servos. Its MJCF models each servo with a joint damping
(0.60 N m s/rad), a rotor armature (0.028 kg m^2) and a dry friction (`frictionloss`, 0.052 N m).
Here a "real" arm, whose servos differ from those values by 10-50%, follows sinusoidal position
targets; we record its joint angles at 100 Hz with encoder-like noise (std 1e-3 rad) and no
velocities, as a servo bus would give them. `diffsim.sysid.identify` then fits the three
quantities of every joint to the recording, solving for the initial state too (its velocity was
not measured, its position only noisily), and reports each value with a standard deviation from
the Gauss-Newton Hessian.

What to expect: damping and armature come back within a few percent (their std says how far);
frictionloss is a non-smooth constraint force (MuJoCo regularizes it), so its Jacobian is rougher
and its uncertainty larger, mostly for joints that move little.

Run:
  python tutorials/06_sysid_so101.py --device cuda:0     # 18 parameters, 3 s of data
  python tutorials/06_sysid_so101.py --test              # 1 joint, 0.3 s (CPU, CI)
"""

import argparse
import os
import sys

import mujoco
import numpy as np

import diffsim

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
FIELDS = ["dof_damping", "dof_armature", "dof_frictionloss"]
# the "real" servos, relative to the MJCF values, per joint
FACTORS = {
  "dof_damping": [1.2, 1.4, 1.3, 1.1, 0.9, 1.25],
  "dof_armature": [1.2, 1.3, 1.25, 1.1, 0.9, 1.3],
  "dof_frictionloss": [1.5, 1.3, 1.4, 1.2, 0.8, 1.1],
}


def position_targets(mjm, joints, t):
  """Sinusoidal targets `(T, nu)`: a different frequency and phase per joint, inside ctrlrange."""
  nu = mjm.nu
  freq = np.array([0.6, 0.9, 1.1, 1.3, 1.7, 1.5])
  amp = np.array([0.8, 0.6, 0.7, 0.8, 1.2, 0.6])
  center = np.array([0.0, 0.2, -0.2, 0.3, 0.0, 0.6])
  ctrl = np.zeros((t.size, nu))
  for a in range(nu):
    name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, a)
    k = JOINTS.index(name)
    ctrl[:, a] = center[k] + (amp[k] * np.sin(2 * np.pi * freq[k] * t + k) if name in joints else 0.0)
  return np.clip(ctrl, mjm.actuator_ctrlrange[:, 0], mjm.actuator_ctrlrange[:, 1])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda if available, else cpu)")
  parser.add_argument("--iters", type=int, default=15, help="maximum Levenberg-Marquardt iterations")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  parser.add_argument("--test", action="store_true", help="short run that checks the result (for CI)")
  parser.add_argument("--duration", type=float, default=None, help="recording length, s (default 3, test 0.3)")
  parser.add_argument("--noise", type=float, default=1e-3, help="joint-angle noise std, rad (default 1e-3)")
  args = parser.parse_args(argv)

  import warp as wp

  wp.config.log_level = wp.LOG_WARNING
  out = os.path.join(args.out, "06_sysid_so101")
  os.makedirs(out, exist_ok=True)
  # --test identifies one joint (the others are already right) on a short recording
  joints = ["elbow_flex"] if args.test else JOINTS
  duration = args.duration or (0.3 if args.test else 3.0)

  path = diffsim.asset_path("so101", "so101_new_calib.xml")
  truth = mujoco.MjModel.from_xml_path(path)
  true = {}
  for f in FIELDS:
    ids = [truth.jnt_dofadr[mujoco.mj_name2id(truth, mujoco.mjtObj.mjOBJ_JOINT, j)] for j in joints]
    getattr(truth, f)[ids] *= [FACTORS[f][JOINTS.index(j)] for j in joints]
    true[f] = getattr(truth, f)[ids].copy()
  # constants derived from the armature (dof_invweight0, which sets how soft the frictionloss and
  # joint-limit constraints are) must follow it, as they do for the identified model
  mujoco.mj_setConst(truth, mujoco.MjData(truth))

  rate = 100.0  # Hz; the model steps at 2 ms, so 5 steps per sample
  substeps = int(round(1.0 / (rate * truth.opt.timestep)))
  t = np.arange(int(round(duration * rate)) + 1) / rate
  rec = diffsim.data.simulate(truth, position_targets(truth, joints, t), substeps=substeps,
                              noise={"qpos": args.noise}, seed=1, record=("qpos",))
  diffsim.data.save_npz(os.path.join(out, "recording.npz"), rec)

  params = [diffsim.Param(f, joints, name=f) for f in FIELDS]
  # the joint angles are noisy, so the initial state is solved for too (fit_qpos0; the velocities,
  # not recorded, always are) instead of pinning the simulation to the first noisy sample
  res = diffsim.sysid.identify(path, rec, params, fit_qpos0=True, device=args.device, maxiter=args.iters,
                               progress=not args.test)
  res.save(out, truth=true)

  print(f"{'':18s}" + "".join(f"{j:>22s}" for j in joints))
  inside = {}
  for f in FIELDS:
    x, s = np.atleast_1d(res.x[f]), np.atleast_1d(res.std[f])
    print(f"{f:18s}" + "".join(f"{v:>12.4g} ± {e:<7.2g}" for v, e in zip(x, s)))
    print(f"{'  truth':18s}" + "".join(f"{v:>12.4g}{'':10s}" for v in true[f]))
    print(f"{'  initial (MJCF)':18s}" + "".join(f"{v:>12.4g}{'':10s}" for v in np.atleast_1d(res.x0[f])))
    inside[f] = np.abs(x - true[f]) <= 3.0 * s
  for w in res.warnings:
    print("warning:", w)
  print(res.summary())
  print(f"stopped: {res.message}")
  print(f"condition number of the scaled Gauss-Newton Hessian: {res.cond:.3g}")
  print(f"truth within 3 std: {sum(int(v.sum()) for v in inside.values())} of {sum(v.size for v in inside.values())}")
  print(f"wrote {out}/: recording.npz, params.json, model.xml, signals.png, cost.png, params.png")
  if args.test:
    rel = {f: np.abs(np.atleast_1d(res.x[f]) / true[f] - 1.0) for f in FIELDS}
    rel_std = {f: np.atleast_1d(res.std[f]) / true[f] for f in FIELDS}
    # noisy data: the estimates must be consistent with their std, and damping and armature sharp
    ok = (res.fun < 0.1 * res.fun0 and all(v.all() for v in inside.values())
          and all((rel[f] < 0.1).all() and (rel_std[f] < 0.05).all() for f in ("dof_damping", "dof_armature")))
    print("relative errors:", {f: np.round(v, 4).tolist() for f, v in rel.items()})
    print("test", "passed" if ok else "FAILED")
    return 0 if ok else 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
