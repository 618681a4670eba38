"""A decode's settings, from their defaults to the engine that runs them.

Every binary that decodes (t2t-decode, t2t-eval, t2t-export), every decoding Estimator
(t2tcli.decode.tf_predict) and every library caller reads its settings as one frozen
`DecodeSettings`: parsed from --decode_hparams once, each value checked against sane
bounds and the model when it is made, so no flag value can ask for memory the decode
would never finish allocating. `engine=auto` is resolved by one function; the engine
chosen travels on in the settings, which the model_fn then only reads.

Imports: core, model and decode (ct2); ct2 for what CTranslate2 can run.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from absl import logging

from t2tcli import hparams
from t2tcli.decode import ct2
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.model import hardware
from t2tcli.model.config import ModelConfig

if TYPE_CHECKING:
    from t2tcli.model.loading import LoadedModel

# The model's own decode hparams (their defaults: t2tcli.hparams.SCHEMA); 0 for a length
# means the model's own (targets_length / inputs_length).
DECODE_KEYS = ("beam_size", "alpha", "temperature", "top_k", "max_decode_length")
# The other settings of --decode_hparams, which no model holds.
DECODE_FLAG_DEFAULTS = {
    "batch_size": 64,
    "max_input_length": 0,
    # auto: CTranslate2 on a CPU where it is installed and decodes alike, else
    # t2tcli.decode.fast on one CPU / GPU, mesh-tensorflow's decode on TPUs and meshes
    # of several devices (`choose`); fast, mesh or ctranslate2 ask for one.
    "engine": "auto",
    # CTranslate2's weight type: float32 (the TF engines' results), int8, int8_float32 on a
    # CPU (bfloat16 and float16 are CTranslate2's GPU types).
    "quantization": "float32",
    # tensor2tensor's names, so its decode scripts run (t2tcli.cli.decode applies them):
    # decode only the first num_samples lines (-1: all); records end at `delimiter`
    # instead of a newline; max_input_size is max_input_length; extra_length sets the
    # decode length to the input length plus it (where max_decode_length is 0).
    "num_samples": -1,
    "delimiter": "\n",
    "max_input_size": -1,
    "extra_length": 0,
    # t2t-decode writes every beam's text, tab-separated, best first (the fast engine's
    # beam search), and with write_beam_scores each text followed by its score.
    "return_beams": False,
    "write_beam_scores": False,
}
ENGINES = ("auto", "fast", "mesh", "ctranslate2")
# The engines the model_fn runs (t2tcli.decode.tf_predict).
TF_ENGINES = ("auto", "fast", "mesh")

# Tokens an input or output may hold at most, unless the model was trained on longer ones.
# T5's relative positions give no limit of their own, but every engine allocates buffers
# and attention caches in proportion to these lengths, so a value beyond any text a
# model decodes is refused rather than tried.
MAX_LENGTH = 16384
# Hypotheses a beam search keeps per line at most: every one is a row of the decode.
MAX_BEAM_SIZE = 128


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """How to decode, checked when made: what --decode_hparams asked for over the model's
    own decode hparams. Lengths of 0 mean the model's own."""

    beam_size: int = hparams.SCHEMA["beam_size"][0]
    alpha: float = hparams.SCHEMA["alpha"][0]
    temperature: float = hparams.SCHEMA["temperature"][0]
    top_k: int = hparams.SCHEMA["top_k"][0]
    max_decode_length: int = hparams.SCHEMA["max_decode_length"][0]
    batch_size: int = DECODE_FLAG_DEFAULTS["batch_size"]
    max_input_length: int = DECODE_FLAG_DEFAULTS["max_input_length"]
    engine: str = DECODE_FLAG_DEFAULTS["engine"]
    quantization: str = DECODE_FLAG_DEFAULTS["quantization"]
    num_samples: int = DECODE_FLAG_DEFAULTS["num_samples"]
    delimiter: str = DECODE_FLAG_DEFAULTS["delimiter"]
    extra_length: int = DECODE_FLAG_DEFAULTS["extra_length"]
    return_beams: bool = DECODE_FLAG_DEFAULTS["return_beams"]
    write_beam_scores: bool = DECODE_FLAG_DEFAULTS["write_beam_scores"]
    # Whether a decode returns each output's log-likelihood (scoring always does); text
    # alone needs none, which saves a teacher-forced pass per batch.
    compute_scores: bool = True

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, _typed(field.name, field.type, getattr(self, field.name)))
        _check(self)

    @classmethod
    def of(cls, decode: DecodeSettings | Mapping[str, Any] | None, hp: HParams | None = None) -> DecodeSettings:
        """`decode` as settings: a mapping's keys over the model's own decode hparams
        (`hp`, where given) and the defaults; settings given as such are kept."""
        if isinstance(decode, DecodeSettings):
            return decode
        base = {key: hp.get(key) for key in DECODE_KEYS if hp is not None and key in hp}
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(decode or {}) - names)
        if unknown:
            raise UserError(f"decode settings: unknown {', '.join(unknown)} (known: {', '.join(sorted(names))})")
        return cls(**{**base, **(decode or {})})

    def replace(self, **changes: Any) -> DecodeSettings:
        """These settings with `changes`, checked again."""
        return dataclasses.replace(self, **changes)

    def targets_length(self, hp: HParams) -> int:
        """The most tokens a decode writes: max_decode_length, or the model's targets_length."""
        return int(self.max_decode_length or hp.targets_length)

    def engine_fields(self) -> dict[str, Any]:
        """What the engines read, by name: for a log line and an export's record."""
        return {k: getattr(self, k) for k in (*DECODE_KEYS, "engine", "quantization", "return_beams")}


def _typed(name: str, kind: str, value: Any) -> Any:
    """`value` as the field's type, or a one-line error naming it."""
    try:
        if kind == "bool":
            if isinstance(value, str):
                if value.lower() not in ("true", "false"):
                    raise ValueError
                return value.lower() == "true"
            if isinstance(value, bool) or value in (0, 1):
                return bool(value)
            raise ValueError
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError
                return int(value)
            return operator.index(value)
        if kind == "float":
            if isinstance(value, bool) or isinstance(value, str):
                raise ValueError
            return float(value)
        if not isinstance(value, str):
            raise ValueError
        return value
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"--decode_hparams: {name}={value!r} must be {'an' if kind == 'int' else 'a'} {kind}") from None


def _at_most(name: str, value: int, cap: int, why: str) -> None:
    if value > cap:
        raise UserError(f"--decode_hparams: {name}={value} is more than {cap}, {why}")


def _check(s: DecodeSettings) -> None:
    """The bounds and rules every decode's settings keep, as one-line errors."""
    for key in ("beam_size", "batch_size"):
        if getattr(s, key) < 1:
            raise UserError(f"--decode_hparams: {key}={getattr(s, key)} must be >= 1")
    _at_most("beam_size", s.beam_size, MAX_BEAM_SIZE, "the most hypotheses a beam search keeps")
    for key in ("max_decode_length", "max_input_length", "extra_length", "top_k"):
        if getattr(s, key) < 0:
            raise UserError(f"--decode_hparams: {key}={getattr(s, key)} must be >= 0")
    for key in ("alpha", "temperature"):
        if not math.isfinite(getattr(s, key)):
            raise UserError(f"--decode_hparams: {key}={getattr(s, key)} must be a finite number")
    if s.temperature < 0:
        raise UserError(f"--decode_hparams: temperature={s.temperature} must be >= 0")
    if s.num_samples < -1:
        raise UserError(f"--decode_hparams: num_samples={s.num_samples} must be >= 0 (or -1: every line)")
    if s.beam_size > 1 and (s.temperature > 0 or s.top_k > 0):
        raise UserError("--decode_hparams: beam search (beam_size > 1) does not sample; drop temperature/top_k")
    if not s.delimiter:
        raise UserError("--decode_hparams: delimiter must not be empty")
    if s.engine not in ENGINES:
        raise UserError(f"--decode_hparams: engine={s.engine} is not one of {', '.join(ENGINES)}")
    ct2.known_quantization(s.quantization)


def length_cap(model_hparams: HParams | None) -> int:
    """The most tokens an input or a decode may hold: MAX_LENGTH, or the model's own lengths where longer."""
    if model_hparams is None:
        return MAX_LENGTH
    return max(MAX_LENGTH, int(model_hparams.inputs_length), int(model_hparams.targets_length))


def default_decode_hparams(model_hparams: HParams | None = None) -> HParams:
    """Settings of --decode_hparams, starting from the model's own decode hparams."""
    hp = HParams(**{key: hparams.SCHEMA[key][0] for key in DECODE_KEYS}, **DECODE_FLAG_DEFAULTS)
    for key in DECODE_KEYS:
        if model_hparams is not None and key in model_hparams:
            hp.set_hparam(key, model_hparams.get(key))
    return hp


def parse_decode_hparams(
    text: str, model_hparams: HParams | None = None, vocab_size: int | None = None
) -> DecodeSettings:
    """--decode_hparams over the model's decode settings, checked once against sane bounds
    and the model (its lengths, its vocabulary of `vocab_size` where given)."""
    hp = default_decode_hparams(model_hparams).parse(text)
    values = hp.values()
    max_input_size = values.pop("max_input_size")
    if not isinstance(max_input_size, int) or isinstance(max_input_size, bool) or max_input_size < -1:
        raise UserError(f"--decode_hparams: max_input_size={max_input_size!r} must be >= 0 (or -1: the model's own)")
    settings = DecodeSettings(**values)
    if max_input_size > 0 and not settings.max_input_length:
        settings = settings.replace(max_input_length=max_input_size)
    cap = length_cap(model_hparams)
    why = "the most tokens a decode reads or writes (or the model's own lengths, where longer)"
    for key in ("max_input_length", "max_decode_length", "extra_length"):
        _at_most(key, getattr(settings, key), cap, why)
    if settings.extra_length and not settings.max_decode_length:
        inputs = settings.max_input_length or int(model_hparams.inputs_length if model_hparams else 0)
        length = inputs + settings.extra_length
        if length > cap:
            raise UserError(
                f"--decode_hparams: extra_length={settings.extra_length} over the {inputs}-token inputs decodes "
                f"{length} tokens, more than {cap}, {why}"
            )
        settings = settings.replace(max_decode_length=length)
    if vocab_size is not None and settings.top_k > vocab_size:
        raise UserError(f"--decode_hparams: top_k={settings.top_k} is more than the vocabulary's {vocab_size} tokens")
    return settings


def refuse_beam_output(settings: DecodeSettings, why: str) -> None:
    """t2t-decode's output forms return_beams and write_beam_scores, refused elsewhere in one line."""
    for key in ("return_beams", "write_beam_scores"):
        if getattr(settings, key):
            raise UserError(f"--decode_hparams: {key} is t2t-decode's; {why}")


def batch_split(config: ModelConfig) -> int:
    """The ways the model's mesh splits a batch: a batch smaller than asked for is a multiple of it."""
    return config.mesh.split_of("batch")


def tf_engine(config: ModelConfig, requested: str) -> tuple[str, str]:
    """(fast or mesh, why) for a TF engine `requested` (auto, fast or mesh) on this mesh:
    t2tcli.decode.fast on one device, mesh-tensorflow's decode loop on TPUs and meshes
    of several devices."""
    size = config.mesh.size
    if requested == "mesh":
        return "mesh", "asked for"
    if not config.use_tpu and size == 1:
        return "fast", "asked for" if requested == "fast" else "one device"
    where = "on TPU" if config.use_tpu else f"on the {size}-device mesh_shape={config.hparams.mesh_shape}"
    if requested == "fast":
        raise UserError(f"decode engine=fast does not run {where}; use engine=auto or engine=mesh")
    return "mesh", where


def for_model_fn(config: ModelConfig, decode: DecodeSettings | Mapping[str, Any] | None) -> DecodeSettings:
    """The settings a decoding Estimator's PREDICT reads: `decode` (a mapping: over the
    hparams' decode settings), with the engine resolved to fast or mesh. The model_fn's
    engines run the activation dtype; `quantization` is CTranslate2's and is not read."""
    settings = DecodeSettings.of(decode, config.hparams)
    if settings.engine not in TF_ENGINES:
        raise UserError(f"decode engine={settings.engine!r}: the model_fn runs one of {', '.join(TF_ENGINES)}")
    engine, why = tf_engine(config, settings.engine)
    if engine == "mesh" and settings.engine == "auto":
        logging.info("decoding with mesh-tensorflow's decode loop (%s)", why)
    return settings.replace(engine=engine)


def choose(model: LoadedModel, decode: DecodeSettings | Mapping[str, Any], scoring: bool = False) -> tuple[str, str]:
    """(engine, why) for the decode settings' `engine` on this machine: the one place
    engine=auto is resolved for a decode outside an Estimator (t2tcli.decode.engines).

    auto takes CTranslate2 on a CPU when it is installed and gives what the TF engines
    give (greedy decoding, sampling, scoring in float32; its beam search may end a
    hypothesis differently from T5's, so beam search stays on TensorFlow, which keeps
    pace with CTranslate2's float32 beam search where both are bound by their GEMMs), the
    fast engine on one device otherwise, and mesh-tensorflow's on meshes. Where the
    activation dtype resolves to bfloat16 (a CPU that runs it natively), the fast engine
    stays: in bfloat16 it decodes faster than CTranslate2 float32 (BENCHMARKS.md), and
    CTranslate2's float32 would not give its answers.
    """
    config = model.config
    hp = config.hparams
    decode = DecodeSettings.of(decode, hp)
    requested = decode.engine
    if decode.return_beams and not scoring:
        if requested not in ("auto", "fast") or config.mesh.size > 1:
            raise UserError(
                f"--decode_hparams: return_beams runs on the fast engine, one device; not engine={requested}"
            )
        return "fast", "return_beams: every beam of the fast engine's beam search"
    if requested == "auto" and decode.quantization != "float32":
        requested = "ctranslate2"  # a quantization is CTranslate2's to run
    reason = ct2.unsupported_reason(hp, decode)
    if requested == "ctranslate2":
        ct2.module()
        if config.mesh.size > 1:
            raise UserError(f"decode engine=ctranslate2 runs one device, not mesh_shape={hp.mesh_shape}")
        if reason and reason != ct2.PENALTY_DIFFERS:  # that one is a warning (engines.predictor)
            raise UserError(f"decode engine=ctranslate2: {reason}; use engine=fast")
        return "ctranslate2", "asked for"
    if requested != "auto" or config.mesh.size > 1:
        return tf_engine(config, requested)
    if config.machine.device == "gpu":
        return "fast", "a GPU"
    if config.activation_dtype == "bfloat16":
        if hardware.native_bfloat16(config.machine)[0]:
            return "fast", "bfloat16 runs natively on this CPU, where the TF engine outruns CTranslate2 float32"
        return "fast", "activation_dtype=bfloat16, which CTranslate2 float32 would not reproduce"
    if not ct2.available():
        return "fast", f"one CPU; CTranslate2 is not installed ({ct2.INSTALL_HINT} adds it)"
    if decode.beam_size > 1 and not scoring:
        return "fast", "beam search: CTranslate2's may end hypotheses otherwise than T5's"
    if reason:
        return "fast", reason
    return "ctranslate2", "one CPU, CTranslate2 installed"
