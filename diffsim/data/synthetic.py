"""Synthetic recordings: `simulate` records a trajectory with MuJoCo C (float64), e.g. to test
identification on data whose true parameters are known.
"""

from __future__ import annotations

import mujoco
import numpy as np

from .recording import Recording

__all__ = ["simulate"]

def simulate(model, ctrl, *, qpos0=None, qvel0=None, substeps: int = 1, noise: dict | None = None,
             seed: int = 0, record=("qpos", "qvel", "sensordata")) -> Recording:
  """Records a trajectory with MuJoCo C (float64, `mujoco.mj_step`), e.g. to test identification.

  Args:
    model: MJCF path or string, `mujoco.MjModel` (not modified) or `mujoco.MjSpec`.
    ctrl: `(T, nu)` controls, one row per sample.
    qpos0: `(nq,)` initial positions (default: the model's `qpos0`).
    qvel0: `(nv,)` initial velocities (default 0).
    substeps: simulation steps per sample (sample period = `substeps * timestep`).
    noise: Gaussian measurement noise std per signal, e.g. `{"qpos": 1e-3}` (rad, m, ...).
    seed: noise seed.
    record: which signals to keep among `"qpos"`, `"qvel"`, `"sensordata"`, `"act"`.

  Returns:
    A `Recording` with `T` rows.
  """
  from ..scene import load_mjmodel

  mjm = load_mjmodel(model)
  ctrl = np.asarray(ctrl, dtype=np.float64)
  if ctrl.ndim != 2 or ctrl.shape[1] != mjm.nu:
    raise ValueError(f"ctrl must have shape (T, nu={mjm.nu}), got {ctrl.shape}")
  d = mujoco.MjData(mjm)
  if qpos0 is not None:
    d.qpos[:] = qpos0
  if qvel0 is not None:
    d.qvel[:] = qvel0
  T = ctrl.shape[0]
  out = {k: np.zeros((T, n)) for k, n in (("qpos", mjm.nq), ("qvel", mjm.nv), ("act", mjm.na),
                                            ("sensordata", mjm.nsensordata))}
  time = np.zeros(T)
  for k in range(T):
    time[k] = d.time
    out["qpos"][k], out["qvel"][k], out["act"][k] = d.qpos, d.qvel, d.act
    d.ctrl[:] = ctrl[k]
    for i in range(substeps):
      mujoco.mj_step(mjm, d)
      if i == 0:
        out["sensordata"][k] = d.sensordata
  time = np.arange(T) * substeps * mjm.opt.timestep  # exact grid, free of accumulated round-off
  q0, v0 = out["qpos"][0].copy(), out["qvel"][0].copy()
  rng = np.random.default_rng(seed)
  for k, std in (noise or {}).items():
    if k not in out:
      raise ValueError(f"noise key {k!r} must be one of {sorted(out)}")
    out[k] = out[k] + rng.normal(0.0, std, out[k].shape)
  bad = sorted(set(record) - set(out))
  if bad:
    raise ValueError(f"record {bad}: choose among {sorted(out)}")
  empty = {"sensordata": mjm.nsensordata == 0, "act": mjm.na == 0}
  keep = {k: out[k] for k in record if not empty.get(k, False)}
  # the initial state travels with the recording when the signals that carry it are not recorded
  if "qpos" not in keep:
    keep["qpos0"] = q0
  if "qvel" not in keep:
    keep["qvel0"] = v0
  return Recording(time=time, ctrl=ctrl.copy(), **keep, source="simulated")
