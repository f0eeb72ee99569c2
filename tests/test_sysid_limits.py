"""System identification on recordings that drive joints onto their limits (issue 16).

A 3-link arm with hinges limited to +-1 rad; six 0.5 s recordings made with float64 MuJoCo C, each
with its own random sinusoidal torques, two of them strong enough to drive a joint onto a limit.
Where a limit engages, the step map jumps (the limit's damping acts at once), and the step
Jacobians of `jacobian="forward"`, formed on one side of the jump, leave out how the trajectory
moves with the onset: LM with them alone stops short of the truth (here at cost 0.65 against
1e-9, 3e-3 off in an armature) and used to call that converged. The default (`"auto"`) reaches
the truth; a Jacobian that stalls is reported as not converged, with the point the convergence
test found and advice; the error bars cover the truth either way.
"""

import mujoco
import numpy as np
import pytest

from diffsim import cli
from diffsim import data as D
from diffsim import sysid as S

ARM3 = """
<mujoco model="arm3">
  <compiler angle="radian" autolimits="true"/>
  <option integrator="implicitfast" timestep="0.002"/>
  <worldbody>
    <body name="link1" pos="0 0 0.1">
      <inertial pos="0 0 0.05" mass="1.0" diaginertia="0.01 0.01 0.005"/>
      <joint name="j1" type="hinge" axis="0 0 1" range="-1 1" armature="ARM1" damping="0.6"/>
      <body name="link2" pos="0 0 0.1">
        <inertial pos="0 0 0.05" mass="0.6" diaginertia="0.006 0.006 0.003"/>
        <joint name="j2" type="hinge" axis="0 1 0" range="-1 1" armature="ARM2" damping="0.4"/>
        <body name="link3" pos="0 0 0.1">
          <inertial pos="0 0 0.04" mass="0.3" diaginertia="0.003 0.003 0.0015"/>
          <joint name="j3" type="hinge" axis="0 1 0" range="-1 1" armature="ARM3" damping="0.2"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="j1"/>
    <motor joint="j2"/>
    <motor joint="j3"/>
  </actuator>
</mujoco>
"""
TRUE = {"dof_armature:j1": 0.3, "dof_armature:j2": 0.2, "dof_armature:j3": 0.1}
PARAMS = list(TRUE)
TRUTH = ARM3.replace("ARM1", "0.3").replace("ARM2", "0.2").replace("ARM3", "0.1")
GUESS = ARM3.replace("ARM1", "0.01").replace("ARM2", "0.01").replace("ARM3", "0.01")


def _recordings(nrec=6, steps=250, seed=0):
  """Every third recording is driven onto a limit (its torques redrawn until one is reached), the
  others stay clear of the limits (redrawn until they do)."""
  mjm = mujoco.MjModel.from_xml_string(TRUTH)
  rng = np.random.default_rng(seed)
  t = np.arange(steps + 1) * mjm.opt.timestep
  recs = []
  for i in range(nrec):
    onto = i % 3 == 2
    while True:
      gain = rng.uniform(3.0, 6.0) if onto else 1.0
      ctrl = np.zeros((steps + 1, mjm.nu))
      for _ in range(2):
        amp = np.array([3.0, 2.0, 1.0]) * rng.uniform(0.3, 0.6, mjm.nu) * gain
        ctrl += amp * np.sin(2 * np.pi * rng.uniform(0.5, 3.0, mjm.nu) * t[:, None] + rng.uniform(0, 2 * np.pi, mjm.nu))
      rec = D.simulate(mjm, ctrl)
      if bool((np.abs(rec.qpos) > 1.0 - 1e-3).any()) == onto:
        break
    recs.append(rec)
  return recs


@pytest.fixture(scope="module")
def recs():
  return _recordings()


def _assert_honest(res):
  # the truth within 3 std of every estimate (noise-free data: what is left is float32 and the Jacobian)
  for k, v in TRUE.items():
    assert abs(res.x[k] - v) <= 3.0 * res.std[k], (k, res.x[k], res.std[k])


def test_recordings_reach_the_limits(recs):
  at = [int((np.abs(r.qpos) > 1.0 - 1e-3).sum()) for r in recs]
  assert [a > 0 for a in at] == [False, False, True, False, False, True] and min(a for a in at if a) > 20, at


def test_default_recovers_the_truth(recs):
  res = S.identify(GUESS, recs, PARAMS, device="cpu")
  assert res.success, res.message
  assert res.constraint_changes > 0  # the nominal trajectories cross limit onsets
  # "auto": the analytic step's Jacobians propagated forward, one MJWarp world per recording
  assert res.jacobian == "forward" and res.sim_worlds == len(recs)
  err = {k: abs(res.x[k] / v - 1.0) for k, v in TRUE.items()}
  assert all(e < 1e-4 for e in err.values()), (err, res.message)
  _assert_honest(res)
  # error bars that still mean something: float32 and the Jacobians leave ~1e-6 of each value
  assert all(res.std[k] < 1e-5 * v for k, v in TRUE.items()), res.std
  assert res.fun < 1e-10 * res.fun0


@pytest.mark.parametrize("central", [False, True])
def test_forward_jacobian_alone_stalls_and_says_so(recs, central):
  # the step Jacobians alone stall short of the truth (central differences too); the convergence test
  # finds a lower cost along the other Jacobian's step, returns that point, not converged
  res = S.identify(GUESS, recs, PARAMS, device="cpu", jacobian="forward", central=central)
  assert not res.success
  assert res.message.startswith("not converged: the forward Jacobian stopped at cost ")
  assert "jacobian='auto'" in res.message
  assert max(abs(res.x[k] / v - 1.0) for k, v in TRUE.items()) > 1e-3  # short of the truth
  assert res.fun < res.history["fun"][-2]  # the lower point
  _assert_honest(res)


def test_central_differences_by_default_recover_the_truth(recs):
  # with central=True the step Jacobians stall as above; the default's second opinion differences
  # forward, whose one-sided lanes catch the jumps
  res = S.identify(GUESS, recs, PARAMS, device="cpu", central=True)
  assert res.success, res.message
  assert all(abs(res.x[k] / v - 1.0) < 1e-4 for k, v in TRUE.items()), res.x
  _assert_honest(res)


def test_cli_exits_1_when_not_converged(recs, tmp_path, capsys):
  model = tmp_path / "arm3.xml"
  model.write_text(GUESS)
  D.save_npz(tmp_path / "recs.npz", recs)
  args = ["sysid", str(model), str(tmp_path / "recs.npz"), *[a for p in PARAMS for a in ("--param", p)],
          "--device", "cpu", "--no-plots", "--quiet", "--out", str(tmp_path / "out")]
  assert cli.main(args + ["--jacobian", "forward"]) == 1
  out, err = capsys.readouterr()
  assert out.startswith("sysid NOT converged: ")
  assert "diffsim sysid: not converged: the forward Jacobian stopped" in err and "jacobian='auto'" in err
