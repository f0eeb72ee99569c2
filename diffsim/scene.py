"""MJCF to a batched MuJoCo Warp model and its worlds.

A `Scene` owns the host model (`mujoco.MjModel`, float64), the device model (`mujoco_warp.Model`)
and the MJWarp `Data` buffers that rollouts step: one with `nworld` worlds for forward-only
rollouts and, per perturbation-lane count, one with `nlane * nworld` worlds for differentiable ones.
Those are refused before allocation when MJWarp would need more memory than the device has free
(`Scene.memory_estimate`).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass

import mujoco
import numpy as np
import warp as wp

from .mjmodel import UnknownNameError, can_make_contacts, name2id

__all__ = ["Scene", "SolverSettings", "UnknownNameError", "resolve_device", "set_deterministic", "asset_path",
           "available_memory"]


_ASSETS = os.path.join(os.path.dirname(__file__), "assets")


def asset_path(*parts: str) -> str:
  """Path of a model shipped with diffsim, e.g. `asset_path("so101", "so101_new_calib.xml")`."""
  return os.path.join(_ASSETS, *parts)


def resolve_device(device: str | wp.context.Device | None) -> wp.context.Device:
  """`None` means `"cuda:0"` if a CUDA device is available, else `"cpu"`."""
  wp.init()
  if device is None:
    return wp.get_device("cuda:0" if wp.is_cuda_available() else "cpu")
  if isinstance(device, str) and device.startswith("cuda") and not wp.is_cuda_available():
    # asked before Warp tries a CUDA context, which prints raw driver errors first
    raise ValueError(f"device {device!r}: Warp finds no CUDA device here (no NVIDIA GPU or driver); use 'cpu'")
  try:
    return wp.get_device(device)
  except Exception as e:  # Warp raises a bare ValueError/RuntimeError with little context
    raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda' or 'cuda:N' ({e})") from None


_DETERMINISTIC = False
# diffsim's Warp modules with float atomics that can race: sums over worlds (initial-state and
# shared-parameter gradients, costs) and the adjoints of kernels recorded on a tape. Not
# diffsim.step and diffsim.trajopt: their `+=` update elements that one thread owns (no race), and
# Warp's deterministic lowering rejects an array both updated that way and read in one kernel. Not
# MJWarp's modules either: `opt.deterministic` builds its kernels with float atomics in the
# deterministic mode, and several of its others do not compile in it (same reason).
# the analytic adjoint's modules with kernels (`diffsim/adjoint/`)
_ADJOINT_MODULES = tuple(f"diffsim.adjoint.{m}" for m in ("kinematics", "dynamics", "actuation", "sensors", "contacts",
                                                           "constraints", "solve", "step"))
DETERMINISTIC_MODULES = (*_ADJOINT_MODULES, "diffsim.gradcheck", "diffsim.losses", "diffsim.rollout",
                         "diffsim.sysid.residuals")
# ... of which these make atomic updates in loops over the model's coordinates, which Warp's static
# record count (one per call site) misses: each coordinate of the initial state (rollout's
# `_initial_grad`), each input of a residual row (the adjoint of `diffsim.sysid.residuals.residuals`) once per thread,
# or a world's tree sums and their adjoints (the analytic adjoint's replay, one thread per world)
LOOPED_RECORD_MODULES = (*_ADJOINT_MODULES, "diffsim.rollout", "diffsim.sysid.residuals")
_max_records = 0  # the largest such count over the scenes built so far


def set_deterministic(enabled: bool = True) -> None:
  """Fix the order of floating-point atomics, so repeated GPU rollouts and gradients repeat bitwise.

  (CPU kernels run sequentially: CPU runs repeat anyway.) Sets MJWarp's own
  `opt.deterministic = DeterminismType.ALL` on every `Scene` built afterwards, and Warp's
  `"deterministic"` module option (`wp.DeterministicMode.RUN_TO_RUN`) on diffsim's modules with
  racing atomics; they recompile on their next launch (once: Warp caches both variants). Call it
  before building scenes and rollouts: graphs captured before keep their kernels. It leaves
  `wp.config.deterministic` alone: set globally, it would also reach MJWarp kernels that do not
  compile in that mode. Your own kernels (a `KernelCost`) that sum with float atomics need
  `wp.set_module_options({"deterministic": wp.DeterministicMode.RUN_TO_RUN})` in their module.

  MuJoCo Warp 4.0 implements the ATOMICS part of `ALL` only: its stable contact and constraint-row
  orders (CONTACTS, CONSTRAINT) are still empty placeholders, so with contacts or active
  constraints repeated GPU runs can still differ in the last bits (`benchmarks.run --sections
  determinism` reports whether they do). Costs some throughput on GPU; see `benchmarks/`.
  """
  global _DETERMINISTIC
  _DETERMINISTIC = bool(enabled)
  _apply_module_options()


def _apply_module_options() -> None:
  import importlib

  mode = wp.DeterministicMode.RUN_TO_RUN if _DETERMINISTIC else wp.DeterministicMode.NOT_GUARANTEED
  for name in DETERMINISTIC_MODULES:
    importlib.import_module(name)  # a Warp module made before its Python module would be replaced
    records = wp.config.deterministic_max_records
    if _DETERMINISTIC and name in LOOPED_RECORD_MODULES:
      records = max(records, _max_records)
    want = {"deterministic": mode, "deterministic_max_records": records}
    have = wp.get_module_options(name)
    if any(have[k] != v for k, v in want.items()):  # a change recompiles (or reloads) the module
      wp.set_module_options(want, module=name)


def _note_model_size(mjm: mujoco.MjModel) -> None:
  """Raises the per-thread record bound of `LOOPED_RECORD_MODULES` to cover `mjm`."""
  global _max_records
  need = max(mjm.nq, 2 * mjm.nv + mjm.na + mjm.nsensordata)
  from .adjoint.coverage import analytic_coverage  # no Warp kernels: the package's step loads on first use

  if analytic_coverage(mjm) is None:
    # the analytic adjoint's per-world sums over (body, ancestor) and (dof, dof) pairs
    need = max(need, 2 * mjm.nbody * (mjm.nbody + mjm.nv) + mjm.nv * mjm.nv)
  if need > _max_records:
    _max_records = need
    if _DETERMINISTIC:
      _apply_module_options()


@dataclass(frozen=True)
class SolverSettings:
  """How the constraint solver runs: an explicit override of the MJCF's settings.

  Two kinds of rollout run the solver differently by default (`tolerance=None`):
    - rollouts without perturbation lanes (forward only, `Rollout(..., differentiable=False)`, and the
      analytic adjoint's forward pass, which needs only the solver's converged acceleration) run the
      model as MJWarp runs its MJCF: its `tolerance` (floored at 1e-6 by MJWarp's `put_model` for
      float32), `ls_tolerance`, `iterations` and `ls_iterations`;
    - finite-difference lanes run at tolerance 0 (`Scene.lane_tolerance`): their Jacobians through
      contacts are noise unless every lane takes its nominal world's solver path (as MuJoCo MPC does),
      a warm start shared by all lanes of a world and the same iterations, so every lane iterates until
      its line search stalls or the budget is spent.

  What each costs, measured on the CPU (December 2026): at tolerance 0 a float32 world's improvement is
  rarely exactly zero, so many steps run on to the iteration limit: the SO-101 takes 10.2 Newton
  iterations per world-step against 2.0 at its MJCF's (`benchmarks/bench_tolerance.py`), and
  diffsim's forward took 1.5x (1 world) to 5.2x (2,048 worlds) the time of raw `mjw.step` on the model
  as written, the humanoid 1.1-1.2x; at the MJCF's, 1.02-1.06x and 0.98-1.09x, the cart-pole and the
  5-link arm 0.7-0.8x (their worlds without constraint rows skip the solver;
  `benchmarks/bench_forward.py`). Trajectories match float64 MuJoCo C as closely either way
  (`tests/test_rollout.py`, `tests/test_physics.py`) and the analytic adjoint's gradients keep their
  error, 1e-7..2e-5 against C on the models of `tests/test_adjoint.py`, no worse than at 0.

  A number (`tolerance=1e-12`, or 0) runs every rollout, lanes included, at it: 1e-12, far below
  float32's resolution, stops a lane once another iteration would not change its solution (on the
  SO-101 the same lane gradients for a fifth of the solver iterations), but MJWarp scales its stopping
  test by the mean inertia, so on some models (two flex models of MJWarp's test set) it fires before
  the lanes agree; and with a capped `iterations` budget (tutorial 03) a fixed path matters.

  `lanes="auto"` (default) takes `"tolerance"` where the MJCF caps the solver at `AUTO_MAX_ITERATIONS`
  (10) iterations or fewer, `"nominal"` elsewhere. `lanes="nominal"` (the Newton solver on the CPU,
  elsewhere as `"tolerance"`): the lanes' batch, nominal worlds included, solves at 1e-12 (or at
  `tolerance` where given) and no lane stops before its nominal world or the other side of its
  central difference (`diffsim.lane_solver`). The
  lanes' linearization: the SO-101 4.4x faster than at 0, the humanoid 1.06x
  (`benchmarks/bench_lanes.py`). Lane gradient errors against float64 C over the 38 models of
  MJWarp's test set with lane gradients (`bench_contact_gradients --lanes nominal|tolerance`,
  `benchmarks/results/contact_gradients_lanes-*_cpu.md`): 28 unchanged; lower on actuation,
  tendon/fixed, the humanoid, weld_3d, connect_3d (and position.xml, which diverges either way);
  higher on tendon_limit (2.7e-4 against 2.1e-4) and pendula (1.2e-3 / 2.0e-3 against 1.1e-3 /
  1.7e-3); constraints.xml mixed (ctrl 2.8e-2 against 2.5e-2, qvel0 7.0e-3 against 1.2e-2); nutbolt
  NaN where its lanes are unusable at 0 too (4.9, 254 unresolved switches). Such rows move by tens of
  percent when the inputs are nudged by a few float32 ulps, at tolerance 0 too, but not all of it is
  noise: where the MJCF caps the solver at a few iterations (constraints.xml: 4) a nominal world
  stopping at 1e-12 leaves MuJoCo C's path (at 0, every step to the cap), and over 5 nudged draws
  constraints.xml's qvel0 error averaged 1.6e-2 against 1.2e-2 at 0. Hence `"auto"`: at a cap of 10
  or fewer the lanes stay at 0, whose cost the cap bounds (constraints.xml, actuation.xml: 4, the
  humanoid: 10), and elsewhere follow; over the sweep its rows are tolerance 0's where capped, and
  elsewhere the following rule's: equal or lower but on pendula (1.2e-3 / 2.0e-3 against 1.1e-3 /
  1.7e-3 on the stored draw; over 5 nudged draws 1.6e-3 / 2.0e-3 against 2.3e-3 / 2.6e-3: lower),
  tendon_limit (2.7e-4 against 2.1e-4; over 5 draws 2.8e-4 against 2.7e-4, tolerance 0's own draws
  ranging 2.1e-4 .. 4.2e-4) and nutbolt (NaN against 4.9, its lanes unusable either way).

  Attributes:
    iterations: Newton/CG iterations per step; `None` keeps the MJCF value.
    ls_iterations: line-search iterations; `None` keeps the MJCF value.
    tolerance: solver tolerance of every rollout; `None` (default): the MJCF's without lanes, 0 with.
    lanes: how the perturbation lanes stop: `"tolerance"` at their tolerance, `"nominal"` never
      before their nominal world or their central difference's partner, at 1e-12, `"auto"` (default)
      the first where the MJCF allows at most `AUTO_MAX_ITERATIONS` solver iterations, else the
      second (see above; `Scene.lane_stop` says which).
  """

  iterations: int | None = None
  ls_iterations: int | None = None
  tolerance: float | None = None
  lanes: str = "auto"


# the lanes' solver tolerance unless `SolverSettings.tolerance` says otherwise (see SolverSettings)
LANE_TOLERANCE = 0.0
# how the lanes stop (`SolverSettings.lanes`)
LANE_STOPS = ("auto", "tolerance", "nominal")
# `lanes="auto"`: at this iteration cap or below the lanes run at tolerance 0
AUTO_MAX_ITERATIONS = 10


def load_mjmodel(model) -> mujoco.MjModel:
  if isinstance(model, mujoco.MjModel):
    return model
  if isinstance(model, mujoco.MjSpec):
    try:
      return model.compile()
    except Exception as e:
      raise ValueError(f"could not compile the MjSpec: {e}") from None
  if isinstance(model, os.PathLike):
    model = os.fspath(model)
  if not isinstance(model, str):
    raise TypeError(f"expected an MJCF path, an MJCF string, an MjSpec or an MjModel, got {type(model).__name__}")
  is_xml = model.lstrip().startswith("<")
  if not is_xml and model.lower().endswith((".usd", ".usda", ".usdc", ".usdz")):
    from .usd import compile_usd, usd_to_spec  # a UsdPhysics stage, converted (diffsim.usd)

    return compile_usd(usd_to_spec(model), model)
  if not is_xml and not os.path.exists(model):
    raise FileNotFoundError(f"MJCF file not found: {model!r} (pass a path or an XML string starting with '<')")
  try:
    return mujoco.MjModel.from_xml_string(model) if is_xml else mujoco.MjModel.from_xml_path(model)
  except ValueError as e:
    where = "MJCF string" if is_xml else f"MJCF file {model!r}"
    raise ValueError(f"malformed {where}: {e}") from None


class Scene:
  """A MuJoCo model batched over `nworld` independent worlds on one device.

  Build with `Scene.from_xml(...)`. Attributes:
    mjm: host model (`mujoco.MjModel`, float64); the reference for nominal values (its solver
      tolerance is `lane_tolerance`: MuJoCo C converged as far as the lanes).
    model: device model (`mujoco_warp.Model`); its `opt.tolerance` is `tolerance`.
    tolerance: the constraint solver's tolerance in rollouts without perturbation lanes (forward
      only, the analytic adjoint): the MJCF's as MJWarp runs it, unless `SolverSettings` overrides.
    lane_tolerance: the tolerance of the finite-difference lanes (0 unless `SolverSettings` overrides).
    nworld: number of independent worlds.
    device: Warp device.
    nq, nv, na, nu, nsensordata: sizes from `mjm`.
    nx: tangent state size `2 * nv + na` (qpos perturbed in the tangent space).
    dt: timestep (s).
    has_contacts: whether two geoms can collide (contact not disabled).
    has_position_constraints: contacts, equality constraints or joint / tendon limits, whose
      ~1 mm impedance width sets the default finite-difference qpos step (`diffsim.step`).
    has_force_kinks: force-limited actuators or dry friction, which set the default
      finite-difference control step (`diffsim.step.resolve_eps`).
  """

  def __init__(self, mjm: mujoco.MjModel, *, nworld: int, device=None, solver: SolverSettings | None = None,
               nconmax: int | None = None, njmax: int | None = None):
    import mujoco_warp as mjw

    _cache_version_checks()
    if not isinstance(nworld, (int, np.integer)) or nworld < 1:
      raise ValueError(f"nworld must be a positive integer, got {nworld!r}")
    for name, cap in (("nconmax", nconmax), ("njmax", njmax)):
      if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1):
        # njmax=0: MJWarp 4.0's Euler step integrates damping from the solver's `efc.Ma`, which a
        # Data without row capacity never writes, so its worlds would not move (`tests/test_errors.py`)
        raise ValueError(f"{name} must be a positive integer, or None for MJWarp's default, got {cap!r}")
    self.mjm = mjm
    self.nworld = int(nworld)
    self.device = resolve_device(device)
    self.solver = solver or SolverSettings()
    if self.solver.iterations is not None:
      mjm.opt.iterations = self.solver.iterations
    if self.solver.ls_iterations is not None:
      mjm.opt.ls_iterations = self.solver.ls_iterations
    if self.solver.lanes not in LANE_STOPS:
      raise ValueError(f"SolverSettings.lanes must be one of {LANE_STOPS}, got {self.solver.lanes!r}")
    # how this scene's lanes stop: "tolerance" or "nominal" (`SolverSettings.lanes`)
    self.lane_stop = self.solver.lanes
    if self.lane_stop == "auto":
      self.lane_stop = "tolerance" if mjm.opt.iterations <= AUTO_MAX_ITERATIONS else "nominal"
    explicit = self.solver.tolerance
    if explicit is not None:
      if not np.isfinite(explicit) or explicit < 0:
        raise ValueError(f"SolverSettings.tolerance must be a finite number >= 0 (or None: the MJCF's), got {explicit!r}")
      mjm.opt.tolerance = explicit
    self.nq, self.nv, self.na, self.nu = mjm.nq, mjm.nv, mjm.na, mjm.nu
    self.nsensordata = mjm.nsensordata
    self.nx = 2 * mjm.nv + mjm.na
    self.has_contacts = can_make_contacts(mjm)
    # constraints on positions with MuJoCo's ~1 mm impedance width (solimp), which a finite-difference
    # qpos step must stay inside: contacts, equality constraints, joint and tendon limits
    self.has_position_constraints = self.has_contacts or _has_limits_or_equalities(mjm)
    # forces that kink in the controls, whose width a finite-difference control step must stay inside
    self.has_force_kinks = _has_force_kinks(mjm)
    self.dt = float(mjm.opt.timestep)
    self._nconmax = nconmax
    self._njmax = njmax
    _check_sdf_plugins(mjm)
    with wp.ScopedDevice(self.device):
      try:
        self.model = mjw.put_model(mjm)
      except NotImplementedError as e:
        raise NotImplementedError(f"MuJoCo Warp does not support a feature of this model: {e}") from None
      if explicit is None:
        # rollouts without lanes: the MJCF's tolerance as MJWarp runs it (put_model's float32 floor)
        self.tolerance = float(self.model.opt.tolerance.numpy()[0])
        self.lane_tolerance = LANE_TOLERANCE
      else:
        # put_model floors the tolerance at 1e-6 for float32: the configured one is restored
        self.model.opt.tolerance.fill_(explicit)
        self.tolerance = self.lane_tolerance = float(explicit)
      # the lanes' tolerance, swapped into the model's options while they step (`physics.Physics`)
      self.lane_tolerance_array = None
      if self.lane_tolerance != self.tolerance:
        self.lane_tolerance_array = wp.array([self.lane_tolerance], dtype=float)
      # the host model, float64 MuJoCo C's reference, converges as the lanes do
      mjm.opt.tolerance = self.lane_tolerance
      # with tolerance 0 some steps reach the iteration limit: MJWarp's warning would flood
      quiet = int(mjw.OverflowType.ITERATIONS | mjw.OverflowType.LS_ITERATIONS)
      self.model.opt.warn_overflow = int(self.model.opt.warn_overflow) & ~quiet
      if _DETERMINISTIC:
        self.model.opt.deterministic = int(mjw.DeterminismType.ALL)
    _note_model_size(mjm)
    self._mjd = mujoco.MjData(mjm)
    mujoco.mj_forward(mjm, self._mjd)
    self._datas: dict[int, object] = {}
    self._bytes_per_world = None  # (fixed, per world) bytes of Data and of the step's peak (`memory_estimate`)
    # (host) joint tables used by tangent-space kernels
    self.jnt_type = wp.array(mjm.jnt_type.astype(np.int32), dtype=int, device=self.device)
    self.jnt_qposadr = wp.array(mjm.jnt_qposadr.astype(np.int32), dtype=int, device=self.device)
    self.jnt_dofadr = wp.array(mjm.jnt_dofadr.astype(np.int32), dtype=int, device=self.device)
    self.dof_jntid = wp.array(mjm.dof_jntid.astype(np.int32), dtype=int, device=self.device)
    clamp = mjm.actuator_ctrllimited.astype(bool) & ~bool(mjm.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CLAMPCTRL)
    lo = np.where(clamp, mjm.actuator_ctrlrange[:, 0], -np.inf).astype(np.float32)
    hi = np.where(clamp, mjm.actuator_ctrlrange[:, 1], np.inf).astype(np.float32)
    self.ctrl_lo = wp.array(lo, dtype=float, device=self.device)  # (nu,) limits MuJoCo clamps ctrl to
    self.ctrl_hi = wp.array(hi, dtype=float, device=self.device)
    # what the layers above build for this scene and keep with it: `params.ModelRows` (which fields
    # hold per-world rows), `rollout()`'s Rollouts; dropped with the scene
    self.memo: dict = {}
    self.source = None  # the MJCF path or string or the MjSpec it was built from (`from_xml`); None for an MjModel

  @classmethod
  def from_xml(cls, model, *, nworld: int, device=None, solver: SolverSettings | None = None,
               nconmax: int | None = None, njmax: int | None = None) -> "Scene":
    """Builds a scene from an MJCF path, an MJCF string, a `mujoco.MjSpec` or a `mujoco.MjModel`.

    Args:
      model: MJCF file path or XML string, `mujoco.MjSpec`, or `mujoco.MjModel` (copied).
      nworld: number of independent worlds.
      device: Warp device; `None` means `"cuda:0"` if available, else `"cpu"`.
      solver: constraint-solver settings shared by all worlds and lanes (`SolverSettings`).
      nconmax, njmax: MJWarp contact / constraint capacity per world (defaults: MJWarp's).
    """
    mjm = load_mjmodel(model)
    if isinstance(model, mujoco.MjModel):
      mjm = copy_mjmodel(mjm)
    scene = cls(mjm, nworld=nworld, device=device, solver=solver, nconmax=nconmax, njmax=njmax)
    # what the model was built from (not a compiled MjModel): `diffsim.render` adds its camera to it
    scene.source = None if isinstance(model, mujoco.MjModel) else model
    return scene

  @classmethod
  def from_usd(cls, path, *, nworld: int = 1, device=None, importer: str = "auto", solver: SolverSettings | None = None,
               nconmax: int | None = None, njmax: int | None = None) -> "Scene":
    """Builds a scene from a UsdPhysics stage (.usd, .usda, .usdc, .usdz; `pip install "diffsim[usd]"`).

    The stage is converted to MJCF by `diffsim.usd.usd_to_spec` (see its docstring for what is kept
    and what is lost) before any kernel runs. Beyond `from_xml`'s attributes the scene has
    `usd_paths` (`{kind: {name: prim path}}` for body, joint, geom, actuator: the names `Param`
    takes), `usd_lost` (what the model does not hold) and `spec` (the converted `mujoco.MjSpec`;
    `to_xml` writes it).

    Args:
      path: the USD file (not modified).
      importer: "auto" (diffsim's own, with usd-core) or "newton" (see `usd_to_spec`).
      nworld, device, solver, nconmax, njmax: as in `from_xml`.
    """
    from .usd import compile_usd, usd_to_spec

    imported = usd_to_spec(path, importer=importer)
    scene = cls(compile_usd(imported, path), nworld=nworld, device=device, solver=solver, nconmax=nconmax,
                njmax=njmax)
    scene.spec, scene.usd_paths, scene.usd_lost = imported.spec, imported.paths, imported.lost
    return scene

  def to_xml(self, path) -> None:
    """Writes the MJCF of a scene built by `from_usd` (the converted model) to `path` (temporary file, rename).

    MuJoCo's XML writer prints joint ranges and actuator parameters to 6 significant digits: the file
    is for reading and editing; the scene itself holds the full values."""
    if getattr(self, "spec", None) is None:
      raise TypeError("to_xml writes the MJCF converted from USD (Scene.from_usd); a scene from MJCF has its source "
                      "file already")
    from .usd import write_xml

    write_xml(self.spec, path)

  # -- worlds -------------------------------------------------------------------------------------

  def data(self, nlane: int = 1):
    """MJWarp `Data` with `nlane * nworld` worlds (lane-major: world id = lane * nworld + w).

    Raises `MemoryError` before allocating when `memory_estimate(nlane)` exceeds `MEMORY_FRACTION` of
    `available_memory(device)` on a CUDA device; warns (`MemoryWarning`) on the CPU, where the
    estimate counts allocated, not touched, pages and so is an upper bound.
    """
    import mujoco_warp as mjw

    d = self._datas.get(nlane)
    if d is None:
      self._check_memory(nlane)
      with wp.ScopedDevice(self.device):
        d = mjw.put_data(self.mjm, self._mjd, nworld=nlane * self.nworld, nconmax=self._nconmax, njmax=self._njmax)
      self._datas[nlane] = d
    return d

  def memory_estimate(self, nlane: int = 1) -> int | None:
    """Peak bytes MJWarp needs to step `nlane * nworld` worlds (`data(nlane)`): its `Data` plus the
    workspaces `mjw.step` allocates in every step (the constraint solver's, `nv x nv` per world with
    the Newton solver; collision's, per contact slot) and, on the CPU, where device memory is host
    memory, `put_data`'s transient numpy copies (`PUT_DATA_COPIES` of the Data). Both parts are
    affine in the number of worlds: measured once, by counting the device allocator's bytes while
    MJWarp allocates and steps one and two worlds (this scene's `nconmax` / `njmax`), and
    extrapolated. `None` while the device is capturing a graph (nothing can be measured then)."""
    if self._bytes_per_world is None:
      if self.device.is_capturing:
        return None
      import mujoco_warp as mjw

      sizes = []
      for n in (1, 2):
        with wp.ScopedDevice(self.device), _CountingAllocator(self.device) as count, off_tape():
          d = mjw.put_data(self.mjm, self._mjd, nworld=n, nconmax=self._nconmax, njmax=self._njmax)
          data = count.held
          mjw.step(self.model, d)
          wp.synchronize_device(self.device)
        sizes.append(np.array([data, count.peak]))
        del d
      self._bytes_per_world = (2 * sizes[0] - sizes[1], sizes[1] - sizes[0])
    fixed, per_world = self._bytes_per_world
    data, peak = fixed + per_world * nlane * self.nworld
    copies = 0 if self.device.is_cuda else PUT_DATA_COPIES * data
    return int(max(peak, data + copies))

  def _check_memory(self, nlane: int) -> None:
    free = available_memory(self.device)
    if free is not None and self._bytes_per_world is None and self._fits_without_measuring(nlane, free):
      return
    need = None if free is None else self.memory_estimate(nlane)
    if need is None or need <= MEMORY_FRACTION * free:
      return
    base = self.memory_estimate(0)
    per_world = (need - base) / (nlane * self.nworld)
    fit = int((MEMORY_FRACTION * free - base) // (per_world * nlane))
    fewer = f"fewer worlds (nworld <= {fit} fit)" if fit >= 1 else "not even one world fits"
    message = (
      f"MJWarp needs about {_format_bytes(need)} to step {nlane} perturbation lane(s) x {self.nworld} world(s) = "
      f"{nlane * self.nworld:,} worlds ({_format_bytes(per_world)} each: Data and the step's solver and collision "
      f"workspaces), more than {MEMORY_FRACTION:.0%} of the {_format_bytes(free)} available on {self.device}. "
      f"Ways out: {fewer}; forward differences (central=False: about half the lanes); no guard lanes "
      f"(guard=False: up to 2 nv fewer) or control columns (ctrl_jacobian=False: up to 2 nu fewer) if the "
      f"gradient allows; smaller contact and constraint capacities (Scene.from_xml(..., nconmax=, njmax=)); the "
      f"CG solver (<option solver=\"CG\"/>: no nv x nv Hessian per world); or a device with more memory.")
    if not _allocations_committed(self.device):
      # on the CPU the count is an upper bound: pages MJWarp allocates but never touches (most of its
      # contact and constraint capacity) take no memory (tutorial 03 at 2,048 worlds: 36 GB counted,
      # 3.5 GB used), so the estimate warns instead of refusing a run that may well fit
      warnings.warn(message + " (On the CPU this counts allocated, not touched, memory: an upper bound.)",
                    MemoryWarning, stacklevel=3)
      return
    raise MemoryError(message)

  def _fits_without_measuring(self, nlane: int, free: int) -> bool:
    """Whether the worlds fit on the CPU by a bound that needs no `memory_estimate` (two `put_data`
    and two steps, ~50 ms, a sixth of a small identification): MuJoCo C's own `MjData` for the
    model, its buffer and its arena (the constraint and contact storage `<size memory=...>`
    reserves; at least 16 MiB, for a model that sets a tiny arena), `CPU_BOUND_MARGIN` times over
    per world, within `MEMORY_FRACTION` of the free memory. MJWarp's Data and step workspaces per
    world measured 0.1-1.1% of that figure on the arm, the humanoid and MJWarp's collision test
    model, with capacities from the MjData. Explicit `nconmax` / `njmax` are not bounded by it, and
    a CUDA device, where the check refuses, always measures."""
    if _allocations_committed(self.device) or self._nconmax is not None or self._njmax is not None:
      return False
    per_world = CPU_BOUND_MARGIN * max(self.mjm.nbuffer + self.mjm.narena, 16 << 20)
    return nlane * self.nworld * per_world <= MEMORY_FRACTION * free

  def qpos0(self) -> np.ndarray:
    """Initial configuration from the MJCF (`qpos0`), `(nq,)` float64."""
    return self.mjm.qpos0.copy()

  def name2id(self, objtype: mujoco.mjtObj, name: str) -> int:
    """`name2id(self.mjm, objtype, name)`."""
    return name2id(self.mjm, objtype, name)

  def __repr__(self) -> str:
    return (f"Scene(nworld={self.nworld}, device={self.device}, nq={self.nq}, nv={self.nv}, na={self.na}, "
            f"nu={self.nu}, nsensordata={self.nsensordata}, dt={self.dt})")


# share of `available_memory` that MJWarp's Data and step workspaces may take; the rest is left for
# the trajectory, Jacobians and compiled kernels
MEMORY_FRACTION = 0.9
# `put_data`'s transient numpy copies on the CPU, as a share of the Data it makes
PUT_DATA_COPIES = 0.6
# `Scene._fits_without_measuring`: MuJoCo C's MjData bytes per world, times this, bound MJWarp's
CPU_BOUND_MARGIN = 4


class MemoryWarning(UserWarning):
  """MJWarp's allocations for a scene's lanes may exceed the memory available (see `Scene.data`)."""


def _cache_version_checks() -> None:
  """Memoizes MJWarp's `util_pkg.check_version`, which `put_model` and `put_data` call two or three
  times each: every call reads the installed package's metadata through `importlib.metadata`
  (~5 ms), a seventh of a small identification's set-up (issue 36). Installed versions do not
  change within a process."""
  import functools

  from mujoco_warp._src import util_pkg

  if not hasattr(util_pkg.check_version, "cache_info"):
    util_pkg.check_version = functools.cache(util_pkg.check_version)


def _allocations_committed(device: wp.context.Device) -> bool:
  """Whether allocated bytes are memory taken (CUDA), not address space whose untouched pages cost
  nothing (the CPU)."""
  return device.is_cuda


@contextlib.contextmanager
def off_tape():
  """Keeps launches off an active `wp.Tape` (MJWarp kernels have no adjoints; a tape would record
  them and warn in its backward pass)."""
  runtime = wp._src.context.runtime
  tape, runtime.tape = runtime.tape, None
  try:
    yield
  finally:
    runtime.tape = tape


def available_memory(device: wp.context.Device) -> int | None:
  """Bytes that new allocations on `device` can take: the CUDA device's free memory, or on the CPU
  `MemAvailable` from `/proc/meminfo` (Linux; elsewhere psutil's `available`); `None` where unknown."""
  if device.is_cuda:
    return int(device.free_memory)
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  try:
    import psutil

    return int(psutil.virtual_memory().available)
  except ImportError:
    return None


def _format_bytes(n: float) -> str:
  return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB"


class _CountingAllocator:
  """Counts the bytes Warp allocates on `device` inside the `with` block (held now and at the
  peak), delegating to the device's allocator; arrays made inside free through it later too."""

  def __init__(self, device: wp.context.Device):
    self.device = device
    self.held = self.peak = 0

  def allocate(self, size_in_bytes: int) -> int:
    ptr = self.inner.allocate(size_in_bytes)
    self.held += size_in_bytes
    self.peak = max(self.peak, self.held)
    return ptr

  def deallocate(self, ptr: int, size_in_bytes: int) -> None:
    self.held -= size_in_bytes
    self.inner.deallocate(ptr, size_in_bytes)

  def __enter__(self):
    self.inner = wp.get_device_allocator(self.device)
    if self.device.is_cuda:
      self.restore = None if self.inner is self.device.current_allocator else self.inner
      wp.set_device_allocator(self.device, self)
    else:
      self.device.default_allocator = self
    return self

  def __exit__(self, *exc):
    if self.device.is_cuda:
      wp.set_device_allocator(self.device, self.restore)
    else:
      self.device.default_allocator = self.inner


def _check_sdf_plugins(mjm: mujoco.MjModel) -> None:
  """Refuses SDF geoms defined by a plugin (`mujoco.sdf.nut`, ...) while MJWarp's `user_sdf` and
  `user_sdf_grad` are its placeholders: they print an error inside the collision kernels and return
  0, so the model would step with wrong contacts instead of failing."""
  plugin_sdf = (mjm.geom_type == mujoco.mjtGeom.mjGEOM_SDF) & (mjm.geom_plugin >= 0)
  if not plugin_sdf.any():
    return
  from mujoco_warp._src import collision_sdf

  placeholders = [n for n in ("user_sdf", "user_sdf_grad")
                  if getattr(getattr(collision_sdf, n), "func", None) is not None
                  and getattr(collision_sdf, n).func.__module__ == collision_sdf.__name__]
  if placeholders:
    names = [mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_GEOM, int(i)) or f"#{i}" for i in np.flatnonzero(plugin_sdf)]
    raise NotImplementedError(
      f"MuJoCo Warp does not support a feature of this model: SDF geoms from plugins ({names}) need the signed "
      f"distance and its gradient as Warp functions of your own: assign mujoco_warp._src.collision_sdf."
      f"{' and '.join(placeholders)} before building the Scene (mujoco_warp/test_data/collision_sdf/utils.py "
      f"does it for the nut, bolt, torus and gear plugins). Without them MJWarp's collisions return 0.")


def _has_limits_or_equalities(mjm: mujoco.MjModel) -> bool:
  """Whether equality constraints or joint / tendon limits can be active (MJCF and disable flags)."""
  off = mjm.opt.disableflags
  if mjm.neq and not off & mujoco.mjtDisableBit.mjDSBL_EQUALITY:
    return True
  limited = bool(mjm.jnt_limited.any()) or bool(mjm.ntendon and mjm.tendon_limited.any())
  return limited and not off & mujoco.mjtDisableBit.mjDSBL_LIMIT


def _has_force_kinks(mjm: mujoco.MjModel) -> bool:
  """Whether actuators saturate (`forcelimited`) or dofs / tendons have dry friction (`frictionloss`,
  unless disabled): forces with kinks in the controls."""
  if mjm.nu and mjm.actuator_forcelimited.any():
    return True
  if mjm.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_FRICTIONLOSS:
    return False
  return bool(mjm.dof_frictionloss.any()) or bool(mjm.ntendon and mjm.tendon_frictionloss.any())


def copy_mjmodel(mjm: mujoco.MjModel) -> mujoco.MjModel:
  import copy

  return copy.deepcopy(mjm)
