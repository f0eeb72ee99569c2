"""What diffsim reads off a MuJoCo model before building anything: element names and whether contacts
can happen.

The lowest layer of the package next to `joints`: it imports nothing of diffsim, so `scene`, `params`,
`losses` and the analytic adjoint's coverage check can all use it.
"""

from __future__ import annotations

import mujoco

__all__ = ["UnknownNameError", "name2id", "can_make_contacts", "can_make_constraint_rows", "reads_body_invweight"]


class UnknownNameError(KeyError):
  """A name (of a model element, parameter field, ...) that does not exist; says which do."""

  def __str__(self) -> str:  # KeyError would print the message quoted, with escapes
    return str(self.args[0]) if self.args else ""


def name2id(mjm: mujoco.MjModel, objtype: mujoco.mjtObj, name: str) -> int:
  """Id of the element `name` of type `objtype`, or an `UnknownNameError` that lists the names there are."""
  i = mujoco.mj_name2id(mjm, objtype, name)
  if i < 0:
    kind = mujoco.mjtObj(objtype).name.removeprefix("mjOBJ_").lower()
    names = [mujoco.mj_id2name(mjm, objtype, j) for j in range(_count(mjm, objtype))]
    plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
    raise UnknownNameError(f"no {kind} named {name!r} in the model; {plural} are: {[n for n in names if n]}")
  return i


def _count(mjm: mujoco.MjModel, objtype) -> int:
  return {
    mujoco.mjtObj.mjOBJ_BODY: mjm.nbody,
    mujoco.mjtObj.mjOBJ_JOINT: mjm.njnt,
    mujoco.mjtObj.mjOBJ_GEOM: mjm.ngeom,
    mujoco.mjtObj.mjOBJ_SITE: mjm.nsite,
    mujoco.mjtObj.mjOBJ_ACTUATOR: mjm.nu,
    mujoco.mjtObj.mjOBJ_SENSOR: mjm.nsensor,
    mujoco.mjtObj.mjOBJ_TENDON: mjm.ntendon,
    mujoco.mjtObj.mjOBJ_PAIR: mjm.npair,
  }.get(objtype, 0)


def can_make_contacts(mjm: mujoco.MjModel) -> bool:
  """Whether any two geoms of different bodies can collide (or explicit pairs exist)."""
  if mjm.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT:
    return False
  if mjm.npair:
    return True
  ct, ca, body = mjm.geom_contype, mjm.geom_conaffinity, mjm.geom_bodyid
  hit = ((ct[:, None] & ca[None, :]) | (ca[:, None] & ct[None, :])) != 0
  return bool((hit & (body[:, None] != body[None, :])).any())


def can_make_constraint_rows(mjm: mujoco.MjModel) -> bool:
  """Whether a step of `mjm` can have constraint rows: contacts (`can_make_contacts`), joint or tendon
  limits, equalities or dry friction, unless their disable flags (or mjDSBL_CONSTRAINT) are set."""
  off, dsbl = mjm.opt.disableflags, mujoco.mjtDisableBit
  if off & dsbl.mjDSBL_CONSTRAINT:
    return False
  limits = mjm.jnt_limited.any() or (mjm.ntendon and mjm.tendon_limited.any())
  friction = mjm.dof_frictionloss.any() or (mjm.ntendon and mjm.tendon_frictionloss.any())
  return bool(can_make_contacts(mjm) or (limits and not off & dsbl.mjDSBL_LIMIT)
              or (mjm.neq and not off & dsbl.mjDSBL_EQUALITY)
              or (friction and not off & dsbl.mjDSBL_FRICTIONLOSS))


def reads_body_invweight(mjm: mujoco.MjModel) -> bool:
  """Whether a step of `mjm` can make a constraint row whose softness reads `body_invweight0`
  (MJWarp's contact, connect, weld and flex-strain rows); other rows read `dof_invweight0` only."""
  off, dsbl = mjm.opt.disableflags, mujoco.mjtDisableBit
  if off & dsbl.mjDSBL_CONSTRAINT:
    return False
  body_eq = (int(mujoco.mjtEq.mjEQ_CONNECT), int(mujoco.mjtEq.mjEQ_WELD), int(mujoco.mjtEq.mjEQ_FLEXSTRAIN))
  equality = mjm.neq and not off & dsbl.mjDSBL_EQUALITY and any(int(t) in body_eq for t in mjm.eq_type)
  return bool(can_make_contacts(mjm) or equality or mjm.nflex)

