"""USD (UsdPhysics) stages to MuJoCo models: what `Scene.from_usd` and `load_mjmodel` read.

diffsim's importer reads a stage with OpenUSD's own Python bindings (`pxr`, the `usd-core` wheel:
`pip install "diffsim[usd]"`) and writes a `mujoco.MjSpec`, which MuJoCo compiles as it would MJCF:

- rigid bodies (`RigidBodyAPI`) become bodies; the kinematic tree comes from the joints (`body0` is
  the parent, `body1` the child; an empty `body0` is the world), so it does not matter whether the
  `ArticulationRootAPI` sits on the root link or on an Xform above it. A body that no joint moves
  gets a free joint. The child's pose in its parent is `localPose0 * localPose1^-1`: the joint
  frames, as PhysX assembles an articulation, not the authored world poses.
- `RevoluteJoint` -> hinge, `PrismaticJoint` -> slide, `SphericalJoint` (unlimited) -> ball,
  `FixedJoint` and a D6 `Joint` with every axis locked -> welded child. Angles are authored in
  degrees (limits, drive gains per degree) and converted to radians.
- `MassAPI`: mass, centre of mass, diagonal inertia and principal axes are kept as authored; where
  only the mass is authored, the inertia and centre of mass come from the colliders (uniform
  density) scaled to that mass, as PhysX computes them; with no mass, from the colliders' density
  (`MassAPI` density, material density, else 1000 kg/m^3).
- colliders (`CollisionAPI` on Cube, Sphere, Capsule, Cylinder, Plane and Mesh prims) become geoms
  of the nearest rigid-body ancestor (the world if none); a mesh collides as its convex hull, as in
  MuJoCo. The bound physics material's dynamic friction becomes the sliding friction.
- `DriveAPI` becomes a `general` actuator named after the joint: a PD servo `kp * (ctrl - q) - kd *
  qdot` (ctrl is the target position) where the stiffness is positive, a velocity servo `kd * (ctrl -
  qdot)` where only the damping is, with `maxForce` as its force range and the joint's limits as its
  control range. `physxJoint:armature` becomes the joint's armature.

What a MuJoCo model cannot hold is reported in `UsdImport.lost` (and warned), never silently
dropped: static friction (MuJoCo has one sliding coefficient), restitution, drive targets (the
controls are the rollout's input), acceleration drives, collision groups and filtered pairs, visual
geometry. Stages that would change meaning are refused with `UsdError`, naming the prim, before any
model is compiled: no rigid body, a D6 joint with free axes, a limited spherical joint, a distance
joint, a kinematic loop, a massless body.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field

import mujoco
import numpy as np

__all__ = ["USD_SUFFIXES", "UsdError", "UsdImport", "compile_usd", "is_usd_path", "usd_to_spec", "write_xml"]

USD_SUFFIXES = (".usd", ".usda", ".usdc", ".usdz")
_INSTALL = 'pip install "diffsim[usd]"'
_DEG = math.pi / 180.0


class UsdError(ValueError):
  """A USD stage diffsim cannot import as it was authored; the message names the prim and the fix."""


@dataclass
class UsdImport:
  """The result of reading a stage.

  Attributes:
    spec: the MuJoCo model, editable (`spec.to_xml()` is the MJCF).
    paths: `{kind: {name: prim path}}` for kind in body, joint, geom, actuator: the name to pass to
      `Param` and the prim it came from (a free joint and an actuator name the body / joint prim).
    lost: one line per thing the stage authored that the model does not hold.
  """

  spec: mujoco.MjSpec
  paths: dict = field(default_factory=dict)
  lost: list = field(default_factory=list)


def is_usd_path(model) -> bool:
  """Whether `model` is a path (str or PathLike) with a USD suffix (.usd, .usda, .usdc, .usdz)."""
  if isinstance(model, os.PathLike):
    model = os.fspath(model)
  return isinstance(model, str) and not model.lstrip().startswith("<") and model.lower().endswith(USD_SUFFIXES)


def _pxr():
  try:
    from pxr import Gf, Sdf, Tf, Usd, UsdGeom, UsdPhysics, UsdShade
  except ImportError:
    raise ImportError(f"reading USD stages needs OpenUSD's Python bindings (usd-core): {_INSTALL}") from None
  return Gf, Sdf, Tf, Usd, UsdGeom, UsdPhysics, UsdShade


def write_xml(spec: mujoco.MjSpec, path) -> None:
  """Writes `spec`'s MJCF to `path` through a temporary file in the same folder and a rename."""
  path = os.fspath(path)
  xml = spec.to_xml()
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_", suffix=".xml")
  try:
    with os.fdopen(fd, "w") as f:
      f.write(xml)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def usd_to_spec(path, *, importer: str = "auto") -> UsdImport:
  """Reads a UsdPhysics stage as a MuJoCo model. Nothing in the file is modified.

  Args:
    path: .usd / .usda / .usdc / .usdz file.
    importer: "auto" or "diffsim" (this module, needs usd-core), or "newton" (Newton's `add_usd`
      and its MuJoCo solver's MJCF export; needs `newton`, not part of the extra; its names are
      Newton's, derived from prim paths, and `paths` is empty).

  Raises:
    FileNotFoundError: no such file.
    ImportError: usd-core (or newton) is not installed; names the install command.
    UsdError: the stage cannot be opened, has no physics, or authors what MuJoCo cannot simulate.
  """
  path = os.fspath(path)
  if importer not in ("auto", "diffsim", "newton"):
    raise ValueError(f"importer must be 'auto', 'diffsim' or 'newton', got {importer!r}")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"USD file not found: {path!r}")
  if importer == "newton":
    return _newton_import(path)
  return _Reader(path).read()


def compile_usd(imported: UsdImport, path) -> mujoco.MjModel:
  """Compiles `imported.spec`; a compiler error names the prim its element came from."""
  try:
    return imported.spec.compile()
  except Exception as e:
    msg = " ".join(str(e).replace("Error: ", "").split())
    found = re.search(r"Element name '([^']*)'", msg)
    prims = [p for names in imported.paths.values() for n, p in names.items() if found and n == found.group(1)]
    where = f" (prim {prims[0]})" if prims else ""
    raise UsdError(f"the model converted from {os.fspath(path)!r} does not compile{where}: {msg}") from None


def _newton_import(path: str) -> UsdImport:
  try:
    import newton
  except ImportError:
    raise ImportError("importer='newton' needs Newton: pip install newton newton-usd-schemas usd-core") from None
  import warp as wp

  builder = newton.ModelBuilder()
  builder.add_usd(path)
  model = builder.finalize(device="cpu")
  with tempfile.TemporaryDirectory() as tmp:
    xml = os.path.join(tmp, "newton.xml")
    with wp.ScopedDevice("cpu"):
      newton.solvers.SolverMuJoCo(model, use_mujoco_cpu=True, save_to_mjcf=xml)
    return UsdImport(mujoco.MjSpec.from_file(xml), {}, [])


# -- transforms: (position (3,), quaternion (4,) w x y z) ----------------------------------------------

def _qmul(a, b):
  w1, x1, y1, z1 = a
  w2, x2, y2, z2 = b
  return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                   w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def _qrot(q, v):
  r = np.empty(3)
  mujoco.mju_rotVecQuat(r, np.asarray(v, dtype=np.float64), np.asarray(q, dtype=np.float64))
  return r


def _qconj(q):
  return np.array([q[0], -q[1], -q[2], -q[3]])


def _compose(a, b):
  return a[0] + _qrot(a[1], b[0]), _qmul(a[1], b[1])


def _inverse(a):
  qi = _qconj(a[1])
  return -_qrot(qi, a[0]), qi


def _quat(gfq):
  im = gfq.GetImaginary()
  q = np.array([gfq.GetReal(), im[0], im[1], im[2]], dtype=np.float64)
  n = np.linalg.norm(q)
  return q / n if n > 0 else np.array([1.0, 0, 0, 0])


# rotations taking MuJoCo's z axis (capsule, cylinder, plane normal) onto a USD axis token
_AXIS_QUAT = {"Z": np.array([1.0, 0, 0, 0]), "X": np.array([math.sqrt(0.5), 0, math.sqrt(0.5), 0]),
              "Y": np.array([math.sqrt(0.5), -math.sqrt(0.5), 0, 0])}
_AXIS_VEC = {"X": np.array([1.0, 0, 0]), "Y": np.array([0, 1.0, 0]), "Z": np.array([0, 0, 1.0])}


def _unique_names(paths: list[str]) -> dict[str, str]:
  """Prim path -> name: the leaf name where unique (and a valid MJCF name), else the path joined by '_'."""
  leaf = {p: p.rsplit("/", 1)[-1] for p in paths}
  count: dict[str, int] = {}
  for n in leaf.values():
    count[n] = count.get(n, 0) + 1
  return {p: n if count[n] == 1 else p.strip("/").replace("/", "_") for p, n in leaf.items()}


class _Reader:
  def __init__(self, path: str):
    self.path = path
    self.Gf, self.Sdf, self.Tf, self.Usd, self.UsdGeom, self.UsdPhysics, self.UsdShade = _pxr()
    self.lost: dict[str, list[str]] = {}

  def _lose(self, what: str, prim_path: str) -> None:
    self.lost.setdefault(what, []).append(prim_path)

  def _where(self, prim) -> str:
    return f"{prim.GetPath()} in {self.path}"

  # -- reading ----------------------------------------------------------------------------------------

  def read(self) -> UsdImport:
    Usd, UsdGeom, UsdPhysics = self.Usd, self.UsdGeom, self.UsdPhysics
    try:
      stage = Usd.Stage.Open(self.path)
    except Exception as e:  # pxr.Tf.ErrorException: a syntax error, an unreadable layer
      msg = " ".join(str(e).split())
      # pxr's text is "Error in '<C++ function>' at line N in file F : '<message>'", repeated: keep the messages
      parts = [p.strip() for p in re.findall(r" in file \S+ : '(.*?)'(?= Error in |$)", msg)]
      raise UsdError(f"could not open the USD stage {self.path!r}: {'; '.join(parts) or msg}") from None
    if stage is None:
      raise UsdError(f"could not open the USD stage {self.path!r} (not a USD layer)")
    self.stage = stage
    self.mpu = UsdGeom.GetStageMetersPerUnit(stage) if UsdGeom.StageHasAuthoredMetersPerUnit(stage) else 1.0
    self.kgpu = UsdPhysics.GetStageKilogramsPerUnit(stage)
    self.xcache = UsdGeom.XformCache()
    prims = [p for p in Usd.PrimRange.Stage(stage, Usd.TraverseInstanceProxies(Usd.PrimDefaultPredicate))]

    bodies, colliders, joints, scenes = [], [], [], []
    for p in prims:
      if p.HasAPI(UsdPhysics.RigidBodyAPI):
        rb = UsdPhysics.RigidBodyAPI(p)
        if rb.GetRigidBodyEnabledAttr().Get() and not rb.GetKinematicEnabledAttr().Get():
          bodies.append(p)
        elif rb.GetKinematicEnabledAttr().Get():
          self._lose("kinematic bodies (welded to the world)", str(p.GetPath()))
      if p.HasAPI(UsdPhysics.CollisionAPI) and UsdPhysics.CollisionAPI(p).GetCollisionEnabledAttr().Get():
        colliders.append(p)
      if p.IsA(UsdPhysics.Joint) and UsdPhysics.Joint(p).GetJointEnabledAttr().Get():
        joints.append(p)
      if p.IsA(UsdPhysics.Scene):
        scenes.append(p)
      if p.IsA(UsdPhysics.CollisionGroup):
        self._lose("collision groups (every collider pair may touch, but a body and its parent)", str(p.GetPath()))
    if not bodies:
      raise UsdError(f"the USD stage {self.path!r} has no rigid bodies (no prim with UsdPhysics.RigidBodyAPI): "
                     "nothing would move. Apply RigidBodyAPI (and MassAPI) to each moving link, e.g. in Python "
                     "UsdPhysics.RigidBodyAPI.Apply(prim)")
    self.body_paths = {str(p.GetPath()): p for p in bodies}

    spec = mujoco.MjSpec()
    spec.modelname = os.path.splitext(os.path.basename(self.path))[0]
    spec.compiler.degree = False  # every angle below is in radians (MJCF's default unit is the degree)
    self._scene(spec, scenes)
    parent_joint = self._tree(joints)
    names = {"body": _unique_names(list(self.body_paths))}
    self.body_name = names["body"]

    # bodies, parents before children
    sbody = {None: spec.worldbody}
    order, seen = [], set()

    def visit(path):
      if path in seen:
        return
      j = parent_joint.get(path)
      if j is not None and j[1] is not None:
        visit(j[1])
      seen.add(path)
      order.append(path)

    for path in self.body_paths:
      visit(path)
    joint_paths = [str(j[0].GetPath()) for j in parent_joint.values() if j[2] in ("hinge", "slide", "ball")]
    free_paths = [p for p in order if p not in parent_joint]
    names["joint"] = _unique_names(joint_paths + free_paths)
    self.joint_name = names["joint"]
    paths = {"body": {}, "joint": {}, "geom": {}, "actuator": {}}
    for path in order:
      prim = self.body_paths[path]
      j = parent_joint.get(path)
      if j is None:
        pos, quat = self._world_pose(prim)
        b = spec.worldbody.add_body(name=self.body_name[path], pos=pos, quat=quat)
        b.add_freejoint(name=self.joint_name[path])
        paths["joint"][self.joint_name[path]] = path
      else:
        jprim, parent, kind = j
        J = UsdPhysics.Joint(jprim)
        f0 = self._joint_frame(J, 0)
        f1 = self._joint_frame(J, 1)
        pose = _compose(f0, _inverse(f1))  # with body0 the world, localPose0 is in world coordinates
        b = sbody[parent].add_body(name=self.body_name[path], pos=pose[0], quat=pose[1])
        if kind in ("hinge", "slide", "ball"):
          self._joint(spec, b, jprim, kind, f1, paths)
      sbody[path] = b
      paths["body"][self.body_name[path]] = path
    self.sbody = sbody

    self._geoms(spec, colliders, paths)
    self._inertials(spec, sbody)
    lost = [f"{what}: {', '.join(sorted(set(where))[:4])}{' ...' if len(set(where)) > 4 else ''}"
            for what, where in self.lost.items()]
    if lost:
      warnings.warn(f"{self.path}: not kept in the MuJoCo model: " + "; ".join(lost), stacklevel=3)
    return UsdImport(spec, paths, lost)

  def _scene(self, spec, scenes) -> None:
    UsdPhysics, UsdGeom = self.UsdPhysics, self.UsdGeom
    up = UsdGeom.GetStageUpAxis(self.stage)
    direction = -_AXIS_VEC.get(str(up), _AXIS_VEC["Z"])
    magnitude = 9.81
    if scenes:
      s = UsdPhysics.Scene(scenes[0])
      d = np.array(s.GetGravityDirectionAttr().Get(), dtype=np.float64)
      m = s.GetGravityMagnitudeAttr().Get()
      if np.linalg.norm(d) > 0:
        direction = d / np.linalg.norm(d)
      if m is not None and np.isfinite(m):
        magnitude = float(m) * self.mpu
      hz = scenes[0].GetAttribute("physxScene:timeStepsPerSecond")
      if hz and hz.HasAuthoredValue() and hz.Get() > 0:
        spec.option.timestep = 1.0 / float(hz.Get())
    spec.option.gravity = direction * magnitude

  def _body_of(self, prim):
    """Path of the nearest rigid body at or above `prim`; None for the world."""
    p = prim
    while p and p.GetPath() != self.Sdf.Path.absoluteRootPath:
      if str(p.GetPath()) in self.body_paths:
        return str(p.GetPath())
      p = p.GetParent()
    return None

  def _target(self, J, i: int):
    rel = (J.GetBody0Rel() if i == 0 else J.GetBody1Rel()).GetTargets()
    if not rel:
      return None
    if len(rel) > 1:
      raise UsdError(f"joint {self._where(J.GetPrim())}: body{i} has {len(rel)} targets; a joint connects one body "
                     "to one other")
    prim = self.stage.GetPrimAtPath(rel[0])
    if not prim:
      raise UsdError(f"joint {self._where(J.GetPrim())}: body{i} targets {rel[0]}, which does not exist")
    path = self._body_of(prim)
    if path is None and not prim.HasAPI(self.UsdPhysics.RigidBodyAPI):
      raise UsdError(f"joint {self._where(J.GetPrim())}: body{i} targets {rel[0]}, which is not a rigid body (apply "
                     "UsdPhysics.RigidBodyAPI to it, or leave body0 empty to attach body1 to the world)")
    return path

  def _kind(self, prim) -> str:
    UsdPhysics = self.UsdPhysics
    where = self._where(prim)
    if prim.IsA(UsdPhysics.RevoluteJoint):
      return "hinge"
    if prim.IsA(UsdPhysics.PrismaticJoint):
      return "slide"
    if prim.IsA(UsdPhysics.FixedJoint):
      return "weld"
    if prim.IsA(UsdPhysics.SphericalJoint):
      s = UsdPhysics.SphericalJoint(prim)
      cones = [s.GetConeAngle0LimitAttr().Get(), s.GetConeAngle1LimitAttr().Get()]
      if any(c is not None and 0 <= c < 180 for c in cones):
        raise UsdError(f"spherical joint {where} has cone limits {cones} deg, which MuJoCo's ball joint cannot hold "
                       "(its limit is one cone about the joint's z axis, not two about y and z): remove the limits "
                       "(set coneAngle0Limit and coneAngle1Limit to -1), or model the joint as revolute joints")
      return "ball"
    if prim.IsA(UsdPhysics.DistanceJoint):
      raise UsdError(f"distance joint {where} is not supported (MuJoCo has no such joint in a tree); model it as a "
                     "tendon in the converted MJCF")
    if prim.GetTypeName() == "PhysicsJoint":  # D6: each axis locked, limited or free through LimitAPI
      free = []
      for axis in ("transX", "transY", "transZ", "rotX", "rotY", "rotZ"):
        if not prim.HasAPI(UsdPhysics.LimitAPI, axis):
          free.append(axis)
          continue
        lim = UsdPhysics.LimitAPI(prim, axis)
        if not lim.GetLowAttr().Get() > lim.GetHighAttr().Get():  # low > high locks the axis
          free.append(axis)
      if not free:
        return "weld"
      raise UsdError(f"D6 joint {where} leaves {', '.join(free)} free: diffsim imports D6 joints only with every axis "
                     "locked. Author a RevoluteJoint or PrismaticJoint for one free axis, a SphericalJoint for three "
                     "rotations, or no joint (a free body) for all six")
    raise UsdError(f"joint {where} of type {prim.GetTypeName()!r} is not supported (RevoluteJoint, PrismaticJoint, "
                   "SphericalJoint, FixedJoint are)")

  def _tree(self, joints) -> dict:
    """child body path -> (joint prim, parent body path or None for the world, kind)."""
    parent_joint: dict = {}
    for jp in joints:
      J = self.UsdPhysics.Joint(jp)
      kind = self._kind(jp)
      b0, b1 = self._target(J, 0), self._target(J, 1)
      if b1 is None:
        if b0 is None:
          raise UsdError(f"joint {self._where(jp)} connects no rigid body: set body1 to the child link")
        raise UsdError(f"joint {self._where(jp)} has body0 {b0} and an empty body1: diffsim reads body0 as the parent "
                       "and body1 as the child; put the moving link in body1 (body0 empty means the world)")
      if b1 in parent_joint:
        raise UsdError(f"body {b1} is the child (body1) of two joints, {parent_joint[b1][0].GetPath()} and "
                       f"{jp.GetPath()}: a kinematic loop, which MuJoCo's tree cannot hold. Remove one joint, or set "
                       "physics:excludeFromArticulation and replace it by an equality in the converted MJCF")
      parent_joint[b1] = (jp, b0, kind)
    for start in parent_joint:  # a cycle through the parents never reaches the world
      seen, b = set(), start
      while b is not None and b in parent_joint:
        if b in seen:
          raise UsdError(f"the joints {sorted(str(parent_joint[x][0].GetPath()) for x in seen)} form a kinematic loop "
                         f"in {self.path}: MuJoCo's tree needs each link to hang from one parent")
        seen.add(b)
        b = parent_joint[b][1]
    return parent_joint

  def _joint_frame(self, J, i: int):
    pos = (J.GetLocalPos0Attr() if i == 0 else J.GetLocalPos1Attr()).Get()
    rot = (J.GetLocalRot0Attr() if i == 0 else J.GetLocalRot1Attr()).Get()
    pos = np.zeros(3) if pos is None else np.array(pos, dtype=np.float64) * self.mpu
    q = np.array([1.0, 0, 0, 0]) if rot is None else _quat(rot)
    return pos, q

  def _joint(self, spec, body, jprim, kind: str, frame1, paths) -> None:
    UsdPhysics = self.UsdPhysics
    name = self.joint_name[str(jprim.GetPath())]
    paths["joint"][name] = str(jprim.GetPath())
    if kind == "ball":
      body.add_joint(name=name, type=mujoco.mjtJoint.mjJNT_BALL, pos=frame1[0])
      if any(str(a).startswith("PhysicsDriveAPI:") for a in jprim.GetAppliedSchemas()):
        self._lose("drives on spherical joints", str(jprim.GetPath()))
      return
    angular = kind == "hinge"
    J = UsdPhysics.RevoluteJoint(jprim) if angular else UsdPhysics.PrismaticJoint(jprim)
    axis_token = str(J.GetAxisAttr().Get())
    axis = _qrot(frame1[1], _AXIS_VEC[axis_token])
    lo, hi = J.GetLowerLimitAttr().Get(), J.GetUpperLimitAttr().Get()
    scale = _DEG if angular else self.mpu
    limited = lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi)
    if limited and lo > hi:
      raise UsdError(f"joint {self._where(jprim)} has lowerLimit {lo} > upperLimit {hi}: swap them (or use a "
                     "FixedJoint to lock it)")
    j = body.add_joint(name=name, type=mujoco.mjtJoint.mjJNT_HINGE if angular else mujoco.mjtJoint.mjJNT_SLIDE,
                       pos=frame1[0], axis=axis)
    if limited:
      j.limited = mujoco.mjtLimited.mjLIMITED_TRUE
      j.range = [lo * scale, hi * scale]
    arm = jprim.GetAttribute("physxJoint:armature")
    if arm and arm.HasAuthoredValue():
      j.armature = float(arm.Get()) * self.kgpu * (self.mpu ** 2 if angular else 1.0)
    for attr in ("physxJoint:jointFriction", "physxJoint:maxJointVelocity"):
      a = jprim.GetAttribute(attr)
      if a and a.HasAuthoredValue():
        self._lose(attr, str(jprim.GetPath()))
    drive = "angular" if angular else "linear"
    if not jprim.HasAPI(UsdPhysics.DriveAPI, drive):
      return
    d = UsdPhysics.DriveAPI(jprim, drive)
    gain = self.kgpu * (self.mpu ** 2 / _DEG if angular else 1.0)  # per degree -> per radian
    kp = float(d.GetStiffnessAttr().Get() or 0.0) * gain
    kd = float(d.GetDampingAttr().Get() or 0.0) * gain
    fmax = d.GetMaxForceAttr().Get()
    if str(d.GetTypeAttr().Get()) == "acceleration":
      self._lose("acceleration drives (read as force drives)", str(jprim.GetPath()))
    for attr in (d.GetTargetPositionAttr(), d.GetTargetVelocityAttr()):
      if attr.HasAuthoredValue() and attr.Get():
        self._lose("drive targets (the controls are the rollout's input)", str(jprim.GetPath()))
    if kp <= 0 and kd <= 0:
      return
    a = spec.add_actuator(name=name, target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
    a.gaintype = mujoco.mjtGain.mjGAIN_FIXED
    a.biastype = mujoco.mjtBias.mjBIAS_AFFINE
    g = np.zeros(10)
    bias = np.zeros(10)
    if kp > 0:  # position servo: ctrl is the target position
      g[0], bias[1], bias[2] = kp, -kp, -kd
      if limited:
        a.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        a.ctrlrange = [lo * scale, hi * scale]
    else:  # velocity servo: ctrl is the target velocity
      g[0], bias[2] = kd, -kd
    a.gainprm, a.biasprm = g, bias
    if fmax is not None and np.isfinite(fmax):
      fscale = self.kgpu * self.mpu ** (2 if angular else 1)
      a.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
      a.forcerange = [-fmax * fscale, fmax * fscale]
    paths["actuator"][name] = str(jprim.GetPath())

  # -- geometry and mass -------------------------------------------------------------------------------

  def _world_pose(self, prim):
    M = self.xcache.GetLocalToWorldTransform(prim)
    return (np.array(M.ExtractTranslation(), dtype=np.float64) * self.mpu,
            _quat(M.RemoveScaleShear().ExtractRotationQuat()))

  def _relative(self, prim, body_path):
    """(pos, quat, scale) of `prim` in its body's frame (the world's where `body_path` is None)."""
    M = self.xcache.GetLocalToWorldTransform(prim)
    if body_path is not None:
      M = M * self.xcache.GetLocalToWorldTransform(self.body_paths[body_path]).GetInverse()
    # the rotation from the matrix with scale and shear removed: exact where Gf.Transform's iterative
    # polar factorization is only near float32
    return (np.array(M.ExtractTranslation(), dtype=np.float64) * self.mpu,
            _quat(M.RemoveScaleShear().ExtractRotationQuat()),
            np.abs(np.array(self.Gf.Transform(M).GetScale(), dtype=np.float64)))

  def _material(self, prim):
    mat, _ = self.UsdShade.MaterialBindingAPI(prim).ComputeBoundMaterial("physics")
    if not mat:
      return None
    m = mat.GetPrim()
    return self.UsdPhysics.MaterialAPI(m) if m.HasAPI(self.UsdPhysics.MaterialAPI) else None

  def _geoms(self, spec, colliders, paths) -> None:
    UsdGeom, UsdPhysics = self.UsdGeom, self.UsdPhysics
    gnames = _unique_names([str(p.GetPath()) for p in colliders])
    mnames = {}
    for prim in colliders:
      gpath = str(prim.GetPath())
      bpath = self._body_of(prim)
      pos, quat, s = self._relative(prim, bpath)
      kw = {}
      if prim.IsA(UsdGeom.Cube):
        kw = dict(type=mujoco.mjtGeom.mjGEOM_BOX, size=UsdGeom.Cube(prim).GetSizeAttr().Get() / 2 * s * self.mpu)
      elif prim.IsA(UsdGeom.Sphere):
        radius = UsdGeom.Sphere(prim).GetRadiusAttr().Get() * s.max() * self.mpu
        kw = dict(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[radius, 0, 0])
      elif prim.IsA(UsdGeom.Capsule) or prim.IsA(UsdGeom.Cylinder):
        cap = prim.IsA(UsdGeom.Capsule)
        g = UsdGeom.Capsule(prim) if cap else UsdGeom.Cylinder(prim)
        axis = str(g.GetAxisAttr().Get())
        i = "XYZ".index(axis)
        radial = max(s[k] for k in range(3) if k != i)
        quat = _qmul(quat, _AXIS_QUAT[axis])
        kw = dict(type=mujoco.mjtGeom.mjGEOM_CAPSULE if cap else mujoco.mjtGeom.mjGEOM_CYLINDER,
                  size=[g.GetRadiusAttr().Get() * radial * self.mpu, g.GetHeightAttr().Get() / 2 * s[i] * self.mpu, 0])
      elif prim.IsA(UsdGeom.Plane):
        if bpath is not None:
          raise UsdError(f"plane collider {self._where(prim)} belongs to rigid body {bpath}: MuJoCo planes are static; "
                         "use a thin Cube on a moving body")
        pl = UsdGeom.Plane(prim)
        axis = str(pl.GetAxisAttr().Get())
        quat = _qmul(quat, _AXIS_QUAT[axis])
        kw = dict(type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 1])
      elif prim.IsA(UsdGeom.Mesh):
        kw = dict(type=mujoco.mjtGeom.mjGEOM_MESH, meshname=self._mesh(spec, prim, s, mnames))
      else:
        raise UsdError(f"collider {self._where(prim)} is a {prim.GetTypeName() or 'typeless prim'}, which diffsim "
                       "cannot import (Cube, Sphere, Capsule, Cylinder, Plane and Mesh are): use one of those or a "
                       "Mesh")
      owner = self.sbody[bpath]
      geom = owner.add_geom(name=gnames[gpath], pos=pos, quat=quat, **kw)
      self._collider_material(prim, geom, bpath)
      paths["geom"][gnames[gpath]] = gpath

  def _mesh(self, spec, prim, scale, mnames) -> str:
    m = self.UsdGeom.Mesh(prim)
    pts = np.array(m.GetPointsAttr().Get(), dtype=np.float64).reshape(-1, 3) * scale * self.mpu
    counts = np.array(m.GetFaceVertexCountsAttr().Get(), dtype=np.int64)
    idx = np.array(m.GetFaceVertexIndicesAttr().Get(), dtype=np.int64)
    if pts.shape[0] < 4 or counts.size == 0:
      raise UsdError(f"mesh collider {self._where(prim)} has {pts.shape[0]} points and {counts.size} faces: a "
                     "collider needs a closed mesh of at least 4 points")
    faces, off = [], 0
    for c in counts:  # fan triangulation of each polygon
      faces.extend([idx[off], idx[off + k], idx[off + k + 1]] for k in range(1, c - 1))
      off += c
    approx = prim.GetAttribute("physics:approximation")
    if approx and approx.HasAuthoredValue() and str(approx.Get()) not in ("convexHull", "convexDecomposition"):
      self._lose(f"mesh approximation {approx.Get()!r} (collides as the convex hull)", str(prim.GetPath()))
    name = str(prim.GetPath()).strip("/").replace("/", "_")
    mnames[str(prim.GetPath())] = name
    spec.add_mesh(name=name, uservert=pts.reshape(-1).tolist(), userface=np.array(faces).reshape(-1).tolist())
    return name

  def _collider_material(self, prim, geom, bpath) -> None:
    UsdPhysics = self.UsdPhysics
    mat = self._material(prim)
    density = None
    if mat is not None:
      dyn, sta = mat.GetDynamicFrictionAttr(), mat.GetStaticFrictionAttr()
      if dyn.HasAuthoredValue():
        geom.friction = [float(dyn.Get()), geom.friction[1], geom.friction[2]]
      if sta.HasAuthoredValue() and (not dyn.HasAuthoredValue() or sta.Get() != dyn.Get()):
        self._lose("static friction (MuJoCo has one sliding coefficient: the dynamic one is kept)",
                   str(mat.GetPrim().GetPath()))
      if mat.GetRestitutionAttr().HasAuthoredValue() and mat.GetRestitutionAttr().Get() != 0:
        self._lose("restitution", str(mat.GetPrim().GetPath()))
      if mat.GetDensityAttr().Get():
        density = float(mat.GetDensityAttr().Get())
    if prim.HasAPI(UsdPhysics.MassAPI):  # a collider's own mass or density takes precedence
      m = UsdPhysics.MassAPI(prim)
      if m.GetMassAttr().Get():
        geom.mass = float(m.GetMassAttr().Get()) * self.kgpu
      if m.GetDensityAttr().Get():
        density = float(m.GetDensityAttr().Get())
    if density is None and bpath is not None:
      bm = UsdPhysics.MassAPI(self.body_paths[bpath])
      if self.body_paths[bpath].HasAPI(UsdPhysics.MassAPI) and bm.GetDensityAttr().Get():
        density = float(bm.GetDensityAttr().Get())
    if density is not None:
      geom.density = density * self.kgpu / self.mpu ** 3
    owner = self.body_paths[bpath] if bpath else None
    if prim.HasAPI(UsdPhysics.FilteredPairsAPI) or (owner and owner.HasAPI(UsdPhysics.FilteredPairsAPI)):
      self._lose("filtered pairs", str(prim.GetPath()))

  def _inertials(self, spec, sbody) -> None:
    """MassAPI as authored; a mass without inertia scales the colliders' inertia to that mass."""
    UsdPhysics = self.UsdPhysics
    scale_to = {}
    for path, prim in self.body_paths.items():
      b = sbody[path]
      has_geom = b.first_geom() is not None
      if not prim.HasAPI(UsdPhysics.MassAPI):
        if not has_geom:
          raise UsdError(f"rigid body {self._where(prim)} has no mass: apply UsdPhysics.MassAPI with a mass and "
                         "diagonalInertia, or give it a collider")
        continue
      m = UsdPhysics.MassAPI(prim)
      mass = float(m.GetMassAttr().Get() or 0.0) * self.kgpu
      diag = np.array(m.GetDiagonalInertiaAttr().Get(), dtype=np.float64) * self.kgpu * self.mpu ** 2
      com = m.GetCenterOfMassAttr()
      axes = m.GetPrincipalAxesAttr().Get()
      iquat = _quat(axes) if axes is not None and axes.GetReal() ** 2 + sum(
        x * x for x in axes.GetImaginary()) > 0 else None  # (0, 0, 0, 0) is UsdPhysics' "not authored"
      ipos = np.array(com.Get(), dtype=np.float64) * self.mpu if com.HasAuthoredValue() else None
      if mass > 0 and np.all(diag > 0):
        if ipos is None and has_geom:  # the colliders' centre of mass, from the compiled geoms below
          scale_to[path] = ("com", mass, diag, iquat, None)
          continue
        b.explicitinertial = True
        b.mass, b.inertia = mass, diag
        if ipos is not None:
          b.ipos = ipos
        if iquat is not None:
          b.iquat = iquat
      elif mass > 0:
        if not has_geom:
          raise UsdError(f"rigid body {self._where(prim)} has a mass but no diagonalInertia and no collider to compute "
                         "one from: author physics:diagonalInertia")
        scale_to[path] = ("all", mass, None, None, ipos)
      elif not has_geom:
        raise UsdError(f"rigid body {self._where(prim)} has no mass: author physics:mass and physics:diagonalInertia "
                       "in its MassAPI, or give it a collider")
    if not scale_to:
      return
    try:
      m0 = spec.copy().compile()
    except Exception as e:
      raise UsdError(f"the model read from {self.path!r} does not compile: {e}") from None
    for path, (what, mass, diag, iquat, ipos) in scale_to.items():
      b = sbody[path]
      i = m0.body(self.body_name[path]).id
      b.explicitinertial = True
      b.mass = mass
      b.ipos = m0.body_ipos[i].copy() if ipos is None else ipos
      if what == "com":  # authored inertia, the colliders' centre of mass
        b.inertia = diag
        if iquat is not None:
          b.iquat = iquat
      else:  # uniform density: the inertia scales with the mass, its axes stay
        b.iquat = m0.body_iquat[i].copy()
        b.inertia = m0.body_inertia[i] * (mass / m0.body_mass[i])
