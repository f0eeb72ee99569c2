"""`benchmarks/bench_sysid.py` at its tiny size: both tools identify the arm's 10 parameters (diffsim
with both LM Jacobians).

Speed is never asserted; what is: the JSON is written (and matches the returned rows), every time
and count is positive and finite, and both `mujoco.sysid` and diffsim recover the true armatures
and dampings from the noise-free data (float64 vs float32 precision).
"""

import json
import math

import pytest

sysid = pytest.importorskip("mujoco.sysid")
if not hasattr(sysid, "optimize"):  # the package imports empty when its dependencies are missing
  pytest.skip("mujoco.sysid's dependencies are missing (pip install 'mujoco[sysid]')", allow_module_level=True)

from benchmarks import bench_sysid  # noqa: E402


def test_bench_sysid_quick(tmp_path, capsys):
  rows = bench_sysid.main(["--quick", "--device", "cpu", "--nstep", "3", "--repeats", "1", "--out", str(tmp_path)])
  saved = json.loads((tmp_path / "sysid_cpu.json").read_text())
  assert saved["rows"] == rows
  assert [r["ntraj"] for r in rows] == [1, 2]
  assert "| trajectories |" in capsys.readouterr().out
  for r in rows:
    assert r["nparam"] == 10 and r["steps"] == 40
    for key in ("sysid_s", "diffsim_s", "speedup", "sysid_nit", "diffsim_nit", "sysid_nfev", "diffsim_nfev",
                "diffsim_worlds", "directional_s", "directional_speedup", "directional_nit", "directional_nfev",
                "directional_worlds"):
      assert math.isfinite(r[key]) and r[key] > 0, key
    assert r["directional_worlds"] < r["diffsim_worlds"]  # 1 + nparam lanes against 1 + 2 nv + nparam
    assert math.isfinite(r["diffsim_compile_s"]) and r["diffsim_compile_s"] >= 0
    # the initial guess is 30% off; both must land on the truth (noise-free data)
    assert r["sysid_err"] < 1e-6, r["sysid_err"]
    assert r["diffsim_err"] < 1e-4 and r["directional_err"] < 1e-4, (r["diffsim_err"], r["directional_err"])
    assert r["sysid_fun"] < 1e-12 and r["diffsim_fun"] < 1e-8 and r["directional_fun"] < 1e-8
