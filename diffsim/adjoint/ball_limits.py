"""Ball-joint limit rows of the analytic adjoint (MJWarp's `constraint._limit_ball`), replayed
differentiably from `qpos`.

A limited ball joint's rotation `q` (its 4 `qpos`, normalized) has the rotation vector `angle * axis`
(MuJoCo's `quat_to_vel`: `angle = 2 atan2(|q_xyz|, q_w)`, wrapped to (-pi, pi]); the joint is at its
limit where `pos = max(range) - angle - margin < 0`. The row's Jacobian is `-axis` on the joint's
three dofs, `aref = -k imp pos - b J v`, `D` from `dof_invweight0` of the joint's first dof, and its
force `-D (J a - aref)` where `J a < aref` at the solver's acceleration (the Newton solver's
quadratic regime), 0 elsewhere, as the hinge and slide limits in `constraints.py`.
"""

from __future__ import annotations

import mujoco
import numpy as np
import warp as wp

from mujoco_warp._src.types import vec5

from ..joints import BALL
from .constraints import _one_sided_row

__all__ = ["record_ball_limits"]


@wp.kernel
def _ball_limit_rows(
  # Model:
  opt_timestep: float,
  refsafe: int,
  jnt_qposadr: wp.array[int],
  jnt_dofadr: wp.array[int],
  jnt_solref: wp.array2d[wp.vec2],
  jnt_solimp: wp.array2d[vec5],
  jnt_range: wp.array2d[wp.vec2],
  jnt_margin: wp.array2d[float],
  dof_invweight0: wp.array2d[float],
  limited: wp.array[int],  # (nlimited,) limited ball joints
  # In:
  qpos: wp.array2d[float],
  qvel: wp.array2d[float],
  qacc: wp.array2d[float],  # the solver's acceleration (fixed)
  # Out (zeroed):
  qfrc_out: wp.array2d[float],  # (nworld, nv) J^T force
  jtdj_out: wp.array3d[float],  # (nworld, nv, nv) J^T D J of the rows in the quadratic regime
):
  w, i = wp.tid()
  j = limited[i]
  a = jnt_qposadr[j]
  d = jnt_dofadr[j]
  q = wp.normalize(wp.quat(qpos[w, a], qpos[w, a + 1], qpos[w, a + 2], qpos[w, a + 3]))
  xyz = wp.vec3(q[1], q[2], q[3])
  s = wp.length(xyz)
  if s == 0.0:
    return  # no rotation: the limit (range > 0) is not reached
  speed = 2.0 * wp.atan2(s, q[0])
  if speed > wp.pi:
    speed = speed - 2.0 * wp.pi
  rotvec = xyz * (speed / s)
  angle = wp.length(rotvec)
  if angle == 0.0:
    return
  axis = rotvec / angle
  r = jnt_range[w % jnt_range.shape[0], j]
  pos = wp.max(r[0], r[1]) - angle - jnt_margin[w % jnt_margin.shape[0], j]
  if pos < 0.0:
    v = wp.vec3(qvel[w, d], qvel[w, d + 1], qvel[w, d + 2])
    acc = wp.vec3(qacc[w, d], qacc[w, d + 1], qacc[w, d + 2])
    # the row's Jacobian is -axis on the joint's three dofs
    fD = _one_sided_row(opt_timestep, refsafe, jnt_solref[w % jnt_solref.shape[0], j],
                        jnt_solimp[w % jnt_solimp.shape[0], j], pos, -wp.dot(axis, v), -wp.dot(axis, acc),
                        dof_invweight0[w % dof_invweight0.shape[0], d])
    if fD[1] > 0.0:
      for k in range(3):
        wp.atomic_add(qfrc_out, w, d + k, -axis[k] * fD[0])
        for l in range(3):
          wp.atomic_add(jtdj_out, w, d + k, d + l, fD[1] * axis[k] * axis[l])


def record_ball_limits(P, mjm: mujoco.MjModel, m, qpos: wp.array, qvel: wp.array, qacc: wp.array,
                       qfrc_constraint: wp.array, jtdj: wp.array) -> bool:
  """Records (segment "step" of the `_Program` `P`) the limit rows of `mjm`'s limited ball joints at
  the state `qpos` `(nworld, nq)`, `qvel` and the solver's acceleration `qacc` `(nworld, nv)`, adding
  into `qfrc_constraint` and `jtdj`; whether there are any."""
  off = int(mjm.opt.disableflags)
  dsbl = mujoco.mjtDisableBit
  if off & (dsbl.mjDSBL_CONSTRAINT | dsbl.mjDSBL_LIMIT):
    return False
  limited = [j for j in range(mjm.njnt) if mjm.jnt_limited[j] and mjm.jnt_type[j] == BALL]
  if not limited:
    return False
  refsafe = 0 if off & dsbl.mjDSBL_REFSAFE else 1
  P.launch("step", _ball_limit_rows, (qpos.shape[0], len(limited)),
           [float(mjm.opt.timestep), refsafe, m.jnt_qposadr, m.jnt_dofadr, m.jnt_solref, m.jnt_solimp, m.jnt_range,
            m.jnt_margin, m.dof_invweight0, wp.array(np.array(limited, np.int32), dtype=int, device=P.device), qpos,
            qvel, qacc], [qfrc_constraint, jtdj])
  return True
