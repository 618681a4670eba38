"""A decode's settings, from their defaults to the engine that runs them.

Every binary that decodes (t2t-decode, t2t-eval, t2t-export) and every decoding
Estimator (t2tcli.decode.tf_predict) reads its settings through here, so each default
has one home, each rule is checked by one function and `engine=auto` is resolved by one
function; the engine chosen travels on in the settings dict, which the model_fn then
only reads.

Imports: core, model and decode (ct2); ct2 for what CTranslate2 can run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from absl import logging

from t2tcli import hparams
from t2tcli.decode import ct2
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.model import activation_dtype

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
    # CTranslate2's weight type: float32 (the TF engines' results), int8, bfloat16, ...
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


def default_decode_hparams(model_hparams: HParams | None = None) -> HParams:
    """Settings of --decode_hparams, starting from the model's own decode hparams."""
    hp = HParams(**{key: hparams.SCHEMA[key][0] for key in DECODE_KEYS}, **DECODE_FLAG_DEFAULTS)
    for key in DECODE_KEYS:
        if model_hparams is not None and key in model_hparams:
            hp.set_hparam(key, model_hparams.get(key))
    return hp


def check(values: Mapping[str, Any]) -> None:
    """The rules every decode's settings keep, as one-line errors."""
    for key in ("beam_size", "batch_size"):
        if key in values and values[key] < 1:
            raise UserError(f"--decode_hparams: {key}={values[key]} must be >= 1")
    if values["temperature"] < 0 or values["top_k"] < 0:
        raise UserError("--decode_hparams: temperature and top_k must be >= 0")
    if values["beam_size"] > 1 and (values["temperature"] > 0 or values["top_k"] > 0):
        raise UserError("--decode_hparams: beam search (beam_size > 1) does not sample; drop temperature/top_k")


def parse_decode_hparams(text: str, model_hparams: HParams | None = None) -> HParams:
    """--decode_hparams over the model's decode settings, checked for contradictions."""
    hp = default_decode_hparams(model_hparams).parse(text)
    check(hp.values())
    if hp.max_input_size > 0 and not hp.max_input_length:
        hp.max_input_length = hp.max_input_size
    if hp.extra_length < 0:
        raise UserError(f"--decode_hparams: extra_length={hp.extra_length} must be >= 0")
    if hp.extra_length and not hp.max_decode_length:
        hp.max_decode_length = (
            hp.max_input_length or int(model_hparams.inputs_length if model_hparams else 0)
        ) + hp.extra_length
    if not hp.delimiter:
        raise UserError("--decode_hparams: delimiter must not be empty")
    if hp.engine not in ENGINES:
        raise UserError(f"--decode_hparams: engine={hp.engine} is not one of {', '.join(ENGINES)}")
    ct2.known_quantization(hp.quantization)
    return hp


def refuse_beam_output(hp: HParams, why: str) -> None:
    """t2t-decode's output forms return_beams and write_beam_scores, refused elsewhere in one line."""
    for key in ("return_beams", "write_beam_scores"):
        if hp.get(key):
            raise UserError(f"--decode_hparams: {key} is t2t-decode's; {why}")


def estimator_params(hp: HParams) -> dict[str, Any]:
    """The decode settings the engines read, from --decode_hparams."""
    return {k: hp.get(k) for k in (*DECODE_KEYS, "engine", "quantization", "return_beams")}


def tf_engine(hp: HParams, requested: str, use_tpu: bool = False) -> tuple[str, str]:
    """(fast or mesh, why) for a TF engine `requested` (auto, fast or mesh) on this mesh:
    t2tcli.decode.fast on one device, mesh-tensorflow's decode loop on TPUs and meshes
    of several devices."""
    from t2tcli.model import mesh as meshlib

    spec = meshlib.spec_from_hparams(hp)
    if requested == "mesh":
        return "mesh", "asked for"
    if not use_tpu and spec.size == 1:
        return "fast", "asked for" if requested == "fast" else "one device"
    where = "on TPU" if use_tpu else f"on the {spec.size}-device mesh_shape={hp.mesh_shape}"
    if requested == "fast":
        raise UserError(f"decode engine=fast does not run {where}; use engine=auto or engine=mesh")
    return "mesh", where


def for_model_fn(hp: HParams, decode: Mapping[str, Any] | None, use_tpu: bool) -> dict[str, Any]:
    """The settings a decoding Estimator's PREDICT reads: `decode` over the hparams' decode
    settings, checked, with the engine resolved to fast or mesh."""
    settings = {k: hp.get(k) for k in DECODE_KEYS}
    settings.update(compute_scores=True, engine=DECODE_FLAG_DEFAULTS["engine"])
    settings.update(decode or {})
    settings.pop("quantization", None)  # CTranslate2's; the model_fn's engines run the activation dtype
    check(settings)
    if settings["engine"] not in TF_ENGINES:
        raise UserError(f"decode engine={settings['engine']!r}: the model_fn runs one of {', '.join(TF_ENGINES)}")
    engine, why = tf_engine(hp, settings["engine"], use_tpu)
    if engine == "mesh" and settings["engine"] == "auto":
        logging.info("decoding with mesh-tensorflow's decode loop (%s)", why)
    settings["engine"] = engine
    return settings


def choose(model: LoadedModel, decode: Mapping[str, Any], scoring: bool = False) -> tuple[str, str]:
    """(engine, why) for the decode settings' `engine` on this machine: the one place
    engine=auto is resolved for a decode outside an Estimator (t2tcli.decode.engines).

    auto takes CTranslate2 on a CPU when it is installed and gives what the TF engines
    give (greedy decoding, sampling, scoring in float32; its beam search may end a
    hypothesis differently from T5's, so beam search stays on TensorFlow, which ran beam
    4 at 0.95-1.08x CTranslate2's float32 beam search on a 2-core AVX2-only CPU, each
    bound by its GEMMs there, TensorFlow's then on Eigen), the fast engine on one
    device otherwise, and mesh-tensorflow's on meshes. Where the activation dtype
    resolves to bfloat16 (a CPU that runs it natively), the fast engine stays: in bfloat16 it decoded t5_small about
    twice as fast as CTranslate2 float32 on a 2-core AVX512-BF16 CPU (bench/decode.py),
    and CTranslate2's float32 would not give its answers.
    """
    from t2tcli.model import mesh as meshlib

    hp = model.hparams
    requested = decode.get("engine", "auto")
    if decode.get("return_beams") and not scoring:
        if requested not in ("auto", "fast") or meshlib.spec_from_hparams(hp).size > 1:
            raise UserError(
                f"--decode_hparams: return_beams runs on the fast engine, one device; not engine={requested}"
            )
        return "fast", "return_beams: every beam of the fast engine's beam search"
    if requested == "auto" and decode.get("quantization", "float32") != "float32":
        requested = "ctranslate2"  # a quantization is CTranslate2's to run
    spec = meshlib.spec_from_hparams(hp)
    reason = ct2.unsupported_reason(hp, decode)
    if requested == "ctranslate2":
        ct2.module()
        if spec.size > 1:
            raise UserError(f"decode engine=ctranslate2 runs one device, not mesh_shape={hp.mesh_shape}")
        if reason and "length penalty" in reason:
            logging.warning("engine=ctranslate2: %s; its penalty (score / length ** alpha) is used", reason)
        elif reason:
            raise UserError(f"decode engine=ctranslate2: {reason}; use engine=fast")
        return "ctranslate2", "asked for"
    if requested != "auto" or spec.size > 1:
        return tf_engine(hp, requested)
    if meshlib.num_gpus():
        return "fast", "a GPU"
    if activation_dtype.resolve(hp.activation_dtype) == "bfloat16":
        return "fast", "bfloat16 runs natively on this CPU, where the TF engine outruns CTranslate2 float32"
    if not ct2.available():
        return "fast", f"one CPU; CTranslate2 is not installed ({ct2.INSTALL_HINT} adds it)"
    if int(decode.get("beam_size", 1)) > 1 and not scoring:
        return "fast", "beam search: CTranslate2's may end hypotheses otherwise than T5's"
    if reason:
        return "fast", reason
    return "ctranslate2", "one CPU, CTranslate2 installed"
