"""`AnalyticJacobian`: the analytic step's Jacobians, for the solvers that need whole matrices (iLQR,
Gauss-Newton system identification) rather than one gradient.

Right after MJWarp takes step `k`, the step is replayed once (`AnalyticStep.replay`: the smooth
dynamics at the solver's acceleration, the frozen contact set) and its reverse pass is run once per
output row, seeded with a unit vector:

  row i of J_k = [A B P]_i     reverse pass seeded e_i on the next velocity or activation
  row s of S_k = [C D Q]_s     reverse pass of the sensors' segment seeded e_s on the sensors

The position rows need no sweep: `q' = q (+) h v'` makes them the velocity rows mapped through the
integrator, `dq' = dq + h dv'` (hinges, slides, free translations) and `dq' = R^T dq + h Jr dv'`
(rotations in the tangent space, `R = exp(h w')`, `Jr` the exponential's right Jacobian).
Joint position and velocity sensors of hinges and slides need none either (their rows select a
state coordinate), and the inertial parameters' path through the rows' softness (`invweight.py`,
the same linear map in every sweep) is formed once per rollout, as a matrix, not replayed per row.
At most `nv + na + nsensordata` sweeps of the replay's adjoint per step: no perturbed worlds, and each column
holds exactly what the tape gradient would give (the implicit function theorem at the solver's
solution, across contact, limit and cone rows), so iLQR and Gauss-Newton see the same derivative
as L-BFGS. Where the batch is small (`nsweep * nworld <= BATCH_WORLDS`), where a sweep costs its
launches rather than its arithmetic, the step is replayed on `nsweep` copies of the worlds and all
its sweeps run as one reverse pass, a seed per copy (`tiled.py`; the same numbers, bit for bit); the
worlds' contacts are collided once and tiled to every copy (`ContactRows.tile`).
The layout matches the lanes' (`step.FiniteDifferenceStep`): `z = [dqpos (nv, tangent),
qvel (nv), act (na), ctrl (nu), theta (nparam)]`, `J` `(nworld, nstep, nx, nz)`, `S`
`(nworld, nstep + 1, ns, nz)`; control columns stay zero when the Rollout forms none.
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

from ..joints import FREE, HINGE, SLIDE, tangent_grad
from ..mjmodel import reads_body_invweight
from .solve import _right_jacobian_t, _rotation

__all__ = ["AnalyticJacobian", "BATCH_WORLDS", "sweep_count"]

# the most worlds a tiled replay may have (`AnalyticJacobian(batch_worlds=)`): a step's sweeps are one
# reverse pass (on a model without contacts) while `nsweep * nworld` stays within it, where launches,
# not arithmetic, set a sweep's cost (mujoco.sysid's arm test, 5 sweeps, 200 captured steps, one core:
# 0.70x the time of one pass per row at 1 world, 0.87x at 2, 0.98x at 4; two passes of fewer copies
# lost to one per row)
BATCH_WORLDS = 16


@wp.kernel(enable_backward=False)
def _load_next(
  # In:
  k: int,
  count: wp.array[int],
  qvel: wp.array3d[float],  # (nworld, nstep + 1, nv) trajectory velocities
  # Out:
  qvel_out: wp.array3d[float],  # (nworld, 2, nv): slot 1 holds the step's next velocity
):
  w, i = wp.tid()
  qvel_out[w, 1, i] = qvel[w % qvel.shape[0], k + count[0] + 1, i]  # a tiled replay's copies read their world


@wp.kernel(enable_backward=False)
def _unit_state(
  # In:
  row: int,
  # Out:
  lam_out: wp.array3d[float],  # (nworld, 2, nx): slot 1 is the next state's adjoint
):
  w, i = wp.tid()
  lam_out[w, 1, i] = wp.where(i == row, 1.0, 0.0)


@wp.kernel(enable_backward=False)
def _unit_sensor(
  # In:
  row: int,
  # Out:
  sensordata_grad_out: wp.array2d[float],  # (nworld, ns)
):
  w, i = wp.tid()
  sensordata_grad_out[w, i] = wp.where(i == row, 1.0, 0.0)


@wp.func
def _entry(
  # Model:
  nv: int,
  na: int,
  nu: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  w: int,
  c: int,
  step: float,
  ctrl_columns: int,
  qpos: wp.array2d[float],
  qpos_grad: wp.array2d[float],
  qvel_grad: wp.array2d[float],
  act_grad: wp.array2d[float],
  ctrl_grad: wp.array2d[float],
  lam_q: wp.array2d[float],
  lam_v: wp.array2d[float],
  theta_grad: wp.array2d[float],
) -> float:
  """Column `c` of z of world `w`'s swept row (tangent-space `qpos`; `step` adds the integrator's terms)."""
  nx = 2 * nv + na
  g = float(0.0)
  if c < nv:
    g = tangent_grad(c, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, qpos, w, qpos_grad, w) + step * lam_q[w, c]
  elif c < 2 * nv:
    g = qvel_grad[w, c - nv] + step * lam_v[w, c - nv]
  elif c < nx:
    g = act_grad[w, c - 2 * nv]
  elif c < nx + nu:
    if ctrl_columns != 0:
      g = ctrl_grad[w, c - nx]
  else:
    g = theta_grad[w, c - nx - nu]
  return g


@wp.kernel(enable_backward=False)
def _jacobian_row(
  # Model:
  nv: int,
  na: int,
  nu: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  k: int,
  count: wp.array[int],
  row: int,
  with_step: int,
  ctrl_columns: int,
  qpos: wp.array2d[float],  # (nworld, nq) the replayed state
  qpos_grad: wp.array2d[float],  # (nworld, nq) adjoints of the replay's inputs
  qvel_grad: wp.array2d[float],
  act_grad: wp.array2d[float],
  ctrl_grad: wp.array2d[float],
  lam_q: wp.array2d[float],  # (nworld, nv) the integrator's direct adjoints
  lam_v: wp.array2d[float],
  theta_grad: wp.array2d[float],  # (nworld, nparam)
  # Out:
  jac_out: wp.array4d[float],  # (nworld, nstep (+ 1), nrow, nz)
):
  """Row `row` of step `k + count[0]`'s Jacobian from one reverse sweep."""
  w, c = wp.tid()
  jac_out[w, k + count[0], row, c] = _entry(nv, na, nu, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, w, c,
                                            float(with_step), ctrl_columns, qpos, qpos_grad, qvel_grad, act_grad,
                                            ctrl_grad, lam_q, lam_v, theta_grad)


@wp.kernel(enable_backward=False)
def _unit_seeds(
  # In:
  nworld: int,
  rows: wp.array[int],  # (copies,) each copy's row
  kinds: wp.array[int],  # (copies,) 1 a next-state row, 0 a sensor row
  integrate: int,  # 0: the final state's sensors (no next state: its rows get no seed)
  # Out:
  lam_out: wp.array3d[float],  # (copies * nworld, 2, nx): slot 1 is the next state's adjoint
  sensordata_grad_out: wp.array2d[float],  # (copies * nworld, ns)
):
  """Each copy's unit seed, on the next state or on the sensors (`TiledReplay` worlds)."""
  w, i = wp.tid()
  kind, row = kinds[w // nworld], rows[w // nworld]
  if i < lam_out.shape[2]:
    lam_out[w, 1, i] = wp.where(kind == 1 and integrate != 0 and i == row, 1.0, 0.0)
  if i < sensordata_grad_out.shape[1]:
    sensordata_grad_out[w, i] = wp.where(kind == 0 and i == row, 1.0, 0.0)


@wp.kernel(enable_backward=False)
def _tiled_rows(
  # Model:
  nv: int,
  na: int,
  nu: int,
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  dof_jntid: wp.array[int],
  # In:
  k: int,
  count: wp.array[int],
  nworld: int,
  rows: wp.array[int],
  kinds: wp.array[int],
  integrate: int,
  ctrl_columns: int,
  qpos: wp.array2d[float],  # (copies * nworld, nq) the tiled replay's state
  qpos_grad: wp.array2d[float],
  qvel_grad: wp.array2d[float],
  act_grad: wp.array2d[float],
  ctrl_grad: wp.array2d[float],
  lam_q: wp.array2d[float],
  lam_v: wp.array2d[float],
  theta_grad: wp.array2d[float],  # (copies * nworld, nparam)
  # Out:
  jac_out: wp.array4d[float],  # (nworld, nstep, nx, nz)
  sjac_out: wp.array4d[float],  # (nworld, nstep + 1, ns, nz)
):
  """`_jacobian_row` for every copy: copy `w // nworld` writes its row of world `w % nworld` (a
  sensor copy's integrator terms are zero: its next state had no seed)."""
  w, c = wp.tid()
  kind, row = kinds[w // nworld], rows[w // nworld]
  if kind == 1 and integrate == 0:
    return
  g = _entry(nv, na, nu, jnt_type, jnt_qposadr, jnt_dofadr, dof_jntid, w, c, float(integrate), ctrl_columns, qpos,
             qpos_grad, qvel_grad, act_grad, ctrl_grad, lam_q, lam_v, theta_grad)
  if kind == 1:
    jac_out[w % nworld, k + count[0], row, c] = g
  else:
    sjac_out[w % nworld, k + count[0], row, c] = g


@wp.kernel(enable_backward=False)
def _position_rows(
  # Model:
  opt_timestep: float,
  jnt_type: wp.array[int],
  jnt_dofadr: wp.array[int],
  # In:
  k: int,
  count: wp.array[int],
  qvel: wp.array3d[float],  # (nworld, nstep + 1, nv) trajectory velocities
  # Out:
  jac_out: wp.array4d[float],  # (nworld, nstep, nx, nz): position rows from the velocity rows
):
  """Joint `j`'s position rows of step `k + count[0]`'s Jacobian: the integrator's tangent map."""
  w, j = wp.tid()
  k += count[0]
  h = opt_timestep
  nv = qvel.shape[2]
  nz = jac_out.shape[3]
  typ = jnt_type[j]
  d = jnt_dofadr[j]
  nlin = 0  # dofs integrated linearly: hinge, slide, a free joint's translation
  if typ == HINGE or typ == SLIDE:
    nlin = 1
  elif typ == FREE:
    nlin = 3
  for i in range(nlin):
    for c in range(nz):
      jac_out[w, k, d + i, c] = wp.where(c == d + i, 1.0, 0.0) + h * jac_out[w, k, nv + d + i, c]
  if typ == HINGE or typ == SLIDE:
    return
  r = d + nlin
  phi = h * wp.vec3(qvel[w, k + 1, r], qvel[w, k + 1, r + 1], qvel[w, k + 1, r + 2])
  Rt = wp.transpose(_rotation(phi))
  Jr = wp.transpose(_right_jacobian_t(phi))
  for c in range(nz):
    dv = wp.vec3(jac_out[w, k, nv + r, c], jac_out[w, k, nv + r + 1, c], jac_out[w, k, nv + r + 2, c])
    dq = wp.vec3(wp.where(c == r, 1.0, 0.0), wp.where(c == r + 1, 1.0, 0.0), wp.where(c == r + 2, 1.0, 0.0))
    g = Rt * dq + h * (Jr * dv)
    for i in range(3):
      jac_out[w, k, r + i, c] = g[i]


@wp.kernel(enable_backward=False)
def _selection_rows(
  # In:
  k: int,
  count: wp.array[int],
  rows: wp.array[int],  # (nsel,) sensordata rows that copy one state coordinate
  cols: wp.array[int],  # (nsel,) that coordinate's column of z
  # Out:
  sjac_out: wp.array4d[float],  # (nworld, nstep + 1, ns, nz)
):
  w, i = wp.tid()
  t, r, col = k + count[0], rows[i], cols[i]
  for c in range(sjac_out.shape[3]):  # a loop, not a launch dimension: a CPU thread costs more than a store
    sjac_out[w, t, r, c] = wp.where(c == col, 1.0, 0.0)


@wp.kernel(enable_backward=False)
def _unit_invweight(
  # In:
  e: int,  # entry of (body_invweight0 (nbody, 2) flattened, then dof_invweight0 (nv,))
  # Out:
  G_body_out: wp.array2d[wp.vec2],  # (rows, nbody)
  G_dof_out: wp.array2d[float],  # (rows, nv)
):
  r, i = wp.tid()
  nb = G_body_out.shape[1]
  if i < nb:
    G_body_out[r, i] = wp.vec2(wp.where(2 * i == e, 1.0, 0.0), wp.where(2 * i + 1 == e, 1.0, 0.0))
  if i < G_dof_out.shape[1]:
    G_dof_out[r, i] = wp.where(2 * nb + i == e, 1.0, 0.0)


@wp.kernel(enable_backward=False)
def _store_column(
  # In:
  e: int,
  theta: wp.array2d[float],  # (nworld, nparam)
  # Out:
  K_out: wp.array3d[float],  # (nworld, ninv, nparam)
):
  w, j = wp.tid()
  K_out[w, e, j] = theta[w, j]


@wp.kernel(enable_backward=False)
def _apply_invweight(
  # In:
  G_body: wp.array2d[wp.vec2],  # (rows, nbody) this sweep's adjoints of body_invweight0
  G_dof: wp.array2d[float],  # (rows, nv) and of dof_invweight0
  K: wp.array3d[float],  # (nworld, ninv, nparam) d(invweight0) / d(theta), transposed
  # Out:
  theta_out: wp.array2d[float],  # (nworld (x copies), nparam) accumulated
):
  w, j = wp.tid()
  rb = w % G_body.shape[0]
  rd = w % G_dof.shape[0]
  v = w % K.shape[0]  # a tiled replay's copy reads its world's K
  nb = G_body.shape[1]
  g = float(0.0)
  for b in range(nb):
    gb = G_body[rb, b]
    g += gb[0] * K[v, 2 * b, j] + gb[1] * K[v, 2 * b + 1, j]
  for d in range(G_dof.shape[1]):
    g += G_dof[rd, d] * K[v, 2 * nb + d, j]
  theta_out[w, j] += g


def _selection_sensors(mjm: mujoco.MjModel) -> tuple[list[int], list[int]]:
  """`(rows, cols)`: the sensordata rows that copy a state coordinate (joint position and velocity
  sensors of hinges and slides without a cutoff) and that coordinate's column of z."""
  rows, cols = [], []
  for i in range(mjm.nsensor):
    typ, obj = int(mjm.sensor_type[i]), int(mjm.sensor_objid[i])
    if typ not in (mujoco.mjtSensor.mjSENS_JOINTPOS, mujoco.mjtSensor.mjSENS_JOINTVEL) or mjm.sensor_cutoff[i] > 0:
      continue
    if int(mjm.jnt_type[obj]) not in (HINGE, SLIDE):
      continue
    rows.append(int(mjm.sensor_adr[i]))
    cols.append(int(mjm.jnt_dofadr[obj]) + (mjm.nv if typ == mujoco.mjtSensor.mjSENS_JOINTVEL else 0))
  return rows, cols


def sweep_count(mjm: mujoco.MjModel) -> int:
  """Reverse passes `AnalyticJacobian` runs per step on `mjm`: one per velocity and activation row,
  and one per sensor row that is not a selection of a state coordinate (`AnalyticJacobian.nsweep`)."""
  selected = len(_selection_sensors(mjm)[0]) if mjm.nsensordata else 0
  return mjm.nv + mjm.na + mjm.nsensordata - selected


class AnalyticJacobian:
  """The step and sensor Jacobians of `AnalyticStep` (see the module docstring).

  A stepper with the lanes' interface (`begin`, `advance`, `count`, `step`, `sense`): the Rollout
  calls it for linearized calls. `step(..., qacc=, jac=, sjac=)` runs MJWarp's step `k` (keeping its
  acceleration) and fills `jac[:, k]` and `sjac[:, k]`; `sense` fills `sjac[:, nstep]`.
  """

  def __init__(self, analytic, *, ctrl_jacobian: bool, batch_worlds: int | None = None):
    self.analytic = analytic
    self.scene = s = analytic.scene
    self.ctrl_jacobian = bool(ctrl_jacobian)
    self.nlane = 1
    z = lambda *shape: wp.zeros(shape, dtype=float, device=s.device)
    self._lam = z(s.nworld, 2, s.nx)  # the unit seed on the next state, in the layout `_integrator_vjp` reads
    self._qvel = z(s.nworld, 2, s.nv)
    self._theta = z(s.nworld, max(analytic.nparam, 1))
    rows, cols = _selection_sensors(s.mjm) if s.nsensordata else ([], [])
    self._sel_rows = wp.array(np.array(rows, np.int32), dtype=int, device=s.device)
    self._sel_cols = wp.array(np.array(cols, np.int32), dtype=int, device=s.device)
    self._swept = [r for r in range(s.nsensordata) if r not in set(rows)]  # sensor rows formed by sweeps
    # acceleration-stage rows: a sweep through the step's implicit function theorem (`AnalyticStep.reverse`)
    self._acc_rows = set() if analytic.acc_cols is None else {int(c) for c in analytic.acc_cols}
    self._K = None  # the inertial parameters' invweight0 Jacobian (`_invweight_jacobian`)
    # every sweep of a step in one reverse pass of a tiled replay, where the batch is small (`tiled.py`;
    # with contacts, one collision of the worlds tiled to every copy: `ContactRows.tile`)
    sweeps = [(i, 1) for i in range(s.nv, s.nx)] + [(r, 0) for r in self._swept]
    cap = BATCH_WORLDS if batch_worlds is None else int(batch_worlds)
    self._tiled = None
    if len(sweeps) >= 2 and len(sweeps) * s.nworld <= cap:
      from .tiled import TiledReplay

      self._tiled = TiledReplay(analytic, len(sweeps))
      self._rows = wp.array(np.array([r for r, _ in sweeps], np.int32), dtype=int, device=s.device)
      self._kinds = wp.array(np.array([kind for _, kind in sweeps], np.int32), dtype=int, device=s.device)
      self._acc_swept = any(r in self._acc_rows for r in self._swept)
      nt = self._tiled.nworld
      self._lam_t, self._qvel_t = z(nt, 2, s.nx), z(nt, 2, s.nv)
      self._theta_t = z(nt, max(analytic.nparam, 1))

  @property
  def nsweep(self) -> int:
    """Reverse passes of the replay per step: one per velocity and activation row, and one per
    sensor row that is not a selection of a state coordinate."""
    return self.scene.nx - self.scene.nv + len(self._swept)

  def _invweight_jacobian(self) -> None:
    """`K[w, e, j] = d invweight0_e / d theta_j` at this rollout's parameters: the softness path of
    every sweep, formed by one run of `InvWeightAdjoint` per invweight0 entry."""
    a, s = self.analytic, self.scene
    iw = a.invweight
    ninv = 2 * s.mjm.nbody + s.nv
    if self._K is None:
      self._K = wp.zeros((s.nworld, ninv, max(a.nparam, 1)), dtype=float, device=s.device)
    # the body entries' columns only where some row reads body_invweight0: else their adjoints stay
    # zero in every sweep and their (zero) columns of K are never used; a run is ~25 launches to capture
    body = reads_body_invweight(s.mjm)
    for e in (range(ninv) if body else range(2 * s.mjm.nbody, ninv)):
      a.zero_field_grads()
      wp.launch(_unit_invweight, dim=(iw.G_body.shape[0], max(s.mjm.nbody, s.nv)), device=s.device, inputs=[e],
                outputs=[iw.G_body, iw.G_dof])
      iw.run()
      a.gather_theta(self._theta)
      wp.launch(_store_column, dim=(s.nworld, a.nparam), device=s.device, inputs=[e, self._theta], outputs=[self._K])

  @property
  def copies(self) -> int:
    """Sweeps per reverse pass: the tiled replay's copies of the worlds (`nsweep`), or 1 (one pass per row)."""
    return 1 if self._tiled is None else self._tiled.copies

  def rebuild(self) -> None:
    """Remakes the tiled replay where a field it copies was reallocated (`AnalyticStep.rebuild`)."""
    self.analytic.rebuild()
    if self._tiled is not None:
      self._tiled.build()

  def begin(self) -> None:
    self.analytic.begin()
    if self.analytic.invweight is not None and self.analytic.nparam:
      self._invweight_jacobian()
    if self._tiled is not None:
      self._tiled.build()
      self._tiled.refresh()  # the parameters' values of this rollout, in every copy's rows

  def advance(self) -> None:
    self.analytic.advance()

  @property
  def count(self):
    return self.analytic.count

  def step(self, traj, ctrl, warm, k: int, *, qacc, jac, sjac, **_) -> None:
    a = self.analytic
    a.step(traj, ctrl, warm, k, qacc=qacc)
    a.rebuild()
    s = self.scene
    if self._tiled is not None:
      self._tiled_step(traj, qacc, k, jac, sjac)
      return
    a.replay(traj, qacc, k, True, count=self.count)
    wp.launch(_load_next, dim=(s.nworld, s.nv), device=s.device, inputs=[k, self.count, traj.qvel],
              outputs=[self._qvel])
    for i in range(s.nv, s.nx):
      self._sweep(k, i, jac, state_row=True)
    wp.launch(_position_rows, dim=(s.nworld, s.mjm.njnt), device=s.device,
              inputs=[s.dt, s.jnt_type, s.jnt_dofadr, k, self.count, traj.qvel], outputs=[jac])
    self._sensor_rows(k, sjac)

  def sense(self, traj, ctrl, warm, k: int, *, sjac, qacc=None, **_) -> None:
    a = self.analytic
    a.sense(traj, ctrl, warm, k, qacc=qacc)
    if not self.scene.nsensordata:
      return
    if self._swept and self._tiled is not None:
      T = self._tiled
      T.build()
      T.step.replay(traj, qacc if a.acc_sensors else None, k, a.acc_sensors, count=self.count)
      self._tiled_pass(k, jac=sjac, sjac=sjac, integrate=False)
      self._selection(k, sjac)
      return
    if self._swept:  # the replay feeds the sensor sweeps only; selection rows read nothing of it
      a.rebuild()
      a.replay(traj, qacc if a.acc_sensors else None, k, a.acc_sensors, count=self.count)
    self._sensor_rows(k, sjac)

  def _selection(self, k: int, sjac: wp.array) -> None:
    s = self.scene
    if self._sel_rows.shape[0]:
      wp.launch(_selection_rows, dim=(s.nworld, self._sel_rows.shape[0]), device=s.device,
                inputs=[k, self.count, self._sel_rows, self._sel_cols], outputs=[sjac])

  def _sensor_rows(self, k: int, sjac: wp.array) -> None:
    self._selection(k, sjac)
    for i in self._swept:
      self._sweep(k, i, sjac, state_row=False)

  def _tiled_step(self, traj, qacc, k: int, jac: wp.array, sjac: wp.array) -> None:
    """`step`'s rows from the tiled replay: every sweep in one reverse pass."""
    s, T = self.scene, self._tiled
    T.build()
    T.step.replay(traj, qacc, k, True, count=self.count)
    wp.launch(_load_next, dim=(T.nworld, s.nv), device=s.device, inputs=[k, self.count, traj.qvel],
              outputs=[self._qvel_t])
    self._tiled_pass(k, jac=jac, sjac=sjac, integrate=True)
    wp.launch(_position_rows, dim=(s.nworld, s.mjm.njnt), device=s.device,
              inputs=[s.dt, s.jnt_type, s.jnt_dofadr, k, self.count, traj.qvel], outputs=[jac])
    if s.nsensordata:
      self._selection(k, sjac)

  def _tiled_pass(self, k: int, *, jac: wp.array, sjac: wp.array, integrate: bool) -> None:
    """Every sweep of step `k + count[0]` (`_sweep`'s) as one reverse pass of the tiled replay, each
    copy seeded with its row. `integrate=False`: the final state's sensor rows only."""
    s, T = self.scene, self._tiled
    a, n = T.step, T.nworld
    P = a.program
    a.zero_grads()
    a.zero_field_grads()
    wp.launch(_unit_seeds, dim=(n, max(s.nx, s.nsensordata)), device=s.device,
              inputs=[s.nworld, self._rows, self._kinds, int(integrate)],
              outputs=[self._lam_t, P.grads[id(a.sensordata)]])
    sensors = bool(self._swept)
    if integrate and not (sensors and a.acc_sensors):
      # by linearity one pass serves both kinds: a state copy's sensor seed is zero, a sensor copy's next state's
      a.seed_step(0, self._qvel_t, self._lam_t)
      P.backward_from(("step", "state"), [a.tau_e, a.tau_a, a.damp, a.force, a.act_next] +
                      ([a.sensordata] if sensors else []))
    elif integrate or self._acc_swept:
      a.reverse(0, self._qvel_t, self._lam_t, integrate=integrate)
    else:
      P.backward_from(("state",), [a.sensordata])
    if a.nparam:
      a.gather_theta(self._theta_t)
      if a.invweight is not None:
        iw = a.invweight
        wp.launch(_apply_invweight, dim=(n, a.nparam), device=s.device, inputs=[iw.G_body, iw.G_dof, self._K],
                  outputs=[self._theta_t])
    wp.launch(_tiled_rows, dim=(n, jac.shape[3]), device=s.device,
              inputs=[s.nv, s.na, s.nu, s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, s.dof_jntid, k, self.count, s.nworld,
                      self._rows, self._kinds, int(integrate), int(self.ctrl_jacobian), a.qpos] +
              a._leaves + [a.lam_q, a.lam_v, self._theta_t],
              outputs=[jac, sjac])

  def _sweep(self, k: int, row: int, out: wp.array, *, state_row: bool) -> None:
    """One reverse pass of the replay seeded on state row `row` of step `k + count[0]`'s next state
    (`state_row`) or on sensor `row` at its state; writes that row of `out`."""
    a, s = self.analytic, self.scene
    n, P = s.nworld, a.program
    G = P.grads
    a.zero_grads()
    a.zero_field_grads()
    if state_row:
      wp.launch(_unit_state, dim=(n, s.nx), device=s.device, inputs=[row], outputs=[self._lam])
      a.seed_step(0, self._qvel, self._lam)
      P.backward_from(("step", "state"), [a.tau_e, a.tau_a, a.damp, a.force, a.act_next])
    else:
      wp.launch(_unit_sensor, dim=(n, s.nsensordata), device=s.device, inputs=[row], outputs=[G[id(a.sensordata)]])
      if row in self._acc_rows:
        a.reverse(0, self._qvel, self._lam, integrate=False)
      else:
        P.backward_from(("state",), [a.sensordata])
    if a.nparam:
      a.gather_theta(self._theta)
      if a.invweight is not None:
        iw = a.invweight
        wp.launch(_apply_invweight, dim=(n, a.nparam), device=s.device, inputs=[iw.G_body, iw.G_dof, self._K],
                  outputs=[self._theta])
    wp.launch(_jacobian_row, dim=(n, out.shape[3]), device=s.device,
              inputs=[s.nv, s.na, s.nu, s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, s.dof_jntid, k, self.count, row,
                      int(state_row), int(self.ctrl_jacobian), a.qpos] + a._leaves + [a.lam_q, a.lam_v, self._theta],
              outputs=[out])
