"""The benchmark of compactor: speed and memory (not part of the installed package; the evaluations are in evals/)."""
