"""Recordings into worlds: segments, controls, measurements, residual weights and the unknown initial states.

Each recording, or with multiple shooting (`shooting=k`) each segment of `k` samples of one, runs
in its own MJWarp world, restarting from the measured state. `Worlds` holds the host arrays of
one start's `nseg` worlds (the problem tiles them over the starts); `Unknowns` says which initial
states are solved for with the parameters, and how the unknown vector `x` of a start is laid out:

  x = [theta (nparam)] [block of free world 0] [block of free world 1] ...,
  block = [qpos offset (nv, tangent space) if any position is free][qvel (nv) if any velocity is].
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import mujoco
import numpy as np

from .. import data as _data
from ..joints import DOF_WIDTH, FREE, HINGE, SLIDE, qpos_integrate_np


def as_recordings(data, mjm: mujoco.MjModel, resample_to_grid: bool,
                  max_steps_per_sample: int | None = None) -> list[_data.Recording]:
  """`identify`'s `data` (paths, `Recording`s, dicts, or a list of them) as validated recordings."""
  items = data if isinstance(data, (list, tuple)) else [data]
  if not items:
    raise ValueError("no recorded data given")
  recs = []
  kw = dict(resample_to_grid=resample_to_grid, max_steps_per_sample=max_steps_per_sample)
  for it in items:
    if isinstance(it, _data.Recording):
      recs.append(_data.validate(it, mjm, **kw))
    elif isinstance(it, dict):
      recs.append(_data.validate(_data.Recording(**it), mjm, **kw))
    elif isinstance(it, (str, os.PathLike)):
      recs.extend(_data.load(it, mjm, **kw))
    else:
      raise TypeError(f"data must be paths, diffsim.data.Recording objects or dicts of arrays, got {type(it).__name__}")
  return recs


def column_weights(mjm: mujoco.MjModel, recs, weights: dict | None, normalize: bool | str) -> dict[str, np.ndarray]:
  """Weight of every residual column, `{"qpos": (nv,), "qvel": (nv,), "sensordata": (ns,)}`.

  With `normalize=True`, columns in the same unit share one scale, the RMS spread of their measured
  signals over all the recordings: angles and lengths of `qpos` (rad, m) and of `qvel` (rad/s, m/s)
  separately, and each sensor on its own. Sharing matters: a joint that barely moves keeps the weight
  of the others (per-column scaling would blow its measurement noise up to the size of the real motion).
  With `normalize="recording"` the columns keep `weights` alone here, and each recording's are
  divided by its own measured columns' norms (`recording_weights`, in `Worlds`; the dict then holds
  `"recording": True`), as `mujoco.sysid`'s `normalize_residual` does.
  """
  if not (isinstance(normalize, (bool, np.bool_)) or isinstance(normalize, str) and normalize == "recording"):
    raise ValueError(f"normalize must be True (each unit's spread over all recordings), False (weights alone) or "
                     f"'recording' (each recording's own columns, as mujoco.sysid normalizes), got {normalize!r}")
  nv, ns = mjm.nv, mjm.nsensordata
  out = {"qpos": np.ones(nv), "qvel": np.ones(nv), "sensordata": np.ones(ns)}
  per_recording = isinstance(normalize, str)
  if normalize and not per_recording:
    _normalize(mjm, recs, out)
  for key, wgt in (weights or {}).items():
    wgt = float(wgt)
    if not np.isfinite(wgt) or wgt < 0:
      raise ValueError(f"weight {key!r} must be a finite number >= 0, got {wgt}")
    if key in ("qpos", "qvel", "sensordata", "sensor"):
      out["sensordata" if key == "sensor" else key] *= wgt
      continue
    kind, _, name = key.partition(":")
    if kind in ("qpos", "qvel") and name:
      j = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_JOINT, name)
      if j >= 0:
        adr = mjm.jnt_dofadr[j]
        out[kind][adr:adr + DOF_WIDTH[int(mjm.jnt_type[j])]] *= wgt
        continue
    if kind in ("sensor", "sensordata") and name:
      s = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_SENSOR, name)
      if s >= 0:
        out["sensordata"][mjm.sensor_adr[s]:mjm.sensor_adr[s] + mjm.sensor_dim[s]] *= wgt
        continue
    raise ValueError(f"unknown weight key {key!r}: use 'qpos', 'qvel', 'sensordata', 'qpos:<joint>', "
                     "'qvel:<joint>' or 'sensor:<sensor>'")
  if per_recording:
    out["recording"] = True
  return out


def recording_weights(mjm: mujoco.MjModel, rec) -> dict[str, np.ndarray]:
  """`normalize="recording"`: the factors of recording `rec`'s residual columns, `sqrt(2) / |column|`
  over its rows after the first (the initial state), each column on its own: `mujoco.sysid`'s
  `normalize_residual`, under which every recording weighs alike whatever its amplitude and length
  (under `normalize=True` one driven four times as hard weighs sixteen times as much). `qpos`
  columns of hinges, slides and free translations by their coordinate, rotations as 1 rad per row;
  a column without motion (or unmeasured) keeps factor 1."""
  def factor(vals: np.ndarray) -> np.ndarray:
    vals = np.where(np.isfinite(vals), vals, 0.0)[1:]
    norm = np.linalg.norm(vals, axis=0)
    return np.where(norm > 1e-12, np.sqrt(2.0) / np.maximum(norm, 1e-300), 1.0)

  nv = mjm.nv
  out = {"qpos": np.ones(nv), "qvel": np.ones(nv), "sensordata": np.ones(mjm.nsensordata)}
  if rec.qvel is not None:
    out["qvel"] = factor(rec.qvel)
  if rec.sensordata is not None:
    out["sensordata"] = factor(rec.sensordata)
  if rec.qpos is not None:
    rows = max(rec.qpos.shape[0] - 1, 1)
    out["qpos"][:] = np.sqrt(2.0 / rows)  # rotations: 1 rad per row
    for j in range(mjm.njnt):
      typ, qadr, dadr = int(mjm.jnt_type[j]), int(mjm.jnt_qposadr[j]), int(mjm.jnt_dofadr[j])
      if typ in (SLIDE, HINGE):
        out["qpos"][dadr] = factor(rec.qpos[:, qadr:qadr + 1])[0]
      elif typ == FREE:
        out["qpos"][dadr:dadr + 3] = factor(rec.qpos[:, qadr:qadr + 3])
  return out


def _normalize(mjm: mujoco.MjModel, recs, out: dict[str, np.ndarray]) -> None:
  """Sets `out`'s weights to 1 / the RMS spread of the measured signals of each unit (see `column_weights`)."""
  nv = mjm.nv
  translational = np.zeros(nv, bool)  # dofs in m (else rad)
  for j in range(mjm.njnt):
    typ, adr = int(mjm.jnt_type[j]), int(mjm.jnt_dofadr[j])
    if typ == SLIDE:
      translational[adr] = True
    elif typ == FREE:
      translational[adr:adr + 3] = True
  by_unit = [np.nonzero(~translational)[0], np.nonzero(translational)[0]]
  groups = {"qpos": by_unit, "qvel": by_unit,
            "sensordata": [np.arange(mjm.sensor_adr[i], mjm.sensor_adr[i] + mjm.sensor_dim[i])
                           for i in range(mjm.nsensor)]}
  for kind in ("qpos", "qvel", "sensordata"):
    vals = [getattr(r, kind) for r in recs if getattr(r, kind) is not None]
    if not vals:
      continue
    allv = np.concatenate(vals)
    if kind == "qpos":  # spread per dof: hinge/slide coordinates; rotations count 1 rad
      var = np.ones(nv)
      for j in range(mjm.njnt):
        typ, qadr, dadr = int(mjm.jnt_type[j]), int(mjm.jnt_qposadr[j]), int(mjm.jnt_dofadr[j])
        if typ in (SLIDE, HINGE):
          var[dadr] = allv[:, qadr].var()
        elif typ == FREE:
          var[dadr:dadr + 3] = allv[:, qadr:qadr + 3].var(axis=0)
    else:
      # unmeasured sensor columns (a CSV with some sensors) are NaN
      finite = np.isfinite(allv)
      cnt = np.maximum(finite.sum(axis=0), 1)
      mean = np.where(finite, allv, 0.0).sum(axis=0) / cnt
      var = np.where(finite, (allv - mean) ** 2, 0.0).sum(axis=0) / cnt
      var[~finite.any(axis=0)] = np.nan
    for cols in groups[kind]:
      v = var[cols][np.isfinite(var[cols])]
      if v.size:
        rms = float(np.sqrt(np.mean(v)))
        out[kind][cols] = 1.0 / rms if rms > 1e-12 else 1.0


@dataclass
class Segment:
  """Rows `row0..row1` (inclusive) of recording `rec`, simulated in one world."""

  rec: int
  row0: int  # the initial state
  row1: int


def segments(recs, shooting: int | None) -> list[Segment]:
  """The worlds of one start: a segment per recording, or with `shooting=k` one per `k` samples."""
  if shooting is not None:
    if not isinstance(shooting, (int, np.integer)) or shooting < 1:
      raise ValueError(f"shooting must be a positive number of samples per segment, got {shooting!r}")
    missing = [r.source for r in recs if r.qpos is None]
    if missing:
      raise ValueError(f"multiple shooting restarts from measured states, but {missing} have no qpos")
  segs = []
  for i, r in enumerate(recs):
    k = r.nrow - 1 if shooting is None else int(shooting)
    segs += [Segment(i, r0, min(r0 + k, r.nrow - 1)) for r0 in range(0, r.nrow - 1, k)]
  return segs


class Worlds:
  """Host arrays of one start's worlds (`nseg`, a segment each): controls, initial states,
  measurements and residual weights, padded to `nstep` steps and `nsample` sample slots.

  Attributes:
    recs, segs, steps: the recordings, the segments, each recording's simulation step of every row.
    nseg, nstep, nsample, nsignal: worlds, steps, sample slots, residual signals per sample (2 nv + ns).
    ctrl: `(nseg, nstep, nu)`; qpos0 `(nseg, nq)`, qvel0 `(nseg, nv)` (measured, or a finite-difference
      estimate), act0 `(nseg, na)`.
    sample_step: `(nseg, nsample)` simulation step of each sample slot, -1: padding.
    measured: `{"qpos": (nseg, nsample, nq), "qvel": ..., "sensordata": ...}`.
    weight: `(nseg, nsample, nsignal)`, 0 where not measured.
    nresidual: weighted residuals (nonzero weights).
    nseries: residual series, (world, signal) pairs with a weighted sample.
    fit_qvel, fit_qpos: `(nseg,)` whose initial velocity, position is solved for.
  """

  def __init__(self, mjm: mujoco.MjModel, recs, segs: list[Segment], colw: dict[str, np.ndarray], *,
               fit_qvel0: bool | None, fit_qpos0: bool):
    self.recs, self.segs = recs, segs
    dt = float(mjm.opt.timestep)
    self.steps = [_data.sim_steps(r.time, dt, source=r.source) for r in recs]
    self.nseg = len(segs)
    with_sensors = any(r.sensordata is not None for r in recs)
    # one extra step so the last row's sensors are computed with its own control, as mj_step does
    self.nstep = max(int(self.steps[s.rec][s.row1] - self.steps[s.rec][s.row0]) for s in segs) + int(with_sensors)
    self.nsample = max(s.row1 - s.row0 + 1 for s in segs)
    self.nsignal = 2 * mjm.nv + mjm.nsensordata
    nseg, nsample, nq, nv, ns = self.nseg, self.nsample, mjm.nq, mjm.nv, mjm.nsensordata
    self.ctrl = np.zeros((nseg, self.nstep, mjm.nu))
    self.qpos0 = np.tile(mjm.qpos0, (nseg, 1))
    self.qvel0 = np.zeros((nseg, nv))
    self.act0 = np.zeros((nseg, mjm.na))
    self.sample_step = np.full((nseg, nsample), -1, np.int32)
    self.measured = {"qpos": np.zeros((nseg, nsample, nq)), "qvel": np.zeros((nseg, nsample, nv)),
                     "sensordata": np.zeros((nseg, nsample, ns))}
    self.weight = np.zeros((nseg, nsample, self.nsignal))
    self.fit_qvel = np.zeros(nseg, bool)
    self.fit_qpos = np.zeros(nseg, bool)
    # `normalize="recording"`: each recording's own column factors, once per recording (not per segment)
    rec_colw = [{k: colw[k] * v for k, v in recording_weights(mjm, r).items()} if colw.get("recording") else colw
                for r in recs]
    for g, sg in enumerate(segs):
      self._fill(g, sg, mjm, rec_colw[sg.rec], fit_qvel0, fit_qpos0)
    for msg in filter(None, (_data.initial_state_warning(r) for r in recs)):
      warnings.warn(msg, stacklevel=4)
    self.nresidual = int(np.count_nonzero(self.weight))
    # residual series (a world's signal along time): each counts as one sample at least in `data_std`
    self.nseries = int(np.count_nonzero(self.weight.any(axis=1)))

  def _fill(self, g: int, sg: Segment, mjm, colw, fit_qvel0, fit_qpos0) -> None:
    """World `g`'s controls, initial state, measurements and weights from segment `sg`."""
    r, steps = self.recs[sg.rec], self.steps[sg.rec]
    nv = mjm.nv
    rows = np.arange(sg.row0, sg.row1 + 1)
    rel = steps[rows] - steps[sg.row0]
    self.sample_step[g, :len(rows)] = rel
    if mjm.nu:  # zero-order hold between samples, the last control after the last one
      for a, b in zip(range(sg.row0, sg.row1), range(sg.row0 + 1, sg.row1 + 1)):
        self.ctrl[g, steps[a] - steps[sg.row0]:steps[b] - steps[sg.row0]] = r.ctrl[a]
      self.ctrl[g, rel[-1]:] = r.ctrl[sg.row1]
    if r.qpos is not None:
      self.qpos0[g] = r.qpos[sg.row0]
    elif r.qpos0 is not None:
      self.qpos0[g] = r.qpos0
    measured = r.qvel is not None or (sg.row0 == 0 and r.qvel0 is not None)
    if r.qvel is not None:
      self.qvel0[g] = r.qvel[sg.row0]
    elif sg.row0 == 0 and r.qvel0 is not None:
      self.qvel0[g] = r.qvel0
    elif r.qpos is not None:
      self.qvel0[g] = _data.estimate_qvel(r, mjm, sg.row0)  # the first guess
    self.fit_qvel[g] = (not measured) if fit_qvel0 is None else bool(fit_qvel0)
    self.fit_qpos[g] = bool(fit_qpos0) and r.qpos is not None
    if r.act is not None:
      self.act0[g] = r.act[sg.row0]
    n = len(rows)
    # row 0 is the initial state itself, unless that is solved for: then it is a measurement too
    if r.qpos is not None:
      self.measured["qpos"][g, :n] = r.qpos[rows]
      self.weight[g, 0 if self.fit_qpos[g] else 1:n, :nv] = colw["qpos"]
    if r.qvel is not None:
      self.measured["qvel"][g, :n] = r.qvel[rows]
      self.weight[g, 0 if self.fit_qvel[g] else 1:n, nv:2 * nv] = colw["qvel"]
    if r.sensordata is not None:
      mask = np.ones(mjm.nsensordata, bool) if r.sensor_mask is None else r.sensor_mask
      self.measured["sensordata"][g, :n] = np.where(mask, r.sensordata[rows], 0.0)
      first = 0 if sg.row0 == 0 else 1  # a segment's first row is the previous segment's last
      self.weight[g, first:n, 2 * nv:] = colw["sensordata"] * mask


class Unknowns:
  """The unknowns `x` `(nunknown,)` of one start: the parameters, then a nuisance block per world
  whose initial state is solved for (see the module docstring).

  Attributes:
    nparam: identified parameter coordinates.
    free: `(nseg,)` worlds with a nuisance block; `nfree` of them; `free_index`: each one's block.
    nblock: nuisance unknowns per free world; `nblock_qpos` of them the position offset (0 or nv).
    nunknown: `nparam + nfree * nblock`.
  """

  def __init__(self, mjm: mujoco.MjModel, worlds: Worlds, nparam: int):
    self.mjm, self.worlds = mjm, worlds
    nv = mjm.nv
    self.nparam = nparam
    self.nblock_qpos = nv if worlds.fit_qpos.any() else 0
    self.nblock = self.nblock_qpos + (nv if worlds.fit_qvel.any() else 0)
    self.free = worlds.fit_qvel | worlds.fit_qpos
    self.free_index = np.cumsum(self.free) - 1
    self.nfree = int(self.free.sum())
    self.nunknown = nparam + self.nfree * self.nblock

  def initial(self, theta0: np.ndarray) -> np.ndarray:
    """Unknowns `(nstart, nunknown)`: `theta0` `(nstart, nparam)`, then per free world its nuisance
    block: a tangent offset of the initial position (zero) and the initial velocity (the measured
    or estimated one)."""
    blocks = np.zeros((self.nfree, self.nblock))
    if self.nblock > self.nblock_qpos:
      blocks[:, self.nblock_qpos:] = self.worlds.qvel0[self.free]
    return np.concatenate([theta0, np.tile(blocks.reshape(-1), (theta0.shape[0], 1))], axis=1)

  def initial_state(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Initial `(qpos (nseg, nq), qvel (nseg, nv))` of one start's worlds given its unknowns `(nunknown,)`."""
    nv = self.mjm.nv
    qpos, qvel = self.worlds.qpos0.copy(), self.worlds.qvel0.copy()
    blocks = np.asarray(x[self.nparam:], dtype=np.float64).reshape(self.nfree, self.nblock)
    for g in np.nonzero(self.free)[0]:
      b = blocks[self.free_index[g]]
      if self.worlds.fit_qpos[g]:
        qpos[g] = qpos_integrate_np(self.mjm, qpos[g], b[:nv])
      if self.worlds.fit_qvel[g]:
        qvel[g] = b[self.nblock_qpos:]
    return qpos, qvel
