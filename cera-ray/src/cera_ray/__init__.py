"""cera on Ray: `cera serve` as a Ray Serve deployment (`cera_ray.serve`) and batch
generation and embedding over Ray Datasets (`cera_ray.data`). Ray is imported only when
one of them is used."""

from .spec import ModelSpec, RayConfigError

_LAZY = {"app": "serve", "build": "serve", "deployment": "serve",
         "Generate": "data", "Embed": "data", "generate": "data", "embed": "data"}  # fmt: skip


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'cera_ray' has no attribute {name!r}")


__all__ = ["Embed", "Generate", "ModelSpec", "RayConfigError", "app", "build", "deployment", "embed", "generate"]
