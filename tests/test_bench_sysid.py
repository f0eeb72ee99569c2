"""`benchmarks/bench_sysid.py` at its tiny size: `mujoco.sysid` and diffsim identify the arm's 10
parameters on smooth data (diffsim's default and directional Jacobians), its 5 armatures alone on
smooth data (diffsim's default), and its 5 armatures on data that reach the joint limits (diffsim's
default, forward and directional Jacobians).

Speed is never asserted; what is: the JSON is written (and matches the returned rows), every time
and count is positive and finite, both tools recover the true armatures and dampings from the
noise-free smooth data (float64 vs float32 precision), and the case at the limits has what it
claims (one trajectory in four driven onto a limit, every Jacobian run and its convergence and
error-bar columns recorded).
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
  assert [(r["ntraj"], r["case"]) for r in rows] == [(1, "smooth"), (2, "smooth"), (2, "armature"), (4, "limits")]
  assert "| problem |" in capsys.readouterr().out
  # mujoco.sysid's own arm test (issue 36's small problem): both tools reach its answer (its test: 1e-4)
  (arm,) = json.loads((tmp_path / "sysid_tests_cpu.json").read_text())["rows"]
  assert arm["problem"] == "arm" and arm["nrow"] == 999 and arm["nparam"] == 5
  for tool in ("sysid", "sysid_1core", "diffsim", "directional"):
    assert arm[f"{tool}_err"] < 1e-5 and arm[f"{tool}_s"] > 0, tool
  assert arm["diffsim_success"] and arm["directional_success"]
  # beside them, as many bare MJWarp steps as diffsim's directional run linearizes
  assert arm["mjwarp_step_s"] > 0
  assert math.isclose(arm["mjwarp_steps_s"], (arm["directional_nit"] + 1) * 999 * arm["mjwarp_step_s"])
  for r in rows:
    tools = ["sysid", "sysid_1core", "diffsim"] + ([] if r["case"] == "armature" else ["directional"]) + \
      (["forward"] if r["limits"] else [])
    assert ("forward_s" in r) == r["limits"]
    for tool in tools:
      for key in ("s", "nit", "nfev", "err", "fun"):
        assert math.isfinite(r[f"{tool}_{key}"]) and r[f"{tool}_{key}"] >= 0, (tool, key)
      assert r[f"{tool}_s"] > 0 and r[f"{tool}_nit"] > 0 and r[f"{tool}_nfev"] > 0
      if not tool.startswith("sysid"):
        assert r[f"{tool}_worlds"] > 0 and r[f"{tool}_speedup"] > 0 and r[f"{tool}_z"] >= 0
        assert isinstance(r[f"{tool}_success"], bool)
    assert math.isfinite(r["diffsim_compile_s"]) and r["diffsim_compile_s"] >= 0
    if r["case"] == "armature":
      # issue 27's case: the default starts on the analytic step's Jacobians (one world per trajectory:
      # the arm has limits) and turns to the directional one (1 + 5 worlds, cheaper than 5 reverse
      # sweeps per step) as the trajectories stay clear of the limits
      assert r["nparam"] == 5 and r["steps"] == 40 and r["diffsim_worlds"] == 2 * (1 + 5)
      assert r["diffsim_jacobian"] == "directional"
      assert r["sysid_err"] < 1e-6 and r["diffsim_err"] < 1e-4, (r["sysid_err"], r["diffsim_err"])
      continue
    if r["limits"]:
      assert r["nparam"] == 5 and r["steps"] == 200 and r["guess"] == [0.01] * 5
      assert [a > 0 for a in r["at_limit"]] == [False, False, False, True], r["at_limit"]
      assert r["forward_worlds"] == r["diffsim_worlds"] == r["ntraj"]  # analytic: no lanes
      assert r["directional_worlds"] == r["ntraj"] * (1 + 5)  # forward mode's 1 + nparam lanes
      continue
    assert r["nparam"] == 10 and r["steps"] == 40
    # smooth: the default's analytic step Jacobians, against forward mode's 1 + nparam lanes
    assert r["diffsim_worlds"] == r["ntraj"] and r["directional_worlds"] == r["ntraj"] * (1 + 10)
    # the initial guess is 30% off; both must land on the truth (noise-free data)
    assert r["sysid_err"] < 1e-6, r["sysid_err"]
    assert r["diffsim_err"] < 1e-4 and r["directional_err"] < 1e-4, (r["diffsim_err"], r["directional_err"])
    assert r["sysid_fun"] < 1e-12 and r["diffsim_fun"] < 1e-8 and r["directional_fun"] < 1e-8
