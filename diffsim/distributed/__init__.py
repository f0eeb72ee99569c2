"""Scale-out with Ray: many worlds over all CPU cores, several GPUs or several machines.

A `Cluster` holds Ray actors that each own one Warp device (one GPU, or one CPU core: Warp runs each
CPU kernel on one thread) and keep what they built between calls. Jobs split the worlds into one
contiguous shard per worker and gather the results in world order, as one process would return them:

  - `rollout`: rollouts, per-world costs and tape gradients (`RolloutResult`);
  - `optimize_trajectory`: each shard runs its own solver (`diffsim.TrajectoryResult`);
  - system identification: `diffsim.sysid.identify(..., workers=n)` (or `cluster.identify(...)`) splits
    the recordings; each iteration gathers the normal equations (`sysid.ShardedProblem`).

Each has a plain form that starts a cluster for one call (`workers=`, `address=`) and a method on a
held cluster, whose workers keep their scenes, buffers and solver graphs:

  with diffsim.distributed.Cluster(workers=2) as cluster:  # a local Ray; address="host:port" joins one
    out = cluster.rollout(diffsim.asset_path("cartpole.xml"), ctrl, cost=[CtrlCost(0.1)])
    out.cost, out.grad["ctrl"]  # (nworld,), (nworld, nstep, nu)

Where things are: `cluster.py` (the actors, sharding, traffic, faults), `rollout.py`, `trajopt.py`,
`sysid.py`. Each job module registers its `Cluster` method (`cluster.register_job`), and `sysid.py`
registers how `identify(workers=...)` shards its problem (`diffsim.sharding`): both when imported, so
that neither the cluster nor sysid imports the modules that build on them.
Needs Ray: `pip install "diffsim[ray]"`; `import diffsim` does not import it.
"""

from .cluster import Cluster as Cluster
from .cluster import Traffic as Traffic
from .cluster import Worker as Worker
from .cluster import WorkerError as WorkerError
from .rollout import RolloutResult as RolloutResult
from .rollout import rollout as rollout
from .sysid import ShardedProblem as ShardedProblem
from .trajopt import optimize_trajectory as optimize_trajectory

__all__ = ["Cluster", "Traffic", "Worker", "WorkerError", "RolloutResult", "rollout", "optimize_trajectory",
           "ShardedProblem"]
