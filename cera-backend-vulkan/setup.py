"""Build hook: cffi compiles the optional recording helper cera_backend_vulkan._record
(_build.py) when a C compiler is there. Without one the build goes on without it and the
backend records its passes with raw cffi calls from Python (record.py).

Everything else about the distribution is in pyproject.toml; setuptools reads
``cffi_modules`` only from setup() keywords, which is why this file exists.
"""

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the helper is only an optimisation."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler, no headers: go on without it
            print(f"warning: cera_backend_vulkan._record not built ({e}); passes are recorded from Python")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            print(f"warning: {ext.name} not built ({e}); passes are recorded from Python")


try:
    import cffi  # noqa: F401

    kw = {"cffi_modules": ["src/cera_backend_vulkan/_build.py:ffibuilder"]}
except ImportError:
    kw = {}

setup(cmdclass={"build_ext": OptionalBuildExt}, **kw)
