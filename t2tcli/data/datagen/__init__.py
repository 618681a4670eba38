"""t2t-datagen: a problem's sources -> the vocabulary, TFRecord shards and meta file in data_dir.

`run.generate` is the local run: `plan` (what to make), `stages` (pass 1), `local_runner`
(the two passes), `spool`, `writer` and `shards` (pass 2), `meta` and `stats`. `beam_runner`
launches the same stages on Apache Beam (`beam_pipeline`, `beam_summary`). `options`,
`vocab_sources` and `leave_out` are how both runners read their settings, make the
vocabulary and keep other problems' dev texts out.

Imports: core, io and data (layout, problem, registry, sources and vocabulary).
"""
