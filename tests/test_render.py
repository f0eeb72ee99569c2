"""Rendering trajectories of many worlds (diffsim.render) and writing them as videos (diffsim.video).

Tiny images and two worlds: the first render of a model compiles MJWarp's ray-tracing kernel
(seconds on the CPU), then frames take milliseconds.
"""

import os
import sys

import mujoco
import numpy as np
import pytest
import warp as wp

import diffsim
from diffsim.render import RenderWarning, render_trajectory
from diffsim.video import write_video

SIZE = (64, 48)
CART, POLE = 1, 2  # cartpole.xml geom ids (0: rail)

# a red box in front of a fixed camera, and a box whose material has a cube-map texture
FIXED_CAMERA = """
<mujoco>
  <asset>
    <texture name="sky_cube" type="cube" builtin="checker" width="8" height="8" rgb1="1 1 1" rgb2="0 0 0"/>
    <material name="cubed" texture="sky_cube"/>
  </asset>
  <worldbody>
    <light pos="0 0 3"/>
    <camera name="front" pos="0 -2 0.5" xyaxes="1 0 0 0 0 1"/>
    <body name="box" pos="0 0 0.5">
      <joint name="lift" type="slide" axis="0 0 1"/>
      <geom type="box" size="0.2 0.2 0.2" rgba="1 0 0 1" mass="1"/>
    </body>
    <geom name="side" type="box" pos="2 0 0" size="0.1 0.1 0.1" material="cubed"/>
  </worldbody>
</mujoco>
"""


def _mean_row(mask: np.ndarray) -> float:
  rows = np.nonzero(mask)[0]
  assert rows.size, "the geom is not in the image"
  return rows.mean()


def test_worlds_drawn_from_their_own_states(cartpole):
  # world 0 hangs, world 1 is upright and 0.5 m along the rail: both must be drawn where their
  # stored qpos puts them, not where the render context was made (qpos0: hanging) -- the refit trap
  qpos = np.zeros((2, 3, 2), np.float32)
  qpos[1, :, 0] = 0.5
  qpos[1, :, 1] = np.pi
  frames = render_trajectory(cartpole, qpos, size=SIZE, depth=True, segmentation=True)
  assert frames.shape == (3, 2, SIZE[1], SIZE[0], 3)
  rgb, seg, depth = frames.rgb, frames.segmentation, frames.depth
  assert rgb.dtype == np.uint8 and seg.shape == depth.shape == (3, 2, SIZE[1], SIZE[0])
  last = seg[-1]
  assert _mean_row(last[0] == POLE) > _mean_row(last[0] == CART)  # hanging: pole below the cart (rows grow down)
  assert _mean_row(last[1] == POLE) < _mean_row(last[1] == CART)  # upright: above
  # the segmentation agrees with the colours: the pole is orange, the cart blue
  pole_rgb = rgb[-1, 1][last[1] == POLE].astype(float).mean(axis=0)
  cart_rgb = rgb[-1, 1][last[1] == CART].astype(float).mean(axis=0)
  assert pole_rgb[0] > pole_rgb[2] and cart_rgb[2] > cart_rgb[0]
  # depth: distance along the ray where a geom is hit, 0 where nothing is
  assert np.all(depth[seg >= 0] > 0.5) and np.all(depth[seg >= 0] < 10.0)
  assert np.all(depth[seg < 0] == 0.0)
  np.testing.assert_allclose(frames.time, np.arange(3) * cartpole.dt)


def test_every_keeps_the_final_state_and_chosen_worlds(cartpole):
  qpos = np.zeros((2, 6, 2), np.float32)
  qpos[1, -1, 1] = np.pi
  frames = render_trajectory(cartpole, qpos, worlds=[1], size=SIZE, every=2, segmentation=True)
  np.testing.assert_allclose(frames.time, np.array([0, 2, 4, 5]) * cartpole.dt)
  assert frames.worlds.tolist() == [1] and frames.fps == pytest.approx(1 / (2 * cartpole.dt))
  seg = frames.segmentation[:, 0]
  assert _mean_row(seg[0] == POLE) > _mean_row(seg[0] == CART)
  assert _mean_row(seg[-1] == POLE) < _mean_row(seg[-1] == CART)


def test_observe_matches_trajectory_frames(cartpole):
  qpos = np.array([[0.0, 0.3], [-0.2, 2.0]], np.float32)
  image = diffsim.observe(cartpole, qpos, size=SIZE)
  assert isinstance(image, wp.array) and image.shape == (2, SIZE[1], SIZE[0], 3) and image.dtype == wp.float32
  frames = render_trajectory(cartpole, qpos[:, None], size=SIZE)
  np.testing.assert_allclose(image.numpy(), frames.rgb[0] / 255.0, atol=1e-6)
  assert not np.allclose(image.numpy()[0], image.numpy()[1])
  torch = pytest.importorskip("torch")
  view = diffsim.interop.to_torch(image)
  assert isinstance(view, torch.Tensor) and view.data_ptr() == image.ptr  # zero-copy


def test_named_camera_and_unsupported_texture_warning():
  scene = diffsim.Scene.from_xml(FIXED_CAMERA, nworld=2, device=os.environ.get("DIFFSIM_TEST_DEVICE", "cpu"))
  qpos = np.array([[[0.0]], [[0.3]]], np.float32)  # world 1's box lifted 0.3 m
  with pytest.warns(RenderWarning, match="sky_cube"):
    frames = render_trajectory(scene, qpos, camera="front", size=SIZE)
  rgb = frames.rgb[0].astype(int)
  red = (rgb[..., 0] > 120) & (rgb[..., 0] > 2 * rgb[..., 1]) & (rgb[..., 0] > 2 * rgb[..., 2])
  centre = SIZE[1] // 2, SIZE[0] // 2
  assert red[0][centre]  # the fixed camera looks straight at the box
  assert _mean_row(red[1]) < _mean_row(red[0]) - 3  # the lifted box is higher in the image


def test_bad_inputs_fail_before_rendering(cartpole, tmp_path):
  qpos = np.zeros((2, 3, 2), np.float32)
  with pytest.raises(diffsim.UnknownNameError, match="no camera named 'top'.*has none"):
    render_trajectory(cartpole, qpos, camera="top", size=SIZE)
  for size in [(0, 48), (64, 0), (100_000, 48), (64.5, 48), 64]:
    with pytest.raises(ValueError, match="size"):
      render_trajectory(cartpole, qpos, size=size)
  with pytest.raises(ValueError, match=r"not this scene's.*nq=2"):
    render_trajectory(cartpole, np.zeros((2, 3, 7), np.float32), size=SIZE)
  other = diffsim.Trajectory(*(wp.zeros((1, 3, n), dtype=float) for n in (7, 6, 0, 0)), wp.zeros((1, 2, 1)), 0.01)
  with pytest.raises(ValueError, match="another model"):
    render_trajectory(cartpole, other, size=SIZE)
  same_nq = diffsim.Trajectory(*(wp.zeros((1, 3, n), dtype=float) for n in (2, 2, 0, 5)), wp.zeros((1, 2, 1)), 0.01)
  with pytest.raises(ValueError, match="sensordata.*another model"):  # nq agrees, the sensors do not
    render_trajectory(cartpole, same_nq, size=SIZE)
  with pytest.raises(ValueError, match="out of range"):
    render_trajectory(cartpole, qpos, worlds=[2], size=SIZE)
  with pytest.raises(ValueError, match="every"):
    render_trajectory(cartpole, qpos, every=0, size=SIZE)
  with pytest.raises(MemoryError, match="every="):
    render_trajectory(cartpole, np.zeros((2, 10**6, 2), np.float32), size=(4096, 4096))
  compiled = diffsim.Scene.from_xml(cartpole.mjm, nworld=1, device=cartpole.device)
  with pytest.raises(ValueError, match="camera='name'"):
    render_trajectory(compiled, qpos[:1], size=SIZE)
  frames = np.zeros((2, 1, 8, 8, 3), np.uint8)
  with pytest.raises(FileNotFoundError, match="does not exist"):
    write_video(frames, tmp_path / "missing" / "motion.gif", fps=10)
  with pytest.raises(ValueError, match="extension"):
    write_video(frames, tmp_path / "motion.avi", fps=10)
  with pytest.raises(ValueError, match="fps"):
    write_video(frames, tmp_path / "motion.gif")
  with pytest.raises(FileNotFoundError, match="does not exist"):  # checked before any frame is rendered
    diffsim.video.record(cartpole, qpos, tmp_path / "missing" / "motion.gif", size=SIZE)


def test_mp4_without_the_extra_names_it(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import fails as if not installed
  with pytest.raises(ImportError, match=r"diffsim\[video\]"):
    write_video(np.zeros((2, 1, 8, 8, 3), np.uint8), tmp_path / "motion.mp4", fps=10)


def test_gif_tiles_worlds_in_real_time(cartpole, tmp_path):
  from PIL import Image

  qpos = np.zeros((2, 9, 2), np.float32)
  qpos[1, :, 1] = np.linspace(0, np.pi, 9)
  frames = render_trajectory(cartpole, qpos, size=SIZE)
  path = write_video(frames, tmp_path / "motion.gif", captions=["hangs", "swings"])
  assert not any(p.name.endswith(".partial.gif") for p in tmp_path.iterdir())
  with Image.open(path) as gif:
    # 100 fps of states: a GIF plays at most 50, so every other frame (and the last) is kept
    assert gif.n_frames == 5 and gif.info["duration"] == 20
    assert gif.size == (2 * SIZE[0] + 2, SIZE[1])  # two tiles side by side, 2 px apart
    gif.seek(gif.n_frames - 1)
    last = np.asarray(gif.convert("RGB")).astype(int)
  # the top half (above the label) of the right tile is world 1's last, upright, state as rendered
  np.testing.assert_allclose(last[:SIZE[1] // 2, SIZE[0] + 2:], frames.rgb[-1, 1, :SIZE[1] // 2], atol=40)
  assert (last[-10:, :40] > 200).any()  # the label's white text, bottom left of the left tile
  imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
  mp4 = write_video(frames, tmp_path / "motion.mp4", fps=25)
  reader = imageio_ffmpeg.read_frames(mp4)
  try:
    meta = next(reader)
    assert meta["fps"] == 25 and tuple(meta["size"]) == (2 * SIZE[0] + 2, SIZE[1])
    assert sum(1 for _ in reader) == 9
  finally:
    reader.close()


_MUJOCO_SEGMENTATION = """
import sys
import mujoco
import numpy as np

mjm = mujoco.MjModel.from_binary_path(sys.argv[1])
inputs = np.load(sys.argv[2])
renderer = mujoco.Renderer(mjm, int(inputs["height"]), int(inputs["width"]))
renderer.enable_segmentation_rendering()
d = mujoco.MjData(mjm)
out = []
for qpos in inputs["qpos"]:
  d.qpos[:] = qpos
  mujoco.mj_forward(mjm, d)
  renderer.update_scene(d, camera=int(inputs["camera"]))
  seg = renderer.render()
  out.append(np.where(seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM), seg[..., 0], -1))
np.save(sys.argv[3], np.array(out))
"""


def test_silhouettes_match_mujoco_renderer(cartpole, tmp_path):
  # the reference: MuJoCo's own OpenGL renderer (EGL, in a fresh process: MUJOCO_GL is read at import)
  # draws the same model, camera and states; each geom covers the same pixels (world 1 is drawn at its
  # own state, not where the render context was made)
  import subprocess

  size = (128, 96)
  qpos = np.array([[[0.0, 0.4]], [[0.3, 2.8]]], np.float32)
  frames = render_trajectory(cartpole, qpos, size=size, segmentation=True)
  cam = next(v for k, v in cartpole.memo.items() if k[0] == "camera" and k[2:4] == size and k[6])
  mujoco.mj_saveModel(cam.mjm, str(tmp_path / "model.mjb"), None)
  np.savez(tmp_path / "inputs.npz", qpos=qpos[:, 0].astype(np.float64), camera=cam.camera, width=size[0],
           height=size[1])
  script = tmp_path / "reference.py"
  script.write_text(_MUJOCO_SEGMENTATION)
  p = subprocess.run([sys.executable, str(script), str(tmp_path / "model.mjb"), str(tmp_path / "inputs.npz"),
                      str(tmp_path / "reference.npy")], capture_output=True, text=True, timeout=120,
                     env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")})
  if p.returncode != 0:
    pytest.skip(f"mujoco.Renderer cannot make an OpenGL context here: {p.stderr.strip().splitlines()[-1][:200]}")
  reference = np.load(tmp_path / "reference.npy")
  ours = frames.segmentation[0]
  for w in range(2):
    for geom in (CART, POLE):
      a, b = ours[w] == geom, reference[w] == geom
      assert b.sum() > 30
      iou = (a & b).sum() / (a | b).sum()
      assert iou > 0.97, (w, geom, iou)  # measured: 1.000 and 0.991 (a pixel or two along the thin pole)
