"""`benchmarks/bench_push.py` at a tiny size: 4 worlds (one per goal) from the touching start,
iLQR on the analytic step Jacobians and scipy L-BFGS-B on MuJoCo C (3 evaluations per world).

Speed is never asserted; what is: the JSON and Markdown are written (the JSON matching the returned
rows), the rollout really took the analytic Jacobians, iLQR's plans replayed in float64 MuJoCo C
bring every box within 2 cm of its goal (from 10-15 cm), and scipy's row is complete.
"""

import json
import math

from benchmarks import bench_push


def test_bench_push_tiny(tmp_path):
  rows = bench_push.main(["--device", "cpu", "--nworld", "4", "--starts", "touching", "--solvers", "ilqr", "scipy",
                          "--ilqr-iters", "20", "--lbfgs-evals", "3", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "push_cpu.json").read_text())
  assert saved["rows"] == rows
  assert "| touching | iLQR, analytic Jacobians | 4 |" in (tmp_path / "push_cpu.md").read_text()
  ilqr, scipy = rows
  assert ilqr["solver"] == "ilqr" and ilqr["derivatives"].startswith("analytic"), ilqr["jacobian_reason"]
  assert ilqr["success_2cm"] == 1.0 and ilqr["max_cm"] < 2.0, ilqr["errors_cm"]
  assert ilqr["cost_median"] < 1.0  # from 1/2 1e4 (0.10-0.15 m)^2 = 50-112 at the start
  assert scipy["solver"] == "scipy" and 0 < scipy["evals"] <= 4 * 3 + 4 and scipy["nit"] >= 0
  for r in rows:
    assert r["wall_s"] > 0 and math.isfinite(r["median_cm"]) and len(r["errors_cm"]) == 4
    assert r["ratio_to_scipy"] > 0
