"""Residual weights of system identification: `normalize="recording"` is `mujoco.sysid`'s scaling.

No kernels run here: the weights are set on the host before any rollout (`sysid.worlds`).
"""

import argparse

import mujoco
import numpy as np
import pytest
from mujoco.sysid import normalize_residual

from diffsim.cli import _normalize_mode
from diffsim.data import Recording
from diffsim.sysid.worlds import Worlds, column_weights, segments

XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body>
      <joint name="slide" type="slide" axis="1 0 0" damping="1"/>
      <geom type="sphere" size="0.1" mass="1"/>
      <body pos="0 0 -0.5">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05" mass="0.5"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slide"/></actuator>
  <sensor>
    <jointpos name="x" joint="slide"/>
    <jointvel name="v" joint="slide"/>
    <jointpos name="a" joint="hinge"/>
  </sensor>
</mujoco>
"""


def _recordings(mjm):
  """Two recordings of different length and amplitude (the second driven 5 times as hard)."""
  rng = np.random.default_rng(0)
  recs = []
  for k, (rows, gain) in enumerate(((40, 1.0), (25, 5.0))):
    recs.append(Recording(time=np.arange(rows) * mjm.opt.timestep, ctrl=rng.normal(size=(rows, mjm.nu)),
                          sensordata=gain * rng.normal(size=(rows, mjm.nsensordata)), qpos0=mjm.qpos0.copy(),
                          qvel0=np.zeros(mjm.nv), source=f"rec{k}"))
  return recs


def _weights(mjm, recs, shooting=None, **kw):
  colw = column_weights(mjm, recs, kw.pop("weights", None), kw.pop("normalize"))
  return Worlds(mjm, recs, segments(recs, shooting), colw, fit_qvel0=None, fit_qpos0=False)


def test_per_recording_weights_are_mujoco_sysid_normalize_residual():
  mjm = mujoco.MjModel.from_xml_string(XML)
  recs = _recordings(mjm)
  worlds = _weights(mjm, recs, normalize="recording", weights={"sensor:v": 3.0})
  nv = mjm.nv
  for g, rec in enumerate(recs):
    n = rec.nrow
    # mujoco.sysid drops each trajectory's first sensor row and divides by the rest's column norms
    expect = normalize_residual(np.ones((n - 1, mjm.nsensordata)), rec.sensordata[1:])
    expect[:, 1] *= 3.0  # `weights` multiply on top
    np.testing.assert_allclose(worlds.weight[g, 1:n, 2 * nv:], expect, rtol=1e-12)
    assert not worlds.weight[g, n:].any()  # padding of the shorter recording
  # the harder-driven recording no longer outweighs the other: each one's weighted data has norm sqrt(2)
  for g, rec in enumerate(recs):
    scaled = worlds.weight[g, 1:rec.nrow, 2 * nv:] * rec.sensordata[1:]
    np.testing.assert_allclose(np.linalg.norm(scaled, axis=0) / [1.0, 3.0, 1.0], np.sqrt(2.0), rtol=1e-12)


def test_per_recording_weights_span_every_shooting_segment():
  mjm = mujoco.MjModel.from_xml_string(XML)
  recs = _recordings(mjm)
  for r in recs:  # multiple shooting restarts from measured states
    r.qpos = np.zeros((r.nrow, mjm.nq))
  worlds = _weights(mjm, recs, shooting=10, normalize="recording")
  nv = mjm.nv
  segs = segments(recs, 10)
  assert len(segs) > len(recs)
  for g, sg in enumerate(segs):
    # the recording's norms, not the segment's: a segment's rows after its first carry them
    expect = normalize_residual(np.ones((1, mjm.nsensordata)), recs[sg.rec].sensordata[1:])[0]
    np.testing.assert_allclose(worlds.weight[g, 1, 2 * nv:], expect, rtol=1e-12)


def test_pooled_normalization_is_shared_by_the_recordings():
  mjm = mujoco.MjModel.from_xml_string(XML)
  recs = _recordings(mjm)
  worlds = _weights(mjm, recs, normalize=True)
  nv = mjm.nv
  w0, w1 = worlds.weight[0, 1, 2 * nv:], worlds.weight[1, 1, 2 * nv:]
  np.testing.assert_array_equal(w0, w1)  # one scale per sensor over all recordings
  allv = np.concatenate([r.sensordata for r in recs])
  np.testing.assert_allclose(w0, 1.0 / allv.std(axis=0), rtol=1e-12)


@pytest.mark.parametrize("bad", ["per-recording", "units", None, 2])
def test_unknown_normalize_is_refused_with_the_choices(bad):
  mjm = mujoco.MjModel.from_xml_string(XML)
  with pytest.raises(ValueError, match=r"normalize must be True .*False .*'recording'"):
    column_weights(mjm, _recordings(mjm), None, bad)


def test_cli_normalize_flags():
  ns = lambda none, rec: argparse.Namespace(no_normalize=none, normalize_per_recording=rec)
  assert _normalize_mode(ns(False, False)) is True
  assert _normalize_mode(ns(True, False)) is False
  assert _normalize_mode(ns(False, True)) == "recording"
  with pytest.raises(ValueError, match="contradict"):
    _normalize_mode(ns(True, True))
