"""python -m gpuops_run (the same as the gpuops-run console script)."""

import sys

from .cli import main

sys.exit(main())
