"""The vocabulary gap, measured: how many surface forms one unit has in a tokenizer's vocabulary (census), what
that costs on a corpus (matches lost, BM25 through Lucene), and whether merging the forms keeps their meaning."""
