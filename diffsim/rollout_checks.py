"""Checks of a rollout's inputs and outputs: shapes, dtypes and devices of the inputs (before any
kernel runs), NaN/Inf in the inputs and the states (`check_finite`: `DivergenceError`), and the
finite-difference lanes' self-check at constraint switches and actuator force clamps
(`check_switches`: `GradientWarning`)."""

from __future__ import annotations

import numpy as np
import warp as wp

__all__ = ["DivergenceError", "GradientWarning", "as_state", "check_ctrl", "check_finite", "check_finite_inputs",
           "check_switches"]


class DivergenceError(FloatingPointError):
  """A rollout produced NaN or Inf; the message names the first world and step."""


class GradientWarning(UserWarning):
  """Step Jacobians that crossed a constraint switch or an actuator force clamp on every
  finite-difference lane; the message names the first world and step and the clamp (see
  `check_switches`)."""


@wp.kernel
def _count_nonfinite(a: wp.array3d[float], count: wp.array[int]):
  w, k, i = wp.tid()
  if not wp.isfinite(a[w, k, i]):
    wp.atomic_add(count, 0, 1)


@wp.kernel
def _first_nonfinite_step(a: wp.array3d[float], first: wp.array[int]):
  w, k, i = wp.tid()
  if not wp.isfinite(a[w, k, i]):
    wp.atomic_min(first, w, k)


def as_state(x, name: str, n: int, width: int, scene, default: wp.array) -> wp.array:
  """`(nworld, width)` or `(width,)` input as a 2-D float array on the scene's device."""
  if x is None:
    return default
  if isinstance(x, wp.array):
    if x.dtype != wp.float32:
      raise TypeError(f"{name} must be a float32 wp.array, got dtype {wp.types.type_repr(x.dtype)}")
    if x.device != scene.device:
      raise ValueError(f"{name} is on {x.device} but the scene is on {scene.device}; use wp.clone({name}, device=...)")
    if x.ndim == 1:
      x = x.reshape((1, x.shape[0]))
    if x.ndim != 2 or x.shape[1] != width or x.shape[0] not in (1, n):
      raise ValueError(f"{name} must have shape (nworld={n}, {width}) or ({width},), got {x.shape}")
    return x
  a = np.asarray(x, dtype=np.float32)
  if a.ndim == 1:
    a = a[None]
  if a.ndim != 2 or a.shape[1] != width or a.shape[0] not in (1, n):
    raise ValueError(f"{name} must have shape (nworld={n}, {width}) or ({width},), got {np.shape(x)}")
  return wp.array(a, dtype=float, device=scene.device)


def check_ctrl(scene, ctrl) -> int:
  if not isinstance(ctrl, wp.array):
    raise TypeError(f"ctrl must be a wp.array of shape (nworld, nstep, nu), got {type(ctrl).__name__}; "
                    "use wp.array(np_ctrl, dtype=float, requires_grad=True)")
  if ctrl.dtype != wp.float32:
    raise TypeError(f"ctrl must have dtype float32, got {wp.types.type_repr(ctrl.dtype)}")
  if ctrl.device != scene.device:
    raise ValueError(f"ctrl is on {ctrl.device} but the scene is on {scene.device}; "
                     f"use wp.clone(ctrl, device='{scene.device}')")
  if ctrl.ndim != 3 or ctrl.shape[0] != scene.nworld or ctrl.shape[2] != scene.nu:
    raise ValueError(f"ctrl must have shape (nworld={scene.nworld}, nstep, nu={scene.nu}), got {ctrl.shape}")
  if ctrl.shape[1] < 1:
    raise ValueError("ctrl has nstep = 0; a rollout needs at least one step")
  return ctrl.shape[1]


def check_finite_inputs(scene, arrays: dict[str, wp.array]) -> None:
  count = wp.zeros(1, dtype=int, device=scene.device)
  for name, a in arrays.items():
    if a is None or a.size == 0:
      continue
    a3 = a.reshape((a.shape[0], -1, a.shape[-1])) if a.ndim != 3 else a
    wp.launch(_count_nonfinite, dim=a3.shape, inputs=[a3, count], device=scene.device)
    n = int(count.numpy()[0])
    if n:
      raise ValueError(f"{name} contains {n} NaN/Inf value(s); rollouts need finite inputs")


def check_finite(traj) -> None:
  """Raises `DivergenceError` naming the first world and step whose state is NaN or Inf."""
  dev = traj.qpos.device
  n = traj.nworld
  first = wp.full(n, traj.nstep + 1, dtype=int, device=dev)
  for a in (traj.qpos, traj.qvel, traj.act):
    if a.size:
      wp.launch(_first_nonfinite_step, dim=a.shape, inputs=[a, first], device=dev)
  f = first.numpy()
  bad = np.nonzero(f <= traj.nstep)[0]
  if bad.size:
    w = int(bad[np.argmin(f[bad])])
    raise DivergenceError(
      f"rollout diverged: world {w} has a NaN/Inf state at step {int(f[w])} (of {traj.nstep}); "
      f"{bad.size} of {n} worlds diverged. Lower the timestep, the controls, or check the model.")


def check_switches(ro) -> int:
  """The gradient's self-check: warns (`GradientWarning`) when a step Jacobian column of the last
  differentiable call of `ro` could not avoid a constraint switch or actuator force clamp
  (`Rollout.switches`), naming the first world and step and the first clamp (`Rollout.kinks`);
  returns the number of such columns. Costs two host reads of `(nworld, nstep + 1)` ints;
  `rollout(check=True)` and `Rollout(check=True)` call it."""
  import warnings

  counts = ro.switches().numpy()
  total = int(counts.sum())
  if total:
    from .lane_solver import kink_name

    w, k = (int(i[0]) for i in np.nonzero(counts))
    rows = int(np.count_nonzero(counts))
    kinks = ro.kinks().numpy()
    kink = ""
    if kinks.any():
      kw, kk = (int(i[0]) for i in np.nonzero(kinks))
      kink = (f"; the lanes straddle {kink_name(ro.scene.mjm, int(kinks[kw, kk]))} at step {kk} in world {kw} "
              f"({np.count_nonzero(kinks)} world-step(s) at actuator force clamps; gradient='analytic' "
              f"differentiates them where the model is covered)")
    warnings.warn(
      f"{total} finite-difference Jacobian column(s) in {rows} world-step(s), first world {w} at step {k}, crossed "
      f"a constraint switch on every lane (a contact or limit appearing, vanishing or changing regime within the "
      f"step, or an actuator force clamp engaging or letting go){kink}: the gradient through those steps is "
      f"unreliable. Use central differences (central=True), a smaller qpos step (eps={{'qpos': ...}}), or a state "
      f"further from the switch.", GradientWarning, stacklevel=3)
  return total
