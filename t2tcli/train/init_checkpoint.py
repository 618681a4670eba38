"""Initialising a new run from a mesh-tensorflow / T5 checkpoint or a Hugging Face T5
directory: checked before anything is written, then mapped onto the model's variables.

Imports: core, io, model and interop.
"""

from __future__ import annotations

from typing import Any

from absl import logging

from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.interop import hf_t5
from t2tcli.io import fs
from t2tcli.model import checkpoints, weight_names

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf

tf1 = tf.compat.v1


def _checkpoint_shapes(init_checkpoint: str) -> dict[str, list[int]]:
    try:
        reader = tf.train.load_checkpoint(init_checkpoint)
    except (ValueError, tf.errors.NotFoundError, tf.errors.DataLossError) as exc:
        raise UserError(f"--init_checkpoint={init_checkpoint}: no readable checkpoint ({exc})") from None
    return {name: list(shape) for name, shape in reader.get_variable_to_shape_map().items()}


def _source_names(hp: HParams, vocab_size: int) -> Any:
    """name -> the name it may have in a checkpoint of the other norm_scope (T5 v1.0 against
    T5 v1.1 and t2tcli runs before the distinction), for variables and optimizer slots."""
    arch = weight_names.Architecture.from_hparams(hp, vocab_size)
    other = {new: old for old, new in weight_names.renamed_from_other_norm_scope(arch).items()}

    def source(name: str, have: dict[str, list[int]]) -> str:
        if name in have:
            return name
        for new, old in other.items():
            if name == new or name.startswith(new + "_slot"):
                return old + name[len(new) :]
        return name

    return source


def check_init_checkpoint(init_checkpoint: str, hp: HParams, vocab_size: int) -> None:
    """A one-line error listing every weight of the model that the checkpoint lacks or shapes
    otherwise; run before anything is written. Silently training a half-initialised
    model wastes days."""
    have = _checkpoint_shapes(init_checkpoint)
    checkpoints.check_complete(init_checkpoint)
    source = _source_names(hp, vocab_size)
    problems = []
    for name, shape in weight_names.mesh_shapes(weight_names.Architecture.from_hparams(hp, vocab_size)).items():
        found = source(name, have)
        if found not in have:
            problems.append(f"{name} {shape} missing from checkpoint")
        elif have[found] != shape:
            problems.append(f"{name}: model {shape} vs checkpoint {have[found]}")
    if problems:
        shown = "; ".join(problems[:20]) + (f"; ... {len(problems) - 20} more" if len(problems) > 20 else "")
        raise UserError(f"--init_checkpoint={init_checkpoint} does not fit the model{_family_hint(have, hp)}: {shown}")


def _family_hint(have: dict[str, list[int]], hp: HParams) -> str:
    """' (it is T5 v1.1-style ...)' when the checkpoint's layout is the other T5 family's."""
    v1_1 = weight_names.LOGITS in have or any("/wi_0/" in n for n in have)
    if v1_1 and not weight_names.is_gated(hp.ffn_activation):
        return " (it is T5 v1.1-style: gated FFN, decoder/logits/kernel; use a t5_v1_1_*, flan_t5_* or mt5_* set)"
    if not v1_1 and weight_names.is_gated(hp.ffn_activation):
        return " (it is T5 v1.0-style: relu FFN, logits from the embedding; use a t5_* set)"
    return ""


def init_from_checkpoint(init_checkpoint: str, graph: mtf.Graph, hp: HParams, label: str = "") -> None:
    """Initialises the model (and matching optimizer slots) from a mesh-tf / T5 checkpoint
    that check_init_checkpoint accepted, and says so in one line (`label` names the
    source when the checkpoint is a converted copy of it).

    Only initial values change, so a run resumed from its own model_dir keeps its
    trained weights. Norm variables named by the other norm_scope are mapped by name.
    """
    have = _checkpoint_shapes(init_checkpoint)
    vocab_rows = next(v.shape.to_integer_list[0] for v in graph.all_variables if v.name == weight_names.EMBEDDING)
    source = _source_names(hp, vocab_rows)
    assignment: dict[str, str] = {}
    for var in graph.all_variables:
        found = source(var.name, have)
        if have.get(found) == var.shape.to_integer_list:
            assignment[found] = var.name
    renamed = sum(found != name for found, name in assignment.items())
    if renamed:
        logging.info(
            "%s names %d norm variables as norm_scope=%s does not; mapped onto %s names",
            init_checkpoint,
            renamed,
            hp.norm_scope,
            hp.norm_scope,
        )
    step = None if label else _step_of(init_checkpoint)  # a converted copy's step says nothing of its source
    logging.info("%s", loaded_line(label or init_checkpoint, graph, assignment, step))
    tf1.train.init_from_checkpoint(init_checkpoint, assignment)


def loaded_line(source: str, graph: mtf.Graph, assignment: dict[str, str], step: int | None) -> str:
    """The line saying what --init_checkpoint loaded, so a user need not compare checkpoints by hand."""
    weights = {v.name for v in graph.trainable_variables}
    loaded = sum(name in weights for name in assignment.values())
    slots = len(assignment) - loaded
    at = f" at step {step}" if step is not None else ""
    return (
        f"--init_checkpoint: loaded {loaded} of the model's {len(weights)} weight variables"
        f"{f' and {slots} optimizer slots' if slots else ''} from {source}{at}"
    )


def _step_of(prefix: str) -> int | None:
    """The global step a checkpoint holds (None for one without, e.g. converted weights)."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        return int(reader.get_tensor("global_step")) if reader.has_tensor("global_step") else None
    except (ValueError, tf.errors.OpError):
        return None


def pretrained(init_checkpoint: str) -> hf_t5.HfModel | None:
    """The Hugging Face model named by --init_checkpoint; None for a mesh-tf checkpoint (checked to exist)."""
    if not init_checkpoint:
        return None
    if hf_t5.is_model_dir(init_checkpoint):
        return hf_t5.open_model(init_checkpoint)
    if not tf.train.latest_checkpoint(init_checkpoint) and not fs.exists(init_checkpoint + ".index"):
        raise UserError(
            f"--init_checkpoint={init_checkpoint}: neither a checkpoint (a directory with one, or a prefix with "
            f"an .index file) nor a Hugging Face T5 directory (with {hf_t5.CONFIG})"
        )
    return None


def checkpoint_prefix(path: str) -> str:
    """A checkpoint directory's latest checkpoint, or the prefix itself."""
    return tf.train.latest_checkpoint(path) or path


def check(
    init_checkpoint: str, pretrained: hf_t5.HfModel | None, hp: HParams, vocab_size: int, step: int
) -> dict[str, Any] | None:
    """Checks the initial weights fit the model before anything is written; returns a Hugging
    Face model's values when a new run starts from one (None otherwise).

    They are read (and so checked tensor by tensor) before model_dir is written: a missing or
    misshapen tensor, or a damaged weights file, leaves no half-made model_dir.
    """
    if pretrained is not None and not step:
        return hf_t5.mesh_values(pretrained, hp, vocab_size)
    if pretrained is not None:
        hf_t5.check_fits(pretrained, hp, vocab_size)
    elif init_checkpoint:
        check_init_checkpoint(checkpoint_prefix(init_checkpoint), hp, vocab_size)
    return None
