"""System identification with `mujoco.sysid` and with diffsim: the same problem, side by side.

Problem: the 5-link arm of `mujoco.sysid`'s own integration test (`ARM_XML` below: 5 hinges,
motors, `jointpos` + `jointvel` sensors, `implicitfast`, timestep 0.002, no contacts). The unknowns
are the 5 armatures and the 5 dampings (`--params`); both tools start from the true values times
1.3 (`--scale`) within the bounds [guess / 10, guess * 10].

Data: MuJoCo C (`mujoco.rollout`, float64) from the true model at rest, `--steps` steps (300 =
0.6 s) per trajectory, each trajectory driven by its own sum of two sinusoids per motor (random
amplitudes, frequencies and phases, fixed seed; well inside the joint limits), noise-free. Case
"1 trajectory" and case "64 trajectories" (`--ntraj`) share one parameter set.

Both tools fit the same signals (the 10 sensors at every step, `T` rows per trajectory) with the
same residual scaling: `mujoco.sysid`'s default, `(measured - simulated) / (|measured column| /
sqrt(2))`. `mujoco.sysid` scales each trajectory on its own; diffsim takes one weight per sensor
(`weights={"sensor:<name>": w}`, `normalize=False`), the same formula over all trajectories
pooled (identical for 1 trajectory; on noise-free data the minimum is the truth either way).

  - `mujoco.sysid`: `ModelSequences` + `build_residual_fn` + `optimize(optimizer="mujoco")`, all
    defaults (Levenberg-Marquardt with forward finite-difference Jacobians: one `mujoco.rollout`
    per parameter and trajectory per iteration, float64, spread over all CPU threads).
  - diffsim: `diffsim.sysid.identify(..., solver="lm")`, defaults otherwise (Levenberg-Marquardt
    on MJWarp in float32; per-step forward-difference Jacobians over the state and the parameters
    in `1 + 2 nv + nparam` lanes per world (controls are data: no lanes), propagated forward to the
    residual Jacobian: one linearized rollout per iteration, replayed from captured graphs).
  - diffsim directional: the same with `jacobian="directional"` (forward mode: `1 + nparam` lanes
    per world, each moving the state along its parameter's tangent; less precise on constrained
    models, see `diffsim/sysid.py`).

Measured per case: wall time of each tool's whole call (median of up to `--repeats` runs, the two
tools alternating so that load from other processes hits both alike; repeats stop once a tool has
spent `--budget` s on the case), iterations (`mujoco.sysid`: steps taken, its optimizer trace less
the final entry; diffsim: `nit`, rejected trial steps included), rollouts (`mujoco.sysid`: residual
evaluations, each `ntraj` rollouts, including the finite-difference Jacobian at the solution that
`optimize` always computes; diffsim: linearized rollouts of all worlds), the largest relative parameter
error against the truth, and the ratio `mujoco.sysid time / diffsim time` (above 1: diffsim
faster). diffsim's kernel compilation (first MJWarp use of the model in this process; cached in
`~/.cache/warp` across processes, so "compile" can be mere module loading) is measured apart, on a
tiny identification run twice before the cases: first time minus second time.

Run: `python -m benchmarks.bench_sysid [--device cpu] [--ntraj 1 64] [--steps 300] [--repeats 3]`.
Prints a Markdown table and writes `benchmarks/results/sysid_<device>.json` after every case.
`--quick`: 1 and 2 trajectories of 40 steps, at most 5 iterations (a check that it runs, well under
a minute warm).

Measured on a 2-core CPU (`python -m benchmarks.bench_sysid --device cpu --repeats 3 --budget 60`,
4 minutes, nothing else running; absolute times carry that machine's load, which varied by ~25%
between this session's runs, so read the ratios within a row):

  traj  steps  params  mujoco.sysid  diffsim  sysid/diffsim  directional  sysid/dir.  iterations   rollouts (worlds)            rel.err sysid/diffsim/dir.
  1     300    10      0.129 s       0.47 s   0.27           0.39 s       0.33        5 / 4 / 5    66x1 / 5 (21) / 6 (11)       1.0e-14 / 9.8e-07 / 1.1e-06
  64    300    10      9.43 s        19.6 s   0.48           10.5 s       0.90        5 / 4 / 4    76x64 / 5 (1344) / 5 (704)   3.6e-15 / 3.3e-07 / 7.9e-07

(diffsim compile, reported apart: 1.8 s.) On the CPU diffsim misses both targets of issue #4
(parity on 1 trajectory, 10x faster on 64): the default is 3.7x slower than `mujoco.sysid` on one
trajectory and 2.1x on 64; the directional Jacobian 3x and 1.1x.
  - History (same benchmark): the first version took 31.6 s and 99 s; capturing the linearized
    rollout once and replaying it (an MJWarp step launched from Python costs ~8 ms of launch
    overhead on the CPU; replayed, ~0.1 ms), with its step captured once and replayed `nstep`
    times, forward differences and no control lanes brought it to the figures above.
  - 1 trajectory (profiled, directional, 0.38 s): 0.24 s in 6 x 304 graph replays (~0.13 ms per
    step of 11 worlds), 0.09 s in `set_const` after each armature change (launched from Python: it
    allocates, so no graph can hold it), 0.08 s capture, 0.13 s building the scene and MJWarp Data.
  - 64 trajectories: Warp runs each CPU kernel on one thread, and MJWarp's per-world throughput on
    one thread (~100k world-steps/s here) is below MuJoCo C's on two (`mujoco.sysid`'s rollouts run
    on all threads). diffsim simulates 1 + 20 (directional: 1 + 10) worlds per trajectory against
    `mujoco.sysid`'s 1 + 10 rollouts per evaluation, but needs fewer evaluations (5 against 76).
    Two Warp CPU graphs replayed from two Python threads at once abort in Warp's tile arena (not
    thread-safe), so the second core stays idle.
  - Accuracy: all land on the truth; diffsim to float32 resolution (~1e-7..1e-6 relative),
    `mujoco.sysid` to float64's.
The targets are meant for a GPU, where the 21 x 64 worlds of a step run in parallel; run this file
with `--device cuda:0` there (`mujoco.sysid` stays on the CPU). Not measured here (no GPU).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import time
import warnings

import mujoco
import mujoco.rollout
import numpy as np
import warp as wp

from .bench_rollout import write_json

# the 5-link arm of mujoco.sysid's integration test (mujoco/sysid/tests/test_integration.py)
ARM_XML = """\
<mujoco model="arm">
  <compiler angle="radian" autolimits="true"/>
  <option integrator="implicitfast" timestep="0.002">
    <flag contact="disable"/>
  </option>
  <worldbody>
    <body name="link1" pos="0 0 0.1">
      <inertial pos="0 0 0.05" mass="1.0" diaginertia="0.01 0.01 0.005"/>
      <joint name="joint1" type="hinge" axis="0 0 1" range="-3.14 3.14" armature="0.5" damping="1.0"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.1" size="0.04"/>
      <body name="link2" pos="0 0 0.1">
        <inertial pos="0 0 0.05" mass="0.8" diaginertia="0.008 0.008 0.004"/>
        <joint name="joint2" type="hinge" axis="0 1 0" range="-3.14 3.14" armature="0.4" damping="0.8"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.1" size="0.035"/>
        <body name="link3" pos="0 0 0.1">
          <inertial pos="0 0 0.05" mass="0.6" diaginertia="0.006 0.006 0.003"/>
          <joint name="joint3" type="hinge" axis="0 1 0" range="-3.14 3.14" armature="0.3" damping="0.6"/>
          <geom type="capsule" fromto="0 0 0 0 0 0.1" size="0.03"/>
          <body name="link4" pos="0 0 0.1">
            <inertial pos="0 0 0.04" mass="0.4" diaginertia="0.004 0.004 0.002"/>
            <joint name="joint4" type="hinge" axis="0 0 1" range="-3.14 3.14" armature="0.2" damping="0.4"/>
            <geom type="capsule" fromto="0 0 0 0 0 0.08" size="0.025"/>
            <body name="link5" pos="0 0 0.08">
              <inertial pos="0 0 0.03" mass="0.2" diaginertia="0.002 0.002 0.001"/>
              <joint name="joint5" type="hinge" axis="0 1 0" range="-3.14 3.14" armature="0.1" damping="0.2"/>
              <geom type="capsule" fromto="0 0 0 0 0 0.06" size="0.02"/>
            </body>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="act1" joint="joint1"/>
    <motor name="act2" joint="joint2"/>
    <motor name="act3" joint="joint3"/>
    <motor name="act4" joint="joint4"/>
    <motor name="act5" joint="joint5"/>
  </actuator>
  <sensor>
    <jointpos name="joint1_pos" joint="joint1"/>
    <jointpos name="joint2_pos" joint="joint2"/>
    <jointpos name="joint3_pos" joint="joint3"/>
    <jointpos name="joint4_pos" joint="joint4"/>
    <jointpos name="joint5_pos" joint="joint5"/>
    <jointvel name="joint1_vel" joint="joint1"/>
    <jointvel name="joint2_vel" joint="joint2"/>
    <jointvel name="joint3_vel" joint="joint3"/>
    <jointvel name="joint4_vel" joint="joint4"/>
    <jointvel name="joint5_vel" joint="joint5"/>
  </sensor>
</mujoco>
"""

JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5")
PARAM_SETS = {"armature": ("armature",), "damping": ("damping",), "both": ("armature", "damping")}
_AMPLITUDE = np.array([5.0, 4.0, 3.0, 2.0, 1.0])  # N m per motor, as in mujoco.sysid's test


class Problem:
  """Recordings and unknowns shared by both tools.

  Args:
    ntraj: number of trajectories, each with its own excitation.
    steps: simulation steps per trajectory (`T = steps + 1` rows).
    kinds: `("armature", "damping")` or a subset: the unknowns, per joint.
    scale: initial guess = truth * scale.
    seed: seed of the excitation.

  Attributes:
    mjm: the true model.
    kinds: `("armature", "damping")` or a subset: the unknowns, per joint.
    truth, guess, lower, upper: `(nparam,)` in the order kind-major, joint-minor.
    time: `(T,)` sample times (T = steps + 1 rows).
    ctrl: `(ntraj, T, nu)`; `ctrl[:, k]` is applied from `time[k]` to `time[k + 1]`.
    sensordata: `(ntraj, T, nsensordata)`; row k from the state at `time[k]` (as `mj_step` computes it).
    state0: `(nstate,)` the initial `mjSTATE_FULLPHYSICS` state (at rest at `qpos0`).
    weight: `(nsensordata,)` residual scale per sensor column (see the module docstring).
  """

  def __init__(self, ntraj: int, steps: int, kinds=("armature", "damping"), scale: float = 1.3, seed: int = 0):
    mjm = mujoco.MjModel.from_xml_string(ARM_XML)
    self.mjm, self.kinds = mjm, tuple(kinds)
    field = {"armature": mjm.dof_armature, "damping": mjm.dof_damping}
    self.truth = np.concatenate([np.array(field[k], dtype=np.float64) for k in self.kinds])
    self.guess = self.truth * scale
    self.lower, self.upper = self.guess / 10.0, self.guess * 10.0
    dt, T = float(mjm.opt.timestep), steps + 1
    self.time = np.arange(T) * dt
    rng = np.random.default_rng(seed)
    ctrl = np.zeros((ntraj, T, mjm.nu))
    for i in range(ntraj):
      for _ in range(2):
        amp = _AMPLITUDE * rng.uniform(0.3, 0.6, mjm.nu)
        freq = rng.uniform(0.5, 3.0, mjm.nu)
        phase = rng.uniform(0.0, 2.0 * np.pi, mjm.nu)
        ctrl[i] += amp * np.sin(2.0 * np.pi * freq * self.time[:, None] + phase)
    self.ctrl = ctrl
    data = mujoco.MjData(mjm)
    self.state0 = np.zeros(mujoco.mj_stateSize(mjm, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(mjm, data, self.state0, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    # sensordata[:, k] is computed inside step k from state k: rows 0..T-1 match time[0..T-1]
    state, self.sensordata = mujoco.rollout.rollout(mjm, data, np.tile(self.state0, (ntraj, 1)), ctrl)
    self.qpos_max = float(np.abs(state[:, :, 1:1 + mjm.nq]).max())
    if self.qpos_max > 3.0:
      raise RuntimeError(f"the excitation drives a joint to {self.qpos_max:.2f} rad, at the joint limits (3.14)")
    # mujoco.sysid's normalize_residual, |column| / sqrt(2), pooled over the trajectories
    norm2 = np.mean(np.sum(self.sensordata ** 2, axis=1), axis=0)
    self.weight = np.sqrt(2.0) / np.sqrt(norm2)

  @property
  def ntraj(self) -> int:
    return self.ctrl.shape[0]

  @property
  def steps(self) -> int:
    return self.time.shape[0] - 1

  def rel_error(self, theta) -> float:
    """Largest relative error of `theta` `(nparam,)` against the truth."""
    return float(np.max(np.abs(np.asarray(theta, dtype=np.float64) / self.truth - 1.0)))

  def diffsim_params(self) -> list[str]:
    return [f"dof_{k}:{j}" for k in self.kinds for j in JOINTS]


def run_mujoco_sysid(prob: Problem, iters: int) -> dict:
  """`mujoco.sysid` on `prob` (the whole call: data containers, residual, optimization)."""
  from mujoco import sysid

  spec = mujoco.MjSpec.from_string(ARM_XML)

  def modifier(kind, joint):
    def apply(s, p):
      j = s.joint(joint)
      if kind == "damping":  # MjsJoint.damping is (3,): the linear coefficient first
        j.damping = [p.value[0], *list(j.damping)[1:]]
      else:
        j.armature = p.value[0]
    return apply

  params = sysid.ParameterDict()
  i = 0
  for kind in prob.kinds:
    for joint in JOINTS:
      params.add(sysid.Parameter(f"{joint}_{kind}", nominal=prob.guess[i], min_value=prob.lower[i],
                                 max_value=prob.upper[i], modifier=modifier(kind, joint)))
      i += 1
  dt = float(prob.mjm.opt.timestep)
  # one control row more than sensor rows: sysid_rollout drops the last control (see its docs);
  # sensor row k carries the time at the end of step k (mujoco.rollout's state time)
  tc = np.arange(prob.steps + 2) * dt
  controls = [sysid.TimeSeries(tc, np.concatenate([c, c[-1:]])) for c in prob.ctrl]
  sensors = [sysid.TimeSeries.from_names(prob.time + dt, s, prob.mjm) for s in prob.sensordata]
  log = io.StringIO()
  t0 = time.perf_counter()
  seqs = sysid.ModelSequences("arm", spec, [f"traj{k}" for k in range(prob.ntraj)], [prob.state0] * prob.ntraj,
                              controls, sensors)
  residual_fn = sysid.build_residual_fn(models_sequences=[seqs])
  opt, res = sysid.optimize(initial_params=params, residual_fn=residual_fn, optimizer="mujoco", verbose=False,
                            max_iters=iters, output=log)
  wall = time.perf_counter() - t0
  text = log.getvalue()
  nfev = re.search(r"Residual evals: (\d+)", text)
  done = re.search(r"Terminated after \d+ iterations: (.*?) y: ", text)
  return {"wall": wall, "theta": opt.as_vector(), "nit": len(res.extras["objective"]) - 1,
          "nfev": int(nfev.group(1)) if nfev else -1, "message": done.group(1).strip() if done else "",
          "fun": float(res.extras["objective"][-1])}


def run_diffsim(prob: Problem, iters: int, device, jacobian: str = "forward") -> dict:
  """`diffsim.sysid.identify` on `prob` (the whole call) with the residual Jacobian `jacobian`."""
  from diffsim import sysid

  guess = mujoco.MjModel.from_xml_string(ARM_XML)
  field = {"armature": guess.dof_armature, "damping": guess.dof_damping}
  for i, kind in enumerate(prob.kinds):
    field[kind][:] = prob.guess[len(JOINTS) * i:len(JOINTS) * (i + 1)]
  names = prob.diffsim_params()
  recs = [{"time": prob.time, "ctrl": c, "sensordata": s, "qpos0": prob.mjm.qpos0.copy(),
           "qvel0": np.zeros(prob.mjm.nv), "source": f"traj{k}"}
          for k, (c, s) in enumerate(zip(prob.ctrl, prob.sensordata))]
  weights = {f"sensor:{mujoco.mj_id2name(prob.mjm, mujoco.mjtObj.mjOBJ_SENSOR, s)}": float(prob.weight[s])
             for s in range(prob.mjm.nsensor)}
  bounds = {n: (float(lo), float(hi)) for n, lo, hi in zip(names, prob.lower, prob.upper)}
  t0 = time.perf_counter()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", sysid.IdentifiabilityWarning)  # tiny warm-up problems
    res = sysid.identify(guess, recs, names, bounds=bounds, weights=weights, normalize=False, solver="lm",
                         iters=iters, device=device, out=None, plots=False, jacobian=jacobian)
  wall = time.perf_counter() - t0
  return {"wall": wall, "theta": res.theta, "nit": res.nit, "nfev": res.nfev, "message": res.message,
          "fun": res.fun, "sim_worlds": res.sim_worlds}


def compile_time(kinds, device) -> float:
  """diffsim's first-call overhead: a tiny identification (1 trajectory, 5 steps) run twice, the
  first time less the second."""
  tiny = Problem(1, 5, kinds)
  first = run_diffsim(tiny, 1, device)["wall"]
  again = run_diffsim(tiny, 1, device)["wall"]
  return max(first - again, 0.0)


def bench_case(ntraj: int, steps: int, *, kinds, iters: int, device, repeats: int, budget: float, seed: int = 0,
               scale: float = 1.3) -> dict:
  """Both tools on one problem; see the module docstring for what each field means.

  Args:
    ntraj, steps, kinds, scale, seed: the problem (see `Problem`).
    iters: maximum iterations of both solvers.
    device: diffsim's Warp device.
    repeats: timed runs per tool at most (alternating tools).
    budget: seconds per tool after which no further repeat starts.

  Returns:
    One row: times, iterations, rollouts, errors and final costs of both tools.
  """
  prob = Problem(ntraj, steps, kinds, scale=scale, seed=seed)
  fns = {"sysid": lambda: run_mujoco_sysid(prob, iters), "diffsim": lambda: run_diffsim(prob, iters, device),
         "directional": lambda: run_diffsim(prob, iters, device, jacobian="directional")}
  runs = {tool: [] for tool in fns}
  spent = {tool: 0.0 for tool in fns}
  for rep in range(max(repeats, 1)):
    for tool in list(fns) if rep % 2 == 0 else list(fns)[::-1]:
      if rep == 0 or spent[tool] < budget:
        out = fns[tool]()
        runs[tool].append(out)
        spent[tool] += out["wall"]
  row = {"model": "arm5", "ntraj": ntraj, "steps": steps, "nparam": prob.truth.size, "params": "+".join(kinds),
         "device": str(wp.get_device(device)), "iters_max": iters, "scale": scale,
         "sysid_nthread": os.cpu_count() or 1}
  for tool, rs in runs.items():
    last = rs[-1]
    row[f"{tool}_s"] = float(np.median([r["wall"] for r in rs]))
    row[f"{tool}_runs"] = len(rs)
    row[f"{tool}_nit"] = int(last["nit"])
    row[f"{tool}_nfev"] = int(last["nfev"])
    row[f"{tool}_err"] = prob.rel_error(last["theta"])
    row[f"{tool}_fun"] = float(last["fun"])
    row[f"{tool}_message"] = str(last["message"])
    row[f"{tool}_theta"] = [float(v) for v in last["theta"]]
  # MJWarp worlds of a linearized rollout (trajectories x perturbation lanes), as identify reports it
  row["diffsim_worlds"] = int(runs["diffsim"][-1]["sim_worlds"])
  row["directional_worlds"] = int(runs["directional"][-1]["sim_worlds"])
  row["speedup"] = row["sysid_s"] / row["diffsim_s"]
  row["directional_speedup"] = row["sysid_s"] / row["directional_s"]
  return row


def table(rows: list[dict]) -> str:
  head = ("| trajectories | steps | params | mujoco.sysid (s) | diffsim (s) | sysid / diffsim | diffsim directional (s) | "
          "sysid / directional | diffsim compile (s) | iterations sysid / diffsim / directional | "
          "rollouts sysid / diffsim (worlds) / directional (worlds) | max rel. error sysid / diffsim / directional |")
  lines = [head, "|" + "---|" * 12]
  for r in rows:
    lines.append(
      f"| {r['ntraj']} | {r['steps']} | {r['nparam']} | {r['sysid_s']:.3g} | {r['diffsim_s']:.3g} | "
      f"{r['speedup']:.3g} | {r['directional_s']:.3g} | {r['directional_speedup']:.3g} | "
      f"{r.get('diffsim_compile_s', float('nan')):.1f} | {r['sysid_nit']} / {r['diffsim_nit']} / {r['directional_nit']} | "
      f"{r['sysid_nfev']}x{r['ntraj']} / {r['diffsim_nfev']} ({r['diffsim_worlds']}) / {r['directional_nfev']} "
      f"({r['directional_worlds']}) | {r['sysid_err']:.1e} / {r['diffsim_err']:.1e} / {r['directional_err']:.1e} |")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="diffsim's device: cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--ntraj", nargs="+", type=int, default=[1, 64], help="trajectory counts, one case each")
  parser.add_argument("--steps", type=int, default=300, help="simulation steps per trajectory")
  parser.add_argument("--nstep", type=int, default=None,
                      help="ignored (benchmarks.run passes its rollout length); use --steps")
  parser.add_argument("--params", default="both", choices=list(PARAM_SETS), help="the unknowns, per joint")
  parser.add_argument("--iters", type=int, default=30, help="maximum iterations of both solvers")
  parser.add_argument("--scale", type=float, default=1.3, help="initial guess = truth * scale")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--budget", type=float, default=120.0,
                      help="no further repeats of a tool once it has spent this many seconds on a case")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quick", action="store_true", help="1 and 2 trajectories of 40 steps, <= 5 iterations")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  try:
    from mujoco import sysid  # noqa: F401
    sysid.optimize  # noqa: B018  (the package imports empty when its dependencies are missing)
  except (ImportError, AttributeError) as e:
    raise ImportError(f"mujoco.sysid is unavailable ({e}); pip install 'mujoco[sysid]'") from None
  wp.config.quiet = True
  if hasattr(wp.config, "log_level"):
    wp.config.log_level = wp.LOG_WARNING
  if args.quick:
    args.ntraj, args.steps, args.iters, args.repeats = [1, 2], 40, 5, 1
  kinds = PARAM_SETS[args.params]
  compile_s = compile_time(kinds, args.device)
  rows = []
  for n in args.ntraj:
    row = bench_case(n, args.steps, kinds=kinds, iters=args.iters, device=args.device, repeats=args.repeats,
                     budget=args.budget, seed=args.seed, scale=args.scale)
    row["diffsim_compile_s"] = compile_s
    rows.append(row)
    print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    # after every case: a run stopped by a timeout keeps the cases it finished
    write_json(os.path.join(args.out, f"sysid_{rows[0]['device'].replace(':', '')}.json"),
               {"argv": sys.argv[1:] if argv is None else list(argv), "rows": rows})
  print(table(rows))
  return rows


if __name__ == "__main__":
  try:
    main()
  except ImportError as e:
    sys.exit(f"bench_sysid: {e}")
