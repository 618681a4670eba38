"""tensor2tensor's decode outputs, as t2t-decoder writes them for its users' scripts.

Without --decode_to_file, T2T's decoder names its output after the input and the
settings (`<input>.<model>.<hparams_set>.<problem>.beam<N>.alpha<A>.decodes`), and with no
input file at all it decodes the problem's dev split (--decode_hparams=num_samples=N: its
first N examples), writing `.decodes`, `.targets` and `.inputs` files beside each other
when given --decode_to_file, and logging each example otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from absl import logging

from t2tcli.errors import UserError

if TYPE_CHECKING:
    from t2tcli.decode.settings import DecodeSettings

# tensor2tensor's formats of a beam's score (write_beam_scores) and of a scored line (--score_file).
BEAM_SCORE_FORMAT = ".2f"
SCORE_FORMAT = ".6f"
# What the decodes file is called when --model is not given (T2T's scripts always give it).
DEFAULT_MODEL_NAME = "transformer"


def decodes_filename(base: str, model: str, hparams_set: str, problem: str, beam_size: int, alpha: float) -> str:
    """T2T's decode file name for `base`; a base that already ends in these settings is kept."""
    tail = f"beam{int(beam_size)}.alpha{float(alpha)}.decodes"
    if tail in base:
        return base
    return f"{base}.{model}.{hparams_set}.{problem}.{tail}"


def sibling(decodes_path: str, kind: str) -> str:
    """The `.targets` / `.inputs` file beside a `.decodes` file (T2T replaces the last dotted part)."""
    head, _, _ = decodes_path.rpartition(".")
    return f"{head}.{kind}" if head else f"{decodes_path}.{kind}"


@dataclasses.dataclass
class Decoded:
    """One example of the split, as text: its input, the model's decode and its target."""

    inputs: str
    output: str
    target: str


def decode_split(
    model: Any, decode_hp: DecodeSettings, data_dir: str, split: str, checkpoint_spec: str | None
) -> Iterator[Decoded]:
    """Decodes the first num_samples examples (all with -1) of each component of the model's
    problem's `split` with the checkpoint `checkpoint_spec` names (default the latest)."""
    from t2tcli.decode import engines
    from t2tcli.decode.batching import fit
    from t2tcli.evaluate import evaluation
    from t2tcli.model import checkpoints, loading

    if model.problem is None or not data_dir:
        raise UserError(
            "without --decode_from_file the dev split of the run's problem is decoded, and this model_dir was "
            "trained on none: pass --problem and --data_dir, or --decode_from_file=FILE"
        )
    limit = max(decode_hp.num_samples, 0)
    lengths = (int(model.hparams.inputs_length), int(model.hparams.targets_length))
    examples = []
    for task, _ in model.problem.components():
        found = evaluation.read_examples(data_dir, task.name, split, limit)
        if task.objective is not None:
            found = evaluation.corrupted_examples(task, found, data_dir, lengths)[: limit or None]
        examples.extend(found)
    if not examples:
        raise UserError(f"the '{split}' split of {data_dir} holds no examples to decode")
    decoder = engines.Decoder(model, decode_hp, decode_hp.batch_size)
    text = loading.text_decoder(model.vocab)
    with checkpoints.reading(model.model_dir, checkpoint_spec) as (step, checkpoint, readable):
        logging.info("decoding %d %s examples with checkpoint %s (step %d)", len(examples), split, checkpoint, step)
        inputs = [fit(ex.inputs, decoder.inputs_length)[0] for ex in examples]
        outputs = decoder.decode(readable, inputs)
    for ex, ids in zip(examples, outputs, strict=True):
        yield Decoded(text(ex.inputs), text(ids), text(ex.targets))
