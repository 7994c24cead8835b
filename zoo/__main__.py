"""``python -m zoo``: the same as the ``zoo`` command."""

from zoo.cli import run

run()
