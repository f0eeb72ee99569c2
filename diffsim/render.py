"""Camera images of many worlds: MuJoCo Warp's batched ray-traced renderer over stored states.

`Camera(scene, ...)` holds one MJWarp render context for `nworld` worlds. Each call sets the
worlds' `qpos`, runs kinematics (`mjw.kinematics`, `mjw.com_pos`, `mjw.camlight`), refits the
scene's bounding-volume hierarchy (`mjw.refit_bvh`: without it every world but the first would
draw its bodies where the context was made) and ray-traces every world in one launch, on CUDA or
the CPU, with no OpenGL.

- `Camera.observe(state)` renders the current state of all worlds into a `wp.array4d[float]`
  `(nworld, height, width, 3)` in [0, 1], zero-copy to torch or JAX (`diffsim.interop`).
- `render_trajectory(scene, traj, ...)` renders the stored states of a trajectory into `Frames`
  (uint8 RGB, kept on the device until read or written by `diffsim.video.write_video`).

The default camera (`camera=None`) is diffsim's own: a camera added to a copy of the model that
tracks the centre of mass of each world's bodies (MuJoCo's `trackcom` mode) where the model's root
bodies can translate (free or slide joints), and else stays where it sees that centre at `qpos0`
(an arm's base then stays still in the image). It is placed where it
sees every moving geom (at `qpos0`) with a margin, at the model's `<visual><global azimuth>` and 20
degrees above, with a directional light beside it. A
named model camera (fixed, tracking or targeting, as the MJCF defines it) can be chosen instead.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass

import mujoco
import numpy as np
import warp as wp

from .mjmodel import UnknownNameError
from .scene import available_memory, off_tape

__all__ = ["Camera", "Frames", "RenderWarning", "render_trajectory", "observe", "trajectory_qpos", "check_size",
           "camera_id", "MAX_SIZE", "TRACKING_CAMERA"]

MAX_SIZE = 4096  # pixels, per side
BACKGROUND = (0.16, 0.18, 0.22, 1.0)  # RGBA where no ray hits (MJWarp's skybox is off)
TRACKING_CAMERA = "diffsim_track"  # name of the default camera in the render model
FRAME_MEMORY_FRACTION = 0.5  # share of the available memory that rendered frames may take
_OBJ_GEOM = wp.constant(int(mujoco.mjtObj.mjOBJ_GEOM))
_HIDDEN_GROUP = 5  # geom group the renderer skips (it draws groups 0, 1, 2): unsupported geoms go there
# fields that place and colour what is drawn, copied from the scene's (possibly edited) host model
# into the render model compiled from its source
_DRAWN_FIELDS = ("body_pos", "body_quat", "body_ipos", "body_iquat", "body_mass", "jnt_pos", "jnt_axis", "geom_pos",
                 "geom_quat", "geom_size", "geom_rgba", "mat_rgba", "qpos0")


@wp.kernel
def _set_qpos(
  # In:
  qpos: wp.array3d[float],  # (nworld_traj, nstep + 1, nq)
  worlds: wp.array[int],  # (nworld,) which trajectory world each rendered world shows
  step: int,
  # Data out:
  qpos_out: wp.array2d[float],  # (nworld, nq)
):
  w, i = wp.tid()
  qpos_out[w, i] = qpos[worlds[w], step, i]


@wp.kernel
def _store_rgb(
  # In:
  packed: wp.array2d[wp.uint32],  # (nworld, height * width) MJWarp's packed ARGB
  width: int,
  base: int,
  # Out:
  rgb_out: wp.array4d[wp.uint8],  # (nframe * nworld, height, width, 3)
):
  w, p = wp.tid()
  v = packed[w, p]
  x = p % width
  y = p // width
  rgb_out[base + w, y, x, 0] = wp.uint8((v >> wp.uint32(16)) & wp.uint32(0xFF))
  rgb_out[base + w, y, x, 1] = wp.uint8((v >> wp.uint32(8)) & wp.uint32(0xFF))
  rgb_out[base + w, y, x, 2] = wp.uint8(v & wp.uint32(0xFF))


@wp.kernel
def _store_float_rgb(
  # In:
  packed: wp.array2d[wp.uint32],  # (nworld, height * width)
  width: int,
  # Out:
  rgb_out: wp.array4d[float],  # (nworld, height, width, 3) in [0, 1]
):
  w, p = wp.tid()
  v = packed[w, p]
  x = p % width
  y = p // width
  rgb_out[w, y, x, 0] = float((v >> wp.uint32(16)) & wp.uint32(0xFF)) / 255.0
  rgb_out[w, y, x, 1] = float((v >> wp.uint32(8)) & wp.uint32(0xFF)) / 255.0
  rgb_out[w, y, x, 2] = float(v & wp.uint32(0xFF)) / 255.0


@wp.kernel
def _store_depth_seg(
  # In:
  depth: wp.array2d[float],  # (nworld, height * width) m, or empty
  seg: wp.array2d[wp.vec2i],  # (nworld, height * width) (object id, object type), or empty
  width: int,
  base: int,
  with_depth: int,
  with_seg: int,
  # Out:
  depth_out: wp.array3d[float],  # (nframe * nworld, height, width)
  seg_out: wp.array3d[int],  # (nframe * nworld, height, width)
):
  w, p = wp.tid()
  x = p % width
  y = p // width
  if with_depth != 0:
    depth_out[base + w, y, x] = depth[w, p]
  if with_seg != 0:
    s = seg[w, p]
    seg_out[base + w, y, x] = wp.where(s[1] == _OBJ_GEOM, s[0], -1)


@dataclass
class Frames:
  """Rendered frames of a trajectory.

  Attributes:
    rgb_device: `wp.array4d[uint8]` `(ntime * nworld, height, width, 3)` (Warp arrays have at most
      four dimensions); `rgb` is the same as a host array `(ntime, nworld, height, width, 3)`.
    depth_device: `wp.array3d[float]` `(ntime * nworld, height, width)`: distance (m) along each
      pixel's ray to the first surface, 0 where none; `None` unless asked for.
    segmentation_device: `wp.array3d[int]` `(ntime * nworld, height, width)`: geom id per pixel, -1
      for background; `None` unless asked for.
    time: `(ntime,)` s, the time of each frame.
    worlds: `(nworld,)` the trajectory's world index shown in each column.
    dt: seconds between consecutive stored states (`every` timesteps).
  """

  rgb_device: wp.array
  depth_device: wp.array | None
  segmentation_device: wp.array | None
  time: np.ndarray
  worlds: np.ndarray
  dt: float

  @property
  def shape(self) -> tuple[int, int, int, int, int]:
    """`(ntime, nworld, height, width, 3)`."""
    _, h, w, _ = self.rgb_device.shape
    return (len(self.time), len(self.worlds), h, w, 3)

  @property
  def rgb(self) -> np.ndarray:
    """Host copy `(ntime, nworld, height, width, 3)` uint8."""
    return self.rgb_device.numpy().reshape(self.shape).copy()

  @property
  def depth(self) -> np.ndarray | None:
    """Host copy `(ntime, nworld, height, width)` float32, m; `None` unless asked for."""
    return None if self.depth_device is None else self.depth_device.numpy().reshape(self.shape[:4]).copy()

  @property
  def segmentation(self) -> np.ndarray | None:
    """Host copy `(ntime, nworld, height, width)` int32 geom ids (-1: background); `None` unless asked for."""
    if self.segmentation_device is None:
      return None
    return self.segmentation_device.numpy().reshape(self.shape[:4]).copy()

  @property
  def fps(self) -> float:
    """Frames per second that play the motion in real time."""
    return 1.0 / self.dt


def check_size(size) -> tuple[int, int]:
  """`(width, height)` as positive ints no larger than `MAX_SIZE`, or a ValueError saying what is wrong."""
  try:
    width, height = (int(s) for s in size)
    ok = (width, height) == tuple(size)
  except (TypeError, ValueError):
    ok = False
  if not ok:
    raise ValueError(f"size must be (width, height) in pixels, two integers, got {size!r}")
  if width < 1 or height < 1:
    raise ValueError(f"size {size!r}: width and height must be at least 1 pixel")
  if width > MAX_SIZE or height > MAX_SIZE:
    raise ValueError(f"size {size!r}: at most {MAX_SIZE} pixels a side (the renderer traces one ray per pixel per "
                     f"world); render smaller and upscale if needed")
  return width, height


def camera_id(mjm: mujoco.MjModel, camera) -> int:
  """Model camera id of `camera` (a name or an index), or an `UnknownNameError` listing the cameras."""
  names = [mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_CAMERA, i) or f"#{i}" for i in range(mjm.ncam)]
  if isinstance(camera, (int, np.integer)) and not isinstance(camera, bool):
    if 0 <= camera < mjm.ncam:
      return int(camera)
    raise UnknownNameError(f"camera index {camera} out of range: the model has {mjm.ncam} camera(s) {names}")
  if not isinstance(camera, str):
    raise TypeError(f"camera must be None (diffsim's tracking camera), a camera name or an index, got "
                    f"{type(camera).__name__}")
  i = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_CAMERA, camera)
  if i < 0:
    which = f"its cameras are {names}" if names else "it has none"
    raise UnknownNameError(f"no camera named {camera!r} in the model ({which}); camera=None uses diffsim's camera "
                           f"that tracks the worlds' centre of mass")
  return i


def _source_spec(scene) -> mujoco.MjSpec | None:
  """A fresh `MjSpec` of the scene's model source (MJCF path or string, MjSpec, or USD's converted spec)."""
  source = getattr(scene, "spec", None) or getattr(scene, "source", None)
  if isinstance(source, mujoco.MjSpec):
    return source.copy()
  if isinstance(source, os.PathLike):
    source = os.fspath(source)
  if isinstance(source, str):
    if source.lstrip().startswith("<"):
      return mujoco.MjSpec.from_string(source)
    if os.path.exists(source):
      return mujoco.MjSpec.from_file(source)
  return None


def _framing_distance(mjm: mujoco.MjModel, mjd: mujoco.MjData, com: np.ndarray, *, fovy: float) -> float:
  """Distance (m) at which a camera with vertical field of view `fovy` (degrees) sees a sphere around
  `com` that holds every geom of the moving bodies (at `qpos0`), with a margin; the model's extent
  where nothing moves."""
  moving = (mjm.geom_bodyid > 0) & np.isin(mjm.geom_group, (0, 1, 2))
  if not moving.any():
    return 1.5 * float(mjm.stat.extent)
  reach = np.linalg.norm(mjd.geom_xpos[moving] - com, axis=1) + mjm.geom_rbound[moving]
  return 1.3 * float(reach.max()) / math.tan(math.radians(fovy) / 2)


def _tracking_camera_model(scene) -> mujoco.MjModel:
  """The scene's model with diffsim's camera (and a light) added to its world body: mode `trackcom` on
  the world body keeps the camera at a fixed offset from each world's centre of mass."""
  mjm = scene.mjm
  spec = _source_spec(scene)
  if spec is None:
    raise ValueError("diffsim's default camera is added to the model's MJCF, and this scene was built from a compiled "
                     "MjModel, whose source it does not keep: build the Scene from the MJCF path, string or MjSpec, "
                     "or pass camera='name' of a camera in the model")
  mjd = mujoco.MjData(mjm)
  mujoco.mj_forward(mjm, mjd)
  com = np.array(mjd.subtree_com[0])
  azimuth = math.radians(float(mjm.vis.global_.azimuth))
  elevation = math.radians(-20.0)
  forward = np.array([math.cos(elevation) * math.cos(azimuth), math.cos(elevation) * math.sin(azimuth),
                      math.sin(elevation)])
  right = np.cross(forward, [0.0, 0.0, 1.0])
  right /= np.linalg.norm(right)
  up = np.cross(right, forward)
  distance = _framing_distance(mjm, mjd, com, fovy=45.0)
  quat = np.zeros(4)
  mujoco.mju_mat2Quat(quat, np.column_stack([right, up, -forward]).ravel())
  # a model whose root bodies translate (a cart, a floating base) is followed; one fixed to the world
  # (an arm, a pendulum) is watched from where it stands, so that its base stays still in the image
  roots = mjm.body_parentid[mjm.jnt_bodyid] == 0
  moves = bool(np.any(roots & np.isin(mjm.jnt_type, (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_SLIDE))))
  mode = mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM if moves else mujoco.mjtCamLight.mjCAMLIGHT_FIXED
  spec.worldbody.add_camera(name=TRACKING_CAMERA, mode=mode, pos=com - distance * forward, quat=quat, fovy=45.0)
  # a light beside the camera, so that the faces it sees are lit whatever the model's lights face
  spec.worldbody.add_light(name=TRACKING_CAMERA, mode=mode,
                           type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL, pos=com - distance * forward, dir=forward,
                           diffuse=[0.5, 0.5, 0.5], castshadow=False)
  render_mjm = spec.compile()
  for name in _DRAWN_FIELDS:
    src, dst = getattr(mjm, name), getattr(render_mjm, name)
    if src.shape == dst.shape:
      dst[:] = src
  return render_mjm


def _hide_unsupported(mjm: mujoco.MjModel) -> list[str]:
  """Moves geoms the renderer cannot draw to a hidden group; returns what it cannot show, by name."""
  lost = []
  name = lambda obj, i: mujoco.mj_id2name(mjm, obj, int(i)) or f"#{int(i)}"
  for mesh in range(mjm.nmesh):
    if mjm.mesh_facenum[mesh] == 0:  # a point cloud: no triangles to hit
      geoms = np.flatnonzero((mjm.geom_type == mujoco.mjtGeom.mjGEOM_MESH) & (mjm.geom_dataid == mesh))
      mjm.geom_group[geoms] = _HIDDEN_GROUP
      lost.append(f"mesh {name(mujoco.mjtObj.mjOBJ_MESH, mesh)!r} (no faces; its geoms are hidden)")
  for tex in range(mjm.ntex):
    if mjm.tex_type[tex] == mujoco.mjtTexture.mjTEXTURE_CUBE:
      lost.append(f"texture {name(mujoco.mjtObj.mjOBJ_TEXTURE, tex)!r} (cube map: sampled as a flat image)")
  if mjm.nmat and mjm.mat_texid.ndim == 2:
    roles = np.flatnonzero((mjm.mat_texid[:, 2:] >= 0).any(axis=0)) + 2  # RGB is role 1; roles past it are unused
    for role in roles:
      lost.append(f"material texture role {mujoco.mjtTextureRole(int(role)).name} (ignored)")
  return lost


def _render_model(scene, camera) -> tuple[mujoco.MjModel, int]:
  """A host model for rendering (the scene's, copied, or with diffsim's camera) and the camera id."""
  import copy

  if camera is None:
    mjm = _tracking_camera_model(scene)
    cam = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_CAMERA, TRACKING_CAMERA)
  else:
    cam = camera_id(scene.mjm, camera)
    mjm = copy.deepcopy(scene.mjm)
  return mjm, cam


class Camera:
  """One camera rendering `nworld` worlds of a scene in one launch (MJWarp's ray tracer).

  Args:
    scene: the `Scene` whose model is drawn.
    camera: `None` for diffsim's camera tracking each world's centre of mass; or the name (or
      index) of a camera of the model.
    size: `(width, height)` in pixels, each 1 to `MAX_SIZE`.
    nworld: worlds rendered per call (default: the scene's).
    depth: also keep per-pixel distances (`depth`, m).
    segmentation: also keep per-pixel geom ids (`segmentation`).

  Attributes:
    width, height, nworld, camera (the render model's camera id), mjm (the render host model).
  """

  def __init__(self, scene, *, camera=None, size=(320, 240), nworld: int | None = None, depth: bool = False,
               segmentation: bool = False):
    import mujoco_warp as mjw

    self.width, self.height = check_size(size)
    nworld = scene.nworld if nworld is None else nworld
    if not isinstance(nworld, (int, np.integer)) or nworld < 1:
      raise ValueError(f"nworld must be a positive integer, got {nworld!r}")
    self.scene, self.nworld = scene, int(nworld)
    self.depth, self.segmentation = bool(depth), bool(segmentation)
    self.mjm, self.camera = _render_model(scene, camera)
    lost = _hide_unsupported(self.mjm)
    device = scene.device
    with wp.ScopedDevice(device), off_tape():
      self.model = mjw.put_model(self.mjm)
      # kinematics only: no contact or constraint rows are ever made (nor are there any in a fresh MjData)
      self.data = mjw.put_data(self.mjm, mujoco.MjData(self.mjm), nworld=self.nworld, nconmax=1, njmax=1)
      kwargs = dict(nworld=self.nworld, cam_res=(self.width, self.height), render_rgb=True, render_depth=self.depth,
                    render_seg=self.segmentation, cam_active=[self.camera], background_color=BACKGROUND)
      try:
        self.context = mjw.create_render_context(self.mjm, **kwargs)
      except Exception as e:  # a texture MJWarp cannot load (a by-reference file it cannot decode, ...)
        if not self.mjm.ntex:
          raise
        names = [mujoco.mj_id2name(self.mjm, mujoco.mjtObj.mjOBJ_TEXTURE, i) or f"#{i}" for i in range(self.mjm.ntex)]
        lost.append(f"textures {names} (MJWarp could not load them: {e}; drawn in their material colours)")
        self.context = mjw.create_render_context(self.mjm, use_textures=False, **kwargs)
    if lost:
      warnings.warn(f"the renderer cannot show all of this model: {'; '.join(lost)}", RenderWarning, stacklevel=2)
    self._rgb = None

  def pose(self, qpos: wp.array, *, worlds: wp.array | None = None, step: int = 0) -> None:
    """Sets the worlds' positions and renders them into the context's buffers.

    Args:
      qpos: `(nworld, nq)` or a trajectory's `(nworld_traj, nstep + 1, nq)` float32 on the scene's device.
      worlds: `(nworld,)` int, the rows of a 3-d `qpos` to show (default: 0 .. nworld - 1).
      step: the stored state of a 3-d `qpos` to show.
    """
    import mujoco_warp as mjw

    m, d, rc = self.model, self.data, self.context
    with wp.ScopedDevice(self.scene.device), off_tape():
      if qpos.ndim == 2:
        wp.copy(d.qpos, qpos)
      else:
        if worlds is None:
          worlds = wp.array(np.arange(self.nworld, dtype=np.int32), dtype=int)
        wp.launch(_set_qpos, dim=(self.nworld, self.mjm.nq), inputs=[qpos, worlds, step], outputs=[d.qpos])
      mjw.kinematics(m, d)
      mjw.com_pos(m, d)  # subtree centres of mass, which tracking cameras follow
      mjw.camlight(m, d)
      mjw.refit_bvh(m, d, rc)
      mjw.render(m, d, rc)

  def observe(self, state) -> wp.array:
    """Renders the current state of all worlds: `wp.array4d[float]` `(nworld, height, width, 3)` in [0, 1].

    The array is reused by the next call (copy it to keep it); `diffsim.interop.to_torch` / `to_jax`
    view it without a copy.

    Args:
      state: MJWarp `Data` with `nworld` worlds (e.g. `scene.data()`), or `qpos` `(nworld, nq)`
        (`wp.array` on the scene's device, or array-like).
    """
    qpos = _state_qpos(state, self.nworld, self.mjm.nq, self.scene.device)
    self.pose(qpos)
    if self._rgb is None:
      self._rgb = wp.zeros((self.nworld, self.height, self.width, 3), dtype=float, device=self.scene.device)
    with wp.ScopedDevice(self.scene.device):
      wp.launch(_store_float_rgb, dim=(self.nworld, self.width * self.height),
                inputs=[self.context.rgb_data, self.width], outputs=[self._rgb])
    return self._rgb


class RenderWarning(UserWarning):
  """Parts of a model (meshes, textures) the renderer draws differently or not at all; names them."""



def _state_qpos(state, nworld: int, nq: int, device) -> wp.array:
  qpos = getattr(state, "qpos", state)
  if not isinstance(qpos, wp.array):
    qpos = np.asarray(qpos, dtype=np.float32)
    if qpos.ndim == 1:
      qpos = np.broadcast_to(qpos, (nworld, qpos.shape[0]))
    qpos = wp.array(np.ascontiguousarray(qpos), dtype=float, device=device)
  if qpos.shape != (nworld, nq):
    raise ValueError(f"state: qpos of shape {qpos.shape}, expected (nworld, nq) = {(nworld, nq)} (a state of another "
                     f"scene, or of a different number of worlds than the camera's)")
  if qpos.device != device:
    qpos = qpos.to(device)
  return qpos


def observe(scene, state=None, *, camera=None, size=(320, 240)) -> wp.array:
  """One call: renders the current state of all of `scene`'s worlds, `(nworld, height, width, 3)` float in [0, 1].

  The `Camera` is made on the first call and kept with the scene (`scene.memo`), so later calls only
  launch kernels. See `Camera.observe`.

  Args:
    scene: the `Scene`.
    state: MJWarp `Data` or `qpos` `(nworld, nq)`; default: `scene.data()`, the state the last
      forward-only rollout left.
    camera, size: as in `Camera`.
  """
  width, height = check_size(size)
  key = ("camera", camera, width, height)
  cam = scene.memo.get(key)
  if cam is None:
    cam = scene.memo[key] = Camera(scene, camera=camera, size=(width, height))
  return cam.observe(scene.data() if state is None else state)


def trajectory_qpos(scene, traj) -> wp.array:
  """The `(nworld, nstep + 1, nq)` float32 qpos on the scene's device of a `Trajectory`, a result with `.trajectory`, or an array."""
  source = traj
  if hasattr(traj, "trajectory") and not hasattr(traj, "qpos"):
    traj = traj.trajectory  # TrajectoryResult
  qpos = getattr(traj, "qpos", traj)
  for name, width in (("qvel", scene.nv), ("act", scene.na), ("sensordata", scene.nsensordata)):
    arr = getattr(traj, name, None)  # a Trajectory's other widths must be this scene's too
    if arr is not None and getattr(arr, "ndim", 0) == 3 and arr.shape[2] != width:
      raise ValueError(f"trajectory {name} of shape {tuple(arr.shape)} is not this scene's ({name} width {width}): "
                       f"was it made with another model?")
  if qpos is None:
    raise TypeError(f"expected a Trajectory (or a result holding one), got {type(source).__name__}")
  if not isinstance(qpos, wp.array):
    try:
      qpos = np.asarray(qpos, dtype=np.float32)
    except (TypeError, ValueError):
      raise TypeError(f"expected a Trajectory, a result with .trajectory, or qpos (nworld, nstep + 1, nq); got "
                      f"{type(source).__name__}") from None
  if qpos.ndim == 2:
    qpos = qpos[None] if isinstance(qpos, np.ndarray) else qpos.reshape((1, *qpos.shape))
  if qpos.ndim != 3 or qpos.shape[2] != scene.nq:
    raise ValueError(f"trajectory qpos of shape {tuple(qpos.shape)} is not this scene's: expected (nworld, nstep + 1, "
                     f"nq={scene.nq}); was it made with another model?")
  if isinstance(qpos, np.ndarray):
    return wp.array(np.ascontiguousarray(qpos), dtype=float, device=scene.device)
  if qpos.dtype != wp.float32:
    raise ValueError(f"trajectory qpos has dtype {qpos.dtype.__name__}; expected float32 (Warp's float)")
  return qpos if qpos.device == scene.device else qpos.to(scene.device)


def render_trajectory(scene, traj, *, worlds=None, camera=None, size=(320, 240), every: int = 1, depth: bool = False,
                      segmentation: bool = False, progress: bool = False) -> Frames:
  """Renders every `every`-th stored state (and the last) of the chosen worlds of a trajectory.

  Args:
    scene: the `Scene` the trajectory was made in.
    traj: a `Trajectory` (what `rollout` and `Rollout` return), a result with `.trajectory`
      (`TrajectoryResult`), or qpos
      `(nworld, nstep + 1, nq)` (array-like or `wp.array`).
    worlds: trajectory world indices to show (default: all).
    camera: `None` for diffsim's camera tracking each world's centre of mass, or a model camera's name.
    size: `(width, height)` pixels.
    every: keep every k-th stored state; the final state is always included.
    depth, segmentation: also keep depth (m) and geom-id images.
    progress: show a tqdm bar over frames.

  Returns:
    `Frames`: RGB `(ntime, nworld, height, width, 3)` uint8 on the device (`.rgb` on the host) and
    depth / segmentation where asked for.
  """
  width, height = check_size(size)
  if not isinstance(every, (int, np.integer)) or every < 1:
    raise ValueError(f"every must be a positive integer (keep every k-th state), got {every!r}")
  qpos = trajectory_qpos(scene, traj)
  ntraj, nstored = qpos.shape[0], qpos.shape[1]
  worlds = np.arange(ntraj) if worlds is None else np.atleast_1d(np.asarray(worlds))
  if worlds.ndim != 1 or worlds.size == 0 or not np.issubdtype(worlds.dtype, np.integer):
    raise ValueError(f"worlds must be a non-empty list of world indices, got {worlds!r}")
  if worlds.min() < 0 or worlds.max() >= ntraj:
    raise ValueError(f"worlds {worlds.tolist()} out of range: the trajectory has {ntraj} world(s)")
  steps = list(range(0, nstored, every))
  if steps[-1] != nstored - 1:
    steps.append(nstored - 1)
  nframe, nworld = len(steps), len(worlds)
  need = nframe * nworld * width * height * (3 + 4 * depth + 4 * segmentation)
  free = available_memory(scene.device)
  if free is not None and need > FRAME_MEMORY_FRACTION * free:
    raise MemoryError(f"{nframe} frames x {nworld} worlds at {width}x{height} take {need / 1e9:.3g} GB, more than "
                      f"{FRAME_MEMORY_FRACTION:.0%} of the {free / 1e9:.3g} GB available on {scene.device}: keep fewer "
                      f"states (every=), fewer worlds (worlds=) or render smaller (size=)")
  key = ("camera", camera, width, height, nworld, bool(depth), bool(segmentation))
  cam = scene.memo.get(key)
  if cam is None:
    cam = scene.memo[key] = Camera(scene, camera=camera, size=(width, height), nworld=nworld, depth=depth,
                                   segmentation=segmentation)
  dev = scene.device
  rgb = wp.zeros((nframe * nworld, height, width, 3), dtype=wp.uint8, device=dev)
  depth_out = wp.zeros((nframe * nworld, height, width), dtype=float, device=dev) if depth else None
  seg_out = wp.zeros((nframe * nworld, height, width), dtype=int, device=dev) if segmentation else None
  world_ids = wp.array(worlds.astype(np.int32), dtype=int, device=dev)
  rc = cam.context
  frames = range(nframe)
  if progress:
    from tqdm import tqdm

    frames = tqdm(frames, desc="render", unit="frame")
  empty_f, empty_i = wp.zeros((1, 1), dtype=float, device=dev), wp.zeros((1, 1, 1), dtype=int, device=dev)
  for i in frames:
    cam.pose(qpos, worlds=world_ids, step=steps[i])
    with wp.ScopedDevice(dev):
      wp.launch(_store_rgb, dim=(nworld, width * height), inputs=[rc.rgb_data, width, i * nworld], outputs=[rgb])
      if depth or segmentation:
        wp.launch(_store_depth_seg, dim=(nworld, width * height),
                  inputs=[rc.depth_data if depth else empty_f, rc.seg_data, width, i * nworld, int(depth),
                          int(segmentation)],
                  outputs=[depth_out if depth else empty_f.reshape((1, 1, 1)), seg_out if segmentation else empty_i])
  dt = getattr(traj, "dt", None) or getattr(getattr(traj, "trajectory", None), "dt", None) or scene.dt
  return Frames(rgb, depth_out, seg_out, np.asarray(steps) * dt, worlds, dt * every)
