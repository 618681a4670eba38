"""t2tcli: command-line pipeline toolkit for text-to-text transformers."""

__version__ = "0.1.0"
