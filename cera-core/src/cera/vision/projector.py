"""A multimodal projector (an mmproj GGUF): an image encoder bound to the text model's backend.

An mmproj file has ``general.architecture`` ``clip`` and says which projector it is in
``clip.projector_type``; the family registered for the architecture ``clip.<type>``
(LFM2-VL's: ``clip.lfm2``, in cera-model-lfm2) reads its config, binds its tensors and
builds one encoder graph per image size. The graph runs on the backend the text model
runs on (the same device, so the embeddings go straight into the session's prefill);
executables are kept per image size.

`Projector.encode` turns an image (path, bytes, data: URL or RGB array; see
`cera.vision.image`) into an `ImageEmbedding`: one row per image token, the text model's
width, and the text that surrounds the rows in the prompt (``<|image_start|>`` ...
``<|image_end|>`` for LFM2-VL), with a digest of the pixels that keys the prefix cache and
checkpoints.

The family's encoder class provides ``read_config(gguf)``, ``__init__(config, weights)``,
``preprocess(rgb) -> float32 [h, w, 3]``, ``build_image(h, w) -> Graph`` (with one output,
``embeddings``), ``image_inputs(pixels) -> dict`` of the graph's inputs, ``n_embd_out``,
and the strings ``image_begin`` / ``image_end``.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path

import attrs
import numpy as np

from ..backend import StepInputs
from ..errors import CeraError, ModelConfigError, ShapeError, UnsupportedOperation
from ..graph.builder import EMBEDS, LAST_LOGITS, Layout
from .content_parts import MEDIA_MARKER  # noqa: F401 - re-exported
from .image import load_image

EMBEDDINGS = "embeddings"  # the encoder graph's output


@attrs.frozen(eq=False)
class ImageEmbedding:
    """One image as the text model takes it: ``rows`` ``[n_tokens, n_embd]`` float32,
    placed between the texts ``before`` and ``after``; ``digest`` identifies the pixels
    (and the projector) for caches."""

    rows: np.ndarray
    digest: str
    before: str = ""
    after: str = ""
    size: tuple[int, int] = (0, 0)  # the encoded image's (width, height)

    @property
    def n_tokens(self) -> int:
        return int(self.rows.shape[0])


class _ReshapedTensors:
    """The projector file as a backend sees it when uploading, with some tensors given
    another GGML shape of the same elements (a convolution kernel as a matrix)."""

    def __init__(self, gguf, shapes: dict[str, tuple[int, ...]]):
        self.gguf = gguf
        self.path = gguf.path
        self.tensors = dict(gguf.tensors)
        self._shapes = shapes
        for name, shape in shapes.items():
            self.tensors[name] = attrs.evolve(gguf.tensors[name], shape=tuple(shape))

    def tensor_data(self, name: str) -> np.ndarray:
        data = self.gguf.tensor_data(name)
        shape = self._shapes.get(name)
        if shape is None:
            return data
        info = self.tensors[name]
        if data.dtype == np.uint8 and info.type_name not in ("I8",):  # block-quantized rows
            return data.reshape(tuple(reversed(shape))[:-1] + (info.row_bytes,))
        return data.reshape(tuple(reversed(shape)))

    def __getattr__(self, name):
        return getattr(self.gguf, name)


def _family_step(gguf, family, what: str, fn, *args):
    """A step of the family's code on the projector's metadata: errors its values cause
    become a ModelConfigError naming the file (the family's own checks name the key)."""
    try:
        return fn(*args)
    except CeraError:
        raise
    except (ArithmeticError, IndexError, ValueError, KeyError, TypeError) as e:
        raise ModelConfigError(
            f"{gguf.path}: the {family.name} family failed on this projector while {what} ({type(e).__name__}: {e})"
        ) from e


def _check_takes_embeddings(loaded, path) -> None:
    """The text model's family must feed embedding rows (`GraphBuilder.token_embeddings`)."""
    try:
        graph = loaded.model.build(Layout((2,), embeds=True), LAST_LOGITS, n_ctx=64)
    except UnsupportedOperation as e:
        raise ModelConfigError(f"{path}: {loaded.path.name} cannot take images: {e}") from None
    if EMBEDS not in graph.inputs:
        raise ModelConfigError(
            f"{path}: the {loaded.family} family of {loaded.path.name} takes token ids only, not image embeddings; "
            f"this projector needs a vision-language text model (such as LFM2-VL's)"
        )


class Projector:
    """An mmproj file bound to ``loaded``'s backend. See the module docstring."""

    def __init__(self, path, loaded, manager=None, cache_size: int = 8):
        from ..formats.gguf import GGUFFile
        from ..model import Weights
        from ..plugins.manager import get_manager
        from ..plugins.registry import load_factory

        self.path = Path(path)
        self.loaded = loaded
        self.backend = loaded.backend
        self.gguf = GGUFFile(self.path)
        try:
            arch = self.gguf.architecture
            if arch != "clip":
                raise ModelConfigError(
                    f"{self.path}: general.architecture is {arch!r}; a multimodal projector (mmproj) file has 'clip'"
                )
            ptype = self.gguf.metadata.get("clip.projector_type") or self.gguf.metadata.get("clip.vision.projector_type")
            if not isinstance(ptype, str) or not ptype:
                raise ModelConfigError(f"{self.path}: an mmproj file needs clip.projector_type (which projector it is)")
            manager = manager or get_manager()
            family = manager.family_for(f"clip.{ptype}")
            cls = load_factory(family.factory)
            config = _family_step(self.gguf, family, "reading its hyperparameters", cls.read_config, self.gguf)
            weights = Weights.from_gguf(self.gguf)
            self.encoder = _family_step(self.gguf, family, "binding its tensors", cls, config, weights)
            weights.check_all_used(family.name)
            self.family = family.name
            _check_takes_embeddings(loaded, self.path)
            n_text = int(getattr(loaded.model.config, "n_embd", 0) or 0)
            if n_text and self.encoder.n_embd_out != n_text:
                raise ModelConfigError(
                    f"{self.path}: the projector gives rows of {self.encoder.n_embd_out} values but the text model "
                    f"{loaded.path.name} takes {n_text}: this mmproj belongs to another model"
                )
            probe = self.encoder.build_image(config.align * 2, config.align * 2)
            self.backend.check_ops(probe)
            refs = {}
            for g_ref in probe.weights_used().values():
                refs[g_ref.name] = g_ref
            file = self.gguf.tensors
            shapes = {n: r.shape for n, r in refs.items() if tuple(file[n].shape) != tuple(r.shape)}
            source = _ReshapedTensors(self.gguf, shapes) if shapes else self.gguf
            self.weights = {n: self.backend.upload(source, n) for n in sorted(refs)}
        except BaseException:
            self.gguf.close()
            raise
        self._cache: OrderedDict = OrderedDict()  # (height, width) -> compiled encoder
        self._encoded: OrderedDict = OrderedDict()  # digest -> ImageEmbedding, the latest few
        self._cache_size = cache_size
        self._lock = threading.Lock()
        st = self.path.stat()
        ident = f"{self.path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        self._digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
        self.n_encoded = 0

    def _executable(self, height: int, width: int):
        key = (height, width)
        with self._lock:
            exe = self._cache.get(key)
            if exe is not None:
                self._cache.move_to_end(key)
                return exe
        graph = self.encoder.build_image(height, width)
        exe = self.backend.compile(graph, self.weights, None)
        with self._lock:
            self._cache[key] = exe
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return exe

    def preprocess(self, image) -> np.ndarray:
        """The encoder's normalized pixels of ``image`` (as `encode` computes them)."""
        return self.encoder.preprocess(load_image(image))

    def encode(self, image, what: str | None = None) -> ImageEmbedding:
        """``image`` (path, bytes, data: URL or RGB array) to its embedding rows."""
        rgb = load_image(image, what)
        digest = hashlib.sha256(self._digest.encode() + np.asarray(rgb.shape).tobytes() + rgb.tobytes()).hexdigest()
        with self._lock:
            done = self._encoded.get(digest)
            if done is not None:  # a chat renders its whole conversation each turn: its images are encoded once
                self._encoded.move_to_end(digest)
                return done
        pixels = self.encoder.preprocess(rgb)
        h, w = int(pixels.shape[0]), int(pixels.shape[1])
        exe = self._executable(h, w)
        inputs = self.encoder.image_inputs(pixels)
        n = exe.graph.layout.n_tokens
        out = exe.run(None, StepInputs(
            tokens=np.zeros(n, np.int32), positions=np.arange(n, dtype=np.int32),
            slots=np.zeros(1, np.int32), starts=np.zeros(1, np.int32), extra=inputs,
        ))  # fmt: skip
        rows = np.ascontiguousarray(out[EMBEDDINGS], np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.encoder.n_embd_out:
            raise ShapeError(f"the {self.family} encoder returned {rows.shape}, not rows of {self.encoder.n_embd_out}")
        self.n_encoded += 1
        rows.setflags(write=False)
        embedding = ImageEmbedding(rows, digest, self.encoder.image_begin, self.encoder.image_end, (w, h))
        with self._lock:
            self._encoded[digest] = embedding
            while len(self._encoded) > self._cache_size:
                self._encoded.popitem(last=False)
        return embedding

    def close(self) -> None:
        self._cache.clear()
        self._encoded.clear()
        self.gguf.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["EMBEDDINGS", "MEDIA_MARKER", "ImageEmbedding", "Projector"]
