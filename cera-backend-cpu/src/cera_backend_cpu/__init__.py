"""cera's CPU backend: GGUF quantized kernels in C (compiled by cffi), numpy for the rest.

Importing this package is cheap: the compiled module and numpy load only when a
`cera_backend_cpu.backend.CpuBackend` is created (the plugin registry names it by a
"module:attr" string). See README.md for how to construct one.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("cera-backend-cpu")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"
