"""The analytic adjoint of the MJWarp step: reverse mode through diffsim's own smooth dynamics.

MJWarp runs the forward step (one MJWarp world per world, no perturbation lanes) and diffsim keeps
each step's state and the acceleration `a` MJWarp's constraint solver returned. The backward pass
replays, step by step in reverse, diffsim's re-implementation of the step in kernels that Warp can
differentiate (one thread per world, tree walks through arrays, no loop-carried locals, nothing
written twice) and pushes the incoming adjoint through them. The step, as MuJoCo's Euler and
implicitfast integrators take it:

  r(a)   = tau_ID(q, v, a) - f(q, v, w, u, p, a) = 0           (the constraint solve, converged)
  (M + h B) a_e = M a                                          (B: implicitly integrated velocity terms)
  v' = v + h a_e,   q' = q (+) h v',   w' = w + h w_dot(w, u)

`tau_ID = M a + c(q, v)` is inverse dynamics (recursive Newton-Euler at a fixed acceleration), `f` the
actuator, passive and constraint forces (joint limits of hinges, slides and ball joints, tendon
limits, dof and tendon friction, joint, connect and weld equalities, contacts: rows whose force is
`-D (J a - aref)` in the quadratic regime, a constant in the linear one), `B` the dof damping
(Euler; none when `eulerdamp` is off) or minus implicitfast's `qDeriv` (damping and the actuators'
velocity gains; on a free body, a tree of one free joint, also its bias force's velocity derivative,
the gyroscopic term, which makes that 6 x 6 block unsymmetric). By the implicit function theorem two
dense solves per step,

  (M + h B)^T mu = a_bar_e,     (M + J^T D J) lambda = -J^T D J mu,

give every upstream adjoint as the reverse pass of the replayed kernels seeded `-mu` on
`tau_ID(a_e) + h B a_e`, `-lambda` on `tau_ID(a)` and `mu + lambda` on `f`. The solver's iterations
are never replayed; without constraint rows `lambda = 0`. Acceleration-stage sensors (accelerometer,
touch, force, torque) read `a` itself: their adjoint of `a` joins the second right-hand side. The integrator's vector-Jacobian product
is written by hand (the quaternion exponential's right Jacobian for ball and free joints).

The replayed forward values equal MJWarp's to float32 rounding (`tests/test_adjoint.py`). Coverage
is checked up front (`analytic_coverage`): a model feature the adjoint does not differentiate
(the noslip solver, flexes, adhesion, ...) makes `gradient="auto"` fall back to the
finite-difference lanes, and `gradient="analytic"` an error that names it. Contact rows join the same
constraint solve, their Jacobians rebuilt from the frozen contact set (`contacts.py`).

One file per stage:

  coverage.py     `analytic_coverage`: what the adjoint covers (reads the MjModel only)
  spatial.py      quaternion and spatial-algebra Warp functions
  kinematics.py   frames, com, cinert, cdof, velocities, site frames
  dynamics.py     recursive Newton-Euler, passive forces, damping and free-body gyroscopic terms
  actuation.py    actuator forces, activation dynamics, actuator velocity gains
  tendons.py      tendon lengths, Jacobians, springs, dampers and armature, limit and friction rows; tendon and
                  site transmissions (`TendonRows`, `record_transmissions`)
  wraps.py        tendon stretches wrapping around spheres and cylinders
  sensors.py      the covered sensors
  constraints.py  `_kbimp`, joint-limit, dof-friction and joint-equality rows (`record_rows`)
  ball_limits.py  ball-joint limit rows (`record_ball_limits`)
  equalities.py   connect and weld rows (`EqualityRows`), their `J^T D J` after the segment ran
  contact_geometry.py  the frozen contact set's points, frames and distances as functions of `qpos`
  contacts.py     contact rows of the frozen contact set (`ContactRows`)
  cones.py        elliptic cones: the solver's zones and the cone's Hessian block
  invweight.py    inertial parameters through the rows' softness (`body_invweight0`, `dof_invweight0`)
  solve.py        mass matrix, Cholesky, damped acceleration, free-body 6 x 6 solves, integrator VJP,
                  the constraint adjoint (IFT)
  program.py      `_Program`: the replay's recorded launches, forward and reverse
  step.py         `AnalyticStep`: rebuild, replay, backward
  jacobian.py     `AnalyticJacobian`: whole step and sensor Jacobians, one reverse sweep per row
  tiled.py        `TiledReplay`: a step replayed on copies of the worlds, its sweeps in one reverse pass

`AnalyticStep` and `AnalyticJacobian` are imported on first use, so `analytic_coverage` (which `Scene` asks) loads no kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .coverage import COVERED_PARAM_FIELDS as COVERED_PARAM_FIELDS
from .coverage import analytic_coverage as analytic_coverage

__all__ = ["AnalyticJacobian", "AnalyticStep", "analytic_coverage", "COVERED_PARAM_FIELDS"]


def __getattr__(name: str):
  if name == "AnalyticStep":
    from .step import AnalyticStep

    return AnalyticStep
  if name == "AnalyticJacobian":
    from .jacobian import AnalyticJacobian

    return AnalyticJacobian
  raise AttributeError(f"module 'diffsim.adjoint' has no attribute {name!r}")


if TYPE_CHECKING:
  from .step import AnalyticStep as AnalyticStep
