"""``python -m zoo``: the same as the ``zoo`` command."""

import sys

from zoo.cli import main

sys.exit(main())
