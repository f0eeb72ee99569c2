"""Gradients through contacts and constraints, over MuJoCo Warp's own test models (issue 17).

Every MJCF file under `mujoco_warp/test_data` (`models()`) is run at 2 worlds for `--nstep` (20)
steps from its keyframe 0 (the MJCF's `qpos0` where it has none; a keyframe's activations are not
used: rollouts start with `act = 0`), with seeded controls `0.4 N(0, 1)` (around the centre of a
limited `ctrlrange`, 0.4 of its half-width as the standard deviation), and diffsim's default
settings (`Rollout(scene, nstep)`: central differences, default steps, guard lanes where the model
has position constraints). SDF geoms from plugins, which diffsim refuses without the user's Warp
functions, get MJWarp's test ones (`collision_sdf/utils.py`). Per model:
  - sizes: `nq`, `nv`, `na`, `nu`; `ncon0`, `nefc0`: contacts and constraint rows at the start;
  - `nlane`: perturbation lanes per world; `mem_gb`: what MJWarp needs to step them
    (`Scene.memory_estimate`, the figure diffsim checks against the free memory before allocating);
  - `fwd_qpos_err`: the largest `|qpos|` difference between MJWarp's rollout (float32) and
    `mujoco.mj_step` (float64) over both worlds and all steps, same start and controls
    (`ref_qpos_max`: C's largest `|qpos|`, which shows a model that diverges);
  - `grad_err`: the tape gradient of a random linear functional of the trajectory (`qpos`, `qvel`,
    `act`; each world its own, as `diffsim.check_gradients` draws it) with respect to the controls
    and the initial velocity (only the velocity when `nu == 0`), against central differences of
    float64 MuJoCo C rollouts with step 1e-6: relative error, worst world; `grad_norm`: the
    reference's norm; `ref_err`: the reference's own consistency, its relative change with step
    1e-5 (large where a contact switches within 1e-5 of the inputs: then C's difference is no
    derivative either); `gradient`: what `"auto"` took (the analytic adjoint where
    `analytic_coverage` finds nothing uncovered, issue 26; else the lanes) and `gradient_reason`;
    where it took the adjoint, `grad_err_lanes`: the lanes' error on the same functional, beside it;
  - `switches`: Jacobian columns with no clean difference (`Rollout.switches()`, summed over worlds
    and steps; `switch_steps`: the world-steps with any) and `warned`: whether the rollout's
    self-check raised `GradientWarning`;
  - `grad_s`: the tape rollout's wall time (forward, lanes, Jacobians and backward);
    `wall_s`: the model's whole row, kernel compilation (or cache loading) included.
Each model runs in its own process under an address-space cap (`--mem-cap-gb`) and a time limit
(`--timeout`), so one that exhausts memory or time is reported as such and the sweep goes on; a
model that MuJoCo, MJWarp or diffsim refuses is reported with its error; a process that times out
keeps the columns it finished (the forward check runs first).

Also `issue17(nstep)`: the issue's own setup (`tests/test_contact_gradients.py` at 20 steps) at
`--issue-horizons` (10, 20, 30 steps).

Run: `python -m benchmarks.bench_contact_gradients [--device cpu] [--models humanoid/humanoid.xml ...]`.
Prints Markdown tables and writes `benchmarks/results/contact_gradients_<device>.{json,md}` after
every model. `--quick`: two small models at 5 steps, the issue's setup at 3.
`--nudge k`: the same inputs nudged by a few float32 ulps (`bench_model`), a draw that shows how far
an error moves with rounding alone (`_nudge<k>` files; used to compare `--lanes` rules).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np
import warp as wp

from diffsim.gradcheck import linear_functional

from .save import write_json

NWORLD = 2
QUICK_MODELS = ("tendon/fixed.xml", "actuation/position.xml")
# `--nudge`'s steps: relative on the controls (a few float32 ulps), absolute on the initial velocity
NUDGE_CTRL, NUDGE_QVEL = 3e-7, 1e-6


def mjwarp_test_data() -> str:
  import mujoco_warp

  return os.path.join(os.path.dirname(mujoco_warp.__file__), "test_data")


def models() -> list[str]:
  """Every MJCF file of MJWarp's test data, relative to `mjwarp_test_data()`, sorted."""
  root = mjwarp_test_data()
  return sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "**", "*.xml"), recursive=True))


def controls(mjm, nworld: int, nstep: int, seed: int = 0) -> np.ndarray:
  """`(nworld, nstep, nu)` seeded controls: `0.4 * N(0, 1)`, or around the centre of a limited
  `ctrlrange` with 0.4 of its half-width as the standard deviation."""
  rng = np.random.default_rng(seed)
  u = 0.4 * rng.standard_normal((nworld, nstep, mjm.nu))
  lim = mjm.actuator_ctrllimited.astype(bool)
  lo, hi = mjm.actuator_ctrlrange[:, 0], mjm.actuator_ctrlrange[:, 1]
  return np.where(lim, 0.5 * (lo + hi) + 0.5 * (hi - lo) * u, u)


def _tape_gradient(ro, ctrl: np.ndarray, qpos0: np.ndarray, qvel0: np.ndarray, weights: dict) -> tuple[dict, bool]:
  """Tape gradient of `L = sum_s sum(weights[s] * traj.s)` (a random linear functional of the whole
  trajectory, as `diffsim.check_gradients` draws) with respect to `ctrl (nworld, nstep, nu)` and
  `qvel0 (nworld, nv)`; and whether the rollout's self-check warned (`GradientWarning`)."""
  import diffsim

  dev = ro.scene.device
  ctrl_wp = wp.array(ctrl.astype(np.float32), dtype=float, device=dev, requires_grad=True)
  qvel_wp = wp.array(qvel0.astype(np.float32), dtype=float, device=dev, requires_grad=True)
  loss = wp.zeros(1, dtype=float, device=dev, requires_grad=True)
  w_wp = {s: wp.array(w.astype(np.float32), dtype=float, device=dev) for s, w in weights.items()}
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", diffsim.GradientWarning)
    tape = wp.Tape()
    with tape:
      traj = ro(ctrl_wp, qpos0=qpos0, qvel0=qvel_wp)
      for s, w in w_wp.items():
        if w.shape[2]:
          wp.launch(linear_functional, dim=w.shape, inputs=[getattr(traj, s), w], outputs=[loss], device=dev)
    tape.backward(loss)
  warned = any(issubclass(c.category, diffsim.GradientWarning) for c in caught)
  return {"ctrl": ctrl_wp.grad.numpy().astype(np.float64), "qvel0": qvel_wp.grad.numpy().astype(np.float64)}, warned


def _reference_gradient(mjm, ctrl: np.ndarray, qpos0: np.ndarray, qvel0: np.ndarray, weights: dict, h: float) -> dict:
  """The same gradient from central differences of float64 MuJoCo C rollouts (step `h * max(1, |x|)`,
  as `check_gradients` takes), world by world: `{"ctrl": (nworld, nstep, nu), "qvel0": (nworld, nv)}`."""
  from diffsim.gradcheck import mujoco_rollout

  out = {"ctrl": np.zeros_like(ctrl), "qvel0": np.zeros((len(ctrl), mjm.nv))}
  for w in range(len(ctrl)):
    def loss(u: np.ndarray, v: np.ndarray) -> float:
      traj = mujoco_rollout(mjm, u, qpos0=qpos0, qvel0=v)
      return float(sum(np.sum(weights[s][w] * traj[s]) for s in weights))

    for name, x in (("ctrl", ctrl[w]), ("qvel0", qvel0)):
      for i in np.ndindex(x.shape):
        step = h * max(1.0, abs(x[i]))
        up, dn = x.copy(), x.copy()
        up[i] += step
        dn[i] -= step
        args = ((up, qvel0), (dn, qvel0)) if name == "ctrl" else ((ctrl[w], up), (ctrl[w], dn))
        out[name][(w,) + i] = (loss(*args[0]) - loss(*args[1])) / (2 * step)
  return out


def _solver(tolerance: float | None, lanes: str | None = None):
  """diffsim's solver settings, with `tolerance` and `lanes` where given."""
  import diffsim

  return diffsim.SolverSettings(tolerance=tolerance, **({"lanes": lanes} if lanes else {}))


def _first_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[0] if text else ''}"


def bench_model(model: str, nstep: int, device: str | None, save=lambda row: None,
                tolerance: float | None = None, lanes: str | None = None, nudge: int = 0) -> dict:
  """One model's row (see the module docstring); `save(row)` is called after every stage. `lanes`
  (`SolverSettings.lanes`): the lanes' gradient even where the analytic adjoint covers the model.
  `nudge`: another draw of the same inputs, the controls scaled by `1 + 3e-7 nudge` (a few float32
  ulps) and the initial velocity moved by `1e-6 nudge`, which shows how far an error moves with float32
  rounding alone."""
  import mujoco

  import diffsim
  from diffsim.gradcheck import mujoco_rollout

  wp.config.log_level = wp.LOG_WARNING
  t0 = time.perf_counter()
  row = {"model": model, "nstep": nstep, "nworld": NWORLD, "stage": "load"}

  def stage(name: str) -> None:
    row["stage"] = name
    row["wall_s"] = time.perf_counter() - t0
    save(row)

  try:
    mjm = mujoco.MjModel.from_xml_path(os.path.join(mjwarp_test_data(), model))
    if ((mjm.geom_type == mujoco.mjtGeom.mjGEOM_SDF) & (mjm.geom_plugin >= 0)).any():
      # diffsim refuses SDF plugin geoms until their Warp functions are given: MJWarp's test ones
      import mujoco_warp
      from mujoco_warp.test_data.collision_sdf.utils import register_sdf_plugins

      register_sdf_plugins(mujoco_warp)
      row["note"] = "SDF plugins: MJWarp's test functions (collision_sdf/utils.py)"
    d = mujoco.MjData(mjm)
    if mjm.nkey:
      mujoco.mj_resetDataKeyframe(mjm, d, 0)
    mujoco.mj_forward(mjm, d)
    qpos0, qvel0 = d.qpos.copy(), d.qvel.copy() + NUDGE_QVEL * nudge
    row.update(nq=mjm.nq, nv=mjm.nv, na=mjm.na, nu=mjm.nu, ncon0=int(d.ncon), nefc0=int(d.nefc),
               keyframe=bool(mjm.nkey))
    if mjm.nv == 0:
      row["note"] = "no degrees of freedom (a scene that other files include, or a rendering test)"
      stage("done")
      return row
    stage("scene")
    scene = diffsim.Scene.from_xml(mjm, nworld=NWORLD, device=device, solver=_solver(tolerance, lanes))
    row["device"] = str(scene.device)
    # what MJWarp sees
    c_ctrl = (controls(mjm, NWORLD, nstep) * (1 + NUDGE_CTRL * nudge)).astype(np.float32).astype(np.float64)
    ctrl = wp.array(c_ctrl.astype(np.float32), dtype=float, device=scene.device)
    q0, v0 = np.tile(qpos0, (NWORLD, 1)), np.tile(qvel0, (NWORLD, 1))

    stage("forward")
    traj = diffsim.rollout(scene, ctrl, qpos0=q0, qvel0=v0)
    qpos = traj.qpos.numpy()
    q32, v32 = (x.astype(np.float32).astype(np.float64) for x in (qpos0, qvel0))
    ref = [mujoco_rollout(scene.mjm, c_ctrl[w], qpos0=q32, qvel0=v32)["qpos"] for w in range(NWORLD)]
    row["fwd_qpos_err"] = float(max(np.abs(qpos[w] - ref[w]).max() for w in range(NWORLD)))
    row["ref_qpos_max"] = float(max(np.abs(r).max() for r in ref))  # a diverging model shows here

    stage("lanes")
    # defaults: what diffsim.rollout runs (the lanes' gradient on every model where `lanes` is given)
    ro = diffsim.Rollout(scene, nstep, check=True, gradient="finite_difference" if lanes else "auto")
    row["gradient"] = ro.gradient  # the analytic adjoint where it covers the model (issue 26)
    row["gradient_reason"] = ro.gradient_reason
    fd = ro
    if ro.gradient != "finite_difference":
      try:
        fd = diffsim.Rollout(scene, nstep, check=True, gradient="finite_difference")
      except MemoryError as e:  # lanes that do not fit are refused before they allocate: the adjoint alone
        fd, row["lanes_error"] = None, _first_line(e)
    if fd is not None:
      row["nlane"] = fd.fd.nlane
      row["mem_gb"] = scene.memory_estimate(fd.fd.nlane) / 1e9
    stage("gradient")
    signals = ("qpos", "qvel", "act") if mjm.na else ("qpos", "qvel")
    rng = np.random.default_rng(1)
    sizes = {"qpos": mjm.nq, "qvel": mjm.nv, "act": mjm.na}
    weights = {s: rng.standard_normal((NWORLD, nstep + 1, sizes[s])) / np.sqrt(nstep + 1) for s in signals}
    t = time.perf_counter()
    grads, row["warned"] = _tape_gradient(ro, c_ctrl, q32, np.tile(v32, (NWORLD, 1)), weights)
    row["grad_s"] = time.perf_counter() - t
    if fd is not None and fd is not ro:  # the lanes beside the adjoint, on the same functional
      try:
        lane_grads, _ = _tape_gradient(fd, c_ctrl, q32, np.tile(v32, (NWORLD, 1)), weights)
      except (MemoryError, RuntimeError) as e:  # on the CPU the memory check only warns (untouched pages)
        fd, row["lanes_error"] = None, _first_line(e)
    if fd is not None:
      switches = fd.switches().numpy()
      row["switches"] = int(switches.sum())
      row["switch_steps"] = int(np.count_nonzero(switches))
      row["switches_by_world"] = switches.sum(axis=1).tolist()
    stage("reference")
    wrt = ("ctrl", "qvel0") if mjm.nu else ("qvel0",)
    refs = {h: _reference_gradient(scene.mjm, c_ctrl, q32, v32, weights, h) for h in (1e-6, 1e-5)}
    rel = lambda a, b: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))
    # worst world, as check_gradients reports it
    row["grad_err"] = {k: max(rel(grads[k][w], refs[1e-6][k][w]) for w in range(NWORLD)) for k in wrt}
    if fd is not None and fd is not ro:
      row["grad_err_lanes"] = {k: max(rel(lane_grads[k][w], refs[1e-6][k][w]) for w in range(NWORLD)) for k in wrt}
    row["grad_norm"] = {k: float(np.linalg.norm(refs[1e-6][k])) for k in wrt}
    row["ref_err"] = max(rel(refs[1e-5][k][w], refs[1e-6][k][w]) for k in wrt for w in range(NWORLD))
    stage("done")
  except Exception as e:  # a model diffsim, MJWarp or MuJoCo refuses is a row, not the end of the sweep
    row["error"] = _first_line(e)
    row["traceback"] = traceback.format_exc()[-3000:]
    stage(row["stage"])
  return row


@wp.kernel
def _final_state_loss(
  # In:
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qvel: wp.array3d[float],  # (nworld, nstep + 1, nv)
  # Out:
  loss: wp.array[float],
):
  w = wp.tid()
  t = qpos.shape[1] - 1
  s = float(0.0)
  for i in range(qpos.shape[2]):
    s += 0.5 * qpos[w, t, i] * qpos[w, t, i]
  for i in range(qvel.shape[2]):
    s += 0.25 * qvel[w, t, i] * qvel[w, t, i]
  wp.atomic_add(loss, 0, s)


def issue17(nstep: int, device: str | None, tolerance: float | None = None) -> dict:
  """Issue 17's setup (`tests/test_contact_gradients.py` at 20 steps): the humanoid from keyframe 0,
  2 worlds, controls `0.4 N(0, 1)` (seed 0), loss `0.5 |qpos_T|^2 + 0.25 |qvel_T|^2` after `nstep`
  steps, `diffsim.rollout` with default settings; world 1's control gradient against central
  differences of float64 MuJoCo C (step 1e-6; `ref_err`: its change with step 1e-5)."""
  import mujoco

  import diffsim
  from diffsim.gradcheck import mujoco_rollout

  scene = diffsim.Scene.from_xml(os.path.join(mjwarp_test_data(), "humanoid", "humanoid.xml"), nworld=2, device=device,
                                 solver=_solver(tolerance))
  m = scene.mjm
  d = mujoco.MjData(m)
  mujoco.mj_resetDataKeyframe(m, d, 0)
  mujoco.mj_forward(m, d)
  q0, v0 = (x.astype(np.float32).astype(np.float64) for x in (d.qpos, d.qvel))
  u = (0.4 * np.random.default_rng(0).standard_normal((2, nstep, m.nu))).astype(np.float32)
  ctrl = wp.array(u, dtype=float, requires_grad=True, device=scene.device)
  loss = wp.zeros(1, dtype=float, requires_grad=True, device=scene.device)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", diffsim.GradientWarning)
    tape = wp.Tape()
    with tape:
      traj = diffsim.rollout(scene, ctrl, qpos0=np.tile(q0, (2, 1)), qvel0=np.tile(v0, (2, 1)))
      wp.launch(_final_state_loss, dim=2, inputs=[traj.qpos, traj.qvel], outputs=[loss], device=scene.device)
    tape.backward(loss)
  g = ctrl.grad.numpy()[1].astype(np.float64)

  def loss_c(uu: np.ndarray) -> float:
    out = mujoco_rollout(m, uu, qpos0=q0, qvel0=v0)
    return 0.5 * np.sum(out["qpos"][-1] ** 2) + 0.25 * np.sum(out["qvel"][-1] ** 2)

  refs = {}
  for h in (1e-6, 1e-5):
    refs[h] = np.zeros(u[1].shape)
    for i in np.ndindex(u[1].shape):
      up, dn = u[1].astype(np.float64), u[1].astype(np.float64)
      up[i] += h
      dn[i] -= h
      refs[h][i] = (loss_c(up) - loss_c(dn)) / (2 * h)
  rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))
  return {"nstep": nstep, "ncon0": int(d.ncon), "ctrl_err": rel(g, refs[1e-6]), "ref_err": rel(refs[1e-5], refs[1e-6]),
          "grad_norm": float(np.linalg.norm(refs[1e-6])),
          "warned": any(issubclass(c.category, diffsim.GradientWarning) for c in caught)}


def issue17_table(rows: list[dict]) -> str:
  lines = ["| steps | ctrl gradient error (world 1) | C ref. 1e-6 vs 1e-5 | norm of the gradient | self-check |",
           "|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['nstep']} | {r['ctrl_err']:.1e} | {r['ref_err']:.1e} | {r['grad_norm']:.3g} | "
                 f"{'GradientWarning' if r['warned'] else 'quiet'} |")
  return "\n".join(lines)


def _run_isolated(model: str, nstep: int, device: str | None, timeout: float, mem_cap_gb: float,
                  tolerance: float | None = None, lanes: str | None = None, nudge: int = 0) -> dict:
  """`bench_model` in a child process with an address-space cap and a time limit."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "row.json")
    cmd = [sys.executable, "-m", "benchmarks.bench_contact_gradients", "--one", model, "--nstep", str(nstep),
           "--row-out", out] + (["--device", device] if device else []) + \
          (["--tolerance", repr(tolerance)] if tolerance is not None else []) + (["--lanes", lanes] if lanes else []) + \
          (["--nudge", str(nudge)] if nudge else [])
    cap = int(mem_cap_gb * 1e9)

    def limit():
      resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    t = time.perf_counter()
    try:
      proc = subprocess.run(cmd, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            preexec_fn=limit, timeout=timeout, capture_output=True, text=True)
      failure = None if proc.returncode == 0 else (
        f"process ended with code {proc.returncode}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    except subprocess.TimeoutExpired:
      failure = f"timed out after {timeout:.0f} s"
    row = {"model": model}
    if os.path.exists(out):
      with open(out) as f:
        row = json.load(f)
    if failure and "error" not in row:
      row["error"] = failure + (f" (in stage {row['stage']!r}; address space capped at {mem_cap_gb:g} GB)"
                                if "stage" in row else "")
    row["wall_s"] = time.perf_counter() - t
    return row


def _fmt(x, spec: str = ".1e") -> str:
  return "" if x is None else format(x, spec)


def _bytes(n: float) -> str:
  return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB"


def table(rows: list[dict]) -> str:
  head = ("| model | nv | nu | contacts (rows) at start | lanes (MJWarp memory) | forward max abs qpos diff | "
          "gradient | grad error ctrl | grad error qvel0 | lanes' error ctrl, qvel0 (beside the adjoint) | "
          "C ref. 1e-6 vs 1e-5 | unresolved switches (world-steps) | gradient rollout (s) | wall (s) | note |")
  lines = [head, "|" + "---|" * 15]
  for r in rows:
    err = r.get("grad_err", {})
    sw = "" if "switches" not in r else f"{r['switches']} ({r['switch_steps']}){' warned' if r.get('warned') else ''}"
    lanes = "" if "nlane" not in r else f"{r['nlane']} ({_bytes(r['mem_gb'] * 1e9)})"
    cons = "" if "ncon0" not in r else f"{r['ncon0']} ({r['nefc0']})"
    note = r.get("error") or r.get("note", "")
    if r.get("lanes_error"):
      note = f"the lanes beside the adjoint: {r['lanes_error']}" + (f"; {note}" if note else "")
    le = r.get("grad_err_lanes", {})
    lane_err = ", ".join(_fmt(le.get(k)) for k in ("ctrl", "qvel0") if k in le)
    if r.get("ref_qpos_max", 0) > 1e3:
      note = f"diverges in MuJoCo C too (max abs qpos {r['ref_qpos_max']:.1e} after {r['nstep']} steps)" + (
        f"; {note}" if note else "")
    lines.append(
      f"| {r['model']} | {r.get('nv', '')} | {r.get('nu', '')} | {cons} | {lanes} | {_fmt(r.get('fwd_qpos_err'))} | "
      f"{r.get('gradient', '')} | {_fmt(err.get('ctrl'))} | {_fmt(err.get('qvel0'))} | {lane_err} | "
      f"{_fmt(r.get('ref_err'))} | {sw} | "
      f"{_fmt(r.get('grad_s'), '.3g')} | {_fmt(r.get('wall_s'), '.0f')} | {note.replace('|', '/')} |")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--models", nargs="+", default=None, help="paths under mujoco_warp/test_data (default: all)")
  parser.add_argument("--nstep", type=int, default=20)
  parser.add_argument("--issue-horizons", nargs="*", type=int, default=[10, 20, 30],
                      help="steps of issue 17's humanoid setup (none: skip it)")
  parser.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
  parser.add_argument("--mem-cap-gb", type=float, default=None,
                      help="address-space cap per model process (default: 85%% of the available memory)")
  parser.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK_MODELS)} at 5 steps, issue 17 at 3")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  parser.add_argument("--tolerance", type=float, default=None,
                      help="the constraint solver's (default: SolverSettings'); results go to a _tol<value> file")
  parser.add_argument("--lanes", choices=["auto", "tolerance", "nominal"], default=None,
                      help="SolverSettings.lanes, and the lanes' gradient on every model; results go to a "
                           "_lanes-<value> file")
  parser.add_argument("--nudge", type=int, default=0,
                      help="another draw of the inputs, nudged by a few float32 ulps (see bench_model); results "
                           "go to a _nudge<value> file")
  parser.add_argument("--one", help=argparse.SUPPRESS)  # child process: one model
  parser.add_argument("--row-out", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  if args.one:
    bench_model(args.one, args.nstep, args.device, save=lambda row: write_json(args.row_out, row),
                tolerance=args.tolerance, lanes=args.lanes, nudge=args.nudge)
    return []
  from diffsim.scene import available_memory

  device = wp.get_device(args.device or ("cuda:0" if wp.is_cuda_available() else "cpu"))
  names = list(QUICK_MODELS) if args.quick else (args.models or models())
  nstep = 5 if args.quick else args.nstep
  horizons = [3] if args.quick else args.issue_horizons
  cap = args.mem_cap_gb or 0.85 * (available_memory(wp.get_device("cpu")) or 16e9) / 1e9
  tol = ("" if args.tolerance is None else f"_tol{args.tolerance:g}") + (f"_lanes-{args.lanes}" if args.lanes else "") + \
        (f"_nudge{args.nudge}" if args.nudge else "")
  path = os.path.join(args.out, f"contact_gradients{tol}_{str(device).replace(':', '')}")
  payload = {"argv": sys.argv[1:] if argv is None else list(argv), "nworld": NWORLD, "nstep": nstep,
             "mem_cap_gb": cap, "issue17": [], "rows": []}

  def save():
    write_json(path + ".json", payload)
    md = [table(payload["rows"])]
    if payload["issue17"]:
      md = ["Issue 17's humanoid setup:", "", issue17_table(payload["issue17"]), "", "Test models:", ""] + md
    with open(path + ".md", "w") as f:
      f.write("\n".join(md) + "\n")

  for n in horizons:
    payload["issue17"].append(issue17(n, args.device, args.tolerance))
    save()
  for name in names:
    payload["rows"].append(_run_isolated(name, nstep, args.device, args.timeout, cap, args.tolerance, args.lanes,
                                         args.nudge))
    r = payload["rows"][-1]
    print(f"{name}: {r.get('error') or r.get('note') or r.get('grad_err')} ({r['wall_s']:.0f} s)", flush=True)
    save()
  if payload["issue17"]:
    print(issue17_table(payload["issue17"]))
  print(table(payload["rows"]))
  return payload["rows"]


if __name__ == "__main__":
  main()
