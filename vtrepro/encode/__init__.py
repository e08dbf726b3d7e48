"""Encoding a corpus into quantized, Anserini-safe JSON vectors: quantization and term escaping, the
resumable shard writer and its manifest, content fingerprints.

``python -m vtrepro.encode`` runs the encode command."""
