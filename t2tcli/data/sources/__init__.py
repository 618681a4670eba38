"""Where raw records come from, and how a problem's one `preprocess` runs on them.

The contract every source keeps (`source_base`), the files of a user's (`file_sources`,
`text_source`), TFDS and generated data (`dataset_sources`), and `preprocess` run over whole
columns (`columns`, `preprocessing`, `text`). User code imports the sources through
`t2tcli.sources` and the text helpers through `t2tcli.text`.

Imports: core and io.
"""
