"""T5's self-supervised objectives: unlabeled text -> (inputs, targets) pairs, in tf.data.

Datagen stores a self-supervised problem's text tokenized once (as `targets`, inputs
empty); the training input pipeline concatenates the documents, splits the stream into
pieces of the length the objective needs (T5's concatenate-and-split) and corrupts
each piece. The corruption is drawn from (the run's seed, the piece's place in the
stream), so every epoch sees new noise, a rerun with one seed sees the same, and
evaluation corrupts the dev split with a fixed seed so checkpoints compare.

Noise spans become T5's sentinels, taken from the end of the vocabulary:
<extra_id_0> is the last id, <extra_id_1> the one before, and so on. This module holds
what a Problem declares and the lengths it implies, without TensorFlow (the registry
imports it); t2tcli.data.input.corruption turns each objective into tensor ops, so the
dependence runs one way. Imports: core.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from t2tcli.errors import UserError

# The shortest piece that can be corrupted: one token kept and one noised.
MIN_PIECE = 2


@dataclasses.dataclass(frozen=True)
class Room:
    """What a corruption must fit: the vocabulary (its last `sentinels` ids are T5's
    sentinels) and the model's sequence lengths, EOS included."""

    vocab_size: int
    sentinels: int
    inputs_length: int
    targets_length: int


@dataclasses.dataclass(frozen=True)
class Objective:
    """How a piece of text becomes an example. Subclasses set `name` and the lengths;
    t2tcli.data.input.corruption holds each one's ops."""

    name: ClassVar[str] = ""

    def piece_length(self, inputs_length: int, targets_length: int) -> int:
        """Tokens of text per example, so that its inputs and targets fit (EOS included)."""
        raise NotImplementedError

    def sentinels_needed(self, inputs_length: int, targets_length: int) -> int:
        """The most sentinels one example can use (0: the objective uses none)."""
        return 0


@dataclasses.dataclass(frozen=True)
class SpanCorruption(Objective):
    """T5's pretraining objective: about `noise_density` of the tokens, in spans averaging
    `mean_noise_span_length`, each replaced by one sentinel in the inputs; the targets hold
    the dropped spans, each after its sentinel."""

    name: ClassVar[str] = "span_corruption"
    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0

    def __post_init__(self) -> None:
        if not 0.0 < self.noise_density < 1.0:
            raise UserError(f"span_corruption: noise_density={self.noise_density} must lie between 0 and 1")
        if self.mean_noise_span_length < 1.0:
            raise UserError(f"span_corruption: mean_noise_span_length={self.mean_noise_span_length} must be >= 1")

    def _counts(self, length: int) -> tuple[int, int]:
        noise = min(max(round(length * self.noise_density), 1), length - 1)
        return noise, max(round(noise / self.mean_noise_span_length), 1)

    def lengths_for(self, piece: int) -> tuple[int, int]:
        """(inputs, targets) lengths, EOS included, of a piece of `piece` tokens."""
        noise, spans = self._counts(piece)
        return piece - noise + spans + 1, noise + spans + 1

    def piece_length(self, inputs_length: int, targets_length: int) -> int:
        piece = MIN_PIECE
        while self.lengths_for(piece + 1)[0] <= inputs_length:
            piece += 1
        needed = self.lengths_for(piece)[1]
        if self.lengths_for(piece)[0] > inputs_length or needed > targets_length:
            raise UserError(
                f"span_corruption: inputs_length={inputs_length} takes pieces of {piece} tokens, whose targets "
                f"need {needed} tokens; set --hparams=targets_length={needed} or more"
            )
        return piece

    def sentinels_needed(self, inputs_length: int, targets_length: int) -> int:
        return self._counts(self.piece_length(inputs_length, targets_length))[1] + 1


@dataclasses.dataclass(frozen=True)
class IidDenoising(Objective):
    """Each token noised on its own with probability `noise_density`; runs of noised tokens
    share one sentinel, as in span corruption."""

    name: ClassVar[str] = "iid_denoising"
    noise_density: float = 0.15

    def __post_init__(self) -> None:
        if not 0.0 < self.noise_density < 1.0:
            raise UserError(f"iid_denoising: noise_density={self.noise_density} must lie between 0 and 1")

    def piece_length(self, inputs_length: int, targets_length: int) -> int:
        # A span of noise shrinks to one sentinel, so inputs never outgrow the piece; the
        # targets hold the noise (about noise_density of it) and one sentinel per span.
        return max(inputs_length - 1, MIN_PIECE)

    def sentinels_needed(self, inputs_length: int, targets_length: int) -> int:
        # Spans alternate with kept runs: at most half the piece, rounded up, plus one.
        return math.ceil(self.piece_length(inputs_length, targets_length) / 2) + 1


@dataclasses.dataclass(frozen=True)
class PrefixLM(Objective):
    """A piece cut at a random point: the model reads the prefix and writes the rest."""

    name: ClassVar[str] = "prefix_lm"

    def piece_length(self, inputs_length: int, targets_length: int) -> int:
        # Cut anywhere, the prefix and the rest each fit their length.
        return max(min(inputs_length, targets_length) - 1, 1) + 1
