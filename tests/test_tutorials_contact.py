"""The contact tutorials run headless in --test mode and check their own results.

They run in this process (imported from their files), so Warp's loaded modules are shared with the
other tests instead of being loaded again by a fresh interpreter.
"""

import importlib.util
import os

import mujoco

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE = os.environ.get("DIFFSIM_TEST_DEVICE", "cpu")


def _load(name: str):
  spec = importlib.util.spec_from_file_location(f"tutorial_{name[:-3]}", os.path.join(ROOT, "tutorials", name))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_sysid_push_friction(tmp_path, capsys):
  # two pushes of 0.5 s recorded in float64 MuJoCo C: friction and mass from the MJCF's values (1.0,
  # 0.1 kg) to within 2% of the truth (0.6, 0.13 kg), each inside 3 of its std (measured: 2.1e-4 and
  # 9.5e-4 relative, 0.3 and 0.5 std; about 50 s on the 2-core CPU)
  code = _load("09_sysid_push_friction.py").main(["--test", "--device", DEVICE, "--out", str(tmp_path)])
  out = capsys.readouterr().out
  assert code == 0, out
  assert "test passed" in out, out
  assert out.strip().splitlines()[-2].startswith("09_sysid_push_friction:")
  assert "derivatives of geom_friction:block: analytic step" in out, out  # LM on the analytic step Jacobians
  assert "derivatives of body_mass:block: analytic step" in out, out
  folder = tmp_path / "09_sysid_push_friction"
  for f in ("push0.npz", "push1.npz", "push0.csv", "push1.csv", "push_scene.xml", "params.json", "model.xml",
            "signals.png", "cost.png", "params.png"):
    assert (folder / f).is_file(), f
  assert (folder / "push_fit.png").stat().st_size > 10_000
  # the identified model and the guess load anywhere (mesh paths of the SO-101 resolved)
  for f in ("model.xml", "push_scene.xml"):
    mujoco.MjModel.from_xml_path(str(folder / f))


def test_so101_push(tmp_path, capsys):
  # 4 worlds, the cube pushed 5-15 cm with both jaw pads, Adam (120 iterations) on analytic-adjoint
  # tape gradients: every world's plan, replayed open-loop in float64 MuJoCo C, must end with the cube
  # within 2 cm of its target in >= 90% of the worlds, and the median error must fall below the
  # scripted start's (measured: all 4, median 0.17 and 0.21 cm under two float32 roundings of the
  # adjoint, against 1.0 cm; about 45 s on the 2-core CPU). Not L-BFGS at 4 worlds: its one line
  # search over the stacked worlds stops after 4-7 iterations on a float32 plateau of the summed
  # cost, median 0.39 or 1.29 cm as the adjoint's rounding changed.
  code = _load("08_so101_push.py").main(["--test", "--device", DEVICE, "--out", str(tmp_path)])
  out = capsys.readouterr().out
  assert code == 0, out
  assert "test passed" in out, out
  assert "adam (analytic tape gradients)" in out, out
  assert (tmp_path / "08_so101_push" / "push.png").stat().st_size > 10_000
