"""Text metrics that t2t-eval computes on postprocessed predictions.

Every metric takes aligned lists of target and prediction strings (after the
problem's `postprocess`) and returns named scores on a 0-100 scale, so a table of
BLEU, ROUGE and accuracy reads on one scale. BLEU and ROUGE are delegated to
sacreBLEU and rouge-score so numbers match what papers report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from t2tcli.errors import UserError, did_you_mean

MetricFn = Callable[[Sequence[str], Sequence[str]], dict[str, float]]


def sequence_accuracy(targets: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    """Percentage of predictions exactly equal to their target."""
    _check(targets, predictions)
    if not targets:
        return {"sequence_accuracy": 0.0}
    hits = sum(t == p for t, p in zip(targets, predictions, strict=True))
    return {"sequence_accuracy": 100.0 * hits / len(targets)}


def accuracy(targets: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    """Per-token accuracy over whitespace tokens, compared position by position.

    Each example counts max(len(target), len(prediction)) positions, so missing and
    extra tokens are both errors. For single-token outputs (class labels) this is the
    plain classification accuracy.
    """
    _check(targets, predictions)
    hits = total = 0
    for t, p in zip(targets, predictions, strict=True):
        tt, pp = t.split(), p.split()
        if not tt and not pp:
            hits, total = hits + 1, total + 1
            continue
        hits += sum(a == b for a, b in zip(tt, pp, strict=False))
        total += max(len(tt), len(pp))
    return {"accuracy": 100.0 * hits / total if total else 0.0}


def f1(targets: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    """Macro-averaged F1 over the classes that occur in the targets.

    A prediction outside those classes (an invalid label) counts as wrong for the
    target's class and is not itself a class, as T5 scores classification.
    """
    _check(targets, predictions)
    classes = sorted(set(targets))
    if not classes:
        return {"f1": 0.0}
    scores = []
    for c in classes:
        tp = sum(t == c and p == c for t, p in zip(targets, predictions, strict=True))
        fp = sum(t != c and p == c for t, p in zip(targets, predictions, strict=True))
        fn = sum(t == c and p != c for t, p in zip(targets, predictions, strict=True))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return {"f1": 100.0 * sum(scores) / len(scores)}


def bleu(targets: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    """Corpus BLEU with sacreBLEU's default (13a) tokenization, one reference."""
    import sacrebleu

    _check(targets, predictions)
    if not targets:
        return {"bleu": 0.0}
    return {"bleu": float(sacrebleu.corpus_bleu(list(predictions), [list(targets)]).score)}


def rouge(targets: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    """Mean ROUGE-1, ROUGE-2 and ROUGE-Lsum F-measures (rouge-score, Porter stemming)."""
    from rouge_score import rouge_scorer

    _check(targets, predictions)
    kinds = ("rouge1", "rouge2", "rougeLsum")
    if not targets:
        return dict.fromkeys(kinds, 0.0)
    scorer = rouge_scorer.RougeScorer(list(kinds), use_stemmer=True)
    sums = dict.fromkeys(kinds, 0.0)
    for t, p in zip(targets, predictions, strict=True):
        # rougeLsum splits summaries on newlines; each line is a sentence.
        scores = scorer.score(t, p)
        for k in kinds:
            sums[k] += scores[k].fmeasure
    return {k: 100.0 * v / len(targets) for k, v in sums.items()}


METRICS: dict[str, MetricFn] = {
    "accuracy": accuracy,
    "sequence_accuracy": sequence_accuracy,
    "f1": f1,
    "bleu": bleu,
    "rouge": rouge,
}


def t2t_bleu_lines(translation: Sequence[str], reference: Sequence[str]) -> list[str]:
    """tensor2tensor's t2t-bleu output for these sentences: BLEU with sacreBLEU's
    international tokenization (T2T's bleu_tokenize), lowercased and cased."""
    import sacrebleu

    if len(translation) != len(reference):
        raise UserError(f"{len(translation)} translated lines but {len(reference)} reference lines")
    scores = {
        case: sacrebleu.corpus_bleu(list(translation), [list(reference)], tokenize="intl", lowercase=case == "uncased")
        for case in ("uncased", "cased")
    }
    return [f"BLEU_{case} = {score.score:6.2f}" for case, score in scores.items()]


def token_accuracy(targets: Sequence[Sequence[int]], predictions: Sequence[Sequence[int]]) -> dict[str, float]:
    """Percentage of target vocabulary tokens the decode has at the same position.

    Compared on ids, not text, so it counts what the model was trained to emit (a
    sentinel is one token); each example counts max(len(target), len(prediction))
    positions, so a decode too short or too long loses the difference.
    """
    if len(targets) != len(predictions):
        raise ValueError(f"{len(targets)} targets but {len(predictions)} predictions")
    hits = total = 0
    for t, p in zip(targets, predictions, strict=True):
        hits += sum(a == b for a, b in zip(t, p, strict=False))
        total += max(len(t), len(p))
    return {"token_accuracy": 100.0 * hits / total if total else 0.0}


# Metrics computed on token ids (without EOS) rather than on postprocessed text.
ID_METRICS: dict[str, Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], dict[str, float]]] = {
    "token_accuracy": token_accuracy,
}


def check_names(names: Sequence[str], where: str) -> None:
    """Fails early, before any decoding, on a metric name nobody implements."""
    known = {**METRICS, **ID_METRICS}
    for name in names:
        if name not in known:
            raise UserError(f"{where}: unknown metric '{name}'{did_you_mean(name, known)}")


def compute(names: Sequence[str], targets: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    """All requested text metrics, merged into one name -> score dict (id metrics: `compute_ids`)."""
    check_names(names, "metrics")
    out: dict[str, float] = {}
    for name in names:
        if name in METRICS:
            out.update(METRICS[name](targets, predictions))
    return out


def compute_ids(
    names: Sequence[str], targets: Sequence[Sequence[int]], predictions: Sequence[Sequence[int]]
) -> dict[str, float]:
    """The requested metrics that compare token ids."""
    out: dict[str, float] = {}
    for name in names:
        if name in ID_METRICS:
            out.update(ID_METRICS[name](targets, predictions))
    return out


def perplexity(loss: float) -> float:
    """exp(mean per-token cross-entropy); inf rather than an overflow error."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def _check(targets: Sequence[str], predictions: Sequence[str]) -> None:
    if len(targets) != len(predictions):
        raise ValueError(f"{len(targets)} targets but {len(predictions)} predictions")
