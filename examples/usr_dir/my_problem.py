"""A user-defined problem: review sentiment from a TSV file (`review<TAB>label`).

    t2t-datagen --usr_dir=examples/usr_dir --problem=review_sentiment \
        --tmp_dir=DIR_WITH_reviews.tsv --data_dir=/tmp/reviews
"""

from t2tcli.problem import Text2TextProblem, VocabSpec
from t2tcli.registry import register_problem
from t2tcli.sources import TsvSource, raw_dir


@register_problem("review_sentiment")
class ReviewSentiment(Text2TextProblem):
    vocab = VocabSpec(name="reviews", size=500)
    metrics = ("accuracy",)
    columnwise = True  # preprocess uses only str methods, + and t2tcli.text: datagen runs it on columns

    def source(self, tmp_dir):
        return TsvSource(f"{raw_dir(tmp_dir)}/reviews.tsv", columns=("review", "label"))

    def preprocess(self, record):
        return {"inputs": "sentiment: " + record["review"].lower(), "targets": record["label"]}
