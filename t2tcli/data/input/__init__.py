"""The tf.data pipeline that reads a data_dir's shards back as model batches for training and
evaluation (`inputs`), where T5's self-supervised objectives corrupt a text problem's
documents as tensor ops (`corruption`).

Imports: core and data (layout, objectives, registry and vocabulary).
"""
