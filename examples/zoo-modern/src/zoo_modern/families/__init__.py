"""zoo-modern's Hugging Face families as tables (``zoo.plugin.Family``), sorted by lineage."""
