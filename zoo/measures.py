"""The measurements ``zoo probe`` shows and plots per layer, by name, torch-free so that
``zoo probe -h`` lists them without importing the probe (``zoo.probe`` takes them)."""

from __future__ import annotations

#: Residual RMS, gradient norms, attention entropy and update ratios, in the order shown.
METRICS = ("residual", "grad", "entropy", "update")
