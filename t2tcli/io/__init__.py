"""The one file layer: every read, write, list and rename of a user's path, on a local disk
or any TensorFlow file system (fs); outputs that appear whole or not at all (atomic);
directories claimed by one writer (lock); output locations checked before any work
(preflight); user text files read once, pipes included (text_files).

Imports: core (errors, compat and interrupts).
"""
