"""System identification sharded over a `Cluster`'s workers: recordings and starts split, normal
equations gathered.

`ShardedProblem` stands in for `diffsim.sysid.problem.Problem` (the methods and attributes `lm`, `adam`
and `identify` use), so the solvers run unchanged on the driver. The recordings are split into
contiguous groups, one per worker; workers beyond the recordings split the starts too (each start is
its own least-squares problem: `identify(starts=k)`), so a shard is a group of starts times a group of
recordings. Each worker builds the `Problem` of its shard once (its Scene, buffers and captured
graphs; kept between iterations) and, at each iteration, linearizes at the unknowns the driver
broadcasts. Only the small blocks cross:

  - sent: per start, the parameters and the shard's own nuisance blocks (`(nstart, nparam + nfree_k nblock)`);
  - back: `cost`, `Htt`, `gt`, `changes`, `constrained` (summed: the worlds' residuals are disjoint), `Htn`,
    `Hnn`, `gn` (per free world, concatenated in world order: a shard's worlds are a contiguous run of them), and
    the residual autocorrelation's summed products `num` and squares `den`: `rho = sum num / sum den`
    (the ratio of the pooled sums, as one process pools them over all its worlds; averaging the
    shards' `rho` would weight them wrongly).

Per start, the sums run over the shards of its start group. The driver then solves exactly as one
process does. The results equal one process's to float32
rounding: each world's rollout is the same computation, and only the order of the float64 sums over
worlds differs. Adam gathers the gradient the same way (costs and gradients summed).

The residual weights are normalized over all the recordings on the driver (`worlds.column_weights`)
and sent to the workers, so each shard weighs its residuals as one process would.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..sharding import register_sharding
from .cluster import Cluster, Traffic, Worker, check_workers, local_cores, register_job, shards

__all__ = ["ShardedProblem", "OnCluster", "check_shards", "IdentifySharding"]

@dataclass(frozen=True)
class OnCluster:
  """`identify(workers=OnCluster(cluster, n))`: the first `n` workers of a held cluster (None: all)."""

  cluster: Cluster
  workers: int | None = None


_SUMMED = ("cost", "Htt", "gt", "changes", "constrained", "num", "den")
_PER_WORLD = ("Htn", "Hnn", "gn")


def check_shards(workers: int, nrec: int, nstart: int = 1) -> None:
  """ValueError unless each of `workers` gets at least one of the `nrec` recordings times `nstart` starts."""
  if workers > nrec * nstart:
    raise ValueError(f"{workers} workers for {nrec} recordings x {nstart} starts: the recordings (and, beyond them, "
                     f"the starts) are split between the workers and each needs at least one; pass workers <= "
                     f"{nrec * nstart}")


def shard_grid(workers: int, nrec: int, nstart: int) -> tuple[list[range], list[range]]:
  """The start groups and recording groups of `workers` shards: the recordings split first (at most one
  group per recording), then the starts among the groups' copies (`len(starts) * len(recs) <= workers`)."""
  nrg = min(workers, nrec)
  return shards(nstart, min(nstart, workers // nrg)), shards(nrec, nrg)


class ShardedProblem:
  """`Problem`'s interface over a cluster's workers, each holding the `Problem` of some recordings.

  Args:
    cluster: a `Cluster` (held open while this is used).
    mjm: the host model; recs: validated recordings (`sysid.worlds.as_recordings`).
    params: the rollout's `Param`s; the other arguments as `Problem`'s (`device` is each worker's).
    workers: use the first `workers` of the cluster's workers (default: all, at most one per recording and
      start).

  Attributes:
    As `Problem`'s, on the driver: mjm, worlds, unknowns (host arrays of all the recordings), nstart,
    nworld, nparam, nunknown, nresidual, nrollout, last_x; rollout (`.fd.central`, `.fd.nlane`);
    buffers (`theta`, `theta_grad`: Adam's, on the driver's CPU).
    traffic: `{"linearize": [Traffic per call], "gradient": [...], "other": [...]}`.
  """

  def __init__(self, cluster: Cluster, mjm, recs, params, *, weights, normalize: bool | str, shooting: int | None,
               nstart: int, solver_settings=None, central: bool, eps, fit_qvel0: bool | None = None,
               fit_qpos0: bool = False, workers: int | None = None, step_jacobian: str = "auto"):
    import warp as wp

    from ..sysid.parameters import param_columns
    from ..sysid.worlds import Unknowns, Worlds, column_weights, segments

    self.cluster = cluster
    self.mjm = mjm
    colw = column_weights(mjm, recs, weights, normalize)
    segs = segments(recs, shooting)
    self.worlds = Worlds(mjm, recs, segs, colw, fit_qvel0=fit_qvel0, fit_qpos0=fit_qpos0)
    bound = [copy.copy(p) for p in params]  # the workers bind their own (on their scenes)
    for p in bound:
      p.elements = p.resolve_elements(mjm)
    self.unknowns = u = Unknowns(mjm, self.worlds, int(param_columns(bound, mjm).max(initial=-1)) + 1)
    self.nstart = int(nstart)
    self.nworld = self.nstart * self.worlds.nseg
    self.nparam, self.nunknown, self.nresidual = u.nparam, u.nunknown, self.worlds.nresidual
    self.nseries = self.worlds.nseries
    npair = len(recs) * self.nstart
    if workers is not None:
      check_shards(workers, len(recs), self.nstart)
    nshard = cluster.use(min(cluster.workers, npair) if workers is None else workers, npair)
    self._starts, self._rec_parts = shard_grid(nshard, len(recs), self.nstart)
    # a shard's worlds are its recordings' segments, a contiguous run; so are its free worlds' blocks
    seg_rec = np.array([sg.rec for sg in segs])
    self._blocks = []
    for part in self._rec_parts:
      mine = (seg_rec >= part.start) & (seg_rec < part.stop)
      before = int(u.free[:int(np.argmax(mine))].sum())
      nfree = int(u.free[mine].sum())
      nblock = (mjm.nv if self.worlds.fit_qpos[mine].any() else 0) + (mjm.nv if self.worlds.fit_qvel[mine].any() else 0)
      if nfree and nblock != u.nblock:
        raise ValueError("the recordings mix initial states solved for in position and velocity with ones solved for "
                         "in velocity only (some without qpos or qvel), which the shards cannot lay out alike: order "
                         "the recordings so that each kind is together, or run in one process (workers=None)")
      self._blocks.append(slice(u.nparam + before * u.nblock, u.nparam + (before + nfree) * u.nblock))
    # shard i: start group i // len(rec_parts), recording group i % len(rec_parts)
    self._parts = [(st, rp) for st in self._starts for rp in range(len(self._rec_parts))]
    self._labels = [(f"starts {st.start}-{st.stop - 1}, " if len(self._starts) > 1 else "")
                    + f"recordings {self._rec_parts[rp].start}-{self._rec_parts[rp].stop - 1}" for st, rp in self._parts]
    spec = dict(model=mjm, params=params, column_weight=colw, shooting=shooting, solver_settings=solver_settings,
                central=central, eps=eps, fit_qvel0=fit_qvel0, fit_qpos0=fit_qpos0, step_jacobian=step_jacobian)
    self._spec = cluster.ship(spec, "sysid problem")
    self._recs = [cluster.ship(list(recs[p.start:p.stop]), "recordings") for p in self._rec_parts]
    # the workers' rollouts choose their step Jacobians as one process would (`Rollout`'s `jacobian`)
    from ..adjoint import analytic_coverage

    analytic = step_jacobian != "finite_difference" and analytic_coverage(mjm, [p.field for p in params]) is None
    from ..adjoint.jacobian import sweep_count

    self.rollout = SimpleNamespace(fd=SimpleNamespace(central=bool(central), nlane=None),
                                   jacobian="analytic" if analytic else "finite_difference",
                                   nsweep=sweep_count(mjm) if analytic else None)
    # residual Jacobian columns per world, as the workers' problems have them (`Problem.ncol`)
    self.ncol = len(param_columns(bound, mjm)) + u.nblock
    self.buffers = SimpleNamespace(theta=wp.zeros((self.nstart, self.nparam), dtype=float, device="cpu"),
                                   theta_grad=wp.zeros((self.nstart, self.nparam), dtype=float, device="cpu"))
    self.scene = SimpleNamespace(device="cpu")  # where Adam's driver-side arrays live
    self.nrollout = 0
    self.last_x = None
    self.traffic: dict[str, list[Traffic]] = {"linearize": [], "gradient": [], "other": []}

  def _map(self, job, per_shard: list[tuple], kind: str, what: str) -> list:
    args = [(self._spec, self._recs[rp], len(st), *a) for (st, rp), a in zip(self._parts, per_shard)]
    outs = self.cluster.map(job, args, what=what, labels=self._labels)
    self.traffic[kind].append(self.cluster.last_traffic)
    return outs

  def _by_start(self, outs: list[dict], summed, per_world=(), tails: dict | None = None) -> dict:
    """The shards' outputs gathered per start: `summed` keys summed over each start group's shards,
    `per_world` ones concatenated in world order (axis 1), the start groups stacked (axis 0)."""
    nrg = len(self._rec_parts)
    groups = [outs[i * nrg:(i + 1) * nrg] for i in range(len(self._starts))]
    got = {k: np.concatenate([sum(o[k] for o in g) for g in groups], axis=0) for k in summed}
    for k in per_world:
      cat = []
      for st, g in zip(self._starts, groups):
        parts = [o[k] for o in g if o[k].shape[1]]  # a shard without free worlds may have nblock 0
        cat.append(np.concatenate(parts, axis=1) if parts else np.zeros((len(st), 0, *tails[k])))
      got[k] = np.concatenate(cat, axis=0)
    return got

  def build(self) -> None:
    """Builds every worker's problem now (else the first call does) and reads its lanes per world."""
    outs = self._map(_info, [(False,)] * len(self._parts), "other", "sysid build")
    self.rollout.fd.nlane = outs[0]["nlane"]

  def linearize(self, x: np.ndarray, *, jacobian: str = "forward"):
    """`Problem.linearize` over the shards: `NormalEquations` of each start at `x` `(nstart, nunknown)`."""
    from ..sysid.normal import NormalEquations
    from ..sysid.problem import autocorrelation

    x = np.asarray(x, dtype=np.float64)
    self.last_x = x.copy()
    self.nrollout += 1
    theta = x[:, :self.nparam]
    per_shard = [(np.concatenate([theta[st], x[st, self._blocks[rp]]], axis=1), jacobian) for st, rp in self._parts]
    outs = self._map(_linearize, per_shard, "linearize", f"sysid linearize ({jacobian})")
    u = self.unknowns
    got = self._by_start(outs, _SUMMED, _PER_WORLD, {"Htn": (self.nparam, u.nblock), "Hnn": (u.nblock, u.nblock),
                                                     "gn": (u.nblock,)})
    cost = np.where(np.isfinite(got["cost"]), got["cost"], np.inf)
    bad = ~np.isfinite(cost)
    for k in ("Htt", "gt", "Htn", "Hnn", "gn"):  # as one process zeroes a diverged start's Jacobian
      got[k][bad] = 0.0
    if self.rollout.fd.nlane is None:
      self.rollout.fd.nlane = outs[0]["nlane"]
    return NormalEquations(cost=cost, Htt=got["Htt"], Htn=got["Htn"], Hnn=got["Hnn"], gt=got["gt"], gn=got["gn"],
                           rho=autocorrelation(got["num"], got["den"]), changes=got["changes"],
                           constrained=got["constrained"])

  def gradient(self) -> np.ndarray:
    """`Problem.gradient` over the shards: the cost of each start at `buffers.theta`, its gradient
    (summed over the shards) into `buffers.theta_grad`."""
    theta = self.buffers.theta.numpy()
    outs = self._map(_gradient, [(theta[st],) for st, _ in self._parts], "gradient", "sysid gradient (Adam)")
    self.nrollout += 1
    got = self._by_start(outs, ("cost", "grad"))
    self.buffers.theta_grad.assign(got["grad"].astype(np.float32))
    return np.where(np.isfinite(got["cost"]), got["cost"], np.inf)

  def samples(self, start: int = 0) -> list[dict[str, np.ndarray]]:
    """`Problem.samples`: the last rollout's signals per recording, gathered in recording order."""
    # the shards of `start`'s group, in recording order; the others return nothing
    local = [(start - st.start if start in st else None,) for st, _ in self._parts]
    outs = self._map(_samples, local, "other", "sysid samples")
    return [rec for o in outs for rec in o]

  @property
  def forward_mode(self):
    """What `identify` reads of the directional rollout: its lanes per world (`.fd.nlane`)."""
    outs = self._map(_info, [(True,)] * len(self._parts), "other", "sysid info")
    return SimpleNamespace(fd=SimpleNamespace(nlane=outs[0]["nlane"], central=self.rollout.fd.central))

  def bytes_per_iteration(self) -> float:
    """Mean bytes that crossed per linearization (one LM iteration), all workers together."""
    calls = self.traffic["linearize"]
    return float(np.mean([t.total for t in calls])) if calls else 0.0


# -- the driver side of `identify(workers=...)` --------------------------------------------------------


class IdentifySharding:
  """How `diffsim.sysid.identify` shards its problem over Ray workers (`diffsim.sharding`'s `"identify"`)."""

  @staticmethod
  def workers(workers, address) -> tuple[Cluster | None, int | None]:
    """`identify`'s `workers` (a count, a held `Cluster` or an `OnCluster`) as (the cluster the caller holds, or
    None; the worker count, or None for all), checked before anything is loaded."""
    held = None
    if isinstance(workers, Cluster):
      workers = OnCluster(workers)
    if isinstance(workers, OnCluster):
      if address is not None:
        raise ValueError("pass either a held Cluster as workers or an address to join, not both")
      held, workers = workers.cluster, workers.workers
    check_workers(workers)
    return held, workers

  @staticmethod
  def start(workers: int | None, address: str | None, device, nrec: int, nstart: int) -> Cluster:
    """The Ray cluster of a sharded identification, after the checks that need no Ray (`identify` closes it)."""
    if workers is not None:
      check_shards(workers, nrec, nstart)
    elif address is None:
      workers = min(local_cores(), nrec * nstart)
    kind = None if device is None else ("cpu" if str(device).startswith("cpu") else "cuda")
    return Cluster(workers, address, device=kind)

  @staticmethod
  def problem(cluster: Cluster, mjm, recs, params, *, workers: int | None, **kwargs) -> ShardedProblem:
    """`Problem`'s stand-in over `cluster`'s workers (the arguments as `ShardedProblem`'s)."""
    return ShardedProblem(cluster, mjm, recs, params, workers=workers, **kwargs)


def identify_on(cluster: Cluster, model, data, params, *, workers: int | None = None, **kwargs):
  """`Cluster.identify`: `diffsim.sysid.identify` on the first `workers` of `cluster`'s workers."""
  from ..sysid.identify import identify

  return identify(model, data, params, workers=OnCluster(cluster, workers), **kwargs)


register_sharding("identify", IdentifySharding)
register_job("identify", identify_on)


# -- the worker side --------------------------------------------------------------------------------


def _problem(worker: Worker, spec, recs, nstart: int):
  from ..sysid.problem import Problem

  def build():
    kw = dict(worker.resolve(spec))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # the driver built the same worlds and warned already
      # fresh Params: each problem binds its own (the shipped ones serve every shard this worker builds)
      params = copy.deepcopy(kw.pop("params"))
      return Problem(kw.pop("model"), worker.resolve(recs), params, weights=None, normalize=False,
                     device=worker.device, nstart=nstart, **kw)

  return worker.cached(("sysid", spec.token, recs.token, nstart), build)


def _linearize(worker: Worker, spec, recs, nstart: int, x: np.ndarray, jacobian: str) -> dict:
  prob = _problem(worker, spec, recs, nstart)
  ne = prob.linearize(x, jacobian=jacobian)
  num, den = prob.autocorrelation
  return {"cost": ne.cost, "Htt": ne.Htt, "gt": ne.gt, "changes": ne.changes, "constrained": ne.constrained,
          "num": num, "den": den, "Htn": ne.Htn,
          "Hnn": ne.Hnn, "gn": ne.gn, "nlane": prob.rollout.nlane}


def _gradient(worker: Worker, spec, recs, nstart: int, theta: np.ndarray) -> dict:
  prob = _problem(worker, spec, recs, nstart)
  prob.buffers.theta.assign(theta)
  cost = prob.buffers.cost  # the raw sums (a shard's inf stays inf in the total)
  prob.gradient()
  return {"cost": cost.numpy().astype(np.float64), "grad": prob.buffers.theta_grad.numpy().astype(np.float64)}


def _samples(worker: Worker, spec, recs, nstart: int, start: int | None) -> list:
  return [] if start is None else _problem(worker, spec, recs, nstart).samples(start)


def _info(worker: Worker, spec, recs, nstart: int, directional: bool) -> dict:
  prob = _problem(worker, spec, recs, nstart)
  return {"nlane": (prob.forward_mode if directional else prob.rollout).nlane}  # MJWarp worlds per world
