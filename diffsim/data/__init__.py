"""Recorded trajectories for system identification: format, loading, validation, resampling.

A recording is one trajectory of `T` rows. Row `k` holds what was measured at `time[k]`; the control
`ctrl[k]` is applied from `time[k]` until `time[k + 1]`. The initial state of the simulation is
row 0: `qvel` from the file when present, else (`qvel0` if given, else) estimated from `qpos` by
finite differences and then solved for together with the parameters (`diffsim.sysid.identify`,
which can also refine a noisy initial position: `fit_qpos0=True`).

NPZ (`numpy.savez`), one trajectory per file, or several with a leading axis `N` on every key:

  ==============  ==================  =====================================================
  key             shape               meaning
  ==============  ==================  =====================================================
  `time`          `(T,)` or `(N, T)`  sample times, s, strictly increasing
  `ctrl`          `(T, nu)`           controls (MuJoCo `d.ctrl`); optional when `nu == 0`
  `qpos`          `(T, nq)`           joint positions (m, rad; quaternions w, x, y, z)
  `qvel`          `(T, nv)`           joint velocities (m/s, rad/s)
  `sensordata`    `(T, nsensordata)`  MuJoCo sensor outputs (`d.sensordata`)
  `act`           `(T, na)`           actuator activations (optional; used for the initial state)
  `qpos0`         `(nq,)`             initial positions when `qpos` is not recorded (optional)
  `qvel0`         `(nv,)`             initial velocities when `qvel` is not recorded (optional)
  ==============  ==================  =====================================================

At least one of `qpos`, `qvel`, `sensordata` must be present; all arrays have one row per time
sample. Columns follow the model's order (`mjm.jnt_qposadr`, `mjm.sensor_adr`, actuator ids).

CSV, one trajectory per file: a header row naming the columns, then one row per sample.
`time` is required; other columns are named after MuJoCo elements, with the kind as a prefix:
`ctrl:<actuator>`, `qpos:<joint>`, `qvel:<joint>`, `act:<actuator>`, `sensor:<sensor>`.
Elements with several values take an index: `qpos:<free joint>[3]` (its quaternion w),
`sensor:<framepos sensor>[2]` (z). A bare name is accepted when it names exactly one element
(an actuator means `ctrl`, a sensor `sensor`, a joint `qpos`); raw vector indices such as
`qpos[3]` or `ctrl[0]` also work. Every control column and, if any is given, every `qpos`
(`qvel`) column of the model must be present; any subset of sensors may be.

Sampling: sample times must be multiples of the model timestep `dt` after `time[0]` (e.g. a
50 Hz recording of a model with `timestep=0.002` is simulated with 10 steps per row; rows may be
irregular as long as each interval is a multiple of `dt`). An interval within 1e-5 (relative) of a
whole number of steps counts as that many (a timestep written with six digits), and `validate`
warns how far the simulation's clock then drifts from the recording's (`clock_drift`). Other
recordings can be put on such a grid with `resample` (CLI: `--resample`), which interpolates
measurements linearly and holds controls (a new time within 1% of a period of a recorded one takes
that sample's values and control). LeRobot datasets: `load_lerobot` (`diffsim.lerobot`).
One interval may span at most `MAX_STEPS_PER_SAMPLE` (500) model steps (1 s at
`timestep=0.002`): times in milliseconds instead of seconds give 1000 times the true count,
at least 1000, and would make identification run for hours, so validation refuses them. Data
that really are this sparse pass with `max_steps_per_sample=N` (`load`, `validate`,
`diffsim.sysid.identify`; CLI: `--max-steps-per-sample N`).

Sensor rows follow `mj_step`: the sensors of row `k` are those MuJoCo computes from the
state of row `k` with `ctrl[k]`. To record with MuJoCo C (or use `simulate`):

  for k in range(T):
    time[k], qpos[k], qvel[k] = d.time, d.qpos, d.qvel
    d.ctrl = ctrl[k]
    for i in range(substeps):
      mujoco.mj_step(m, d)
      if i == 0:
        sensordata[k] = d.sensordata  # computed from row k's state inside the first step

Where things are: `recording.py` (`Recording`, `DataError`, the checks that need no model),
`timing.py` (the step grid, clock drift, `resample`, `estimate_qvel`), `validation.py` (`validate`
against a model), `columns.py` (CSV column names), `files.py` (npz, CSV, atomic writes),
`synthetic.py` (`simulate`); `load_lerobot` is `diffsim.lerobot`'s.
"""

from .files import as_mjmodel as as_mjmodel
from .files import atomic_write as atomic_write
from .files import load as load
from .files import load_csv as load_csv
from .files import load_npz as load_npz
from .files import save_csv as save_csv
from .files import save_npz as save_npz
from .recording import PERIOD_RTOL as PERIOD_RTOL
from .recording import TIME_RTOL as TIME_RTOL
from .recording import DataError as DataError
from .recording import Recording as Recording
from .recording import initial_state_warning as initial_state_warning
from .synthetic import simulate as simulate
from .timing import clock_drift as clock_drift
from .timing import estimate_qvel as estimate_qvel
from .timing import resample as resample
from .timing import sim_steps as sim_steps
from .validation import MAX_STEPS_PER_SAMPLE as MAX_STEPS_PER_SAMPLE
from .validation import group_messages as group_messages
from .validation import validate as validate

__all__ = ["Recording", "DataError", "load", "load_npz", "load_csv", "load_lerobot", "save_npz", "save_csv",
           "validate", "resample", "sim_steps", "clock_drift", "group_messages", "simulate", "estimate_qvel",
           "MAX_STEPS_PER_SAMPLE",
           "initial_state_warning"]


def __getattr__(name: str):
  # diffsim.data.load_lerobot lives in diffsim.lerobot, which builds on this package's modules: imported on first use
  if name == "load_lerobot":
    from ..lerobot import load_lerobot

    return load_lerobot
  raise AttributeError(f"module 'diffsim.data' has no attribute {name!r}")
