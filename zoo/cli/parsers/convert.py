"""The parser of ``zoo convert`` (run by ``zoo.cli.convert``)."""

from __future__ import annotations

from zoo.cli.options import Commands, add_out, add_overwrite, add_revision, add_version


def add_parsers(commands: Commands) -> None:
    """Add the parsers of ``zoo convert`` to ``commands``."""
    p = commands.add("convert", "cmd_convert")
    direction = p.add_mutually_exclusive_group(required=True)
    direction.add_argument(
        "--from-hf",
        metavar="DIR|ID",
        help="a Hugging Face folder, or a hub id such as openai-community/gpt2, to import "
        "(see `zoo plugins` for the families)",
    )
    direction.add_argument("--from-nanogpt", metavar="FILE|DIR", help="a nanoGPT ckpt.pt (or its out_dir) to import")
    direction.add_argument("--to-hf", metavar="CHECKPOINT", help="a zoo checkpoint file or folder to export")
    add_version(p, "the --to-hf checkpoint folder")
    p.add_argument(
        "--meta",
        default=None,
        metavar="FILE",
        help="with --from-nanogpt: the meta.pkl of a character-level dataset (data/shakespeare_char/meta.pkl), "
        "carried as the model's tokenizer (default: a meta.pkl beside ckpt.pt, else none)",
    )
    p.add_argument(
        "--architecture",
        default=None,
        metavar="NAME",
        help="with --to-hf: the Hugging Face architecture to write (default: the first installed one that fits)",
    )
    add_revision(p, "with --from-hf ID: a branch, tag or commit (default: main)")
    add_out(p, "where to write: a .safetensors file or a folder of versions (--from-*), a folder (--to-hf)")
    add_overwrite(
        p,
        "replace an existing output whole: the Hugging Face folder (with --to-hf) or the checkpoint file "
        "(default: refuse an output the zoo did not make; a checkpoint folder gets a new version instead)",
    )
    p.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="with --from-hf/--from-nanogpt: import weights holding NaN or infinity (default: refuse them)",
    )
