"""Flag values and inputs that would take all memory, refused or bounded without a model:
decode settings checked once, batches never padded past their rows, lines read in
bounded pieces, compressed input bounded in what it inflates to, FIFOs refused."""

from __future__ import annotations

import gzip
import io
import os
import threading

import numpy as np
import pytest

from t2tcli.decode import batching, settings
from t2tcli.decode import lines as decode_lines
from t2tcli.decode.settings import DecodeSettings
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.io import text_files
from t2tcli.model import config as model_config


def model_hparams(inputs_length: int = 128, targets_length: int = 128) -> HParams:
    return HParams(
        beam_size=1,
        alpha=0.6,
        temperature=0.0,
        top_k=0,
        max_decode_length=0,
        inputs_length=inputs_length,
        targets_length=targets_length,
    )


@pytest.mark.parametrize(
    "flag, message",
    [
        ("max_decode_length=100000000", "max_decode_length=100000000 is more than 16384"),
        ("extra_length=1000000000", "extra_length=1000000000 is more than 16384"),
        ("extra_length=16300", "extra_length=16300 over the 128-token inputs decodes 16428 tokens, more than 16384"),
        ("max_input_length=-7", "max_input_length=-7 must be >= 0"),
        ("max_input_length=100000000", "max_input_length=100000000 is more than 16384"),
        ("max_input_size=-7", "max_input_size=-7 must be >= 0"),
        ("max_decode_length=-1", "max_decode_length=-1 must be >= 0"),
        ("extra_length=-3", "extra_length=-3 must be >= 0"),
        ("batch_size=0", "batch_size=0 must be >= 1"),
        ("beam_size=1000000000", "beam_size=1000000000 is more than 128"),
        ("beam_size=0", "beam_size=0 must be >= 1"),
        ("num_samples=-5", "num_samples=-5 must be >= 0"),
        ("alpha=nan", "alpha=nan must be a finite number"),
        ("temperature=inf", "temperature=inf must be a finite number"),
        ("top_k=-1", "top_k=-1 must be >= 0"),
        ("top_k=100000", "top_k=100000 is more than the vocabulary's 32 tokens"),
    ],
)
def test_a_hostile_decode_hparam_is_one_line_naming_it(flag, message):
    with pytest.raises(UserError) as caught:
        settings.parse_decode_hparams(flag, model_hparams(), vocab_size=32)
    text = str(caught.value)
    assert message in text and "\n" not in text
    assert text.startswith(f"--decode_hparams: {flag.split('=')[0]}")


def test_decode_settings_are_one_frozen_checked_type():
    parsed = settings.parse_decode_hparams("beam_size=4,alpha=0.5,batch_size=1000000000", model_hparams())
    assert isinstance(parsed, DecodeSettings)
    assert parsed.batch_size == 1_000_000_000, "a large batch is clamped to the rows read, not refused"
    with pytest.raises(AttributeError):
        parsed.beam_size = 2  # type: ignore[misc]
    assert parsed.replace(compute_scores=False).compute_scores is False
    with pytest.raises(UserError, match="beam_size=0 must be >= 1"):
        parsed.replace(beam_size=0)
    # A model trained on longer texts may decode at its own length.
    long_model = model_hparams(inputs_length=32768, targets_length=32768)
    assert settings.parse_decode_hparams("max_decode_length=32768", long_model).max_decode_length == 32768
    # extra_length resolves to a decode length once, at parse time.
    assert settings.parse_decode_hparams("extra_length=10", model_hparams()).max_decode_length == 138
    # Library callers: a mapping over the model's own settings, typed and checked the same way.
    of = DecodeSettings.of({"beam_size": 2.0, "engine": "fast"}, model_hparams())
    assert (of.beam_size, of.alpha, of.engine) == (2, 0.6, "fast") and type(of.beam_size) is int
    with pytest.raises(UserError, match="unknown beams"):
        DecodeSettings.of({"beams": 2})
    with pytest.raises(UserError, match="beam_size=2.5 must be an int"):
        DecodeSettings.of({"beam_size": 2.5})
    with pytest.raises(UserError, match="max_decode_length=-2 must be >= 0"):
        DecodeSettings(max_decode_length=-2)


def test_a_model_fn_gets_typed_settings_with_the_engine_resolved():
    from t2tcli import hparams

    hp = hparams.defaults()
    resolved = settings.for_model_fn(model_config.build(hp, 40), {"beam_size": 3})
    assert isinstance(resolved, DecodeSettings) and resolved.engine == "fast" and resolved.beam_size == 3


def rows(n: int) -> list[batching.Row]:
    return [batching.Row(i, [5 + i, 6]) for i in range(n)]


def test_a_batch_is_never_padded_past_the_rows_there_are():
    batcher = batching.Batcher(iter(rows(2)), 1_000_000_000, 8, None)
    assert batcher.shapes() == {"inputs": (2, 8)}
    batches = list(batcher())
    assert [b["inputs"].shape for b in batches] == [(2, 8)]
    assert list(batcher.plan) == sorted(rows(2), key=lambda r: -len(r.inputs))
    # A mesh that splits the batch 4 ways gets a batch it can split.
    assert batching.Batcher(iter(rows(2)), 64, 8, None, batch_multiple=4).batch_size == 4
    assert batching.Batcher(iter(rows(5)), 6, 8, None, batch_multiple=4).batch_size == 6
    # As many rows as asked for, or more: the batch size asked for.
    many = batching.Batcher(iter(rows(7)), 3, 8, None)
    assert many.batch_size == 3 and [b["inputs"].shape[0] for b in many()] == [3, 3, 3]
    assert batching.Batcher(iter(rows(0)), 64, 8, None).batch_size == 1


def test_a_huge_batch_size_decodes_a_few_lines_in_a_batch_of_their_size():
    from test_decode_unit import ReversingModel, job

    model = ReversingModel()
    out = io.StringIO()
    decode_lines.run(["abc", "", "de"], out, job(batch_size=1_000_000_000), model)
    assert out.getvalue() == "cba\n\ned\n"
    assert [b["inputs"].shape for b in model.batches] == [(2, 16)]


def test_a_batch_of_one_reads_nothing_ahead():
    """--decode_interactive: the graph is built before the first line is typed."""

    def never():
        raise AssertionError("read ahead")
        yield

    assert batching.Batcher(never(), 1, 8, None).shapes() == {"inputs": (1, 8)}


def test_lines_are_cut_as_they_are_read():
    class Counting(io.BytesIO):
        largest = 0

        def read1(self, n=-1):
            data = super().read1(n)
            Counting.largest = max(Counting.largest, len(data))
            return data

    text = b"short\n" + b"x" * 1_000_000 + b"\nafter\n" + "é".encode() * 10 + b"\n"
    got = list(text_files.bounded_lines(Counting(text), 7, read_bytes=4096))
    assert got == [(b"short", False), (b"x" * 7, True), (b"after", False), ("é".encode() * 3, True)]
    assert Counting.largest <= 4096
    assert text_files.whole_characters("aé".encode()[:2]) == b"a"
    assert text_files.whole_characters("a€".encode()[:3]) == b"a"
    assert text_files.whole_characters("a€".encode()) == "a€".encode()


def test_read_lines_keeps_line_numbers_and_endings(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\n" + b"y" * 100 + b"\r\n\nlast")
    assert list(text_files.read_lines(str(path), "f", max_bytes=10)) == ["one", "y" * 10, "", "last"]
    path.write_bytes(b"ok\n\xff\n")
    with pytest.raises(UserError, match=r"--f: .*in.txt:2: not UTF-8"):
        list(text_files.read_lines(str(path), "f"))


def test_records_that_never_end_are_held_no_longer_than_a_cut():
    lines = ("word " * 100 for _ in range(1000))
    got = list(decode_lines._split_at(lines, "|", max_chars=50))
    assert len(got) == 1 and len(got[0]) <= 50 + len("word " * 100) + 1


def gzip_of_one_long_line(path, mebibytes: int) -> None:
    """A gzip file of concatenated members, each 1 MiB of one line that never ends: small
    on disk, `mebibytes` when inflated."""
    member = gzip.compress(b"a" * (1 << 20), compresslevel=9)
    with open(path, "wb") as f:
        for _ in range(mebibytes):
            f.write(member)


def test_a_gzip_that_inflates_past_its_bound_is_one_line(tmp_path, monkeypatch):
    from t2tcli.data.sources.source_base import ReadOptions
    from t2tcli.data.sources.text_source import TextSource

    monkeypatch.setattr(text_files, "INFLATION_FLOOR_BYTES", 4 << 20)
    bomb = tmp_path / "bomb.txt.gz"
    gzip_of_one_long_line(bomb, 64)
    assert bomb.stat().st_size < (64 << 20) // text_files.MAX_INFLATION
    source = TextSource(str(bomb))
    with pytest.raises(UserError) as caught:
        list(source.read_file(str(bomb), ReadOptions()))
    limit = text_files.MAX_INFLATION * bomb.stat().st_size
    assert str(caught.value).startswith(f"{bomb}: decompresses to more than {limit} bytes, over 200 times")
    # Within the bound, the long line is read in pieces and cut.
    fine = tmp_path / "fine.txt.gz"
    gzip_of_one_long_line(fine, 3)
    ((frame, lines),) = source.read_file(str(fine), ReadOptions())
    assert len(frame["text"][0]) == source.max_chars and lines.tolist() == [1]


@pytest.mark.parametrize("kind", ["text", "csv", "jsonl"])
def test_a_fifo_among_the_inputs_is_refused_without_opening_it(tmp_path, kind):
    from t2tcli.data.sources.file_sources import CsvSource, JsonlSource
    from t2tcli.data.sources.text_source import TextSource

    fifo = tmp_path / f"f.{'txt' if kind == 'text' else kind}"
    os.mkfifo(fifo)
    source = {
        "text": lambda: TextSource(str(tmp_path / "*.txt")),
        "csv": lambda: CsvSource(str(fifo), columns=("a",)),
        "jsonl": lambda: JsonlSource(str(fifo), columns=("a",)),
    }[kind]()
    outcome: list[BaseException | str] = []

    def fingerprint() -> None:
        try:
            outcome.append(source.fingerprint())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=fingerprint, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():  # unblock the reader, so the test ends either way
        with open(fifo, "wb"):
            pass
        pytest.fail("fingerprinting opened the FIFO and hung")
    assert isinstance(outcome[0], UserError), outcome
    assert str(outcome[0]) == f"{fifo}: a FIFO, not a regular file: inputs are read from regular files only"


def test_a_jsonl_record_past_its_bound_is_one_line(tmp_path, monkeypatch):
    from t2tcli.data.sources import file_sources
    from t2tcli.data.sources.source_base import ReadOptions

    monkeypatch.setattr(file_sources, "MAX_JSONL_LINE_BYTES", 1000)
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": "x"}\n{"a": "' + "y" * 5000 + '"}\n')
    with pytest.raises(UserError, match=r"r.jsonl: line 2: a record of more than 1000 bytes"):
        list(file_sources.JsonlSource(str(path), columns=("a",)).read_file(str(path), ReadOptions()))


def test_fast_settings_keep_every_engine_reading_one_type():
    """The engines read attributes, not keys: a settings object serves search and CTranslate2 alike."""
    from t2tcli.decode import ct2

    hp = HParams(ffn_activation="relu", relative_attention_num_buckets=32)
    assert ct2.unsupported_reason(hp, DecodeSettings(beam_size=4, alpha=0.6))
    assert ct2.unsupported_reason(hp, DecodeSettings(beam_size=4, alpha=0.0)) is None
    assert np.isfinite(DecodeSettings().alpha)


def test_a_batch_that_could_not_fit_in_memory_is_one_line():
    from t2tcli import hparams
    from t2tcli.decode import memory_bound

    hp = hparams.defaults()  # t5_small's shape: 6 decoder layers of 8 heads of 64
    normal = DecodeSettings.of({"beam_size": 4}, hp)
    need = memory_bound.cache_bytes(normal, hp, 64, 128)
    assert need == 64 * 4 * (128 + 128) * 2 * 6 * 8 * 64 * 2
    memory_bound.check(normal, hp, 64, 128, available=need)
    with pytest.raises(UserError) as caught:
        memory_bound.check(normal, hp, 64, 128, available=need - 1)
    assert str(caught.value).startswith("--decode_hparams: a batch of 64 lines x beam_size=4, decoding 128 tokens")
    # The rows there are count, not the batch size asked for.
    memory_bound.check(normal.replace(batch_size=10**9), hp, 64, 128, available=need)
    assert 0 < memory_bound.available_bytes()
    # Every batch an engine holds at once counts.
    memory_bound.check(normal, hp, 64, 128, available=3 * need, in_flight=3)
    with pytest.raises(UserError, match=r"^--decode_hparams: 3 batches in flight of 64 lines x beam_size=4"):
        memory_bound.check(normal, hp, 64, 128, available=3 * need - 1, in_flight=3)
