"""Generation: a session's event loop (`session`), the batching scheduler (`scheduler`),
the sampling chain (`sampling`), options (`options`), events and sinks (`events`, `sink`),
the runner of a loaded model's compiled graphs (`runtime`), embeddings (`embedding`), and
the prefix cache (`prefix_cache`)."""
