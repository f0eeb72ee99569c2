"""`mujoco.sysid`'s own two integration-test problems, posed to both tools (issue 36).

`mujoco/sysid/tests/test_integration.py` recovers a spring-mass's mass (1.0 from 2.0, bounds
[0.3, 3], 3 s of two sinusoids, 1,499 steps of 2 ms) and the 5-link arm's armatures (0.5 ... 0.1
from 0.01, bounds [0.001, 1], 2 s of one sinusoid per motor, 999 steps; the arm's +-3.14 rad joint
ranges become limits, which the first rollouts from 0.01 swing into). The models, excitations and
data generation are the test's own (`SPRING_MASS_XML`, `ARM_XML`, `_generate_data`, imported from the
installed `mujoco.sysid` tests). Each tool runs with its defaults, as a user of either would:
`mujoco.sysid.optimize(optimizer="mujoco")` with its residual normalization, and
`diffsim.sysid.identify` with its own (each signal divided by its spread); on noise-free data both
minima are the truth.

- `PROBLEMS`: name -> `SysidTest`;
- `load(name)`: the recording, in both tools' containers;
- `run_mujoco_sysid`, `run_diffsim`: one whole call each (data containers, residual, solve);
- `write_cli_inputs`: the guess model and the recording as files, and the `diffsim sysid` flags;
- `mjwarp_step_s`: one bare MJWarp step of a problem's model, replayed from a captured graph: what
  the step alone costs on the device, beside the tools' whole calls.
"""

from __future__ import annotations

import dataclasses
import io
import os
import time
import warnings

import mujoco
import numpy as np

__all__ = ["SysidTest", "PROBLEMS", "load", "run_mujoco_sysid", "run_diffsim", "guess_model", "write_cli_inputs",
           "rel_error", "mjwarp_step_s"]


@dataclasses.dataclass(frozen=True)
class SysidTest:
  """One problem of `mujoco.sysid`'s integration test.

  Attributes:
    xml: name of the test module's MJCF string (the true model).
    duration: recording length, s.
    ctrl: `t (T,) -> (T, nu)` the excitation.
    params: diffsim's names of the unknowns (`field:element`).
    truth, guess, lower, upper: `(nparam,)` true values, initial guess and bounds.
  """

  xml: str
  duration: float
  ctrl: object
  params: tuple[str, ...]
  truth: tuple[float, ...]
  guess: float
  lower: float
  upper: float

  def model_xml(self) -> str:
    from mujoco.sysid.tests import test_integration as T
    return getattr(T, self.xml)


_ARM_JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5")
PROBLEMS = {
    "spring-mass": SysidTest(
        "SPRING_MASS_XML", 3.0,
        lambda t: (5.0 * np.sin(2 * np.pi * 1.5 * t) + 3.0 * np.sin(2 * np.pi * 3.7 * t)).reshape(-1, 1),
        ("body_mass:ball",), (1.0,), 2.0, 0.3, 3.0),
    "arm": SysidTest(
        "ARM_XML", 2.0,
        lambda t: np.column_stack([5.0 * np.sin(2 * np.pi * 0.5 * t), 4.0 * np.sin(2 * np.pi * 0.7 * t + 0.5),
                                   3.0 * np.sin(2 * np.pi * 0.4 * t + 1.0), 2.0 * np.sin(2 * np.pi * 0.9 * t + 1.5),
                                   1.0 * np.sin(2 * np.pi * 0.6 * t + 2.0)]),
        tuple(f"dof_armature:{j}" for j in _ARM_JOINTS), (0.5, 0.4, 0.3, 0.2, 0.1), 0.01, 0.001, 1.0),
}


def load(name: str) -> dict:
  """The test's recording of problem `name` (MuJoCo C, float64, noise-free).

  Returns:
    `spec`, `initial_state`, `control_ts`, `sensor_ts`: `mujoco.sysid`'s inputs, as the test builds
    them; `recording`: the same data as a `diffsim.data.Recording` (row k: the sensors at time k dt,
    from the state before step k, and the control held over step k).
  """
  from mujoco.sysid.tests import test_integration as T

  from diffsim.data import Recording

  prob = PROBLEMS[name]
  spec, initial_state, control_ts, sensor_ts = T._generate_data(prob.model_xml(), prob.ctrl, prob.duration)
  mjm = spec.compile()
  dt = float(mjm.opt.timestep)
  nrow = sensor_ts.data.shape[0]  # one control row more than steps: the test's rollout drops the last
  rec = Recording(time=np.arange(nrow) * dt, ctrl=control_ts.data[:nrow], sensordata=sensor_ts.data,
                  qpos0=mjm.qpos0.copy(), qvel0=np.zeros(mjm.nv), source=f"mujoco.sysid test {name}")
  return {"spec": spec, "initial_state": initial_state, "control_ts": control_ts, "sensor_ts": sensor_ts,
          "recording": rec, "mjm": mjm}


def _modifier(param: str):
  field, element = param.split(":")
  if field == "body_mass":
    return lambda s, p: setattr(s.body(element), "mass", p.value[0])
  if field == "dof_armature":
    return lambda s, p: setattr(s.joint(element), "armature", p.value[0])
  raise ValueError(f"no mujoco.sysid modifier for {param}")


def run_mujoco_sysid(name: str, data: dict) -> dict:
  """`mujoco.sysid` on problem `name`, as its test calls it; wall time of the whole call (s) and the
  parameters reached."""
  from mujoco import sysid

  prob = PROBLEMS[name]
  t0 = time.perf_counter()
  params = sysid.ParameterDict()
  for p, nominal in zip(prob.params, prob.truth):
    params.add(sysid.Parameter(p, nominal=nominal, min_value=prob.lower, max_value=prob.upper,
                               modifier=_modifier(p)))
    params[p].value[:] = prob.guess
  seqs = sysid.ModelSequences(name, data["spec"], "recording", data["initial_state"], data["control_ts"],
                              data["sensor_ts"])
  residual_fn = sysid.build_residual_fn(models_sequences=[seqs])
  opt, _ = sysid.optimize(initial_params=params, residual_fn=residual_fn, optimizer="mujoco", verbose=False,
                          output=io.StringIO())
  return {"wall": time.perf_counter() - t0, "theta": np.asarray(opt.as_vector(), float)}


def run_diffsim(name: str, data: dict, device="cpu", jacobian: str = "auto") -> dict:
  """`diffsim.sysid.identify` on problem `name` with its defaults (no output folder, no plots) but
  `jacobian`; wall time of the whole call (s), the parameters reached and the Jacobian LM used."""
  from diffsim import sysid

  prob = PROBLEMS[name]
  guess = mujoco.MjModel.from_xml_string(prob.model_xml())
  t0 = time.perf_counter()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", sysid.IdentifiabilityWarning)
    res = sysid.identify(guess_model(name, guess), [data["recording"]], list(prob.params),
                         bounds={p: (prob.lower, prob.upper) for p in prob.params}, device=device, out=None,
                         plots=False, progress=False, jacobian=jacobian)
  return {"wall": time.perf_counter() - t0, "theta": np.asarray(res.theta, float), "jacobian": res.jacobian,
          "nit": res.nit, "success": bool(res.success)}


def guess_model(name: str, mjm: mujoco.MjModel) -> mujoco.MjModel:
  """`mjm` with every unknown of problem `name` set to the initial guess."""
  prob = PROBLEMS[name]
  for p in prob.params:
    field, element = p.split(":")
    if field == "body_mass":
      mjm.body_mass[mjm.body(element).id] = prob.guess
    else:
      mjm.dof_armature[mjm.joint(element).dofadr[0]] = prob.guess
  return mjm


def write_cli_inputs(name: str, folder: str, data: dict) -> list[str]:
  """Writes problem `name`'s guess model (`<name>.xml`) and recording (`<name>.npz`) to `folder`;
  returns `diffsim sysid`'s positional arguments and flags for them."""
  from diffsim.data import save_npz

  prob = PROBLEMS[name]
  spec = mujoco.MjSpec.from_string(prob.model_xml())
  for p in prob.params:
    field, element = p.split(":")
    if field == "body_mass":
      spec.body(element).mass = prob.guess
    else:
      spec.joint(element).armature = prob.guess
  spec.compile()
  with open(os.path.join(folder, f"{name}.xml"), "w") as f:
    f.write(spec.to_xml())
  save_npz(os.path.join(folder, f"{name}.npz"), data["recording"])
  args = [f"{name}.xml", f"{name}.npz"]
  for p in prob.params:
    args += ["--param", p, "--bounds", f"{p}={prob.lower:g},{prob.upper:g}"]
  return args


def rel_error(name: str, theta) -> float:
  """Largest relative error of `theta` against problem `name`'s truth."""
  return float(np.max(np.abs(np.asarray(theta, float) / np.asarray(PROBLEMS[name].truth) - 1.0)))


def mjwarp_step_s(name: str, nworld: int, device="cpu", replays: int = 3000) -> float:
  """Wall time (s) of one `mujoco_warp.step` of problem `name`'s model for `nworld` worlds, replayed
  from a captured graph (median of 5 batches of `replays`): nothing of diffsim's, no host copies."""
  import mujoco_warp as mjw
  import warp as wp

  mjm = mujoco.MjModel.from_xml_string(PROBLEMS[name].model_xml())
  with wp.ScopedDevice(device):
    m, d = mjw.put_model(mjm), mjw.put_data(mjm, mujoco.MjData(mjm), nworld=nworld)
    mjw.step(m, d)  # kernels loaded before the capture
    with wp.ScopedCapture() as cap:
      mjw.step(m, d)
    times = []
    for _ in range(5):
      wp.synchronize()
      t0 = time.perf_counter()
      for _ in range(replays):
        wp.capture_launch(cap.graph)
      wp.synchronize()
      times.append((time.perf_counter() - t0) / replays)
  return float(np.median(times))
