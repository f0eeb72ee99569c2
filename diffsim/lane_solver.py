"""The perturbation lanes' constraint solve: no lane stops before its nominal world.

Finite-difference lanes need their nominal world's solver path, not a tolerance of zero: a lane that
stops an iteration before its neighbours differs from them by the solver's residual, noise in the
difference. diffsim's default solves every lane at tolerance 0, so each runs until its line search
stalls or the iteration limit, which in float32 costs several times the iterations a converged solve
needs (the SO-101: 10.2 against 2.0 per step).

With `SolverSettings(lanes="nominal")` the nominal worlds (lane 0, world ids `0 .. nworld - 1`)
solve at the model's own tolerance and every other lane at `FOLLOW_TOLERANCE` (1e-12, far below
float32's resolution: a lane stops once another iteration would not change its solution), and after
each Newton iteration a lane world that stopped while its nominal world goes on is set going again:
each lane runs at least its nominal world's iterations, and more where it needs them.

Why not exactly the nominal's count (issue 27's first idea, measured): Newton converges in one
iteration where the active constraint set does not change, and a lane whose perturbation changes it
(a friction row sticking or slipping) needs another; stopped with its nominal world after one, that
lane's column of the SO-101's control Jacobian was off by 1.1 at one step, 2.5e-2 of the gradient.

Nor every lane of a world stopping together once all have converged (measured too): over 10
constraint models of MJWarp's test set its gradient errors were further from tolerance 0's (pendula
3.1e-3 against 1.7e-3) than those of the rule above (1.9e-3; `benchmarks/bench_contact_gradients.py
--lanes nominal`, results `contact_gradients_lanes-*_cpu.md`).

MJWarp 4.0 has no per-world iteration limit, so `solve_following` is MJWarp's Newton solve
(`mujoco_warp/_src/solver.py`, `solve` and `_solve`, for the Euler and implicit integrators without
sleeping bodies, the case `physics.Physics` runs) with one kernel added to its iteration loop; it
calls MJWarp's private solver stages (`tests/test_lane_solver.py` checks it against `mjw.solve`).
The CG solver is not covered: it updates its search direction after the stopping test, so a world
set going again would search along a stale direction.
"""

from __future__ import annotations

import warp as wp

__all__ = ["FOLLOW_TOLERANCE", "follows", "solve_following"]

# the lanes' solver tolerance when they follow their nominal world
FOLLOW_TOLERANCE = 1e-12


@wp.kernel
def _no_lane_before_nominal(
  nworld: int,
  # In/out:
  done: wp.array[bool],  # (nlane * nworld,) the solver's per-world "stopped"
  nsolving: wp.array[int],  # (1,) worlds still iterating
):
  lane_world = nworld + wp.tid()  # launched over the lane worlds only
  if done[lane_world] and not done[lane_world % nworld]:
    done[lane_world] = False
    wp.atomic_add(nsolving, 0, 1)


def follows(m) -> bool:
  """Whether `solve_following` covers MJWarp `Model` `m`'s solver (Newton; see the module docstring)."""
  from mujoco_warp import SolverType

  return m.opt.solver == SolverType.NEWTON


def solve_following(m, d, nworld: int) -> None:
  """`mjw.solve(m, d)` where no world `w + lane * nworld` (lane >= 1) stops before world `w`.

  Args:
    m: MJWarp `Model` with the Newton solver (`follows`) whose `opt.tolerance` has one entry per
      world (`(d.nworld,)`: the nominal worlds', then the lanes'), Euler or implicit integrator, no
      sleeping bodies.
    d: MJWarp `Data` of `nlane * nworld` worlds, lane-major.
    nworld: worlds per lane.
  """
  from mujoco_warp._src import smooth, solver, types

  ctx = solver._create_solver_context(m, d, inplace_cholesky=True)
  nlanes = d.nworld - nworld

  def follow(nsolving):
    if nlanes > 0:
      wp.launch(_no_lane_before_nominal, dim=nlanes, inputs=[nworld], outputs=[ctx.done, nsolving])

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
