"""`AnalyticStep`: the analytic adjoint's step (see the package docstring for the maths). It records
the replay's launches (`rebuild`), replays each step's smooth dynamics (`replay`) and walks the steps
in reverse (`backward`); the small kernels here move values between the trajectory and the replay.
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

from mujoco_warp._src.types import mat66, vec10

from ..joints import BALL, FREE, HINGE, SLIDE
from ..mjmodel import can_make_contacts
from ..params import flat_rows, model_field
from .actuation import _actuation, _actuator_velocity_diag, _joint_actuator_limits, _transmission_velocity_gain, \
  record_tendon_actuator_limits, \
  transmission_velocity_gains
from .ball_limits import record_ball_limits
from .constraints import record_rows
from .contacts import ContactRows
from .coverage import ACC_SENSORS, analytic_coverage
from .dynamics import _accelerations, _body_forces, _damping_diag, _damping_term, _free_crb, _free_gyro_term, \
  _joint_forces, _passive, _subtree_forces
from .equalities import EqualityRows
from .invweight import InvWeightAdjoint
from .kinematics import _cdof_dot, _site_frames, _velocities, record_frames
from .program import _Program
from .sensors import _sensors, record_acc_sensors
from .solve import _constraint_adjoint, _constraint_factor, _damped_acceleration, _free_body_acceleration, \
  _free_body_mu, _integrator_vjp, _mass_matrix, _rank_ones
from .tendons import TendonRows, record_transmission_damping, record_transmissions

__all__ = ["AnalyticStep"]


@wp.kernel(enable_backward=False)
def _load_step(
  # In:
  k: int,
  count: wp.array[int],  # (1,) added to k: the step index of a captured step
  qpos: wp.array3d[float],
  qvel: wp.array3d[float],
  act: wp.array3d[float],
  ctrl: wp.array3d[float],
  qacc: wp.array3d[float],
  # Out:
  qpos_out: wp.array2d[float],
  qvel_out: wp.array2d[float],
  act_out: wp.array2d[float],
  ctrl_out: wp.array2d[float],
  qacc_out: wp.array2d[float],
):
  w = wp.tid()
  v = w % qpos.shape[0]  # a tiled replay's copies read their world (`tiled.py`)
  k += count[0]
  kc = wp.min(k, ctrl.shape[1] - 1)  # the final sensors read the last control
  kq = wp.min(k, qacc.shape[1] - 1)
  for i in range(qpos.shape[2]):
    qpos_out[w, i] = qpos[v, k, i]
  for i in range(qvel.shape[2]):
    qvel_out[w, i] = qvel[v, k, i]
    qacc_out[w, i] = qacc[v, kq, i]
  for i in range(act.shape[2]):
    act_out[w, i] = act[v, k, i]
  for i in range(ctrl.shape[2]):
    ctrl_out[w, i] = ctrl[v, kc, i]


@wp.kernel(enable_backward=False)
def _seed(
  # In:
  k: int,
  nv: int,
  mu: wp.array2d[float],  # (nworld, nv) adjoint through the damped Euler solve
  lam_a: wp.array2d[float],  # (nworld, nv) adjoint through the constraint solve (0 without rows)
  lam: wp.array3d[float],
  integrate: int,  # 0: a state's sensors alone (no next state: the activations get no adjoint)
  # Out:
  tau_e_grad: wp.array2d[float],
  tau_a_grad: wp.array2d[float],
  damp_grad: wp.array2d[float],
  force_grad: wp.array2d[float],  # actuator, passive and constraint forces share one adjoint
  act_next_grad: wp.array2d[float],
):
  """Seeds of the residuals `tau_ID(a_e) + h B a_e - f` (times `-mu`) and `tau_ID(a) - f` (times
  `-lambda`), `f` the actuator, passive and constraint forces, and of the activations after the step."""
  w = wp.tid()
  for i in range(nv):
    m = mu[w, i]
    l = lam_a[w, i]
    tau_e_grad[w, i] = -m
    tau_a_grad[w, i] = -l
    damp_grad[w, i] = -m
    force_grad[w, i] = m + l
  for i in range(act_next_grad.shape[1]):
    act_next_grad[w, i] = float(0.0)
    if integrate != 0:
      act_next_grad[w, i] = lam[w, k + 1, 2 * nv + i]


@wp.kernel(enable_backward=False)
def _copy_row(
  # In:
  k: int,
  src: wp.array3d[float],  # (nworld, nstep + 1, n)
  # Out:
  dst: wp.array2d[float],  # (nworld, n)
):
  w, i = wp.tid()
  dst[w, i] = src[w, k, i]


@wp.kernel
def _add_forces(
  # In:
  passive: wp.array2d[float],
  actuator: wp.array2d[float],
  constraint: wp.array2d[float],
  # Out:
  out: wp.array2d[float],
):
  w, i = wp.tid()
  out[w, i] = passive[w, i] + actuator[w, i] + constraint[w, i]


@wp.kernel(enable_backward=False)
def _assemble(
  # Model:
  jnt_type: wp.array[int],
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  # In:
  k: int,
  kc: int,
  with_step: int,
  qpos: wp.array3d[float],  # (nworld, nstep + 1, nq)
  qpos_grad: wp.array3d[float],  # trajectory adjoints (from the loss)
  qvel_grad: wp.array3d[float],
  act_grad: wp.array3d[float],
  qpos_k_grad: wp.array2d[float],  # (nworld, nq) adjoints through the replayed dynamics
  qvel_k_grad: wp.array2d[float],
  act_k_grad: wp.array2d[float],
  ctrl_k_grad: wp.array2d[float],
  lam_q: wp.array2d[float],  # (nworld, nv) direct adjoints through the integrator
  lam_v: wp.array2d[float],
  # Out:
  lam_out: wp.array3d[float],  # (nworld, nstep + 1, nx)
  ctrl_grad_out: wp.array3d[float],  # (nworld, nstep, nu) accumulated
):
  """`lam[k]` in the tangent space (quaternion adjoints `g` become `0.5 Im(conj(q) g)`): the loss's
  own, the replay's (dynamics and sensors) and, `with_step`, the integrator's direct terms."""
  w = wp.tid()
  nv = lam_q.shape[1]
  step = float(with_step)
  for j in range(jnt_type.shape[0]):
    typ = jnt_type[j]
    qadr = jnt_qposadr[j]
    d = jnt_dofadr[j]
    if typ == HINGE or typ == SLIDE:
      lam_out[w, k, d] = qpos_grad[w, k, qadr] + qpos_k_grad[w, qadr] + step * lam_q[w, d]
    else:
      if typ == FREE:
        for i in range(3):
          lam_out[w, k, d + i] = qpos_grad[w, k, qadr + i] + qpos_k_grad[w, qadr + i] + step * lam_q[w, d + i]
        qadr += 3
        d += 3
      q = wp.quat(qpos[w, k, qadr + 1], qpos[w, k, qadr + 2], qpos[w, k, qadr + 3], qpos[w, k, qadr])
      g = wp.quat(qpos_grad[w, k, qadr + 1] + qpos_k_grad[w, qadr + 1],
                  qpos_grad[w, k, qadr + 2] + qpos_k_grad[w, qadr + 2],
                  qpos_grad[w, k, qadr + 3] + qpos_k_grad[w, qadr + 3],
                  qpos_grad[w, k, qadr] + qpos_k_grad[w, qadr])
      r = wp.quat_inverse(q) * g
      for i in range(3):
        lam_out[w, k, d + i] = 0.5 * r[i] + step * lam_q[w, d + i]
  for i in range(nv):
    lam_out[w, k, nv + i] = qvel_grad[w, k, i] + qvel_k_grad[w, i] + step * lam_v[w, i]
  for i in range(act_grad.shape[2]):
    lam_out[w, k, 2 * nv + i] = act_grad[w, k, i] + act_k_grad[w, i]
  for i in range(ctrl_k_grad.shape[1]):
    ctrl_grad_out[w, kc, i] += ctrl_k_grad[w, i]


@wp.kernel(enable_backward=False)
def _store_qacc(
  # In:
  k: int,
  count: wp.array[int],
  qacc: wp.array2d[float],
  # Out:
  qacc_out: wp.array3d[float],
):
  w, i = wp.tid()
  qacc_out[w, k + count[0], i] = qacc[w, i]


@wp.kernel(enable_backward=False)
def _gather_param_grad(
  # In:
  field_grad: wp.array2d[float],  # (nrow, ncol) flat view of the field's adjoint
  cols: wp.array[int],  # (dim,) the parameter's columns in the field (-1: none)
  scale: float,
  offset: int,  # the parameter's first column in the output
  # Out:
  value_grad: wp.array2d[float],  # (nworld, dim) or (nworld, nparam), accumulated
):
  w, i = wp.tid()
  c = cols[i]
  if c >= 0:
    value_grad[w, offset + i] += scale * field_grad[w % field_grad.shape[0], c]


@wp.kernel(enable_backward=False)
def _gather_theta(
  # In:
  ptrs: wp.array2d[wp.uint64],  # (2, nparam) column j's field adjoint, flat (row 0) and the tied bias's (row 1)
  shape: wp.array3d[int],  # (2, 2, nparam) their rows and floats per row
  cols: wp.array2d[int],  # (2, nparam) column j's column in each (-1: none)
  # Out:
  theta_out: wp.array2d[float],  # (nworld, nparam)
):
  w, j = wp.tid()
  g = float(0.0)
  c = cols[0, j]
  if c >= 0:
    f = wp.array(ptr=ptrs[0, j], shape=(shape[0, 0, j], shape[0, 1, j]), dtype=float)
    g += f[w % shape[0, 0, j], c]
  c = cols[1, j]
  if c >= 0:
    f = wp.array(ptr=ptrs[1, j], shape=(shape[1, 0, j], shape[1, 1, j]), dtype=float)
    g += -1.0 * f[w % shape[1, 0, j], c]
  theta_out[w, j] = g


def _tables(mjm: mujoco.MjModel):
  """Host tables of the kinematic tree: (body, dof of it or an ancestor) pairs, (dof, dof moving its
  axis) pairs, and the dofs whose axes do not move (a free joint's translation)."""
  body_dof, dof_pre = [], []
  still = np.zeros(max(mjm.nv, 1), np.int32)
  for b in range(1, mjm.nbody):
    chain = []
    p = b
    while p > 0:
      chain.append(p)
      p = mjm.body_parentid[p]
    anc_dofs = [d for a in chain[1:] for d in range(mjm.body_dofadr[a], mjm.body_dofadr[a] + mjm.body_dofnum[a])]
    own = list(range(mjm.body_dofadr[b], mjm.body_dofadr[b] + mjm.body_dofnum[b]))
    body_dof += [(b, d) for d in anc_dofs + own]
    before = list(anc_dofs)
    for j in range(mjm.body_jntadr[b], mjm.body_jntadr[b] + mjm.body_jntnum[b]):
      adr = mjm.jnt_dofadr[j]
      if mjm.jnt_type[j] == FREE:
        still[adr:adr + 3] = 1
        dof_pre += [(adr + 3 + i, d) for i in range(3) for d in before + [adr, adr + 1, adr + 2]]
        before += list(range(adr, adr + 6))
      elif mjm.jnt_type[j] == BALL:
        dof_pre += [(adr + i, d) for i in range(3) for d in before]
        before += list(range(adr, adr + 3))
      else:
        dof_pre += [(adr, d) for d in before]
        before.append(adr)
  as2 = lambda x: np.array(x, np.int32).reshape(-1, 2) if x else np.zeros((0, 2), np.int32)
  return as2(body_dof), as2(dof_pre), still[:mjm.nv]


class AnalyticStep:
  """Reverse-mode gradient of MJWarp steps from diffsim's differentiable smooth dynamics.

  The forward pass is one MJWarp world per world (the forward stepper `fwd`, a one-lane
  `FiniteDifferenceStep`) plus each step's acceleration (`step(..., qacc=)`, `(nworld, nstep, nv)`).
  `backward` walks the steps in reverse; see the module docstring. Raises `ValueError` naming the
  first uncovered feature when the model (or a parameter) is not covered.
  """

  def __init__(self, scene, layout, fwd):
    fields = [p.field for p in layout.params]
    why = analytic_coverage(scene.mjm, fields)
    if why is not None:
      raise ValueError(f"the analytic adjoint does not cover {why}; use gradient='finite_difference' "
                       "(or 'auto', which picks the finite-difference lanes for this model)")
    self.scene, self.layout, self.fwd = scene, layout, fwd
    self.nparam = layout.nparam
    self.nlane = 1
    self._built_for = None
    self.rebuild()

  # -- forward ----------------------------------------------------------------------------------

  def begin(self) -> None:
    self.fwd.begin()

  def advance(self) -> None:
    self.fwd.advance()

  @property
  def count(self):
    return self.fwd.count

  def step(self, traj, ctrl, warm, k: int, *, qacc=None, **_) -> None:
    """MJWarp's step `k` (see `FiniteDifferenceStep.step`), keeping its acceleration in `qacc[:, k]`."""
    self.fwd.step(traj, ctrl, warm, k)
    s = self.scene
    wp.launch(_store_qacc, dim=(s.nworld, s.nv), device=s.device, inputs=[k, self.fwd.count, self.fwd.data.qacc],
              outputs=[qacc])

  def sense(self, traj, ctrl, warm, k: int, *, qacc=None, **_) -> None:
    """The final state's sensors; its acceleration into `qacc[:, k]` where `qacc` has that row."""
    self.fwd.sense(traj, ctrl, warm, k)
    s = self.scene
    if qacc is not None and qacc.shape[1] > k:
      wp.launch(_store_qacc, dim=(s.nworld, s.nv), device=s.device, inputs=[k, self.fwd.count, self.fwd.data.qacc],
                outputs=[qacc])

  # -- backward ---------------------------------------------------------------------------------

  def rebuild(self) -> None:
    """Allocates the replay's arrays and records its launches (again when a parameter field was
    reallocated with more rows)."""
    s, mjm, m = self.scene, self.scene.mjm, self.scene.model
    # rebuilt when a batched field the launches read was reallocated with more rows
    key = tuple(id(model_field(m, f)) for f in sorted(self.layout.fields))
    if self._built_for == key:
      return
    dev, n = s.device, s.nworld
    if dev.is_capturing:
      # allocations and uploads inside a graph would be recorded, not run
      raise RuntimeError("a parameter's model field was reallocated after this Rollout was built; run its tape "
                         "gradient once eagerly before capturing it")
    nb, nj, nv, na, nu, ns = mjm.nbody, mjm.njnt, mjm.nv, mjm.na, mjm.nu, mjm.nsensordata
    P = _Program(dev)
    z = lambda shape, dtype=float: wp.zeros(shape, dtype=dtype, device=dev)
    body_dof, dof_pre, still = _tables(mjm)
    self.body_dof = wp.array(body_dof, dtype=int, device=dev)
    self.dof_pre = wp.array(dof_pre, dtype=int, device=dev)
    self.dof_still = wp.array(still, dtype=int, device=dev)
    off = int(mjm.opt.disableflags)
    dsbl = mujoco.mjtDisableBit
    h = float(mjm.opt.timestep)
    implicitfast = mjm.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    if implicitfast:
      # MJWarp's `implicit`: M - h qDeriv unless actuation, springs and dampers are all disabled
      every = dsbl.mjDSBL_ACTUATION | dsbl.mjDSBL_SPRING | dsbl.mjDSBL_DAMPER
      self.h_damp = 0.0 if off & every == every else h
    else:
      self.h_damp = 0.0 if off & (dsbl.mjDSBL_EULERDAMP | dsbl.mjDSBL_DAMPER) else h
    # implicitfast's free bodies (a tree of one free joint, MJWarp's `body_freeadr`) also integrate
    # their gyroscopic forces implicitly
    free = [b for b in range(1, nb) if mjm.body_jntnum[b] == 1 and mjm.jnt_type[mjm.body_jntadr[b]] == FREE
            and mjm.tree_dofnum[mjm.dof_treeid[mjm.body_dofadr[b]]] == 6] if implicitfast and self.h_damp else []
    self.nfree = len(free)
    self.free_body = wp.array(np.array(free, np.int32), dtype=int, device=dev)

    # leaves: one step's inputs; their adjoints are read after each step's reverse pass
    self.qpos, self.qvel, self.act = z((n, s.nq)), z((n, nv)), z((n, na))
    self.ctrl, self.qacc, self.qacc_e = z((n, nu)), z((n, nv)), z((n, nv))
    self._leaves = [P.grad(a) for a in (self.qpos, self.qvel, self.act, self.ctrl)]
    # model fields that are parameters get adjoints, accumulated over the steps
    for p in self.layout.params:
      f = model_field(m, p.field)
      if id(f) not in P.grads:
        P.grad(f)
    if any(p.tie_bias is not None for p in self.layout.params) and id(m.actuator_biasprm) not in P.grads:
      P.grad(m.actuator_biasprm)
    self._param_grads = [P.grads[id(model_field(m, p.field))] for p in self.layout.params]
    self._field_grads = list({id(g): g for g in self._param_grads + (
      [P.grads[id(m.actuator_biasprm)]] if id(m.actuator_biasprm) in P.grads else [])}.values())
    # in one buffer (one fill zeroes them), before anything else holds them
    field_key = {id(g): k for k, g in P.grads.items()}
    self._field_pool = P.pool(self._field_grads) if self._field_grads else None
    self._field_grads = [P.grads[field_key[id(g)]] for g in self._field_grads]
    self._param_grads = [P.grads[id(model_field(m, p.field))] for p in self.layout.params]
    self._theta_table = self._gather_table(P) if self.nparam else None
    self._extra_field_grads = []  # invweight0's adjoints (`InvWeightAdjoint`)

    inter = []

    def arr(shape, dtype=float, grad=True):
      a = z(shape, dtype)
      if grad:
        inter.append(P.grad(a))
      return a

    cvel, cvel_pre = arr((n, nb), wp.spatial_vector), arr((n, nv), wp.spatial_vector)
    cdof_dot = arr((n, nv), wp.spatial_vector)
    nsite = max(mjm.nsite, 1)
    site_xpos, site_xquat, site_xmat = arr((n, nsite), wp.vec3), arr((n, nsite), wp.quat), arr((n, nsite), wp.mat33)
    qfrc_passive, qfrc_actuator = arr((n, nv)), arr((n, nv))
    actuator_force = arr((n, max(nu, 1)))
    self.act_next = arr((n, max(na, 1)))
    self.sensordata = arr((n, max(ns, 1)))
    qfrc_constraint, jtdj = arr((n, nv)), arr((n, nv, nv), grad=False)
    self.force = arr((n, nv))
    self.damp = arr((n, nv))
    self.bdiag = bdiag = arr((n, nv))
    crb_free = arr((n, max(self.nfree, 1)), vec10)
    accumulated = [cvel, cvel_pre, qfrc_actuator, qfrc_constraint, jtdj, bdiag, crb_free]

    # segment "state": what the sensors need and the forces that do not depend on acceleration
    gravity_on = 0.0 if off & dsbl.mjDSBL_GRAVITY else 1.0
    frames, added = record_frames(P, "state", mjm, m, self.qpos, arr)
    accumulated += added
    xpos, xquat, xmat, xipos, ximat = (frames[k] for k in ("xpos", "xquat", "xmat", "xipos", "ximat"))
    com, cinert, cdof = frames["com"], frames["cinert"], frames["cdof"]
    if self.nfree:
      P.launch("state", _free_crb, (n, self.nfree), [m.body_subtreenum, self.free_body, cinert], [crb_free])
    P.launch("state", _velocities, n, [self.body_dof, self.dof_pre, self.qvel, cdof], [cvel, cvel_pre])
    P.launch("state", _cdof_dot, (n, nv), [self.dof_still, cvel_pre, cdof], [cdof_dot])
    if mjm.nsite:
      P.launch("state", _site_frames, (n, mjm.nsite), [m.site_bodyid, m.site_pos, m.site_quat, xpos, xquat],
               [site_xpos, site_xquat, site_xmat])
    # geom frames (the site kernel on the geoms' placements) only where a sensor or a tendon wrap reads one
    sensors_on = ns and not off & dsbl.mjDSBL_SENSOR
    geoms_read = bool(m.wrap_geom_adr.shape[0]) or bool(sensors_on and np.any(mjm.sensor_objtype ==
                                                                              mujoco.mjtObj.mjOBJ_GEOM))
    ngs = mjm.ngeom if geoms_read else 1
    geom_xpos, geom_xquat, geom_xmat = arr((n, ngs), wp.vec3), arr((n, ngs), wp.quat), arr((n, ngs), wp.mat33)
    if geoms_read:
      P.launch("state", _site_frames, (n, mjm.ngeom), [m.geom_bodyid, m.geom_pos, m.geom_quat, xpos, xquat],
               [geom_xpos, geom_xquat, geom_xmat])
    if nj:
      P.launch("state", _passive, (n, nj), [m.jnt_type, m.jnt_qposadr, m.jnt_dofadr, m.jnt_stiffness, m.qpos_spring,
                                            m.dof_damping, 0.0 if off & dsbl.mjDSBL_SPRING else 1.0,
                                            0.0 if off & dsbl.mjDSBL_DAMPER else 1.0, self.qpos, self.qvel],
               [qfrc_passive])
    self.tendons = None
    if mjm.ntendon:
      self.tendons = TendonRows(mjm, m, P, arr, accumulated, qpos=self.qpos, qvel=self.qvel, qacc=self.qacc,
                                site_xpos=site_xpos, geom_xpos=geom_xpos, geom_xmat=geom_xmat, com=com, cdof=cdof,
                                cvel=cvel, qfrc_passive=qfrc_passive, qfrc_constraint=qfrc_constraint, jtdj=jtdj)
    # tendon and site transmissions' lengths, velocities and moments (dummies without them)
    trn = record_transmissions(P, mjm, m, arr, accumulated, qvel=self.qvel, tendons=self.tendons, site_xpos=site_xpos,
                               site_xmat=site_xmat, com=com, cdof=cdof)
    actuating = nu and not off & dsbl.mjDSBL_ACTUATION
    # joints' actuatorfrcrange: the actuators' sum is clamped per dof after the moments
    jnt_limited = actuating and bool(getattr(mjm, "jnt_actfrclimited", np.zeros(1)).any())
    qfrc_act_raw = arr((n, nv)) if jnt_limited else qfrc_actuator
    if jnt_limited:
      accumulated.append(qfrc_act_raw)
    # tendons' actuatorfrcrange: their actuators' raw forces summed and scaled into it
    ten_limited = actuating and mjm.ntendon and bool(mjm.tendon_actfrclimited.any())
    force_raw = arr((n, max(nu, 1))) if ten_limited else actuator_force
    if actuating:
      P.launch("state", _actuation, (n, nu),
               [h, m.jnt_type, m.jnt_qposadr, m.jnt_dofadr, m.actuator_trntype, m.actuator_trnid, m.actuator_dyntype,
                m.actuator_gaintype,
                m.actuator_biastype, m.actuator_actadr, m.actuator_ctrllimited, m.actuator_forcelimited,
                m.actuator_actlimited, m.actuator_ctrlrange, m.actuator_forcerange, m.actuator_actrange,
                m.actuator_gear, m.actuator_dynprm, m.actuator_gainprm, m.actuator_biasprm,
                0 if off & dsbl.mjDSBL_CLAMPCTRL else 1, int(ten_limited), self.qpos, self.qvel, self.act, self.ctrl,
                *trn], [qfrc_act_raw, force_raw, self.act_next])
    if ten_limited:
      record_tendon_actuator_limits(P, mjm, m, arr, accumulated, force_raw=force_raw, trn_moment=trn[2],
                                    actuator_force=actuator_force, qfrc=qfrc_act_raw)
    if jnt_limited:
      P.launch("state", _joint_actuator_limits, (n, nv), [m.dof_jntid, m.jnt_actfrclimited, m.jnt_actfrcrange,
                                                          qfrc_act_raw], [qfrc_actuator])
    P.launch("state", _damping_diag, (n, nv), [m.dof_damping, 0.0 if off & dsbl.mjDSBL_DAMPER else 1.0], [bdiag])
    if implicitfast and actuating:
      P.launch("state", _actuator_velocity_diag, (n, nu),
               [m.jnt_type, m.jnt_dofadr, m.actuator_trntype, m.actuator_trnid, m.actuator_dyntype, m.actuator_gaintype,
                m.actuator_biastype, m.actuator_actadr, m.actuator_forcelimited, m.actuator_forcerange,
                m.actuator_gear, m.actuator_gainprm, m.actuator_biasprm, m.jnt_actfrclimited, m.jnt_actfrcrange,
                self.act, self.ctrl, actuator_force, qfrc_actuator], [bdiag])
    # implicitfast's velocity gains of tendon and site actuators: `-h vel m m^T` joins `h B`
    self.trn_vel = None
    if implicitfast and self.h_damp and actuating and transmission_velocity_gains(mjm):
      self.trn_vel, self.trn_moment = arr((n, nu)), trn[2]
      P.launch("state", _transmission_velocity_gain, (n, nu),
               [m.actuator_trntype, m.actuator_dyntype, m.actuator_gaintype, m.actuator_biastype, m.actuator_actadr,
                m.actuator_forcelimited, m.actuator_forcerange, m.actuator_gainprm, m.actuator_biasprm, self.act,
                self.ctrl, actuator_force], [self.trn_vel])
    if sensors_on:
      P.launch("state", _sensors, (n, mjm.nsensor),
               [m.sensor_type, m.sensor_objtype, m.sensor_objid, m.sensor_adr, m.sensor_cutoff, m.jnt_qposadr,
                m.jnt_dofadr, m.site_bodyid, m.geom_bodyid, m.body_rootid, m.body_iquat, m.actuator_trntype,
                m.actuator_trnid, m.actuator_gear, self.qpos, self.qvel, xpos, xquat, xmat, xipos, ximat, site_xpos,
                site_xquat, site_xmat, geom_xpos, geom_xquat, geom_xmat, com, cvel, actuator_force,
                *((self.tendons.length, self.tendons.velocity) if self.tendons else (arr((1, 1)), arr((1, 1)))),
                trn[0], trn[1], qfrc_actuator], [self.sensordata])

    # segment "step": inverse dynamics at the accelerations, constraint forces at the solver's
    def rne(acc, tau):
      """Inverse dynamics at `acc` into `tau`; returns the bodies' accelerations and forces."""
      cacc, cfrc, cfrc_int = arr((n, nb), wp.spatial_vector), arr((n, nb), wp.spatial_vector), \
        arr((n, nb), wp.spatial_vector)
      accumulated.extend([cacc, cfrc_int])
      P.launch("step", _accelerations, n, [m.opt.gravity, gravity_on, self.body_dof, self.qvel, acc, cdof, cdof_dot],
               [cacc])
      P.launch("step", _body_forces, (n, nb), [cinert, cvel, cacc], [cfrc])
      P.launch("step", _subtree_forces, n, [m.body_subtreenum, cfrc], [cfrc_int])
      P.launch("step", _joint_forces, (n, nv), [m.dof_bodyid, m.dof_armature, acc, cdof, cfrc_int], [tau])
      if self.tendons is not None:
        self.tendons.inertia(acc, cacc, tau)
      return cacc, cfrc

    self.tau_e, self.tau_a = arr((n, nv)), arr((n, nv))
    rne(self.qacc_e, self.tau_e)
    P.launch("step", _damping_term, (n, nv), [self.h_damp, bdiag, self.qacc_e], [self.damp])
    if self.nfree:
      P.launch("step", _free_gyro_term, (n, self.nfree), [m.body_dofadr, self.free_body, self.h_damp, crb_free, xpos,
                                                          xmat, com, self.qvel, self.qacc_e], [self.damp])
    if self.tendons is not None:
      self.tendons.implicit_damping(self.h_damp, self.qacc_e, self.damp)
    if self.trn_vel is not None:
      record_transmission_damping(P, mjm, arr, accumulated, h=self.h_damp, vel=self.trn_vel, moment=self.trn_moment,
                                  qacc_e=self.qacc_e, damp=self.damp)
    # constraint rows at the solver's acceleration: each kind adds its forces into qfrc_constraint and
    # its rows' J^T D J into jtdj (the IFT's Hessian M + J^T D J)
    self.constrained = record_rows(P, mjm, m, self.qpos, self.qvel, self.qacc, qfrc_constraint, jtdj)
    self.constrained |= self.tendons is not None and self.tendons.any_rows
    self.constrained |= record_ball_limits(P, mjm, m, self.qpos, self.qvel, self.qacc, qfrc_constraint, jtdj)
    self.equalities = EqualityRows.record(P, mjm, m, arr, accumulated, xpos=xpos, xquat=xquat, xmat=xmat, com=com,
                                          cdof=cdof, cvel=cvel, cdof_dot=cdof_dot, qvel=self.qvel, qacc=self.qacc,
                                          qfrc_constraint=qfrc_constraint, jtdj=jtdj)
    self.constrained |= self.equalities is not None
    self.contacts = None
    self.contacts_from = None  # a tiled replay's: the base step's contacts, tiled instead of collided (`replay`)
    if not off & dsbl.mjDSBL_CONSTRAINT and can_make_contacts(mjm):
      self.contacts = ContactRows(s, self.fwd.data, P, arr, accumulated, xpos=xpos, xmat=xmat, com=com, cdof=cdof,
                                  qvel=self.qvel, qacc=self.qacc, qfrc_constraint=qfrc_constraint, jtdj=jtdj)
      self.constrained = True
    # inertial parameters also reach the rows' softness, through body_invweight0 and dof_invweight0
    self.invweight = None
    if self.constrained and {"body_mass", "body_inertia", "dof_armature"} & {p.field for p in self.layout.params}:
      self.invweight = InvWeightAdjoint(s, P, self.body_dof)
      self._field_grads += [self.invweight.G_body, self.invweight.G_dof]
      self._extra_field_grads = [self.invweight.G_body, self.invweight.G_dof]
    P.launch("step", _add_forces, (n, nv), [qfrc_passive, qfrc_actuator, qfrc_constraint], [self.force])
    # the acceleration-stage sensors read `a` itself: the IFT's residual at `a` is then needed without rows too
    self.acc_sensors = bool(sensors_on) and bool(np.isin(mjm.sensor_type, ACC_SENSORS).any())
    self.g_acc = P.grad(self.qacc) if self.acc_sensors else z((n, nv))  # their adjoint of `a` (`reverse`)
    if self.constrained or self.acc_sensors:
      cacc_a, cfrc_a = rne(self.qacc, self.tau_a)
    self.acc_cols = None
    if self.acc_sensors:
      accumulated.append(self.sensordata)  # touch sensors add contacts' forces
      self.acc_cols = record_acc_sensors(P, mjm, m, arr, accumulated, contacts=self.contacts, site_xpos=site_xpos,
                                         site_xmat=site_xmat, com=com, cvel=cvel, cacc=cacc_a, cfrc=cfrc_a,
                                         sensordata=self.sensordata)

    # the other adjoints of the replay in one buffer, the leaves' in another: a fill each
    by_id = {id(g): k for k, g in P.grads.items()}
    self._inter_pool = P.pool(inter)
    self._inter = [P.grads[by_id[id(g)]] for g in inter]
    self._leaves_pool = P.pool(self._leaves)
    self._leaves = [P.grads[by_id[id(g)]] for g in self._leaves]
    self._accumulated = accumulated  # zeroed before each replay (atomics)
    # the replay's forward values, for checks against MJWarp's (`tests/test_adjoint.py`)
    self.values = dict(xpos=xpos, xquat=xquat, xipos=xipos, cinert=cinert, cdof=cdof, qfrc_passive=qfrc_passive,
                       qfrc_actuator=qfrc_actuator, actuator_force=actuator_force, qfrc_constraint=qfrc_constraint,
                       act=self.act_next, sensordata=self.sensordata, tau_e=self.tau_e, tau_a=self.tau_a,
                       damp=self.damp, force=self.force, **(self.contacts.values if self.contacts else {}),
                       **(dict(ten_length=self.tendons.length, ten_J=self.tendons.J) if self.tendons else {}),
                       **(self.equalities.values if self.equalities else {}))
    self.cinert, self.cdof, self.jtdj = cinert, cdof, jtdj
    # dense parts of M (the tendons' armature) and of `h B` (implicitfast's tendon damping and tendon and
    # site actuators' velocity gains), rebuilt each replay (`_rank_ones`)
    self.ten_armature = self.tendons is not None and self.tendons.armature
    self.ten_damped = self.tendons is not None and self.tendons.implicit_damping_on
    self.dense_B = self.ten_damped or self.trn_vel is not None
    self.M_pairs = z((n, nv, nv)) if self.ten_armature else z((1, 1, 1))
    self.B_pairs = z((n, nv, nv)) if self.dense_B else z((1, 1, 1))
    self.crb = z((n, nb), vec10)
    self.free_frames = (crb_free, xpos, xmat, com)
    self.A_free = z((n, max(self.nfree, 1)), mat66)
    self.M, self.L, self.L_h = z((n, nv, nv)), z((n, nv, nv)), z((n, nv, nv))
    self.mu, self.lam_a, self._zero_nv = z((n, nv)), z((n, nv)), z((n, nv))
    self._no_count = wp.zeros(1, dtype=int, device=dev)
    self._no_qacc = z((n, 1, nv))  # the final sensors' replay reads no acceleration
    self.lam_q, self.lam_v = z((n, nv)), z((n, nv))
    self.program = P
    self._built_for = key

  def replay(self, traj, qacc, k: int, with_step: bool, count: wp.array | None = None) -> None:
    """Recomputes step `k + count[0]`'s smooth dynamics (its control, or the last one for the final
    sensors) into the replay's arrays; only the sensors' part without `with_step` (`qacc` may then
    be None; with acceleration sensors the final state's replay needs its `qacc` and `with_step`)."""
    s, m, P = self.scene, self.scene.model, self.program
    n = s.nworld
    wp.launch(_load_step, dim=n, device=s.device,
              inputs=[k, self._no_count if count is None else count, traj.qpos, traj.qvel, traj.act, traj.ctrl,
                      self._no_qacc if qacc is None else qacc],
              outputs=[self.qpos, self.qvel, self.act, self.ctrl, self.qacc])
    for a in self._accumulated:
      a.zero_()
    P.forward("state")
    if not with_step:
      return
    if self.ten_armature:
      self.M_pairs.zero_()
      wp.launch(_rank_ones, dim=n, device=s.device, inputs=[m.dof_parentid, m.tendon_armature, 1.0, self.tendons.J],
                outputs=[self.M_pairs])
    if self.dense_B:
      self.B_pairs.zero_()
      if self.ten_damped:
        wp.launch(_rank_ones, dim=n, device=s.device, inputs=[m.dof_parentid, m.tendon_damping, self.h_damp,
                                                              self.tendons.J], outputs=[self.B_pairs])
      if self.trn_vel is not None:
        wp.launch(_rank_ones, dim=n, device=s.device, inputs=[m.dof_parentid, self.trn_vel, -self.h_damp,
                                                              self.trn_moment], outputs=[self.B_pairs])
    wp.launch(_mass_matrix, dim=n, device=s.device,
              inputs=[m.body_subtreenum, m.dof_bodyid, m.dof_parentid, m.dof_armature, self.h_damp, self.bdiag,
                      self.cinert, self.cdof, self.crb, self.M_pairs, self.B_pairs, int(self.ten_armature),
                      int(self.dense_B)],
              outputs=[self.M, self.L])
    wp.launch(_damped_acceleration, dim=n, device=s.device, inputs=[self.M, self.L, self.qacc], outputs=[self.qacc_e])
    if self.nfree:
      wp.launch(_free_body_acceleration, dim=(n, self.nfree), device=s.device,
                inputs=[m.body_dofadr, self.free_body, self.h_damp, self.bdiag, self.M, *self.free_frames, self.qvel,
                        self.qacc], outputs=[self.A_free, self.qacc_e])
    if self.contacts_from is not None:
      # copy 0's worlds are the base's worlds at the same states: one collision, tiled to every copy
      base = self.contacts_from
      base.collide(self.qpos[:base.scene.nworld])
      self.contacts.tile(base, n // base.scene.nworld)
    elif self.contacts is not None:
      self.contacts.collide(self.qpos)
    P.forward("step")
    if self.contacts is not None:
      self.contacts.hessian()
    if self.tendons is not None:
      self.tendons.hessian()
    if self.equalities is not None:
      self.equalities.hessian()
    if self.acc_sensors:
      P.forward("acc")
    if self.constrained or self.acc_sensors:
      # once per step: every reverse sweep of it solves with this factor (`seed_step`)
      wp.launch(_constraint_factor, dim=n, device=s.device, inputs=[self.M, self.jtdj], outputs=[self.L_h])

  def seed_step(self, k: int, qvel: wp.array, lam: wp.array, integrate: bool = True, acc: bool = False) -> None:
    """Seeds the step segment's reverse pass from the next state's adjoint `lam[:, k + 1]`
    (`(nworld, >= k + 2, nx)`, tangent space; `qvel[:, k + 1]` the next velocity): the integrator's
    VJP and the damped solve (`mu`, `lam_q`, `lam_v`), the constraint adjoint (`lam_a`), `_seed`.
    `integrate=False`: no next state (a state's acceleration sensors alone); `acc`: add the
    acceleration sensors' adjoint of `a` (`g_acc`, filled by `reverse`'s first pass)."""
    s, G = self.scene, self.program.grads
    n = s.nworld
    if integrate:
      wp.launch(_integrator_vjp, dim=n, device=s.device, inputs=[s.dt, s.jnt_type, s.jnt_dofadr, k, qvel, lam,
                                                                 self.L], outputs=[self.mu, self.lam_q, self.lam_v])
      if self.nfree:
        wp.launch(_free_body_mu, dim=(n, self.nfree), device=s.device,
                  inputs=[s.model.body_dofadr, self.free_body, s.dt, self.A_free, self.lam_v], outputs=[self.mu])
    else:
      for a in (self.mu, self.lam_q, self.lam_v):
        a.zero_()
    if not (self.constrained or acc):
      self.lam_a.zero_()  # an acceleration sensors' pass may have left it
    else:
      wp.launch(_constraint_adjoint, dim=n, device=s.device,
                inputs=[self.L_h, self.jtdj, self.mu, self.g_acc if acc else self._zero_nv], outputs=[self.lam_a])
    wp.launch(_seed, dim=s.nworld, device=s.device, inputs=[k, s.nv, self.mu, self.lam_a, lam, int(integrate)],
              outputs=[G[id(self.tau_e)], G[id(self.tau_a)], G[id(self.damp)], G[id(self.force)],
                       G[id(self.act_next)]])

  def reverse(self, k: int, qvel: wp.array, lam: wp.array, integrate: bool) -> None:
    """The reverse pass of one replayed step into the leaves' adjoints, from the sensors' adjoint
    (already in the program's `sensordata` adjoint) and, `integrate`, the next state's `lam[:, k + 1]`.

    With acceleration sensors two passes, added by linearity: first the sensors' explicit partials
    (their adjoint of `a` lands in `g_acc`), then the implicit function theorem seeded with it."""
    P = self.program
    if self.acc_sensors:
      self.g_acc.zero_()
      P.backward_from(("acc", "step", "state"), [self.sensordata])
      self._inter_pool.zero_()
      self.seed_step(k, qvel, lam, integrate=integrate, acc=True)
      P.backward("step")
    elif integrate:
      self.seed_step(k, qvel, lam)
      P.backward("step")
    P.backward("state")

  def backward(self, traj, qacc, lam, ctrl_grad, nstep: int) -> None:
    """Fills `lam` `(nworld, nstep + 1, nx)` (tangent-space state adjoints), adds control adjoints
    to `ctrl_grad` `(nworld, nstep, nu)` and parameter adjoints to each `Param.value.grad`."""
    self.rebuild()
    s, P = self.scene, self.program
    n, G = s.nworld, self.program.grads
    self.zero_field_grads()
    for k in range(nstep, -1, -1):
      with_step = k < nstep
      kc = min(k, nstep - 1)
      self.replay(traj, qacc, k, with_step or self.acc_sensors)
      self.zero_grads()
      if self.scene.nsensordata:
        wp.launch(_copy_row, dim=(n, s.nsensordata), device=s.device, inputs=[k, traj.sensordata.grad],
                  outputs=[G[id(self.sensordata)]])
      self.reverse(k, traj.qvel, lam, with_step)
      wp.launch(_assemble, dim=n, device=s.device,
                inputs=[s.jnt_type, s.jnt_qposadr, s.jnt_dofadr, k, kc, int(with_step), traj.qpos, traj.qpos.grad,
                        traj.qvel.grad, traj.act.grad] + self._leaves + [self.lam_q, self.lam_v],
                outputs=[lam, ctrl_grad])
    if self.invweight is not None:
      self.invweight.run()
    self.gather_params()

  def zero_grads(self) -> None:
    """Zeroes the replay's adjoints (not the parameter fields' accumulated ones) before a reverse pass."""
    self._inter_pool.zero_()
    self._leaves_pool.zero_()

  def zero_field_grads(self) -> None:
    """Zeroes the parameter fields' adjoints (accumulated over a backward pass or one sweep)."""
    if self._field_pool is not None:
      self._field_pool.zero_()
    for g in self._extra_field_grads:
      g.zero_()

  def _gather_table(self, P) -> tuple:
    """Per column `j` of `theta` `(nparam,)`: its field adjoint's pointer, rows and floats per row, its
    column there (-1: none), and the same for the tied bias (`gather_theta`)."""
    m, G = self.scene.model, P.grads
    cols = np.full((2, self.nparam), -1, np.int32)
    ptrs = np.zeros((2, self.nparam), np.uint64)
    shape = np.ones((2, 2, self.nparam), np.int32)
    views = []
    for p, off, (pc, tie), g in zip(self.layout.params, self.layout.offsets, self.layout.columns, self._param_grads):
      off = int(off)
      for t, (src, c) in enumerate(((flat_rows(g, p.width), pc), (None if tie is None else flat_rows(
          G[id(m.actuator_biasprm)], 10), tie))):
        if src is None:
          continue
        views.append(src)
        sl = slice(off, off + p.dim)
        cols[t, sl], ptrs[t, sl], shape[t, 0, sl], shape[t, 1, sl] = c.numpy(), src.ptr, src.shape[0], src.shape[1]
    dev = self.scene.device
    return (wp.array(ptrs, dtype=wp.uint64, device=dev), wp.array(shape, dtype=int, device=dev),
            wp.array(cols, dtype=int, device=dev), views)

  def gather_theta(self, theta: wp.array) -> None:
    """Sets `theta` `(nworld, nparam)` to the parameters' adjoints (their fields' and the tied bias's),
    in one launch (`gather_params` into zeros, bit for bit)."""
    ptrs, shape, cols, _ = self._theta_table
    wp.launch(_gather_theta, dim=(self.scene.nworld, self.nparam), device=self.scene.device,
              inputs=[ptrs, shape, cols], outputs=[theta])

  def gather_params(self, theta_grad: wp.array | None = None) -> None:
    """Adds the parameters' adjoints (their fields' and the tied bias's) to each `Param.value.grad`,
    or into `theta_grad` `(nworld, nparam)` at the layout's offsets."""
    s, G = self.scene, self.program.grads
    for p, off, (cols, tie), g in zip(self.layout.params, self.layout.offsets, self.layout.columns,
                                      self._param_grads):
      out, off = (p.value.grad, 0) if theta_grad is None else (theta_grad, int(off))
      wp.launch(_gather_param_grad, dim=(s.nworld, p.dim), device=s.device,
                inputs=[flat_rows(g, p.width), cols, 1.0, off], outputs=[out])
      if tie is not None:
        wp.launch(_gather_param_grad, dim=(s.nworld, p.dim), device=s.device,
                  inputs=[flat_rows(G[id(s.model.actuator_biasprm)], 10), tie, -1.0, off], outputs=[out])
