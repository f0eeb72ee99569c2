"""Tutorial 5: identify a pendulum's mass and damping from recorded motion.

We play the part of the experimenter. A "true" pendulum (mass 0.6 kg, hinge damping 0.08 N m s/rad)
is simulated with MuJoCo C (float64) under two different torque signals; the recordings (joint
angle and velocity, plus the tip position sensor) are saved as `.npz` files in the format of
`diffsim.data`. Our model of the pendulum is off (mass 0.45 kg, damping 0.04): that MJCF is the
initial guess. `diffsim.sysid.identify` fits both parameters to both recordings at once (one MJWarp
world per recording, one shared parameter set) with Levenberg-Marquardt, and writes
`params.json`, the identified `model.xml` and plots to `--out`.

Run:
  python tutorials/05_sysid_pendulum.py                 # writes out/05_sysid_pendulum/
  python tutorials/05_sysid_pendulum.py --device cuda:0 --iters 30
  python tutorials/05_sysid_pendulum.py --test          # short, checks the recovered values

The same from the command line, on the files this script writes:
  diffsim sysid out/05_sysid_pendulum/pendulum_guess.xml out/05_sysid_pendulum/run*.npz \\
      --param body_mass:pole --param dof_damping:hinge --out out/05_sysid_pendulum/cli
"""

import argparse
import os
import sys

import numpy as np

import diffsim

# The pendulum's inertia about its center of mass is given explicitly, so its mass acts through
# gravity (m g d) and the parallel-axis term (m d^2) only, exactly as the body_mass parameter does.
PENDULUM = """
<mujoco model="pendulum">
  <option timestep="0.01"/>
  <worldbody>
    <light pos="0 -1 2"/>
    <body name="pole">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="{damping}"/>
      <inertial pos="0 0 -0.4" mass="{mass}" diaginertia="0.004 0.004 0.0005"/>
      <geom name="rod" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.02" mass="0"/>
      <site name="tip" pos="0 0 -0.5"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="torque" joint="hinge" ctrlrange="-2 2"/>
  </actuator>
  <sensor>
    <framepos name="tip_pos" objtype="site" objname="tip"/>
  </sensor>
</mujoco>
"""
TRUTH = {"body_mass:pole": 0.6, "dof_damping:hinge": 0.08}
GUESS = {"body_mass:pole": 0.45, "dof_damping:hinge": 0.04}


def make_recordings(nrow: int, out: str) -> list[str]:
  """Simulates the true pendulum under two torque signals; returns the `.npz` paths."""
  truth = PENDULUM.format(mass=TRUTH["body_mass:pole"], damping=TRUTH["dof_damping:hinge"])
  t = np.arange(nrow) * 0.01
  paths = []
  for i, (amp, q0) in enumerate([(1.0, 0.3), (0.6, -0.8)]):
    # two tones: enough excitation to separate inertia (mass) from dissipation (damping)
    ctrl = amp * (0.8 * np.sin(2 * np.pi * 0.7 * t + i) + 0.5 * np.sin(2 * np.pi * 1.9 * t + 0.3))[:, None]
    rec = diffsim.data.simulate(truth, ctrl, qpos0=[q0])
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

  wp.config.log_level = wp.LOG_WARNING  # no kernel-loading logs between the results
  out = os.path.join(args.out, "05_sysid_pendulum")
  os.makedirs(out, exist_ok=True)
  nrow = 61 if args.test else 301  # 0.6 s or 3 s at 100 Hz
  paths = make_recordings(nrow, out)
  guess = os.path.join(out, "pendulum_guess.xml")
  with open(guess, "w") as f:
    f.write(PENDULUM.format(mass=GUESS["body_mass:pole"], damping=GUESS["dof_damping:hinge"]))

  res = diffsim.sysid.identify(guess, paths, list(TRUTH), device=args.device, maxiter=args.iters,
                               progress=not args.test)
  res.save(out, truth=TRUTH)
  print(f"{'parameter':20s} {'truth':>9s} {'guess':>9s} {'identified':>12s} {'std':>9s} {'rel. error':>10s}")
  errors = {}
  for name, true in TRUTH.items():
    errors[name] = abs(res.x[name] / true - 1.0)
    print(f"{name:20s} {true:9.4f} {res.x0[name]:9.4f} {res.x[name]:12.7f} {res.std[name]:9.2g} {errors[name]:10.2e}")
  print(res.summary())
  print(f"wrote {out}/: params.json, model.xml, signals.png, signals_1.png, cost.png, params.png")
  if args.test:
    # noise-free data from the same equations: the parameters must come back
    ok = res.success and all(e < 1e-3 for e in errors.values())
    print("test", "passed" if ok else "FAILED")
    return 0 if ok else 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
