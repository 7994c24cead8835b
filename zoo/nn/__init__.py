"""The model: what a zoo language model is made of, read top to bottom.

- ``model``: ``DecoderLM`` and its ``Block`` (nanoGPT's shape: embed, blocks, final norm,
  head); ``seq2seq``: the 2017 encoder-decoder; ``factory``: a model from a config.
- ``attention``: the math every attention component shares (projections, the context,
  ``attend``, the mask); ``cache``: keys and values kept between decoding steps.
- ``config`` (``ModelConfig``), ``registry`` and ``hookspecs``: which component fills each
  slot, registered through pluggy; ``parts``: the part maker that builds them.
- ``contracts``: what each kind of component promises; ``marks``: what the model reads
  off a component's modules; ``converter``: what a weight converter promises.
- ``inputs``: checks on what a forward pass is given; ``hooks``: the hook points;
  ``generation``: the seam the decode loop (``zoo.decoding``) plugs into.

Plugins import none of these directly: ``zoo.plugin`` is their one door.
"""
