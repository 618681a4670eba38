"""From raw records to a data_dir and back: at the top, what every part shares (`layout`, the
data_dir's file names; `problem`, the Problem contract; `objectives`, T5's self-supervised
objectives as a Problem declares them); below, one sub-package a concern: `sources` (where
raw records come from, and preprocess), `vocabulary`, `input` (the tf.data pipeline that
reads the shards back for training and evaluation) and `datagen` (t2t-datagen's stages
with their local and Beam runners). Sources and vocabulary import nothing else of data;
input and datagen import them and the top, never each other.

Imports: core and io; data knows nothing of models.
"""
