"""The stateful parts of a training run (torchtitan's ``Stateful``): each has a
``state_dict`` of tensors and a ``load_state_dict``, so saving collects them under their
names and resuming hands each its own entries back; a new piece of state is one part.

The names and keys are the training-state file's (``zoo.training.state``): ``data/cursor``
(the sampler), ``scaler/scale`` and ``scaler/growth_tracker`` (fp16 only),
``rng/cpu/<rank>`` and ``rng/cuda/<rank>``; the schedule's ``step`` and ``tokens`` are
the file header's fields of those names (``TrainingState``), as they always were.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from zoo.training.distributed import World, all_gather
from zoo.training.settings import TrainSettings


@runtime_checkable
class Stateful(Protocol):
    """A part of a run whose state a resume restores."""

    def state_dict(self) -> dict[str, Tensor]: ...

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None: ...


def collect(parts: Mapping[str, Stateful]) -> dict[str, Tensor]:
    """Every part's state, keyed ``<part>/<key>``. Collective where a part is (the RNG)."""
    return {f"{name}/{key}": value for name, part in parts.items() for key, value in part.state_dict().items()}


def restore(parts: Mapping[str, Stateful], tensors: Mapping[str, Tensor]) -> None:
    """Hand each part the entries under its name, in the order of ``parts``."""
    for name, part in parts.items():
        prefix = f"{name}/"
        part.load_state_dict({k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)})


def learning_rate(step: int, settings: TrainSettings) -> float:
    """The learning rate of update ``step`` (0-based): linear warmup, then cosine decay."""
    peak, floor, warmup = settings.lr, settings.lr * settings.min_lr_ratio, settings.warmup
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, settings.steps - warmup)
    return floor + 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))) * (peak - floor)


class Schedule:
    """Where the run is: updates done and tokens seen, and the learning rate of the next
    update (``learning_rate``: warmup, then cosine)."""

    def __init__(self, settings: TrainSettings) -> None:
        self.settings = settings
        self.step = 0
        self.tokens = 0

    @property
    def lr(self) -> float:
        return learning_rate(self.step, self.settings)

    def advance(self) -> None:
        self.step += 1
        self.tokens += self.settings.tokens_per_step

    def state_dict(self) -> dict[str, Tensor]:
        return {"step": torch.tensor(self.step), "tokens": torch.tensor(self.tokens)}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.step, self.tokens = int(state["step"]), int(state["tokens"])


class ScalerState:
    """A grad scaler's state (a disabled scaler has none): its scale and growth tracker."""

    def __init__(self, scaler: torch.amp.GradScaler) -> None:
        self.scaler = scaler

    def state_dict(self) -> dict[str, Tensor]:
        if not self.scaler.is_enabled():
            return {}
        growth = int(self.scaler.state_dict().get("_growth_tracker", 0))
        return {"scale": torch.tensor(self.scaler.get_scale()), "growth_tracker": torch.tensor(growth)}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        if not self.scaler.is_enabled() or "scale" not in state:
            return  # fp32 or bf16 now, or a run saved before it used fp16: a fresh scaler
        self.scaler.load_state_dict(
            {
                **self.scaler.state_dict(),
                "scale": float(state["scale"]),
                "_growth_tracker": int(state["growth_tracker"]),
            }
        )


class RandomState:
    """Every rank's CPU (and CUDA) random state. A rank the saved run did not have gets
    one derived from the seed and the step, so a resume at another world size stays
    deterministic; ``schedule`` must be restored first, for that step."""

    def __init__(self, world: World, seed: int, schedule: Schedule) -> None:
        self.world, self.seed, self.schedule = world, seed, schedule

    def state_dict(self) -> dict[str, Tensor]:
        """Collective: every rank's state, gathered."""
        state = {f"cpu/{rank}": rng for rank, rng in enumerate(all_gather(torch.get_rng_state(), self.world))}
        if self.world.device.type == "cuda":
            gathered = all_gather(torch.cuda.get_rng_state(self.world.device), self.world)
            state.update({f"cuda/{rank}": rng for rank, rng in enumerate(gathered)})
        return state

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        rank = self.world.rank
        cpu = state.get(f"cpu/{rank}")
        if cpu is not None:
            torch.set_rng_state(cpu)
        else:
            torch.manual_seed(self.seed + rank + 1_000_003 * self.schedule.step)
        cuda = state.get(f"cuda/{rank}")
        if cuda is not None and self.world.device.type == "cuda":
            torch.cuda.set_rng_state(cuda, self.world.device)
