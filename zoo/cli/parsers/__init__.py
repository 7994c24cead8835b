"""The parsers of ``zoo``'s commands, one module per command module of ``zoo.cli``: each
``add_parsers`` adds its commands' flags and names their handlers (``zoo.cli.<module>``),
importing nothing that imports torch, so that ``zoo CMD -h`` answers without it and loads
no plugin. What a parser lists (the kinds of component, precisions, loggers, figure
formats) comes from the torch-free modules that declare it."""
