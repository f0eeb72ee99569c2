"""Tutorial 9: identify the cube's friction and mass from recorded pushes by the SO-101.

In the shipped pick scene (`diffsim/assets/so101/pick_scene.xml`) the SO-101 lowers its gripper
beside the cube and sweeps it sideways with its shoulder-pan servo, pushing the cube across the
floor. The "real" cube is slipperier and heavier than the MJCF says: sliding friction 0.6 instead
of 1.0, mass 0.13 kg instead of 0.1 (a 30 g weight at its center: its rotational inertia stays the
MJCF's). We record several pushes with MuJoCo C (float64) at 100 Hz -- the arm's joint angles, the
cube's position (the `block_pos` framepos sensor, as a motion-capture marker gives it) and the
velocities -- save them as `.npz` and `.csv` (the formats of `diffsim.data`), and identify
`geom_friction:block` (its sliding component) and `body_mass:block` from the MJCF values with
`diffsim.sysid.identify` (Levenberg-Marquardt).

Mass shows only through the arm: the cube's own motion under a given friction force is
mass-free (a = mu g while it slides), but the force it takes to push it, which deflects the
compliant position servos (kp 17.8 N m/rad), is m (a + mu g).

What the tutorial changes in the scene, and why:
  - The cube's geom gets `priority="1"`, so its friction is the one its contacts use. MuJoCo
    otherwise takes the larger of the two geoms' frictions, and the floor's is 1.0: any cube
    friction below 1 would have no effect at all.
  - The cube touches the floor and the gripper's two box-shaped jaw pads only (collision bits;
    the pads are there for this, see the SO-101 MJCF), not the gripper's meshes. MJWarp's and
    MuJoCo C's mesh-box collisions pick different contact points, and a push by a mesh left the
    cube 7 mm and 3 degrees apart between them after 0.8 s at the true parameters; box-box
    contacts agree to 1e-4.
  - `noslip_iterations` is 0 here (the scene has 5; `--noslip 5` keeps them). MJWarp runs the
    noslip solver, which the analytic adjoint does not cover: LM then takes its Jacobians from
    finite-difference lanes, which differentiate whatever the step does. Identification works
    either way (both recover friction and mass within 0.3%, measured on the lanes). But MJWarp's
    float32 noslip departs further from float64 C: on the four full pushes the mass came out
    7.5e-4 off with a std of 3e-5 (3.2 std: outside its interval) with noslip, 3.0e-3 off with a
    std of 1.7e-4 (2.3 std) without (both on the lanes). Without it, too, the model is one the
    analytic adjoint covers: LM's step Jacobians come from the analytic step (its reverse sweeps at
    the solver's solution, `geom_friction` and `body_mass` columns included): 1.9e-3 off with a std
    of 1.1e-4 (2.3 std), friction 4e-5 off (0.1 std), in 6 iterations and 11 s (8 and 144 s on the
    lanes).

A sliding 4 cm box on this floor hops: from the moment it slides, MuJoCo's soft contacts let its
corners lift and land again (its floor contacts go 4, 2, 0, 4 from step to step, in C and MJWarp
alike, under any push). Over a whole push the hops make the cost rough in the parameters (a 1%
change of friction reorders them), and Levenberg-Marquardt from the MJCF values stalls. Multiple
shooting with one sample per segment (`shooting=1`: every 10 ms the simulation restarts from the
recorded state) keeps each prediction short, and the cost is then smooth enough to descend. The
residuals are the cube's position and the arm's joint angles; the velocities (needed for the
restarts) and the cube's orientation, which the hops shake, get zero weight.

Which derivatives: LM needs whole step Jacobians, which the analytic step forms where it covers the
model, else the perturbation lanes; the result's `derivatives` says which, per parameter.

Run:
  python tutorials/09_sysid_push_friction.py              # 4 pushes of 0.8 s; writes out/09_sysid_push_friction/
  python tutorials/09_sysid_push_friction.py --test       # 2 pushes of 0.5 s; checks the bar (CPU, CI)

The same from the command line, on the files this script writes (`push_scene.xml` is the scene
with the MJCF's friction and mass, the initial guess; the CLI keeps LM's default xtol, 1e-6, so it
runs on at the float32 floor until its maxiter):
  diffsim sysid out/09_sysid_push_friction/push_scene.xml out/09_sysid_push_friction/push*.csv \\
      --param geom_friction:block --param body_mass:block --shooting 1 --weight qvel=0 \\
      --weight qpos:block=0 --weight sensor:block_quat=0 --weight sensor:so101/ee_pos=0 \\
      --weight sensor:so101/ee_quat=0 --weight sensor:so101/ee_vel=0 --weight sensor:so101/ee_angvel=0 \\
      --out out/09_sysid_push_friction/cli
"""

import argparse
import os
import sys

import mujoco
import numpy as np

import diffsim

TRUTH = {"geom_friction:block": 0.6, "body_mass:block": 0.13}
GUESS = {"geom_friction:block": 1.0, "body_mass:block": 0.1}  # the MJCF's values
CUBE_INERTIA = 0.1 * 0.04 ** 2 / 6  # kg m^2, the MJCF's 0.1 kg, 4 cm cube (each axis)
# pushes: (radius of the sweep, m; side the gripper starts on, +1 = +y; sweep, rad; sweep time, s)
PUSHES = [(0.30, 1, 0.40, 0.50), (0.30, -1, 0.40, 0.35), (0.28, 1, 0.30, 0.30), (0.32, -1, 0.35, 0.60)]
RATE = 100.0  # Hz
GAP = 0.001  # m, between the jaw pad and the cube at the start
# only the cube's position and the arm's joint angles count; velocities serve the restarts
WEIGHTS = {"qvel": 0.0, "qpos:block": 0.0, "sensor:block_quat": 0.0, "sensor:so101/ee_pos": 0.0,
           "sensor:so101/ee_quat": 0.0, "sensor:so101/ee_vel": 0.0, "sensor:so101/ee_angvel": 0.0}


def push_scene(friction: float, mass: float, noslip: int) -> mujoco.MjSpec:
  """The pick scene with the cube's friction and mass, set up for pushing (see the docstring)."""
  path = diffsim.asset_path("so101", "pick_scene.xml")
  spec = mujoco.MjSpec.from_file(path)
  spec.meshdir = os.path.join(os.path.dirname(path), "assets")  # written copies load from anywhere
  spec.option.noslip_iterations = noslip
  geom = spec.geom("block")
  geom.priority = 1
  geom.friction[0] = friction
  geom.contype, geom.conaffinity = 4, 6  # the floor (bit 4, below) and the jaw pads (bit 2), not the meshes
  spec.geom("floor").contype = 5
  body = spec.body("block")
  body.explicitinertial = True
  body.mass, body.inertia, body.ipos = mass, [CUBE_INERTIA] * 3, [0.0, 0.0, 0.0]
  return spec


def start_pose(mjm: mujoco.MjModel, radius: float, side: int) -> np.ndarray:
  """Arm joint angles `(6,)` with the gripper pointing down, its tip 12 mm above the floor at
  `radius` from the base, the fixed jaw pad `GAP` from the cube's side."""
  from scipy.optimize import least_squares

  d = mujoco.MjData(mjm)
  site = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_SITE, "gripperframe")
  target = np.array([radius, 0.05 * side, 0.012])

  def residual(q):
    d.qpos[:6] = q
    mujoco.mj_kinematics(mjm, d)
    # the site's x axis points along the fingers: straight down
    down = d.site_xmat[site][[0, 3, 6]] - [0.0, 0.0, -1.0]
    return np.concatenate([10.0 * (d.site_xpos[site] - target), down, [0.1 * q[4]]])

  q = least_squares(residual, np.array([0.2, 0.9, -1.0, 1.6, 0.0, 0.0]), bounds=mjm.jnt_range[:6].T).x
  # pan towards the cube until a pad touches it, then back off by GAP
  cube = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_GEOM, "block")
  floor = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_GEOM, "floor")
  d.qpos[6:9], d.qpos[9:13] = [0.3, 0.0, 0.02], [1, 0, 0, 0]
  for a in np.linspace(0.0, 0.3 * side, 601):  # a positive pan moves the gripper towards -y
    d.qpos[:6] = q
    d.qpos[0] += a
    mujoco.mj_forward(mjm, d)
    if any(cube in (c.geom1, c.geom2) and floor not in (c.geom1, c.geom2) and c.dist < 0 for c in d.contact[:d.ncon]):
      break
  q[0] += a - side * GAP / radius
  return q


def record_push(mjm: mujoco.MjModel, radius: float, side: int, sweep: float, tsweep: float, duration: float):
  """One push as MuJoCo C records it: the arm settles at its start pose with the cube at rest, then
  the pan target sweeps by `sweep` rad (a cosine ramp over `tsweep` s) towards the cube."""
  q0 = start_pose(mjm, radius, side)
  d = mujoco.MjData(mjm)
  d.qpos[:6], d.qpos[6:9], d.qpos[9:13] = q0, [0.3, 0.0, 0.02], [1, 0, 0, 0]
  d.ctrl[:] = q0
  for _ in range(300):  # 0.6 s: the cube settles on the floor, the arm on its servos
    mujoco.mj_step(mjm, d)
  t = np.arange(int(round(duration * RATE)) + 1) / RATE
  ramp = 0.5 - 0.5 * np.cos(np.pi * np.clip(t / tsweep, 0.0, 1.0))
  ctrl = np.tile(q0, (t.size, 1))
  ctrl[:, 0] += side * sweep * ramp
  substeps = int(round(1.0 / (RATE * mjm.opt.timestep)))
  return diffsim.data.simulate(mjm, ctrl, qpos0=d.qpos.copy(), qvel0=d.qvel.copy(), substeps=substeps)


def replay(mjm: mujoco.MjModel, rec) -> np.ndarray:
  """The cube's position `(T, 3)` when `rec`'s controls are replayed open-loop in MuJoCo C."""
  return diffsim.data.simulate(mjm, rec.ctrl, qpos0=rec.qpos[0], qvel0=rec.qvel[0],
                               substeps=int(round(1.0 / (RATE * mjm.opt.timestep))), record=("qpos",)).qpos[:, 6:9]


def plot(path: str, recs, models: dict, res) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
  for i, rec in enumerate(recs):
    line, = axes[0].plot(rec.qpos[:, 6], rec.qpos[:, 7], "k-", lw=2.5, alpha=0.35,
                         label="measured" if i == 0 else None)
    for (name, mjm), style in zip(models.items(), ("r--", "b:")):
      xyz = replay(mjm, rec)
      axes[0].plot(xyz[:, 0], xyz[:, 1], style, lw=1.3, label=name if i == 0 else None)
    axes[1].plot(rec.time, rec.qpos[:, 0], lw=1, label=f"push {i}")
  axes[0].set(xlabel="x (m)", ylabel="y (m)", title="cube paths: measured vs replayed in MuJoCo C")
  axes[0].axis("equal")
  axes[0].legend(fontsize=8)
  axes[1].set(xlabel="time (s)", ylabel="shoulder pan (rad)", title="the pushes")
  axes[1].legend(fontsize=8)
  text = "\n".join(f"{k}: {res.x[k]:.5f} ± {res.std[k]:.1g} (truth {TRUTH[k]})" for k in TRUTH)
  fig.text(0.01, 0.01, text, fontsize=8, family="monospace", va="bottom")
  fig.tight_layout(rect=(0, 0.08, 1, 1))
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--device", default=None, help="Warp device (default: cuda if available, else cpu)")
  parser.add_argument("--iters", type=int, default=20, help="maximum Levenberg-Marquardt iterations")
  parser.add_argument("--out", default="out", help="output folder (default out/)")
  parser.add_argument("--test", action="store_true", help="2 short pushes; checks the result (for CI)")
  parser.add_argument("--pushes", type=int, default=None, help="number of recorded pushes (default 4, test 2)")
  parser.add_argument("--duration", type=float, default=None,
                      help="length of each recording, s (default 0.8, test 0.5)")
  parser.add_argument("--noslip", type=int, default=0, help="noslip iterations (default 0; the scene has 5)")
  args = parser.parse_args(argv)

  import warp as wp

  wp.config.log_level = wp.LOG_WARNING
  out = os.path.join(args.out, "09_sysid_push_friction")
  os.makedirs(out, exist_ok=True)
  npush = args.pushes or (2 if args.test else len(PUSHES))
  duration = args.duration or (0.5 if args.test else 0.8)

  truth = push_scene(TRUTH["geom_friction:block"], TRUTH["body_mass:block"], args.noslip).compile()
  recs, paths = [], []
  for i, push in enumerate(PUSHES[:npush]):
    rec = record_push(truth, *push, duration)
    diffsim.data.save_npz(os.path.join(out, f"push{i}.npz"), rec)
    diffsim.data.save_csv(os.path.join(out, f"push{i}.csv"), rec, truth)
    recs.append(rec)
    paths.append(os.path.join(out, f"push{i}.csv"))
    print(f"push {i}: the cube slid {100 * np.linalg.norm(rec.qpos[-1, 6:8] - rec.qpos[0, 6:8]):.1f} cm")
  guess = os.path.join(out, "push_scene.xml")
  spec = push_scene(GUESS["geom_friction:block"], GUESS["body_mass:block"], args.noslip)
  diffsim.data.atomic_write(guess, lambda f: f.write(spec.to_xml().encode()))

  # identified from the CSV files (the npz files hold the same recordings). xtol 1e-4: by then the
  # float32 rollouts' resolution is reached (the cost is 1e-10 of its start) and further LM steps
  # only trade one rounding pattern for another
  res = diffsim.sysid.identify(guess, paths, list(TRUTH), shooting=1, weights=WEIGHTS, xtol=1e-4, device=args.device,
                               maxiter=args.iters, progress=not args.test)
  res.save(out, truth=TRUTH)
  identified = mujoco.MjModel.from_xml_path(os.path.join(out, "model.xml"))
  figure = os.path.join(out, "push_fit.png")
  plot(figure, recs, {"MJCF guess": mujoco.MjModel.from_xml_path(guess), "identified": identified}, res)

  print(f"{'parameter':22s} {'truth':>7s} {'guess':>7s} {'identified':>11s} {'std':>9s} {'rel. error':>10s} "
        f"{'err/std':>7s}")
  ok = res.success
  for name, true in TRUTH.items():
    rel, z = abs(res.x[name] / true - 1.0), abs(res.x[name] - true) / res.std[name]
    print(f"{name:22s} {true:7.3f} {res.x0[name]:7.3f} {res.x[name]:11.6f} {res.std[name]:9.2g} {rel:10.2e} {z:7.2f}")
    # the bar: within 2% of the truth, and the truth within 3 std (the reported 99.7% interval)
    ok = ok and rel < 0.02 and z <= 3.0
  for name, path in res.derivatives.items():
    print(f"derivatives of {name}: {path}")
  print(res.summary())
  print(f"wrote {out}/: push*.npz, push*.csv, push_scene.xml, params.json, model.xml, push_fit.png, signals.png, "
        "cost.png, params.png")
  print(f"09_sysid_push_friction: {npush} pushes of {duration} s, noslip {args.noslip}: friction "
        f"{res.x['geom_friction:block']:.5f} ± {res.std['geom_friction:block']:.1g}, mass "
        f"{res.x['body_mass:block']:.5f} ± {res.std['body_mass:block']:.1g} kg in {res.nit} iterations, "
        f"{res.time:.1f} s (wrote {figure})")
  if args.test:
    print("test", "passed" if ok else "FAILED")
    return 0 if ok else 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
