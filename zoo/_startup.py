"""The ``zoo`` process's exit without a last walk over torch.

Importing torch leaves about a million long-lived objects, none of them garbage, and the
interpreter's collections, the last ones at exit included, walk all of them: a third of
a second here. The ``zoo`` command owns its process, so once torch and the zoo are
imported it moves what they made into the permanent generation (``gc.freeze``); later
collections and the exit skip those objects, and objects made afterwards (the command's
own module and its work) are collected as always.
A library call never does this: ``import zoo`` leaves the collector alone.
"""

from __future__ import annotations

import gc


def freeze_imports() -> None:
    """Move every object alive now out of the collector's reach: for a process's
    start-up, after its imports, never inside a library call."""
    gc.freeze()
