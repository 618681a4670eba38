"""A user problem: which book of the Bible a passage comes from.

t2t-datagen --usr_dir=examples/usr_dir --problem=which_book --tmp_dir=DIR_WITH_passages.csv --data_dir=DIR
"""

from t2tcli.problem import Text2TextProblem, VocabSpec
from t2tcli.registry import register_problem
from t2tcli.sources import CsvSource, raw_dir
from t2tcli.text import squash_spaces


@register_problem("which_book")
class WhichBook(Text2TextProblem):
    """Which book of the Bible a passage comes from: `which book: <passage>` -> its book."""

    vocab = VocabSpec(name="passages", size=2000)
    metrics = ("accuracy",)
    columnwise = True  # preprocess uses only str methods, + and t2tcli.text: datagen runs it on columns

    def source(self, tmp_dir):
        return CsvSource(f"{raw_dir(tmp_dir)}/passages.csv", columns=("passage", "book"))

    def preprocess(self, record):
        return {"inputs": "which book: " + squash_spaces(record["passage"]), "targets": record["book"]}
