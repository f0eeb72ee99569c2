"""`benchmarks.bench_mjx` runs at tiny size and reports what it promises (never a timed test)."""

import json

import pytest

pytest.importorskip("jax")
pytest.importorskip("mujoco.mjx")

from benchmarks import bench_mjx  # noqa: E402


def test_bench_mjx_tiny(tmp_path, capsys):
  rows = bench_mjx.main(["--device", "cpu", "--sizes", "2", "--nstep", "5", "--repeats", "1", "--out", str(tmp_path)])
  assert [r["cores"] for r in rows][1:] == [1] and len(rows) == 2  # unpinned, then pinned to one CPU
  assert rows[1]["xla_cache"] == "cold" and rows[1]["warp_cache"] == "warm"
  r = rows[0]
  assert set(r["spread"]) == {"ds_grad", "mx_grad", "ds_fwd", "mx_fwd", "ds_grad_fd"}
  assert (r["nworld"], r["nstep"], r["device"], r["model"]) == (2, 5, "cpu", "cartpole")
  for key in ("mjx_fwd_s", "mjx_fwd_wsps", "mjx_grad_s", "diffsim_fwd_s", "diffsim_fwd_wsps", "diffsim_grad_s",
              "grad_ratio", "fwd_ratio", "mjx_first_call_s", "diffsim_first_call_s"):
    assert r[key] > 0, key
  assert r["nlane"] == 11  # 1 + 2 nz, nz = 2 nv + na + nu = 5
  # both simulators agree on the state and on the gradient
  assert r["final_qpos_max_abs_diff"] < 1e-3
  assert r["grad_rel_err"] < 1e-2
  # forward differences: 1 + nz lanes, the same gradient to float32 finite-difference precision
  assert r["nlane_fd"] == 6 and r["diffsim_grad_fd_s"] > 0 and r["grad_fd_rel_err"] < 1e-2
  out = capsys.readouterr().out
  assert "| worlds |" in out and "diffsim / MJX" in out
  payload = json.loads((tmp_path / "mjx_cpu.json").read_text())
  assert payload["rows"][0]["nworld"] == 2 and payload["versions"]["mujoco-mjx"]
  assert not list(tmp_path.glob("*.tmp"))
