"""MuJoCo Warp's step and forward as diffsim runs them: the constraint solver only where a world has
constraint rows.

MJWarp runs its Newton/CG solver on every world and step whenever the model *can* have constraint
rows (`njmax > 0`: a limited joint, a contact pair, an equality), even where none is active, and at
diffsim's zero tolerance (`SolverSettings`) it iterates until its line search stalls. MuJoCo C skips
the solver where `nefc == 0` (`qacc = qacc_smooth`). `Physics` does the same per world, on the CPU:

  - the stages before the solver, as `mjw.step` runs them (public MJWarp functions);
  - `qacc_smooth = M^-1 qfrc_smooth`, where some world has no rows, and the solver, where some world
    has rows, each behind a graph conditional (`wp.capture_if`), so a batch without rows runs no
    solver kernel and a batch with rows in every world runs no extra solve;
  - worlds without rows take `qacc_smooth`, `qfrc_constraint = 0`, `efc.Ma = M qacc` (the
    integrators' right-hand side) and `solver_niter = 0`, as in MuJoCo C: a world's step no longer
    depends on whether another world of its batch touches a limit, and worlds with rows get the
    solver's result bit for bit (`tests/test_physics.py`);
  - sensors and the integrator, as `mjw.step` runs them.

Not covered, where `mjw.step` / `mjw.forward` run unchanged: CUDA devices (the solver allocates its
workspace inside the step, and a CUDA graph's conditional body cannot allocate), the RK4 and discrete
integrators, sleeping trees and control callbacks. What it saves, and what it costs where it saves
nothing (a flag kernel per step; where only some worlds lack rows, the smooth solve of every world,
as MJWarp's factorization takes no per-world mask: a few percent on the contact-rich humanoid):
`benchmarks/bench_rollout.py`'s "diffsim vs raw `mjw.step`" column (same start and controls,
alternately timed).

`Physics(..., tolerance=)` steps at another solver tolerance than the model's: the perturbation
lanes run at `Scene.lane_tolerance` (0; 1e-12 with `lanes="nominal"`, `lane_solver`) where
forward-only rollouts share the same MJWarp `Model` at the MJCF's (`SolverSettings`). MJWarp's solver
reads `opt.tolerance` from a `(1,)` array at run time, so `Physics` swaps its own array into the
model's options while it launches, and a graph captured meanwhile keeps pointing at it when replayed.
"""

from __future__ import annotations

import contextlib

import warp as wp

__all__ = ["Physics", "skips_solver"]


@wp.kernel
def _row_flags(
  # Data in:
  nefc_in: wp.array[int],
  # Out:
  any_rows_out: wp.array[int],
  any_free_out: wp.array[int],
):
  worldid = wp.tid()
  if nefc_in[worldid] > 0:
    any_rows_out[0] = 1
  else:
    any_free_out[0] = 1


@wp.kernel
def _unconstrained_worlds(
  # Data in:
  nefc_in: wp.array[int],
  qacc_smooth_in: wp.array2d[float],
  # In:
  m_qacc_smooth: wp.array2d[float],
  # Data out:
  qacc_out: wp.array2d[float],
  qfrc_constraint_out: wp.array2d[float],
  efc_Ma_out: wp.array2d[float],
  solver_niter_out: wp.array[int],
):
  worldid, dofid = wp.tid()
  if nefc_in[worldid] > 0:
    return
  qacc_out[worldid, dofid] = qacc_smooth_in[worldid, dofid]
  qfrc_constraint_out[worldid, dofid] = 0.0
  efc_Ma_out[worldid, dofid] = m_qacc_smooth[worldid, dofid]
  if dofid == 0:
    solver_niter_out[worldid] = 0


def skips_solver(model, data) -> bool:
  """Whether `Physics` runs its own step for this MJWarp `model` and `data` (else `mjw.step`)."""
  from mujoco_warp import EnableBit, IntegratorType

  return (data.qacc.device.is_cpu and data.njmax > 0 and model.nv > 0
          and model.opt.integrator in (IntegratorType.EULER, IntegratorType.IMPLICITFAST, IntegratorType.IMPLICIT)
          and not model.opt.enableflags & EnableBit.SLEEP and model.callback.control is None)


class Physics:
  """`mjw.step` and `mjw.forward` of one MJWarp `Data` (see the module docstring).

  Args:
    model: MJWarp `Model`.
    data: MJWarp `Data` (`nworld` worlds); its scratch (`(nworld, nv)` floats) is allocated here, once.
    tolerance: float array, the solver tolerance to run at instead of `model.opt.tolerance` (None:
      the model's): `(1,)`, or one per world (`(nworld,)`).
    follow: perturbation lanes: with `follow = n` worlds per lane, no world of lanes 1, 2, ... stops
      its constraint solve before its lane-0 world (`lane_solver.solve_following`; the own step only,
      see `skips_solver`); 0: every world stops on its own.
    pairs: with `follow`, lanes `1 + 2c` and `2 + 2c` (a central difference's two sides) stop together.
  """

  def __init__(self, model, data, tolerance: wp.array | None = None, follow: int = 0, pairs: bool = False):
    self.model, self.data = model, data
    self.tolerance = tolerance
    self.follow = follow
    self.pairs = pairs
    self.own = skips_solver(model, data)
    # MJWarp 4.0 builds connect and weld rows from the `cvel` and `cdof_dot` its Data holds (the previous
    # step's, at a rollout's first step whatever the Data last saw); MuJoCo C from the state's own
    self.fresh_velocities = model.eq_connect_adr.shape[0] + model.eq_wld_adr.shape[0] > 0
    if self.own:
      dev = data.qacc.device
      self._any_rows = wp.zeros(1, dtype=int, device=dev)
      self._any_free = wp.zeros(1, dtype=int, device=dev)
      self._m_qacc = wp.zeros((data.nworld, model.nv), dtype=float, device=dev)

  def step(self) -> None:
    """One `mjw.step`: forward dynamics, then the integrator."""
    import mujoco_warp as mjw

    m, d = self.model, self.data
    self._refresh_velocities()
    with self._options():
      if not self.own:
        mjw.step(m, d)
        return
      self._forward()
      if m.opt.integrator == mjw.IntegratorType.EULER:
        mjw.euler(m, d)
      else:
        mjw.implicit(m, d)

  def forward(self) -> None:
    """One `mjw.forward`: positions, velocities, forces, accelerations and sensors, no integration."""
    import mujoco_warp as mjw

    self._refresh_velocities()
    with self._options():
      if not self.own:
        mjw.forward(self.model, self.data)
        return
      self._forward()

  def _refresh_velocities(self) -> None:
    """The state's own `cvel` and `cdof_dot` for the connect and weld rows (see `__init__`)."""
    if self.fresh_velocities:
      from mujoco_warp._src import smooth

      smooth.kinematics(self.model, self.data)
      smooth.com_pos(self.model, self.data)
      smooth.com_vel(self.model, self.data)

  @contextlib.contextmanager
  def _options(self):
    """The model's options with this `Physics`' tolerance while launching (see the module docstring)."""
    opt = self.model.opt
    if self.tolerance is None or opt.tolerance is self.tolerance:
      yield
      return
    own = opt.tolerance
    opt.tolerance = self.tolerance
    try:
      yield
    finally:
      opt.tolerance = own

  def _forward(self) -> None:
    # mjw.forward's stages (mujoco_warp/_src/forward.py `_forward`) with the solver per world
    import mujoco_warp as mjw

    m, d = self.model, self.data
    mjw.fwd_position(m, d, factorize=False)
    d.sensordata.zero_()
    mjw.sensor_pos(m, d)
    energy = bool(m.opt.enableflags & mjw.EnableBit.ENERGY)
    if energy and not m.sensor_e_potential:
      mjw.energy_pos(m, d)
    elif not energy:
      d.energy.zero_()
    mjw.fwd_velocity(m, d)
    mjw.sensor_vel(m, d)
    if energy and not m.sensor_e_kinetic:
      mjw.energy_vel(m, d)
    mjw.fwd_actuation(m, d)
    mjw.fwd_acceleration(m, d, factorize=True)

    self._any_rows.zero_()
    self._any_free.zero_()
    wp.launch(_row_flags, dim=d.nworld, inputs=[d.nefc], outputs=[self._any_rows, self._any_free])
    if self.follow:
      from .lane_solver import solve_following

      wp.capture_if(self._any_rows, on_true=lambda: solve_following(m, d, self.follow, self.pairs))
    else:
      wp.capture_if(self._any_rows, on_true=lambda: mjw.solve(m, d))
    wp.capture_if(self._any_free, on_true=self._smooth_acceleration)

    if m.opt.run_rne_postconstraint or (not m.opt.disableflags & mjw.DisableBit.SENSOR and m.sensor_rne_postconstraint):
      mjw.rne_postconstraint(m, d)
    mjw.sensor_acc(m, d, skip_rne_postconstraint=True)

  def _smooth_acceleration(self) -> None:
    # MJWarp's Newton solver computes qacc_smooth only inside its iterations: solve M qacc = qfrc_smooth
    import mujoco_warp as mjw

    m, d = self.model, self.data
    mjw.factor_m(m, d)
    mjw.solve_m(m, d, d.qacc_smooth, d.qfrc_smooth)
    mjw.mul_m(m, d, self._m_qacc, d.qacc_smooth)
    wp.launch(_unconstrained_worlds, dim=(d.nworld, m.nv), inputs=[d.nefc, d.qacc_smooth, self._m_qacc],
              outputs=[d.qacc, d.qfrc_constraint, d.efc.Ma, d.solver_niter])
