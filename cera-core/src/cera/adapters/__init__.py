"""LoRA adapters applied at run time (`cera.adapters.lora`: llama.cpp's GGUF adapters;
`cera.adapters.peft`: PEFT directories; `cera.adapters.active`: the set a pass applies)."""

from __future__ import annotations

from pathlib import Path

from ..errors import AdapterError
from .active import NO_ADAPTERS, ActiveAdapters
from .lora import LoraAdapter, LoraPair, read_gguf_adapter
from .peft import is_peft_dir, read_peft_adapter


def load_adapter(source, gguf, name: str | None = None) -> LoraAdapter:
    """A LoRA adapter from a llama.cpp GGUF adapter file or a PEFT directory, for the base
    model whose GGUF file is ``gguf`` (a PEFT directory's names depend on it)."""
    path = Path(source).expanduser()
    if not path.exists():
        raise AdapterError(f"{path}: no such LoRA adapter (a GGUF adapter file or a PEFT directory)")
    if path.is_dir():
        if not is_peft_dir(path):
            raise AdapterError(f"{path}: a directory with no adapter_config.json is not a PEFT adapter")
        return read_peft_adapter(path, gguf, name=name)
    return read_gguf_adapter(path, name=name)


__all__ = ["NO_ADAPTERS", "ActiveAdapters", "LoraAdapter", "LoraPair", "load_adapter"]
