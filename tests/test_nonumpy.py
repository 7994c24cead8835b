"""Every ``zoo`` command works in a process where NumPy cannot be imported.

The core promises no NumPy (docs/install.md): every file the zoo writes (versions,
training state, the Hugging Face export) goes through the one safetensors writer of
``zoo.checkpoint.store``, never ``safetensors.torch.save_file``, which needs NumPy. One
subprocess blocks NumPy (``sys.modules["numpy"] = None``: any import of it raises) and
runs each command through ``zoo.cli.main``, in the order a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import safetensors.torch
import torch

TINY = "--set n_layers=1 --set d_model=32 --set n_heads=2 --set max_seq_len=32"
BYTES = f"{TINY} --set vocab_size=256"
TRAIN = "--steps 2 --batch-size 2 --seq-len 16 --eval-every 2 --save-every 2 --threads 1"

# (name, command line); run in this order in one folder.
COMMANDS = [
    ("list", "list --json"),
    ("info", "info gpt2-small --set n_layers=1"),
    ("components", "components"),
    ("plugins", "plugins"),
    ("build", f"build gpt2-small {TINY} -o model.safetensors"),
    ("build-folder", f"build gpt2-small {BYTES} -o versions"),
    ("inspect", "inspect model.safetensors"),
    ("inspect-version", "inspect versions --version 1"),
    ("data-prepare", "data prepare -o data --tokenizer bytes"),
    # the command /work/shared/hooks/before-stop runs: no --data (the bundled text)
    ("train-no-data", f"train gpt2-small {BYTES} --tokenizer bytes --out run0 --steps 2 --batch-size 2 --seq-len 16"),
    ("train", f"train gpt2-small {BYTES} --data data --out run {TRAIN}"),
    ("resume", f"train gpt2-small {BYTES} --data data --out run {TRAIN.replace('--steps 2', '--steps 4')} --resume"),
    ("eval", "eval run --data data --seq-len 16 --batches 1"),
    ("generate", "generate model.safetensors --prompt Hello --max-new-tokens 3"),
    ("to-hf", "convert --to-hf model.safetensors -o hf"),
    ("from-hf", "convert --from-hf hf -o back.safetensors"),
    (
        "ablate",
        "ablate --from transformer-2017 --to gpt2-small --set d_model=32 --set n_layers=1 --set n_heads=2 "
        "--seq-len 16 --steps 1 --batch-size 2 --eval-every 1 --seeds 1 --tokenizer bytes --max-chars 4000 -o ablation",
    ),
]

SCRIPT = textwrap.dedent(
    """
    import json, shlex, sys
    sys.modules["numpy"] = None  # `import numpy` now raises ImportError, as if it were not installed
    from zoo.cli import main

    codes = {}
    for name, line in json.loads(sys.argv[1]):
        print(f"=== {name}", file=sys.stderr, flush=True)
        try:
            codes[name] = main(shlex.split(line))
        except SystemExit as exit:  # argparse refused the command line
            codes[name] = exit.code
    assert sys.modules["numpy"] is None  # nothing imported it behind our back
    print(json.dumps(codes))
    """
)


def test_every_command_runs_without_numpy(tmp_path: Path) -> None:
    blocked = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['numpy'] = None; import numpy"], capture_output=True, text=True
    )
    assert blocked.returncode == 1 and "ModuleNotFoundError" in blocked.stderr  # the block works
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(COMMANDS)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    codes = json.loads(result.stdout.strip().splitlines()[-1])
    failed = {name: code for name, code in codes.items() if code != 0}
    assert not failed, (failed, result.stderr[-4000:])
    assert "numpy" not in result.stderr.lower(), result.stderr[-4000:]

    # What was written is standard safetensors, read back by the reference reader.
    states = sorted((tmp_path / "run").glob("v*.state.safetensors"))
    assert [p.name for p in states] == ["v0001.state.safetensors", "v0002.state.safetensors"]
    state = safetensors.torch.load_file(states[-1])
    assert any(name.startswith("optim/") for name in state)
    assert (tmp_path / "run0" / "v0001.state.safetensors").is_file()
    exported = safetensors.torch.load_file(tmp_path / "hf" / "model.safetensors")
    original = safetensors.torch.load_file(tmp_path / "model.safetensors")
    assert torch.equal(exported["transformer.wte.weight"], original["tok_emb.weight"])
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
    assert (tmp_path / "back.safetensors").is_file() and (tmp_path / "ablation" / "report.md").is_file()


def test_an_ablation_with_seeds_refuses_missing_scipy_before_it_trains(tmp_path: Path) -> None:
    """The statistics need SciPy: an ablation without it says so at once, not after training every run."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["scipy"] = None
        from zoo.cli import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    line = COMMANDS[-1][1].replace("--seeds 1", "--seeds 2").split()
    result = subprocess.run([sys.executable, "-c", script, *line], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1 and "need 'scipy', which is not installed" in result.stderr, result.stderr
    assert not list((tmp_path / "ablation").glob("*.safetensors"))  # nothing trained
