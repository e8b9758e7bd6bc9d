"""``python -m accelbackends``: the same as the ``accelbackends`` command."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
