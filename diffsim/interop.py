"""Zero-copy views for PyTorch and JAX, and a rollout that PyTorch autograd trains through.

Views (no data is copied; both sides read and write the same memory):

  `to_torch(x)` / `to_jax(x)` take a `wp.array`, a `Trajectory` (returns a dict by field) or a bound
  `Param` (its `value`), and return tensors / arrays of the same shape:

    qpos        (nworld, nstep + 1, nq)
    qvel        (nworld, nstep + 1, nv)
    act         (nworld, nstep + 1, na)
    sensordata  (nworld, nstep + 1, nsensordata)
    ctrl        (nworld, nstep, nu)
    Param.value (nworld, dim)

  `from_torch(t)` / `from_jax(a)` wrap a tensor / array as a float32 `wp.array`, e.g. controls made
  by a policy, to pass to `diffsim.rollout`.

  A `Rollout` writes the same buffers on every call: clone a view (`t.clone()`, `jnp.array(a)`) to
  keep its values past the next call. JAX treats its arrays as immutable: a JAX view of a diffsim
  array shows Warp's later writes, and Warp writing into an array from `from_jax` changes a value
  that JAX assumes constant; use such views for reading. JAX only wraps contiguous, 16-byte aligned
  memory; `to_jax` raises instead of silently copying anything else.

Autograd: `torch_rollout(scene, ctrl, qpos0=None, qvel0=None)` runs `diffsim.rollout` and returns
`(qpos, qvel, sensordata)` tensors; `backward` seeds the trajectory gradients with the incoming
ones, runs diffsim's adjoint (`wp.Tape.backward`) and returns d/d`ctrl`, d/d`qpos0`, d/d`qvel0`.

Example:

  import torch, diffsim
  from diffsim.interop import torch_rollout

  scene = diffsim.Scene.from_xml(diffsim.asset_path("cartpole.xml"), nworld=64, device="cpu")
  ctrl = torch.zeros(64, 100, scene.nu, requires_grad=True)  # or the output of a policy
  opt = torch.optim.Adam([ctrl], lr=0.05)
  for _ in range(50):
    qpos, qvel, sensordata = torch_rollout(scene, ctrl)
    loss = ((qpos[:, -1, 1] - torch.pi) ** 2).mean() + 1e-3 * (ctrl ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

torch and jax are optional (`pip install diffsim[torch]`, `diffsim[jax]`) and imported only when a
function here needs them.
"""

from __future__ import annotations

import contextlib

import warp as wp

from .params import Param
from .rollout import Rollout, Trajectory
from .rollout import rollout as _rollout

__all__ = ["to_torch", "from_torch", "to_jax", "from_jax", "torch_rollout"]

_FIELDS = ("qpos", "qvel", "act", "sensordata", "ctrl")


def _require(module: str, extra: str):
  """Imports `module`, or raises an ImportError that names the extra to install."""
  import importlib

  try:
    return importlib.import_module(module)
  except ImportError as e:
    raise ImportError(f"diffsim.interop needs {module.split('.')[0]}: pip install 'diffsim[{extra}]' ({e})") from e


def _array(x, what: str) -> wp.array:
  if isinstance(x, Param):
    if x.value is None:
      raise ValueError(f"{x!r} has no value yet: bind it to a scene first (param.bind(scene) or use it in a rollout)")
    return x.value
  if isinstance(x, wp.array):
    return x
  raise TypeError(f"{what} takes a wp.array, a Trajectory or a Param, got {type(x).__name__}")


def to_torch(x, *, requires_grad: bool = False):
  """Zero-copy PyTorch view(s) of diffsim arrays.

  Args:
    x: a `wp.array`, a `Trajectory` or a bound `Param`.
    requires_grad: also view the array's `.grad` as the tensor's `.grad` (Warp's `wp.to_torch`
      convention); off by default, so the views are plain data tensors.

  Returns:
    A `torch.Tensor` sharing memory with the array, or for a `Trajectory` a dict
    `{"qpos", "qvel", "act", "sensordata", "ctrl"}` of such tensors.
  """
  _require("torch", "torch")
  if isinstance(x, Trajectory):
    return {k: wp.to_torch(getattr(x, k), requires_grad=requires_grad and getattr(x, k).requires_grad)
            for k in _FIELDS}
  a = _array(x, "to_torch")
  return wp.to_torch(a, requires_grad=requires_grad and a.requires_grad)


def from_torch(t, *, requires_grad: bool = False) -> wp.array:
  """Zero-copy float32 `wp.array` view of a PyTorch tensor (e.g. controls for `diffsim.rollout`).

  Args:
    t: a float32 tensor on the CPU or a CUDA device.
    requires_grad: give the array a `.grad`; Warp then allocates it and sets it as `t.grad`
      (shared memory), so `tape.backward` fills `t.grad`.

  Returns:
    A `wp.array` with `t`'s shape and strides, on the matching Warp device.
  """
  torch = _require("torch", "torch")
  if not isinstance(t, torch.Tensor):
    raise TypeError(f"from_torch takes a torch.Tensor, got {type(t).__name__}")
  if t.dtype != torch.float32:
    raise TypeError(f"diffsim arrays are float32, got a {t.dtype} tensor; convert it with t.float() (a copy)")
  return wp.from_torch(t, dtype=wp.float32, requires_grad=requires_grad)


def to_jax(x):
  """Zero-copy JAX view(s) of diffsim arrays, through DLPack.

  Args:
    x: a `wp.array`, a `Trajectory` or a bound `Param`. The memory must be contiguous and 16-byte
      aligned (every array diffsim allocates is; a sliced view may not be).

  Returns:
    A `jax.Array` sharing memory with the array, or for a `Trajectory` a dict by field.

  Raises:
    ValueError: JAX would have to copy the array.
  """
  _require("jax", "jax")
  if isinstance(x, Trajectory):
    return {k: to_jax(getattr(x, k)) for k in _FIELDS}
  a = _array(x, "to_jax")
  if a.size and not a.is_contiguous:
    raise ValueError(f"to_jax needs a contiguous array, got shape {a.shape} strides {a.strides}; "
                     "JAX wraps only compact memory (wp.clone(a) makes a contiguous copy)")
  j = wp.to_jax(a)
  if a.size and j.unsafe_buffer_pointer() != a.ptr:
    raise ValueError("JAX copied the array instead of viewing it (its memory is not 16-byte aligned); "
                     "view the whole array rather than a slice, or copy it explicitly with wp.clone(a)")
  return j


def from_jax(a) -> wp.array:
  """Zero-copy float32 `wp.array` view of a JAX array on the CPU or a CUDA device.

  JAX arrays are immutable: read the view in Warp, or write it only when no JAX computation uses
  the array afterwards.
  """
  jax = _require("jax", "jax")
  jnp = _require("jax.numpy", "jax")
  if not isinstance(a, jax.Array):
    raise TypeError(f"from_jax takes a jax.Array, got {type(a).__name__}")
  if a.dtype != jnp.float32:
    raise TypeError(f"diffsim arrays are float32, got a {a.dtype} array; convert it with a.astype(jnp.float32)")
  return wp.from_jax(a, dtype=wp.float32)


# -- PyTorch autograd -----------------------------------------------------------------------------

_FUNCTION = None


def _rollout_function():
  """The `torch.autograd.Function`, defined on first use so that `import diffsim` needs no torch."""
  global _FUNCTION
  if _FUNCTION is not None:
    return _FUNCTION
  torch = _require("torch", "torch")

  class TorchRollout(torch.autograd.Function):
    """`(runner, differentiate, ctrl, qpos0, qvel0) -> (qpos, qvel, sensordata)` through diffsim."""

    @staticmethod
    def forward(ctx, runner, differentiate, ctrl, qpos0, qvel0):
      scene = runner.scene if isinstance(runner, Rollout) else runner
      cuda = scene.device.is_cuda
      if cuda:  # Warp launches on its own stream: wait for the work that made the inputs
        torch.cuda.current_stream(ctrl.device).synchronize()
      needs = ctx.needs_input_grad[2:] if differentiate else (False, False, False)

      def view(t, need):
        if t is None:
          return None, None
        g = torch.zeros_like(t) if need else None
        return wp.from_torch(t, dtype=wp.float32, requires_grad=need, grad=g), g

      (ctrl_w, ctrl_g), (qpos0_w, qpos0_g), (qvel0_w, qvel0_g) = (view(t, n) for t, n in
                                                                  zip((ctrl, qpos0, qvel0), needs))
      tape = wp.Tape() if differentiate else None
      with tape if tape is not None else contextlib.nullcontext():
        if isinstance(runner, Rollout):
          traj = runner(ctrl_w, qpos0=qpos0_w, qvel0=qvel0_w)
        else:
          traj = _rollout(scene, ctrl_w, qpos0=qpos0_w, qvel0=qvel0_w)
      if cuda:
        wp.synchronize_device(scene.device)

      outs = tuple(wp.to_torch(a, requires_grad=False) for a in (traj.qpos, traj.qvel, traj.sensordata))
      if isinstance(runner, Rollout):
        # its buffers are rewritten by the next call: hand out copies, and remember which call this was
        ctx.call = runner.ncall
        outs = tuple(o.clone() for o in outs)
      else:
        # the outputs alias this call's trajectory, which the backward reads (quaternions): torch
        # refuses the backward if they were modified in place
        ctx.save_for_backward(outs[0])
      ctx.runner, ctx.tape, ctx.traj = runner, tape, traj
      ctx.grads = (ctrl_g, qpos0_g, qvel0_g)
      return outs

    @staticmethod
    def backward(ctx, g_qpos, g_qvel, g_sensordata):
      if ctx.tape is None:
        return (None,) * 5
      ctx.saved_tensors  # raises if an output the backward reads was modified in place
      runner, traj = ctx.runner, ctx.traj
      if isinstance(runner, Rollout) and runner.ncall != ctx.call:
        raise RuntimeError("this Rollout ran again after the forward pass being differentiated, overwriting its "
                           "Jacobians; call backward before the next call, or pass the Scene (fresh buffers per call)")
      dev = traj.qpos.device
      if dev.is_cuda:
        torch.cuda.current_stream(g_qpos.device).synchronize()
      for g in ctx.grads:
        if g is not None:
          g.zero_()  # tape.backward accumulates; a second backward (retain_graph) starts afresh
      seeds = {}
      for a, g in ((traj.qpos, g_qpos), (traj.qvel, g_qvel), (traj.sensordata, g_sensordata)):
        if g is None:
          a.grad.zero_()
        else:
          seeds[a] = wp.from_torch(g.detach().to(torch.float32).contiguous(), dtype=wp.float32)
      ctx.tape.backward(grads=seeds)
      if dev.is_cuda:
        wp.synchronize_device(dev)
      # copies: autograd may keep a returned tensor as a leaf's .grad, which a later backward would zero
      return (None, None) + tuple(None if g is None else g.clone() for g in ctx.grads)

  _FUNCTION = TorchRollout
  return _FUNCTION


def torch_rollout(scene, ctrl, qpos0=None, qvel0=None):
  """A diffsim rollout as a differentiable PyTorch operation.

  Args:
    scene: a `Scene` (each call gets fresh buffers and returns zero-copy views of them), or a
      differentiable `Rollout` (buffers reused, returns copies; call `backward` before its next call).
    ctrl: `(nworld, nstep, nu)` tensor, e.g. a policy's output; converted to float32 on the scene's
      device (a differentiable copy only when it is not already).
    qpos0: optional `(nworld, nq)` or `(nq,)` initial positions; default the model's `qpos0`.
    qvel0: optional `(nworld, nv)` or `(nv,)` initial velocities; default 0.

  Returns:
    `(qpos, qvel, sensordata)` float32 tensors of shapes `(nworld, nstep + 1, nq)`,
    `(nworld, nstep + 1, nv)`, `(nworld, nstep + 1, nsensordata)`. Gradients flow back to `ctrl`,
    `qpos0` and `qvel0` (those that require grad) through diffsim's adjoint.

  Raises:
    DivergenceError: (when given a `Scene`) a world's state became NaN/Inf.
  """
  torch = _require("torch", "torch")

  sc = scene.scene if isinstance(scene, Rollout) else scene
  device = wp.device_to_torch(sc.device)

  def prep(t, name, width):
    if t is None:
      return None
    if not isinstance(t, torch.Tensor):
      t = torch.as_tensor(t)
    if not t.is_floating_point():
      raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    t = t.to(device=device, dtype=torch.float32)
    if width is not None and t.ndim == 1:
      t = t.reshape(1, -1)  # 2-D so that diffsim reads the gradient buffer given, not a reshaped copy
    return t.contiguous()

  ctrl = prep(ctrl, "ctrl", None)
  if ctrl is None or ctrl.ndim != 3 or ctrl.shape[0] != sc.nworld or ctrl.shape[2] != sc.nu:
    raise ValueError(f"ctrl must have shape (nworld={sc.nworld}, nstep, nu={sc.nu}), "
                     f"got {None if ctrl is None else tuple(ctrl.shape)}")
  qpos0 = prep(qpos0, "qpos0", sc.nq)
  qvel0 = prep(qvel0, "qvel0", sc.nv)
  inputs = [t for t in (ctrl, qpos0, qvel0) if t is not None]
  differentiate = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
  return _rollout_function().apply(scene, differentiate, ctrl, qpos0, qvel0)
