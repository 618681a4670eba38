"""CTranslate2 as a decode engine: the checkpoint converted once, decoded in C++.

CTranslate2 is what users pick for fast T5 inference on a CPU. The model_dir's
checkpoint is converted to its format without torch or transformers (the weights go
from the checkpoint into a `ctranslate2.specs.TransformerSpec` by t2tcli.model.weight_names'
map), cached under `model_dir/ctranslate2/` by checkpoint and quantization, and decoded
by `ctranslate2.Translator`. Ids travel as tokens: every row of the model's vocabulary
has a distinct token name, so outputs map back to the ids the TF engines would give.

Everything around decoding (reading lines, batching by length, putting results back in
order, writing) stays t2t-decode's; this module is a `batching.PredictFn`.

Imports: core, io, data, model and decode (batching, ct2_cpu, settings, side_by_side).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from absl import logging

from t2tcli.data.vocabulary.vocab import EOS_ID, PAD_ID, Vocabulary
from t2tcli.decode import batching, ct2_cpu, side_by_side
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.io import atomic, fs
from t2tcli.model import weight_names

if TYPE_CHECKING:
    from t2tcli.decode.settings import DecodeSettings

CACHE_DIR = "ctranslate2"
# Weight types a conversion stores; the compute type CTranslate2 runs them in follows.
QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16", "int8_bfloat16", "float16", "int8_float16")
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELUTanh", "swish": "SWISH", "sigmoid": "Sigmoid", "tanh": "Tanh"}
INSTALL_HINT = "scripts/install ctranslate2 (or pip install ctranslate2==4.8.5)"


def module() -> Any:
    """The ctranslate2 package, or a one-line error saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(f"decode engine=ctranslate2 needs the ctranslate2 package: {INSTALL_HINT}") from None
    return ctranslate2


def available() -> bool:
    """Whether the ctranslate2 package is installed."""
    try:
        module()
    except UserError:
        return False
    return True


# The one reason of `unsupported_reason` that engine=ctranslate2 runs anyway, with a warning.
PENALTY_DIFFERS = "CTranslate2's beam search length penalty is not T5's (beam search with alpha=0 is the same)"


def unsupported_reason(hp: HParams, decode: DecodeSettings) -> str | None:
    """Why this model or decode setting cannot run on CTranslate2 (None when it can)."""
    if hp.ffn_activation.removeprefix("gated-") not in _ACTIVATIONS:
        return f"ffn_activation={hp.ffn_activation!r} has no CTranslate2 equivalent"
    if hp.relative_attention_num_buckets != 32:
        return "CTranslate2 computes T5's relative attention with 32 buckets"
    if decode.beam_size > 1 and decode.alpha != 0.0:
        return PENALTY_DIFFERS
    return None


def known_quantization(quantization: str) -> str:
    """`quantization` if it is one of QUANTIZATIONS, else a one-line error."""
    if quantization not in QUANTIZATIONS:
        raise UserError(f"--decode_hparams: quantization={quantization!r}: use one of {', '.join(QUANTIZATIONS)}")
    return quantization


def check_quantization(quantization: str) -> str:
    """The compute type for `quantization` on this CPU, or a one-line error."""
    known_quantization(quantization)
    supported = module().get_supported_compute_types("cpu")
    if quantization not in supported:
        raise UserError(
            f"--decode_hparams: quantization={quantization} is not supported by CTranslate2 on this CPU "
            f"(supported: {', '.join(sorted(supported))})"
        )
    return quantization


def tokens(vocab: Vocabulary, rows: int) -> list[str]:
    """A distinct token name for every row of the model's vocabulary: the SentencePiece
    pieces (sentinels included), then names for the rows the vocabulary is padded with."""
    pieces = [vocab._sp.id_to_piece(i) for i in range(vocab.vocab_size)]
    return pieces + [f"<t2t_padding_{i}>" for i in range(vocab.vocab_size, rows)]


def _linear(spec: Any, kernel: np.ndarray) -> None:
    """A mesh kernel [in, out] as CTranslate2's (torch's) Linear weight [out, in]."""
    spec.weight = np.ascontiguousarray(kernel.T, dtype=np.float32)


def build_spec(values: dict[str, np.ndarray], hp: HParams, vocab_size: int, vocab_tokens: list[str]) -> Any:
    """The CTranslate2 TransformerSpec of the model whose weights (by mesh name) are `values`."""
    ct2 = module()
    from ctranslate2.specs import common_spec, transformer_spec

    arch = weight_names.Architecture.from_hparams(hp, vocab_size)
    spec = transformer_spec.TransformerSpec.from_config(
        (arch.num_encoder_layers, arch.num_decoder_layers),
        arch.num_heads,
        pre_norm=True,
        activation=getattr(common_spec.Activation, _ACTIVATIONS[hp.ffn_activation.removeprefix("gated-")]),
        ffn_glu=arch.gated,
        relative_attention_bias=True,
        rms_norm=True,
    )
    embedding = np.asarray(values[weight_names.EMBEDDING], np.float32)
    for side, stack in (("encoder", spec.encoder), ("decoder", spec.decoder)):
        embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        embeddings.weight = embedding
        stack.scale_embeddings = False
        stack.layer_norm.gamma = values[weight_names.final_norm(arch, side)]
        for block, layer in enumerate(stack.layer):
            scope = weight_names.attention(side, block, "self")
            qkv = np.concatenate([values[f"{scope}/{w}"] for w in "qkv"], axis=1)
            _linear(layer.self_attention.linear[0], qkv)
            _linear(layer.self_attention.linear[1], values[f"{scope}/o"])
            layer.self_attention.queries_scale = 1.0
            layer.self_attention.layer_norm.gamma = values[weight_names.norm(arch, side, block, "self")]
            # T5's one relative-position bias per stack, [buckets, heads] as CTranslate2 holds it.
            layer.self_attention.relative_attention_bias = np.ascontiguousarray(
                values[weight_names.relative_bias(side)].T, dtype=np.float32
            )
            layer.self_attention.relative_attention_max_distance = np.int32(128)
            if side == "decoder":
                scope = weight_names.attention(side, block, "cross")
                _linear(layer.attention.linear[0], values[f"{scope}/q"])
                _linear(layer.attention.linear[1], np.concatenate([values[f"{scope}/{w}"] for w in "kv"], axis=1))
                _linear(layer.attention.linear[2], values[f"{scope}/o"])
                layer.attention.queries_scale = 1.0
                layer.attention.layer_norm.gamma = values[weight_names.norm(arch, side, block, "cross")]
            kernels = weight_names.ffn(arch, side, block)
            _linear(layer.ffn.linear_0, values[kernels["wi_0" if arch.gated else "wi"]])
            if arch.gated:
                _linear(layer.ffn.linear_0_noact, values[kernels["wi_1"]])
            _linear(layer.ffn.linear_1, values[kernels["wo"]])
            layer.ffn.layer_norm.gamma = values[weight_names.norm(arch, side, block, "ffn")]
    if arch.tie_embeddings:
        spec.decoder.projection.weight = embedding
        spec.decoder.scale_outputs = np.float32(arch.d_model**-0.5)
    else:
        _linear(spec.decoder.projection, values[weight_names.LOGITS])
    spec.register_source_vocabulary(vocab_tokens)
    spec.register_target_vocabulary(vocab_tokens)
    pad, eos, unk = (vocab_tokens[i] for i in (PAD_ID, EOS_ID, 2))
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = pad, eos, unk
    spec.config.decoder_start_token = pad
    spec.config.layer_norm_epsilon = 1e-6
    del ct2
    return spec


def cache_root(model_dir: str) -> str:
    """Where converted models are kept: in the model_dir, or, where it cannot be written (read-only
    storage, a bucket), in the user's cache; the entries are keyed by the checkpoint's content."""
    if not fs.is_remote(model_dir) and os.access(model_dir, os.W_OK | os.X_OK):
        return os.path.join(model_dir, CACHE_DIR)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "t2tcli", CACHE_DIR)


def validated_spec(values: dict[str, np.ndarray], hp: HParams, vocab: Vocabulary) -> Any:
    """The checkpoint's `values` as a CTranslate2 spec, validated so that its values are
    CTranslate2's own variables, which quantizing them (`ct2_cpu.quantize`) works on."""
    rows = weight_names.padded_vocab_size(vocab.vocab_size, hp.vocab_divisor)
    spec = build_spec(values, hp, vocab.vocab_size, tokens(vocab, rows))
    spec.validate()
    return spec


def converted(
    checkpoint_path: str,
    cache_root: str,
    hp: HParams,
    vocab: Vocabulary,
    quantization: str,
    read_values: Callable[[], dict[str, np.ndarray]],
) -> str:
    """The CTranslate2 model of a checkpoint: converted once, cached under `cache_root`.

    The cache key is the checkpoint's name, its fingerprint (index bytes and data file sizes)
    and the quantization, with "-narrow" where int8 weights are stored in 7 bits for this CPU
    (`ct2_cpu.int8_weight_limit`), so a checkpoint written again under the same step, or cut
    short since, is converted again (and then fails as a damaged one should), and a model_dir
    shared by CPUs of both kinds holds a conversion for each. The model is built
    in a temporary directory and renamed into place: a cache entry is complete or absent,
    and two processes converting one checkpoint at once both end up with the same entry.
    """
    from t2tcli.model import checkpoints

    index = checkpoints.fingerprint(checkpoint_path)
    weight_limit = ct2_cpu.int8_weight_limit(quantization)
    narrow = "-narrow" if ct2_cpu.narrow(weight_limit) else ""
    target = os.path.join(cache_root, f"{os.path.basename(checkpoint_path)}-{index}-{quantization}{narrow}")
    if os.path.isfile(os.path.join(target, "model.bin")):
        return target
    try:
        with atomic.staged_directory(target) as staging:
            spec = validated_spec(read_values(), hp, vocab)
            ct2_cpu.quantize(spec, quantization, weight_limit)
            spec.save(staging)
    except FileExistsError:
        if not os.path.isfile(os.path.join(target, "model.bin")):
            raise
        # Another reader of the same checkpoint (an evaluator beside a decoder) got there first.
        return target
    except BaseException:
        try:  # a failed first conversion leaves the model_dir as it was
            if not os.listdir(cache_root):
                os.rmdir(cache_root)
        except OSError:  # another process's conversion began meanwhile
            pass
        raise
    weights = f", int8 weights in 7 bits: {ct2_cpu.NARROW_WHY}" if narrow else ""
    logging.info("converted %s for CTranslate2 (%s%s) into %s", checkpoint_path, quantization, weights, target)
    return target


@dataclasses.dataclass
class _Submitted:
    """One batch handed to the Translator: what its rows need back, and its results to come."""

    inputs: np.ndarray
    targets: np.ndarray | None
    real: list[int]  # the batch rows that hold a line (the rest are padding)
    results: list[Any]  # CTranslate2's asynchronous results, one per real row
    seconds: float  # spent handing it over


def batches_in_flight() -> int:
    """Batches a Predictor holds at once: one on each worker and one queued, so a worker that
    finishes finds the next batch waiting while the oldest batch's rows are handed back."""
    return side_by_side.workers() + 1


class Predictor:
    """A `batching.PredictFn` on a CTranslate2 Translator, up to `in_flight` batches in the
    engine before the oldest one's rows are handed back.

    A batch runs whole on one worker while other batches keep the rest busy. The input's
    last batch is split over the workers the batches before it leave idle, and every batch
    is split into one part per worker when `in_flight` is 1 (an interactive decode answers
    each batch before reading the next), so no core waits idle beside a lone batch
    (t2tcli.decode.side_by_side).
    CTranslate2 runs a batch on each core as its `inter_threads`, one thread each."""

    def __init__(
        self,
        model_path: str,
        hp: HParams,
        vocab: Vocabulary,
        decode: DecodeSettings,
        quantization: str,
        in_flight: int,
    ) -> None:
        ct2 = module()
        self.in_flight = in_flight
        self.workers = side_by_side.workers()
        ct2_cpu.use_fastest_isa()
        self.translator = ct2.Translator(
            model_path, device="cpu", compute_type=quantization, inter_threads=self.workers, intra_threads=1
        )
        rows = weight_names.padded_vocab_size(vocab.vocab_size, hp.vocab_divisor)
        self.tokens = tokens(vocab, rows)
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        self.decode = decode
        self.length = decode.targets_length(hp)

    def _source(self, row: np.ndarray) -> list[str]:
        """A batch row's tokens up to its EOS."""
        ends = np.flatnonzero(row == EOS_ID)
        n = int(ends[0]) + 1 if ends.size else int(np.count_nonzero(row))
        return [self.tokens[i] for i in row[:n].tolist()]

    def _translate(self, sources: list[list[str]], part: int) -> list[Any]:
        d = self.decode
        beam = d.beam_size
        sampling = d.temperature > 0
        return self.translator.translate_batch(
            sources,
            beam_size=beam,
            length_penalty=d.alpha if beam > 1 else 0.0,
            max_decoding_length=self.length,
            min_decoding_length=0,
            return_end_token=True,
            # Scores cost a log-softmax over the vocabulary at every step; text needs none.
            return_scores=d.compute_scores,
            max_input_length=0,
            sampling_topk=d.top_k if sampling else 1,
            sampling_temperature=d.temperature if sampling else 1.0,
            max_batch_size=part,
            asynchronous=True,
        )

    def _score(self, sources: list[list[str]], targets: np.ndarray, part: int) -> list[Any]:
        target_tokens = []
        for row in targets:
            # CTranslate2 scores the EOS it appends itself.
            ends = np.flatnonzero(row == EOS_ID)
            n = int(ends[0]) if ends.size else int(np.count_nonzero(row))
            target_tokens.append([self.tokens[i] for i in row[:n].tolist() if i != PAD_ID])
        return self.translator.score_batch(
            sources, target_tokens, max_input_length=0, max_batch_size=part, asynchronous=True
        )

    def _submit(self, batch: dict[str, np.ndarray], parts: int) -> _Submitted:
        """`batch` handed to the engine in `parts` parts, one a worker (CTranslate2 runs each
        part of at most `max_batch_size` lines as a job of its own)."""
        started = time.perf_counter()
        inputs = batch["inputs"]
        targets = batch.get("targets")
        real = batching.real_rows(batch).tolist()
        picked = [self._source(inputs[i]) for i in real]
        results = []
        if real:
            part = side_by_side.part_rows(len(picked), parts) if parts > 1 else 0  # 0: the whole batch
            results = self._translate(picked, part) if targets is None else self._score(picked, targets[real], part)
        return _Submitted(inputs, targets, real, results, time.perf_counter() - started)

    def _finish(self, submitted: _Submitted) -> Iterator[dict[str, Any]]:
        started = time.perf_counter()
        done = [r.result() for r in submitted.results]
        # The time this batch kept t2t-decode waiting on CTranslate2: with batches in
        # flight, the engine's own time overlaps, and what is left is t2t-decode's work.
        extra: dict[str, Any] = {"engine_seconds": np.float32(submitted.seconds + time.perf_counter() - started)}
        rows = len(submitted.inputs)
        scores = np.zeros([rows], np.float32)
        if submitted.targets is not None:
            outputs = submitted.targets
            for i, result in zip(submitted.real, done, strict=True):
                scores[i] = float(sum(result.log_probs))
        else:
            outputs = np.zeros([rows, self.length], np.int32)
            steps = 0
            for i, result in zip(submitted.real, done, strict=True):
                ids = [self.ids[t] for t in result.hypotheses[0]][: self.length]
                outputs[i, : len(ids)] = ids
                scores[i] = float(result.scores[0]) if result.scores else 0.0
                steps = max(steps, len(ids))
            # The steps the batch's longest output took (its EOS included), as the
            # fast engine reports the steps its loop ran.
            extra["decode_steps"] = np.int32(steps)
        for i in range(rows):
            yield {"outputs": outputs[i], "scores": scores[i], **extra}

    def __call__(self, batches: Callable[[], Iterator[dict[str, np.ndarray]]], shapes: dict[str, tuple[int, int]]):
        yield from side_by_side.run(batches(), self._submit, self._finish, self.in_flight, self.workers)
