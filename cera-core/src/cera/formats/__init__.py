"""File formats: the GGUF reader (`gguf`), the atomic GGUF writer for converters
(`gguf_write`) and cera's checkpoint files (`checkpoint`)."""
