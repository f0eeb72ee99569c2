"""A local web page that plays the trajectories of many worlds (viser; `pip install "diffsim[view]"`).

`view(scene, traj)` (or `diffsim view RESULT` on a file written by `save_trajectory`) serves a page on
localhost and prints its address. There one scrubs time with a slider, plays the worlds at real
speed (or faster, slower), and shows or hides each world. The worlds stand side by side in a grid,
each drawn from the model's geoms (visual groups 0-2) at the poses MuJoCo C's `mj_kinematics` gives
their stored `qpos`.
"""

from __future__ import annotations

import math
import os
import socket
import tempfile
import threading
import time

import mujoco
import numpy as np

__all__ = ["view", "serve", "Viewer", "save_trajectory", "load_trajectory"]

MAX_UPDATES_PER_SECOND = 30.0  # playback skips stored states beyond this many pose updates a second


def _require_viser():
  try:
    import viser
  except ImportError:
    raise ImportError("the viewer needs viser, an optional extra: pip install \"diffsim[view]\"") from None
  return viser


def save_trajectory(path, scene, traj, *, worlds=None, labels=None) -> str:
  """Writes what `diffsim view` plays: `qpos (nworld, nstep + 1, nq)`, the timestep, the model
  (MuJoCo's binary MJB, meshes included) and optional world labels in one `.npz` (temporary file,
  then renamed)."""
  from .render import trajectory_qpos

  path = os.fspath(path)
  if not path.endswith(".npz"):
    raise ValueError(f"trajectory file {path!r}: the name must end in .npz")
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    raise FileNotFoundError(f"trajectory file {path!r}: the folder {folder!r} does not exist; create it first")
  qpos = trajectory_qpos(scene, traj).numpy()
  if worlds is not None:
    qpos = qpos[np.asarray(worlds)]
  dt = getattr(traj, "dt", None) or getattr(getattr(traj, "trajectory", None), "dt", None) or scene.dt
  mjb = np.zeros(mujoco.mj_sizeModel(scene.mjm), np.uint8)
  mujoco.mj_saveModel(scene.mjm, None, mjb)
  partial = path[:-4] + ".partial.npz"
  if labels is not None and len(labels) != len(qpos):
    raise ValueError(f"{len(labels)} labels for {len(qpos)} worlds: give one per world")
  extra = {} if labels is None else {"labels": np.array([str(s) for s in labels])}
  np.savez_compressed(partial, qpos=qpos, dt=np.float64(dt), mjb=mjb, **extra)
  os.replace(partial, path)
  return path


def load_trajectory(path) -> tuple[mujoco.MjModel, np.ndarray, float, list | None]:
  """`(model, qpos (nworld, nstep + 1, nq), dt, labels or None)` from a file of `save_trajectory`."""
  path = os.fspath(path)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no trajectory file {path!r} (write one with diffsim.viewer.save_trajectory; the "
                            f"tutorials write out/<tutorial>/trajectory.npz)")
  try:
    with np.load(path) as f:
      qpos, dt, mjb = f["qpos"], float(f["dt"]), f["mjb"]
      labels = f["labels"].tolist() if "labels" in f.files else None
  except (KeyError, ValueError, OSError) as e:
    raise ValueError(f"{path!r} is not a trajectory file of diffsim.viewer.save_trajectory ({e})") from None
  with tempfile.TemporaryDirectory() as tmp:
    model_path = os.path.join(tmp, "model.mjb")
    mjb.tofile(model_path)
    mjm = mujoco.MjModel.from_binary_path(model_path)
  if qpos.ndim != 3 or qpos.shape[2] != mjm.nq:
    raise ValueError(f"{path!r}: qpos of shape {qpos.shape} does not fit its model (nq={mjm.nq})")
  return mjm, qpos, dt, labels


def _geom_mesh(mjm: mujoco.MjModel, g: int, plane_half: float):
  """`(vertices (n, 3), faces (m, 3))` of geom `g` in its own frame, or None for types not drawn."""
  import trimesh

  t, size = mjm.geom_type[g], mjm.geom_size[g]
  G = mujoco.mjtGeom
  if t == G.mjGEOM_BOX:
    mesh = trimesh.creation.box(extents=2 * size)
  elif t == G.mjGEOM_SPHERE:
    mesh = trimesh.creation.icosphere(subdivisions=2, radius=size[0])
  elif t == G.mjGEOM_ELLIPSOID:
    mesh = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
    mesh.vertices *= size
  elif t == G.mjGEOM_CAPSULE:
    mesh = trimesh.creation.capsule(height=2 * size[1], radius=size[0], count=[16, 8])
  elif t == G.mjGEOM_CYLINDER:
    mesh = trimesh.creation.cylinder(radius=size[0], height=2 * size[1], sections=16)
  elif t == G.mjGEOM_PLANE:  # an infinite plane (size 0) is drawn as the tile under its world
    hx, hy = (size[0] or plane_half), (size[1] or plane_half)
    mesh = trimesh.creation.box(extents=(2 * hx, 2 * hy, 1e-3))
  elif t == G.mjGEOM_MESH:
    m = mjm.geom_dataid[g]
    v0, nv = mjm.mesh_vertadr[m], mjm.mesh_vertnum[m]
    f0, nf = mjm.mesh_faceadr[m], mjm.mesh_facenum[m]
    if nf == 0:
      return None
    return mjm.mesh_vert[v0:v0 + nv].astype(np.float32), mjm.mesh_face[f0:f0 + nf].astype(np.int32)
  else:  # heightfields, SDFs, lines: not drawn
    return None
  return np.asarray(mesh.vertices, np.float32), np.asarray(mesh.faces, np.int32)


def _geom_rgb(mjm: mujoco.MjModel, g: int) -> tuple[int, int, int]:
  rgba = mjm.geom_rgba[g]
  if mjm.geom_matid[g] >= 0 and np.allclose(rgba, [0.5, 0.5, 0.5, 1.0]):  # MuJoCo's default: the material's colour
    rgba = mjm.mat_rgba[mjm.geom_matid[g]]
  return tuple(int(round(255 * c)) for c in rgba[:3])


def _poses(mjm: mujoco.MjModel, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Body positions `(nworld, ntime, nbody, 3)` and quaternions `(..., 4)` of every stored state."""
  d = mujoco.MjData(mjm)
  nworld, ntime, _ = qpos.shape
  xpos = np.zeros((nworld, ntime, mjm.nbody, 3))
  xquat = np.zeros((nworld, ntime, mjm.nbody, 4))
  for w in range(nworld):
    for k in range(ntime):
      d.qpos[:] = qpos[w, k]
      mujoco.mj_kinematics(mjm, d)
      xpos[w, k], xquat[w, k] = d.xpos, d.xquat
  return xpos, xquat


def _free_port_error(host: str, port: int) -> None:
  with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
    try:
      s.bind((host, port))
    except OSError as e:
      raise OSError(f"cannot serve the viewer on {host}:{port} ({e.strerror}): pass another port (port=0 picks a "
                    f"free one)") from None


class Viewer:
  """A viser server showing `qpos (nworld, ntime, nq)` of a model; `url` is its address.

  Args:
    mjm: the host model.
    qpos: stored positions, `(nworld, ntime, nq)`.
    dt: seconds between stored states.
    host, port: where to serve (`port=0`: a free port).
    labels: one name per world (default "world i").
    spacing: metres between worlds in the grid (default: from the size of the moving geoms).
    play: start playing (else the page opens at the first state, paused).
  """

  def __init__(self, mjm: mujoco.MjModel, qpos: np.ndarray, dt: float, *, host: str = "127.0.0.1", port: int = 8080,
               labels=None, spacing: float | None = None, play: bool = True):
    viser = _require_viser()
    qpos = np.asarray(qpos, dtype=np.float64)
    if qpos.ndim != 3 or qpos.shape[2] != mjm.nq:
      raise ValueError(f"qpos of shape {qpos.shape}: expected (nworld, ntime, nq={mjm.nq})")
    if not isinstance(port, int) or not 0 <= port < 65536:
      raise ValueError(f"port must be an integer in 0..65535, got {port!r}")
    if port == 0:
      with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    _free_port_error(host, port)
    self.mjm, self.qpos, self.dt = mjm, qpos, float(dt)
    self.nworld, self.ntime = qpos.shape[:2]
    labels = [f"world {w}" for w in range(self.nworld)] if labels is None else [str(s) for s in labels]
    self.xpos, self.xquat = _poses(mjm, qpos)
    moving = mjm.body_parentid != np.arange(mjm.nbody)
    self._moving = [b for b in range(1, mjm.nbody) if np.ptp(self.xpos[:, :, b], axis=1).max() > 0
                    or np.ptp(self.xquat[:, :, b], axis=1).max() > 0] if moving.any() else []
    if spacing is None:
      reach = np.linalg.norm(self.xpos[:, :, 1:] - self.xpos[:, :1, 1:].mean(axis=2, keepdims=True), axis=-1)
      rbound = float(mjm.geom_rbound[mjm.geom_bodyid > 0].max()) if (mjm.geom_bodyid > 0).any() else 0.1
      spacing = 2.5 * (float(reach.max()) + rbound) if reach.size else 1.0
    self.spacing = max(float(spacing), 1e-3)
    self.server = viser.ViserServer(host=host, port=port, label="diffsim", verbose=False)
    self.url = f"http://{host}:{port}"
    self._build(labels, play)
    self._frame = 0
    self._closed = threading.Event()
    self._player = threading.Thread(target=self._play_loop, daemon=True)
    self._player.start()

  def _build(self, labels, play: bool) -> None:
    mjm, server = self.mjm, self.server
    columns = math.ceil(math.sqrt(self.nworld))
    self._world_frames, self._body_frames = [], []
    drawn = [g for g in range(mjm.ngeom) if mjm.geom_group[g] in (0, 1, 2) and mjm.geom_rgba[g, 3] > 0]
    meshes = {g: _geom_mesh(mjm, g, 0.5 * self.spacing) for g in drawn}
    for w in range(self.nworld):
      r, c = divmod(w, columns)
      world = server.scene.add_frame(f"/world_{w}", show_axes=False,
                                     position=(c * self.spacing, -r * self.spacing, 0.0))
      server.scene.add_label(f"/world_{w}/label", labels[w], position=(0.0, 0.0, -0.05 * self.spacing))
      bodies = {}
      for b in range(mjm.nbody):
        bodies[b] = server.scene.add_frame(f"/world_{w}/body_{b}", show_axes=False,
                                           position=tuple(self.xpos[w, 0, b]), wxyz=tuple(self.xquat[w, 0, b]))
      for g, mesh in meshes.items():
        if mesh is None:
          continue
        b = mjm.geom_bodyid[g]
        server.scene.add_mesh_simple(f"/world_{w}/body_{b}/geom_{g}", vertices=mesh[0], faces=mesh[1],
                                     color=_geom_rgb(mjm, g), position=tuple(mjm.geom_pos[g]),
                                     wxyz=tuple(mjm.geom_quat[g]), opacity=float(mjm.geom_rgba[g, 3]))
      self._world_frames.append(world)
      self._body_frames.append(bodies)
    self.unsupported = [g for g, mesh in meshes.items() if mesh is None]
    if self.unsupported:
      import warnings

      names = [mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_GEOM, g) or f"#{g}" for g in self.unsupported]
      warnings.warn(f"the viewer does not draw geoms {names} (heightfields, SDFs, meshes without faces)", stacklevel=3)
    extent = self.spacing * columns
    server.initial_camera.look_at = (0.5 * (columns - 1) * self.spacing, -0.5 * (columns - 1) * self.spacing, 0.0)
    server.initial_camera.position = (0.5 * (columns - 1) * self.spacing, -1.2 * extent - self.spacing,
                                      0.6 * extent + 0.5 * self.spacing)
    gui = server.gui
    self.time_slider = gui.add_slider("time (s)", min=0.0, max=max(self.dt * (self.ntime - 1), 1e-9),
                                      step=self.dt, initial_value=0.0)
    self.playing = gui.add_checkbox("play", initial_value=bool(play))
    self.speed = gui.add_slider("speed", min=0.1, max=4.0, step=0.1, initial_value=1.0)

    @self.time_slider.on_update
    def _(_event) -> None:
      self.show(int(round(self.time_slider.value / self.dt)))

    with gui.add_folder("worlds"):
      self.world_boxes = []
      for w in range(self.nworld):
        box = gui.add_checkbox(labels[w], initial_value=True)

        @box.on_update
        def _(_event, w=w, box=box) -> None:
          self._world_frames[w].visible = bool(box.value)

        self.world_boxes.append(box)

  def show(self, frame: int) -> None:
    """Poses every world at stored state `frame`."""
    frame = int(np.clip(frame, 0, self.ntime - 1))
    self._frame = frame
    with self.server.atomic():
      for w in range(self.nworld):
        if not self._world_frames[w].visible:
          continue
        for b in self._moving:
          handle = self._body_frames[w][b]
          handle.position = tuple(self.xpos[w, frame, b])
          handle.wxyz = tuple(self.xquat[w, frame, b])

  def _play_loop(self) -> None:
    stride = max(1, math.ceil(MAX_UPDATES_PER_SECOND * self.dt))
    while not self._closed.is_set():
      start = time.perf_counter()
      if self.playing.value and self.ntime > 1:
        frame = (self._frame + stride) % self.ntime
        self.time_slider.value = frame * self.dt  # moves the slider; its callback poses the worlds
      delay = stride * self.dt / max(float(self.speed.value), 1e-3)
      self._closed.wait(max(0.0, delay - (time.perf_counter() - start)))

  def close(self) -> None:
    """Stops playback and the server."""
    self._closed.set()
    self.server.stop()


def view(scene, traj, *, worlds=None, host: str = "127.0.0.1", port: int = 8080, labels=None, play: bool = True,
         block: bool = True):
  """Serves a page on `host:port` that plays `traj`'s worlds; prints its address.

  Args:
    scene: the `Scene` the trajectory was made in.
    traj: a `Trajectory`, a result holding one, or qpos `(nworld, nstep + 1, nq)`.
    worlds: trajectory worlds to show (default all).
    host, port: where to serve (`port=0`: a free port).
    labels: a name per shown world.
    play: start playing (else paused at the first state).
    block: serve until Ctrl-C (else return the `Viewer` at once; `close()` stops it).
  """
  from .render import trajectory_qpos

  qpos = trajectory_qpos(scene, traj).numpy()
  if worlds is not None:
    qpos = qpos[np.asarray(worlds)]
  dt = getattr(traj, "dt", None) or getattr(getattr(traj, "trajectory", None), "dt", None) or scene.dt
  return serve(scene.mjm, qpos, dt, host=host, port=port, labels=labels, play=play, block=block)


def serve(mjm, qpos, dt, *, host="127.0.0.1", port=8080, labels=None, play=True, block=True):
  """`Viewer(...)`, its address printed; with `block`, served until Ctrl-C."""
  viewer = Viewer(mjm, qpos, dt, host=host, port=port, labels=labels, play=play)
  print(f"diffsim view: {viewer.nworld} world(s), {viewer.ntime} states at {viewer.url} (Ctrl-C stops)", flush=True)
  if not block:
    return viewer
  try:
    while True:
      time.sleep(1.0)
  except KeyboardInterrupt:
    pass
  finally:
    viewer.close()
  return viewer
