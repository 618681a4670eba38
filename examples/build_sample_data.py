"""Build the small public-domain sample datasets in ``problems/data``.

The examples need data that is small enough to keep in the repository, free
to redistribute, and shaped like the real datasets the toolkit is used on.
Bible translations fit: they are public domain and aligned verse by verse,
which gives translation pairs and paraphrase pairs for free.

This script reads three SWORD modules (King James Version, World English
Bible, Reina-Valera 1909) with ``pysword`` and writes:

* ``translate_en_es.csv``: KJV English verses next to their RV1909 Spanish
  counterparts (``id,book,chapter,verse,english,spanish``).
* ``quora/train.csv`` and ``quora/test.csv``: a stand-in for the Kaggle
  Quora Question Pairs files. Two renderings of the same verse (KJV and WEB)
  are duplicates; two different verses are not. A few rows are deliberately
  messy (straight double quotes, an embedded newline, an empty question2) so
  readers are exercised the way the real Kaggle files exercise them.
* ``README.md`` describing the files.

The output is deterministic: verses are visited in canonical order and all
sampling uses a fixed seed. On Debian/Ubuntu the modules come from
``apt-get install sword-text-kjv sword-text-sparv sword-text-web``.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from pysword.modules import SwordModules

SEED = 1611
DEFAULT_SWORD_PATH = os.environ.get("SWORD_PATH", "/usr/share/sword")
DEFAULT_OUT_DIR = Path(__file__).resolve().parent / "data"

# Module name prefixes; the Debian packages ship e.g. "engKJV2006eb".
KJV_PREFIX = "engKJV"
WEB_PREFIX = "engWEB"
RV1909_PREFIX = "spaRV1909"

# Chapters where a verse's length differs from the typical length ratio of
# the two translations by more than this (natural log) are treated as
# misaligned; 0.8 is a factor of about 2.2.
MAX_LENGTH_DEVIATION = 0.8

# Translation file: every TRANSLATE_STEP-th verse of the KJV canon.
TRANSLATE_STEP = 4
TRANSLATE_MAX_CHARS = 256

# Quora-style files.
QUORA_MIN_CHARS = 30
QUORA_MAX_CHARS = 150
QUORA_TRAIN_ROWS = 12_000
QUORA_POSITIVE_SHARE = 0.4
QUORA_TEST_ROWS = 1_000
QUORA_TEST_POOL = 1_800  # verses held out (whole chapters) for test.csv
QUORA_EMPTY_QUESTION2 = 24  # about 0.2% of the train rows
QUORA_NEWLINE_ROWS = 6
QUORA_STRAIGHT_QUOTE_EVERY = 5  # rows with curly quotes; every n-th goes straight

Ref = tuple[str, int, int]  # (OSIS book id, chapter, verse)
Chapter = tuple[str, int]  # (OSIS book id, chapter)
Text = tuple[Ref, str]  # (verse reference, translation key: "kjv" or "web")

_DROPPED_ELEMENTS = re.compile(r"<(note|speaker|catchWord|rdg)\b[^>]*>.*?</\1>", re.DOTALL)
_TITLE = re.compile(r"<title\b([^>]*)>(.*?)</title>", re.DOTALL)
_BREAK_TAG = re.compile(r"</?(?:l|lg|lb|div|chapter|milestone|item|list|p)\b[^>]*>")
_ANY_TAG = re.compile(r"<[^>]*>")
_BOOK_END = re.compile(r'<div\b(?=[^>]*\btype="book")(?=[^>]*\beID=)[^>]*>')
_USFM_MARKER = re.compile(r"\\[a-z]+\d*\*?")  # stray markers such as "\nd"
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")
_WHITESPACE = re.compile(r"\s+")
_ROMAN_PREFIX = {"I ": "1 ", "II ": "2 ", "III ": "3 "}
# Two word elements with nothing between them, e.g. "<w>hay allí</w><w>también</w>".
_GLUED_WORDS = re.compile(
    r"(\w+)((?:</(?:w|transChange|divineName)>)(?:<[^>]*>)*"
    r"<(?:w|transChange|divineName)\b[^>]*>)(?=(\w+))"
)
_CLITICS = frozenset("me te se le les lo los la las nos os".split())


@dataclass
class Bible:
    """Clean verse texts of one module, keyed by reference in canonical order."""

    name: str
    verses: dict[Ref, str]
    book_names: dict[str, str]


def _keep_title(match: re.Match[str]) -> str:
    """Keep canonical psalm superscriptions; drop editorial headings.

    Acrostic letter headings such as "ALEPH" are marked canonical in some
    modules but are not part of the verse, so all-caps titles are dropped.
    """
    attributes, body = match.group(1), _ANY_TAG.sub("", match.group(2))
    if 'canonical="true"' in attributes and any(c.islower() for c in body):
        return f" {body} "
    return " "


def _separate_words(match: re.Match[str]) -> str:
    """Put a space between glued word elements, except before a Spanish clitic.

    Clitic pronouns are written as separate elements after gerunds,
    infinitives and imperatives ("viéndo" + "le" is "viéndole").
    """
    before, tags, after = match.groups()
    lower = before.lower()
    attached = after.lower() in _CLITICS and (lower.endswith("ndo") or (len(lower) > 2 and lower[-1] in "rd"))
    return before + tags + ("" if attached else " ")


def clean_verse(raw: str) -> str:
    """Turn one verse of OSIS markup into plain single-line text.

    Anything after the end of a book (e.g. an appended glossary) is dropped.
    """
    text = _BOOK_END.split(raw, maxsplit=1)[0]
    text = _DROPPED_ELEMENTS.sub(" ", text)
    text = _GLUED_WORDS.sub(_separate_words, text)
    text = _TITLE.sub(_keep_title, text)
    text = _BREAK_TAG.sub(" ", text)
    text = _ANY_TAG.sub("", text)
    text = _USFM_MARKER.sub("", text)
    text = text.replace("\u00b6", " ")  # pilcrow paragraph marks
    text = _WHITESPACE.sub(" ", text).strip()
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def _book_display_name(name: str) -> str:
    for roman, arabic in _ROMAN_PREFIX.items():
        if name.startswith(roman):
            return arabic + name[len(roman) :]
    return name


def find_module(sword_path: str, prefix: str) -> str:
    """Return the name of the installed module whose name starts with prefix."""
    found = sorted(SwordModules(sword_path).parse_modules())
    matches = [name for name in found if name.startswith(prefix)]
    if not matches:
        raise SystemExit(
            f"No SWORD module starting with {prefix!r} in {sword_path} "
            f"(found: {', '.join(found) or 'none'}). Install sword-text-kjv, "
            "sword-text-sparv and sword-text-web, or pass --sword_path."
        )
    return matches[-1]


def read_bible(sword_path: str, module_name: str) -> Bible:
    """Read every verse of a module, cleaned, dropping empty verses."""
    modules = SwordModules(sword_path)
    modules.parse_modules()
    bible = modules.get_bible_from_module(module_name)
    verses: dict[Ref, str] = {}
    book_names: dict[str, str] = {}
    for books in bible.get_structure().get_books().values():
        for book in books:
            book_names[book.osis_name] = _book_display_name(book.name)
            refs = [
                (book.osis_name, chapter, verse)
                for chapter, length in enumerate(book.chapter_lengths, start=1)
                for verse in range(1, length + 1)
            ]
            raw_texts = bible.get_iter(books=[book.osis_name], clean=False)
            for ref, raw in zip(refs, raw_texts, strict=True):
                text = clean_verse(raw)
                if text:
                    verses[ref] = text
    return Bible(module_name, verses, book_names)


def read_bibles(sword_path: str) -> tuple[Bible, Bible, Bible]:
    """Read the KJV, WEB and RV1909 modules in parallel."""
    names = [find_module(sword_path, p) for p in (KJV_PREFIX, WEB_PREFIX, RV1909_PREFIX)]
    with ProcessPoolExecutor(max_workers=len(names)) as pool:
        kjv, web, rv1909 = pool.map(read_bible, [sword_path] * len(names), names)
    return kjv, web, rv1909


def _length_score(source: str, target: str) -> float:
    """Log length ratio, smoothed so very short verses do not dominate."""
    return math.log((len(target) + 20) / (len(source) + 20))


def _chapters(bible: Bible) -> dict[Chapter, dict[int, str]]:
    chapters: dict[Chapter, dict[int, str]] = {}
    for (book, chapter, verse), text in bible.verses.items():
        chapters.setdefault((book, chapter), {})[verse] = text
    return chapters


def aligned_chapters(source: Bible, target: Bible) -> set[Chapter]:
    """Return the chapters whose verses line up one to one in both modules.

    Versifications do not always agree: the RV1909 module keeps Spanish verse
    breaks in a few chapters, so its verse N may hold the text of KJV verse
    N+1 or several verses at once. Translated verses have roughly
    proportional lengths, so a chapter is kept when both modules have the
    same verses, no verse has an extreme length ratio, and shifting the
    target by one verse does not fit better than no shift.
    """
    source_chapters, target_chapters = _chapters(source), _chapters(target)
    typical = statistics.median(
        _length_score(text, target.verses[ref]) for ref, text in source.verses.items() if ref in target.verses
    )

    def deviations(src: dict[int, str], tgt: dict[int, str], shift: int) -> list[float]:
        return [
            abs(_length_score(text, tgt[verse + shift]) - typical)
            for verse, text in src.items()
            if verse + shift in tgt
        ]

    kept = set()
    for chapter, src in source_chapters.items():
        tgt = target_chapters.get(chapter, {})
        if src.keys() != tgt.keys():
            continue
        aligned = deviations(src, tgt, 0)
        shifted = [deviations(src, tgt, shift) for shift in (-1, 1)]
        best_shifted = min((statistics.mean(d) for d in shifted if d), default=math.inf)
        if max(aligned) <= MAX_LENGTH_DEVIATION and statistics.mean(aligned) < best_shifted:
            kept.add(chapter)
    return kept


def drop_subscription(english: str, spanish: str) -> str:
    """Cut the note RV1909 appends after the closing "Amén." of an epistle.

    e.g. "... Amén. Fué escrita á los Hebreos desde Italia con Timoteo." The
    KJV module has no such note, so the pair would not be a translation.
    """
    if english.endswith("Amen.") and "Amén. " in spanish:
        return spanish[: spanish.rindex("Amén. ") + len("Amén.")]
    return spanish


def build_translation(kjv: Bible, rv1909: Bible) -> pd.DataFrame:
    """Pair every TRANSLATE_STEP-th KJV verse with the same RV1909 verse."""
    rv1909 = Bible(
        rv1909.name,
        {ref: drop_subscription(kjv.verses.get(ref, ""), text) for ref, text in rv1909.verses.items()},
        rv1909.book_names,
    )
    chapters = aligned_chapters(kjv, rv1909)
    rows = []
    for index, (ref, english) in enumerate(kjv.verses.items()):
        spanish = rv1909.verses.get(ref)
        if index % TRANSLATE_STEP or spanish is None or ref[:2] not in chapters:
            continue
        if max(len(english), len(spanish)) > TRANSLATE_MAX_CHARS:
            continue
        book, chapter, verse = ref
        rows.append((kjv.book_names[book], chapter, verse, english, spanish))
    frame = pd.DataFrame(rows, columns=["book", "chapter", "verse", "english", "spanish"])
    frame.insert(0, "id", range(len(frame)))
    return frame


class PairSampler:
    """Draws duplicate and non-duplicate verse pairs from a pool of references."""

    def __init__(self, refs: list[Ref], texts: dict[str, dict[Ref, str]], rng: random.Random):
        self.refs = refs
        self.texts = texts
        self.rng = rng
        pool = set(refs)
        self.neighbours: dict[Ref, list[Ref]] = {}
        for book, chapter, verse in refs:
            near = [(book, chapter, v) for v in (verse - 1, verse + 1) if (book, chapter, v) in pool]
            if near:
                self.neighbours[(book, chapter, verse)] = near
        self.anchors = sorted(self.neighbours)
        self.seen: set[frozenset[Text]] = set()

    def _add(self, pairs: list[tuple[Text, Text, int]], a: Text, b: Text, label: int) -> None:
        key = frozenset((a, b))
        if self.texts[a[1]][a[0]] == self.texts[b[1]][b[0]] or key in self.seen:
            return
        self.seen.add(key)
        pairs.append((a, b, label))

    def _translation(self) -> str:
        return self.rng.choice(("kjv", "web"))

    def positives(self, count: int) -> list[tuple[Text, Text, int]]:
        pairs: list[tuple[Text, Text, int]] = []
        for ref in self.rng.sample(self.refs, min(count, len(self.refs))):
            self._add(pairs, (ref, "kjv"), (ref, "web"), 1)
        return pairs

    def hard_negatives(self, count: int) -> list[tuple[Text, Text, int]]:
        """Neighbouring verses of one chapter; half of them across translations."""
        pairs: list[tuple[Text, Text, int]] = []
        while len(pairs) < count:
            anchor = self.rng.choice(self.anchors)
            near = self.rng.choice(self.neighbours[anchor])
            if len(pairs) % 2:
                self._add(pairs, (anchor, "web"), (near, "kjv"), 0)
            else:
                translation = self._translation()
                self._add(pairs, (anchor, translation), (near, translation), 0)
        return pairs

    def random_negatives(self, count: int) -> list[tuple[Text, Text, int]]:
        """Two verses from different chapters, in either translation."""
        pairs: list[tuple[Text, Text, int]] = []
        while len(pairs) < count:
            a, b = self.rng.sample(self.refs, 2)
            if a[:2] != b[:2]:
                self._add(pairs, (a, self._translation()), (b, self._translation()), 0)
        return pairs

    def sample(self, rows: int, positive_share: float) -> list[tuple[str, str, int]]:
        """Return shuffled (question1, question2, label) rows."""
        n_pos = round(rows * positive_share)
        n_hard = (rows - n_pos) // 2
        n_random = rows - n_pos - n_hard
        pairs = self.positives(n_pos) + self.hard_negatives(n_hard) + self.random_negatives(n_random)
        self.rng.shuffle(pairs)
        out = []
        for a, b, label in pairs:
            if self.rng.random() < 0.5:
                a, b = b, a
            out.append((self.texts[a[1]][a[0]], self.texts[b[1]][b[0]], label))
        return out


def split_refs(refs: list[Ref], held_out: int, rng: random.Random) -> tuple[list[Ref], list[Ref]]:
    """Hold out whole chapters (at least held_out verses) so test verses never occur in train."""
    chapters = sorted({ref[:2] for ref in refs})
    rng.shuffle(chapters)
    sizes: dict[Chapter, int] = {}
    for ref in refs:
        sizes[ref[:2]] = sizes.get(ref[:2], 0) + 1
    test_chapters: set[Chapter] = set()
    total = 0
    for chapter in chapters:
        if total >= held_out:
            break
        test_chapters.add(chapter)
        total += sizes[chapter]
    train = [ref for ref in refs if ref[:2] not in test_chapters]
    test = [ref for ref in refs if ref[:2] in test_chapters]
    return train, test


def _straighten_quotes(text: str) -> str:
    return text.replace("\u201c", '"').replace("\u201d", '"')


def make_messy(rows: list[tuple[str, str, int]], rng: random.Random, blank: int, newlines: int) -> list[list]:
    """Inject the irregularities found in real scraped data, deterministically."""
    messy = [list(row) for row in rows]
    quoted = [i for i, row in enumerate(messy) if "\u201c" in row[0] + row[1]]
    for i in quoted[::QUORA_STRAIGHT_QUOTE_EVERY]:
        messy[i][0] = _straighten_quotes(messy[i][0])
        messy[i][1] = _straighten_quotes(messy[i][1])
    breakable = [i for i, row in enumerate(messy) if "; " in row[0]]
    for i in sorted(rng.sample(breakable, newlines)):
        messy[i][0] = messy[i][0].replace("; ", ";\n", 1)
    for i in rng.sample(range(len(messy)), blank):
        messy[i][1] = ""
    return messy


def assign_qids(rows: list[list]) -> pd.DataFrame:
    """Number distinct question texts in order of first appearance, like Kaggle."""
    qids: dict[str, int] = {}
    next_qid = 1
    records = []
    for row_id, (q1, q2, label) in enumerate(rows):
        ids = []
        for text in (q1, q2):
            if text and text in qids:
                ids.append(qids[text])
                continue
            if text:  # missing texts each get their own id
                qids[text] = next_qid
            ids.append(next_qid)
            next_qid += 1
        records.append((row_id, ids[0], ids[1], q1, q2, label))
    return pd.DataFrame(records, columns=["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])


def build_quora(kjv: Bible, web: Bible, rng: random.Random) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build train.csv and test.csv in the Kaggle Quora Question Pairs layout."""
    texts = {"kjv": kjv.verses, "web": web.verses}
    chapters = aligned_chapters(kjv, web)
    refs = [
        ref
        for ref, text in kjv.verses.items()
        if ref[:2] in chapters
        and text != web.verses[ref]
        and all(QUORA_MIN_CHARS <= len(t) <= QUORA_MAX_CHARS for t in (text, web.verses[ref]))
    ]
    train_refs, test_refs = split_refs(refs, QUORA_TEST_POOL, rng)
    # Some verses repeat word for word elsewhere; keep those texts out of test.
    train_texts = {texts[key][ref] for ref in train_refs for key in texts}
    test_refs = [ref for ref in test_refs if all(texts[key][ref] not in train_texts for key in texts)]

    train_rows = PairSampler(train_refs, texts, rng).sample(QUORA_TRAIN_ROWS, QUORA_POSITIVE_SHARE)
    train = assign_qids(make_messy(train_rows, rng, QUORA_EMPTY_QUESTION2, QUORA_NEWLINE_ROWS))

    test_rows = PairSampler(test_refs, texts, rng).sample(QUORA_TEST_ROWS, QUORA_POSITIVE_SHARE)
    test = pd.DataFrame(
        [(i, q1, q2) for i, (q1, q2, _) in enumerate(make_messy(test_rows, rng, 0, 0))],
        columns=["test_id", "question1", "question2"],
    )
    return train, test


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False, encoding="utf-8", lineterminator="\n")


def _size(path: Path) -> str:
    return f"{path.stat().st_size / 1_000_000:.1f} MB"


def write_readme(out_dir: Path, files: dict[str, pd.DataFrame], train: pd.DataFrame) -> None:
    """Describe the generated files, with their row counts and sizes."""
    counts = {name: len(frame) for name, frame in files.items()}
    sizes = {name: _size(out_dir / name) for name in files}
    positives = int(train["is_duplicate"].sum())
    blank = int((train["question2"] == "").sum())
    text = f"""# Sample data

Small public-domain datasets for the examples, built from the King James
Version (KJV), the World English Bible (WEB) and the Reina-Valera 1909
(RV1909), read from the Debian `sword-text-kjv`, `sword-text-web` and
`sword-text-sparv` packages.

- `translate_en_es.csv` ({counts["translate_en_es.csv"]:,} rows, {sizes["translate_en_es.csv"]}):
  English (KJV) to Spanish (RV1909), every {TRANSLATE_STEP}th verse, leaving
  out verses over {TRANSLATE_MAX_CHARS} characters and the few chapters whose
  verse numbering differs between the two modules.
  Columns `id,book,chapter,verse,english,spanish`.
- `quora/train.csv` ({counts["quora/train.csv"]:,} rows, {sizes["quora/train.csv"]}):
  the Kaggle Quora Question Pairs layout,
  `id,qid1,qid2,question1,question2,is_duplicate`.
- `quora/test.csv` ({counts["quora/test.csv"]:,} rows, {sizes["quora/test.csv"]}):
  unlabeled pairs, `test_id,question1,question2`, from chapters not used in
  `train.csv`.

In the Quora-style files a pair is a duplicate (`is_duplicate=1`) when the
two questions are the KJV and WEB renderings of the same verse
({positives:,} of the train rows). Non-duplicates are two different verses:
half are neighbouring verses of one chapter, half are random. Like the real
Kaggle file, some rows are messy on purpose: fields with commas and double
quotes, a few with an embedded newline, and {blank} rows with an empty
`question2`.

Rebuild (deterministic):

```
apt-get install sword-text-kjv sword-text-sparv sword-text-web
python examples/build_sample_data.py --sword_path /usr/share/sword --out_dir problems/data
```
"""
    (out_dir / "README.md").write_text(text, encoding="utf-8")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sword_path",
        default=DEFAULT_SWORD_PATH,
        help="directory holding mods.d/ and modules/ (default: $SWORD_PATH or /usr/share/sword)",
    )
    parser.add_argument(
        "--out_dir",
        type=Path,
        default=DEFAULT_OUT_DIR,
        help="where to write the files (default: problems/data)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    kjv, web, rv1909 = read_bibles(args.sword_path)
    rng = random.Random(SEED)
    translation = build_translation(kjv, rv1909)
    train, test = build_quora(kjv, web, rng)
    files = {
        "translate_en_es.csv": translation,
        "quora/train.csv": train,
        "quora/test.csv": test,
    }
    for name, frame in files.items():
        write_csv(frame, args.out_dir / name)
        print(f"{args.out_dir / name}: {len(frame):,} rows, {_size(args.out_dir / name)}")
    write_readme(args.out_dir, files, train)


if __name__ == "__main__":
    main()
