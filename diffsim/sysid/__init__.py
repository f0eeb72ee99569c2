"""System identification: model parameters that make MJWarp reproduce recorded trajectories.

`identify(model, data, params)` fits named model parameters (`"body_mass:ball"`,
`"dof_damping:slide"`, ...) to recordings (see `diffsim.data` for the format) by minimizing

  cost = 0.5 |r|^2,   r = W (simulated - measured),

over every sample of every recording (`qpos` residuals in the tangent space, so quaternions work).
Each recording, or with multiple shooting each segment of one, runs in its own MJWarp world; all
worlds share one parameter set, and several initial guesses (multi-start) run side by side in more
worlds. Initial velocities that were not measured (and, with `fit_qpos0`, noisy initial positions)
are unknowns too, solved for with the parameters; each world's block of them is eliminated from the
normal equations on its own (Schur complement), so thousands of shooting segments stay cheap.

Where each part lives:
  - `identify.py`: `identify`, the entry point: checks, problem, solver, result.
  - `parameters.py`: parsing `"field:element"`, checks on the host model, labels, initial guesses.
  - `worlds.py`: recordings into worlds (segments, controls, measurements, residual weights) and the
    layout of the unknowns (parameters, then the initial states solved for).
  - `problem.py`: `Problem`, the worlds on the device: rollouts, residuals, their Jacobian
    (`"forward"`, `"directional"`, `"tape"`) and the cost's gradient, replayed from captured graphs.
  - `residuals.py`: its Warp kernels.
  - `normal.py`: the normal equations in block-arrow form, solved by the Schur complement.
  - `lm.py`: Levenberg-Marquardt and its convergence test at constraint switches (the default);
    `adam.py`: Adam with tape gradients (many parameters).
  - `confidence.py`: covariance, std and identifiability warnings.
  - `result.py`: `SysIdResult` and saving it; `mjcf.py`: the identified model as MJCF.

Precision: MJWarp simulates in float32 and the Jacobians are forward differences. On noise-free
float64 MuJoCo data the parameters come back to float32 resolution on smooth systems, and
`frictionloss`, a non-smooth constraint force, and recordings that reach joint limits less
closely; `tests/test_sysid.py`, `tests/test_sysid_limits.py` and `benchmarks/bench_sysid.py`
(results in `benchmarks/results/cpu.md`) measure how closely, and against `mujoco.sysid`.
"""

from .confidence import IdentifiabilityWarning as IdentifiabilityWarning
from .identify import identify as identify
from .mjcf import identified_spec as identified_spec
from .mjcf import write_mjcf as write_mjcf
from .parameters import parse_param as parse_param
from .result import SysIdResult as SysIdResult

__all__ = [
  "identify",
  "SysIdResult",
  "IdentifiabilityWarning",
  "identified_spec",
  "write_mjcf",
  "parse_param",
]
