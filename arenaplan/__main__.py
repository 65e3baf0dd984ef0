"""`python -m arenaplan` is the same as the `arenaplan` console script."""

import sys

from arenaplan.cli import main

sys.exit(main())
