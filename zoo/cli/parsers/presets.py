"""The parsers of ``zoo list``, ``components``, ``plugins``, ``info`` and ``compare``
(run by ``zoo.cli.presets``)."""

from __future__ import annotations

from zoo.cli.options import Commands, add_sets
from zoo.nn.kinds import KINDS


def add_parsers(commands: Commands) -> None:
    """Add the parsers of ``zoo list``, ``components``, ``plugins``, ``info`` and ``compare`` to ``commands``."""
    p = commands.add("list", "cmd_list", [commands.json_flag])
    p.add_argument("pattern", nargs="?", default="*", metavar="PATTERN", help="a name or wildcards (default: all)")

    p = commands.add("components", "cmd_components", [commands.json_flag])
    p.add_argument("kind", nargs="?", metavar="KIND", help=f"one of {', '.join(KINDS)} (default: all)")

    commands.add("plugins", "cmd_plugins", [commands.json_flag])

    config_flags = [commands.json_flag, commands.sets, commands.context]
    p = commands.add("info", "cmd_info", config_flags)
    p.add_argument(
        "name",
        metavar="NAME|CHECKPOINT|ID",
        help="a preset, a checkpoint file or folder, a Hugging Face folder, or a hub id",
    )

    p = commands.add("compare", "cmd_compare", config_flags)
    p.add_argument("a", metavar="A", help="a preset or a checkpoint")
    p.add_argument("b", metavar="B", help="a preset or a checkpoint")
    add_sets(p, "set_a", "--set-a", "override a field of A only; repeatable (default: none)")
    add_sets(p, "set_b", "--set-b", "override a field of B only; repeatable (default: none)")
