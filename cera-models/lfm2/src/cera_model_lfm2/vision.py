"""LFM2-VL's image encoder: a SigLIP2 NaFlex vision tower and LFM2-VL's projector, from an
mmproj GGUF (``general.architecture`` ``clip``, ``clip.projector_type`` ``lfm2``).

One image (already resized and normalized, `cera_model_lfm2.vision_preprocess`) is one
pass over its patches, as llama.cpp's clip graph for PROJECTOR_TYPE_LFM2 computes it:

    patches (16 x 16 x 3 each, in the kernel's channel, row, column order) -> linear
    (the patch convolution) + the learned position embeddings resized to the patch grid
    -> blocks of x + attn(LayerNorm(x)), x + MLP_gelu(LayerNorm(x)) with bidirectional
    attention -> LayerNorm -> pixel unshuffle (each 2 x 2 block of patches becomes one
    row of 4 x the width) -> LayerNorm -> linear, GELU, linear: one row per image token,
    of the text model's width.

The position embeddings (a 16 x 16 grid) are resized on the host, once per grid size, with
ggml's bilinear interpolation with antialiasing (what llama.cpp's graph asks ggml for),
and enter the graph as an input; the pixel unshuffle is a row gather and a reshape.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from cera.errors import InvalidModelFile, ModelConfigError, UnsupportedOperation
from cera.graph.builder import Graph, GraphBuilder, Layout, Outputs
from cera.graph.ops import AttentionSpec
from cera.model import Model

from .vision_preprocess import IMAGE_BEGIN, IMAGE_END, preprocess

PATCHES, POSITIONS, EMBEDDINGS = "patches", "pos_embd", "embeddings"

# the clip.* keys of an LFM2-VL mmproj, and whether each is required
KEYS = {
    "clip.projector_type": True,
    "clip.has_vision_encoder": True,
    "clip.vision.embedding_length": True,
    "clip.vision.feed_forward_length": True,
    "clip.vision.block_count": True,
    "clip.vision.attention.head_count": True,
    "clip.vision.patch_size": True,
    "clip.vision.image_size": False,
    "clip.vision.image_mean": True,
    "clip.vision.image_std": True,
    "clip.vision.attention.layer_norm_epsilon": True,
    "clip.vision.projector.scale_factor": False,
    "clip.vision.projection_dim": False,
    "clip.use_gelu": False,
    "clip.has_text_encoder": False,
    "clip.has_audio_encoder": False,
    "clip.has_llava_projector": False,
}


@attrs.frozen
class Lfm2VisionConfig:
    n_embd: int
    n_ff: int
    n_layer: int
    n_head: int
    patch_size: int
    eps: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    n_merge: int = 2
    n_embd_text: int = 0

    @property
    def align(self) -> int:
        """Image sides are multiples of this: a patch times the unshuffle factor."""
        return self.patch_size * self.n_merge


def read_vision_config(gguf) -> Lfm2VisionConfig:
    path = gguf.path
    unknown = sorted(k for k in gguf.metadata if k.startswith("clip.") and k not in KEYS)
    if unknown:
        raise ModelConfigError(
            f"{path}: the lfm2 vision encoder does not understand {', '.join(unknown[:3])}; it may change how the "
            f"encoder computes, so cera refuses to guess"
        )
    missing = [k for k, req in KEYS.items() if req and k not in gguf.metadata]
    if missing:
        raise ModelConfigError(f"{path}: an LFM2-VL projector needs {', '.join(missing)}")
    md = gguf.metadata
    if not md["clip.has_vision_encoder"]:
        raise ModelConfigError(f"{path}: clip.has_vision_encoder is false: this projector has no image encoder")
    if md.get("clip.use_gelu") is False:
        raise ModelConfigError(f"{path}: clip.use_gelu is false; LFM2-VL's vision MLP is GELU")

    def positive(key):
        v = md[key]
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v < 2**20:
            raise ModelConfigError(f"{path}: {key} is {v!r}; it must be a positive integer")
        return v

    def triple(key):
        v = md[key]
        try:
            t = tuple(float(x) for x in v)
        except TypeError:
            t = ()
        if len(t) != 3 or (key.endswith("std") and not all(x > 0 for x in t)):
            raise ModelConfigError(f"{path}: {key} is {v!r}; it must be three numbers (a positive std)")
        return t

    c = Lfm2VisionConfig(
        n_embd=positive("clip.vision.embedding_length"),
        n_ff=positive("clip.vision.feed_forward_length"),
        n_layer=positive("clip.vision.block_count"),
        n_head=positive("clip.vision.attention.head_count"),
        patch_size=positive("clip.vision.patch_size"),
        eps=float(md["clip.vision.attention.layer_norm_epsilon"]),
        mean=triple("clip.vision.image_mean"),
        std=triple("clip.vision.image_std"),
        n_merge=positive("clip.vision.projector.scale_factor") if "clip.vision.projector.scale_factor" in md else 2,
        n_embd_text=positive("clip.vision.projection_dim") if "clip.vision.projection_dim" in md else 0,
    )
    if c.n_embd % c.n_head:
        raise ModelConfigError(f"{path}: {c.n_embd} vision channels do not split into {c.n_head} heads")
    if not (c.eps > 0 and math.isfinite(c.eps)):
        raise ModelConfigError(f"{path}: clip.vision.attention.layer_norm_epsilon is {c.eps}; it must be positive")
    if c.n_merge < 2:
        raise ModelConfigError(f"{path}: clip.vision.projector.scale_factor is {c.n_merge}; LFM2-VL unshuffles by 2 or more")
    return c


@attrs.define
class _Block:
    ln1_w: object
    ln1_b: object
    q: tuple
    k: tuple
    v: tuple
    out: tuple
    ln2_w: object
    ln2_b: object
    up: tuple
    down: tuple


def resize_position_table(table: np.ndarray, height: int, width: int) -> np.ndarray:
    """The learned position embeddings ``[side * side, dim]`` (raster order) resized to a
    ``height x width`` patch grid: ggml_interpolate's bilinear filter with antialiasing
    (half-pixel centers, a triangle filter widened by the scale when shrinking, weights
    normalised), in float32 as ggml computes it."""
    n_pos, dim = table.shape
    side = math.isqrt(n_pos)
    if side * side != n_pos:
        raise InvalidModelFile("the projector", None, f"v.position_embd.weight has {n_pos} rows, not a square grid")
    grid = table.reshape(side, side, dim).astype(np.float32)
    if height == side and width == side:
        return grid.reshape(n_pos, dim).copy()

    def weights(n_out: int, n_in: int) -> np.ndarray:
        sf = np.float32(n_out / n_in)
        support = max(np.float32(1.0), np.float32(1.0) / sf)
        inv = np.float32(1.0) / np.float32(support)
        m = np.zeros((n_out, n_in), np.float32)
        for i in range(n_out):
            center = (np.float32(i) + np.float32(0.5)) / sf
            lo = max(int(center - support + np.float32(0.5)), 0)
            hi = min(int(center + support + np.float32(0.5)), n_in)
            for s in range(lo, hi):
                m[i, s] = max(np.float32(1.0) - abs((np.float32(s) - center + np.float32(0.5)) * inv), np.float32(0.0))
        return m

    wy, wx = weights(height, side), weights(width, side)
    # ggml sums w_y * w_x * value over the window and divides by the sum of the weights
    w2 = wy[:, None, :, None] * wx[None, :, None, :]  # [h, w, side_y, side_x]
    total = w2.sum(axis=(2, 3))
    out = np.einsum("hwyx,yxd->hwd", w2, grid, dtype=np.float32)
    out /= np.where(total > 0, total, 1.0)[..., None]
    return out.reshape(height * width, dim).astype(np.float32)


def unshuffle_order(grid_h: int, grid_w: int, s: int) -> tuple[int, ...]:
    """Row order that makes each s x s block of patches consecutive, blocks in raster
    order and, inside a block, rows then columns (ggml's pixel unshuffle of LFM2-VL)."""
    order = []
    for by in range(grid_h // s):
        for bx in range(grid_w // s):
            for dy in range(s):
                for dx in range(s):
                    order.append((by * s + dy) * grid_w + bx * s + dx)
    return tuple(order)


class Lfm2VisionEncoder(Model):
    """The encoder of an LFM2-VL mmproj, as `cera.vision.projector.Projector` drives it."""

    family = "lfm2-vision"
    image_begin, image_end = IMAGE_BEGIN, IMAGE_END

    @classmethod
    def read_config(cls, gguf) -> Lfm2VisionConfig:
        return read_vision_config(gguf)

    def __init__(self, config: Lfm2VisionConfig, weights):
        super().__init__(config, weights)
        c = config
        w = weights
        p = c.patch_size

        def lin(name, n_in, n_out):
            ref = w[f"{name}.weight"]
            if tuple(ref.shape) != (n_in, n_out):
                raise InvalidModelFile(w.source, None, f"{name}.weight has GGML shape {ref.shape}, expected {(n_in, n_out)}")
            return ref, w.get(f"{name}.bias")

        patch = w["v.patch_embd.weight"]
        if tuple(patch.shape) != (p, p, 3, c.n_embd):
            raise InvalidModelFile(w.source, None, f"v.patch_embd.weight has GGML shape {patch.shape}, expected {(p, p, 3, c.n_embd)}")
        self.patch_flat = attrs.evolve(patch, shape=(3 * p * p, c.n_embd))  # the same bytes, as a matrix
        self.patch_bias = w.get("v.patch_embd.bias")
        table = w.host("v.position_embd.weight")
        if table is None or table.ndim != 2 or table.shape[1] != c.n_embd:
            raise InvalidModelFile(w.source, None, "v.position_embd.weight is missing or not [positions, channels]")
        self.pos_table = table
        C, F = c.n_embd, c.n_ff
        self.blocks = [
            _Block(
                ln1_w=w[f"v.blk.{i}.ln1.weight"], ln1_b=w[f"v.blk.{i}.ln1.bias"],
                q=lin(f"v.blk.{i}.attn_q", C, C), k=lin(f"v.blk.{i}.attn_k", C, C), v=lin(f"v.blk.{i}.attn_v", C, C),
                out=lin(f"v.blk.{i}.attn_out", C, C),
                ln2_w=w[f"v.blk.{i}.ln2.weight"], ln2_b=w[f"v.blk.{i}.ln2.bias"],
                up=lin(f"v.blk.{i}.ffn_up", C, F), down=lin(f"v.blk.{i}.ffn_down", F, C),
            )
            for i in range(c.n_layer)
        ]  # fmt: skip
        self.post_ln = (w.get("v.post_ln.weight"), w.get("v.post_ln.bias"))
        merged = C * c.n_merge**2
        self.in_norm = (w.get("mm.input_norm.weight"), w.get("mm.input_norm.bias"))
        self.mm1 = w["mm.1.weight"], w.get("mm.1.bias")
        if self.mm1[0].shape[0] != merged:
            raise InvalidModelFile(w.source, None, f"mm.1.weight takes {self.mm1[0].shape[0]} inputs; the unshuffled rows have {merged}")
        self.mm2 = w["mm.2.weight"], w.get("mm.2.bias")
        self.n_embd_out = self.mm2[0].shape[1]
        if c.n_embd_text and c.n_embd_text != self.n_embd_out:
            raise InvalidModelFile(w.source, None, f"clip.vision.projection_dim is {c.n_embd_text}, mm.2 gives {self.n_embd_out}")
        self._pos_cache: dict[tuple[int, int], np.ndarray] = {}

    @property
    def n_vocab(self) -> int:
        return 0

    def n_tokens(self, height: int, width: int) -> int:
        """Image tokens of an image of this many pixels (sides multiples of `align`)."""
        s = self.config.align
        return (height // s) * (width // s)

    def forward(self, g: GraphBuilder) -> None:  # pragma: no cover - the encoder is built with build_image
        raise UnsupportedOperation("the LFM2-VL image encoder runs on images (build_image), not on tokens")

    def build_image(self, height: int, width: int) -> Graph:
        """The encoder graph of one image of ``height x width`` pixels."""
        c = self.config
        p, s = c.patch_size, c.n_merge
        if height % c.align or width % c.align or height <= 0 or width <= 0:
            raise UnsupportedOperation(f"an image of {width} x {height} pixels; the encoder takes sides that are multiples of {c.align}")
        gh, gw = height // p, width // p
        n = gh * gw
        g = GraphBuilder(Layout.single(n), Outputs())
        x = g.linear(g.input(PATCHES, (n, 3 * p * p)), self.patch_flat, self.patch_bias)
        x = g.add(x, g.input(POSITIONS, (n, c.n_embd)))
        heads, dh = c.n_head, c.n_embd // c.n_head
        spec = AttentionSpec(scale=1.0 / math.sqrt(dh), causal=False)
        for b in self.blocks:
            h = g.layer_norm(x, b.ln1_w, b.ln1_b, eps=c.eps)
            q = g.reshape(g.linear(h, *b.q), (n, heads, dh))
            k = g.reshape(g.linear(h, *b.k), (n, heads, dh))
            v = g.reshape(g.linear(h, *b.v), (n, heads, dh))
            a = g.reshape(g.attention_full(q, k, v, spec), (n, c.n_embd))
            x = g.add(x, g.linear(a, *b.out))
            h = g.layer_norm(x, b.ln2_w, b.ln2_b, eps=c.eps)
            h = g.linear(g.unary("gelu", g.linear(h, *b.up)), *b.down)
            x = g.add(x, h)
        if self.post_ln[0] is not None or self.post_ln[1] is not None:
            x = g.layer_norm(x, *self.post_ln, eps=c.eps)
        x = g.rows(x, unshuffle_order(gh, gw, s))
        x = g.reshape(x, (n // (s * s), c.n_embd * s * s))
        if self.in_norm[0] is not None or self.in_norm[1] is not None:
            x = g.layer_norm(x, *self.in_norm, eps=1e-5)  # nn.LayerNorm's default, as llama.cpp
        x = g.linear(g.unary("gelu", g.linear(x, *self.mm1)), *self.mm2)
        g.output(EMBEDDINGS, x)
        return g.finish()

    def preprocess(self, rgb: np.ndarray) -> np.ndarray:
        """An RGB image ``[h, w, 3]`` uint8 to the normalized pixels this encoder takes."""
        return preprocess(rgb, self.config)

    def image_inputs(self, pixels: np.ndarray) -> dict[str, np.ndarray]:
        """The graph's inputs for one normalized image ``[height, width, 3]`` (float32):
        its patches flattened as the kernel is (channel, row, column), and the position
        embeddings of its grid."""
        p = self.config.patch_size
        h, w, _ = pixels.shape
        gh, gw = h // p, w // p
        patches = pixels.reshape(gh, p, gw, p, 3).transpose(0, 2, 4, 1, 3).reshape(gh * gw, 3 * p * p)
        pos = self._pos_cache.get((gh, gw))
        if pos is None:
            pos = resize_position_table(self.pos_table, gh, gw)
            if len(self._pos_cache) < 64:
                self._pos_cache[(gh, gw)] = pos
        return {PATCHES: np.ascontiguousarray(patches, np.float32), POSITIONS: pos}


__all__ = ["Lfm2VisionConfig", "Lfm2VisionEncoder", "read_vision_config", "resize_position_table", "unshuffle_order"]
