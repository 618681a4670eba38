"""Other tools' formats: Hugging Face T5 directories read for fine-tuning and written for
CTranslate2 and transformers.

Imports: core, io, data and model.
"""
