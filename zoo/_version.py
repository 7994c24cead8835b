"""The zoo-lm version, in a module of its own so any layer can read it without importing the ``zoo`` facade."""

__version__ = "0.1.0"
