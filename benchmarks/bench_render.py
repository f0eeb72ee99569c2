"""Rendering: diffsim's batched ray tracer (MJWarp) against `mujoco.Renderer` world by world, side by side.

  python -m benchmarks.bench_render [--device cpu] [--sizes 1 16 64] [--resolutions 160x120 320x240]

Both draw the same frames: `--nframe` stored states of a swinging cart-pole trajectory (and the
SO-101 arm's meshes with `--models so101`) in every world, from the same default camera. diffsim
renders all worlds of a stored state in one launch (`diffsim.render_trajectory`: set qpos,
kinematics, BVH refit, ray trace, copy to the frame buffer); `mujoco.Renderer` (OpenGL through
`MUJOCO_GL`, EGL by default, OSMesa where EGL is missing) draws one world at a time (set qpos,
`mj_kinematics`, `update_scene`, `render`, read back). Rates are world-frames per second, medians of
`--repeats` runs after one untimed warm-up (which compiles MJWarp's kernels). Writes
`benchmarks/results/render_<device>.{json,md}`.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")  # read when mujoco.Renderer first makes a context

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import warp as wp  # noqa: E402

import diffsim  # noqa: E402
from diffsim.render import render_trajectory  # noqa: E402

from .save import write_json, write_text  # noqa: E402


def _so101_source():
  return diffsim.asset_path("so101", "so101_new_calib.xml")


MODELS = {"cartpole": lambda: diffsim.asset_path("cartpole.xml"), "so101": _so101_source}


def trajectory(mjm: mujoco.MjModel, nworld: int, nframe: int) -> np.ndarray:
  """`(nworld, nframe, nq)`: every hinge and slide swinging through its range (or +-1) at a per-world phase."""
  t = np.linspace(0.0, 1.0, nframe)[None, :, None]
  phase = np.linspace(0.0, np.pi, nworld)[:, None, None]
  lo, hi = mjm.jnt_range[:, 0], mjm.jnt_range[:, 1]
  limited = mjm.jnt_limited.astype(bool)
  mid = np.where(limited, 0.5 * (lo + hi), 0.0)
  amp = np.where(limited, 0.4 * (hi - lo), 1.0)
  qpos = mid + amp * np.sin(2 * np.pi * t + phase)
  if mjm.nq != mjm.njnt:
    raise ValueError("bench_render's trajectories are for hinge and slide joints only")
  return qpos.astype(np.float32)


def _gl_renderer_name() -> str:
  try:
    from OpenGL import GL

    name = GL.glGetString(GL.GL_RENDERER)
    return name.decode() if name else "?"
  except Exception:  # PyOpenGL missing or no current context
    return "?"


def bench_mujoco_renderer(mjm: mujoco.MjModel, camera_mjm: mujoco.MjModel, cam: int, qpos: np.ndarray,
                          size: tuple[int, int], repeats: int) -> dict:
  """World-frames per second of `mujoco.Renderer`, one world at a time, or why it cannot run here."""
  width, height = size
  try:
    renderer = mujoco.Renderer(camera_mjm, height, width)
  except Exception as e:  # no EGL / OSMesa library, no display for GLFW
    return {"gl_error": f"{type(e).__name__}: {e}".strip()[:300], "gl": os.environ.get("MUJOCO_GL")}
  d = mujoco.MjData(camera_mjm)
  nworld, nframe, _ = qpos.shape

  def run():
    for k in range(nframe):
      for w in range(nworld):
        d.qpos[:] = qpos[w, k]
        mujoco.mj_kinematics(camera_mjm, d)
        mujoco.mj_comPos(camera_mjm, d)  # the tracking camera follows the subtree centre of mass
        mujoco.mj_camlight(camera_mjm, d)
        renderer.update_scene(d, camera=cam)
        renderer.render()

  run()
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    run()
    times.append(time.perf_counter() - t0)
  out = {"gl": os.environ.get("MUJOCO_GL"), "gl_renderer": _gl_renderer_name(),
         "mujoco_fps": nworld * nframe / float(np.median(times))}
  renderer.close()
  return out


def bench_case(model: str, nworld: int, size: tuple[int, int], nframe: int, device: str, repeats: int) -> dict:
  scene = diffsim.Scene.from_xml(MODELS[model](), nworld=1, device=device)
  qpos = trajectory(scene.mjm, nworld, nframe)
  render_trajectory(scene, qpos, size=size)  # compiles, builds the render context (kept with the scene)
  times = []
  for _ in range(repeats):
    wp.synchronize_device(scene.device)
    t0 = time.perf_counter()
    render_trajectory(scene, qpos, size=size)
    wp.synchronize_device(scene.device)
    times.append(time.perf_counter() - t0)
  row = {"model": model, "nworld": nworld, "width": size[0], "height": size[1], "nframe": nframe,
         "device": str(scene.device), "diffsim_fps": nworld * nframe / float(np.median(times)),
         "diffsim_batch_ms": 1000 * float(np.median(times)) / nframe}
  # the same camera (diffsim's, added to the model) for MuJoCo's OpenGL renderer
  cam = next(v for k, v in scene.memo.items() if k[0] == "camera")
  row.update(bench_mujoco_renderer(scene.mjm, cam.mjm, cam.camera, qpos, size, repeats))
  if "mujoco_fps" in row:
    row["speedup"] = row["diffsim_fps"] / row["mujoco_fps"]
  return row


def table(rows: list[dict]) -> str:
  gl = next((r for r in rows if "mujoco_fps" in r), None)
  name = f"`mujoco.Renderer` ({gl['gl']}, {gl['gl_renderer']}), world by world" if gl else "`mujoco.Renderer`"
  lines = [f"| model | worlds | pixels | diffsim (MJWarp ray tracer, {rows[0]['device']}): world-frames/s | "
           f"ms per state (all worlds) | {name}: world-frames/s | diffsim's rate / its |",
           "|---|---|---|---|---|---|---|"]
  for r in rows:
    theirs = (f"{r['mujoco_fps']:.0f} | {r['speedup']:.2f}x" if "mujoco_fps" in r
              else f"not run: {r['gl_error']} | -")
    lines.append(f"| {r['model']} | {r['nworld']} | {r['width']}x{r['height']} | {r['diffsim_fps']:.0f} | "
                 f"{r['diffsim_batch_ms']:.1f} | {theirs} |")
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default="cpu", help="cpu (default) or cuda:0")
  parser.add_argument("--models", nargs="+", default=["cartpole"], choices=list(MODELS))
  parser.add_argument("--sizes", nargs="+", type=int, default=[1, 16, 64], help="world counts")
  parser.add_argument("--resolutions", nargs="+", default=["160x120", "320x240"], help="WIDTHxHEIGHT")
  parser.add_argument("--nframe", type=int, default=20, help="stored states rendered per run")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
  args = parser.parse_args(argv)
  wp.config.log_level = wp.LOG_WARNING
  path = os.path.join(args.out, f"render_{args.device.split(':')[0]}")
  rows = []
  for model in args.models:
    for res in args.resolutions:
      size = tuple(int(v) for v in res.split("x"))
      for nworld in args.sizes:
        rows.append(bench_case(model, nworld, size, args.nframe, args.device, args.repeats))
        write_json(path + ".json", rows)
        print(table(rows[-1:]).splitlines()[-1], flush=True)
  md = table(rows)
  write_text(path + ".md", md)
  print(md)
  return rows


if __name__ == "__main__":
  main()
