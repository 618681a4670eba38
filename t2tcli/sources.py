"""The public record sources a user's Problem reads from (`from t2tcli.sources import ...`):
CSV, TSV, JSONL, plain text, TFDS and generated data.

Defined in `t2tcli.data.sources` (`source_base` the contract, `file_sources`, `text_source`
and `dataset_sources`); this path stays stable for user code.
"""

from t2tcli.data.sources.dataset_sources import GeneratedSource, TfdsSource
from t2tcli.data.sources.file_sources import CsvSource, JsonlSource, TsvSource, expand, file_fingerprint
from t2tcli.data.sources.source_base import DEFAULT_CHUNK_ROWS, Chunk, ReadOptions, Source, raw_dir, shipped_data
from t2tcli.data.sources.text_source import TextSource

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
