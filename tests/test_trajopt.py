"""Trajectory optimization: each solver reaches the state it is asked for; bad input fails before any kernel.

The SO-101 reach at reduced size (>= 95% of worlds within 1 cm) is tutorials/03_so101_reach.py --test,
run by tests/test_tutorials_trajopt.py.
"""

import numpy as np
import pytest
import warp as wp

import diffsim
from diffsim.losses import CtrlCost, CtrlRateCost, KernelCost, QposCost, QvelCost, SensorCost, SiteCost

# ------------------------------------------------------------------------------------------------
# bad input: a clear error before any kernel is launched


@pytest.fixture
def launches(monkeypatch):
  """Records every `wp.launch` made while the test runs."""
  calls = []
  real = wp.launch

  def launch(kernel, *args, **kwargs):
    calls.append(getattr(kernel, "key", kernel))
    return real(kernel, *args, **kwargs)

  monkeypatch.setattr(wp, "launch", launch)
  return calls


@pytest.mark.parametrize("cost, kwargs, error, message", [
  ([QposCost(0.0, joints=["elbow"])], {}, KeyError, "no joint named 'elbow'.*'slider', 'hinge'"),
  ([SensorCost("tip_acc", 0.0)], {}, KeyError, "no sensor named 'tip_acc'.*'angle', 'tip_pos', 'tip_vel'"),
  ([SiteCost("hand", [0.0, 0.0, 1.0])], {}, KeyError, "no site named 'hand'.*'tip'"),
  ([CtrlCost(1.0, actuators=["pull"])], {}, KeyError, "no actuator named 'pull'.*'push'"),
  ([QposCost(np.zeros(3))], {}, ValueError, r"QposCost: target must have shape .*\(2,\).* got \(3,\)"),
  ([QvelCost(0.0, terminal=[1.0, 2.0, 3.0])], {}, ValueError, r"terminal weight must be a scalar or have shape \(2,\)"),
  ([CtrlCost(-1.0)], {}, ValueError, "weights must be finite and non-negative"),
  ([QvelCost(0.0)], {}, ValueError, "QvelCost: every weight is zero; give running= and/or terminal= weights"),
  ([], {}, ValueError, "the cost has no terms"),
  ([QposCost(0.0)], {"horizon": 0}, ValueError, "horizon must be a positive number of steps, got 0"),
  ([QposCost(0.0)], {"ctrl_init": np.zeros((2, 10, 3))}, ValueError,
   r"ctrl_init must have shape \(nworld=2, horizon=10, nu=1\).* got \(2, 10, 3\)"),
  ([QposCost(0.0)], {"ctrl_lo": 0.5, "ctrl_hi": -0.5}, ValueError, "ctrl_lo > ctrl_hi .*world 0, step 0"),
  ([QposCost(0.0)], {"ctrl_lo": 1.5, "ctrl_hi": 2.0}, ValueError, "ctrl_lo > ctrl_hi after intersecting them with"),
  ([QposCost(0.0)], {"qpos0": np.zeros(3)}, ValueError, r"qpos0 must have shape \(nworld=2, 2\) or \(2,\)"),
  ([QposCost(0.0)], {"jacobian": "lanes"}, ValueError,
   r"jacobian must be one of \('auto', 'analytic', 'finite_difference'\), got 'lanes'"),
  ([QposCost(0.0)], {"horizon": 2, "ctrl_init": np.zeros((2, 1))}, ValueError,
   r"ctrl_init of shape \(2, 1\) is ambiguous: nworld and horizon are both 2; pass \(nworld, 1, nu\)"),
])
def test_bad_problem_raises_before_any_kernel(cartpole, launches, cost, kwargs, error, message):
  kwargs = {"horizon": 10, **kwargs}
  with pytest.raises(error, match=message):
    diffsim.TrajectoryProblem(cartpole, cost, **kwargs)
  assert launches == []


def test_control_shapes_broadcast(cartpole):
  """Per-world, per-step and broadcastable 3-D guesses and bounds mean what their shapes say."""
  per_step = np.linspace(-0.5, 0.5, 10)[:, None]  # (horizon, nu)
  problem = diffsim.TrajectoryProblem(cartpole, [QposCost(0.0, terminal=1.0)], horizon=10, ctrl_init=per_step,
                                      ctrl_lo=np.array([[[-0.4]], [[-0.3]]]), ctrl_hi=[[0.2], [0.3]])
  got = problem.ctrl_init.numpy()
  np.testing.assert_allclose(got[0, :, 0], np.clip(per_step[:, 0], -0.4, 0.2), atol=1e-7)
  np.testing.assert_allclose(got[1, :, 0], np.clip(per_step[:, 0], -0.3, 0.3), atol=1e-7)


def test_site_without_position_sensor(so101, launches):
  with pytest.raises(ValueError, match="site 'baseframe' has no framepos sensor.*add_site_sensors"):
    diffsim.TrajectoryProblem(so101, [SiteCost("baseframe", [0.1, 0.0, 0.2], terminal=1.0)], horizon=5)
  assert launches == []


def test_bad_solver_arguments_raise_before_any_kernel(cartpole, monkeypatch):
  problem = diffsim.TrajectoryProblem(cartpole, [QposCost(0.0, running=1.0)], horizon=10)
  calls = []
  monkeypatch.setattr(wp, "launch", lambda *a, **k: calls.append(a))
  with pytest.raises(ValueError, match="unknown method 'newton'; choose one of"):
    diffsim.optimize_trajectory(problem, "newton")
  with pytest.raises(ValueError, match=r"unknown options \['learning_rate'\] for method 'adam'; valid: .*'lr'"):
    diffsim.optimize_trajectory(problem, "adam", options={"learning_rate": 0.1})
  with pytest.raises(ValueError, match="ilqr loop_steps must be None, True or False, got 'yes'"):
    diffsim.optimize_trajectory(problem, "ilqr", options={"loop_steps": "yes"})
  with pytest.raises(ValueError, match="ilqr jacobian must be None or one of .*got 'lanes'"):
    diffsim.optimize_trajectory(problem, "ilqr", options={"jacobian": "lanes"})
  with pytest.raises(ValueError, match="maxiter must be an integer >= 1, got 0"):
    diffsim.optimize_trajectory(problem, "ilqr", maxiter=0)
  with pytest.raises(ValueError, match=r"warm_start must have shape \(nworld, horizon, nu\) = \(2, 10, 1\)"):
    diffsim.optimize_trajectory(problem, "ilqr", warm_start=np.zeros((2, 9, 1)))
  assert calls == []


# ------------------------------------------------------------------------------------------------
# costs


def test_builtin_costs_match_their_definition(cartpole):
  """Each term is dt * sum_k 1/2 running r_k^2 + 1/2 terminal r_N^2, with per-world, per-step targets."""
  rng = np.random.default_rng(0)
  n, T, dt = cartpole.nworld, 20, cartpole.dt
  qpos_target = rng.normal(size=(n, 2))
  qvel_target = rng.normal(size=(n, T + 1, 2))
  tip_target = np.array([0.3, 0.0, -0.5])
  cost = [QposCost(qpos_target, running=[1.0, 2.0], terminal=[3.0, 4.0]),
          QvelCost(qvel_target, joints=["hinge", "slider"], running=0.5, terminal=0.0),
          SensorCost("tip_pos", tip_target, running=0.0, terminal=[5.0, 0.0, 6.0]),
          CtrlCost(0.7, target=0.1),
          CtrlRateCost(0.2)]
  problem = diffsim.TrajectoryProblem(cartpole, cost, horizon=T, qvel0=[0.0, 1.0])
  u = rng.uniform(-1.0, 1.0, (n, T, 1))
  got, traj = problem.evaluate(u)
  q, v, s = traj.qpos.numpy(), traj.qvel.numpy(), traj.sensordata.numpy()
  r = q - qpos_target[:, None]
  expect = dt * 0.5 * (r[:, :T] ** 2 * [1.0, 2.0]).sum((1, 2)) + 0.5 * (r[:, T] ** 2 * [3.0, 4.0]).sum(1)
  r = v[:, :, ::-1] - qvel_target  # joints given as hinge, slider
  expect += dt * 0.5 * 0.5 * (r[:, :T] ** 2).sum((1, 2))
  r = s[:, T, 1:4] - tip_target
  expect += 0.5 * (r ** 2 * [5.0, 0.0, 6.0]).sum(1)
  uc = u.astype(np.float32)
  expect += dt * 0.5 * 0.7 * ((uc - 0.1) ** 2).sum((1, 2))
  expect += 0.5 * 0.2 / dt * (np.diff(uc, axis=1) ** 2).sum((1, 2))
  np.testing.assert_allclose(got, expect, rtol=2e-5)


@wp.kernel
def _hinge_terminal(qpos: wp.array3d[float], weight: float, out: wp.array[float]):
  w = wp.tid()
  r = qpos[w, qpos.shape[1] - 1, 1] - wp.pi
  out[w] = 0.5 * weight * r * r


def _cost_and_grad(problem, u):
  ctrl = wp.array(u.astype(np.float32), dtype=float, requires_grad=True, device=problem.scene.device)
  cost = wp.zeros(problem.nworld, dtype=float, requires_grad=True, device=problem.scene.device)
  tape = wp.Tape()
  with tape:
    traj = problem.rollout(ctrl, qpos0=problem.qpos0, qvel0=problem.qvel0)
    problem.cost.evaluate(traj, cost)
  tape.backward(grads={cost: wp.ones(problem.nworld, dtype=float, device=problem.scene.device)})
  return cost.numpy(), ctrl.grad.numpy()


def test_kernel_cost_equals_builtin_term_and_its_gradient(cartpole):
  """A user Warp kernel on the trajectory is differentiated through the rollout like a built-in term."""
  T = 30
  user = KernelCost(lambda traj, out: wp.launch(_hinge_terminal, dim=traj.nworld, inputs=[traj.qpos, 40.0],
                                                outputs=[out], device=out.device))
  builtin = QposCost(np.pi, joints="hinge", running=0.0, terminal=40.0)
  u = np.random.default_rng(1).uniform(-1.0, 1.0, (2, T, 1))
  c1, g1 = _cost_and_grad(diffsim.TrajectoryProblem(cartpole, [user, CtrlCost(0.3)], horizon=T), u)
  c2, g2 = _cost_and_grad(diffsim.TrajectoryProblem(cartpole, [builtin, CtrlCost(0.3)], horizon=T), u)
  np.testing.assert_allclose(c1, c2, rtol=1e-6)
  np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-7)
  assert np.abs(g1).max() > 1e-3  # the gradient is not trivially zero


# ------------------------------------------------------------------------------------------------
# the bar: cart-pole swing-up from hanging, every solver, asserting the final state


@pytest.fixture(scope="module")
def swingup(cartpole):
  """Two worlds hanging (one still, one 0.1 rad off) that must be upright and still after 2 s."""
  cost = [QposCost([0.0, np.pi], running=0.0, terminal=[1.0, 100.0]),
          QvelCost(0.0, running=0.0, terminal=[1.0, 10.0]),
          CtrlCost(0.1)]
  return diffsim.TrajectoryProblem(cartpole, cost, horizon=200, qpos0=[[0.0, 0.0], [0.0, 0.1]])


@pytest.mark.parametrize("method, maxiter, options", [
  ("ilqr", 30, {}),  # "a few dozen iterations"
  ("lbfgs", 60, {}),
  ("lbfgs", 60, {"line_search": "per_world"}),  # one L-BFGS per world (`batched_lbfgs.py`)
  ("adam", 100, {"lr": 0.15}),
])
def test_cartpole_swings_up(swingup, method, maxiter, options):
  res = diffsim.optimize_trajectory(swingup, method, maxiter=maxiter, options=options, progress=False)
  qpos = res.trajectory.qpos.numpy()[:, -1]
  qvel = res.trajectory.qvel.numpy()[:, -1]
  # the pole is upright and nearly still in every world
  np.testing.assert_array_less(np.abs(qpos[:, 1] - np.pi), 0.1)
  np.testing.assert_array_less(np.abs(qvel[:, 1]), 0.5)
  # the controls respect the motor's range, and the result is what its controls do
  assert res.x.shape == (2, 200, 1) and np.abs(res.x).max() <= 1.0
  cost, traj = swingup.evaluate(res.x)
  np.testing.assert_allclose(traj.qpos.numpy()[:, -1], qpos, atol=1e-5)
  np.testing.assert_allclose(cost, res.fun, rtol=1e-5)
  assert res.nit <= maxiter and res.history.shape == (res.nit + 1, 2)
  np.testing.assert_allclose(res.history[0], swingup.evaluate()[0], rtol=1e-5)  # row 0: the guess (no push)
  assert np.all(res.fun < 1e-2 * res.history[0])
  # and the plan works outside diffsim's float32 simulation: replayed open-loop in float64 MuJoCo C
  ref = swingup.replay_mujoco(res.x)
  np.testing.assert_array_less(np.abs(ref["qpos"][:, -1, 1] - np.pi), 0.1)
  np.testing.assert_array_less(np.abs(ref["qvel"][:, -1, 1]), 0.5)


def test_worlds_with_their_own_parameters(cartpole):
  """iLQR's closed-loop line search steps each world with its own model parameters."""
  pole = diffsim.Param("body_mass", "pole")
  cost = [QposCost(0.1, joints="slider", running=0.0, terminal=100.0), QvelCost(0.0, running=0.0, terminal=10.0),
          CtrlCost(0.1)]  # move the cart 10 cm and stop
  problem = diffsim.TrajectoryProblem(cartpole, cost, horizon=50, params=[pole])
  pole.assign([[0.1], [1.0]])
  res = diffsim.optimize_trajectory(problem, "ilqr", maxiter=3, progress=False)
  cost, traj = problem.evaluate(res.x)
  np.testing.assert_allclose(res.fun, cost, rtol=1e-5)
  np.testing.assert_allclose(res.trajectory.qpos.numpy(), traj.qpos.numpy(), atol=1e-6)
  assert np.abs(res.x[0] - res.x[1]).max() > 0.05  # a light and a heavy pole need different pushes
  # each world solves its own problem: swapping the masses swaps the solutions
  pole.assign([[1.0], [0.1]])
  swapped = diffsim.optimize_trajectory(problem, "ilqr", maxiter=3, progress=False)
  np.testing.assert_allclose(swapped.x[::-1], res.x, atol=1e-6)
  np.testing.assert_allclose(swapped.fun[::-1], res.fun, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# receding horizon and the inner loop


@pytest.fixture(scope="module")
def short(cartpole):
  return diffsim.TrajectoryProblem(cartpole, [QposCost([0.5, 0.0], running=1.0, terminal=10.0), CtrlRateCost(1e-3)],
                                   horizon=20, qvel0=[[0.0, 0.0], [0.0, 1.0]])


def test_warm_start_shifts_the_previous_solution(short):
  first = diffsim.optimize_trajectory(short, "ilqr", maxiter=3, progress=False)
  shifted = np.concatenate([first.x[:, 1:], first.x[:, -1:]], axis=1)  # the last control is held
  again = diffsim.optimize_trajectory(short, "ilqr", maxiter=1, warm_start=first, progress=False)
  np.testing.assert_allclose(again.history[0], short.evaluate(shifted)[0], rtol=1e-6)
  same = diffsim.optimize_trajectory(short, "ilqr", maxiter=1, warm_start=first.x, shift=0, progress=False)
  np.testing.assert_allclose(same.history[0], first.fun, rtol=1e-6)
  # a receding-horizon step: new initial state, previous solution shifted; cost starts low
  short.reset(qpos0=first.trajectory.qpos.numpy()[:, 1], qvel0=first.trajectory.qvel.numpy()[:, 1])
  mpc = diffsim.optimize_trajectory(short, "ilqr", maxiter=2, warm_start=first, progress=False)
  short.reset(qpos0=short.scene.mjm.qpos0, qvel0=[[0.0, 0.0], [0.0, 1.0]])
  assert np.all(mpc.history[0] < first.history[0])


def test_ilqr_jacobian_option(short):
  """`jacobian=` reaches the Rollout iLQR linearizes: the problem's by default, the solver's own for
  another value; "auto" (the analytic step's) and the lanes agree on the cart-pole (the lanes' own
  error, rtol 1e-3)."""
  assert short.rollout.jacobian == "analytic"
  auto = diffsim.optimize_trajectory(short, "ilqr", maxiter=3, progress=False)
  lanes = diffsim.optimize_trajectory(short, "ilqr", maxiter=3, progress=False,
                                      options={"jacobian": "finite_difference"})
  np.testing.assert_allclose(lanes.fun, auto.fun, rtol=1e-3)
  solvers = [s for (method, *_), s in short.solvers.items() if method == "ilqr"]
  assert {s.rollout is short.rollout for s in solvers} == {True, False}
  assert {s.rollout.jacobian for s in solvers} == {"analytic", "finite_difference"}


@pytest.mark.parametrize("method, options", [("ilqr", None), ("adam", None), ("lbfgs", None),
                                             ("lbfgs", {"line_search": "per_world"})])
def test_callback_sees_best_costs_and_stops(short, method, options):
  seen = []

  def callback(iterate):
    seen.append((iterate.nit, iterate.fun.copy(), iterate.x if iterate.nit == 2 else None))
    if iterate.nit >= 3:
      raise StopIteration  # as scipy allows; returning True stops too (below)

  res = diffsim.optimize_trajectory(short, method, maxiter=50, ftol=0.0, log_every=1, progress=False, callback=callback,
                                    options=options)
  assert [nit for nit, _, _ in seen] == [1, 2, 3] and res.nit == 3
  # the best cost per world so far: never increasing, and the result's cost at the stop
  best = np.array([f for _, f, _ in seen])
  assert best.shape == (3, short.nworld) and np.all(np.diff(best, axis=0) <= 0)
  np.testing.assert_allclose(best[-1], res.fun, rtol=1e-6)
  # x, read on request: the best controls so far, whose cost is fun
  x = seen[1][2]
  assert x.shape == (short.nworld, short.horizon, short.scene.nu)
  np.testing.assert_allclose(short.evaluate(x)[0], seen[1][1], rtol=1e-5)
  stopped = diffsim.optimize_trajectory(short, method, maxiter=50, ftol=0.0, log_every=1, progress=False,
                                        callback=lambda iterate: iterate.nit >= 2, options=options)
  assert stopped.nit == 2
  with pytest.raises(TypeError, match="callback"):
    diffsim.optimize_trajectory(short, method, maxiter=2, progress=False, callback=3)


def test_ilqr_looped_steps_match_one_graph_per_stage(cartpole):
  # the CPU's iteration (each rollout step one graph replayed `horizon` times) and the GPU's (one
  # graph) launch the same kernels on the same buffers: the same iterates, bit for bit
  results = []
  for loop in (False, True):
    problem = diffsim.TrajectoryProblem(cartpole, [QposCost([0.5, 0.0], running=1.0, terminal=10.0),
                                                   CtrlRateCost(1e-3)], horizon=20, qvel0=[[0.0, 0.0], [0.0, 1.0]])
    results.append(diffsim.optimize_trajectory(problem, "ilqr", maxiter=5, ftol=0.0, progress=False,
                                               options={"loop_steps": loop}))
  np.testing.assert_array_equal(results[0].x, results[1].x)
  np.testing.assert_array_equal(results[0].history, results[1].history)
  assert (results[0].history[-1] < results[0].history[0]).all()  # the iterations took steps


# graph replays per iteration: one (Adam; iLQR on a GPU), or with loop_steps (iLQR's CPU default)
# the rollouts' step one graph replayed `horizon` times between graphs of the rest: the linearized
# rollout's start, step, end, the solve, per line-search step (6) a candidate's start, step, end,
# and the acceptance
@pytest.mark.parametrize("method, loop", [("ilqr", False), ("ilqr", True), ("adam", None)],
                         ids=["ilqr-one-graph", "ilqr-looped-steps", "adam"])
def test_iterations_are_graph_replays_without_host_copies(cartpole, monkeypatch, method, loop):
  options = {} if loop is None else {"loop_steps": loop}
  short = diffsim.TrajectoryProblem(cartpole, [QposCost([0.5, 0.0], running=1.0, terminal=10.0)], horizon=20)
  T = short.horizon
  stages = {None: 1, False: 1, True: (T + 2) + 1 + 6 * (T + 2) + 1}[loop]
  diffsim.optimize_trajectory(short, method, maxiter=12, progress=False, options=options)  # captures the graphs
  counts = {}
  for maxiter, log_every in ((4, 4), (12, 12), (12, 1)):
    calls = {"launch": 0, "numpy": 0, "graph": 0}
    real_launch, real_numpy, real_graph = wp.launch, wp.array.numpy, wp.capture_launch
    monkeypatch.setattr(wp, "launch", lambda *a, **k: calls.__setitem__("launch", calls["launch"] + 1) or
                        real_launch(*a, **k))
    monkeypatch.setattr(wp.array, "numpy", lambda self: calls.__setitem__("numpy", calls["numpy"] + 1) or
                        real_numpy(self))
    monkeypatch.setattr(wp, "capture_launch", lambda *a, **k: calls.__setitem__("graph", calls["graph"] + 1) or
                        real_graph(*a, **k))
    res = diffsim.optimize_trajectory(short, method, maxiter=maxiter, log_every=log_every, ftol=0.0, progress=False,
                                      options=options)
    monkeypatch.undo()
    assert res.nit == maxiter
    counts[maxiter if log_every > 1 else "every"] = calls
  # no Python launches at all once captured: every iteration is `stages` graph replays ...
  assert counts[4]["launch"] == counts[12]["launch"] == 0
  extra = 1 if method == "adam" else 0  # Adam evaluates once more than it steps
  assert counts[12]["graph"] - counts[4]["graph"] == 8 * stages
  assert counts[4]["graph"] == (4 + extra) * stages
  # ... and host reads do not grow with the iterations (one check per log_every, then the result)
  assert counts[4]["numpy"] == counts[12]["numpy"] <= 8
  # checking every iteration (iLQR's default) costs one read per iteration (best cost and status together)
  assert counts["every"]["numpy"] - counts[12]["numpy"] == 11


POINT_MASS = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body><joint name="x" type="slide" axis="1 0 0" damping="0.5"/><geom type="sphere" size="0.05" mass="1"/></body>
  </worldbody>
  <actuator><motor name="m" joint="x" gear="2"/></actuator>
  <sensor><actuatorfrc name="force" actuator="m"/></sensor>
</mujoco>
"""


def test_ilqr_solves_a_linear_quadratic_problem_in_one_step(cartpole):
  """Linear dynamics, quadratic cost: the Gauss-Newton model is exact, so one undamped iLQR step
  is the optimum. The terminal sensor (actuator force) depends on the last control, whose
  curvature the last step's Quu must carry (without it: no decrease at all in iteration 1, and
  not converged after 30)."""
  scene = diffsim.Scene.from_xml(POINT_MASS, nworld=1, device=cartpole.device)
  cost = [SensorCost("force", 1.5, terminal=10.0), SensorCost("force", 0.5, running=1.0), QposCost(0.3, terminal=5.0),
          QvelCost(0.0, running=0.1), CtrlRateCost(0.01), CtrlCost(0.1)]
  problem = diffsim.TrajectoryProblem(scene, cost, horizon=20)
  one = diffsim.optimize_trajectory(problem, "ilqr", maxiter=1, progress=False, options={"mu_init": 0.0})
  many = diffsim.optimize_trajectory(problem, "ilqr", maxiter=10, progress=False, options={"mu_init": 0.0})
  assert many.success.all(), many.message
  np.testing.assert_allclose(one.fun, many.fun, rtol=1e-5)

  def gradient(u):  # d cost / d ctrl from the tape
    ctrl = wp.array(u, dtype=float, requires_grad=True, device=scene.device)
    cost = wp.zeros(1, dtype=float, requires_grad=True, device=scene.device)
    tape = wp.Tape()
    with tape:
      problem.cost.evaluate(problem.rollout(ctrl, qpos0=problem.qpos0, qvel0=problem.qvel0), cost)
    tape.backward(cost)
    return ctrl.grad.numpy().copy()

  # the one step lands on the optimum: the gradient vanishes there (measured: 1.1e-5 of the initial one)
  assert np.abs(gradient(one.x)).max() < 1e-4 * np.abs(gradient(np.zeros_like(one.x))).max()


# A pusher on a slide joint beside a box at rest on a plane (issue 30): the box's final position is
# the cost, the pusher ends its settling just clear of the box, so the cost's gradient in the
# pusher's force is zero at the start and first-order solvers cannot leave it.
PUSH_FROM_REST = """
<mujoco model="push_from_rest">
  <option timestep="0.01"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" friction="0.8"/>
    <body name="pusher" pos="0 0 0.03">
      <joint name="px" type="slide" axis="1 0 0" damping="2"/>
      <geom type="capsule" fromto="0 -0.04 0 0 0.04 0" size="0.02" mass="0.3" contype="2" conaffinity="1"/>
    </body>
    <body name="box" pos="0.0675 0 0.03">
      <freejoint/>
      <geom name="box" type="box" size="0.05 0.05 0.03" mass="0.5" friction="0.8"/>
    </body>
  </worldbody>
  <actuator><motor name="push" joint="px" ctrlrange="-5 5"/></actuator>
  <sensor><framepos name="box_pos" objtype="body" objname="box"/></sensor>
</mujoco>"""


@pytest.mark.parametrize("method", ["lbfgs", "adam"])
def test_no_progress_from_rest_is_not_success(method):
  """scipy's L-BFGS-B stops at once on a flat start and calls it convergence; Adam does not move.
  Neither may report success: the message says so, names the worlds and what to try."""
  import mujoco

  m = mujoco.MjModel.from_xml_string(PUSH_FROM_REST)
  d = mujoco.MjData(m)
  for _ in range(100):  # settle
    mujoco.mj_step(m, d)
  scene = diffsim.Scene.from_xml(PUSH_FROM_REST, nworld=4, device="cpu")
  target = np.stack([d.qpos[1] + np.array([0.11, 0.12, 0.13, 0.14]), np.zeros(4), np.full(4, d.qpos[3])], 1)
  problem = diffsim.TrajectoryProblem(scene, [SensorCost("box_pos", target, terminal=100.0), CtrlCost(1e-3)],
                                      horizon=60, qpos0=d.qpos.copy())
  res = diffsim.optimize_trajectory(problem, method, maxiter=10, progress=False)
  np.testing.assert_allclose(res.fun, res.history[0], rtol=1e-4)  # it did not move
  assert not res.success.any(), res
  assert "no progress from the start in 4 of 4 worlds" in res.message
  # the pusher misses the box: the gradient is zero, and the result says so per world
  assert res.zero_gradient.all() and "gradient was zero at the start" in res.message, res.message
  assert res.reasons == ("zero gradient at the start, nothing moved",) * 4


@pytest.mark.parametrize("method", ["lbfgs", "adam"])
def test_start_gradient_kept_in_the_captured_evaluation(cartpole, method):
  """The zero-gradient test of a stalled result reads the gradient's size at the start from the
  solver's first (captured) evaluation, not from a rollout of its own: the same per world as an
  eager gradient at the start, and kept at the start's, not a later evaluation's."""
  problem = diffsim.TrajectoryProblem(cartpole, [QposCost([0.0, np.pi], running=0.0, terminal=[1.0, 100.0])],
                                      horizon=20)
  diffsim.optimize_trajectory(problem, method, maxiter=3, progress=False)
  solver = next(s for s in problem.solvers.values() if s.method == method)
  assert solver.keeps_start_gradient and solver._grad0_done.numpy()[0] == 1
  kept = solver.grad0.numpy().copy()
  wp.copy(problem.ctrl, solver._ctrl0)
  _, tape = solver.gradient()
  eager = np.abs(problem.ctrl.grad.numpy()).reshape(problem.nworld, -1).max(axis=1)
  tape.zero()
  assert (eager > 0).all()
  np.testing.assert_allclose(kept, eager, rtol=1e-6)


def _settled_push(nworld: int, offsets):
  """PUSH_FROM_REST settled in C, targets `offsets` (m) ahead of the box: `(problem, targets, qpos0)`
  with the cost on the box's final position only."""
  import mujoco

  m = mujoco.MjModel.from_xml_string(PUSH_FROM_REST)
  d = mujoco.MjData(m)
  for _ in range(100):  # settle
    mujoco.mj_step(m, d)
  scene = diffsim.Scene.from_xml(PUSH_FROM_REST, nworld=nworld, device="cpu")
  target = np.stack([d.qpos[1] + np.asarray(offsets), np.zeros(nworld), np.full(nworld, d.qpos[3])], 1)
  cost = [SensorCost("box_pos", target, terminal=[100.0, 100.0, 0.0])]
  return diffsim.TrajectoryProblem(scene, cost, horizon=60, qpos0=d.qpos.copy()), target, d.qpos.copy()


def test_contact_reaching_warm_start():
  """Issue 35, item 3: out of contact with a cost on the box only, L-BFGS's gradient is zero and the
  result says so; a first stage that adds a term drawing the pusher just into the box's near face
  (`with_cost`), then the box's cost alone from that warm start, ends within 2 cm in float64 C."""
  problem, target, qpos0 = _settled_push(2, [0.06, 0.1])
  rest = diffsim.optimize_trajectory(problem, "lbfgs", maxiter=10, progress=False)
  assert not rest.success.any() and rest.zero_gradient.all(), rest
  assert "gradient was zero at the start" in rest.message and "contact-reaching warm start" in rest.message

  # the pusher's center 1 cm into the box's near face (half width 5 cm, capsule radius 2 cm)
  reach = problem.with_cost(problem.cost.terms + [QposCost(qpos0[1] - 0.06, joints=["px"], running=100.0)])
  first = diffsim.optimize_trajectory(reach, "lbfgs", maxiter=20, progress=False)
  res = diffsim.optimize_trajectory(problem, "adam", maxiter=150, warm_start=first, shift=0, progress=False,
                                    options={"lr": 0.5})
  assert not res.zero_gradient.any(), res.message
  box = problem.replay_mujoco(res.x)["qpos"][:, -1, 1:3]
  error = np.linalg.norm(box - target[:, :2], axis=1)
  assert np.all(error < 0.02), error
