"""The file layer's safety: outputs that appear whole or not at all, and locks on directories.

Every binary writes into directories that others may share, download or follow: a
model_dir read by an evaluator while a trainer writes it, a data_dir two datagen runs
were pointed at. These modules are the one place where an output file is created (an
unguessable temporary name, fsync, rename) and where a directory is claimed by one
writer. They import nothing from the rest of t2tcli but `errors` and `fs`.
"""
