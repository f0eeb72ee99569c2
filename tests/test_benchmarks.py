"""The benchmark scripts run at tiny size (speed itself is never asserted in a test)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import bench_rollout


def test_bench_rollout_runs_tiny(tmp_path):
  rows = bench_rollout.main(["--device", "cpu", "--models", "cartpole", "--sizes", "2", "--nstep", "3",
                             "--repeats", "1", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "rollout_cpu.json").read_text())
  assert saved["rows"] == rows and len(rows) == 1
  row = rows[0]
  assert row["nlane"] == 1 + 2 * (2 * 2 + 1)  # central differences over dqpos, qvel, ctrl
  for key in ("fwd_eager_wsps", "fwd_captured_wsps", "mjw_step_captured_wsps", "mujoco_rollout_wsps", "grad_s",
              "fwd_over_raw", "first_fwd_s", "first_grad_s", "mjw_step_user_wsps", "mujoco_rollout_1thread_wsps",
              "mujoco_rollout_user_wsps", "fwd_over_user"):
    assert row[key] > 0, key
  assert row["compile_s"] >= 0  # first call minus second: 0 when nothing was left to compile


def test_bench_forward_runs_tiny(tmp_path):
  """diffsim's forward against raw `mjw.step` on the model as written (timings are not asserted): the
  row records the tolerances each side ran at."""
  from benchmarks import bench_forward

  rows = bench_forward.main(["--device", "cpu", "--models", "cartpole", "--sizes", "2", "--nstep", "3",
                             "--repeats", "1", "--out", str(tmp_path)])
  assert json.loads((tmp_path / "forward_cpu.json").read_text())["rows"] == rows and len(rows) == 1
  row = rows[0]
  assert row["tolerance"] == np.float32(1e-6) and row["lane_tolerance"] == 0.0  # the MJCF's 1e-8, floored
  for key in ("fwd_s", "raw_s", "fwd_wsps", "raw_wsps", "fwd_over_raw"):
    assert row[key] > 0, key
  assert "| cartpole | 2 | 3 |" in (tmp_path / "forward_cpu.md").read_text()


def test_bench_lanes_runs_tiny(tmp_path):
  """Tolerance-0 lanes against lanes following their nominal world (timings are not asserted)."""
  from benchmarks import bench_lanes

  rows = bench_lanes.main(["--device", "cpu", "--models", "cartpole", "--nworld", "1", "--nstep", "2",
                           "--repeats", "1", "--out", str(tmp_path)])
  assert json.loads((tmp_path / "lanes_cpu.json").read_text())["rows"] == rows and len(rows) == 1
  assert rows[0]["nlane"] == 1 + 2 * (2 * 2 + 1) and rows[0]["speedup"] > 0


def test_bench_adjoint_runs_tiny(tmp_path):
  """The analytic-adjoint benchmark's rows (timings are for benchmarks/, not asserted): the analytic
  and lane gradients agree, and the analytic adjoint keeps far fewer bytes per world-step."""
  from benchmarks import bench_adjoint

  rows = bench_adjoint.main(["--device", "cpu", "--models", "cartpole", "--sizes", "2", "--nstep", "3",
                             "--repeats", "1", "--mjx", "--mjx-max-worlds", "1", "--out", str(tmp_path)])
  (r,) = rows
  assert r["mjx_skipped"] == "2 worlds > --mjx-max-worlds 1" and "mjx_grad_s" not in r  # MJX not even imported
  assert "MJX skipped: cartpole at 2 world(s)" in (tmp_path / "adjoint_cpu.md").read_text()
  assert r["analytic_vs_lanes_rel_diff"] < 1e-4
  assert r["mjwarp_worlds_lanes"] == r["nlane"] * 2 and r["mjwarp_worlds_analytic"] == 2
  assert r["bytes_per_world_step_analytic"] * 10 < r["bytes_per_world_step_lanes"]
  assert r["analytic_over_fwd"] > 0 and (tmp_path / "adjoint_cpu.json").exists()
  assert "| cartpole | 2 |" in bench_adjoint.table(rows)
  # --merge: a row of the same model and size replaced in place, the others kept, new ones appended
  a, b, c = ({"model": m, "nworld": n} for m, n in (("x", 1), ("x", 2), ("y", 1)))
  assert bench_adjoint.merge([a, b], [{**b, "new": 1}, c]) == [a, {**b, "new": 1}, c]


def test_bench_tolerance_runs_tiny(tmp_path):
  """The solver-tolerance comparison's rows (timings are for benchmarks/, not asserted): the cart-pole
  needs fewer solver iterations at 1e-12 than at 0, and its gradient error is the same at both."""
  from benchmarks import bench_tolerance

  rows = bench_tolerance.main(["--device", "cpu", "--models", "cartpole", "--nworld", "2", "--nstep", "5",
                               "--repeats", "1", "--no-reach", "--out", str(tmp_path)])
  assert json.loads((tmp_path / "tolerance_cpu.json").read_text()) == rows
  (r,) = rows
  assert r["iterations_mean_1e-12"] < r["iterations_mean_0"]  # measured 1.0 against 2.0
  for k, e in r["grad_err_0"].items():
    assert abs(r["grad_err_1e-12"][k] - e) <= 0.1 * e, (k, r)
  assert "| cartpole |" in bench_tolerance.table(rows)


def test_bench_trajopt_runs_tiny(tmp_path):
  from benchmarks import bench_trajopt

  rows = bench_trajopt.main(["--device", "cpu", "--quick", "--problems", "cartpole", "--repeats", "2",
                             "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "trajopt_cpu.json").read_text())
  assert saved["rows"] == rows
  assert [r["method"] for r in rows] == ["ilqr", "adam", "lbfgs"]
  by = {r["method"]: r for r in rows}
  # repeated timed runs: the medians and the spread of their wall times
  for r in rows:
    assert r["repeats"] == 2 and len(r["wall_runs_s"]) == 2 and len(r["time_to_2x_runs_s"]) == 2, r
    assert min(r["wall_runs_s"]) <= r["wall_s"] <= max(r["wall_runs_s"])
    assert r["spread"] == pytest.approx((max(r["wall_runs_s"]) - min(r["wall_runs_s"])) / r["wall_s"])
    if r["time_to_2x_s"] is not None:
      assert r["time_to_2x_s"] == pytest.approx(float(np.median(r["time_to_2x_runs_s"])))
  # an Adam or iLQR iteration is graph replays only: no Python launch, no host read or write
  for m in ("ilqr", "adam"):
    assert by[m]["reads_per_iter"] == by[m]["writes_per_iter"] == by[m]["launches_per_iter"] == 0, by[m]
    assert by[m]["replays_per_iter"] >= 1
  # L-BFGS (scipy on the host) uploads the controls and reads cost and gradient per evaluation
  assert by["lbfgs"]["writes_per_iter"] >= 1 and by["lbfgs"]["reads_per_iter"] >= 1
  # a fixed target, independent of the other solvers (the threshold is relative to the best of them):
  # in 3 iterations iLQR reaches this short problem's optimum, 0.63 of the initial cost (L-BFGS: 0.64)
  assert by["ilqr"]["final_cost_median"] < 0.7 * by["ilqr"]["initial_cost_median"]
  # iLQR's first iteration is timed with both capture layouts (never compared: speed is not tested)
  assert by["ilqr"]["first_iter_one_graph_s"] > 0 and by["ilqr"]["first_iter_looped_s"] > 0



def test_bench_trajopt_push_runs_tiny(tmp_path):
  # tutorial 08's push, 2 worlds over 0.3 s (the pads only just reach the cube), 3 iterations each:
  # rows with the C-judged bar, written to their own file (the cost-threshold problems' file untouched)
  from benchmarks import bench_trajopt

  rows = bench_trajopt.main(["--device", "cpu", "--quick", "--problems", "push", "--solvers", "adam", "lbfgs",
                             "--repeats", "1", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "trajopt_push_cpu.json").read_text())
  assert saved["rows"] == rows and not (tmp_path / "trajopt_cpu.json").exists()
  assert [r["method"] for r in rows] == ["adam", "lbfgs"]
  for r in rows:
    assert r["problem"] == "push" and r["nworld"] == 2 and r["horizon"] == 150, r
    assert r["derivatives"] == "analytic", r  # the push scene is covered by the analytic adjoint
    assert 0.0 <= r["start_rate"] <= 1.0 and 0.0 <= r["final_rate"] <= 1.0
    assert len(r["time_to_bar_runs_s"]) == 1 and r["rates"] and r["rates"][0][0] == 1
  assert "| push | 2 | 150 | adam (analytic) |" in bench_trajopt.push_table(rows)

def test_bench_gradients_runs_quick(tmp_path):
  from benchmarks import bench_gradients

  rows = bench_gradients.main(["--device", "cpu", "--quick", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "gradients_cpu.json").read_text())
  assert saved["rows"] == rows and len(rows) == 1
  assert set(rows[0]["rel_err"]) == {"ctrl", "qpos0", "qvel0"} and len(rows[0]["rel_err_by_world"]["ctrl"]) == 2
  # the cart-pole's tape gradient agrees with float64 MuJoCo C (10 steps: measured 1e-5..3e-5)
  assert max(rows[0]["rel_err"].values()) < 3e-4, rows[0]["rel_err"]
  assert (tmp_path / "gradients_cpu.md").read_text().strip() == bench_gradients.table(rows)


def test_benchmark_suite_runs_quick(tmp_path, monkeypatch):
  from benchmarks import run

  monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` fails: the mjx section is skipped, not fatal
  report = run.main(["--quick", "--device", "cpu", "--sections", "rollout", "determinism", "mjx", "trajopt",
                     "--out", str(tmp_path)])
  assert set(report["sections"]) == {"rollout", "determinism", "mjx", "trajopt"}
  assert isinstance(report["sections"]["trajopt"], list), report["sections"]["trajopt"]  # not "skipped: ..."
  assert report["sections"]["mjx"].startswith("skipped: bench_mjx needs JAX and MJX"), report["sections"]["mjx"]
  det = report["sections"]["determinism"]
  assert [r["model"] for r in det] == ["cartpole", "humanoid"]
  assert det[1]["ncon_on"] > 0 and det[1]["ncon_off"] > 0  # the humanoid exercises MJWarp's contact path
  for r in det:
    # CPU kernels run sequentially: replays repeat bitwise with the switch off or on
    assert r["grad_bitwise_on"] and r["grad_bitwise_off"] and r["fwd_bitwise_on"], r
    assert r["fwd_cost"] > 0 and r["grad_cost"] > 0
  saved = json.loads((tmp_path / "cpu.json").read_text())
  assert saved["sections"]["rollout"] == report["sections"]["rollout"]
  assert saved["sections"]["determinism"] == det
  md = (tmp_path / "cpu.md").read_text()
  assert "## trajopt" in md and "## mjx\n\nskipped" in md
  # --update reruns one section and keeps the others, in the report and its Markdown
  again = run.main(["--quick", "--device", "cpu", "--sections", "determinism", "--determinism-models", "cartpole",
                    "--update", "--out", str(tmp_path)])
  assert again["sections"]["trajopt"] == report["sections"]["trajopt"]
  assert [r["model"] for r in again["sections"]["determinism"]] == ["cartpole"]
  assert "--update" in again["argv_by_section"]["determinism"] and "--update" not in again["argv_by_section"]["rollout"]
  md = (tmp_path / "cpu.md").read_text()
  assert all(f"## {t}" in md for t in ("Rollout", "Determinism", "mjx", "trajopt"))


def test_bench_rollout_skips_gradients_beyond_the_world_cap():
  row = bench_rollout.bench_case("cartpole", 2, 3, "cpu", 1, grad_max_worlds=10)  # 2 worlds x 11 lanes > 10
  assert row["grad_s"] is None and row["grad_over_fwd"] is None and row["nlane"] == 11
  assert row["fwd_captured_wsps"] > 0
  assert "skipped" in bench_rollout.table([row])


def test_gpu_check_script_runs_on_cpu_at_tiny_size(tmp_path):
  # every step of benchmarks/gpu_check.sh (the one GPU run a session may get) with its flags and files,
  # on the CPU at tiny sizes (SMOKE=1): a renamed flag or file fails here, not on the GPU
  pytest.importorskip("mujoco.mjx", reason="the mjx step needs mujoco-mjx (the README's test command installs it)")
  from mujoco import sysid

  if not hasattr(sysid, "optimize"):
    pytest.skip("the sysid step needs mujoco[sysid] (the README's test command installs it)")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, SMOKE="1", OUT=str(tmp_path), PYTHON=sys.executable)
  proc = subprocess.run(["bash", os.path.join(root, "benchmarks", "gpu_check.sh")], env=env, capture_output=True,
                        text=True, timeout=1800)
  assert proc.returncode == 0 and "failed: none" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]
  for f in ("rollout_cpu.json", "humanoid/rollout_cpu.json", "adjoint_cpu.json", "cpu.json", "mjx_cpu.json",
            "trajopt_cpu.json", "sysid_cpu.json", "03_so101_reach/reach.png"):
    assert (tmp_path / f).stat().st_size > 0, f
  rows = json.loads((tmp_path / "rollout_cpu.json").read_text())["rows"]
  assert sorted({r["model"] for r in rows}) == ["cartpole", "so101"] and sorted({r["nworld"] for r in rows}) == [1, 2]
  assert "collected" in (tmp_path / "gpu_tests.txt").read_text()  # the GPU tests exist (collected, not run)


def test_bench_render_runs_tiny(tmp_path):
  """The rendering comparison's rows (rates are for benchmarks/, not asserted): both renderers drew the
  frames, or the row says why `mujoco.Renderer` could not run here."""
  from benchmarks import bench_render

  rows = bench_render.main(["--device", "cpu", "--sizes", "2", "--resolutions", "32x24", "--nframe", "3",
                            "--repeats", "1", "--out", str(tmp_path)])
  assert json.loads((tmp_path / "render_cpu.json").read_text()) == rows
  (row,) = rows
  assert (row["model"], row["nworld"], row["width"], row["height"]) == ("cartpole", 2, 32, 24)
  assert row["diffsim_fps"] > 0 and (row.get("mujoco_fps", 0) > 0 or row["gl_error"])
  assert "| cartpole | 2 | 32x24 |" in bench_render.table(rows)
