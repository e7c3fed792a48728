"""Evaluations of compactor on the real-agent corpus (not part of the installed package).

Each module derives one evaluation's numbers: `replay` (search, over stdio; `--fast` in process),
`resume` (the first recall of a new session; `--fast` in process), `other_words` (a query in other
English forms), `redaction` and `redact_corpus` (secrets caught, false positives), `classify_corpus`
(content types); `revisits` and `revisits2` are the two derivations of the revisit queries,
`halves` the tuning/test split, `secret_shapes` the fake credentials. The benchmark (speed and
memory) is bench/. Notes and results: evals/REPLAY.md.
"""
