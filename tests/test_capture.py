"""Every graph diffsim captures obeys the rules of a CUDA graph capture, checked on the CPU.

A CPU graph (Warp 1.19) tolerates what a CUDA stream capture refuses: a host read
(`wp.array.numpy()`), an upload from NumPy (`assign`) or a synchronize inside the capture (on a
GPU each invalidates the capture, or is done once at capture time and not replayed). These tests
build each of diffsim's captured loops with those operations recorded as violations while a
`wp.ScopedCapture` is open, so a CPU-only CI catches what would break on the GPU. (Allocations are
allowed: with the CUDA mempool they become part of the graph, and MJWarp's own step allocates.)
"""

import traceback

import numpy as np
import pytest
import warp as wp

import diffsim
from diffsim import data as D
from diffsim import sysid as S
from diffsim.losses import CtrlCost, QposCost, QvelCost

import models


class _Violations(list):
  captures: dict


@pytest.fixture
def strict_capture(monkeypatch):
  """Records the forbidden operations made inside a capture; yields the list of violations."""
  state = {"depth": 0, "captures": 0}
  violations = _Violations()
  violations.captures = state
  real_capture = wp.ScopedCapture

  class StrictCapture(real_capture):
    def __enter__(self):
      out = super().__enter__()
      state["depth"] += 1
      state["captures"] += 1
      return out

    def __exit__(self, *exc):
      state["depth"] -= 1
      return super().__exit__(*exc)

  def guard(name, real, host_only=False):
    def call(*args, **kwargs):
      # `assign` from another wp.array is a device copy, which a CUDA graph records
      if state["depth"] and not (host_only and isinstance(args[1] if len(args) > 1 else None, wp.array)):
        where = [f"{f.filename.split('/')[-1]}:{f.lineno} {f.name}" for f in traceback.extract_stack()[-6:-1]]
        violations.append(f"{name} inside a capture, via " + " <- ".join(reversed(where)))
      return real(*args, **kwargs)
    return call

  monkeypatch.setattr(wp, "ScopedCapture", StrictCapture)
  monkeypatch.setattr(wp.array, "numpy", guard("wp.array.numpy", wp.array.numpy))
  monkeypatch.setattr(wp.array, "assign", guard("wp.array.assign from the host", wp.array.assign, host_only=True))
  for fn in ("synchronize", "synchronize_device", "synchronize_stream"):
    monkeypatch.setattr(wp, fn, guard(f"wp.{fn}", getattr(wp, fn)))
  yield violations


def _check(violations):
  assert violations.captures["captures"] > 0, "nothing was captured: the test exercised no graph"
  assert not violations, "\n".join(dict.fromkeys(violations))  # unique, in order


@pytest.mark.parametrize("method, loop", [("adam", None), ("lbfgs", None), ("ilqr", True), ("ilqr", False)],
                         ids=["adam", "lbfgs", "ilqr-looped-steps", "ilqr-one-graph"])
def test_trajopt_graphs(cartpole, strict_capture, method, loop):
  # a parameter applied by an earlier rollout: the captured rollouts restore its MJCF value (by a
  # kernel; a host upload there would break a CUDA capture)
  damping = diffsim.Param("dof_damping", "hinge")
  diffsim.rollout(cartpole, wp.zeros((cartpole.nworld, 3, cartpole.nu), dtype=float, device=cartpole.device),
                  params=[damping])
  cost = [QposCost([0.3, 0.0], running=1.0, terminal=10.0), QvelCost(0.0, terminal=1.0), CtrlCost(0.1)]
  problem = diffsim.TrajectoryProblem(cartpole, cost, horizon=10)
  options = {"loop_steps": loop} if method == "ilqr" else {}
  diffsim.optimize_trajectory(problem, method, maxiter=3, progress=False, options=options)
  problem.evaluate()
  _check(strict_capture)


def test_rollout_graphs(cartpole, strict_capture):
  """A captured forward + tape.backward, and the stages of a linearized rollout."""
  n, T = cartpole.nworld, 8
  damping = diffsim.Param("dof_damping", "hinge")
  ro = diffsim.Rollout(cartpole, T, params=[damping])
  ctrl = wp.array(np.full((n, T, cartpole.nu), 0.3, np.float32), dtype=float, requires_grad=True,
                  device=cartpole.device)
  ro(ctrl)  # eagerly first, as on a GPU (modules load, constants derived from parameters refresh)
  with wp.ScopedCapture(device=cartpole.device) as cap:
    tape = wp.Tape()
    with tape:
      traj = ro(ctrl)
    tape.backward(grads={traj.qpos: wp.ones_like(traj.qpos)})
  wp.capture_launch(cap.graph)
  stages, _ = ro.stages(ctrl, linearize=True)
  diffsim.graph.Replay(cartpole.device, stages)()
  _check(strict_capture)


@pytest.mark.parametrize("method, jacobian", [("lm", "forward"), ("lm", "directional"), ("adam", "forward")],
                         ids=["lm-forward", "lm-directional", "adam"])
def test_sysid_graphs(strict_capture, method, jacobian):
  # (jacobian="tape" runs eagerly, one residual block at a time: nothing to capture)
  rec = D.simulate(models.PENDULUM.replace('damping="0.05"', 'damping="0.08"'), np.zeros((21, 1)), qpos0=[0.3])
  S.identify(models.PENDULUM, rec, ["dof_damping:hinge"], device="cpu", maxiter=2, method=method,
             jacobian=jacobian)
  _check(strict_capture)
