"""One module per binary: its own flags and a call into the library.

Imports: any layer; nothing imports cli but bin/ and the console scripts.
"""
