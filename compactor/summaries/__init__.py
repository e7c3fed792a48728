"""How memory is made smaller without losing anything: compaction planning, the summary DAG's
pure parts (lineage, grouping, extractive text), and extractive digests of a transcript."""
