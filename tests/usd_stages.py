"""UsdPhysics test stages, built with `pxr` in the layout Isaac and Newton assets use, and the MJCF
written by hand for the same scene (tests/test_usd.py).

The arm: an `ArticulationRootAPI` on an Xform above the links (the layout that made MuJoCo's own USD
plugin build a massless free body), a base fixed to the world by a `FixedJoint` with an empty
body0, a revolute shoulder (limits in degrees, angular drive with gains per degree, maxForce,
PhysX armature) and a prismatic slider (limits, linear drive); `MassAPI` with full inertia on the
base and the upper link, mass only on the lower link. Beside it a free box (mass only, rubber
material: dynamic friction kept, static friction and restitution lost), a free mesh collider
(an octahedron, no MassAPI: density from its material) and a ground plane.
"""

from __future__ import annotations

import math

import numpy as np

# what the stage authors, for the tests to assert
ARM = {
  "mass": {"base": 2.0, "link1": 0.5, "link2": 0.3, "box": 0.2},
  "inertia": {"base": (0.01, 0.012, 0.02), "link1": (0.001, 0.004, 0.0045)},
  "com": {"base": (0.0, 0.0, 0.05), "link1": (0.15, 0.0, 0.0)},
  "shoulder": {"axis": "Y", "limits_deg": (-90.0, 60.0), "kp_per_deg": 0.5, "kd_per_deg": 0.02, "max_force": 10.0,
               "armature": 0.01},
  "slider": {"axis": "X", "limits": (-0.05, 0.1), "kp": 200.0, "kd": 5.0, "max_force": 50.0},
  "rubber": {"static": 1.0, "dynamic": 0.8, "restitution": 0.1},
  "steel": {"dynamic": 0.4},
  "rock_density": 500.0,
}

# octahedron, radius 0.06 (the mesh collider)
ROCK_POINTS = [(0.06, 0, 0), (-0.06, 0, 0), (0, 0.06, 0), (0, -0.06, 0), (0, 0, 0.06), (0, 0, -0.06)]
ROCK_FACES = [(0, 2, 4), (2, 1, 4), (1, 3, 4), (3, 0, 4), (2, 0, 5), (1, 2, 5), (3, 1, 5), (0, 3, 5)]

_SHOULDER_ROT = (math.cos(math.pi / 8), 0.0, 0.0, math.sin(math.pi / 8))  # 45 deg about z (w x y z)


def _stage(path):
  from pxr import Usd, UsdGeom, UsdPhysics

  stage = Usd.Stage.CreateNew(str(path))
  UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
  UsdGeom.SetStageMetersPerUnit(stage, 1.0)
  UsdPhysics.SetStageKilogramsPerUnit(stage, 1.0)
  world = UsdGeom.Xform.Define(stage, "/World")
  stage.SetDefaultPrim(world.GetPrim())
  scene = UsdPhysics.Scene.Define(stage, "/World/PhysicsScene")
  scene.CreateGravityDirectionAttr((0.0, 0.0, -1.0))
  scene.CreateGravityMagnitudeAttr(9.81)
  return stage


def _material(stage, path, dynamic, static=None, restitution=None, density=None):
  from pxr import UsdPhysics, UsdShade

  mat = UsdShade.Material.Define(stage, path)
  api = UsdPhysics.MaterialAPI.Apply(mat.GetPrim())
  api.CreateDynamicFrictionAttr(dynamic)
  if static is not None:
    api.CreateStaticFrictionAttr(static)
  if restitution is not None:
    api.CreateRestitutionAttr(restitution)
  if density is not None:
    api.CreateDensityAttr(density)
  return mat


def _bind(prim, mat):
  from pxr import UsdShade

  UsdShade.MaterialBindingAPI.Apply(prim).Bind(mat, UsdShade.Tokens.weakerThanDescendants, "physics")


def _body(stage, path, pos, rot=(1.0, 0, 0, 0), mass=None, com=None, inertia=None):
  from pxr import Gf, UsdGeom, UsdPhysics

  x = UsdGeom.Xform.Define(stage, path)
  x.AddTranslateOp().Set(Gf.Vec3d(*pos))
  x.AddOrientOp(UsdGeom.XformOp.PrecisionDouble).Set(Gf.Quatd(*rot))
  UsdPhysics.RigidBodyAPI.Apply(x.GetPrim())
  if mass is not None:
    m = UsdPhysics.MassAPI.Apply(x.GetPrim())
    m.CreateMassAttr(mass)
    if com is not None:
      m.CreateCenterOfMassAttr(Gf.Vec3f(*com))
    if inertia is not None:
      m.CreateDiagonalInertiaAttr(Gf.Vec3f(*inertia))
  return x


def _collider(prim):
  from pxr import UsdPhysics

  UsdPhysics.CollisionAPI.Apply(prim)
  return prim


def _joint(stage, cls, path, body0, body1, pos0, pos1=(0, 0, 0), rot0=(1.0, 0, 0, 0), rot1=(1.0, 0, 0, 0)):
  from pxr import Gf

  j = cls.Define(stage, path)
  if body0:
    j.CreateBody0Rel().SetTargets([body0])
  j.CreateBody1Rel().SetTargets([body1])
  j.CreateLocalPos0Attr(Gf.Vec3f(*pos0))
  j.CreateLocalPos1Attr(Gf.Vec3f(*pos1))
  j.CreateLocalRot0Attr(Gf.Quatf(*rot0))
  j.CreateLocalRot1Attr(Gf.Quatf(*rot1))
  return j


def _drive(joint, kind, kp, kd, fmax):
  from pxr import UsdPhysics

  d = UsdPhysics.DriveAPI.Apply(joint.GetPrim(), kind)
  d.CreateTypeAttr("force")
  d.CreateStiffnessAttr(kp)
  d.CreateDampingAttr(kd)
  d.CreateMaxForceAttr(fmax)


def write_arm_stage(path) -> str:
  """Writes the arm scene (see the module docstring) to `path` (.usda); returns the path."""
  from pxr import Gf, Sdf, UsdGeom, UsdPhysics

  a = ARM
  stage = _stage(path)
  rubber = _material(stage, "/World/Looks/rubber", a["rubber"]["dynamic"], a["rubber"]["static"],
                     a["rubber"]["restitution"])
  steel = _material(stage, "/World/Looks/steel", a["steel"]["dynamic"])
  stone = _material(stage, "/World/Looks/stone", 0.6, density=a["rock_density"])
  ground = _collider(UsdGeom.Plane.Define(stage, "/World/ground").GetPrim())
  _bind(ground, steel)

  root = UsdGeom.Xform.Define(stage, "/World/arm")
  UsdPhysics.ArticulationRootAPI.Apply(root.GetPrim())
  _body(stage, "/World/arm/base", (0, 0, 0.5), mass=a["mass"]["base"], com=a["com"]["base"],
        inertia=a["inertia"]["base"])
  c = UsdGeom.Cube.Define(stage, "/World/arm/base/collision")
  c.CreateSizeAttr(0.1)
  _collider(c.GetPrim())
  # link1 hangs from the shoulder, whose frame is turned 45 deg about z in the base
  _body(stage, "/World/arm/link1", (0, 0, 0.6), rot=_SHOULDER_ROT, mass=a["mass"]["link1"], com=a["com"]["link1"],
        inertia=a["inertia"]["link1"])
  cap = UsdGeom.Capsule.Define(stage, "/World/arm/link1/collision")
  cap.CreateAxisAttr("X")
  cap.CreateRadiusAttr(0.03)
  cap.CreateHeightAttr(0.24)
  cap.AddTranslateOp().Set(Gf.Vec3d(0.15, 0, 0))
  _collider(cap.GetPrim())
  p2 = np.array([0.3 * math.cos(math.pi / 4), 0.3 * math.sin(math.pi / 4), 0.6])
  _body(stage, "/World/arm/link2", tuple(p2), rot=_SHOULDER_ROT, mass=a["mass"]["link2"])
  c2 = UsdGeom.Cube.Define(stage, "/World/arm/link2/collision")
  c2.CreateSizeAttr(0.06)
  c2.AddScaleOp().Set(Gf.Vec3f(2.0, 1.0, 1.0))
  _collider(c2.GetPrim())

  _joint(stage, UsdPhysics.FixedJoint, "/World/arm/joints/root_fix", None, "/World/arm/base", (0, 0, 0.5))
  s = a["shoulder"]
  sh = _joint(stage, UsdPhysics.RevoluteJoint, "/World/arm/joints/shoulder", "/World/arm/base", "/World/arm/link1",
              (0, 0, 0.1), rot0=_SHOULDER_ROT)
  sh.CreateAxisAttr(s["axis"])
  sh.CreateLowerLimitAttr(s["limits_deg"][0])
  sh.CreateUpperLimitAttr(s["limits_deg"][1])
  _drive(sh, "angular", s["kp_per_deg"], s["kd_per_deg"], s["max_force"])
  sh.GetPrim().CreateAttribute("physxJoint:armature", Sdf.ValueTypeNames.Float).Set(s["armature"])
  s = a["slider"]
  sl = _joint(stage, UsdPhysics.PrismaticJoint, "/World/arm/joints/slider", "/World/arm/link1", "/World/arm/link2",
              (0.3, 0, 0))
  sl.CreateAxisAttr(s["axis"])
  sl.CreateLowerLimitAttr(s["limits"][0])
  sl.CreateUpperLimitAttr(s["limits"][1])
  _drive(sl, "linear", s["kp"], s["kd"], s["max_force"])

  box = _body(stage, "/World/box", (0.6, 0, 0.1), rot=(math.cos(0.2), math.sin(0.2), 0, 0), mass=a["mass"]["box"])
  bc = UsdGeom.Cube.Define(stage, "/World/box/collision")
  bc.CreateSizeAttr(0.1)
  _bind(_collider(bc.GetPrim()), rubber)

  _body(stage, "/World/rock", (-0.5, 0, 0.08))
  mesh = UsdGeom.Mesh.Define(stage, "/World/rock/collision")
  mesh.CreatePointsAttr([Gf.Vec3f(*p) for p in ROCK_POINTS])
  mesh.CreateFaceVertexCountsAttr([3] * len(ROCK_FACES))
  mesh.CreateFaceVertexIndicesAttr([i for f in ROCK_FACES for i in f])
  _collider(mesh.GetPrim())
  UsdPhysics.MeshCollisionAPI.Apply(mesh.GetPrim()).CreateApproximationAttr("convexHull")
  _bind(mesh.GetPrim(), stone)
  stage.GetRootLayer().Save()
  return str(path)


def _f(v) -> str:
  """An authored value as USD stores it (float32 attributes), in MJCF."""
  return repr(float(np.float32(v)))


def arm_mjcf() -> str:
  """The arm scene written by hand in MJCF (radians, gains per radian), with the values USD stores
  (float32 attributes rounded, as the stage holds them)."""
  a, s, sl = ARM, ARM["shoulder"], ARM["slider"]
  deg = math.pi / 180
  f = _f
  v3 = lambda v: " ".join(_f(x) for x in v)  # noqa: E731
  kp = float(np.float32(s["kp_per_deg"])) / deg
  kd = float(np.float32(s["kd_per_deg"])) / deg
  rng = " ".join(repr(float(np.float32(x)) * deg) for x in s["limits_deg"])
  q = v3(_SHOULDER_ROT)
  c, sn = math.cos(0.2), math.sin(0.2)
  verts = " ".join(v3(p) for p in ROCK_POINTS)
  faces = " ".join(f"{i} {j} {k}" for i, j, k in ROCK_FACES)
  return f"""
<mujoco model="arm">
  <compiler angle="radian"/>
  <option gravity="0 0 -{f(9.81)}"/>
  <asset><mesh name="rock" vertex="{verts}" face="{faces}"/></asset>
  <worldbody>
    <geom name="ground" type="plane" size="0 0 1" friction="{f(a['steel']['dynamic'])} 0.005 0.0001"/>
    <body name="base" pos="0 0 0.5">
      <inertial pos="{v3(a['com']['base'])}" mass="{f(a['mass']['base'])}" diaginertia="{v3(a['inertia']['base'])}"/>
      <geom type="box" size="0.05 0.05 0.05"/>
      <body name="link1" pos="0 0 {f(0.1)}" quat="{q}">
        <inertial pos="{v3(a['com']['link1'])}" mass="{f(a['mass']['link1'])}"
                  diaginertia="{v3(a['inertia']['link1'])}"/>
        <joint name="shoulder" type="hinge" axis="0 1 0" range="{rng}" armature="{f(s['armature'])}"/>
        <geom type="capsule" size="0.03 0.12" pos="0.15 0 0" quat="0.7071067811865476 0 0.7071067811865476 0"/>
        <body name="link2" pos="{f(0.3)} 0 0">
          <joint name="slider" type="slide" axis="1 0 0" range="{f(sl['limits'][0])} {f(sl['limits'][1])}"/>
          <geom type="box" size="0.06 0.03 0.03" mass="{f(a['mass']['link2'])}"/>
        </body>
      </body>
    </body>
    <body name="box" pos="0.6 0 0.1" quat="{c!r} {sn!r} 0 0">
      <freejoint name="box"/>
      <geom type="box" size="0.05 0.05 0.05" mass="{f(a['mass']['box'])}"
            friction="{f(a['rubber']['dynamic'])} 0.005 0.0001"/>
    </body>
    <body name="rock" pos="-0.5 0 0.08">
      <freejoint name="rock"/>
      <geom type="mesh" mesh="rock" density="{f(a['rock_density'])}" friction="{f(0.6)} 0.005 0.0001"/>
    </body>
  </worldbody>
  <actuator>
    <general name="shoulder" joint="shoulder" gainprm="{kp!r}" biastype="affine" biasprm="0 {-kp!r} {-kd!r}"
             ctrlrange="{rng}" forcerange="-{f(s['max_force'])} {f(s['max_force'])}"/>
    <general name="slider" joint="slider" gainprm="{f(sl['kp'])}" biastype="affine"
             biasprm="0 -{f(sl['kp'])} -{f(sl['kd'])}" ctrlrange="{f(sl['limits'][0])} {f(sl['limits'][1])}"
             forcerange="-{f(sl['max_force'])} {f(sl['max_force'])}"/>
  </actuator>
</mujoco>
"""


def write_bad_stage(path, kind: str) -> str:
  """A stage diffsim must refuse: kind in no_physics, d6_free, spherical_limited, loop, broken."""
  from pxr import UsdGeom, UsdPhysics

  if kind == "broken":
    with open(path, "w") as f:
      f.write("#usda 1.0\ndef Xform \"World\" {\n  def Cube \"c\" { double size = \n")  # cut off mid-prim
    return str(path)
  stage = _stage(path)
  if kind == "no_physics":
    UsdGeom.Cube.Define(stage, "/World/cube")
  else:
    _body(stage, "/World/a", (0, 0, 1), mass=1.0, inertia=(0.1, 0.1, 0.1))
    _body(stage, "/World/b", (0, 0, 0.5), mass=1.0, inertia=(0.1, 0.1, 0.1))
    if kind == "d6_free":
      j = _joint(stage, UsdPhysics.Joint, "/World/d6", "/World/a", "/World/b", (0, 0, -0.5))
      for axis in ("transX", "transY", "transZ"):  # translations locked, rotations left free
        lim = UsdPhysics.LimitAPI.Apply(j.GetPrim(), axis)
        lim.CreateLowAttr(1.0)
        lim.CreateHighAttr(-1.0)
    elif kind == "spherical_limited":
      j = _joint(stage, UsdPhysics.SphericalJoint, "/World/ball", "/World/a", "/World/b", (0, 0, -0.5))
      j.CreateConeAngle0LimitAttr(30.0)
      j.CreateConeAngle1LimitAttr(45.0)
    elif kind == "loop":
      _joint(stage, UsdPhysics.RevoluteJoint, "/World/j1", "/World/a", "/World/b", (0, 0, -0.5))
      _joint(stage, UsdPhysics.RevoluteJoint, "/World/j2", "/World/b", "/World/a", (0, 0, 0.5))
    else:
      raise ValueError(kind)
  stage.GetRootLayer().Save()
  return str(path)


def write_pendulum_stage(path, *, mass: float = 0.5) -> str:
  """A pendulum hanging from the world by a driven revolute joint (body0 empty), stepped at 100 Hz
  (physxScene:timeStepsPerSecond): the CLI's sysid test model. The pole's centre of mass is 0.4 m
  below the pivot; its inertia is authored, so the mass is identifiable from the drive's motion."""
  from pxr import Sdf, UsdGeom, UsdPhysics

  stage = _stage(path)
  stage.GetPrimAtPath("/World/PhysicsScene").CreateAttribute("physxScene:timeStepsPerSecond",
                                                             Sdf.ValueTypeNames.UInt).Set(100)
  root = UsdGeom.Xform.Define(stage, "/World/pendulum")
  UsdPhysics.ArticulationRootAPI.Apply(root.GetPrim())
  _body(stage, "/World/pendulum/pole", (0, 0, 1.0), mass=mass, com=(0, 0, -0.4), inertia=(0.004, 0.004, 0.0005))
  cap = UsdGeom.Capsule.Define(stage, "/World/pendulum/pole/collision")
  cap.CreateRadiusAttr(0.02)
  cap.CreateHeightAttr(0.5)
  cap.AddTranslateOp().Set((0, 0, -0.25))
  _collider(cap.GetPrim())
  j = _joint(stage, UsdPhysics.RevoluteJoint, "/World/pendulum/hinge", None, "/World/pendulum/pole", (0, 0, 1.0))
  j.CreateAxisAttr("Y")
  _drive(j, "angular", 0.05, 0.002, 1e6)
  stage.GetRootLayer().Save()
  return str(path)


def write_stage_from_mjmodel(m, path) -> str:
  """Writes a compiled MuJoCo model as a UsdPhysics stage, in the same layout (for the round trip:
  diffsim's importer has no MJCF-to-USD path of its own). What UsdPhysics holds is written: bodies
  at their qpos0 world poses with MassAPI (mass, centre of mass, diagonal inertia, principal axes),
  hinge / slide / ball / fixed joints (joint frame z along the axis; limits in degrees),
  `physxJoint:armature`, position servos as drives (gains per degree, forcerange as maxForce),
  colliders (geoms with contype or conaffinity; meshes as their compiled vertices and faces) with
  their sliding friction as a material, gravity and the timestep. Not written, because UsdPhysics has
  no place for them: joint damping and frictionloss, control ranges, visual geoms, solver options."""
  import mujoco
  from pxr import Gf, Sdf, UsdGeom, UsdPhysics

  stage = _stage(path)
  sc = stage.GetPrimAtPath("/World/PhysicsScene")
  g = np.asarray(m.opt.gravity, dtype=np.float64)
  UsdPhysics.Scene(sc).GetGravityMagnitudeAttr().Set(float(np.linalg.norm(g)))
  UsdPhysics.Scene(sc).GetGravityDirectionAttr().Set(Gf.Vec3f(*(g / np.linalg.norm(g))))
  sc.CreateAttribute("physxScene:timeStepsPerSecond", Sdf.ValueTypeNames.UInt).Set(int(round(1 / m.opt.timestep)))
  d = mujoco.MjData(m)
  mujoco.mj_kinematics(m, d)
  root = UsdGeom.Xform.Define(stage, "/World/robot")
  UsdPhysics.ArticulationRootAPI.Apply(root.GetPrim())
  bpath = {0: None}
  materials: dict = {}
  for b in range(1, m.nbody):
    name = m.body(b).name or f"body{b}"
    p = f"/World/robot/{name}"
    bpath[b] = p
    _body(stage, p, tuple(d.xpos[b]), rot=tuple(d.xquat[b]), mass=float(m.body_mass[b]),
          com=tuple(m.body_ipos[b]), inertia=tuple(m.body_inertia[b]))
    UsdPhysics.MassAPI(stage.GetPrimAtPath(p)).CreatePrincipalAxesAttr(Gf.Quatf(*m.body_iquat[b]))
  for b in range(1, m.nbody):
    parent = bpath[int(m.body_parentid[b])]
    pose_in_parent = (m.body_pos[b].copy(), m.body_quat[b].copy())
    jnum, jadr = int(m.body_jntnum[b]), int(m.body_jntadr[b])
    if jnum > 1:
      raise ValueError(f"body {m.body(b).name} has {jnum} joints; one joint per body is written")
    jtype = int(m.jnt_type[jadr]) if jnum else None
    if jtype == mujoco.mjtJoint.mjJNT_FREE:
      continue
    jname = m.joint(jadr).name if jnum else f"{m.body(b).name}_fixed"
    jp = f"/World/robot/joints/{jname}"
    if jnum == 0:
      _joint(stage, UsdPhysics.FixedJoint, jp, parent, bpath[b], tuple(pose_in_parent[0]),
             rot0=tuple(pose_in_parent[1]))
      continue
    zq = np.empty(4)
    mujoco.mju_quatZ2Vec(zq, m.jnt_axis[jadr].astype(np.float64))
    f1 = (m.jnt_pos[jadr].copy(), zq)
    pos0 = pose_in_parent[0] + _rot(pose_in_parent[1], f1[0])
    rot0 = np.empty(4)
    mujoco.mju_mulQuat(rot0, pose_in_parent[1], f1[1])
    cls = {mujoco.mjtJoint.mjJNT_HINGE: UsdPhysics.RevoluteJoint, mujoco.mjtJoint.mjJNT_SLIDE:
           UsdPhysics.PrismaticJoint, mujoco.mjtJoint.mjJNT_BALL: UsdPhysics.SphericalJoint}[jtype]
    j = _joint(stage, cls, jp, parent, bpath[b], tuple(pos0), tuple(f1[0]), tuple(rot0), tuple(f1[1]))
    angular = jtype == mujoco.mjtJoint.mjJNT_HINGE
    if jtype != mujoco.mjtJoint.mjJNT_BALL:
      j.CreateAxisAttr("Z")
      if m.jnt_limited[jadr]:
        s = 180 / math.pi if angular else 1.0
        j.CreateLowerLimitAttr(float(m.jnt_range[jadr, 0] * s))
        j.CreateUpperLimitAttr(float(m.jnt_range[jadr, 1] * s))
    if m.dof_armature[m.jnt_dofadr[jadr]]:
      j.GetPrim().CreateAttribute("physxJoint:armature", Sdf.ValueTypeNames.Float).Set(
        float(m.dof_armature[m.jnt_dofadr[jadr]]))
    for a in range(m.nu):
      if m.actuator_trnid[a, 0] != jadr or m.actuator_trntype[a] != mujoco.mjtTrn.mjTRN_JOINT:
        continue
      kp, kv = m.actuator_gainprm[a, 0], -m.actuator_biasprm[a, 2]
      per = math.pi / 180 if angular else 1.0
      fmax = float(m.actuator_forcerange[a, 1]) if m.actuator_forcelimited[a] else float("inf")
      _drive(j, "angular" if angular else "linear", float(kp * per), float(kv * per), fmax)
  for gi in range(m.ngeom):
    if not (m.geom_contype[gi] or m.geom_conaffinity[gi]):
      continue
    b = int(m.geom_bodyid[gi])
    parent = bpath[b] or "/World/static"
    if bpath[b] is None and not stage.GetPrimAtPath(parent):
      UsdGeom.Xform.Define(stage, parent)
    gp = f"{parent}/collision_{gi}"
    t = int(m.geom_type[gi])
    size = m.geom_size[gi]
    if t == mujoco.mjtGeom.mjGEOM_MESH:
      mid = int(m.geom_dataid[gi])
      va, vn, fa, fn = m.mesh_vertadr[mid], m.mesh_vertnum[mid], m.mesh_faceadr[mid], m.mesh_facenum[mid]
      geo = UsdGeom.Mesh.Define(stage, gp)
      geo.CreatePointsAttr([Gf.Vec3f(*v) for v in m.mesh_vert[va:va + vn].tolist()])
      geo.CreateFaceVertexCountsAttr([3] * int(fn))
      geo.CreateFaceVertexIndicesAttr([int(i) for i in m.mesh_face[fa:fa + fn].reshape(-1)])
      UsdPhysics.MeshCollisionAPI.Apply(geo.GetPrim()).CreateApproximationAttr("convexHull")
    elif t == mujoco.mjtGeom.mjGEOM_BOX:
      geo = UsdGeom.Cube.Define(stage, gp)
      geo.CreateSizeAttr(2.0)
    elif t == mujoco.mjtGeom.mjGEOM_SPHERE:
      geo = UsdGeom.Sphere.Define(stage, gp)
      geo.CreateRadiusAttr(float(size[0]))
    elif t in (mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_CYLINDER):
      geo = (UsdGeom.Capsule if t == mujoco.mjtGeom.mjGEOM_CAPSULE else UsdGeom.Cylinder).Define(stage, gp)
      geo.CreateAxisAttr("Z")
      geo.CreateRadiusAttr(float(size[0]))
      geo.CreateHeightAttr(float(2 * size[1]))
    elif t == mujoco.mjtGeom.mjGEOM_PLANE:
      geo = UsdGeom.Plane.Define(stage, gp)
    else:
      raise ValueError(f"geom type {t} is not written")
    geo.AddTranslateOp().Set(Gf.Vec3d(*m.geom_pos[gi]))
    geo.AddOrientOp(UsdGeom.XformOp.PrecisionDouble).Set(Gf.Quatd(*m.geom_quat[gi]))
    if t == mujoco.mjtGeom.mjGEOM_BOX:
      geo.AddScaleOp(UsdGeom.XformOp.PrecisionDouble).Set(Gf.Vec3d(*size))
    _collider(geo.GetPrim())
    mu = float(m.geom_friction[gi, 0])
    if mu not in materials:
      materials[mu] = _material(stage, f"/World/Looks/friction_{len(materials)}", mu)
    _bind(geo.GetPrim(), materials[mu])
  stage.GetRootLayer().Save()
  return str(path)


def _rot(q, v):
  import mujoco

  r = np.empty(3)
  mujoco.mju_rotVecQuat(r, np.asarray(v, dtype=np.float64), np.asarray(q, dtype=np.float64))
  return r
