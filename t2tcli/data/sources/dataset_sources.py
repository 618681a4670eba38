"""Record sources that are not files of the user's: generated toy data and TFDS datasets.

Imports: core, data (source_base); TensorFlow Datasets is imported when read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from t2tcli.data.sources.source_base import Chunk, ReadOptions, Source
from t2tcli.errors import UserError


class GeneratedSource(Source):
    """Records made by a deterministic function: toy problems that need no files.

    `make(n_rows, seed)` returns a DataFrame of string columns; the key is the row index.
    """

    def __init__(self, name: str, make: Callable[[int, int], pd.DataFrame], rows: int, seed: int) -> None:
        self.origin = f"<generated {name}>"
        self.make = make
        self.rows = rows
        self.seed = seed
        self.required = ()

    def fingerprint(self) -> str:
        return f"generated:{self.origin}:rows={self.rows}:seed={self.seed}"

    def unit_chunks(self, unit: Any, options: ReadOptions) -> Iterator[Chunk]:
        frame = self.make(self.rows, self.seed).reset_index(drop=True)
        for start in range(0, len(frame), options.chunk_rows):
            part = frame.iloc[start : start + options.chunk_rows].reset_index(drop=True)
            index = np.arange(start + 1, start + 1 + len(part), dtype=np.int64)
            yield Chunk(part, index, index, self.origin, start)


class TfdsSource(Source):
    """A split of a prepared TensorFlow Datasets dataset, read offline.

    `name` is "dataset/config:version" as TFDS spells it, `split` any TFDS split
    expression ("train[:90%]"). `fields` maps the record columns to TFDS feature names;
    bytes become UTF-8 strings and numbers their decimal text.
    """

    def __init__(
        self,
        name: str,
        split: str,
        fields: dict[str, str],
        required: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.split = split
        self.fields = dict(fields)
        self.required = tuple(required)
        self.origin = f"tfds:{name}[{split}]"

    def fingerprint(self) -> str:
        return f"tfds:{self.name}:{self.split}:{json.dumps(self.fields, sort_keys=True)}"

    def _builder(self, options: ReadOptions) -> Any:
        from t2tcli import compat  # noqa: F401, I001  (shims and quiet TensorFlow before TFDS)

        import tensorflow_datasets as tfds

        try:
            return tfds.builder(self.name, data_dir=self._data_dir(options))
        except Exception as exc:  # noqa: BLE001 - unknown names, versions, configs
            raise UserError(f"TFDS dataset '{self.name}': {str(exc).splitlines()[0]}") from None

    @staticmethod
    def _data_dir(options: ReadOptions) -> str:
        return options.tfds_data_dir or os.environ.get("TFDS_DATA_DIR") or os.path.expanduser("~/tensorflow_datasets")

    def units(self, options: ReadOptions) -> list[tuple[str, int]]:
        """(split expression, examples before it) of `options.parts` ranges of about equal
        size, in the split's order, for readers that read them side by side: TFDS's own
        slicing by absolute index keeps each example's place."""
        import tensorflow_datasets as tfds

        if options.parts <= 1:
            return [(self.split, 0)]
        builder = self._builder(options)
        lengths = {name: info.num_examples for name, info in builder.info.splits.items()}
        try:
            instructions = tfds.core.ReadInstruction.from_spec(self.split).to_absolute(lengths)
        except Exception:  # noqa: BLE001 - no split information (e.g. mocked data): read it whole
            return [(self.split, 0)]
        ranges = [(i.splitname, i.from_ or 0, lengths[i.splitname] if i.to is None else i.to) for i in instructions]
        step = max(1, -(-sum(end - begin for _, begin, end in ranges) // options.parts))
        units, before = [], 0
        for name, begin, end in ranges:
            for a in range(begin, end, step):
                b = min(a + step, end)
                units.append((f"{name}[{a}:{b}]", before))
                before += b - a
        return units

    def unit_chunks(self, unit: tuple[str, int], options: ReadOptions) -> Iterator[Chunk]:
        import tensorflow_datasets as tfds

        split, offset = unit
        builder = self._builder(options)
        try:
            dataset = builder.as_dataset(split=split, shuffle_files=False)
        except Exception as exc:  # noqa: BLE001 - not prepared, or a bad split expression
            if not builder.is_prepared():
                data_dir = self._data_dir(options)
                raise UserError(
                    f"TFDS dataset '{self.name}' is not prepared in {data_dir}; prepare it once on a machine with "
                    f"network: tfds build {self.name.split(':')[0]} --data_dir={data_dir} "
                    f"(then pass --tfds_data_dir={data_dir})"
                ) from None
            raise UserError(f"TFDS dataset '{self.name}' split '{self.split}': {str(exc).splitlines()[0]}") from None
        columns = list(self.fields)
        records: list[list[str]] = []
        done = 0
        for example in tfds.as_numpy(dataset):
            row = []
            for column in columns:
                feature = self.fields[column]
                if feature not in example:
                    raise UserError(
                        f"TFDS dataset '{self.name}' has no feature '{feature}' (has: {', '.join(sorted(example))})"
                    )
                row.append(_tfds_text(example[feature]))
            records.append(row)
            if len(records) >= options.chunk_rows:
                yield self._chunk(records, offset + done, done)
                done += len(records)
                records = []
        if records:
            yield self._chunk(records, offset + done, done)

    def _chunk(self, records: list[list[str]], start: int, first_row: int) -> Chunk:
        frame = pd.DataFrame(records, columns=list(self.fields), dtype=object)
        numbers = np.arange(start + 1, start + 1 + len(records), dtype=np.int64)
        return Chunk(frame, numbers, numbers, self.origin, first_row)


def _tfds_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
    return str(value)
