"""Metrics against values computed by hand."""

from __future__ import annotations

import math

import pytest

from t2tcli.errors import UserError
from t2tcli.evaluate import metrics


def test_sequence_accuracy():
    assert metrics.sequence_accuracy(["a b", "c", "d"], ["a b", "x", "d"]) == {
        "sequence_accuracy": pytest.approx(200 / 3)
    }


def test_token_accuracy_counts_missing_and_extra_tokens():
    # ex1: 2 of 3 positions (missing token); ex2: 1 of 2 positions (extra token); ex3: empty == empty.
    got = metrics.accuracy(["a b c", "x", ""], ["a b", "x y", ""])
    assert got["accuracy"] == pytest.approx(100 * (2 + 1 + 1) / (3 + 2 + 1))


def test_f1_macro_by_hand():
    targets = ["yes", "yes", "yes", "no", "no"]
    preds = ["yes", "no", "maybe", "no", "yes"]
    # yes: tp=1 fp=1 fn=2 -> 2/5; no: tp=1 fp=1 fn=1 -> 2/4.
    assert metrics.f1(targets, preds)["f1"] == pytest.approx(100 * (0.4 + 0.5) / 2)


def test_bleu_perfect_and_hand_computed():
    assert metrics.bleu(["the cat sat on the mat"], ["the cat sat on the mat"])["bleu"] == pytest.approx(100.0)
    # Hypothesis "a b c d" vs reference "a b c e": precisions 3/4, 2/3, 1/2, 0/1 -> smoothed
    # with sacreBLEU's default 'exp' smoothing: the 4-gram precision becomes 1/(2*1).
    p = [3 / 4, 2 / 3, 1 / 2, 1 / 2]
    expected = 100 * math.exp(sum(math.log(x) for x in p) / 4)
    assert metrics.bleu(["a b c e"], ["a b c d"])["bleu"] == pytest.approx(expected, rel=1e-6)


def test_rouge_hand_computed():
    # Unigram overlap 2 of 3 on both sides -> P = R = F = 2/3; bigram overlap 1 of 2 -> 1/2.
    got = metrics.rouge(["the cat sat"], ["the cat ran"])
    assert got["rouge1"] == pytest.approx(200 / 3)
    assert got["rouge2"] == pytest.approx(50.0)
    assert got["rougeLsum"] == pytest.approx(200 / 3)


def test_compute_merges_and_rejects_unknown():
    got = metrics.compute(["accuracy", "sequence_accuracy"], ["a"], ["a"])
    assert got == {"accuracy": 100.0, "sequence_accuracy": 100.0}
    with pytest.raises(UserError, match="did you mean 'bleu'"):
        metrics.compute(["bleuu"], ["a"], ["a"])


def test_perplexity():
    assert metrics.perplexity(math.log(7.0)) == pytest.approx(7.0)
    assert metrics.perplexity(1e6) == math.inf


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError):
        metrics.sequence_accuracy(["a"], [])
