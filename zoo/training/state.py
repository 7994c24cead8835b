"""Training state beside each saved version: optimizer moments, step, grad scaler, every
rank's random state and the data cursor, in one safetensors file (no pickle).

``DIR/v0003.safetensors`` is the model (``zoo.save``); ``DIR/v0003.state.safetensors``
its training state. The state is written first, atomically, then the version appears;
so every version a resume finds has its state, unless the state was lost afterwards,
which is an error that says what to do. The optimizer state is the full (unsharded)
state keyed by parameter name, gathered by torch's ``get_optimizer_state_dict`` and put
back by ``set_optimizer_state_dict``, so a state written by N ranks resumes on any
number of ranks with any strategy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor, nn

from zoo._version import __version__
from zoo.checkpoint.hashing import digest
from zoo.checkpoint.store import write_atomically, write_safetensors
from zoo.errors import CheckpointError
from zoo.files import loads

STATE_FORMAT = 1
SUFFIX = ".state.safetensors"


def state_path(version: Path) -> Path:
    """``v0003.state.safetensors`` beside ``v0003.safetensors``."""
    return version.with_name(version.name.removesuffix(".safetensors") + SUFFIX)


def optimizer_tensors(
    model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Tensor], list[dict[str, Any]]]:
    """The full optimizer state as flat tensors ``optim/<param>/<key>`` and its groups
    (learning rate and the like, parameters by name). Collective: every rank calls it."""
    # Imported on use: torch's distributed checkpointing costs ~0.4 s at start-up.
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = cast(dict[str, Any], get_optimizer_state_dict(model, optimizer, options=options))
    if "state" not in full:  # ranks other than 0 get nothing with cpu_offload
        return {}, []
    tensors = {
        f"optim/{name}/{key}": torch.as_tensor(value).detach().cpu().contiguous()
        for name, entry in full["state"].items()
        for key, value in entry.items()
    }
    return tensors, [_jsonable(group) for group in full["param_groups"]]


def load_optimizer(
    model: nn.Module, optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor], groups: list[dict[str, Any]]
) -> None:
    """Put back what ``optimizer_tensors`` returned, sharded as the model now is."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    state: dict[str, dict[str, Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim/"):
            name, _, field = key.removeprefix("optim/").rpartition("/")
            state.setdefault(name, {})[field] = value
    for group in groups:  # JSON turned tuples into lists
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
    try:
        full: Any = {"state": state, "param_groups": groups}
        set_optimizer_state_dict(model, optimizer, full, options=StateDictOptions(full_state_dict=True))
    except (KeyError, RuntimeError, ValueError) as err:
        raise CheckpointError(f"the training state does not fit this model's optimizer: {err}") from err


def _jsonable(group: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.item() if isinstance(v, Tensor) else v) for k, v in group.items()}


@dataclass
class TrainingState:
    """What a resume restores besides the weights."""

    step: int  # optimizer steps done
    tokens: int  # training tokens seen
    settings: dict[str, Any]
    config: str  # the model config's JSON, to refuse resuming another model
    manifest_digest: str | None
    world_size: int
    tensors: dict[str, Tensor]  # optim/..., rng/cpu/<rank>, rng/cuda/<rank>, data/cursor, scaler/...
    groups: list[dict[str, Any]]
    run_id: str | None = None  # the run it belongs to (None: written by an older zoo)
    digest: str | None = None  # its digest, as read (the version saved with it records the same)

    def rng(self, kind: str, rank: int) -> Tensor | None:
        return self.tensors.get(f"rng/{kind}/{rank}")

    def parts(self) -> dict[str, Tensor]:
        """The state of every stateful part (``zoo.training.stateful``), keyed
        ``<part>/<key>``: the file's tensors, and the schedule's from the header."""
        return {**self.tensors, "schedule/step": torch.tensor(self.step), "schedule/tokens": torch.tensor(self.tokens)}

    @classmethod
    def of_parts(
        cls,
        parts: dict[str, Tensor],
        settings: dict[str, Any],
        config: str,
        manifest_digest: str | None,
        world_size: int,
        groups: list[dict[str, Any]],
    ) -> TrainingState:
        """The state to write from ``parts`` (``stateful.collect``): the schedule's step
        and tokens go to the header, every other part's tensors to the file's tensors."""
        tensors = {k: v for k, v in parts.items() if not k.startswith("schedule/")}
        step, tokens = int(parts["schedule/step"]), int(parts["schedule/tokens"])
        return cls(step, tokens, settings, config, manifest_digest, world_size, tensors, groups)


def write_state(path: Path, state: TrainingState) -> str:
    """Write ``state`` to ``path`` atomically, with a digest; returns the digest, which the
    version saved next records (``training.state_digest``), binding the two."""
    header = {
        "zoo.state_format": str(STATE_FORMAT),
        "zoo.version": __version__,
        "step": str(state.step),
        "tokens": str(state.tokens),
        "settings": json.dumps(state.settings, sort_keys=True),
        "config": state.config,
        "manifest_digest": json.dumps(state.manifest_digest),
        "world_size": str(state.world_size),
        "param_groups": json.dumps(state.groups),
    }
    if state.run_id is not None:
        header["run_id"] = state.run_id
    header["zoo.digest"] = digest(header, state.tensors)
    try:
        write_atomically(path, lambda file: write_safetensors(file, state.tensors, header))
    except (OSError, SafetensorError, ValueError) as err:
        raise CheckpointError(f"cannot write the training state {path}: {err}") from err
    return header["zoo.digest"]


def read_state(path: Path) -> TrainingState:
    """The training state at ``path``, verified; an error saying what to do when it is
    missing or damaged."""
    advice = (
        f"resume from an earlier version by moving {path.name.removesuffix(SUFFIX)}.safetensors "
        f"away, or start a new run in another --out folder"
    )
    if not path.is_file():
        raise CheckpointError(f"the training state {path} is missing; {advice}")
    try:
        with safe_open(str(path), framework="pt") as f:
            header = dict(f.metadata() or {})
            tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
        expected = header.pop("zoo.digest", None)
        if header.get("zoo.state_format") != str(STATE_FORMAT) or expected != digest(header, tensors):
            raise CheckpointError(f"the training state {path} is damaged (digest mismatch); {advice}")
        return TrainingState(
            step=int(header["step"]),
            tokens=int(header["tokens"]),
            settings=loads(header["settings"], CheckpointError, f"the training state {path}: settings"),
            config=header["config"],
            manifest_digest=loads(
                header["manifest_digest"], CheckpointError, f"the training state {path}: manifest_digest"
            ),
            world_size=int(header["world_size"]),
            tensors=tensors,
            groups=loads(header["param_groups"], CheckpointError, f"the training state {path}: param_groups"),
            run_id=header.get("run_id"),
            digest=expected,
        )
    except CheckpointError:
        raise
    except (OSError, SafetensorError, KeyError, ValueError) as err:
        raise CheckpointError(f"the training state {path} is damaged ({type(err).__name__}: {err}); {advice}") from err
