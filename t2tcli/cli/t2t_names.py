"""tensor2tensor's flag names, accepted beside ours so its users' scripts run unchanged.

An alias is rewritten to the flag it names before absl parses the command line, so
every later check, message and run record speaks of one flag. A flag given under both
of its names is a one-line error (which value was meant cannot be told). An alias is
only taken by a binary that has its target and no flag of the alias's own name
(t2t-avg-checkpoints has an --output_dir of its own).
"""

from __future__ import annotations

from collections.abc import Sequence

from t2tcli.errors import UserError

# alias -> the flag of ours it names.
ALIASES: dict[str, str] = {
    "output_dir": "model_dir",
    "t2t_usr_dir": "usr_dir",
    "problems": "problem",
    "local_eval_frequency": "eval_every_steps",
    "warm_start_from": "init_checkpoint",
}

# tensor2tensor's --model values that name the model t2tcli trains.
MODELS = ("transformer", "mtf_transformer")
MODEL_HELP = (
    "tensor2tensor's model name, accepted for its scripts: transformer or mtf_transformer (both are the one "
    "model t2tcli has, mesh-tf's encoder-decoder Transformer; its size is --hparams_set's)"
)


def _name_of(arg: str) -> tuple[str, str] | None:
    """(flag name, the text after it) of a `--name[=value]` argument; None for other arguments."""
    if not arg.startswith("--") or arg == "--":
        return None
    name, eq, rest = arg[2:].partition("=")
    return name, eq + rest


def taken(defined: set[str]) -> dict[str, str]:
    """The aliases a binary with the flags `defined` takes: those whose target it has and
    whose own name is not one of its flags."""
    return {alias: target for alias, target in ALIASES.items() if target in defined and alias not in defined}


def rewrite(argv: Sequence[str], defined: set[str]) -> list[str]:
    """argv with each alias replaced by the flag it names (for the flags `defined` here)."""
    aliases = taken(defined)
    given: dict[str, str] = {}
    out = [argv[0]]
    for arg in argv[1:]:
        parsed = _name_of(arg)
        if parsed is None:
            out.append(arg)
            continue
        name, rest = parsed
        target = aliases.get(name, name)
        if target in given and given[target] != name and target != "usr_dir":
            raise UserError(f"--{given[target]} and --{name} are one flag (--{target}): give it once")
        given.setdefault(target, name)
        out.append(f"--{target}{rest}")
    return out


def check_model(model: str | None) -> None:
    """--model: tensor2tensor's model names for the Transformer pass; any other is one line."""
    if model is not None and model not in MODELS:
        raise UserError(
            f"--model={model}: t2tcli has one model, mesh-tf's encoder-decoder Transformer (--model="
            f"{' or --model='.join(MODELS)}, or no --model); pick its size with --hparams_set"
        )
