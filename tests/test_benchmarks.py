"""The benchmark scripts run at tiny size (speed itself is never asserted in a test)."""

import json

from benchmarks import bench_rollout


def test_bench_rollout_runs_tiny(tmp_path):
  rows = bench_rollout.main(["--device", "cpu", "--models", "cartpole", "--sizes", "2", "--nstep", "3",
                             "--repeats", "1", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "rollout_cpu.json").read_text())
  assert saved["rows"] == rows and len(rows) == 1
  row = rows[0]
  assert row["nlane"] == 1 + 2 * (2 * 2 + 1)  # central differences over dqpos, qvel, ctrl
  for key in ("fwd_eager_wsps", "fwd_captured_wsps", "mjw_step_captured_wsps", "mujoco_rollout_wsps", "grad_s"):
    assert row[key] > 0
