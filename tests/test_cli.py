"""The `diffsim` command line."""

import json
import os
import shutil
import subprocess
import sys

import mujoco
import numpy as np
import pytest

from diffsim import cli
from diffsim import data as D

GUESS = """
<mujoco model="pendulum">
  <option timestep="0.01"/>
  <worldbody>
    <body name="pole">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.05"/>
      <inertial pos="0 0 -0.4" mass="0.5" diaginertia="0.004 0.004 0.0005"/>
      <geom name="rod" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.02" mass="0"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="torque" joint="hinge"/>
  </actuator>
</mujoco>
"""
TRUTH = GUESS.replace('mass="0.5"', 'mass="0.6"').replace('damping="0.05"', 'damping="0.08"')


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  d = tmp_path_factory.mktemp("cli")
  (d / "pendulum.xml").write_text(GUESS)
  t = np.arange(101) * 0.01
  for i, (scale, q0) in enumerate([(1.0, 0.3), (0.7, -0.4)]):
    ctrl = scale * (0.8 * np.sin(2 * np.pi * 0.7 * t + i) + 0.5 * np.sin(2 * np.pi * 1.9 * t))[:, None]
    D.save_npz(d / f"run{i}.npz", D.simulate(TRUTH, ctrl, qpos0=[q0]))
  return d


def test_help(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  assert "sysid" in out and "usage: diffsim" in out
  with pytest.raises(SystemExit) as e:
    cli.main(["sysid", "--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  for opt in ("--param", "--bounds", "--weight", "--method", "--device", "--maxiter", "--out", "--shooting",
              "--starts"):
    assert opt in out


def test_console_script():
  # `diffsim --help` through the installed entry point (or `python -m diffsim.cli` without it)
  exe = shutil.which("diffsim")
  cmd = [exe, "--help"] if exe else [sys.executable, "-m", "diffsim.cli", "--help"]
  p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr
  assert "sysid" in p.stdout


@pytest.mark.parametrize("args, message", [
  (["missing.xml", "run0.npz", "--param", "dof_damping:hinge"], "MJCF file not found"),
  (["pendulum.xml", "nope.npz", "--param", "dof_damping:hinge"], "recorded data not found"),
  (["pendulum.xml", "run0.npz", "--param", "dof_damping:elbow"], "no joint named 'elbow' in the model"),
  (["pendulum.xml", "run0.npz", "--param", "dof_damping:hinge", "--weight", "qacc=2"], "unknown weight key 'qacc'"),
  (["pendulum.xml", "run0.npz", "--param", "dof_damping:hinge", "--bounds", "dof_damping:hinge=1,2"],
   "lies outside the bounds"),
  (["pendulum.xml", "bad.npz", "--param", "dof_damping:hinge"], "'qpos' contains 1 NaN/Inf"),
])
def test_bad_input_exits_2_with_a_clear_message(files, capsys, monkeypatch, args, message):
  monkeypatch.chdir(files)
  rec = D.load_npz(files / "run0.npz")[0]
  rec.qpos[4, 0] = np.nan
  D.save_npz(files / "bad.npz", rec)
  assert cli.main(["sysid", *args, "--out", str(files / "bad_out"), "--quiet"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("diffsim sysid: error: ") and message in err
  assert not (files / "bad_out").exists()  # nothing written on bad input


def test_argument_errors(capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["sysid", "m.xml", "d.npz"])  # --param is required
  assert e.value.code == 2
  assert "--param" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    cli.main(["sysid", "m.xml", "d.npz", "--param", "x", "--bounds", "x=1"])
  assert "NAME=LOWER,UPPER" in capsys.readouterr().err


@pytest.mark.parametrize("jacobian", ["forward", "directional"])
def test_sysid_end_to_end(files, capsys, jacobian):
  out = files / f"out_{jacobian}"
  code = cli.main(["sysid", str(files / "pendulum.xml"), str(files / "run0.npz"), str(files / "run1.npz"),
                   "--param", "body_mass:pole", "--param", "dof_damping:hinge", "--bounds", "body_mass:pole=0.1,5",
                   "--weight", "qvel=0.5", "--device", "cpu", "--maxiter", "15", "--jacobian", jacobian,
                   "--out", str(out)])
  captured = capsys.readouterr()
  assert code == 0, captured.err
  lines = captured.out.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("sysid converged: cost ")
  assert "body_mass:pole = " in lines[0] and "params.json" in lines[0]
  params = json.loads((out / "params.json").read_text())
  assert abs(params["body_mass:pole"]["value"] / 0.6 - 1) < 1e-3
  assert abs(params["dof_damping:hinge"]["value"] / 0.08 - 1) < 1e-3
  assert params["body_mass:pole"]["initial"] == 0.5
  assert (params["body_mass:pole"]["lower"], params["body_mass:pole"]["upper"]) == (0.1, 5.0)
  m = mujoco.MjModel.from_xml_path(str(out / "model.xml"))
  assert abs(m.body_mass[1] / 0.6 - 1) < 1e-3
  assert {"params.json", "model.xml", "signals.png", "signals_1.png", "cost.png", "params.png"} <= set(os.listdir(out))
  assert "sysid" in captured.err  # the progress bar


def test_sysid_video_replays_the_recordings_with_both_models(files, capsys):
  from PIL import Image

  out = files / "out_video"
  code = cli.main(["sysid", str(files / "pendulum.xml"), str(files / "run0.npz"), str(files / "run1.npz"),
                   "--param", "body_mass:pole", "--param", "dof_damping:hinge", "--device", "cpu", "--maxiter", "15",
                   "--out", str(out), "--no-plots", "--quiet", "--video", "--video-size", "48x36"])
  captured = capsys.readouterr()
  assert code == 0, captured.err
  assert "replay.gif" in captured.out
  with Image.open(out / "replay.gif") as gif:
    # recorded | initial model | identified model, one row per recording (101 samples at 0.01 s: 50 fps)
    assert gif.size == (3 * 48 + 2 * 2, 2 * 36 + 2) and gif.n_frames == 51
    frames = []
    for i in range(gif.n_frames):
      gif.seek(i)
      frames.append(np.asarray(gif.convert("RGB")).astype(int))
  # the pendulum's pixels in a tile, above its label (those differing from the background colour)
  rod = lambda f, r, c: np.abs(f[r * 38:r * 38 + 24, c * 50:c * 50 + 48] - f[0, 0]).sum(axis=2) > 30
  overlap = lambda a, b: (a & b).sum() / max((a | b).sum(), 1)
  for r in range(2):
    # the identified model's replay moves as the recording does; the initial model's drifts away
    assert all(rod(f, r, 0).sum() > 10 for f in frames)
    identified = np.mean([overlap(rod(f, r, 2), rod(f, r, 0)) for f in frames])
    initial = np.mean([overlap(rod(f, r, 1), rod(f, r, 0)) for f in frames])
    assert identified > 0.95 and initial < 0.75, (identified, initial)
  assert cli.main(["sysid", str(files / "pendulum.xml"), str(files / "run0.npz"), "--param", "body_mass:pole",
                   "--out", str(out), "--video", "--video-size", "0x36"]) == 2
  assert "size" in capsys.readouterr().err


def test_failed_write_after_the_solve_exits_3(files, capsys):
  """The solve's summary is still printed, and the exit code tells a script the files are incomplete."""
  out = files / "out_failed"
  (out / "model.xml").mkdir(parents=True)  # in the way of the identified model, found only after the solve
  code = cli.main(["sysid", str(files / "pendulum.xml"), str(files / "run0.npz"), "--param", "dof_damping:hinge",
                   "--device", "cpu", "--maxiter", "3", "--no-plots", "--quiet", "--out", str(out)])
  captured = capsys.readouterr()
  assert code == 3
  assert captured.out.startswith("sysid ") and "dof_damping:hinge = " in captured.out
  assert "writing" in captured.err and "Is a directory" in captured.err
  assert sorted(os.listdir(out)) == ["model.xml", "params.json"]  # params.json written before model.xml failed
  assert (out / "model.xml").is_dir()


def test_outputs_that_are_refused_before_the_solve(files, capsys):
  # --out next to an input named model.xml would replace it with the identified model
  folder = files / "inplace"
  folder.mkdir()
  (folder / "model.xml").write_text(GUESS)
  common = [str(files / "run0.npz"), "--param", "dof_damping:hinge", "--device", "cpu", "--quiet"]
  assert cli.main(["sysid", str(folder / "model.xml"), *common, "--out", str(folder)]) == 2
  assert "would overwrite the input model" in capsys.readouterr().err
  assert (folder / "model.xml").read_text() == GUESS and os.listdir(folder) == ["model.xml"]
  (files / "afile").write_text("mine")
  assert cli.main(["sysid", str(files / "pendulum.xml"), *common, "--out", str(files / "afile")]) == 2
  assert "is a file, not a folder" in capsys.readouterr().err
  assert cli.main(["sysid", str(files / "pendulum.xml"), *common, "--lr", "0.1", "--out", str(files / "lr")]) == 2
  assert "--lr is Adam's step size" in capsys.readouterr().err
  assert not (files / "lr").exists()


def test_a_rerun_leaves_no_plots_of_the_earlier_run(files, capsys):
  out = files / "rerun"
  base = ["sysid", str(files / "pendulum.xml"), "--param", "dof_damping:hinge", "--device", "cpu", "--maxiter", "3",
          "--quiet", "--out", str(out)]
  assert cli.main([*base[:2], str(files / "run0.npz"), str(files / "run1.npz"), *base[2:]]) in (0, 1)
  (out / "notes.txt").write_text("mine")
  assert {"signals.png", "signals_1.png"} <= set(os.listdir(out))
  assert cli.main([*base[:2], str(files / "run0.npz"), *base[2:]]) in (0, 1)  # one recording: no signals_1.png
  assert set(os.listdir(out)) == {"params.json", "model.xml", "signals.png", "cost.png", "params.png", "notes.txt"}
  assert cli.main([*base[:2], str(files / "run0.npz"), *base[2:], "--no-plots"]) in (0, 1)
  assert set(os.listdir(out)) == {"params.json", "model.xml", "notes.txt"}
  capsys.readouterr()


def test_the_answer_is_printed_before_the_plots_are_drawn(files, capsys, monkeypatch):
  from diffsim import plot_process

  seen = []
  draw = plot_process.PlotProcess.draw

  def spy(self, res, out):  # what the terminal shows when the plots start
    seen.append(capsys.readouterr().out)
    return draw(self, res, out)

  monkeypatch.setattr(plot_process.PlotProcess, "draw", spy)
  out = files / "first"
  assert cli.main(["sysid", str(files / "pendulum.xml"), str(files / "run0.npz"), "--param", "dof_damping:hinge",
                   "--device", "cpu", "--maxiter", "3", "--quiet", "--out", str(out)]) in (0, 1)
  assert len(seen) == 1 and "dof_damping:hinge" in seen[0] and "wrote" in seen[0]
  # drawn by the plotting process
  assert set(os.listdir(out)) == {"params.json", "model.xml", "signals.png", "cost.png", "params.png"}


def test_plots_without_their_process_and_a_plot_that_cannot_be_written(files, capsys, monkeypatch):
  from diffsim import plot_process

  base = ["sysid", str(files / "pendulum.xml"), str(files / "run0.npz"), "--param", "dof_damping:hinge", "--device",
          "cpu", "--maxiter", "3", "--quiet", "--out"]
  # where the process cannot start, this one draws
  with monkeypatch.context() as m:
    m.setattr(plot_process.subprocess, "Popen", lambda *a, **k: (_ for _ in ()).throw(OSError("no fork")))
    assert cli.main([*base, str(files / "inline")]) in (0, 1)
  assert {"signals.png", "cost.png", "params.png"} <= set(os.listdir(files / "inline"))
  # the plotting process's write error reaches the command: exit 3, the answer and params.json kept
  (files / "blocked" / "cost.png").mkdir(parents=True)  # a folder where the PNG goes: the rename fails
  capsys.readouterr()
  assert cli.main([*base, str(files / "blocked")]) == 3
  cap = capsys.readouterr()
  assert "dof_damping:hinge" in cap.out and "writing its plots to" in cap.err and "cost.png" in cap.err
  assert (files / "blocked" / "params.json").is_file()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked drawing needs os.fork")
def test_the_plotting_process_draws_its_figures_side_by_side(tmp_path, monkeypatch, capfd):
  from diffsim import plot_process

  monkeypatch.setattr(plot_process, "local_cores", lambda: 2)

  def write(name):
    def draw():
      (tmp_path / name).write_text(str(os.getpid()))
      return str(tmp_path / name)
    return name, draw

  def fail(error):
    def draw():
      raise error
    return "bad", draw

  assert plot_process._draw([write("a"), write("b"), write("c")]) == 0
  pids = {(tmp_path / n).read_text() for n in "abc"}
  assert len(pids) == 3 and str(os.getpid()) in pids  # the first here, the others in forked children
  # a child's write error: its message, exit WRITE_FAILED; the other figures are still drawn
  capfd.readouterr()
  assert plot_process._draw([write("d"), fail(OSError("cannot write e.png")), write("f")]) == plot_process.WRITE_FAILED
  assert "cannot write e.png" in capfd.readouterr().err and (tmp_path / "d").exists() and (tmp_path / "f").exists()
  # any other failure in a child: status 1 and its traceback (the command then draws the plots itself)
  assert plot_process._draw([write("g"), fail(RuntimeError("broken figure"))]) == 1
  assert "RuntimeError: broken figure" in capfd.readouterr().err


def test_times_in_milliseconds_are_refused(files, capsys):
  rec = D.load_npz(files / "run0.npz")[0]
  rec.time = rec.time * 1000  # 10 "s" per row: 1,000 steps of 0.01 s
  D.save_npz(files / "ms.npz", rec)
  args = ["sysid", str(files / "pendulum.xml"), str(files / "ms.npz"), "--param", "dof_damping:hinge", "--quiet",
          "--device", "cpu", "--out", str(files / "ms_out")]
  assert cli.main(args) == 2
  err = capsys.readouterr().err
  assert "1,000 model steps" in err and "in milliseconds" in err and "--max-steps-per-sample" in err
  assert cli.main([*args, "--max-steps-per-sample", "0"]) == 2  # the limit itself is checked
  assert "max_steps_per_sample must be a positive integer" in capsys.readouterr().err
  assert not (files / "ms_out").exists()


def test_import_diffsim_loads_no_simulator_and_every_name_resolves():
  # a quick start (issue 15): Warp, MuJoCo Warp, MuJoCo and matplotlib load when a name that needs them is used
  code = ("import sys, diffsim; heavy = [m for m in ('warp', 'mujoco_warp', 'mujoco', 'matplotlib', 'numpy') "
          "if m in sys.modules]; print(heavy)")
  p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                     cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert p.returncode == 0, p.stderr
  assert p.stdout.strip() == "[]", p.stdout
  import diffsim

  for name in diffsim.__all__:
    assert getattr(diffsim, name) is not None, name
  import diffsim.rollout  # noqa: F401  (importing the submodule keeps the public function)

  assert callable(diffsim.rollout) and diffsim.rollout.__name__ == "rollout"
  assert "Scene" in dir(diffsim)
  with pytest.raises(AttributeError, match="has no attribute 'nope'"):
    diffsim.nope  # noqa: B018
