"""Videos of many worlds: rendered frames tiled into one GIF or MP4.

`write_video(frames, path)` lays the worlds of `diffsim.render.Frames` (or an array `(ntime, nworld,
height, width, 3)`) out in a grid, labels each tile with its world index and an optional caption,
and writes a GIF (Pillow) or an MP4 (imageio-ffmpeg: `pip install "diffsim[video]"`) through a
temporary file renamed into place. `record(scene, traj, path)` checks the path, renders and writes
in one call.
"""

from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

__all__ = ["write_video", "tile", "record", "check_path", "add_video_arguments", "video_options", "FORMATS",
           "GIF_MAX_FPS"]

FORMATS = (".gif", ".mp4")
# GIF frame delays are whole hundredths of a second and browsers slow anything under 0.02 s down to
# 0.1 s: faster motions drop frames to stay in real time
GIF_MAX_FPS = 50.0


def check_path(path) -> str:
  """`path` as a string when it names a GIF or MP4 in an existing folder, with its writer importable;
  else a clear error. Call it before rendering, so a bad path fails before any kernel runs."""
  path = os.fspath(path)
  ext = os.path.splitext(path)[1].lower()
  if ext not in FORMATS:
    raise ValueError(f"video path {path!r}: the extension must be one of {FORMATS} (GIF via Pillow, MP4 via "
                     f"imageio-ffmpeg)")
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise FileNotFoundError(f"video path {path!r}: the folder {folder!r} does not exist; create it first "
                            f"(os.makedirs(..., exist_ok=True))")
  if ext == ".mp4":
    try:
      import imageio_ffmpeg  # noqa: F401
    except ImportError:
      raise ImportError("writing MP4 needs imageio-ffmpeg, an optional extra: pip install \"diffsim[video]\" "
                        "(or write a .gif, which needs only Pillow)") from None
  return path


def _frames_array(frames) -> tuple[np.ndarray, float | None, np.ndarray | None]:
  """`(ntime, nworld, height, width, 3)` uint8, the real-time fps if known, and the world indices."""
  if hasattr(frames, "rgb_device"):  # diffsim.render.Frames
    return frames.rgb, frames.fps, np.asarray(frames.worlds)
  rgb = frames.numpy() if hasattr(frames, "numpy") and not isinstance(frames, np.ndarray) else np.asarray(frames)
  if rgb.ndim == 4:
    rgb = rgb[:, None]
  if rgb.ndim != 5 or rgb.shape[-1] != 3:
    raise ValueError(f"frames of shape {rgb.shape}: expected (ntime, nworld, height, width, 3) or (ntime, height, "
                     f"width, 3) RGB")
  if rgb.dtype != np.uint8:
    if np.issubdtype(rgb.dtype, np.floating):
      rgb = np.clip(np.round(rgb * 255.0), 0, 255)  # floats in [0, 1]
    rgb = rgb.astype(np.uint8)
  return rgb, None, None


def _font(size: int):
  from PIL import ImageFont

  try:
    return ImageFont.load_default(size=size)
  except TypeError:  # Pillow < 10.1: one bitmap size
    return ImageFont.load_default()


def tile(rgb: np.ndarray, *, labels: Sequence[str] | None = None, columns: int | None = None,
         gap: int = 2) -> np.ndarray:
  """Tiles worlds into a grid: `(ntime, nworld, height, width, 3)` -> `(ntime, H, W, 3)` uint8.

  Args:
    rgb: frames, uint8.
    labels: one string per world drawn in its tile's bottom-left corner (None: no labels).
    columns: tiles per row (default: `ceil(sqrt(nworld))`).
    gap: pixels of dark border between tiles.
  """
  from PIL import Image, ImageDraw

  ntime, nworld, height, width, _ = rgb.shape
  columns = columns or math.ceil(math.sqrt(nworld))
  rows = math.ceil(nworld / columns)
  out = np.full((ntime, rows * height + (rows - 1) * gap, columns * width + (columns - 1) * gap, 3), 20, np.uint8)
  for w in range(nworld):
    r, c = divmod(w, columns)
    out[:, r * (height + gap):r * (height + gap) + height, c * (width + gap):c * (width + gap) + width] = rgb[:, w]
  if labels is not None:
    # text drawn once on a transparent layer, then pasted into every frame
    layer = Image.new("RGBA", (out.shape[2], out.shape[1]), (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    font = _font(max(8, height // 16))
    for w, text in enumerate(labels):
      if not text:
        continue
      r, c = divmod(w, columns)
      # bottom-left: motions (a pole swinging up, an arm reaching) mostly use the top of the view
      x, bottom = c * (width + gap) + 3, r * (height + gap) + height - 2
      box = draw.textbbox((x, bottom), text, font=font, anchor="ld")
      y = box[1]
      box = draw.textbbox((x, y), text, font=font)
      draw.rectangle((box[0] - 2, box[1] - 1, box[2] + 2, box[3] + 1), fill=(0, 0, 0, 150))
      draw.text((x, y), text, fill=(255, 255, 255, 255), font=font)
    alpha = np.asarray(layer)[..., 3:4].astype(np.float32) / 255.0
    color = np.asarray(layer)[..., :3].astype(np.float32)
    out = (out * (1.0 - alpha) + color * alpha).round().astype(np.uint8)
  return out


def write_video(frames, path, fps: float | None = None, *, captions: Sequence[str] | None = None,
                labels: bool | Sequence[str] = True, columns: int | None = None, still=None) -> str:
  """Writes frames of many worlds as one GIF or MP4, tiled in a grid; returns the path.

  Args:
    frames: `diffsim.render.Frames`, or RGB `(ntime, nworld, height, width, 3)` / `(ntime, height,
      width, 3)` (uint8, or floats in [0, 1]; numpy or `wp.array`).
    path: `*.gif` or `*.mp4` in an existing folder; written to a temporary file, then renamed.
    fps: frames per second; default: real time (`Frames.fps`, from the model's timestep). A GIF
      plays at most `GIF_MAX_FPS`, dropping frames to stay in real time.
    captions: one string per world added to its tile's label (e.g. the final error).
    labels: label each tile with its world index (and caption); or one label per world to use
      instead of "world i" (e.g. when the tiles come from several solvers).
    columns: tiles per row (default: a near-square grid).
    still: also write the last tiled frame as a PNG here (e.g. for a README).
  """
  path = check_path(path)
  if still is not None:
    still = os.fspath(still)
    if not still.lower().endswith(".png") or not os.path.isdir(os.path.dirname(os.path.abspath(still))):
      raise ValueError(f"still {still!r}: a .png path in an existing folder")
  rgb, real_fps, worlds = _frames_array(frames)
  fps = real_fps if fps is None else float(fps)
  if fps is None:
    raise ValueError("fps is needed for frames given as an array (Frames from render_trajectory know their timestep)")
  if not fps > 0:
    raise ValueError(f"fps must be positive, got {fps!r}")
  ntime, nworld = rgb.shape[:2]
  if captions is not None and len(captions) != nworld:
    raise ValueError(f"{len(captions)} captions for {nworld} worlds: give one per world")
  worlds = np.arange(nworld) if worlds is None else worlds
  if not isinstance(labels, bool):
    if len(labels) != nworld:
      raise ValueError(f"{len(labels)} labels for {nworld} worlds: give one per world")
    names = [str(label) for label in labels]
  else:
    names = [f"world {int(w)}" for w in worlds] if labels else [""] * nworld
  text = [" ".join(t for t in (name, captions[i] if captions is not None else "") if t) for i, name in enumerate(names)]
  grid = tile(rgb, labels=text, columns=columns)
  stem, ext = os.path.splitext(path)
  partial = f"{stem}.partial{ext}"  # ffmpeg picks its container from the extension
  try:
    if ext.lower() == ".gif":
      _write_gif(grid, partial, fps)
    else:
      _write_mp4(grid, partial, fps)
    os.replace(partial, path)
    if still is not None:
      from PIL import Image

      Image.fromarray(grid[-1]).save(partial + ".png")
      os.replace(partial + ".png", still)
  finally:
    for leftover in (partial, partial + ".png"):
      if os.path.exists(leftover):
        os.remove(leftover)
  return path


def _write_gif(grid: np.ndarray, path: str, fps: float) -> None:
  from PIL import Image

  keep = max(1, math.ceil(fps / GIF_MAX_FPS))
  index = list(range(0, len(grid), keep))
  if index[-1] != len(grid) - 1:
    index.append(len(grid) - 1)  # the final state, which the motion was optimized for
  duration = max(20, round(1000.0 * keep / fps / 10) * 10)  # ms, in GIF's hundredths of a second
  images = [Image.fromarray(grid[i]).quantize(colors=256, method=Image.Quantize.MEDIANCUT) for i in index]
  images[0].save(path, save_all=True, append_images=images[1:], duration=duration, loop=0, optimize=False,
                 disposal=1)


def _write_mp4(grid: np.ndarray, path: str, fps: float) -> None:
  import imageio_ffmpeg

  # H.264 in yuv420p needs even sides
  h, w = grid.shape[1] + grid.shape[1] % 2, grid.shape[2] + grid.shape[2] % 2
  if (h, w) != grid.shape[1:3]:
    grid = np.pad(grid, ((0, 0), (0, h - grid.shape[1]), (0, w - grid.shape[2]), (0, 0)))
  writer = imageio_ffmpeg.write_frames(path, (w, h), fps=fps, codec="libx264", pix_fmt_out="yuv420p",
                                       macro_block_size=1, quality=7)
  writer.send(None)
  for frame in grid:
    writer.send(np.ascontiguousarray(frame))
  writer.close()


def record(scene, traj, path, *, worlds=None, captions: Sequence[str] | None = None,
           labels: bool | Sequence[str] = True, camera=None, size=(320, 240), every: int = 1,
           fps: float | None = None, columns: int | None = None, still=None, progress: bool = False) -> str:
  """Renders a trajectory's worlds (`diffsim.render.render_trajectory`) and writes them as one video.

  The path (folder, extension, MP4 extra) is checked before anything is rendered. Arguments as in
  `render_trajectory` and `write_video`; returns the path.
  """
  from .render import render_trajectory

  path = check_path(path)
  if captions is not None and worlds is not None and len(captions) != len(np.atleast_1d(worlds)):
    raise ValueError(f"{len(captions)} captions for {len(np.atleast_1d(worlds))} worlds: give one per world")
  frames = render_trajectory(scene, traj, worlds=worlds, camera=camera, size=size, every=every, progress=progress)
  return write_video(frames, path, fps, captions=captions, labels=labels, columns=columns, still=still)


def add_video_arguments(parser, *, name: str = "motion") -> None:
  """Adds `--video/--no-video`, `--video-size WIDTHxHEIGHT` and `--video-format` to a tutorial's or
  command's `argparse` parser (read back by `video_options`)."""
  import argparse

  parser.add_argument("--video", action=argparse.BooleanOptionalAction, default=None,
                      help=f"write {name}.gif of the worlds' motion (default: on, off under --test)")
  parser.add_argument("--video-size", default="320x240", help="WIDTHxHEIGHT pixels per world (default 320x240)")
  parser.add_argument("--video-format", choices=("gif", "mp4"), default="gif",
                      help="gif (Pillow) or mp4 (pip install \"diffsim[video]\")")
  parser.set_defaults(video_name=name)


def video_options(args, folder: str) -> tuple[str | None, tuple[int, int]]:
  """`(path or None, (width, height))` from `add_video_arguments`' options; the path is checked
  (`check_path`) so that a bad one fails before anything runs. Video is on unless `--no-video`, or
  `--test` without `--video`."""
  from .render import check_size

  enabled = args.video if args.video is not None else not getattr(args, "test", False)
  try:
    size = tuple(int(v) for v in args.video_size.lower().split("x"))
  except ValueError:
    size = ()
  if len(size) != 2:
    raise ValueError(f"--video-size {args.video_size!r}: expected WIDTHxHEIGHT, e.g. 320x240")
  size = check_size(size)
  if not enabled:
    return None, size
  return check_path(os.path.join(folder, f"{args.video_name}.{args.video_format}")), size
