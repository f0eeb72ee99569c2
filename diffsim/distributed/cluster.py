"""A Ray cluster of diffsim workers: one actor per Warp device, each keeping what it built between calls.

`Cluster(workers)` starts a local Ray with `num_cpus=workers` (or, given `address`, joins a cluster
started with `ray start --head`) and one actor per worker. An actor owns one Warp device: one GPU
(`num_gpus=1`; Ray shows the actor its GPU as `cuda:0`) where the cluster has a GPU per worker, else
one CPU core (Warp runs each CPU kernel on one thread, so one process uses one core).

A job splits the worlds into contiguous shards, one per worker, runs them at once and gathers the
results in world order (`Cluster.map`; the jobs `rollout`, `optimize_trajectory` and sysid's
`ShardedProblem` are built on it).
What crosses between processes is counted (`Traffic`, pickled sizes): each shard's inputs and
results, and, once per worker, the model or factory a job builds from (`Cluster.ship`). The actor
keeps what it built (scene, rollout buffers, a problem with its captured solver graphs) in a small
cache keyed by that object and the shard's worlds, so a repeated call only launches.

Faults: a worker that dies during a call (killed, out of memory, its node lost) raises `WorkerError`
naming it once the call's other shards are stopped; nothing partial is returned. The cluster replaces
the worker (the new one rebuilds on its next call); with `retries=n` a lost shard is rerun on the
replacement instead, up to `n` times per call (the jobs are deterministic: a rerun gives the same
result). An error the job itself raises (a wrong shape, `DivergenceError`) reaches the caller as its
own type, with the shard named.

Extending it with a job: write a module-level function `job(worker, *args)`, which runs on the actor
(`Worker`: `device`, `resolve(shipped)`, `cached(key, build)`) and returns small numpy arrays, and
call `cluster.map(job, [args of shard 0, args of shard 1, ...])`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import subprocess
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..host import local_cores

__all__ = ["Cluster", "Worker", "WorkerError", "Traffic", "Shipped", "shards", "check_workers", "register_job"]

_INSTALL = 'pip install "diffsim[ray]"'
_OBJECTS = 32  # shipped objects an actor keeps (least recently used dropped first)
_BUILT = 4  # built states (scene, buffers, problem) an actor keeps
_GRACE_S = 2.0  # how long a failed call waits for its other shards before stopping them
# The jobs a held cluster runs as methods (`Cluster.rollout`, ...): their modules build on this one and register
# them when imported, which importing this module (its package) does first.
_JOBS: dict[str, Callable] = {}


class WorkerError(RuntimeError):
  """A worker process died during a call, or workers did not start; no partial result is returned."""


class UnshippedError(LookupError):
  """A worker was sent a `Shipped` reference to an object it no longer holds (the driver resends it)."""


def import_ray():
  """`ray`, or an ImportError that names the extra to install."""
  try:
    import ray
  except ImportError as e:
    raise ImportError(f"diffsim.distributed needs Ray: {_INSTALL} (Ray 2.60.0); {e}") from None
  return ray


def check_workers(workers, nworld: int | None = None) -> int | None:
  """`workers` as an int (None passes), or a ValueError that says what is allowed."""
  if workers is None:
    return None
  if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
    raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
  if nworld is not None and workers > nworld:
    raise ValueError(f"{workers} workers for {nworld} worlds: every worker needs at least one world; pass "
                     f"workers <= {nworld}")
  return workers


def register_job(name: str, run: Callable) -> None:
  """Makes `run(cluster, *args, **kwargs)` the body of the method `Cluster.<name>` (`rollout`,
  `optimize_trajectory`, `identify`)."""
  _JOBS[name] = run


def shards(nworld: int, nshard: int) -> list[range]:
  """`nshard` contiguous ranges of world indices covering `range(nworld)`, sizes differing by at most 1."""
  bounds = [nworld * i // nshard for i in range(nshard + 1)]
  return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


@dataclass(frozen=True)
class Shipped:
  """An object sent to each worker once: later calls send only its `token` (a hash of its pickle)."""

  token: str
  payload: bytes | None
  what: str = "object"


@dataclass
class Traffic:
  """Bytes that crossed between the driver and the workers in one call, all workers together: the
  pickled sizes of what went out (job, arguments, shipped objects not yet on a worker) and of what came
  back. Ray's own control messages (task specs, heartbeats) are not counted.

  Attributes:
    sent: bytes to the workers.
    received: bytes back.
    workers: workers the call ran on.
  """

  sent: int = 0
  received: int = 0
  workers: int = 0

  @property
  def total(self) -> int:
    return self.sent + self.received


class Worker:
  """The actor side: one Warp device, the objects shipped to it and what jobs built from them.

  Ray runs each in its own process (`ray.remote(Worker)`); jobs receive it as their first argument.

  Attributes:
    device: `"cpu"` or `"cuda:0"` (Ray shows a GPU actor its one GPU as device 0).
  """

  def __init__(self, device: str, sys_path: Sequence[str] = ()):
    # a local cluster's workers import what the driver imports (its script's folder, pytest's paths)
    for p in sys_path:
      if p not in sys.path and os.path.isdir(p):
        sys.path.append(p)
    import warp as wp

    wp.config.log_level = wp.LOG_WARNING
    wp.init()
    self.device = device
    self._objects: OrderedDict[str, Any] = OrderedDict()
    self._built: OrderedDict[Any, Any] = OrderedDict()

  def info(self) -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "device": self.device}

  def run(self, job: Callable, args: tuple):
    return job(self, *args)

  def resolve(self, shipped: Shipped):
    """The object behind `shipped` (unpickled on its first arrival, kept while recently used)."""
    if shipped.payload is not None:
      from ray import cloudpickle

      try:
        self._objects[shipped.token] = cloudpickle.loads(shipped.payload)
      except (ImportError, AttributeError) as e:
        raise ImportError(f"the {shipped.what} could not be unpickled on the worker ({e}): define it in a module the "
                          f"workers can import; on a remote cluster ship the code with Cluster(runtime_env="
                          f"{{'working_dir': ...}})") from None
      while len(self._objects) > _OBJECTS:
        self._objects.popitem(last=False)
    elif shipped.token not in self._objects:
      raise UnshippedError(shipped.token)
    self._objects.move_to_end(shipped.token)
    return self._objects[shipped.token]

  def cached(self, key, build: Callable[[], Any]):
    """`build()`, made once per `key` and kept while recently used (the last few keys)."""
    if key in self._built:
      self._built.move_to_end(key)
      return self._built[key]
    while len(self._built) >= _BUILT:
      self._built.popitem(last=False)
    value = self._built[key] = build()
    return value

  def clear(self) -> None:
    self._objects.clear()
    self._built.clear()


def _reason(e: BaseException) -> str:
  """What a Ray error says about why an actor died, without its list of common causes."""
  for line in str(e).splitlines():
    if "The actor is dead because" in line or "Worker exit detail" in line:
      return line.split(" Some common causes")[0].strip()
  return type(e).__name__


def _probe(address: str, timeout: float) -> None:
  """Raises ConnectionError unless a Ray cluster answers at `address` within `timeout` s (ray.init
  itself retries for minutes where nothing answers)."""
  where = address.split("://", 1)[-1]
  fix = ("start one with `ray start --head` (it prints the address to pass) or check the host and port; "
         "address=None starts a local Ray instead")
  if where != "auto":
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
      raise ValueError(f"address must be 'host:port', 'ray://host:port' or 'auto', got {address!r}")
    try:
      socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
      raise ConnectionError(f"no Ray cluster at {address!r}: nothing answers there ({e}); {fix}") from None
  if address.startswith("ray://"):
    return  # a Ray Client server: ray.init connects with its own timeout
  cmd = [sys.executable, "-m", "ray.scripts.scripts", "health-check", "--address", where]
  try:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    raise ConnectionError(f"no Ray cluster at {address!r}: something listens there but no Ray head answered "
                          f"within {timeout:g} s; {fix}") from None
  if out.returncode != 0:
    text = out.stderr or out.stdout
    if "InvalidAuthToken" in text or "AuthenticationError" in text:
      raise ConnectionError(f"the Ray cluster at {address!r} refused this driver's authentication token: set "
                            "RAY_AUTH_MODE=token in the driver's environment, with the cluster's token in "
                            "~/.ray/auth_token or RAY_AUTH_TOKEN (or start the cluster with RAY_AUTH_MODE=disabled on "
                            "a private network)")
    tail = text.strip().splitlines()[-1:] or [""]
    raise ConnectionError(f"no Ray cluster at {address!r} ({tail[0]}); {fix}")


class Cluster:
  """Ray workers, one Warp device each; a context manager.

  Args:
    workers: actors to start (>= 1). Default: one per CPU core this process may use (local), or one
      per GPU (or CPU) of the cluster at `address`.
    address: `None` starts a new local Ray with `num_cpus=workers` (no dashboard, worker logs not
      forwarded; a cluster `ray start` runs on this machine is not joined) and shuts it down on
      `close()`; `"host:port"` (or `"ray://host:port"`, or `"auto"`: `RAY_ADDRESS` or the cluster
      `ray start` last started here) joins a running cluster (`ray start --head` on the head node,
      `ray start --address=...` on the others), which `close()` leaves running. In a process where
      Ray is already initialized, `None` uses that instance and leaves it running.
    device: `"cuda"`: one GPU per worker (an error where the cluster has fewer GPUs than workers);
      `"cpu"`: one CPU core per worker; `None`: cuda where the cluster has a GPU per worker, else cpu.
    timeout: seconds to wait for the cluster to answer and for each worker to start.
    retries: times a shard lost with its worker is rerun on a replacement, per call (0: raise
      `WorkerError`).
    runtime_env: Ray's `runtime_env` for the workers, e.g. `{"working_dir": "."}` to ship the code a
      remote cluster's workers must import (a factory's module).

  Raises:
    ImportError: Ray is not installed (names the extra).
    ValueError: `workers < 1`, more GPU workers than GPUs, more workers than the cluster has CPUs.
    ConnectionError: nothing answers at `address` within `timeout`.
    WorkerError: the workers did not start within `timeout`.

  Attributes:
    workers: number of workers. device: `"cpu"` or `"cuda"`.
    worker_info: per worker, `{"pid", "host", "device"}`.
    last_traffic: `Traffic` of the last call.
  """

  def __init__(self, workers: int | None = None, address: str | None = None, *, device: str | None = None,
               timeout: float = 60.0, retries: int = 0, runtime_env: dict | None = None):
    check_workers(workers)
    if device not in (None, "cpu", "cuda"):
      raise ValueError(f"device must be 'cpu', 'cuda' or None (cuda where there is a GPU per worker), got {device!r}")
    if not timeout > 0:
      raise ValueError(f"timeout must be > 0 s, got {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
      raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
    if address is not None and not isinstance(address, str):
      raise TypeError(f"address must be a string such as '10.0.0.1:6379', got {type(address).__name__}")
    ray = import_ray()
    self._ray = ray
    self.timeout, self.retries = float(timeout), retries
    self.address = address
    self._owns = self._joined = False
    self._closed = False
    self._actors: list = []
    self._processes: list = []
    self.last_traffic = Traffic()
    if address is None:
      if not ray.is_initialized():
        before = {p.pid for p in _children()}
        # "local": a new instance even where `ray start` left a cluster (or its stale address) on this machine
        ray.init(address="local", num_cpus=workers or local_cores(), num_gpus=0 if device == "cpu" else None,
                 include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                 runtime_env=runtime_env)
        self._owns = True
        self._processes = [p for p in _children() if p.pid not in before]  # Ray's own: GCS, raylet, agents
    else:
      _probe(address, self.timeout)
      if ray.is_initialized():
        raise RuntimeError(f"Ray is already initialized in this process; to join {address!r}, call ray.shutdown() "
                           "first, or pass address=None to use the running instance")
      ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, runtime_env=runtime_env)
      self._joined = True
    try:
      res = ray.cluster_resources()
      gpus, cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
      if device is None:
        device = "cuda" if gpus >= max(workers or 1, 1) else "cpu"
      if workers is None:
        workers = gpus if device == "cuda" else cpus
      if device == "cuda" and gpus < workers:
        raise ValueError(f"device='cuda' needs one GPU per worker: {workers} workers, the cluster has {gpus} GPUs; "
                         f"pass workers <= {gpus} or device='cpu'")
      if cpus < workers:
        raise ValueError(f"{workers} workers need {workers} CPUs; the cluster has {cpus}: pass workers <= {cpus}")
      self.workers, self.device = workers, device
      self._seen: list[OrderedDict] = [OrderedDict() for _ in range(workers)]
      self._actors = [self._spawn() for _ in range(workers)]
      self.worker_info: list[dict | None] = [None] * workers
      self._wait_ready(range(workers))
    except BaseException:
      self.close()
      raise

  # -- life cycle ---------------------------------------------------------------------------------

  def _spawn(self):
    ray = self._ray
    cuda = self.device == "cuda"
    actor = ray.remote(Worker).options(num_cpus=1, num_gpus=1 if cuda else 0, max_restarts=0,
                                       scheduling_strategy="SPREAD")
    return actor.remote("cuda:0" if cuda else "cpu", [p or os.getcwd() for p in sys.path])

  def _wait_ready(self, slots) -> None:
    slots = [i for i in slots if self.worker_info[i] is None]
    if not slots:
      return
    try:
      infos = self._ray.get([self._actors[i].info.remote() for i in slots], timeout=self.timeout)
    except self._ray.exceptions.GetTimeoutError:
      free = self._ray.available_resources()
      raise WorkerError(f"the workers did not start within {self.timeout:g} s (free: {free.get('CPU', 0):g} CPUs, "
                        f"{free.get('GPU', 0):g} GPUs; each worker needs 1 CPU{' and 1 GPU' * (self.device == 'cuda')})"
                        "; pass fewer workers or a longer timeout") from None
    except self._ray.exceptions.RayActorError as e:
      raise WorkerError(f"a worker died while starting: {_reason(e)}") from None
    for i, info in zip(slots, infos):
      self.worker_info[i] = info

  def _replace(self, i: int) -> None:
    """A new actor in slot `i` (the old one killed if it still runs); it starts in the background."""
    try:
      self._ray.kill(self._actors[i], no_restart=True)
    except Exception:  # already gone
      pass
    self._actors[i] = self._spawn()
    self._seen[i].clear()
    self.worker_info[i] = None

  def describe(self, i: int) -> str:
    info = self.worker_info[i] if i < len(self.worker_info) else None
    return f"worker {i}" + (f" (pid {info['pid']} on {info['host']}, {info['device']})" if info else "")

  def close(self) -> None:
    """Stops the workers; shuts down the Ray this cluster started (waiting until its processes have
    exited) or disconnects from the one it joined. Idempotent."""
    if self._closed:
      return
    self._closed = True
    ray = self._ray
    if not ray.is_initialized():
      return
    for a in self._actors:
      try:
        ray.kill(a, no_restart=True)
      except Exception:
        pass
    self._actors = []
    if self._owns:
      procs = self._processes + [c for p in self._processes for c in _children(p)]  # and their workers
      ray.shutdown()
      _wait_gone(procs, timeout=10.0)
    elif self._joined:
      ray.shutdown()  # disconnects this driver; the cluster keeps running

  def __enter__(self) -> "Cluster":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def __repr__(self) -> str:
    where = "local" if self.address is None else repr(self.address)
    state = "closed" if self._closed else "open"
    workers, device = getattr(self, "workers", None), getattr(self, "device", None)  # None if __init__ failed
    return f"Cluster(workers={workers}, {where}, device={device!r}, {state})"

  # -- jobs ---------------------------------------------------------------------------------------

  def use(self, workers: int | None, nworld: int) -> int:
    """The number of workers a job of `nworld` worlds runs on: `workers` (default: all), checked."""
    n = self.workers if workers is None else check_workers(workers)
    if n > self.workers:
      raise ValueError(f"workers={n}, but the cluster has {self.workers}")
    check_workers(n, nworld)
    return n

  def ship(self, obj, what: str = "object") -> Shipped:
    """`obj` pickled (cloudpickle) to cross once per worker; raises TypeError if it cannot be pickled."""
    from ray import cloudpickle

    try:
      payload = cloudpickle.dumps(obj)
    except Exception as e:
      raise TypeError(f"the {what} cannot be pickled to send to the workers ({type(e).__name__}: {e}); pass a "
                      "module-level function, a functools.partial of one, or a model path") from None
    return Shipped(hashlib.sha1(payload).hexdigest(), payload, what)

  def _for_worker(self, i: int, arg):
    if not isinstance(arg, Shipped):
      return arg
    seen = self._seen[i]
    if arg.token in seen:
      seen.move_to_end(arg.token)
      return Shipped(arg.token, None, arg.what)
    seen[arg.token] = True
    while len(seen) > _OBJECTS:  # the same order and size as the worker's own store
      seen.popitem(last=False)
    return arg

  def map(self, job: Callable, shard_args: Sequence[tuple], *, what: str = "job", labels: Sequence[str] = ()) -> list:
    """Runs `job(worker, *shard_args[i])` on worker `i`, all at once; returns their results in order.

    Args:
      job: a module-level function (it crosses by reference), first argument the `Worker`.
      shard_args: one tuple of arguments per worker used (at most `workers`); `Shipped` arguments
        cross once per worker.
      what: the job's name, for errors. labels: per shard, what it holds (e.g. "worlds 0-7"), for errors.

    Sets `last_traffic`. Raises `WorkerError` when a worker dies and no retry is left (after stopping
    the others); the job's own exceptions as their type, with the shard named.
    """
    if self._closed:
      raise RuntimeError("the cluster is closed; make a new Cluster")
    ray = self._ray
    from ray import cloudpickle

    n = len(shard_args)
    if not 1 <= n <= self.workers:
      raise ValueError(f"{n} shards for {self.workers} workers: pass between 1 and {self.workers}")
    labels = list(labels) or [f"shard {i}" for i in range(n)]
    self._wait_ready(range(n))
    traffic = Traffic(workers=n)
    tries = [0] * n

    def submit(i: int, resend: bool = False):
      if resend:
        self._seen[i].clear()
      args = tuple(self._for_worker(i, a) for a in shard_args[i])
      traffic.sent += len(cloudpickle.dumps((job, args)))
      return self._actors[i].run.remote(job, args)

    pending = {submit(i): i for i in range(n)}
    results: list = [None] * n
    try:
      while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        i = pending.pop(ref)
        try:
          results[i] = ray.get(ref)
        except ray.exceptions.RayActorError as e:
          who = self.describe(i)
          self._replace(i)
          if tries[i] < self.retries:
            tries[i] += 1
            self._wait_ready([i])
            pending[submit(i)] = i
            continue
          raise WorkerError(f"{who} died during {what} ({labels[i]}): {_reason(e)} No partial result is returned; "
                            f"the worker has been replaced: run the call again, or make the Cluster with retries=1 "
                            f"to rerun a lost shard") from None
        except ray.exceptions.RayTaskError as e:
          if isinstance(e.cause, UnshippedError) and not tries[i]:
            tries[i] += 1
            pending[submit(i, resend=True)] = i
            continue
          self._seen[i].clear()  # it may have failed before keeping a shipped object
          if pending:  # let the others finish (they often fail the same way) before stopping them
            ray.wait(list(pending), num_returns=len(pending), timeout=_GRACE_S)
          err = e.as_instanceof_cause()
          if hasattr(err, "add_note"):
            err.add_note(f"raised on {self.describe(i)}, {what} of {labels[i]}")
          raise err from None
        traffic.received += len(cloudpickle.dumps(results[i]))
    except BaseException:
      for ref, i in pending.items():  # stop the shards still running (a sync actor cannot be interrupted)
        if not ray.wait([ref], timeout=0)[0]:
          self._replace(i)
      raise
    self.last_traffic = traffic
    return results

  # the jobs (defined in their modules, which register them: `register_job`; here as methods of a held cluster)

  def rollout(self, model, ctrl, **kwargs):
    """`diffsim.distributed.rollout` on this cluster's workers: the same arguments, less `address`,
    `device` and `timeout`; `workers` runs it on the first `workers` of them (default: all)."""
    return _JOBS["rollout"](self, model, ctrl, **kwargs)

  def optimize_trajectory(self, make_problem, nworld: int, method: str = "ilqr", **kwargs):
    """`diffsim.distributed.optimize_trajectory` on this cluster's workers: the same arguments, less
    `address`, `device` and `timeout`; `workers` runs it on the first `workers` of them (default: all)."""
    return _JOBS["optimize_trajectory"](self, make_problem, nworld, method, **kwargs)

  def identify(self, model, data, params, *, workers: int | None = None, **kwargs):
    """`diffsim.sysid.identify` with its recordings split between this cluster's workers (the same
    arguments, less `address`; `workers`: use the first `workers` of them, default all, at most one
    per recording); the workers keep their problems (scene, buffers, graphs) for the next call."""
    return _JOBS["identify"](self, model, data, params, workers=workers, **kwargs)

  def clear(self) -> None:
    """Drops what the workers built and hold (scenes, problems, shipped objects)."""
    self._ray.get([a.run.remote(_clear, ()) for a in self._actors])
    for seen in self._seen:
      seen.clear()


def _clear(worker: Worker) -> None:
  worker.clear()


def _children(parent=None) -> list:
  """The child processes (recursively) of `parent` (default: this process), where psutil is installed."""
  try:
    import psutil
  except ImportError:
    return []
  try:
    return (parent or psutil.Process()).children(recursive=True)
  except psutil.Error:  # exited meanwhile
    return []


def _wait_gone(procs: list, timeout: float) -> None:
  """Waits until `procs` have exited; kills the ones left after `timeout` s."""
  if not procs:
    return
  import psutil

  _, alive = psutil.wait_procs(procs, timeout=timeout)
  for p in alive:
    try:
      p.kill()
    except psutil.Error:
      pass
  psutil.wait_procs(alive, timeout=2.0)
