"""iLQR on MJWarp rollouts: `solver.py` (the host loop), `cost.py` (the cost's local model),
`backward.py` (the Riccati recursion), `boxqp.py` (box QP and Cholesky), `forward.py` (the
closed-loop line search and its acceptance)."""

from .solver import ILQRSolver as ILQRSolver

__all__ = ["ILQRSolver"]
