"""``python3 -m sparkbench.report render RUN_DIR ...``."""

import sys

from .cli import main

sys.exit(main())
