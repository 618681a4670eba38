"""One module per binary: its own flags and a call into the library."""
