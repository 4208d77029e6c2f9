"""Converting SafeTensors models (a Hugging Face repository or folder) to GGUF."""

from __future__ import annotations


def is_convertible(files) -> bool:
    """Whether a repository listing holds a transformers model in SafeTensors."""
    names = set(files)
    return "config.json" in names and any(n.endswith(".safetensors") for n in names)
