"""Decoding: sampling (how a token is chosen), the decode loop (``stream``, ``generate``)
and the inference engine (``Engine``: the model prepared once for decoding).

Text in, text out (``zoo.generate_text``) lives a layer above, in ``zoo.pipelines``.
"""

from __future__ import annotations

from zoo.decoding.engine import Engine, PreparedLinear
from zoo.decoding.loop import Step, generate, stream
from zoo.decoding.sampling import Sampling, repetition_penalty, top_k, top_p

__all__ = [
    "Engine",
    "PreparedLinear",
    "Sampling",
    "Step",
    "generate",
    "repetition_penalty",
    "stream",
    "top_k",
    "top_p",
]
