"""`python -m diffsim <command> ...`: the `diffsim` command line (`diffsim.cli`) of this checkout."""

import sys

from .cli import main

sys.exit(main())
