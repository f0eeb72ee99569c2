"""Tutorial 10 (a robot from a USD stage, loaded, simulated and identified) runs headless in --test mode."""

import os
import subprocess
import sys

import mujoco

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_tutorial_10_usd_sysid(tmp_path):
  cmd = [sys.executable, os.path.join(ROOT, "tutorials", "10_usd_sysid.py"), "--test", "--device", "cpu", "--out",
         str(tmp_path)]
  # this checkout's diffsim first (the script's folder, tutorials/, would come first on sys.path)
  path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
  env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=path)
  p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  assert "test passed" in p.stdout
  out = tmp_path / "10_usd_sysid"
  for f in ("arm_model.usda", "arm_model.xml", "run0.npz", "run1.npz", "params.json", "model.xml", "signals.png"):
    assert (out / f).is_file(), f
  m = mujoco.MjModel.from_xml_path(str(out / "model.xml"))  # the converted stage with the identified masses
  assert abs(m.body("upper_arm").mass[0] / 1.2 - 1) < 1e-3 and abs(m.body("forearm").mass[0] / 0.7 - 1) < 1e-3
