"""The trajectory viewer (diffsim.viewer): served on a free loopback port and loaded in headless Chromium."""

import os
import shutil
import subprocess

import numpy as np
import pytest

import diffsim
from diffsim import cli
from diffsim.viewer import load_trajectory, save_trajectory

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
  for name in BROWSERS:
    if shutil.which(name):
      return shutil.which(name)
  pytest.skip("no Chromium to load the page in (Debian: apt-get install chromium; .ci/run installs it)")


def _screenshot(browser: str, url: str, path, budget_ms: int = 15000) -> np.ndarray:
  from PIL import Image

  # software WebGL (SwiftShader): no GPU needed; virtual time lets the page load and draw
  p = subprocess.run([browser, "--headless=new", "--no-sandbox", "--use-angle=swiftshader",
                      "--enable-unsafe-swiftshader", "--window-size=900,600", f"--virtual-time-budget={budget_ms}",
                      f"--screenshot={path}", url],
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 0 and os.path.exists(path), p.stderr[-2000:]
  with Image.open(path) as im:
    return np.asarray(im.convert("RGB")).astype(int)


# the 3-d view, clear of viser's notice (top left), control panel (right) and axes gizmo (bottom left)
SCENE = (slice(160, 540), slice(60, 560))


def _orange(rgb: np.ndarray) -> np.ndarray:  # image rows of the cart-pole's pole
  rgb = rgb[SCENE]
  return np.nonzero((rgb[..., 0] > rgb[..., 2] + 80) & (rgb[..., 0] > rgb[..., 1] + 20))[0]


def _blue(rgb: np.ndarray) -> np.ndarray:  # ... of its cart
  rgb = rgb[SCENE]
  return np.nonzero(rgb[..., 2] > rgb[..., 0] + 80)[0]


def test_viewer_page_shows_the_worlds_in_chromium(cartpole, tmp_path):
  pytest.importorskip("viser", reason="the viewer needs viser: pip install \"diffsim[view]\"")
  browser = _browser()
  qpos = np.zeros((2, 5, 2), np.float32)
  qpos[:, :, 1] = np.linspace(0.0, np.pi, 5)
  viewer = diffsim.view(cartpole, qpos, port=0, play=False, block=False)
  try:
    assert viewer.url.startswith("http://127.0.0.1:")
    viewer.time_slider.value = 4 * cartpole.dt  # the last state: poles upright
    shot = _screenshot(browser, viewer.url, tmp_path / "page.png")
    pole, cart = _orange(shot), _blue(shot)
    if pole.size == 0 and cart.size == 0:  # an empty frame: on a loaded CI core the first draw can come late
      shot = _screenshot(browser, viewer.url, tmp_path / "page_retry.png", budget_ms=45000)
      pole, cart = _orange(shot), _blue(shot)
    assert pole.size > 200 and cart.size > 200  # the poles and carts are drawn ...
    assert pole.mean() < cart.mean()  # ... at the state the slider chose: poles above their carts
    for box in viewer.world_boxes:  # hide every world: a fresh page draws neither
      box.value = False
    hidden = _screenshot(browser, viewer.url, tmp_path / "hidden.png")
    assert _orange(hidden).size < 20 and _blue(hidden).size < 20
  finally:
    viewer.close()


def test_trajectory_file_round_trip_and_cli_errors(cartpole, tmp_path, capsys):
  qpos = np.random.default_rng(0).normal(size=(2, 4, 2)).astype(np.float32)
  path = save_trajectory(tmp_path / "traj.npz", cartpole, qpos, labels=["a", "b"])
  mjm, loaded, dt, labels = load_trajectory(path)
  np.testing.assert_array_equal(loaded, qpos)
  assert dt == cartpole.dt and labels == ["a", "b"] and mjm.nq == 2 and mjm.ngeom == cartpole.mjm.ngeom
  with pytest.raises(FileNotFoundError, match="does not exist"):
    save_trajectory(tmp_path / "missing" / "traj.npz", cartpole, qpos)
  assert cli.main(["view", str(tmp_path / "nope.npz")]) == 2
  assert "no trajectory file" in capsys.readouterr().err
  (tmp_path / "bad.npz").write_bytes(b"not a zip")
  assert cli.main(["view", str(tmp_path / "bad.npz")]) == 2
  assert "not a trajectory file" in capsys.readouterr().err
