"""The vocabulary: SentencePiece models with T5's id layout (`vocab`), one taken from a
Hugging Face directory (`hf_vocab`), and the fast text -> packed ids encoder datagen writes
with (`packed_encoder`).

Imports: core and io.
"""
