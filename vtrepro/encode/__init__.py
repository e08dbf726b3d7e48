"""Encoding a corpus into quantized, Anserini-safe JSON vectors: quantization and term escaping (vectors),
the encoded folder's layout (folder), its resumable shards and manifest (shards, manifest), query
encoding (queries), the checked vector reader (reader) and content fingerprints (fingerprint).

``python -m vtrepro encode`` runs the encode command (writer)."""
