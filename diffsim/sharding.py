"""Where a solver finds what shards its work over workers, without depending on it.

`diffsim.sysid.identify(..., workers=n)` runs its problem on several processes, but system
identification knows nothing of Ray: `diffsim.distributed` builds on sysid (its sharded problem stands
in for sysid's `Problem`) and registers here, when imported, how it shards a solver's work
(`register_sharding("identify", ...)`). `sharding(name)` returns what was registered, importing
`diffsim.distributed` on first use; by name, as `diffsim`'s own lazy attributes are, since an import
statement would make the solver depend on the package that depends on it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["register_sharding", "sharding"]

_PROVIDER = "diffsim.distributed"  # registers its shardings when imported
_SHARDINGS: dict[str, Any] = {}


def register_sharding(name: str, impl: Any) -> None:
  """Makes `impl` how the solver `name` (`"identify"`) shards its work; the last registration wins."""
  _SHARDINGS[name] = impl


def sharding(name: str) -> Any:
  """What shards the solver `name`'s work over workers (importing `diffsim.distributed` on first use).

  Raises:
    ImportError: from the provider's import, or when it registers no `name`.
  """
  if name not in _SHARDINGS:
    importlib.import_module(_PROVIDER)
  if name not in _SHARDINGS:
    raise ImportError(f"{_PROVIDER} registers no way to shard {name!r} over workers")
  return _SHARDINGS[name]
