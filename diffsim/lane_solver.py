"""The perturbation lanes' constraint solve: no lane stops before its nominal world or its partner.

Finite-difference lanes need their nominal world's solver path, not a tolerance of zero: a lane that
stops an iteration before its neighbours differs from them by the solver's residual, noise in the
difference. `SolverSettings(lanes="tolerance")` solves every lane at tolerance 0, so each runs until
its line search stalls or the iteration limit, which in float32 costs several times the iterations a
converged solve needs (the SO-101: 10.2 against 2.0 per step).

With `SolverSettings(lanes="nominal")` (the default `"auto"` takes it where the MJCF allows more than
10 solver iterations) every world of the lanes' batch, nominal
(lane 0, world ids `0 .. nworld - 1`) and perturbed alike, solves at `FOLLOW_TOLERANCE` (1e-12, far
below float32's resolution: a world stops once another iteration would not change its solution),
and after each Newton iteration a lane world that has stopped is set going again while its nominal
world, or the other side of its central difference (lanes `1 + 2c` and `2 + 2c`), still iterates:
each lane runs at least its nominal world's iterations, the two sides of a difference the same
number, and more where they need them.

Each part measured (CPU, MJWarp's test models, lane gradients against float64 MuJoCo C, each rule
over 5 draws of the inputs nudged by a few float32 ulps, since one draw moves by tens of percent):
  - the nominal world at 1e-12, not the MJCF's tolerance (which MJWarp floors at 1e-6 for float32):
    the looser nominal moves the linearization point; the humanoid's control error then moved by
    -38..+59% from tolerance 0's per draw, at 1e-12 within 3% of it on every draw;
  - the pairs: sides that stop at different iterations leave their residuals' difference in the
    column; actuation.xml's control error (every lane at its 4-iteration cap at tolerance 0) is
    1.6e-5 without (median; 1.2e-5 at 0), 1.1e-5 with;
  - not exactly the nominal's count (issue 27's first idea): Newton converges in one iteration where
    the active constraint set does not change, and a lane whose perturbation changes it (a friction
    row sticking or slipping) needs another; stopped with its nominal world after one, a column of
    the SO-101's control Jacobian was off by 1.1 at one step, 2.5e-2 of the gradient;
  - not a tighter tolerance (1e-16): the same gradients on small models, but the SO-101's lanes run
    7.2 iterations a step instead of 2.1, no faster than at 0.
The sweep (`benchmarks/bench_contact_gradients.py --lanes nominal|tolerance`) and the speed-up
(`benchmarks/bench_lanes.py`, SO-101 4.4x) are summed up in `scene.SolverSettings`.

Why not everywhere (`"auto"` keeps tolerance 0 at a cap of 10 iterations or fewer): on models whose
MJCF caps the solver at a few iterations (constraints.xml, actuation.xml: 4) MuJoCo C at tolerance
0, the reference, runs every step to the cap, and so do the tolerance-0 lanes. A nominal world
stopping at 1e-12 leaves that path (constraints.xml's qvel0 error 1.6e-2 against 1.2e-2, mean of 5
draws); the nominal at 0 follows it (1.2e-2) but, on the SO-101, holds the whole batch's loop to the
iteration limit (1.6x, not 4.4x); the nominal at 0 stopping with its last lane costs nothing there
(4.7x) and tracks C on constraints.xml, but actuation's lanes, which stop before the cap, then err
more on 5 draws of 5 (qvel0 2.5e-5 against 2.1e-5). The cap bounds what tolerance 0 costs there.

MJWarp 4.0 has no per-world iteration limit, so `solve_following` is MJWarp's Newton solve
(`mujoco_warp/_src/solver.py`, `solve` and `_solve`, for the Euler and implicit integrators without
sleeping bodies, the case `physics.Physics` runs) with one kernel added to its iteration loop; it
calls MJWarp's private solver stages (`tests/test_lane_solver.py` checks it against `mjw.solve`).
The CG solver is not covered: it updates its search direction after the stopping test, so a world
set going again would search along a stale direction; its lanes run at tolerance 0.

Also here: the lanes' actuation kinks (`actuation_side`, `kink_name`), the clamps of MJWarp's
`fwd_actuation` on whose sides a world's lanes must agree (`step._constraint_signature`).
"""

from __future__ import annotations

import mujoco
import warp as wp

__all__ = ["FOLLOW_TOLERANCE", "follows", "solve_following", "actuation_side", "kink_name"]

# the solver tolerance of the lanes' batch (nominal worlds included) when they follow their nominal world
FOLLOW_TOLERANCE = 1e-12


@wp.kernel
def _no_lane_before_nominal(
  nworld: int,
  pairs: bool,
  iterations: int,
  # In:
  niter: wp.array[int],  # (nlane * nworld,) the solver's per-world iteration count
  # In/out:
  done: wp.array[bool],  # (nlane * nworld,) the solver's per-world "stopped"
  nsolving: wp.array[int],  # (1,) worlds still iterating
):
  lane_world = nworld + wp.tid()  # launched over the lane worlds only
  if not done[lane_world] or niter[lane_world] >= iterations:
    return
  world = lane_world % nworld
  going = not done[world]
  if pairs:
    # lanes 1 + 2c and 2 + 2c are the two sides of a central difference
    lane = lane_world / nworld
    partner = lane + 1
    if lane % 2 == 0:
      partner = lane - 1
    if partner * nworld < done.shape[0]:
      going = going or not done[partner * nworld + world]
  if going:
    done[lane_world] = False
    wp.atomic_add(nsolving, 0, 1)


def follows(m) -> bool:
  """Whether `solve_following` covers MJWarp `Model` `m`'s solver (Newton; see the module docstring)."""
  from mujoco_warp import SolverType

  return m.opt.solver == SolverType.NEWTON


def solve_following(m, d, nworld: int, pairs: bool = False) -> None:
  """`mjw.solve(m, d)` where no world `w + lane * nworld` (lane >= 1) stops before world `w`, nor,
  with `pairs`, before world `w + partner * nworld`, its partner lane (lanes `1 + 2c` and `2 + 2c`).

  Args:
    m: MJWarp `Model` with the Newton solver (`follows`) whose `opt.tolerance` has one entry per
      world (`(d.nworld,)`: the nominal worlds', then the lanes'), Euler or implicit integrator, no
      sleeping bodies.
    d: MJWarp `Data` of `nlane * nworld` worlds, lane-major.
    nworld: worlds per lane.
    pairs: the lanes are central differences' pairs, which stop together.
  """
  from mujoco_warp._src import smooth, solver, types

  ctx = solver._create_solver_context(m, d, inplace_cholesky=True)
  nlanes = d.nworld - nworld

  def follow(nsolving):
    if nlanes > 0:
      wp.launch(_no_lane_before_nominal, dim=nlanes, inputs=[nworld, pairs, m.opt.iterations, d.solver_niter],
                outputs=[ctx.done, nsolving])

  def iteration(m, d, ctx, nsolving, compact=False):
    solver._solver_iteration(m, d, ctx, nsolving, compact=compact)
    follow(nsolving)

  # MJWarp's `_solve` from here, with `follow` in its loop
  warmstart = not (m.opt.disableflags & types.DisableBit.WARMSTART)
  wp.launch(
    solver._solve_init_dof(warmstart, m.is_sparse, not smooth.skip_qacc_smooth(m, d)),
    dim=(d.nworld, m.nv),
    inputs=[d.nefc, d.qacc_warmstart, d.qacc_smooth],
    outputs=[d.qacc, d.qfrc_constraint],
  )
  solver.init_context(m, d, ctx, grad=False)
  solver._update_gradient(m, d, ctx)
  if solver._use_incremental(m):
    ctx.search_unchanged.zero_()
  nsolving = wp.full(shape=(1,), value=d.nworld, dtype=int)
  if m.opt.iterations != 0 and m.opt.graph_conditional:
    wp.capture_while(nsolving, while_body=iteration, m=m, d=d, ctx=ctx, nsolving=nsolving)
  else:
    for _ in range(m.opt.iterations):
      iteration(m, d, ctx, nsolving)
  if solver._use_incremental(m):
    wp.launch(
      solver._qfrc_constraint_from_grad,
      dim=(d.nworld, m.nv),
      inputs=[d.qfrc_smooth, d.efc.Ma, ctx.grad, ctx.grad_scale],
      outputs=[d.qfrc_constraint],
    )
  if m.opt.noslip_iterations > 0:
    solver.noslip(m, d)


# The lanes' actuation kinks (`step._constraint_signature`): MJWarp's `fwd_actuation` clamps, on
# whose sides the lanes of a world must agree for a difference to be a derivative.
_TRN_TENDON = int(mujoco.mjtTrn.mjTRN_TENDON)


@wp.func
def _clamp_side(f: float, lo: float, hi: float) -> int:
  """Which side of a clamp's kinks `f` sits on: 1 at or below `lo`, 2 at or above `hi`, 3 between."""
  return wp.where(f <= lo, 1, wp.where(f >= hi, 2, 3))


@wp.func
def actuation_side(
  i: int, lw: int,
  dof_jntid: wp.array[int], jnt_actfrclimited: wp.array[bool], jnt_actfrcrange: wp.array2d[wp.vec2],
  actuator_trntype: wp.array[int], actuator_trnid: wp.array[wp.vec2i], actuator_forcelimited: wp.array[bool],
  actuator_forcerange: wp.array2d[wp.vec2], tendon_actfrclimited: wp.array[bool],
  tendon_actfrcrange: wp.array2d[wp.vec2],
  actuator_force_in: wp.array2d[float], qfrc_actuator_in: wp.array2d[float],
) -> int:
  """`_clamp_side` of lane world `lw`'s actuation kink `i` (0: not clamped): actuator `i`'s
  forcerange (`i < nu`), dof `i - nu`'s joint actuatorfrcrange (`< nu + nv`), else tendon
  `i - nu - nv`'s actuatorfrcrange, MJWarp's `fwd_actuation` clamps."""
  nu = actuator_force_in.shape[1]
  nv = qfrc_actuator_in.shape[1]
  if i < nu:
    if actuator_forcelimited[i]:
      r = actuator_forcerange[lw % actuator_forcerange.shape[0], i]
      return _clamp_side(actuator_force_in[lw, i], r[0], r[1])
  elif i < nu + nv:
    j = dof_jntid[i - nu]
    if jnt_actfrclimited[j]:
      r = jnt_actfrcrange[lw % jnt_actfrcrange.shape[0], j]
      return _clamp_side(qfrc_actuator_in[lw, i - nu], r[0], r[1])
  else:
    t = i - nu - nv
    if tendon_actfrclimited[t]:
      f = float(0.0)
      for u in range(nu):
        if actuator_trntype[u] == _TRN_TENDON and actuator_trnid[u][0] == t:
          f += actuator_force_in[lw, u]
      r = tendon_actfrcrange[lw % tendon_actfrcrange.shape[0], t]
      # the clamp scales the tendon's actuators to sum to the bound, equal up to rounding (MJWarp's
      # `_tendon_actfrc_clamped` tolerance)
      return _clamp_side(f, r[0] + 1e-5 * wp.abs(r[0]), r[1] - 1e-5 * wp.abs(r[1]))
  return 0


def kink_name(mjm: mujoco.MjModel, code: int) -> str:
  """What a `kinks` code (1 + `actuation_side`'s `i`, > 0) names in `mjm`, e.g. "the force clamp
  (forcerange) of actuator 'motor'"."""
  i = code - 1
  what, kind, obj, idx = "force clamp (forcerange)", "actuator", mujoco.mjtObj.mjOBJ_ACTUATOR, i
  if i >= mjm.nu + mjm.nv:
    what, kind, obj, idx = "actuator force clamp (actuatorfrcrange)", "tendon", mujoco.mjtObj.mjOBJ_TENDON, \
      i - mjm.nu - mjm.nv
  elif i >= mjm.nu:
    what, kind, obj, idx = "actuator force clamp (actuatorfrcrange)", "joint", mujoco.mjtObj.mjOBJ_JOINT, \
      mjm.dof_jntid[i - mjm.nu]
  name = mujoco.mj_id2name(mjm, obj, int(idx)) or f"#{int(idx)}"
  return f"the {what} of {kind} '{name}'"
