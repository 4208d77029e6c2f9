"""Build hook: cffi compiles the C kernels into the extension module cera_audio_kws._kws.

Everything else about the distribution is in pyproject.toml; setuptools reads
``cffi_modules`` only from setup() keywords, which is why this file exists.
"""

from setuptools import setup

setup(cffi_modules=["src/cera_audio_kws/_build.py:ffibuilder"])
