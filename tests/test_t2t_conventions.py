"""tensor2tensor's walkthrough conventions: --tmp_dir as scratch, trainer schedules, decode
file names, t2t-bleu over a directory of decodes."""

from __future__ import annotations

import logging

import pytest
from conftest import run_binary
from test_faults import assert_fails_in_one_line

from t2tcli import registry
from t2tcli.cli import bleu_dir, schedules, scratch, t2t_decodes
from t2tcli.errors import UserError


def test_tmp_dir_without_the_raw_file_falls_back_to_the_shipped_data(tmp_path, caplog):
    problem = registry.problem("translate_en_es")
    with caplog.at_level(logging.INFO):
        assert scratch.raw_dir_for(problem, str(tmp_path)) is None
    said = [r.getMessage() for r in caplog.records if "reading the data the problem ships" in r.getMessage()]
    assert said == [f"problem translate_en_es: translate_en_es.csv is not in --tmp_dir={tmp_path}; "
                    "reading the data the problem ships instead"]  # fmt: skip
    assert registry.problem("translate_en_es").source(None).path.endswith("translate_en_es.csv")


def test_tmp_dir_holding_the_raw_file_is_read(tmp_path, caplog):
    (tmp_path / "translate_en_es.csv").write_text("id,book,chapter,verse,english,spanish\n1,a,1,1,Hi,Hola\n")
    with caplog.at_level(logging.INFO):
        assert scratch.raw_dir_for(registry.problem("translate_en_es"), str(tmp_path)) == str(tmp_path)
    assert not caplog.records
    # Generated data reads no files; a problem that ships nothing still needs its tmp_dir.
    assert scratch.raw_dir_for(registry.problem("copy_sequence"), str(tmp_path)) == str(tmp_path)
    assert scratch.raw_dir_for(registry.problem("translate_en_es"), None) is None


def test_a_mixture_falls_back_only_when_every_component_can(tmp_path):
    assert scratch.raw_dir_for(registry.problem("qp_all"), str(tmp_path)) is None
    (tmp_path / "train.csv").write_text("id,qid1,qid2,question1,question2,is_duplicate\n")
    assert scratch.raw_dir_for(registry.problem("qp_all"), str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize(
    ("given", "prog", "eval_flags", "expected"),
    [
        (None, "t2t-trainer", False, "continuous_train_and_eval"),
        (None, "t2t-train", False, "train"),
        (None, "t2t-train", True, "train_and_evaluate"),
        ("train", "t2t-trainer", True, "train"),
        ("continuous_eval", "t2t-train", False, "continuous_eval"),
    ],
)
def test_schedule_defaults(given, prog, eval_flags, expected):
    assert schedules.resolve(given, prog, eval_flags) == expected


def test_every_t2t_schedule_runs_or_is_refused_naming_it():
    for name in ("train", "train_and_evaluate", "continuous_train_and_eval", "test"):
        assert schedules.TRAINER[name] in ("train", "train_and_evaluate")
    for name in schedules.REFUSED:
        with pytest.raises(UserError, match=rf"^--schedule={name} is not a t2t-trainer schedule here: "):
            schedules.resolve(name, "t2t-trainer", False)
    with pytest.raises(UserError, match="did you mean 'continuous_train_and_eval'"):
        schedules.resolve("continous_train_and_eval", "t2t-trainer", False)


def test_a_refused_schedule_is_one_line_and_writes_nothing(tmp_path):
    refused = run_binary("t2t-trainer", "--schedule=continuous_decode", f"--output_dir={tmp_path / 'run'}")
    assert_fails_in_one_line(refused, "--schedule=continuous_decode is not a t2t-trainer schedule", "t2t-decoder")
    assert not (tmp_path / "run").exists()


def test_t2t_decodes_file_names():
    name = t2t_decodes.decodes_filename("in.txt", "transformer", "transformer_tiny", "translate_en_es", 4, 0.6)
    assert name == "in.txt.transformer.transformer_tiny.translate_en_es.beam4.alpha0.6.decodes"
    assert t2t_decodes.decodes_filename(name, "transformer", "x", "y", 4, 0.6) == name, "already named: kept"
    assert t2t_decodes.decodes_filename("in.txt", "m", "h", "p", 1, 1) == "in.txt.m.h.p.beam1.alpha1.0.decodes"
    assert t2t_decodes.sibling(name, "targets").endswith(".beam4.alpha0.6.targets")


def _events(event_dir) -> dict[str, list[tuple[int, float]]]:
    from t2tcli.compat import tf

    found: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(event_dir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                number = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                found.setdefault(value.tag, []).append((event.step, round(number, 2)))
    return found


def test_bleu_variant_prints_only_that_bleu(tmp_path):
    (tmp_path / "hyp.txt").write_text("The cat sat on the mat.\n")
    (tmp_path / "ref.txt").write_text("the cat sat on the mat.\n")
    args = [f"--translation={tmp_path / 'hyp.txt'}", f"--reference={tmp_path / 'ref.txt'}"]
    uncased = run_binary("t2t-bleu", *args, "--bleu_variant=uncased")
    assert uncased.returncode == 0 and uncased.stdout == "BLEU_uncased = 100.00\n", uncased.stderr
    cased = run_binary("t2t-bleu", *args, "--bleu_variant=cased")
    assert cased.stdout.startswith("BLEU_cased = ") and len(cased.stdout.splitlines()) == 1
    both = run_binary("t2t-bleu", *args, f"--translations_dir={tmp_path}")
    assert_fails_in_one_line(both, "--translation and --translations_dir: give one of them")


def test_bleu_translations_dir_writes_events_once_per_step(tmp_path):
    decodes, events = tmp_path / "decodes", tmp_path / "events"
    decodes.mkdir()
    (tmp_path / "ref.txt").write_text("the cat sat on the mat\na dog ran in the park today\n")
    (decodes / "translation-100").write_text("a cat sat on a mat\nthe dog ran to the park\n")
    (decodes / "translation-200").write_text("the cat sat on the mat\na dog ran in the park today\n")
    (decodes / "notes.txt").write_text("not a decode\n")
    args = [f"--translations_dir={decodes}", f"--reference={tmp_path / 'ref.txt'}", f"--event_dir={events}"]
    done = run_binary("t2t-bleu", *args, "--bleu_variant=uncased", "--tag_suffix=_beam4")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split(": ")[0] for line in done.stdout.splitlines()] == [
        str(decodes / "translation-100"),
        str(decodes / "translation-200"),
    ]
    recorded = _events(events)
    assert list(recorded) == ["BLEU_uncased_beam4"]
    steps = recorded["BLEU_uncased_beam4"]
    assert [step for step, _ in steps] == [0, 100, 200] and steps[0][1] == 0.0, "report_zero from step 0"
    assert 0 < steps[1][1] < 100 and steps[2][1] == 100.0
    assert (events / bleu_dir.LAST_STEP_FILE).read_text() == "200\n"
    (decodes / "translation-300").write_text("the cat\na dog\n")
    again = run_binary("t2t-bleu", *args)
    assert (
        again.returncode == 0
        and [line.split(": ")[0] for line in again.stdout.splitlines()] == [str(decodes / "translation-300")] * 2
    ), "only the new step, both variants"
    (decodes / "translation-400").write_text("one line\n")
    short = run_binary("t2t-bleu", *args)
    assert_fails_in_one_line(short, "translation-400: 1 translated lines but 2 reference lines")


def test_bleu_needs_a_translation_or_a_directory(tmp_path):
    (tmp_path / "ref.txt").write_text("x\n")
    missing = run_binary("t2t-bleu", f"--reference={tmp_path / 'ref.txt'}")
    assert_fails_in_one_line(missing, "--translation=FILE or --translations_dir=DIR is required")
    no_dir = run_binary(
        "t2t-bleu",
        f"--translations_dir={tmp_path / 'none'}",
        f"--reference={tmp_path / 'ref.txt'}",
        f"--event_dir={tmp_path / 'ev'}",
    )
    assert_fails_in_one_line(no_dir, f"--translations_dir={tmp_path / 'none'}: no such directory")
