#!/usr/bin/env python3
"""Entry point of sparkbench's measurement in the checkout: ``scripts/measure.py --base-url URL --out FILE``
runs the package ``sparkbench/measure`` (as ``python3 -m sparkbench.measure`` does), standard
library only, without installing anything."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sparkbench.measure.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
