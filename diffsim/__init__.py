"""diffsim: differentiable MuJoCo Warp rollouts for trajectory optimization and system identification."""

from diffsim import data as data
from diffsim import graph as graph
from diffsim import interop as interop
from diffsim import kernels as kernels
from diffsim import losses as losses
from diffsim import sysid as sysid
from diffsim.gradcheck import check_gradients as check_gradients
from diffsim.params import Param as Param
from diffsim.rollout import DivergenceError as DivergenceError
from diffsim.rollout import GradientWarning as GradientWarning
from diffsim.rollout import Rollout as Rollout
from diffsim.rollout import Trajectory as Trajectory
from diffsim.rollout import check_switches as check_switches
from diffsim.rollout import rollout as rollout
from diffsim.scene import Scene as Scene
from diffsim.scene import SolverSettings as SolverSettings
from diffsim.scene import UnknownNameError as UnknownNameError
from diffsim.scene import asset_path as asset_path
from diffsim.scene import set_deterministic as set_deterministic
from diffsim.step import FiniteDifferenceStep as FiniteDifferenceStep
from diffsim.trajopt import TrajectoryProblem as TrajectoryProblem
from diffsim.trajopt import TrajectoryResult as TrajectoryResult
from diffsim.trajopt import optimize_trajectory as optimize_trajectory

__version__ = "0.1.0"
