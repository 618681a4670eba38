"""One module per binary: its own flags and a call into the library. tensor2tensor's
names run the same modules (t2t-trainer is train, t2t-decoder decode, t2t-exporter
export), its flag names are rewritten to ours by t2t_names, and t2t-avg-all and
t2t-bleu are binaries of their own.

Imports: core, io, data, model, interop, train, decode and evaluate; nothing imports cli but
bin/ and the console scripts.
"""
