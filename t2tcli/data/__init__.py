"""From raw records to a data_dir: sources, preprocessing, the vocabulary, the data_dir
layout, the datagen stages with their local and Beam runners, and the tf.data pipeline
that reads the shards back for training and evaluation (where T5's self-supervised
objectives corrupt a text problem's documents: objectives, corruption).

Imports: core and io; data knows nothing of models.
"""
