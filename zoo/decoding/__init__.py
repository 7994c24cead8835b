"""Decoding: sampling (how a token is chosen), the decode loop (``stream``, ``generate``),
beam search (``beams``), stop strings (``stopping``) and the inference engine (``Engine``: the model prepared for decoding; ``layouts``: what
``model.generate`` keeps between calls).

Text in, text out (``zoo.generate_text``) lives a layer above, in ``zoo.pipelines``.
"""

from __future__ import annotations

from zoo.decoding.beams import Beams, beam_search
from zoo.decoding.engine import Engine, Layouts, PreparedLinear, SkippedDropout, layouts
from zoo.decoding.loop import Step, generate, stream
from zoo.decoding.sampling import Sampling, repetition_penalty, top_k, top_p
from zoo.decoding.stopping import StopStrings
from zoo.nn.generation import provide

provide(generate)  # DecoderLM.generate reaches the decode loop through zoo.nn.generation

__all__ = [
    "Beams",
    "Engine",
    "Layouts",
    "PreparedLinear",
    "Sampling",
    "SkippedDropout",
    "Step",
    "StopStrings",
    "beam_search",
    "generate",
    "layouts",
    "repetition_penalty",
    "stream",
    "top_k",
    "top_p",
]
