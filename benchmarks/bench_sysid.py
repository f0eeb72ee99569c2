"""System identification with `mujoco.sysid` and with diffsim: the same problem, side by side.

Problem: the 5-link arm of `mujoco.sysid`'s own integration test (`ARM_XML` below: 5 hinges
limited to +-3.14 rad, motors, `jointpos` + `jointvel` sensors, `implicitfast`, timestep 0.002, no
contacts). Two cases:
  - smooth (`--ntraj`, default 1 and 64 trajectories of `--steps` 300 = 0.6 s): the unknowns are
    the 5 armatures and the 5 dampings (`--params`); both tools start from the true values times
    1.3 (`--scale`) within the bounds [guess / 10, guess * 10]; every trajectory stays well inside
    the joint limits.
  - smooth armatures (`--armature-ntraj`, default 64 trajectories of `--armature-steps` 500 = 1 s;
    issue 27's bar): the 5 armatures alone, from the truth times 1.3 within [guess / 10, guess * 10],
    every trajectory clear of the limits; `mujoco.sysid` on all cores and pinned to one, diffsim's
    default.
  - at the limits (`--limits-ntraj`, default 32 trajectories of `--limits-steps` 500 = 1 s; issue
    16): every fourth trajectory is driven onto a joint limit (its excitation 4-10 times stronger,
    redrawn until a joint reaches it), the others stay clear; the unknowns are the 5 armatures,
    from 0.01 within [0.001, 1]; at most `--limits-iters` (50) iterations.

Before these, `mujoco.sysid`'s own two integration-test problems (`--tests`; issue 36's small-problem
bar), as its test poses them and each tool with its defaults (`benchmarks/sysid_tests.py`): a
spring-mass's mass from 2.0 (1,499 steps) and the arm's 5 armatures from 0.01 (999 steps, swinging into
the limits on the way). One recording each: here the fixed costs of a call (model upload, graph
capture, the first rollout) weigh as much as the steps. Rows: `mujoco.sysid` on all cores and pinned
to one, diffsim's default and `jacobian="directional"` pinned to one, alternating, median of `--repeats`
(at least 5) warm calls; written to `benchmarks/results/sysid_tests_<device>.json`.

Data: MuJoCo C (`mujoco.rollout`, float64) from the true model at rest, each trajectory driven by
its own sum of two sinusoids per motor (random amplitudes, frequencies and phases, fixed seed),
noise-free. The trajectories of a case share one parameter set.

Both tools fit the same signals (the 10 sensors at every step, `T` rows per trajectory) with the
same residual scaling, so that they solve one least-squares problem: `mujoco.sysid`'s default,
`(measured - simulated) / (|measured column| / sqrt(2))`, each trajectory scaled by its own columns,
which diffsim calls `normalize="recording"`. (Until stop 45 diffsim took the same formula pooled over
the trajectories: the same minimum on noise-free data, but the trajectories driven onto the limits,
4-10 times stronger, then outweighed the others 16-100 times, and LM's path through their
constraint switches took 16 iterations where the same problem takes 12.)

  - `mujoco.sysid`: `ModelSequences` + `build_residual_fn` + `optimize(optimizer="mujoco")`, all
    defaults (Levenberg-Marquardt with forward finite-difference Jacobians: one `mujoco.rollout`
    per parameter and trajectory per iteration, float64, spread over all CPU threads).
  - diffsim (default): `diffsim.sysid.identify(..., method="lm")`, defaults otherwise
    (Levenberg-Marquardt on MJWarp in float32, `jacobian="auto"`: while the nominal trajectories
    meet no constraint row, the directional Jacobian below (`1 + nparam` lanes per world); else
    per-step forward-difference Jacobians over the state and the parameters in `1 + 2 nv + nparam`
    lanes per world, plus `nv` guard lanes in a model with limits (controls are data: no lanes),
    propagated forward to the residual Jacobian: one linearized rollout per iteration, replayed
    from captured graphs; where the trajectories cross constraint switches, the directional
    Jacobian's step when it lowers the cost, see `diffsim/sysid/lm.py`). Every diffsim run is
    pinned to one CPU (Warp runs each CPU kernel on one thread; the pinning keeps numpy's on it
    too), so "diffsim vs `mujoco.sysid, 1 core`" compares one core with one core.
  - diffsim forward (at the limits only; on smooth data it is the default's run): `jacobian="forward"`.
  - diffsim directional: `jacobian="directional"` (forward mode: `1 + nparam` lanes per world, each
    moving the state along its parameter's tangent).

Measured per case and tool: wall time of the whole call (median of up to `--repeats` runs, the tools
alternating so that load from other processes hits all alike; repeats stop once a tool has spent
`--budget` s on the case), iterations (`mujoco.sysid`: steps taken, its optimizer trace less the
final entry; diffsim: `nit`, rejected trial steps included), rollouts (`mujoco.sysid`: residual
evaluations, each `ntraj` rollouts, including the finite-difference Jacobian at the solution that
`optimize` always computes; diffsim: linearized rollouts of all worlds), the largest relative
parameter error against the truth, the ratio `mujoco.sysid time / tool time` (above 1: diffsim
faster), and for diffsim whether it reports convergence and the largest |error| / std (its error
bars are honest where this stays below about 3). diffsim's kernel compilation (first MJWarp use of
the model in this process; cached in `~/.cache/warp` across processes, so "compile" can be mere
module loading) is measured apart, on a tiny identification run twice before the cases: first
time minus second time.

Run: `python -m benchmarks.bench_sysid [--device cpu] [--ntraj 1 64] [--armature-ntraj 64] [--limits-ntraj 32]
[--repeats 3]`.
Prints a Markdown table (one line per case and tool) and writes `benchmarks/results/sysid_<device>.json`
after every case. `--quick`: 1 and 2 trajectories of 40 steps (2 of 40 for the armatures alone) and
4 of 200 at the limits, at most 5 iterations, and `mujoco.sysid`'s arm test once (a check that it runs,
well under a minute warm). `--tests` rows go to `benchmarks/results/sysid_tests_<device>.json`.

The measured figures are in `benchmarks/results/cpu.md` (sysid section, from `benchmarks/results/cpu.json`;
the README's sysid row is generated from the same run). Where diffsim is slower on the CPU: Warp runs
each CPU kernel on one thread, and an MJWarp world-step of this arm costs about what a MuJoCo C step
does on one thread (~7 us), while `mujoco.sysid`'s rollouts run on all threads (the `mujoco.sysid, 1
core` line pins it to one CPU, as diffsim is); diffsim simulates `1 + nparam` worlds per trajectory for
the directional Jacobian (the default on smooth data), as `mujoco.sysid` runs `1 + nparam` rollouts per
Jacobian, but `1 + 2 nv + nparam` (+ `nv` guard) for the forward one (the default where the trajectories
meet constraint rows, as at the limits), and needs more iterations there. Two Warp CPU graphs replayed from two
Python threads at once abort in Warp's tile arena (not thread-safe): `diffsim.distributed` gives the
other cores to other processes (`bench_distributed.py`). The targets are meant for a GPU, where the
lanes of all worlds of a step run in parallel; run this file with `--device cuda:0` there
(`mujoco.sysid` stays on the CPU).
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

from .save import write_json
from .timing import cpus, pinned, spread

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
    scale: initial guess = truth * scale, within bounds [guess / 10, guess * 10].
    seed: seed of the excitation.
    limits: every fourth trajectory is driven onto a joint limit (its excitation, 4-10 times
      stronger, redrawn until a joint reaches +-3.14 rad), the others stay clear of the limits
      (redrawn until they do); the initial guess is then 0.01 for every unknown, within bounds
      [0.001, 1] (issue 16's setting). Without: every trajectory must stay clear (else an error).

  Attributes:
    mjm: the true model.
    kinds: `("armature", "damping")` or a subset: the unknowns, per joint.
    truth, guess, lower, upper: `(nparam,)` in the order kind-major, joint-minor.
    time: `(T,)` sample times (T = steps + 1 rows).
    ctrl: `(ntraj, T, nu)`; `ctrl[:, k]` is applied from `time[k]` to `time[k + 1]`.
    sensordata: `(ntraj, T, nsensordata)`; row k from the state at `time[k]` (as `mj_step` computes it).
    state0: `(nstate,)` the initial `mjSTATE_FULLPHYSICS` state (at rest at `qpos0`).
    at_limit: `(ntraj,)` samples at which a joint is within 1 mrad of a limit, per trajectory.
  """

  def __init__(self, ntraj: int, steps: int, kinds=("armature", "damping"), scale: float = 1.3, seed: int = 0,
               limits: bool = False):
    mjm = mujoco.MjModel.from_xml_string(ARM_XML)
    self.mjm, self.kinds, self.limits = mjm, tuple(kinds), bool(limits)
    field = {"armature": mjm.dof_armature, "damping": mjm.dof_damping}
    self.truth = np.concatenate([np.array(field[k], dtype=np.float64) for k in self.kinds])
    if limits:
      self.guess = np.full_like(self.truth, 0.01)
      self.lower, self.upper = np.full_like(self.truth, 1e-3), np.full_like(self.truth, 1.0)
    else:
      self.guess = self.truth * scale
      self.lower, self.upper = self.guess / 10.0, self.guess * 10.0
    dt, T = float(mjm.opt.timestep), steps + 1
    self.time = np.arange(T) * dt
    rng = np.random.default_rng(seed)
    data = mujoco.MjData(mjm)
    self.state0 = np.zeros(mujoco.mj_stateSize(mjm, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(mjm, data, self.state0, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    limit = float(mjm.jnt_range[:, 1].min())
    ctrl, sensordata, at_limit = np.zeros((ntraj, T, mjm.nu)), np.zeros((ntraj, T, mjm.nsensordata)), []
    for i in range(ntraj):
      onto = limits and i % 4 == 3
      for _ in range(1000):
        gain = rng.uniform(4.0, 10.0) if onto else 1.0
        c = np.zeros((T, mjm.nu))
        for _ in range(2):
          amp = _AMPLITUDE * rng.uniform(0.3, 0.6, mjm.nu) * gain
          freq = rng.uniform(0.5, 3.0, mjm.nu)
          phase = rng.uniform(0.0, 2.0 * np.pi, mjm.nu)
          c += amp * np.sin(2.0 * np.pi * freq * self.time[:, None] + phase)
        # sensordata[k] is computed inside step k from state k: rows 0..T-1 match time[0..T-1]
        state, sens = mujoco.rollout.rollout(mjm, data, self.state0[None], c[None])
        qmax = float(np.abs(state[0, :, 1:1 + mjm.nq]).max())
        if not limits or (qmax > limit - 1e-3) == onto and (onto or qmax <= 3.0):
          break
      else:
        raise RuntimeError(f"no excitation found for trajectory {i} ({'onto' if onto else 'clear of'} the limits)")
      if not limits and qmax > 3.0:
        raise RuntimeError(f"the excitation drives a joint to {qmax:.2f} rad, at the joint limits (3.14)")
      ctrl[i], sensordata[i] = c, sens[0]
      at_limit.append(int((np.abs(state[0, :, 1:1 + mjm.nq]) > limit - 1e-3).any(axis=1).sum()))
    self.ctrl, self.sensordata, self.at_limit = ctrl, sensordata, at_limit

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


def identify_inputs(prob: Problem):
  """`diffsim.sysid.identify`'s inputs for `prob`: the initial-guess model, the recordings, the
  parameter names and the bounds (the residual scaling is `normalize="recording"`, `mujoco.sysid`'s)."""
  guess = mujoco.MjModel.from_xml_string(ARM_XML)
  field = {"armature": guess.dof_armature, "damping": guess.dof_damping}
  for i, kind in enumerate(prob.kinds):
    field[kind][:] = prob.guess[len(JOINTS) * i:len(JOINTS) * (i + 1)]
  names = prob.diffsim_params()
  recs = [{"time": prob.time, "ctrl": c, "sensordata": s, "qpos0": prob.mjm.qpos0.copy(),
           "qvel0": np.zeros(prob.mjm.nv), "source": f"traj{k}"}
          for k, (c, s) in enumerate(zip(prob.ctrl, prob.sensordata))]
  bounds = {n: (float(lo), float(hi)) for n, lo, hi in zip(names, prob.lower, prob.upper)}
  return guess, recs, names, bounds


def _pinned_call(ncpu: int, fn, *args):
  with pinned(ncpu):
    return fn(*args)


def run_diffsim(prob: Problem, iters: int, device, jacobian: str = "auto", solver_settings=None) -> dict:
  """`diffsim.sysid.identify` on `prob` (the whole call) with the residual Jacobian `jacobian` (and
  `diffsim.SolverSettings`, default ones without)."""
  from diffsim import sysid

  guess, recs, names, bounds = identify_inputs(prob)
  t0 = time.perf_counter()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", sysid.IdentifiabilityWarning)  # tiny warm-up problems
    res = sysid.identify(guess, recs, names, bounds=bounds, normalize="recording", method="lm",
                         maxiter=iters, device=device, out=None, plots=False, jacobian=jacobian, progress=False,
                         solver_settings=solver_settings)
  wall = time.perf_counter() - t0
  return {"wall": wall, "theta": res.theta, "nit": res.nit, "nfev": res.nfev, "message": res.message,
          "fun": res.fun, "sim_worlds": res.sim_worlds, "success": res.success, "std": res.theta_std,
          "jacobian": res.jacobian}


def compile_time(kinds, device) -> float:
  """diffsim's first-call overhead: a tiny identification (1 trajectory, 5 steps) run twice, the
  first time less the second."""
  tiny = Problem(1, 5, kinds)
  first = run_diffsim(tiny, 1, device)["wall"]
  again = run_diffsim(tiny, 1, device)["wall"]
  return max(first - again, 0.0)


# diffsim's residual Jacobians, by column name: the default ("auto"), and each alone
JACOBIANS = {"diffsim": "auto", "forward": "forward", "directional": "directional"}


def bench_case(ntraj: int, steps: int, *, kinds, iters: int, device, repeats: int, budget: float, seed: int = 0,
               scale: float = 1.3, limits: bool = False, pin_sysid: bool = True, tools=None) -> dict:
  """`mujoco.sysid` and diffsim's Jacobians on one problem; see the module docstring for the fields.

  Args:
    ntraj, steps, kinds, scale, seed, limits: the problem (see `Problem`).
    iters: maximum iterations of both solvers.
    device: diffsim's Warp device.
    repeats: timed runs per tool at most (alternating tools).
    budget: seconds per tool after which no further repeat starts.
    pin_sysid: `mujoco.sysid` pinned to one CPU too (`sysid_1core_*`), as diffsim is.
    tools: diffsim's Jacobians to run (names of `JACOBIANS`); default: see below.

  Returns:
    One row: times, iterations, rollouts, errors, final costs and (diffsim) convergence and the
    largest |error| / std of every tool. Smooth problems run diffsim's default and "directional"
    (the default is "forward" there: no constraint switch asks for a second opinion); with
    `limits`, "forward" alone too.
  """
  prob = Problem(ntraj, steps, kinds, scale=scale, seed=seed, limits=limits)
  fns = {"sysid": lambda: run_mujoco_sysid(prob, iters)}
  if pin_sysid:
    fns["sysid_1core"] = lambda: _pinned_call(1, run_mujoco_sysid, prob, iters)
  if tools is None:
    tools = [t for t in JACOBIANS if limits or t != "forward"]
  for tool in tools:
    fns[tool] = lambda jac=JACOBIANS[tool]: _pinned_call(1, run_diffsim, prob, iters, device, jac)
  runs = {tool: [] for tool in fns}
  spent = {tool: 0.0 for tool in fns}
  for rep in range(max(repeats, 1)):
    for tool in list(fns) if rep % 2 == 0 else list(fns)[::-1]:
      if rep == 0 or spent[tool] < budget:
        out = fns[tool]()
        runs[tool].append(out)
        spent[tool] += out["wall"]
  row = {"model": "arm5", "ntraj": ntraj, "steps": steps, "nparam": prob.truth.size, "params": "+".join(kinds),
         "case": "limits" if limits else "smooth" if len(kinds) > 1 else "armature",
         "device": str(wp.get_device(device)), "iters_max": iters, "scale": scale, "limits": limits,
         "guess": [float(v) for v in prob.guess], "at_limit": prob.at_limit,
         "sysid_nthread": len(cpus())}
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
    if not tool.startswith("sysid"):
      # MJWarp worlds of a linearized rollout (trajectories x perturbation lanes), as identify reports it
      row[f"{tool}_worlds"] = int(last["sim_worlds"])
      row[f"{tool}_jacobian"] = str(last["jacobian"])  # the one LM used last
      row[f"{tool}_success"] = bool(last["success"])
      # how far the truth lies outside the reported error bars (<= 3: honest)
      row[f"{tool}_z"] = float(np.max(np.abs(np.asarray(last["theta"]) - prob.truth) / np.asarray(last["std"])))
      row[f"{tool}_speedup"] = row["sysid_s"] / row[f"{tool}_s"]
      if "sysid_1core_s" in row:
        row[f"{tool}_speedup_1core"] = row["sysid_1core_s"] / row[f"{tool}_s"]
  row["speedup"] = row["diffsim_speedup"]
  return row


def bench_tests(names, device, repeats: int) -> list[dict]:
  """`mujoco.sysid`'s test problems `names` (`sysid_tests.PROBLEMS`) in both tools, one row per
  problem: per tool the median wall time of the whole call, its spread, and the largest relative
  error against the truth."""
  from . import sysid_tests as T

  rows = []
  for name in names:
    data = T.load(name)
    fns = {"sysid": lambda: T.run_mujoco_sysid(name, data),
           "sysid_1core": lambda: _pinned_call(1, T.run_mujoco_sysid, name, data),
           "diffsim": lambda: _pinned_call(1, T.run_diffsim, name, data, device),
           "directional": lambda: _pinned_call(1, T.run_diffsim, name, data, device, "directional")}
    for fn in fns.values():  # warm: kernel modules loaded, mujoco.sysid's first call
      fn()
    runs = {tool: [] for tool in fns}
    for rep in range(repeats):
      for tool in list(fns) if rep % 2 == 0 else list(fns)[::-1]:
        runs[tool].append(fns[tool]())
    row = {"problem": name, "nrow": int(data["recording"].nrow), "nparam": len(T.PROBLEMS[name].params),
           "device": str(wp.get_device(device)), "sysid_nthread": len(cpus())}
    for tool, rs in runs.items():
      walls = [r["wall"] for r in rs]
      row[f"{tool}_s"] = float(np.median(walls))
      row[f"{tool}_spread"] = float(spread(walls))
      row[f"{tool}_runs"] = len(rs)
      row[f"{tool}_err"] = T.rel_error(name, rs[-1]["theta"])
      if "jacobian" in rs[-1]:
        row[f"{tool}_jacobian"] = rs[-1]["jacobian"]
        row[f"{tool}_nit"] = int(rs[-1]["nit"])
        row[f"{tool}_success"] = bool(rs[-1]["success"])
    for tool in ("diffsim", "directional"):
      row[f"{tool}_over_sysid"] = row[f"{tool}_s"] / row["sysid_s"]
      row[f"{tool}_over_sysid_1core"] = row[f"{tool}_s"] / row["sysid_1core_s"]
    # bare MJWarp: as many `mujoco_warp.step`s as the directional run's linearizations take (one per
    # iteration and the first, each `nrow` steps of its `1 + nparam` worlds), and nothing else: what the
    # MJWarp step alone costs on this device, against `mujoco.sysid`'s whole call
    nworld = 1 + row["nparam"]
    row["mjwarp_step_s"] = _pinned_call(1, T.mjwarp_step_s, name, nworld, device)
    row["mjwarp_steps_s"] = (row["directional_nit"] + 1) * row["nrow"] * row["mjwarp_step_s"]
    row["mjwarp_steps_over_sysid"] = row["mjwarp_steps_s"] / row["sysid_s"]
    row["mjwarp_steps_over_sysid_1core"] = row["mjwarp_steps_s"] / row["sysid_1core_s"]
    rows.append(row)
  return rows


def tests_table(rows: list[dict]) -> str:
  """One line per test problem and tool: time, time over `mujoco.sysid`'s, error."""
  lines = ["| mujoco.sysid test | samples x params | tool | time (s) | spread | tool / mujoco.sysid time "
           "(all cores, 1 core) | last Jacobian (iterations) | max rel. error |", "|" + "---|" * 8]
  names = {"sysid": "mujoco.sysid", "sysid_1core": "mujoco.sysid, 1 core", "diffsim": "diffsim (default)",
           "directional": "diffsim directional"}
  for r in rows:
    for tool, label in names.items():
      ratio = "" if tool.startswith("sysid") else \
        f"{r[f'{tool}_over_sysid']:.2f}x, {r[f'{tool}_over_sysid_1core']:.2f}x"
      jac = f"{r[f'{tool}_jacobian']} ({r[f'{tool}_nit']})" if f"{tool}_jacobian" in r else ""
      lines.append(f"| {r['problem']} | {r['nrow']} x {r['nparam']} | {label} | {r[f'{tool}_s']:.3f} | "
                   f"{r[f'{tool}_spread']:.2f} | {ratio} | {jac} | {r[f'{tool}_err']:.1e} |")
    if "mjwarp_steps_s" in r:
      lines.append(f"| {r['problem']} | {r['nrow']} x {r['nparam']} | bare MJWarp steps: directional's "
                   f"{r['directional_nit'] + 1} x {r['nrow']}, {1 + r['nparam']} worlds "
                   f"({1e6 * r['mjwarp_step_s']:.1f} us each) | "
                   f"{r['mjwarp_steps_s']:.3f} | | {r['mjwarp_steps_over_sysid']:.2f}x, "
                   f"{r['mjwarp_steps_over_sysid_1core']:.2f}x | | |")
  return "\n".join(lines)


def table(rows: list[dict]) -> str:
  """One line per problem and tool (rows written before the per-tool columns show what they have)."""
  head = ("| problem | trajectories x steps | params | tool | time (s) | mujoco.sysid / tool time | iterations | "
          "rollouts (worlds) | max rel. error | max abs. error / std | converged |")
  lines = [head, "|" + "---|" * 11]
  names = {"sysid": "mujoco.sysid", "sysid_1core": "mujoco.sysid, 1 core", "diffsim": "diffsim (default)",
           "forward": "diffsim forward",
           "directional": "diffsim directional"}
  for r in rows:
    if r.get("limits"):
      problem = f"{sum(1 for a in r['at_limit'] if a)} of {r['ntraj']} at limits, from {r['guess'][0]:g}"
    else:
      problem = f"smooth{', armatures' if r.get('case') == 'armature' else ''}, from truth x {r.get('scale', 1.3):g}"
    for tool, label in names.items():
      if f"{tool}_s" not in r:
        continue
      ratio = "" if tool == "sysid" else f"{r['sysid_s'] / r[f'{tool}_s']:.3g}"
      rollouts = f"{r[f'{tool}_nfev']}x{r['ntraj']}" if tool.startswith("sysid") else \
        f"{r[f'{tool}_nfev']} ({r.get(f'{tool}_worlds', '?')})"
      z = f"{r[f'{tool}_z']:.2g}" if f"{tool}_z" in r else ""
      ok = "" if f"{tool}_success" not in r else ("yes" if r[f"{tool}_success"] else "no")
      lines.append(f"| {problem} | {r['ntraj']} x {r['steps']} | {r['nparam']} | {label} | {r[f'{tool}_s']:.3g} | "
                   f"{ratio} | {r[f'{tool}_nit']} | {rollouts} | {r[f'{tool}_err']:.1e} | {z} | {ok} |")
  if rows and "diffsim_compile_s" in rows[0]:
    lines.append(f"\n(diffsim compile, reported apart: {rows[0]['diffsim_compile_s']:.1f} s)")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="diffsim's device: cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--ntraj", nargs="*", type=int, default=[1, 64],
                      help="trajectory counts of the smooth case, one case each (none: skip it)")
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
  parser.add_argument("--armature-ntraj", nargs="*", type=int, default=[64],
                      help="trajectory counts of the smooth case with the 5 armatures alone (issue 27's bar: "
                           "mujoco.sysid on all cores and on one, diffsim's default); none: skip it")
  parser.add_argument("--armature-steps", type=int, default=500, help="simulation steps per trajectory there")
  parser.add_argument("--limits-ntraj", nargs="*", type=int, default=[32],
                      help="trajectory counts of the case at the joint limits (issue 16: every fourth trajectory "
                           "driven onto a limit, armatures from 0.01); none: skip it")
  parser.add_argument("--limits-steps", type=int, default=500, help="simulation steps per trajectory at the limits")
  parser.add_argument("--limits-iters", type=int, default=50, help="maximum iterations of both solvers at the limits")
  parser.add_argument("--tests", nargs="*", default=None,
                      help="mujoco.sysid's test problems to run first (issue 36; default spring-mass and arm, with "
                           "--quick the arm alone; none: skip them)")
  parser.add_argument("--quick", action="store_true",
                      help="1 and 2 trajectories of 40 steps, and 4 of 200 at the limits, <= 5 iterations")
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
  if args.tests is None:
    args.tests = ["arm"] if args.quick else ["spring-mass", "arm"]
  if args.quick:
    args.ntraj, args.steps, args.iters, args.repeats = [1, 2], 40, 5, 1
    args.limits_ntraj, args.limits_steps, args.limits_iters = [4], 200, 5
    args.armature_ntraj, args.armature_steps = [2], 40
  if args.tests:
    test_rows = bench_tests(args.tests, args.device, 1 if args.quick else max(args.repeats, 5))
    print(tests_table(test_rows), file=sys.stderr, flush=True)
    write_json(os.path.join(args.out, f"sysid_tests_{test_rows[0]['device'].replace(':', '')}.json"),
               {"argv": sys.argv[1:] if argv is None else list(argv), "rows": test_rows})
  kinds = PARAM_SETS[args.params]
  rows = []
  cases = [(n, args.steps, kinds, args.iters, False, None) for n in args.ntraj] + \
          [(n, args.armature_steps, ("armature",), args.iters, False, ["diffsim"]) for n in args.armature_ntraj] + \
          [(n, args.limits_steps, ("armature",), args.limits_iters, True, None) for n in args.limits_ntraj]
  if not cases:
    return []
  compile_s = compile_time(kinds, args.device)
  for n, steps, knd, iters, limits, tools in cases:
    row = bench_case(n, steps, kinds=knd, iters=iters, device=args.device, repeats=args.repeats,
                     budget=args.budget, seed=args.seed, scale=args.scale, limits=limits, tools=tools)
    row["diffsim_compile_s"] = compile_s
    rows.append(row)
    print("\n".join(ln for ln in table(rows[-1:]).splitlines()[2:] if ln.startswith("|")), file=sys.stderr,
          flush=True)
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
