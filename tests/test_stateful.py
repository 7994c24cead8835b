"""The stateful parts of a training run (schedule, data cursor, grad scaler, random state):
each round-trips through its state_dict, a save collects them into the training-state file
with the keys it has always had, divergence is its own error, and the old names warn."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import zoo
from zoo.ablate.plan import Job
from zoo.ablate.records import Context
from zoo.ablate.runner import execute
from zoo.nn.config import resolve_config
from zoo.nn.registry import default_registry
from zoo.training import TrainSettings, WindowSampler, World, fit, tokens_data, train
from zoo.training.sampling import TokenSplit
from zoo.training.state import read_state, state_path
from zoo.training.stateful import RandomState, ScalerState, Schedule, collect, learning_rate, restore

SETTINGS = TrainSettings(steps=4, batch_size=4, seq_len=16, lr=3e-3, eval_every=2, eval_batches=1, threads=1)
OVERRIDES = dict(n_layers=1, d_model=32, n_heads=2, vocab_size=64, max_seq_len=16, dropout=0.0)
WORLD = World(0, 1, 0, torch.device("cpu"))


def tokens(n: int = 2000, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 64, (n,), generator=torch.Generator().manual_seed(seed))


def parts(scaler: torch.amp.GradScaler) -> tuple[Schedule, dict[str, object]]:
    schedule = Schedule(SETTINGS)
    sampler = WindowSampler(TokenSplit((tokens(),)), SETTINGS.seq_len, seed=3)
    states = {
        "schedule": schedule,
        "data": sampler,
        "scaler": ScalerState(scaler),
        "rng": RandomState(WORLD, SETTINGS.seed, schedule),
    }
    return schedule, states


def test_every_part_round_trips_through_its_state_dict() -> None:
    scaler = torch.amp.GradScaler("cpu", enabled=True)
    schedule, states = parts(scaler)
    sampler: WindowSampler = states["data"]  # type: ignore[assignment]
    for _ in range(3):
        schedule.advance()
        sampler.draw(4)
    scaler.scale(torch.tensor(1.0))  # lazily creates its scale
    scaler.update(1024.0)
    saved = collect(states)  # type: ignore[arg-type]
    assert sorted(saved) == [
        "data/cursor",
        "rng/cpu/0",
        "scaler/growth_tracker",
        "scaler/scale",
        "schedule/step",
        "schedule/tokens",
    ]
    next_draw, next_random = sampler.draw(4), torch.rand(3)

    fresh_scaler = torch.amp.GradScaler("cpu", enabled=True)
    fresh_schedule, fresh = parts(fresh_scaler)
    torch.manual_seed(12345)  # another random state, which the restore must replace
    restore(fresh, saved)  # type: ignore[arg-type]
    assert (fresh_schedule.step, fresh_schedule.tokens) == (3, 3 * SETTINGS.tokens_per_step)
    assert fresh_schedule.lr == learning_rate(3, SETTINGS)
    assert fresh_scaler.get_scale() == 1024.0
    assert torch.equal(fresh["data"].draw(4), next_draw)  # type: ignore[attr-defined]
    assert torch.equal(torch.rand(3), next_random)


def test_a_disabled_scaler_has_no_state_and_ignores_one() -> None:
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    state = ScalerState(scaler)
    assert state.state_dict() == {}
    state.load_state_dict({"scale": torch.tensor(8.0), "growth_tracker": torch.tensor(2)})  # an fp16 run, now fp32
    assert not scaler.is_enabled() and scaler.state_dict() == {}


def test_a_rank_the_saved_run_lacked_gets_a_random_state_from_seed_and_step() -> None:
    schedule = Schedule(SETTINGS)
    schedule.load_state_dict({"step": torch.tensor(5), "tokens": torch.tensor(0)})
    second = World(1, 2, 1, torch.device("cpu"))
    RandomState(second, 7, schedule).load_state_dict({"cpu/0": torch.get_rng_state()})  # rank 1 was not saved
    drawn = torch.rand(4)
    torch.manual_seed(7 + 1 + 1_000_003 * 5)
    assert torch.equal(drawn, torch.rand(4))


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_the_training_state_file_keeps_its_keys(tmp_path: Path, dtype: str) -> None:
    """The file format of every earlier version: the schedule's step and tokens in the
    header, the other parts' tensors under their old names, so old runs still resume."""
    settings = dataclasses.replace(SETTINGS, dtype=dtype, save_every=2)
    model = zoo.build("gpt2-small", **OVERRIDES)
    data = tokens_data(tokens(), tokens(400, seed=1))
    train(model, data, settings, out=tmp_path)
    path = state_path(tmp_path / "v0001.safetensors")
    with safe_open(str(path), framework="pt") as f:
        header = dict(f.metadata() or {})
        names = set(f.keys())  # noqa: SIM118
    assert set(header) == {
        "zoo.state_format",
        "zoo.version",
        "zoo.digest",
        "step",
        "tokens",
        "settings",
        "config",
        "manifest_digest",
        "world_size",
        "param_groups",
        "run_id",  # added with the binding of a state to its run (an older state without it still reads)
    }
    assert len(header["run_id"]) == 16
    assert (header["step"], header["tokens"]) == ("2", str(2 * settings.tokens_per_step))
    assert {name.split("/")[0] for name in names} == {"optim", "rng", "data"} | (
        {"scaler"} if dtype == "fp16" else set()
    )
    assert {name for name in names if not name.startswith("optim/")} == {"rng/cpu/0", "data/cursor"} | (
        {"scaler/scale", "scaler/growth_tracker"} if dtype == "fp16" else set()
    )
    state = read_state(path)
    assert int(state.parts()["schedule/step"]) == 2 and "schedule/step" not in state.tensors
    assert json.loads(header["settings"])["dtype"] == dtype


def test_divergence_is_a_divergence_error_and_still_a_config_error() -> None:
    settings = dataclasses.replace(SETTINGS, lr=1e30, warmup_steps=0)
    with pytest.raises(zoo.DivergenceError, match="training diverged") as caught:
        fit(zoo.build("gpt2-small", **OVERRIDES), tokens(), tokens(400, seed=1), settings)
    assert isinstance(caught.value, zoo.ConfigError)


def test_the_sweep_counts_only_divergence_as_divergence(tmp_path: Path) -> None:
    """A rate of the sweep that diverges leaves a record without a loss; any other
    ConfigError stops the ablation instead of passing for a diverged rate."""
    context = Context((tokens(), tokens(400, seed=1)), {"source": "t", "tokenizer": "bytes"}, tmp_path, "cpu", 1)
    config = resolve_config("gpt2-small", OVERRIDES)
    diverging = dataclasses.replace(SETTINGS, lr=1e30, warmup_steps=0)
    job = Job("tune/diverged", "tune x lr=1e30", "base", config, diverging, tune=True)
    execute(job, context, "cpu", None, default_registry())
    record = json.loads((tmp_path / "tune" / "diverged.json").read_text())
    assert record["final_val_loss"] is None and record["curve"] == []
    too_long = dataclasses.replace(SETTINGS, seq_len=32)  # over the model's max_seq_len=16: not a divergence
    job = Job("tune/too-long", "tune y lr=0.003", "base", config, too_long, tune=True)
    with pytest.raises(zoo.ConfigError, match="run 'tune y lr=0.003': seq_len=32 is over") as caught:
        execute(job, context, "cpu", None, default_registry())
    assert not isinstance(caught.value, zoo.DivergenceError)
    assert not (tmp_path / "tune" / "too-long.json").exists()


def test_the_old_names_warn_and_still_work() -> None:
    import zoo.nn.factory

    with pytest.warns(DeprecationWarning, match="DTYPE_NAMES"):
        assert zoo.nn.factory.DTYPES is zoo.nn.factory.DTYPE_NAMES  # type: ignore[attr-defined]


def test_the_never_released_training_names_are_gone() -> None:
    import zoo.training

    for old in ("DTYPES", "run"):  # now PRECISIONS and run_loop
        assert not hasattr(zoo.training, old), old
