"""Gradient cost of the analytic adjoint beside the finite-difference lanes and MJX, in one run.

Models (issue 12): cart-pole, the SO-101 with contacts disabled (joint limits and dof friction stay),
MJWarp's test humanoid with contacts disabled (free root, 21 limited hinges), and the same humanoid with
its contacts, standing on its floor at the start, and the SO-101 pick scene (the arm and a cube resting on
the floor; issue 26: contact rows in the adjoint), and four small contact models (issue 35: the adjoint's
fixed cost, where per-launch overhead dominates): a free box on a plane, a ball with spin on a plane
(condim 6), a capsule lying on a box (condim 4) and a planar leg (two slides, two hinges, a foot on the
floor), elliptic cones, each in contact from the first step (`ncon` in the row: contacts of the last
step over all worlds). `nstep` steps from
`qpos0` at rest with fixed controls in the middle of their ranges; loss = sum of squares of the final
`qpos`; gradient d(loss)/d(ctrl). For each model and world count, timed alternately (so that load
from other processes hits every column alike), each a captured graph replayed:

  - `fwd`: a non-differentiable `Rollout` (one MJWarp world per world);
  - `analytic`: `Rollout(gradient="analytic")` on a `wp.Tape` plus the loss and `tape.backward`;
  - `lanes`: the same with `gradient="finite_difference"` (`1 + 2 (nx + nu)` MJWarp worlds per
    world, plus `2 nv` guard lanes with limits), where `nlane * nworld <= --lane-max-worlds`;
  - `mjx`: `jax.jit(jax.vmap(jax.grad(loss)))` through `mjx.step` (`--mjx`; needs mujoco-mjx), the
    ratio analytic / MJX per pair of runs (below 1: diffsim faster). MJX's constraint solver is a
    `while_loop`, which `jax.grad` cannot reverse: on models with constraint rows (the SO-101's and
    the humanoid's limits and friction) MJX runs one solver iteration (`opt.iterations = 1`, as MJX
    users differentiate them; `mjx_solver_iterations` in the row), diffsim the model's.

Also per row: analytic vs lanes gradient difference (relative, Frobenius), and the bytes each method
keeps per world-step for its backward pass (the analytic adjoint: the solver's acceleration, `nv`
floats; the lanes: the step Jacobians, `(nx + ns) nz` floats) beside the MJWarp worlds it steps
(1 and `nlane` per world).

Run: `python -m benchmarks.bench_adjoint [--device cpu] [--models ...] [--sizes 1 64 1024] [--nstep 50]
[--repeats 3] [--mjx] [--mjx-max-worlds N] [--merge]`. Writes `benchmarks/results/adjoint_<device>.json`
after every row (with `--merge`, into the rows already there, replacing those of the same model and size)
and its table as `adjoint_<device>.md`, and prints the table. Where MJX cannot run a model (it cannot put
or differentiate it) or a size is above `--mjx-max-worlds` (MJX through contacts on a small CPU), the row
says why in `mjx_skipped` and the table under it.

On a GPU the lanes run in parallel inside one graph, so their cost relative to the forward pass
falls towards `nlane` times the per-world work at full occupancy, while the analytic backward is a
fixed number of launches per step (58-102, cart-pole to the pick scene) over `nworld` threads: at small world counts both are
launch-bound, at large ones the analytic adjoint's work is a small constant multiple of a forward
step. MJX's forward pass is 7-9x faster than MJWarp's on this CPU (XLA vectorizes over worlds,
Warp's CPU kernels run on one thread); on a GPU MJWarp's forward is the faster one, which the
ratio to MJX inherits.
"""

from __future__ import annotations

import argparse
import copy
import json
import os

import mujoco
import numpy as np
import warp as wp

import diffsim

from .bench_rollout import _alternate, _graph, _wall, controls, gradient_fn, lane_count
from .save import write_json, write_text


def _no_contacts(path: str) -> mujoco.MjModel:
  spec = mujoco.MjSpec.from_file(path)
  spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
  return spec.compile()


def _humanoid_path() -> str:
  import mujoco_warp

  return os.path.join(os.path.dirname(mujoco_warp.__file__), "test_data", "humanoid", "humanoid.xml")


def _humanoid() -> mujoco.MjModel:
  return _no_contacts(_humanoid_path())


def _humanoid_standing() -> mujoco.MjModel:
  """The humanoid with its contacts, standing on the floor (keyframe 0 as `qpos0`): 8 contacts at
  the start, more as it falls."""
  mjm = mujoco.MjModel.from_xml_path(_humanoid_path())
  mjm.qpos0[:] = mjm.key_qpos[0]
  return mjm


def _pick_scene() -> mujoco.MjModel:
  """The SO-101 pick scene (the arm and a cube on the floor: the cube's corners in contact), its noslip
  solver off (the adjoint does not cover it)."""
  spec = mujoco.MjSpec.from_file(diffsim.asset_path("so101", "pick_scene.xml"))
  spec.option.noslip_iterations = 0
  return spec.compile()


# the small contact models (issue 35): a few dofs, each touching from the first step
BOX = """
<mujoco model="box_on_plane">
  <option timestep="0.005" cone="elliptic"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="0.5"/>
    <body name="box" pos="0 0 0.0499">
      <freejoint name="box"/>
      <geom name="box" type="box" size="0.05 0.05 0.05" mass="1" friction="0.6"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push_x" joint="box" gear="1 0 0 0 0 0" ctrlrange="-4 4"/>
    <motor name="push_y" joint="box" gear="0 1 0 0 0 0" ctrlrange="-4 4"/>
  </actuator>
</mujoco>
"""
BALL = """
<mujoco model="spinning_ball">
  <option timestep="0.005" cone="elliptic"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="0.5 0.01 0.002"/>
    <body name="ball" pos="0 0 0.0499">
      <freejoint name="ball"/>
      <geom name="ball" type="sphere" size="0.05" mass="0.5" condim="6" friction="0.8 0.02 0.005"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="ball" gear="1 0 0 0 0 0" ctrlrange="-2 2"/>
    <motor name="spin" joint="ball" gear="0 0 0 0 0 0.05" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""
CAPSULE = """
<mujoco model="capsule_on_box">
  <option timestep="0.005" cone="elliptic"/>
  <worldbody>
    <geom name="table" type="box" pos="0 0 0.05" size="0.3 0.3 0.05"/>
    <body name="capsule" pos="0 0 0.1299">
      <freejoint name="capsule"/>
      <geom name="capsule" type="capsule" fromto="-0.08 0 0 0.08 0 0" size="0.03" mass="0.4" condim="4"
            friction="0.7 0.01"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="capsule" gear="0 1 0 0 0 0" ctrlrange="-2 2"/>
    <motor name="twist" joint="capsule" gear="0 0 0 0 0 0.05" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""
LEG = """
<mujoco model="planar_leg">
  <option timestep="0.005" cone="elliptic"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="0.8"/>
    <body name="hip" pos="0 0 0.599">
      <joint name="x" type="slide" axis="1 0 0" damping="0.1"/>
      <joint name="z" type="slide" axis="0 0 1" damping="2"/>
      <geom type="sphere" size="0.06" mass="2" contype="0" conaffinity="0"/>
      <body name="thigh">
        <joint name="hip" type="hinge" axis="0 1 0" range="-90 90" damping="0.05"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" mass="0.5" contype="0" conaffinity="0"/>
        <body name="shin" pos="0 0 -0.3">
          <joint name="knee" type="hinge" axis="0 1 0" range="-150 0" damping="0.05"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.27" size="0.025" mass="0.3" contype="0" conaffinity="0"/>
          <geom name="foot" type="sphere" pos="0 0 -0.27" size="0.03" mass="0.1"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="hip" joint="hip" gear="3" ctrlrange="-1 1"/>
    <motor name="knee" joint="knee" gear="3" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


MODELS = {
  "cartpole": lambda: mujoco.MjModel.from_xml_path(diffsim.asset_path("cartpole.xml")),
  "so101_no_contacts": lambda: _no_contacts(diffsim.asset_path("so101", "so101_new_calib.xml")),
  "humanoid_no_contacts": _humanoid,
  "humanoid_contacts": _humanoid_standing,
  "so101_pick_scene": _pick_scene,
  "box_on_plane": lambda: mujoco.MjModel.from_xml_string(BOX),
  "spinning_ball": lambda: mujoco.MjModel.from_xml_string(BALL),
  "capsule_on_box": lambda: mujoco.MjModel.from_xml_string(CAPSULE),
  "planar_leg": lambda: mujoco.MjModel.from_xml_string(LEG),
}


# models MJX is not tried on by default (`--mjx-skip-models`), and why
MJX_SKIP = {
  "so101_pick_scene": "MJX did not finish the pick scene within 15 min at 1 world and 5 steps on the 2-core CPU: "
                      "mjx.put_model alone took 5.5 min (convex hulls of the SO-101's 13 collision meshes, "
                      "160,796 vertices, built in Python), then jit compilation ran past the limit",
}


def _mjx(mjm: mujoco.MjModel, u: np.ndarray) -> tuple[dict | None, str | None]:
  """`bench_mjx.mjx_case` with the model's solver iterations, else with one; (None, why) where MJX
  cannot put the model or differentiate its step, so that the row records it instead of the run failing."""
  from .bench_mjx import mjx_case

  try:
    try:
      mx = mjx_case(mjm, u)
      mx["iterations"] = int(mjm.opt.iterations)
    except ValueError as e:
      if "Reverse-mode differentiation" not in str(e):
        raise
      # MJX's constraint solver is a while_loop, which jax.grad cannot reverse, unless it runs once
      one = copy.deepcopy(mjm)
      one.opt.iterations = 1
      mx = mjx_case(one, u)
      mx["iterations"] = 1
  except Exception as e:  # noqa: BLE001 -- any MJX failure (unsupported geometry, a NaN trace) is a result
    return None, f"MJX failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
  return mx, None


def bench_case(model: str, nworld: int, nstep: int, device: str, repeats: int, lane_max_worlds: int,
               mjx: bool, mjx_max_worlds: int = 1 << 30, mjx_skip: str | None = None) -> dict:
  mjm = MODELS[model]()
  scene = diffsim.Scene(mjm, nworld=nworld, device=device)
  u = controls(mjm, nworld, nstep)
  ctrl = wp.array(u, dtype=float, device=scene.device, requires_grad=True)

  fwd = diffsim.Rollout(scene, nstep, differentiable=False)
  fwd(ctrl)
  ncon = int(scene.data(1).nacon.numpy().sum())  # the last step's contacts, all worlds
  fns = {"fwd": _graph(scene.device, lambda: fwd(ctrl))}
  grads = {}
  ro = diffsim.Rollout(scene, nstep, gradient="analytic")
  g = gradient_fn(ro, ctrl)
  g()
  grads["analytic"] = ctrl.grad.numpy().copy()
  fns["analytic"] = _graph(scene.device, g)
  nlane = lane_count(scene)
  if nlane * nworld <= lane_max_worlds:
    ro_fd = diffsim.Rollout(scene, nstep, gradient="finite_difference")
    nlane = ro_fd.fd.nlane
    g = gradient_fn(ro_fd, ctrl)
    g()
    grads["lanes"] = ctrl.grad.numpy().copy()
    fns["lanes"] = _graph(scene.device, g)
  mx, mjx_skipped = None, None
  if mjx and mjx_skip:
    mjx_skipped = mjx_skip
  elif mjx and nworld > mjx_max_worlds:
    mjx_skipped = f"{nworld} worlds > --mjx-max-worlds {mjx_max_worlds}"
  elif mjx:
    mx, mjx_skipped = _mjx(mjm, u)
  if mx is not None:
    fns["mjx"] = mx["run_grad"]
    fns["mjx_fwd"] = mx["run_fwd"]
  for f in fns.values():
    _wall(f)  # warm
  times = _alternate(fns, repeats)
  med = {k: float(np.median(v)) for k, v in times.items()}
  ratio = lambda a, b: float(np.median(np.array(times[a]) / np.array(times[b])))
  rel = lambda a, b: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
  ns = scene.nsensordata
  row = {
    "model": model, "nworld": nworld, "nstep": nstep, "device": str(scene.device), "nv": scene.nv,
    "nu": scene.nu, "nlane": nlane, "repeats": repeats, "ncon": ncon,
    "fwd_s": med["fwd"], "analytic_s": med["analytic"], "analytic_over_fwd": ratio("analytic", "fwd"),
    "lanes_s": med.get("lanes"), "lanes_over_fwd": ratio("lanes", "fwd") if "lanes" in times else None,
    "analytic_vs_lanes_rel_diff": rel(grads["analytic"], grads["lanes"]) if "lanes" in grads else None,
    "bytes_per_world_step_analytic": 4 * scene.nv,
    "bytes_per_world_step_lanes": 4 * (scene.nx + ns) * (scene.nx + scene.nu),
    "mjwarp_worlds_analytic": nworld, "mjwarp_worlds_lanes": nlane * nworld,
  }
  if mx is not None:
    row.update(mjx_grad_s=med["mjx"], mjx_fwd_s=med["mjx_fwd"], analytic_over_mjx=ratio("analytic", "mjx"),
               mjx_grad_over_fwd=ratio("mjx", "mjx_fwd"), fwd_over_mjx_fwd=ratio("fwd", "mjx_fwd"),
               analytic_vs_mjx_rel_diff=rel(grads["analytic"], mx["grad"]), jax_device=mx["device"],
               mjx_solver_iterations=mx["iterations"])
  elif mjx_skipped is not None:
    row["mjx_skipped"] = mjx_skipped
  return row


def table(rows: list[dict]) -> str:
  f = lambda x, fmt: "-" if x is None else format(x, fmt)
  mjx = lambda r, k, fmt: "skipped" if r.get("mjx_skipped") else f(r.get(k), fmt)
  lines = ["| model | worlds | fwd (s) | analytic / fwd | lanes / fwd (nlane) | analytic vs lanes | "
           "analytic / MJX grad | MJX grad / fwd | B per world-step (analytic, lanes) |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(
      f"| {r['model']} | {r['nworld']} | {r['fwd_s']:.3g} | {r['analytic_over_fwd']:.2f} | "
      f"{f(r['lanes_over_fwd'], '.1f')} ({r['nlane']}) | {f(r['analytic_vs_lanes_rel_diff'], '.1e')} | "
      f"{mjx(r, 'analytic_over_mjx', '.2f')} | {mjx(r, 'mjx_grad_over_fwd', '.1f')} | "
      f"{r['bytes_per_world_step_analytic']}, {r['bytes_per_world_step_lanes']} |")
  skipped = {}  # (model, why): world counts
  for r in rows:
    if r.get("mjx_skipped"):
      skipped.setdefault((r["model"], r["mjx_skipped"]), []).append(f"{r['nworld']:,}")
  if skipped:
    lines += ["", "MJX skipped: " + "; ".join(f"{m} at {', '.join(n)} world(s): {why}"
                                              for (m, why), n in skipped.items()) + "."]
  return "\n".join(lines)


def merge(old: list[dict], new: list[dict]) -> list[dict]:
  """`old` with each row of the same model and world count as a row of `new` replaced by it, in place;
  the other rows of `new` appended."""
  key = lambda r: (r["model"], r["nworld"])
  by_key = {key(r): r for r in new}
  out = [by_key.pop(key(r), r) for r in old]
  return out + [r for r in new if key(r) in by_key]


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default=None, help="cpu or cuda:0 (default: cuda:0 if available)")
  parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
  parser.add_argument("--sizes", nargs="+", type=int, default=[1, 64, 1024])
  parser.add_argument("--nstep", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--lane-max-worlds", type=int, default=12000,
                      help="time the lanes only where nlane * nworld is at most this (their cost on the CPU)")
  parser.add_argument("--mjx", action="store_true", help="also time MJX's jax.grad (needs mujoco-mjx)")
  parser.add_argument("--mjx-max-worlds", type=int, default=1 << 30,
                      help="time MJX only up to this many worlds (its cost with contacts on the CPU); the rows "
                      "above say so in mjx_skipped")
  parser.add_argument("--mjx-skip-models", nargs="*", default=list(MJX_SKIP), choices=list(MODELS),
                      help="models MJX is not tried on (default: those MJX_SKIP names, the row says why); "
                      "give the flag with no model to try MJX on every one")
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  parser.add_argument("--merge", action="store_true",
                      help="keep the rows already in the output file, replacing those of the same model and size")
  args = parser.parse_args(argv)
  device = args.device or ("cuda:0" if wp.is_cuda_available() else "cpu")
  rows = []
  path = os.path.join(args.out, f"adjoint_{device.split(':')[0]}.json")
  old = []
  if args.merge and os.path.exists(path):
    with open(path) as fh:
      old = json.load(fh)
  for model in args.models:
    for n in args.sizes:
      rows.append(bench_case(model, n, args.nstep, device, args.repeats, args.lane_max_worlds, args.mjx,
                             args.mjx_max_worlds, MJX_SKIP.get(model, "named in --mjx-skip-models")
                             if model in args.mjx_skip_models else None))
      write_json(path, merge(old, rows))
      print(table(rows[-1:]).splitlines()[2], flush=True)
  write_text(os.path.splitext(path)[0] + ".md", table(merge(old, rows)))
  print(table(rows))
  return rows


if __name__ == "__main__":
  main()
