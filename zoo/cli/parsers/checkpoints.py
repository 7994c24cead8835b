"""The parsers of ``zoo build`` and ``zoo inspect`` (run by ``zoo.cli.checkpoints``)."""

from __future__ import annotations

from zoo.cli.options import Commands, add_out, add_overwrite, add_seed, add_version


def add_parsers(commands: Commands) -> None:
    """Add the parsers of ``zoo build`` and ``zoo inspect`` to ``commands``."""
    p = commands.add("build", "cmd_build", [commands.sets])
    p.add_argument("name", metavar="NAME|CHECKPOINT", help="a preset, or a checkpoint whose config to reuse")
    add_out(p, "a .safetensors file, or a folder to add the next numbered version to")
    add_seed(p, "seed of the weight draws (default 0)")
    add_overwrite(p, "replace an existing checkpoint file -o names (default: refuse it; a folder gets a new version)")
    p.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="user metadata to store in the file; repeatable (default: none)",
    )

    p = commands.add(
        "inspect",
        "cmd_inspect",
        [commands.json_flag],
    )
    p.add_argument("path", metavar="PATH", help="a checkpoint file or a folder of versions")
    add_version(p)
    p.add_argument("--no-verify", action="store_true", help="skip the digest check (default: check it)")
