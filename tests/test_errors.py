"""Bad input gets a clear error that names the problem, before any rollout kernel runs."""

import numpy as np
import pytest
import warp as wp

import diffsim


def test_malformed_mjcf():
  with pytest.raises(ValueError, match="malformed MJCF string"):
    diffsim.Scene.from_xml("<mujoco><worldbody><body><geom type='nosuchtype'/></body></worldbody></mujoco>",
                           nworld=1, device="cpu")


def test_missing_mjcf_file():
  with pytest.raises(FileNotFoundError, match="MJCF file not found"):
    diffsim.Scene.from_xml("/nonexistent/model.xml", nworld=1, device="cpu")


def test_bad_nworld_and_device():
  xml = diffsim.asset_path("cartpole.xml")
  with pytest.raises(ValueError, match="nworld must be a positive integer"):
    diffsim.Scene.from_xml(xml, nworld=0, device="cpu")
  with pytest.raises(ValueError, match="unknown device"):
    diffsim.Scene.from_xml(xml, nworld=1, device="tpu:3")
  # MJWarp 4.0 steps a Data without constraint capacity wrongly (its Euler step reads the solver's efc.Ma)
  for cap in ({"njmax": 0}, {"nconmax": -1}, {"njmax": 1.5}):
    with pytest.raises(ValueError, match=f"{next(iter(cap))} must be a positive integer"):
      diffsim.Scene.from_xml(xml, nworld=1, device="cpu", **cap)
  if not wp.is_cuda_available():  # said before Warp prints raw driver errors
    with pytest.raises(ValueError, match="Warp finds no CUDA device here"):
      diffsim.Scene.from_xml(xml, nworld=1, device="cuda:0")


@pytest.mark.parametrize(
  "ctrl, error, message",
  [
    (np.zeros((2, 10, 1), np.float32), TypeError, "ctrl must be a wp.array"),
    (wp.zeros((2, 10), dtype=float), ValueError, r"ctrl must have shape \(nworld=2, nstep, nu=1\)"),
    (wp.zeros((3, 10, 1), dtype=float), ValueError, r"ctrl must have shape \(nworld=2, nstep, nu=1\)"),
    (wp.zeros((2, 10, 1), dtype=wp.float64), TypeError, "ctrl must have dtype float32"),
    (wp.zeros((2, 0, 1), dtype=float), ValueError, "nstep = 0"),
  ],
)
def test_bad_ctrl(cartpole, ctrl, error, message):
  with pytest.raises(error, match=message):
    diffsim.rollout(cartpole, ctrl)


def test_nan_inputs(cartpole):
  u = np.zeros((2, 10, 1), np.float32)
  u[1, 4, 0] = np.nan
  with pytest.raises(ValueError, match=r"ctrl contains 1 NaN/Inf"):
    diffsim.rollout(cartpole, wp.array(u, dtype=float))
  ok = wp.zeros((2, 10, 1), dtype=float)
  with pytest.raises(ValueError, match="qpos0 contains"):
    diffsim.rollout(cartpole, ok, qpos0=wp.array(np.array([[0.0, np.inf]] * 2, np.float32), dtype=float))
  with pytest.raises(ValueError, match=r"qvel0 must have shape \(nworld=2, 2\)"):
    diffsim.rollout(cartpole, ok, qvel0=np.zeros(3))


def test_bad_parameters(cartpole):
  u = wp.zeros((2, 5, 1), dtype=float)
  with pytest.raises(KeyError, match="unknown parameter field 'body_mas'"):
    diffsim.Param("body_mas", "pole")
  with pytest.raises(KeyError, match="no body named 'pol' in the model; bodies are"):
    diffsim.rollout(cartpole, u, params=[diffsim.Param("body_mass", "pol")])
  with pytest.raises(ValueError, match="cannot be batched per world by MJWarp"):
    diffsim.Param("body_parentid", "pole")
  with pytest.raises(ValueError, match="cannot be batched per world by MJWarp"):
    diffsim.Param("qpos0")
  with pytest.raises(ValueError, match="lower bound above upper bound"):
    diffsim.rollout(cartpole, u, params=[diffsim.Param("dof_damping", "hinge", lower=1.0, upper=0.5)])
  bad = diffsim.Param("dof_damping", "hinge")
  bad.bind(cartpole)
  with pytest.raises(ValueError, match="must be finite"):
    bad.assign([np.nan])


def test_forward_mode_misuse(cartpole):
  damping = diffsim.Param("dof_damping", "hinge")
  with pytest.raises(ValueError, match=r"a direction per parameter \(directions >= nparam = 2\)"):
    diffsim.Rollout(cartpole, 5, params=[damping, diffsim.Param("body_mass", "pole")], directions=1)
  with pytest.raises(ValueError, match="directions must be a non-negative integer"):
    diffsim.Rollout(cartpole, 5, params=[damping], directions=0.5)
  ro = diffsim.Rollout(cartpole, 5, params=[damping], directions=2)
  u = wp.zeros((2, 5, 1), dtype=float)
  with pytest.raises(ValueError, match=r"tangent0 must have shape \(nworld=2, nx=4, directions=2\)"):
    ro(u, linearize=True, tangent0=wp.zeros((2, 4, 3), dtype=float))
  with pytest.raises(TypeError, match="tangent0 must be a float32 wp.array"):
    ro(u, linearize=True, tangent0=np.zeros((2, 4, 2)))
  with pytest.raises(RuntimeError, match="no backward pass for a tape"):
    with wp.Tape():
      ro(u)
  with pytest.raises(RuntimeError, match="read tangents"):
    ro.jacobians()
  plain = diffsim.Rollout(cartpole, 5)
  with pytest.raises(RuntimeError, match="directions=m"):
    plain.tangents()
  with pytest.raises(ValueError, match="tangent0 is for forward mode"):
    plain(u, linearize=True, tangent0=wp.zeros((2, 4, 2), dtype=float))


def test_divergence_names_world_and_step(ball_free):
  u = np.zeros((2, 20, ball_free.nu), np.float32)
  u[1, 5:, 0] = 3e38  # an unbounded motor driven to float32's limit
  with pytest.raises(diffsim.DivergenceError, match=r"world 1 has a NaN/Inf state at step \d+"):
    diffsim.rollout(ball_free, wp.array(u, dtype=float))
