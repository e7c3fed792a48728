"""Search: text into index terms (analyze, wordforms, vocab), the BM25F index over items, file
views, near-duplicate candidates and the retention and rank scores. Pure: no I/O, no Store."""
