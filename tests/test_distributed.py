"""diffsim.distributed on a local Ray of 2 workers: the sharded results equal one process's, and faults
raise clear errors (Ray missing, bad worker counts, an unreachable address, a worker killed mid-run)."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import diffsim  # noqa: E402
import diffsim.distributed as dd  # noqa: E402
from diffsim.losses import CtrlCost, QposCost, QvelCost  # noqa: E402

CARTPOLE = diffsim.asset_path("cartpole.xml")
NWORLD, NSTEP = 12, 30


def swingup(worlds, device, horizon=30):
  """The cart-pole swing-up of tutorial 02, shortened, for the worlds `worlds` (each its own start)."""
  scene = diffsim.Scene.from_xml(CARTPOLE, nworld=len(worlds), device=device)
  qpos0 = np.zeros((len(worlds), 2))
  qpos0[:, 1] = 0.02 * np.asarray(worlds, dtype=float)  # rad: world w starts at its own angle
  cost = [QposCost([0.0, np.pi], running=0.0, terminal=[1.0, 100.0]), QvelCost(0.0, terminal=[1.0, 10.0]),
          CtrlCost(0.1)]
  return diffsim.TrajectoryProblem(scene, cost, horizon=horizon, qpos0=qpos0)


COST = [QposCost([0.0, np.pi], running=1.0, terminal=[1.0, 100.0]), QvelCost(0.0, running=0.1), CtrlCost(0.1)]


def inputs(nworld=NWORLD, nstep=NSTEP):
  rng = np.random.default_rng(0)
  ctrl = rng.uniform(-1.0, 1.0, (nworld, nstep, 1)).astype(np.float32)
  qpos0 = rng.uniform(-0.2, 0.2, (nworld, 2)).astype(np.float32)
  qvel0 = rng.uniform(-0.5, 0.5, (nworld, 2)).astype(np.float32)
  return ctrl, qpos0, qvel0


def single_process(ctrl, qpos0, qvel0):
  """The same rollout, costs and gradients in this process, all worlds at once."""
  import warp as wp

  nworld, nstep, _ = ctrl.shape
  scene = diffsim.Scene.from_xml(CARTPOLE, nworld=nworld, device="cpu")
  u = wp.array(ctrl, dtype=float, device="cpu", requires_grad=True)
  q = wp.array(qpos0, dtype=float, device="cpu", requires_grad=True)
  v = wp.array(qvel0, dtype=float, device="cpu", requires_grad=True)
  cost = diffsim.losses.Cost(scene, nstep, COST)
  out = wp.zeros(nworld, dtype=float, device="cpu", requires_grad=True)
  tape = wp.Tape()
  with tape:
    traj = diffsim.rollout(scene, u, qpos0=q, qvel0=v)
    cost.evaluate(traj, out)
  tape.backward(grads={out: wp.ones(nworld, dtype=float, device="cpu")})
  return traj.numpy(), out.numpy().copy(), {"ctrl": u.grad.numpy().copy(), "qpos0": q.grad.numpy().copy(),
                                            "qvel0": v.grad.numpy().copy()}


@pytest.fixture(scope="module")
def cluster():
  with dd.Cluster(2, timeout=120.0) as c:
    yield c


def test_import_diffsim_does_not_import_ray():
  code = "import sys, diffsim; diffsim.distributed; print('ray' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "False"


def test_rollout_and_gradients_equal_one_process(cluster):
  ctrl, qpos0, qvel0 = inputs()
  traj, cost, grad = single_process(ctrl, qpos0, qvel0)
  res = cluster.rollout(CARTPOLE, ctrl, qpos0=qpos0, qvel0=qvel0, cost=COST)
  # worlds are independent: the shards run the same kernels on the same inputs, so on the CPU (whose
  # kernels run sequentially) the numbers are bitwise those of one process
  for k in traj:
    np.testing.assert_array_equal(res.trajectory[k], traj[k], err_msg=k)
  np.testing.assert_array_equal(res.cost, cost)
  assert set(res.grad) == {"ctrl", "qpos0", "qvel0"}
  for k in grad:
    np.testing.assert_array_equal(res.grad[k], grad[k], err_msg=k)
  # what crossed: the inputs out, costs, gradients and trajectory back; the model once per worker
  t = res.traffic
  assert t.workers == 2 and t.received > sum(a.nbytes for a in (*traj.values(), *grad.values()))
  again = cluster.rollout(CARTPOLE, ctrl, qpos0=qpos0, qvel0=qvel0, cost=COST, trajectory=False)
  assert again.trajectory is None and np.array_equal(again.grad["ctrl"], res.grad["ctrl"])
  assert again.traffic.received < t.received / 3 and again.traffic.sent <= t.sent
  # forward only: the trajectory without a cost
  fwd = cluster.rollout(CARTPOLE, ctrl, qpos0=qpos0, qvel0=qvel0)
  assert fwd.cost is None and fwd.grad is None
  np.testing.assert_array_equal(fwd.trajectory["qpos"], traj["qpos"])


@pytest.mark.parametrize("method,maxiter,options", [("ilqr", 6, {}), ("adam", 40, {"lr": 0.15})])
def test_trajopt_equals_one_process(cluster, method, maxiter, options):
  nworld = 4
  ref = diffsim.optimize_trajectory(swingup(range(nworld), "cpu"), method, maxiter=maxiter, progress=False,
                                    options=options)
  res = cluster.optimize_trajectory(swingup, nworld, method, maxiter=maxiter, options=options)
  assert isinstance(res, diffsim.TrajectoryResult) and res.method == method
  # iLQR and Adam work per world: each shard's solver takes the same steps as one process (bitwise on the CPU)
  assert res.nit == ref.nit and res.history.shape == ref.history.shape == (ref.nit + 1, nworld)
  np.testing.assert_array_equal(res.x, ref.x)
  np.testing.assert_array_equal(res.fun, ref.fun)
  np.testing.assert_array_equal(res.history, ref.history)
  np.testing.assert_array_equal(res.success, ref.success)
  mine, theirs = res.trajectory.numpy(), ref.trajectory.numpy()
  for k in theirs:
    np.testing.assert_array_equal(mine[k], theirs[k], err_msg=k)
  assert res.trajectory.dt == ref.trajectory.dt and np.array_equal(res.ctrl.numpy(), res.x)
  assert "of 4 worlds on 2 workers" in res.message
  # a warm start from the result crosses as controls (nworld, nstep, nu)
  warm = cluster.optimize_trajectory(swingup, nworld, method, maxiter=1, warm_start=res, options=options)
  assert warm.x.shape == res.x.shape


def test_benchmark_runs_tiny(cluster):
  """bench_distributed's gradient job at a tiny size on this cluster (speed itself is never asserted)."""
  from benchmarks import bench_distributed

  row = bench_distributed.bench_gradient(cluster, 4, 3, repeats=2)
  assert row["grad_equal_local"] and len(row["speedup_runs"]) == 2 and row["speedup"] > 0
  # the controls and initial states out, the costs and gradients back: their bytes and a little pickling
  assert row["input_bytes"] <= row["bytes_sent"] < row["input_bytes"] + 4096
  assert row["bytes_received"] < row["bytes_received_with_trajectory"]
  assert "| gradient | 4 | 3 |" in bench_distributed.table([row])


def test_ray_missing_names_the_extra(monkeypatch):
  monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
  with pytest.raises(ImportError, match=r'pip install "diffsim\[ray\]"'):
    dd.Cluster(2)
  with pytest.raises(ImportError, match=r'pip install "diffsim\[ray\]"'):
    dd.rollout(CARTPOLE, np.zeros((2, 3, 1)), workers=2)


def test_bad_worker_counts(cluster):
  for bad in (0, -1, 1.5, True):
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
      dd.Cluster(bad)
  ctrl = np.zeros((2, 3, 1), np.float32)
  with pytest.raises(ValueError, match="workers must be an integer >= 1"):
    dd.rollout(CARTPOLE, ctrl, workers=0)
  # checked before a cluster starts
  with pytest.raises(ValueError, match="3 workers for 2 worlds.*workers <= 2"):
    dd.rollout(CARTPOLE, ctrl, workers=3)
  with pytest.raises(ValueError, match="3 workers for 2 worlds"):
    dd.optimize_trajectory(swingup, 2, workers=3)
  with pytest.raises(ValueError, match="2 workers for 1 worlds"):
    cluster.rollout(CARTPOLE, ctrl[:1])
  with pytest.raises(ValueError, match=r"ctrl must have shape \(nworld, nstep, nu\)"):
    cluster.rollout(CARTPOLE, np.zeros((4, 3)))
  with pytest.raises(ValueError, match="grad=True needs a cost"):
    cluster.rollout(CARTPOLE, ctrl, grad=True)
  # an error raised on a worker arrives as its own type, the shard named
  with pytest.raises(ValueError, match="nu=1"):
    cluster.rollout(CARTPOLE, np.zeros((2, 3, 2), np.float32))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_unreachable_address_fails_within_timeout():
  t = time.perf_counter()
  with pytest.raises(ConnectionError, match="no Ray cluster at '127.0.0.1:.*ray start --head"):
    dd.Cluster(2, address=f"127.0.0.1:{_free_port()}", timeout=5.0)
  assert time.perf_counter() - t < 5.0
  # something listens, but it is not a Ray head: an error after the timeout, not a hang
  with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    t = time.perf_counter()
    with pytest.raises(ConnectionError, match="no Ray head answered within 3 s"):
      dd.Cluster(2, address=f"127.0.0.1:{server.getsockname()[1]}", timeout=3.0)
    assert time.perf_counter() - t < 10.0


def test_worker_killed_mid_run_raises_then_recovers(cluster):
  ctrl, qpos0, qvel0 = inputs()
  before = cluster.rollout(CARTPOLE, ctrl, qpos0=qpos0, qvel0=qvel0, cost=COST)
  pid = cluster.worker_info[0]["pid"]
  killer = threading.Timer(3.0, os.kill, (pid, signal.SIGKILL))
  killer.start()
  t = time.perf_counter()
  try:
    with pytest.raises(dd.WorkerError, match=rf"worker 0 \(pid {pid}.*died during optimize_trajectory.*worlds 0-0"):
      # a solve that would run for minutes
      cluster.optimize_trajectory(swingup, 2, "adam", maxiter=10**6, ftol=0.0)
  finally:
    killer.cancel()
  assert time.perf_counter() - t < 60.0  # the other shard was stopped, not waited for
  # the workers were replaced: the next call rebuilds and gives the same numbers
  after = cluster.rollout(CARTPOLE, ctrl, qpos0=qpos0, qvel0=qvel0, cost=COST)
  assert cluster.worker_info[0]["pid"] != pid
  np.testing.assert_array_equal(after.grad["ctrl"], before.grad["ctrl"])
  # with a retry, a shard lost with its worker is rerun on the replacement: the same result
  cluster.retries = 1
  try:
    pid = cluster.worker_info[1]["pid"]
    os.kill(pid, signal.SIGKILL)
    retried = cluster.rollout(CARTPOLE, ctrl, qpos0=qpos0, qvel0=qvel0, cost=COST)
  finally:
    cluster.retries = 0
  assert cluster.worker_info[1]["pid"] != pid
  np.testing.assert_array_equal(retried.grad["ctrl"], before.grad["ctrl"])
  np.testing.assert_array_equal(retried.trajectory["qpos"], before.trajectory["qpos"])


_SHUTDOWN = textwrap.dedent("""
  import os, sys
  import ray
  import diffsim.distributed as dd

  def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
      try:
        with open(f"/proc/{d}/stat") as f:
          kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
      except (OSError, ValueError, IndexError):
        pass
    out, todo = [], [pid]
    while todo:
      for k in kids.get(todo.pop(), []):
        out.append(k)
        todo.append(k)
    return out

  def alive(pid):
    try:
      with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
      return False

  with dd.Cluster(2) as cluster:
    pids = descendants(os.getpid())
    workers = [w["pid"] for w in cluster.worker_info]
  assert set(workers) <= set(pids), (workers, pids)
  left = [p for p in pids + descendants(os.getpid()) if alive(p)]
  print("initialized", ray.is_initialized(), "left", left, "ray processes", len(pids))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_close_leaves_no_processes():
  out = subprocess.run([sys.executable, "-c", _SHUTDOWN], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-3000:]
  line = out.stdout.strip().splitlines()[-1]
  assert line.startswith("initialized False left []"), line


_JOIN = textwrap.dedent("""
  import os, shutil, signal, socket, subprocess, sys, tempfile, time
  import numpy as np
  import ray
  import diffsim
  import diffsim.distributed as dd

  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  # its own temp dir: `ray start` records its address there, not in /tmp/ray where a plain ray.init() would find it
  tmp = tempfile.mkdtemp(prefix="ray")
  ray_cli = [sys.executable, "-m", "ray.scripts.scripts"]  # `ray`, whether or not its script is on PATH
  head = subprocess.Popen(ray_cli + ["start", "--head", "--block", f"--port={port}", "--num-cpus=2", f"--temp-dir={tmp}",
                                     "--include-dashboard=false", "--disable-usage-stats"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
  try:
    address = f"127.0.0.1:{port}"
    for _ in range(120):
      try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        break
      except OSError:
        time.sleep(0.25)
    ctrl = np.zeros((3, 4, 1), np.float32)
    out = dd.rollout(diffsim.asset_path("cartpole.xml"), ctrl, address=address, workers=2, timeout=60.0)
    assert out.trajectory["qpos"].shape == (3, 5, 2)
    assert not ray.is_initialized() and head.poll() is None  # disconnected; the cluster runs on
    with dd.Cluster(address=address, timeout=60.0) as cluster:  # default: one worker per CPU of the cluster
      print("joined again", cluster.workers, cluster.device)
  finally:
    head.send_signal(signal.SIGTERM)  # `ray start --block` stops the head's processes
    try:
      head.wait(60)
    except subprocess.TimeoutExpired:
      os.killpg(head.pid, signal.SIGKILL)
    shutil.rmtree(tmp, ignore_errors=True)
""")


def test_join_a_running_cluster_and_leave_it_running():
  env = {**os.environ, "RAY_AUTH_MODE": "disabled"}  # no token to share between head and driver here
  out = subprocess.run([sys.executable, "-c", _JOIN], capture_output=True, text=True, timeout=240, env=env)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "joined again 2 cpu" in out.stdout


# -- system identification: the recordings split between the workers, the normal equations gathered ------------

import models  # noqa: E402  (tests/models.py)

PENDULUM = models.PENDULUM
PENDULUM_TRUTH = PENDULUM.replace('mass="0.5"', 'mass="0.6"').replace('damping="0.05"', 'damping="0.08"')
SYSID_PARAMS = ["body_mass:pole", "dof_damping:hinge"]


@pytest.fixture(scope="module")
def recordings():
  """Four pendulum recordings of different lengths, rates and excitations (made with MuJoCo C)."""
  def ctrl(n, dt, scale, phase):
    t = np.arange(n) * dt
    return scale * (0.8 * np.sin(2 * np.pi * 0.7 * t + phase) + 0.5 * np.sin(2 * np.pi * 1.9 * t + 0.3))[:, None]

  sim = diffsim.data.simulate
  return [sim(PENDULUM_TRUTH, ctrl(61, 0.01, 1.0, 0.0), qpos0=[0.3]),
          sim(PENDULUM_TRUTH, ctrl(41, 0.02, 0.6, 2.0), qpos0=[-0.5], substeps=2, record=("qpos",)),
          sim(PENDULUM_TRUTH, ctrl(51, 0.01, 0.8, 1.0), qpos0=[0.1]),
          sim(PENDULUM_TRUTH, ctrl(31, 0.02, 1.2, 0.5), qpos0=[0.2], substeps=2, record=("qpos",))]


# LM with multiple shooting, every segment's initial velocity solved for (a nuisance block per world:
# the blocks of both shards concatenated), two starts; and Adam (gathered gradients)
SYSID_CASES = {"lm": dict(maxiter=8, starts=2, seed=1, shooting=20, fit_qvel0=True),
               "adam": dict(method="adam", maxiter=6, options={"lr": 0.05})}


@pytest.mark.filterwarnings("ignore::diffsim.sysid.IdentifiabilityWarning")  # Adam's few iterations
@pytest.mark.parametrize("case", list(SYSID_CASES))
def test_sysid_equals_one_process(cluster, recordings, case):
  kw = dict(device="cpu", progress=False, **SYSID_CASES[case])
  one = diffsim.sysid.identify(PENDULUM, recordings, SYSID_PARAMS, **kw)
  two = cluster.identify(PENDULUM, recordings, SYSID_PARAMS, **kw)
  # Each world's rollout is the same float32 computation on a worker; only the order of the sums
  # over worlds differs. LM sums the blocks in float64 on the host: x and fun to float32's
  # resolution (2^-23 ~ 1.2e-7, with room for the solves). Adam's cost and gradient are float32
  # sums on the device (atomic adds over ~700 residuals), which the split regroups: ~1e-6 per
  # iteration, carried along by the steps: 1e-4. std: its Jacobian-disagreement term is a step
  # solved from J^T r at the minimum, a sum of float32-noise residuals that cancel, so the order of
  # the sums moves it by ~1e-5 relative: 1e-3.
  rel = 1e-6 if case == "lm" else 1e-4
  assert two.nit == one.nit and two.nfev == one.nfev and two.success == one.success
  for k in SYSID_PARAMS:
    assert two.x[k] == pytest.approx(one.x[k], rel=rel)
    assert two.std[k] == pytest.approx(one.std[k], rel=1e-3)
  assert two.fun == pytest.approx(one.fun, rel=rel)
  assert two.history["fun"] == pytest.approx(one.history["fun"], rel=rel)
  assert two.sim_worlds == one.sim_worlds
  np.testing.assert_allclose(np.concatenate(two.initial_qvel), np.concatenate(one.initial_qvel), rtol=1e-5,
                             atol=1e-7)
  for a, b in zip(two.signals.after, one.signals.after):  # the simulated signals, per recording
    for kind in b:
      np.testing.assert_allclose(a[kind], b[kind], rtol=1e-5, atol=1e-6)


def test_shard_grid_splits_recordings_first_then_starts():
  from diffsim.distributed.sysid import shard_grid

  assert shard_grid(2, 64, 1) == ([range(0, 1)], [range(0, 32), range(32, 64)])
  assert shard_grid(2, 1, 4) == ([range(0, 2), range(2, 4)], [range(0, 1)])
  assert shard_grid(4, 2, 3) == ([range(0, 1), range(1, 3)], [range(0, 1), range(1, 2)])
  assert shard_grid(3, 2, 3) == ([range(0, 3)], [range(0, 1), range(1, 2)])  # 2 x 1 shards: one worker idle


def test_sysid_starts_split_between_workers(cluster, recordings):
  """One recording, two starts, two workers: each worker holds one start (a shard of the start grid)."""
  kw = dict(device="cpu", progress=False, maxiter=8, starts=2, seed=3)
  one = diffsim.sysid.identify(PENDULUM, recordings[:1], SYSID_PARAMS, **kw)
  two = cluster.identify(PENDULUM, recordings[:1], SYSID_PARAMS, **kw)
  assert cluster.last_traffic.workers == 2
  assert two.nit == one.nit and two.nfev == one.nfev
  for k in SYSID_PARAMS:
    assert two.x[k] == pytest.approx(one.x[k], rel=1e-6)
  np.testing.assert_allclose(two.history["fun"], one.history["fun"], rtol=1e-6)
  np.testing.assert_allclose(two.signals.after[0]["qpos"], one.signals.after[0]["qpos"], rtol=1e-5, atol=1e-6)


def test_sysid_bytes_per_iteration(cluster, recordings):
  """Only the normal-equation blocks cross per LM iteration, not the residuals or their Jacobian."""
  from diffsim.distributed.sysid import ShardedProblem
  from diffsim.params import Param
  from diffsim.sysid.worlds import as_recordings

  mjm = diffsim.scene.load_mjmodel(PENDULUM)
  recs = as_recordings(recordings, mjm, False, None)
  params = [Param("body_mass", "pole"), Param("dof_damping", "hinge")]
  # shooting=25: a problem no other test of this module's cluster built, so the first call ships it
  prob = ShardedProblem(cluster, mjm, recs, params, weights=None, normalize=True, shooting=25, nstart=1, central=False,
                        eps=None, fit_qvel0=True)
  x = prob.unknowns.initial(np.array([[0.5, 0.05]]))
  prob.linearize(x)  # the first call ships the problem and the recordings
  ne = prob.linearize(x)
  blocks = sum(a.nbytes for a in (ne.Htt, ne.Htn, ne.Hnn, ne.gt, ne.gn)) + x.nbytes
  sent, received = prob.traffic["linearize"][-1].sent, prob.traffic["linearize"][-1].received
  assert blocks < sent + received < blocks + 8192, (blocks, sent, received)
  assert prob.bytes_per_iteration() > sent + received  # the first call's shipment counted too


def test_sysid_cli_workers(tmp_path, recordings):
  """`diffsim sysid --workers 2` in its own process (a local Ray of its own) equals the one-process run."""
  (tmp_path / "pendulum.xml").write_text(PENDULUM)
  for i, r in enumerate(recordings[:2]):
    diffsim.data.save_npz(tmp_path / f"run{i}.npz", r)
  out = tmp_path / "out"
  cmd = [sys.executable, "-m", "diffsim.cli", "sysid", str(tmp_path / "pendulum.xml"), str(tmp_path / "run0.npz"),
         str(tmp_path / "run1.npz"), "--param", "body_mass:pole", "--param", "dof_damping:hinge", "--device", "cpu",
         "--maxiter", "15", "--quiet", "--no-plots", "--workers", "2", "--out", str(out)]
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
  p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
  assert p.returncode == 0, p.stderr[-3000:]
  assert p.stdout.startswith("sysid converged"), p.stdout
  got = json.loads((out / "params.json").read_text())
  one = diffsim.sysid.identify(str(tmp_path / "pendulum.xml"), [str(tmp_path / f"run{i}.npz") for i in range(2)],
                               SYSID_PARAMS, device="cpu", maxiter=15, progress=False)
  for k in SYSID_PARAMS:
    assert got[k]["value"] == pytest.approx(one.x[k], rel=1e-6)


def test_sysid_bad_input(cluster, recordings, monkeypatch, capsys):
  from diffsim import cli

  identify = diffsim.sysid.identify
  for bad in (0, -2, 1.5):
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
      identify(PENDULUM, recordings, SYSID_PARAMS, workers=bad)
  with pytest.raises(ValueError, match=r"5 workers for 4 recordings.*workers <= 4"):
    identify(PENDULUM, recordings, SYSID_PARAMS, workers=5)  # before Ray starts
  with pytest.raises(ValueError, match=r"2 workers for 1 recordings x 1 starts.*workers <= 1"):
    cluster.identify(PENDULUM, recordings[:1], SYSID_PARAMS, workers=2)
  with pytest.raises(ValueError, match="workers=3, but the cluster has 2"):
    cluster.identify(PENDULUM, recordings, SYSID_PARAMS, workers=3)
  with pytest.raises(ConnectionError, match="no Ray cluster at"):
    identify(PENDULUM, recordings, SYSID_PARAMS, address=f"127.0.0.1:{_free_port()}")
  monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
  with pytest.raises(ImportError, match=r'pip install "diffsim\[ray\]"'):
    identify(PENDULUM, recordings, SYSID_PARAMS, workers=2)
  # the CLI says the same, with its exit code
  capsys.readouterr()
  assert cli.main(["sysid", "m.xml", "d.npz", "--param", "x", "--workers", "0"]) == 2
  assert "workers must be an integer >= 1" in capsys.readouterr().err
