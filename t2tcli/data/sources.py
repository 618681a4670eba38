"""Where raw records come from: CSV, TSV, JSONL, TFDS and generated data.

The sources live in `source_base` (the contract), `file_sources` and `dataset_sources`;
this module names them all in one place, where problems and datagen import them.
"""

from t2tcli.data.dataset_sources import GeneratedSource, TfdsSource
from t2tcli.data.file_sources import CsvSource, JsonlSource, TsvSource, expand, file_fingerprint
from t2tcli.data.source_base import DEFAULT_CHUNK_ROWS, Chunk, ReadOptions, Source, raw_dir, shipped_data
from t2tcli.data.text_source import TextSource

__all__ = [
    "TextSource",
    "DEFAULT_CHUNK_ROWS",
    "Chunk",
    "CsvSource",
    "GeneratedSource",
    "JsonlSource",
    "ReadOptions",
    "Source",
    "TfdsSource",
    "TsvSource",
    "expand",
    "file_fingerprint",
    "raw_dir",
    "shipped_data",
]
