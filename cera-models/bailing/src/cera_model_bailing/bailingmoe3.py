"""bailingmoe3 (inclusionAI's Ling 3.0): a hybrid of Kimi delta attention (KDA) and gated
multi-head latent attention (MLA) layers over routed experts, as llama.cpp's graph.

Layers with no KV head (``attention.head_count_kv`` 0) are KDA layers::

    q, k, v = silu(conv_x(W_x h))             depthwise causal convs, carried state each
    f = W_f h + dt_bias;  b = W_beta h          per channel / per head
    y = kda(q, k, v, f, b, A)                   gated delta rule, decay per key channel
    out = W_o (rms_norm_head(y) * sigmoid(W_g h))

The others are MLA layers in llama.cpp's absorbed form (the cache holds the normed KV
latent and the rotary key part; values are the latent)::

    q = W_q h -> [nope | rope] per head;  [kv | k_pe] = W_kv_a h;  kv = rms_norm(kv)
    q = [k_b(q_nope) | rope(q_pe)];  k = [kv | rope(k_pe)]   (one KV head)
    o = v_b(attend(q, k, kv)) * sigmoid(W_gate h) per head;  out = W_o o

The first ``leading_dense_block_count`` feed-forwards are dense SwiGLU; the others route
each token to ``expert_used_count`` experts by sigmoid scores (a selection bias only
chooses; group-limited when the file has expert groups; weights renormalised and scaled)
and add a shared expert. The multi-token-prediction layers after the trunk
(``nextn_predict_layers``) are not run.
"""

from __future__ import annotations

import math

import attrs

from cera.blocks.decoder import DecoderConfig, DecoderModel, read_decoder_config
from cera.blocks.layers import FeedForwardWeights, feed_forward
from cera.errors import InvalidModelFile, ModelConfigError
from cera.graph.builder import GraphBuilder, Tensor, WeightRef
from cera.graph.ops import AttentionSpec
from cera.state import AttentionKV, ShortConv, SSMState

GATINGS = {1: "softmax", 2: "sigmoid"}  # llama_expert_gating_func_type


@attrs.frozen
class BailingMoe3Config(DecoderConfig):
    kda_head_dim: int = 0
    conv_kernel: int = 0
    gate_lower_bound: float = 0.0
    kv_rank: int = 0
    q_rank: int = 0
    head_dim_qk: int = 0  # MLA's query/key head: nope + rope
    head_dim_mla_v: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    n_groups: int = 1
    n_groups_used: int = 1
    gating: str = "sigmoid"
    n_ff_exp: int = 0
    n_ff_shexp: int = 0
    n_dense: int = 0
    n_mtp: int = 0  # multi-token-prediction layers after the trunk (not run: see __init__)
    expert_scale: float | None = None
    expert_norm: bool = False


@attrs.define
class KdaWeights:
    q: WeightRef
    k: WeightRef
    v: WeightRef
    convs: tuple[WeightRef, WeightRef, WeightRef]
    f: WeightRef
    dt_bias: WeightRef
    beta: WeightRef
    a: WeightRef
    g: WeightRef
    norm: WeightRef
    o: WeightRef


@attrs.define
class MlaWeights:
    q: WeightRef | None
    q_a: WeightRef | None
    q_a_norm: WeightRef | None
    q_b: WeightRef | None
    kv_a: WeightRef
    kv_a_norm: WeightRef
    k_b: WeightRef
    v_b: WeightRef
    gate: WeightRef
    o: WeightRef


@attrs.define
class MoeWeights:
    router: WeightRef
    bias: WeightRef
    gate: WeightRef
    up: WeightRef
    down: WeightRef
    shared: FeedForwardWeights


class BailingMoe3Model(DecoderModel):
    family = "bailingmoe3"

    @classmethod
    def read_config(cls, gguf) -> BailingMoe3Config:
        config, hp = read_decoder_config(gguf, cls.family)
        path = gguf.path
        if not hp.opt("kda.safe_gate", True, bool):
            raise ModelConfigError(f"{path}: {hp.key('kda.safe_gate')} is false; llama.cpp and cera compute safe gates only")
        if hp.has("rope.dimension_sections"):
            raise ModelConfigError(
                f"{path}: {hp.key('rope.dimension_sections')}: multimodal RoPE sections (a VL file) are not served by "
                f"cera yet; use a text-only file"
            )
        n_mtp = hp.opt("nextn_predict_layers", 0, int)
        if not 0 <= n_mtp < config.n_layer:
            raise ModelConfigError(f"{path}: {hp.key('nextn_predict_layers')} is {n_mtp} of {config.n_layer} blocks")
        if n_mtp:  # the trunk is the first block_count - n_mtp layers (llama.cpp's n_layer)
            n = config.n_layer - n_mtp
            config = attrs.evolve(config, n_layer=n, kv_heads=config.kv_heads[:n], windows=config.windows[:n])
        for key in ("swiglu_clamp_exp", "swiglu_clamp_shexp"):
            if any(v != 0 for v in hp.per_layer(key, config.n_layer + n_mtp, 0.0, float)):
                raise ModelConfigError(f"{path}: {hp.key(key)} clamps the experts' SwiGLU, which cera does not compute yet")
        gating = hp.req("expert_gating_func")
        if gating not in GATINGS:
            raise ModelConfigError(f"{path}: {hp.key('expert_gating_func')} is {gating}; cera knows 1 (softmax) and 2 (sigmoid)")
        nope_rope, rope = hp.req("attention.key_length_mla"), config.rope.n_dims
        extra = dict(
            kda_head_dim=hp.req("kda.head_dim"),
            conv_kernel=hp.req("ssm.conv_kernel"),
            gate_lower_bound=hp.req("kda.gate_lower_bound", float),
            kv_rank=hp.req("attention.kv_lora_rank"),
            q_rank=hp.opt("attention.q_lora_rank", 0, int),
            head_dim_qk=nope_rope,
            head_dim_mla_v=hp.req("attention.value_length_mla"),
            n_expert=hp.req("expert_count"),
            n_expert_used=hp.req("expert_used_count"),
            n_groups=hp.opt("expert_group_count", 1, int),
            n_groups_used=hp.opt("expert_group_used_count", 1, int),
            gating=GATINGS[gating],
            n_ff_exp=hp.req("expert_feed_forward_length"),
            n_ff_shexp=hp.opt("expert_shared_feed_forward_length", 0, int),
            n_dense=hp.req("leading_dense_block_count"),
            n_mtp=n_mtp,
            expert_norm=hp.opt("expert_weights_norm", False, bool),
        )
        scale = hp.opt("expert_weights_scale", 0.0, float)
        extra["expert_scale"] = None if scale in (0.0, 1.0) else scale
        n_shared = hp.req("expert_shared_count")
        if extra["n_ff_shexp"] == 0:  # llama.cpp: the expert width times the shared count
            extra["n_ff_shexp"] = extra["n_ff_exp"] * max(1, n_shared)
        e, k, G, Gu = extra["n_expert"], extra["n_expert_used"], extra["n_groups"], extra["n_groups_used"]
        if not 0 < k <= e or (G > 1 and (e % G or not 0 < Gu <= G or k > Gu * (e // G))):
            raise ModelConfigError(f"{path}: {k} experts per token out of {e} in {G} groups ({Gu} used)")
        if not extra["gate_lower_bound"] < 0:
            raise ModelConfigError(f"{path}: {hp.key('kda.gate_lower_bound')} is {extra['gate_lower_bound']}; it must be negative")
        if not 0 < rope < nope_rope or config.attn.head_dim_k != extra["kv_rank"] + rope:
            raise ModelConfigError(
                f"{path}: MLA heads of {nope_rope} with {rope} rotary dimensions and a cached key of "
                f"{config.attn.head_dim_k} (it must be {hp.key('attention.kv_lora_rank')} + {rope})"
            )
        if not 0 <= extra["n_dense"] <= config.n_layer:
            raise ModelConfigError(f"{path}: {hp.key('leading_dense_block_count')} is {extra['n_dense']}")
        hp.check_all_understood()
        mixers = tuple("ssm" if kv == 0 else "attention" for kv in config.kv_heads)
        config = attrs.evolve(config, mixers=mixers, attention_scale=1.0 / math.sqrt(nope_rope))
        return BailingMoe3Config(**attrs.asdict(config, recurse=False), **extra)

    def __init__(self, config: BailingMoe3Config, weights):
        super().__init__(config, weights)
        # The MTP layers predict a further token for speculative decoding; a plain forward
        # pass never reads them (llama.cpp skips them unless asked to load them). Known,
        # not used.
        for i in range(config.n_layer, config.n_layer + config.n_mtp):
            weights.used.update(n for n in weights.tensors if n.startswith(f"blk.{i}."))

    # -- weights ---------------------------------------------------------------------------

    def load_mixer(self, w, i: int):
        c = self.config
        b = f"blk.{i}."
        if c.mixer(i) == "ssm":
            inner = c.attn.n_head * c.kda_head_dim

            def conv(x):
                ref = w[f"{b}ssm_conv1d_{x}.weight"]
                if ref.shape[0] * inner != math.prod(ref.shape) or ref.shape[0] != c.conv_kernel:
                    raise InvalidModelFile(w.source, None, f"{ref.name} of shape {ref.shape} for {inner} channels")
                return WeightRef(ref.name, ref.ggml_type, (c.conv_kernel, inner))  # [kernel, channels]

            return KdaWeights(
                q=w[b + "attn_q.weight"], k=w[b + "attn_k.weight"], v=w[b + "attn_v.weight"],
                convs=(conv("q"), conv("k"), conv("v")), f=w[b + "ssm_f_a.weight"], dt_bias=w[b + "ssm_dt.bias"],
                beta=w[b + "ssm_beta.weight"], a=w[b + "ssm_a"], g=w[b + "ssm_g_a.weight"], norm=w[b + "ssm_norm.weight"],
                o=w[b + "attn_output.weight"],
            )  # fmt: skip
        lora = c.q_rank > 0
        return MlaWeights(
            q=None if lora else w[b + "attn_q.weight"],
            q_a=w[b + "attn_q_a.weight"] if lora else None,
            q_a_norm=w[b + "attn_q_a_norm.weight"] if lora else None,
            q_b=w[b + "attn_q_b.weight"] if lora else None,
            kv_a=w[b + "attn_kv_a_mqa.weight"], kv_a_norm=w[b + "attn_kv_a_norm.weight"],
            k_b=w[b + "attn_k_b.weight"], v_b=w[b + "attn_v_b.weight"], gate=w[b + "attn_gate.weight"],
            o=w[b + "attn_output.weight"],
        )  # fmt: skip

    def load_ffn(self, w, i: int):
        c = self.config
        b = f"blk.{i}."
        if i < c.n_dense:
            return FeedForwardWeights.load(w, i)
        e = MoeWeights(
            router=w[b + "ffn_gate_inp.weight"], bias=w[b + "exp_probs_b.bias"], gate=w[b + "ffn_gate_exps.weight"],
            up=w[b + "ffn_up_exps.weight"], down=w[b + "ffn_down_exps.weight"],
            shared=FeedForwardWeights(gate=w[b + "ffn_gate_shexp.weight"], up=w[b + "ffn_up_shexp.weight"],
                                      down=w[b + "ffn_down_shexp.weight"]),
        )  # fmt: skip
        if e.gate.shape != (c.n_embd, c.n_ff_exp, c.n_expert):
            raise InvalidModelFile(w.source, None, f"layer {i}: ffn_gate_exps {e.gate.shape} for {c.n_expert} experts of {c.n_ff_exp}")
        return e

    def declare_state(self, i: int):
        c = self.config
        if c.mixer(i) == "ssm":
            inner, hd = c.attn.n_head * c.kda_head_dim, c.kda_head_dim
            convs = tuple(self.state.add(ShortConv(inner, c.conv_kernel)) for _ in range(3))
            return (*convs, self.state.add(SSMState(c.attn.n_head, hd, hd)))
        rope = self.layer_rope(i)
        return self.state.add(AttentionKV(1, c.kv_rank + rope.n_dims, c.kv_rank, rope=rope))

    # -- the forward pass ------------------------------------------------------------------

    def mixer(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        return self.kda(g, i, h) if self.config.mixer(i) == "ssm" else self.mla(g, i, h)

    def kda(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        c, L = self.config, self.layers[i].attn
        n, H, hd = h.shape[0], c.attn.n_head, c.kda_head_dim
        *conv_states, state = self.kv[i]
        q, k, v = (
            g.reshape(g.unary("silu", g.conv1d_causal(g.linear(h, w), conv, st)), (n, H, hd))
            for w, conv, st in zip((L.q, L.k, L.v), L.convs, conv_states, strict=True)
        )
        f = g.reshape(g.linear(h, L.f, L.dt_bias), (n, H, hd))
        y = g.kda(q, k, v, f, g.linear(h, L.beta), L.a, state, eps=c.eps, lower_bound=c.gate_lower_bound)
        y = g.sigmoid_gate(g.rms_norm(y, L.norm, c.eps), g.reshape(g.linear(h, L.g), (n, H, hd)))
        return g.linear(g.reshape(y, (n, H * hd)), L.o)

    def mla(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        c, L = self.config, self.layers[i].attn
        n, H, rank = h.shape[0], c.attn.n_head, c.kv_rank
        rope = self.layer_rope(i)
        nope = c.head_dim_qk - rope.n_dims
        q = g.linear(g.rms_norm(g.linear(h, L.q_a), L.q_a_norm, c.eps), L.q_b) if L.q is None else g.linear(h, L.q)
        q_nope, q_pe = g.split(g.reshape(q, (n, H, c.head_dim_qk)), (nope, rope.n_dims))
        kv, k_pe = g.split(g.linear(h, L.kv_a), (rank, rope.n_dims))
        q_pe = g.rope(q_pe, g.positions, rope)
        k_pe = g.rope(g.reshape(k_pe, (n, 1, rope.n_dims)), g.positions, rope)
        kv = g.reshape(g.rms_norm(kv, L.kv_a_norm, c.eps), (n, 1, rank))
        q = g.concat(g.head_linear(q_nope, L.k_b), q_pe)
        out = g.attention(q, g.concat(kv, k_pe), kv, self.kv[i], AttentionSpec(scale=c.attention_scale))
        out = g.head_linear(g.reshape(out, (n, H, rank)), L.v_b)
        out = g.sigmoid_gate(out, g.reshape(g.linear(h, L.gate), (n, H, 1)))
        return g.linear(g.reshape(out, (n, H * c.head_dim_mla_v)), L.o)

    def ffn(self, g: GraphBuilder, i: int, h: Tensor) -> Tensor:
        c = self.config
        if i < c.n_dense:
            return super().ffn(g, i, h)
        e = self.layers[i].ffn
        routed = g.moe(
            h, e.router, e.gate, e.up, e.down, c.n_expert_used, gating=c.gating, selection_bias=e.bias,
            norm_topk=c.expert_norm, weight_scale=c.expert_scale, groups=c.n_groups, groups_used=c.n_groups_used,
        )  # fmt: skip
        return g.add(routed, feed_forward(g, h, e.shared))
