"""The system identification tutorials run headless in --test mode and check their own results."""

import os
import subprocess
import sys

import mujoco
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(name, out):
  cmd = [sys.executable, os.path.join(ROOT, "tutorials", name), "--test", "--device", "cpu", "--out", str(out)]
  env = dict(os.environ, MPLBACKEND="Agg")
  return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


@pytest.mark.parametrize("name, folder, files", [
  ("05_sysid_pendulum.py", "05_sysid_pendulum",
   ["run0.npz", "run1.npz", "pendulum_guess.xml", "params.json", "model.xml", "signals.png", "signals_1.png",
    "cost.png", "params.png"]),
  ("06_sysid_so101.py", "06_sysid_so101",
   ["recording.npz", "params.json", "model.xml", "signals.png", "cost.png", "params.png"]),
  ("07_sysid_lerobot.py", "07_sysid_lerobot",
   ["so101_dataset/meta/info.json", "so101_dataset/data/chunk-000/file-000.parquet", "params.json", "model.xml",
    "signals.png", "signals_1.png", "cost.png", "params.png"]),
])
def test_tutorial(tmp_path, name, folder, files):
  p = _run(name, tmp_path)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  assert "test passed" in p.stdout
  for f in files:
    assert (tmp_path / folder / f).is_file(), f
  # the identified model loads anywhere (mesh paths of the SO-101 resolved)
  mujoco.MjModel.from_xml_path(str(tmp_path / folder / "model.xml"))
