"""``python3 -m sparkbench.measure`` in the checkout; ``python3 -I measure.pyz`` on a unit."""
import sys

from .cli import main

sys.exit(main())
