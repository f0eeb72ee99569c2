"""System identification recovers known parameters from data made with MuJoCo C (float64)."""

import json
import os
import warnings

import mujoco
import numpy as np
import pytest

import diffsim
from diffsim import data as D
from diffsim import sysid as S
from diffsim.sysid.lm import directional_first
from diffsim.sysid.problem import Problem

import models  # tests/models.py (shared with the core tests, so their compiled kernels are reused)

# The initial guess: a pendulum whose inertia is given explicitly, so body_mass changes the mass
# (gravity torque m g d, inertia m d^2) and nothing else, as MJWarp's body_mass parameter does.
GUESS = models.PENDULUM
TRUE = {"body_mass:pole": 0.6, "dof_damping:hinge": 0.08}
TRUTH = GUESS.replace('mass="0.5"', 'mass="0.6"').replace('damping="0.05"', 'damping="0.08"')
PARAMS = list(TRUE)


def _ctrl(n, dt, scale=1.0, phase=0.0):
  t = np.arange(n) * dt
  return scale * (0.8 * np.sin(2 * np.pi * 0.7 * t + phase) + 0.5 * np.sin(2 * np.pi * 1.9 * t + 0.3))[:, None]


def _rel_err(res, truth=TRUE):
  return {k: abs(res.x[k] / v - 1.0) for k, v in truth.items()}


@pytest.fixture(scope="module")
def rec():
  return D.simulate(TRUTH, _ctrl(151, 0.01), qpos0=[0.3])


@pytest.fixture(scope="module")
def result(rec):
  return S.identify(GUESS, rec, PARAMS, device="cpu", maxiter=15)


def test_lm_recovers_mass_and_damping(result):
  err = _rel_err(result)
  assert all(e < 1e-3 for e in err.values()), err
  assert result.success, result.message
  assert result.fun < 1e-8 * result.fun0
  assert 1 <= result.nit <= 15 and result.nfev <= result.nit + 2
  assert result.history["fun"].shape == (result.nit + 1,)
  assert result.history["x"].shape == (result.nit + 1, 2)
  np.testing.assert_allclose(result.history["x"][0], [0.5, 0.05])
  assert result.x0 == {"body_mass:pole": 0.5, "dof_damping:hinge": 0.05}
  # noise-free data: the uncertainty left is tiny, and no identifiability warning
  assert all(0 < result.std[k] < 1e-4 * TRUE[k] for k in TRUE)
  assert not result.warnings
  # yet honest: what float32 leaves of the truth lies within it (the data's part alone, the misfit
  # of a float32 rollout drifting along time, is smaller)
  assert all(abs(result.x[k] - TRUE[k]) <= 3.0 * result.std[k] for k in TRUE), (result.x, result.std)
  assert all(0 < result.std_data[k] <= result.std[k] for k in TRUE)
  # "auto" on a covered model whose residual Jacobian has no more columns (2) than the analytic step
  # runs reverse passes per step (the velocity row and tip_pos's 3 rows): the directional Jacobian,
  # 1 + 2 MJWarp worlds, the cheaper one here (`lm.directional_first`), and (smooth: no constraint
  # row along the trajectories) no turn to "forward" and no second opinion
  assert result.jacobian == "directional" and result.constraint_changes == 0
  assert result.sim_worlds == 1 + len(TRUE)
  assert "directional Jacobian" in result.derivatives["dof_damping:hinge"]
  assert isinstance(result, diffsim.optim.OptimizeResult) and result.method == "lm" and result.time > 0


def test_auto_starts_where_the_jacobian_is_cheaper():
  """`lm.directional_first`: the directional Jacobian (1 + ncol worlds) where the model can make no
  constraint row and the residual Jacobian has no more columns than the analytic step runs reverse
  passes per step, the analytic step Jacobians (1 world, 1 + nsweep passes) where it has more or the
  model has limits, and always on the lanes."""
  mjm = mujoco.MjModel.from_xml_string(GUESS)
  rec = D.simulate(TRUTH, _ctrl(11, 0.01), qpos0=[0.3])
  kw = dict(weights=None, normalize=True, shooting=None, nstart=1, device="cpu", solver_settings=None,
            central=False, eps=None)
  few = Problem(mjm, [rec], [S.parse_param(p) for p in PARAMS], **kw)
  assert few.rollout.nsweep == 1 + 3 and few.ncol == 2 and directional_first(few)
  # the initial velocity and position too: 4 columns, still no more than the 4 passes
  more = Problem(mjm, [rec], [S.parse_param(p) for p in PARAMS], fit_qpos0=True, fit_qvel0=True, **kw)
  assert more.ncol == 4 and directional_first(more)
  many = Problem(mjm, [rec], [S.parse_param(p) for p in PARAMS + ["dof_armature:hinge", "opt.gravity"]], **kw)
  assert many.ncol > many.rollout.nsweep and not directional_first(many)
  lanes = Problem(mjm, [rec], [S.parse_param(p) for p in PARAMS], step_jacobian="finite_difference", **kw)
  assert lanes.rollout.nsweep == 0 and directional_first(lanes)
  # a limit the trajectories may reach: "forward" at once (no directional rollout to leave at the first row)
  limited = mujoco.MjModel.from_xml_string(models.LIMITED_PENDULUM)
  lrec = D.simulate(models.LIMITED_PENDULUM, _ctrl(11, 0.01), qpos0=[0.3])
  few_limited = Problem(limited, [lrec], [S.parse_param("dof_damping:hinge")], **kw)
  assert few_limited.ncol <= few_limited.rollout.nsweep and not directional_first(few_limited)


def test_lanes_on_request(rec, result):
  """`jacobian="finite_difference"`: LM's "auto" on the lanes (the directional Jacobian on smooth
  data, `1 + nparam` lanes per world); the same answer as the analytic step's."""
  res = S.identify(GUESS, rec, PARAMS, device="cpu", maxiter=15, jacobian="finite_difference")
  assert res.jacobian == "directional" and res.sim_worlds == 1 + len(TRUE)
  assert "finite-difference lanes" in res.derivatives["dof_damping:hinge"]
  assert all(abs(res.x[k] / result.x[k] - 1.0) < 1e-5 for k in TRUE), (res.x, result.x)


def test_callback_sees_each_iteration_and_can_stop_the_solver(rec):
  seen = []

  def stop_after_two(it):
    seen.append((it.nit, it.fun, it.x))
    return it.nit == 2

  res = S.identify(GUESS, rec, PARAMS, device="cpu", callback=stop_after_two, progress=False)
  assert [nit for nit, _, _ in seen] == [1, 2] and set(seen[-1][2]) == set(PARAMS)
  assert res.nit == 2 and not res.success and res.message.startswith("stopped by the callback")
  assert res.x == seen[-1][2] and res.fun == pytest.approx(seen[-1][1], rel=1e-6)

  def raise_stop(it):
    raise StopIteration

  res = S.identify(GUESS, rec, ["dof_damping:hinge"], device="cpu", method="adam", maxiter=5, callback=raise_stop,
                   progress=False)
  assert res.nit == 1 and not res.success and "stopped by the callback" in res.message


@pytest.mark.parametrize("kwargs, message", [
  ({"method": "bfgs"}, "method must be 'lm' or 'adam'"),
  ({"options": {"lr": 0.1}}, r"unknown options \['lr'\] for method 'lm'; valid: \[\]"),
  ({"method": "adam", "options": {"learning_rate": 0.1}}, r"unknown options \['learning_rate'\].*valid: \['lr'\]"),
  ({"method": "adam", "options": {"lr": -1.0}}, "options\\['lr'\\] must be a positive number"),
  ({"maxiter": -1}, "maxiter must be an integer >= 0"),
  ({"callback": 3}, "callback must be callable"),
])
def test_bad_solver_arguments_fail_before_any_work(rec, kwargs, message):
  with pytest.raises((ValueError, TypeError), match=message):
    S.identify(GUESS, rec, PARAMS, device="nonexistent", **kwargs)


def test_outputs(tmp_path, result):
  files = result.save(tmp_path)
  assert set(files) == {"params_json", "model", "signals", "cost", "params_plot"}
  params = json.loads((tmp_path / "params.json").read_text())
  assert set(params) == set(TRUE)
  for k in TRUE:
    assert set(params[k]) >= {"initial", "value", "std"}
    assert params[k]["value"] == pytest.approx(result.x[k])
    assert params[k]["std"] == pytest.approx(result.std[k])
  assert params["body_mass:pole"]["initial"] == 0.5
  m = mujoco.MjModel.from_xml_path(str(tmp_path / "model.xml"))
  assert m.body_mass[1] == pytest.approx(result.x["body_mass:pole"], rel=1e-6)
  assert m.dof_damping[0] == pytest.approx(result.x["dof_damping:hinge"], rel=1e-6)
  np.testing.assert_allclose(m.body_inertia[1], [0.004, 0.004, 0.0005])  # untouched
  for name in ("signals.png", "cost.png", "params.png"):
    data = (tmp_path / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
  assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_failed_save_keeps_existing_files(tmp_path, result, monkeypatch):
  (tmp_path / "params.json").write_text("user data")
  monkeypatch.setattr(json, "dumps", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("disk full")))
  with pytest.raises(RuntimeError, match="disk full"):
    result.save(tmp_path)
  assert (tmp_path / "params.json").read_text() == "user data"
  assert os.listdir(tmp_path) == ["params.json"]


def _reference_residual_jacobian(prob, x, recs, delta=1e-6):
  """d(residual)/d(unknowns) `(nworld, nsample, nsignal, ncol)` by central differences of float64 MuJoCo C
  rollouts (`data.simulate`) of the hinge pendulum, laid out as the problem's `buffers.residual_jac`."""
  from diffsim.gradcheck import set_mjmodel_params

  def residuals(xs):
    mjm = mujoco.MjModel.from_xml_string(GUESS)
    set_mjmodel_params(mjm, {p: xs[o:o + p.dim] for p, o in zip(prob.params, prob.layout.offsets)})
    qpos, qvel = prob.unknowns.initial_state(xs)
    out = np.zeros((prob.worlds.nseg, prob.worlds.nsample, prob.worlds.nsignal))
    for g, (r, q0, v0) in enumerate(zip(recs, qpos, qvel)):
      sub = int(round((r.time[1] - r.time[0]) / mjm.opt.timestep))
      sim = D.simulate(mjm, r.ctrl, qpos0=q0, qvel0=v0, substeps=sub)
      n = r.nrow
      meas = prob.worlds.measured
      sig = np.concatenate([sim.qpos - meas["qpos"][g, :n], sim.qvel - meas["qvel"][g, :n],
                            sim.sensordata - meas["sensordata"][g, :n]], axis=1)
      out[g, :n] = prob.worlds.weight[g, :n] * sig
    return out

  nseg = prob.worlds.nseg
  G = np.zeros((prob.nworld, prob.worlds.nsample, prob.worlds.nsignal, prob.ncol))
  for s in range(prob.nstart):
    for u in range(prob.nunknown):
      e = np.zeros(prob.nunknown)
      e[u] = delta
      d = (residuals(x[s] + e) - residuals(x[s] - e)) / (2 * delta)
      if u < prob.nparam:
        G[s * nseg:(s + 1) * nseg, ..., u] = d
      else:  # a nuisance unknown: its world's block column
        g, b = divmod(u - prob.nparam, prob.unknowns.nblock)
        w = np.nonzero(prob.unknowns.free)[0][g]
        G[s * nseg + w, ..., prob.nparam + b] = d[w]
  return G


def test_residual_jacobian_matches_mujoco():
  # the three ways to the residual Jacobian (step Jacobians propagated forward, forward mode, reverse
  # mode) against central differences of float64 MuJoCo C, for the parameters and for initial
  # states solved for
  mjm = mujoco.MjModel.from_xml_string(GUESS)
  recs = [D.simulate(TRUTH, _ctrl(31, 0.01), qpos0=[0.3]),
          D.simulate(TRUTH, _ctrl(16, 0.02, 0.5, 1.0), qpos0=[-0.2], qvel0=[1.0], substeps=2,
                     record=("qpos", "sensordata"))]
  params = [S.parse_param(p) for p in PARAMS]
  prob = Problem(mjm, recs, params, weights=None, normalize=True, shooting=None, nstart=2, device="cpu",
                 solver_settings=None, central=True, eps=None, fit_qpos0=True, fit_qvel0=True)
  assert prob.nunknown == 2 + 2 * 2  # qpos and qvel offsets of both worlds
  assert prob.forward_mode.fd.nlane == 1 + 2 * prob.ncol  # a lane pair per column, none per state coordinate
  x = prob.unknowns.initial(np.array([[0.5, 0.05], [0.58, 0.09]]))
  x[:, 2:] += [0.01, -0.1, 0.02, 0.3]
  ref = _reference_residual_jacobian(prob, x, recs)
  normal = {}
  jac = {}
  for how in ("forward", "directional"):
    normal[how] = prob.linearize(x, jacobian=how)
    jac[how] = prob.buffers.residual_jac.numpy().copy()
  _, jac["tape"] = prob.tape_jacobian()
  for how, G in jac.items():
    for c in range(prob.ncol):
      err = np.linalg.norm(G[..., c] - ref[..., c]) / np.linalg.norm(ref[..., c])
      assert err < 1e-2, f"jacobian={how!r}, column {c}: relative error {err:.2e}"
  # the normal equations agree whichever way the Jacobian is formed
  normal["tape"] = prob.linearize(x, jacobian="tape")
  f = normal["forward"]
  for how in ("directional", "tape"):
    np.testing.assert_allclose(normal[how].cost, f.cost, rtol=1e-6)
    np.testing.assert_allclose(normal[how].gt, f.gt, rtol=1e-2, atol=1e-3 * np.abs(f.gt).max())


def test_several_recordings_share_parameters():
  # one recording of some sensors only (tip position; initial state given), one of qpos only at half
  # rate (initial velocity unknown: solved for)
  sensors = D.simulate(TRUTH, _ctrl(101, 0.01), qpos0=[0.3], record=("sensordata",))
  sensors.sensor_mask = np.array([False, True, True, True])
  sensors.sensordata[:, 0] = np.nan  # not measured
  recs = [sensors,
          D.simulate(TRUTH, _ctrl(51, 0.02, 0.6, 2.0), qpos0=[-0.5], qvel0=[0.0], substeps=2, record=("qpos",))]
  res = S.identify(GUESS, recs, PARAMS, device="cpu", maxiter=15)
  err = _rel_err(res)
  assert all(e < 1e-3 for e in err.values()), (err, res.message)
  np.testing.assert_allclose(res.initial_qvel[1], [0.0], atol=1e-3)  # solved for (it started at rest)


@pytest.mark.parametrize("armature", ["0", "0.02"])
def test_multiple_shooting_and_identifiability(rec, armature):
  # armature and the inertia about the hinge axis only act as a sum; a friction without contacts
  # not at all. Both are reported; mass and damping are still recovered. With the armature at 0
  # (its finite-difference step at the floor, 0.01 eps) the two Jacobian columns come out equal
  # to the last bit; with 0.02 against the inertia's 0.004 their steps differ, and so do the
  # columns, by float32 noise (correlation 1 - 4e-8), which must still read as "only a combination"
  if armature != "0":
    arm = lambda xml: xml.replace('damping="0.05"', f'damping="0.05" armature="{armature}"').replace(
      'damping="0.08"', f'damping="0.08" armature="{armature}"')
    guess, rec = arm(GUESS), D.simulate(arm(TRUTH), _ctrl(151, 0.01), qpos0=[0.3])
  else:
    guess = GUESS
  params = PARAMS + [diffsim.Param("dof_armature", "hinge"),
                     diffsim.Param("body_inertia", "pole", components=[1], name="body_inertia:pole[y]"),
                     "geom_friction:rod"]
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    res = S.identify(guess, rec, params, device="cpu", shooting=25, maxiter=15)
  err = _rel_err(res)
  assert all(e < 1e-3 for e in err.values()), (err, res.message)
  msgs = [str(w.message) for w in caught if issubclass(w.category, S.IdentifiabilityWarning)]
  assert msgs and msgs == res.warnings
  text = " ".join(msgs)
  assert "geom_friction:rod" in text and "dof_armature:hinge" in text and "body_inertia:pole[y]" in text
  assert "body_mass:pole" not in text and "dof_damping:hinge" not in text
  assert res.std["geom_friction:rod"] == np.inf
  assert res.std["dof_armature:hinge"] == np.inf and res.std["body_inertia:pole[y]"] == np.inf
  assert np.isfinite(res.std["body_mass:pole"]) and np.isfinite(res.std["dof_damping:hinge"])
  # the sum of the two inertias is identified
  total = 0.004 + float(armature)
  assert res.x["dof_armature:hinge"] + res.x["body_inertia:pole[y]"] == pytest.approx(total, rel=1e-3)


def test_multistart_keeps_the_best():
  rec = D.simulate(TRUTH, _ctrl(81, 0.01), qpos0=[0.3])
  starts = np.array([[3.0, 0.6], [0.55, 0.07]])  # a poor guess first, a good one second
  res = S.identify(GUESS, rec, PARAMS, device="cpu", starts=starts, shooting=20, maxiter=4)
  assert res.starts_fun.shape == (2,)
  assert res.fun == pytest.approx(res.starts_fun.min(), rel=1e-6)
  assert res.starts_fun[1] < res.starts_fun[0]
  # initial guess, initial cost and history all belong to the best start
  assert res.starts_fun0.shape == (2,) and res.starts_fun0[1] < res.starts_fun0[0]
  assert res.fun0 == res.history["fun"][0] == res.starts_fun0[1]
  assert res.x0 == dict(zip(PARAMS, starts[1])) and list(res.history["x"][0]) == list(starts[1])
  assert "best of 2 starts" in res.summary()
  err = _rel_err(res)
  assert all(e < 1e-3 for e in err.values()), (err, res.message)


def test_adam_recovers_damping():
  # first-order: many cheap iterations (short shooting segments), best iterate kept
  truth = GUESS.replace('damping="0.05"', 'damping="0.08"')
  rec = D.simulate(truth, _ctrl(81, 0.01), qpos0=[0.3])
  res = S.identify(GUESS, rec, ["dof_damping:hinge"], device="cpu", method="adam", options={"lr": 0.05}, maxiter=60,
                   shooting=10)
  assert res.nit == 60 and res.history["fun"].shape == (61,)
  assert abs(res.x["dof_damping:hinge"] / 0.08 - 1) < 1e-3, res.summary()


def test_adam_iterations_replay_one_captured_tape_rollout(monkeypatch):
  # the rollout on the tape runs from Python once, inside the capture; every iteration replays it
  calls = []
  run = diffsim.Rollout.run
  monkeypatch.setattr(diffsim.Rollout, "run", lambda self, *a, **kw: calls.append(1) or run(self, *a, **kw))
  rec = D.simulate(GUESS.replace('damping="0.05"', 'damping="0.08"'), _ctrl(21, 0.01), qpos0=[0.3])
  res = S.identify(GUESS, rec, ["dof_damping:hinge"], device="cpu", method="adam", maxiter=5)
  assert res.nit == 5 and len(calls) == 1


def test_quaternion_residuals_ball_joint(tmp_path):
  # qpos residuals of ball and free joints live in the tangent space (rotation vectors)
  mjm = mujoco.MjModel.from_xml_string(models.BALL_FREE)
  truth = mujoco.MjModel.from_xml_string(models.BALL_FREE)
  j = mujoco.mj_name2id(truth, mujoco.mjtObj.mjOBJ_JOINT, "ball")
  truth.dof_damping[truth.jnt_dofadr[j]:truth.jnt_dofadr[j] + 3] = 0.03
  ctrl = np.stack([np.sin(np.arange(61) * 0.1), 0.5 * np.cos(np.arange(61) * 0.07)], axis=1)
  qvel0 = np.zeros(mjm.nv)
  qvel0[mjm.jnt_dofadr[j]:mjm.jnt_dofadr[j] + 3] = [2.0, -1.0, 3.0]
  rec = D.simulate(truth, ctrl, qvel0=qvel0, record=("qpos", "qvel"))
  # MJCF holds one damping per joint (compiled into its 3 dofs), so that is what is identified and
  # written: the rollout perturbs the dofs in separate lanes, their Jacobian columns are summed
  res = S.identify(models.BALL_FREE, rec, ["dof_damping:ball"], device="cpu", shooting=20, maxiter=10, out=tmp_path,
                   plots=False)
  assert isinstance(res.x["dof_damping:ball"], float) and res.labels == ["dof_damping:ball"]
  assert res.x["dof_damping:ball"] == pytest.approx(0.03, rel=1e-3)
  m = mujoco.MjModel.from_xml_path(str(tmp_path / "model.xml"))
  np.testing.assert_allclose(m.dof_damping[m.jnt_dofadr[j]:m.jnt_dofadr[j] + 3], res.x["dof_damping:ball"], rtol=1e-6)


def test_identified_mjcf_fields(tmp_path):
  # host only: every kind of element is written into the MJCF and survives compilation; a position
  # servo keeps biasprm[1] = -kp; body inertial edits survive inertia-from-geoms; meshes resolve
  so101 = diffsim.asset_path("so101", "so101_new_calib.xml")
  params = [diffsim.Param("dof_damping", ["elbow_flex", "gripper"], name="damping"),
            diffsim.Param("jnt_stiffness:wrist_flex"), diffsim.Param("actuator_gainprm:shoulder_pan"),
            diffsim.Param("body_mass:upper_arm"), diffsim.Param("body_inertia", "lower_arm", name="inertia"),
            diffsim.Param("opt.gravity")]
  theta = np.array([0.7, 0.3, 1.5, 20.0, 0.2, 3e-5, 1.6e-4, 1.5e-4, 0.1, 0.0, -9.7])
  path = tmp_path / "model.xml"
  S.write_mjcf(so101, params, theta, path)
  m = mujoco.MjModel.from_xml_path(str(path))
  j = lambda n: m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n)]
  b = lambda n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n)
  np.testing.assert_allclose([m.dof_damping[j("elbow_flex")], m.dof_damping[j("gripper")]], [0.7, 0.3], rtol=1e-6)
  assert m.jnt_stiffness[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, "wrist_flex")] == pytest.approx(1.5)
  assert m.actuator_gainprm[0, 0] == pytest.approx(20.0) and m.actuator_biasprm[0, 1] == pytest.approx(-20.0)
  assert m.actuator_gainprm[1, 0] == pytest.approx(17.8)  # others untouched
  assert m.body_mass[b("upper_arm")] == pytest.approx(0.2)
  np.testing.assert_allclose(m.body_inertia[b("lower_arm")], [3e-5, 1.6e-4, 1.5e-4], rtol=1e-5)
  np.testing.assert_allclose(m.opt.gravity, [0.1, 0.0, -9.7])
  assert m.nmesh == 13
  # inertia from geoms (no <inertial>): the mass edit must still hold after compilation
  xml = GUESS.replace('<inertial pos="0 0 -0.4" mass="0.5" diaginertia="0.004 0.004 0.0005"/>', "").replace(
    'mass="0"', 'mass="0.5"')
  S.write_mjcf(xml, [diffsim.Param("body_mass:pole")], np.array([0.8]), path)
  assert mujoco.MjModel.from_xml_path(str(path)).body_mass[1] == pytest.approx(0.8)


def test_identified_mjcf_joint_types_and_servo_damping(tmp_path):
  # host only. Dof fields of ball and free joints hold one value per joint in MJCF (the joint's
  # damping polynomial starts with the linear coefficient; armature and frictionloss are scalars):
  # one value each, compiled into every dof. A position servo's dampratio is compiled into kv from
  # kp and the inertia; the simulation keeps that kv when kp changes, and so must the written model.
  xml = """
  <mujoco>
    <worldbody>
      <body name="arm">
        <joint name="hinge" type="hinge" armature="0.01"/>
        <geom size="0.1" mass="1"/>
        <body name="bob" pos="0 0 -0.3">
          <joint name="ball" type="ball" damping="0.1" stiffness="0.5"/>
          <geom size="0.05" mass="0.2"/>
        </body>
      </body>
      <body name="floater" pos="1 0 0">
        <freejoint name="free"/>
        <geom size="0.1" mass="1"/>
      </body>
    </worldbody>
    <actuator>
      <position name="servo" joint="hinge" kp="5" dampratio="1"/>
    </actuator>
  </mujoco>"""
  m0 = mujoco.MjModel.from_xml_string(xml)
  params = [diffsim.Param("dof_damping", ["ball", "free"], name="damping"), diffsim.Param("dof_armature:ball"),
            diffsim.Param("dof_frictionloss:free"), diffsim.Param("jnt_stiffness:ball"),
            diffsim.Param("actuator_gainprm:servo")]
  path = tmp_path / "model.xml"
  S.write_mjcf(xml, params, np.array([0.3, 0.7, 0.05, 0.2, 2.0, 10.0]), path)
  m = mujoco.MjModel.from_xml_path(str(path))
  np.testing.assert_allclose(m.dof_damping, [0.0] + [0.3] * 3 + [0.7] * 6)
  np.testing.assert_allclose(m.dof_armature, [0.01] + [0.05] * 3 + [0.0] * 6)
  np.testing.assert_allclose(m.dof_frictionloss, [0.0] * 4 + [0.2] * 6)
  np.testing.assert_allclose(m.jnt_stiffness, [0.0, 2.0, 0.0])
  assert m.actuator_gainprm[0, 0] == 10.0 and m.actuator_biasprm[0, 1] == -10.0
  assert m0.actuator_biasprm[0, 2] < 0  # dampratio 1 compiled into kv
  # the compiled kv, written explicitly (compiling dampratio again with kp 10 would give -0.75)
  assert m.actuator_biasprm[0, 2] == pytest.approx(m0.actuator_biasprm[0, 2], rel=1e-5)
  # theta holds one value per joint
  with pytest.raises(ValueError, match="one per joint"):
    S.write_mjcf(xml, params, np.array([0.3, 0.3, 0.3, 0.7, 0.05, 0.2, 2.0, 10.0]), path)


def test_model_xml_failures(tmp_path, rec):
  # a parameter model.xml cannot hold fails before any kernel runs when out= asks for model.xml
  # (a device that does not exist: device work would fail with another message)
  with pytest.raises(ValueError, match="cannot write the identified parameters to model.xml.*solref"):
    S.identify(GUESS, rec, ["dof_solref:hinge"], device="nonexistent", out=tmp_path)
  # identified values that do not compile (an inertia violating the triangle inequality; here the
  # initial guess, with no iterations) lose neither the result nor the other files
  iy = diffsim.Param("body_inertia", "pole", components=[1], name="iy")  # 0.004 + 0.0005 < 0.01
  with pytest.warns(UserWarning, match="result is returned.*model.xml not written.*does not compile"):
    res = S.identify(GUESS, rec, [iy], x0={"iy": 0.01}, device="cpu", maxiter=0, out=tmp_path)
  assert res.x["iy"] == 0.01 and np.isfinite(res.fun) and not res.warnings
  assert "does not compile" in res.save_error
  assert json.loads((tmp_path / "params.json").read_text())["iy"]["value"] == 0.01
  assert sorted(os.listdir(tmp_path)) == ["cost.png", "params.json", "params.png", "signals.png"]
  with pytest.raises(ValueError, match="model.xml not written"):
    res.save(tmp_path / "again", plots=False)
  assert os.listdir(tmp_path / "again") == ["params.json"]


def _so101_truth():
  """SO-101 with a stiffer elbow rotor, a spring on the wrist and a stronger shoulder-lift servo."""
  src = diffsim.asset_path("so101", "so101_new_calib.xml")
  truth = mujoco.MjModel.from_xml_path(src)
  jnt = lambda n: mujoco.mj_name2id(truth, mujoco.mjtObj.mjOBJ_JOINT, n)
  truth.dof_armature[truth.jnt_dofadr[jnt("elbow_flex")]] = 0.035
  truth.jnt_stiffness[jnt("wrist_flex")] = 0.3
  a = mujoco.mj_name2id(truth, mujoco.mjtObj.mjOBJ_ACTUATOR, "shoulder_lift")
  truth.actuator_gainprm[a, 0], truth.actuator_biasprm[a, 1] = 21.0, -21.0  # a position servo: kp ties both
  mujoco.mj_setConst(truth, mujoco.MjData(truth))
  t = np.arange(41)[:, None] * 0.01
  k = np.arange(truth.nu)[None]
  ctrl = np.clip(0.2 * k % 0.6 + 0.5 * np.sin(2 * np.pi * (0.8 + 0.3 * k) * t + k), *truth.actuator_ctrlrange.T)
  rec = D.simulate(truth, ctrl, substeps=5, record=("qpos", "qvel"))
  return src, rec, {"dof_armature:elbow_flex": 0.035, "jnt_stiffness:wrist_flex": 0.3,
                    "actuator_gainprm:shoulder_lift": 21.0}, {"jnt_stiffness:wrist_flex": 0.2}


def _pendulum_truth():
  """The pendulum with more inertia about its hinge, a spring on it and less gravity."""
  truth = mujoco.MjModel.from_xml_string(GUESS)
  truth.body_inertia[1, 1], truth.jnt_stiffness[0], truth.opt.gravity[2] = 0.005, 0.3, -9.6
  mujoco.mj_setConst(truth, mujoco.MjData(truth))
  rec = D.simulate(truth, _ctrl(151, 0.01), qpos0=[0.3])
  return GUESS, rec, {"body_inertia:pole[y]": 0.005, "jnt_stiffness:hinge": 0.3, "gravity_z": -9.6}, \
    {"jnt_stiffness:hinge": 0.2}


@pytest.mark.parametrize("make", [_pendulum_truth, _so101_truth], ids=["pendulum", "so101"])
def test_lm_recovers_other_fields(make):
  # noise-free float64 MuJoCo data: body inertia, joint stiffness, gravity, rotor armature and a
  # position servo's kp (whose biasprm[1] = -kp tie the rollout must apply) come back to 1e-3
  src, rec, true, x0 = make()
  named = {"body_inertia:pole[y]": diffsim.Param("body_inertia", "pole", components=[1], name="body_inertia:pole[y]"),
           "gravity_z": diffsim.Param("opt.gravity", components=[2], name="gravity_z")}
  # identify's default budget (30): on the pendulum both Jacobians spend half of it at float32's floor
  # before the stopping test fires ("forward" alone stops after 15, "auto"'s directional start 3 later)
  res = S.identify(src, rec, [named.get(k, k) for k in true], x0=x0, device="cpu")
  err = _rel_err(res, true)
  assert all(e < 1e-3 for e in err.values()), (err, res.message)
  assert res.success and not res.warnings, res.message
  if make is _pendulum_truth:
    # a wide swing, strongly nonlinear in these parameters: "auto"'s directional Jacobian (a forward
    # difference of the whole trajectory) converged linearly here, to a Jacobian-limited std, so
    # "auto" turned to the step Jacobians (`lm._LevenbergMarquardt._leave_directional`)
    assert res.jacobian == "forward", res.jacobian
