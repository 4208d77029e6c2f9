"""Make NeMo's stored outputs that the Streaming Sortformer tests compare against.

Run from the repository root in an environment with the peer installed (CPU torch, then
``pip install "nemo-toolkit[asr]"``; measured with nemo-toolkit 2.7.3 and torch 2.13):

    python tests/audio_diarizer/data/make_sortformer_reference.py

It builds a ``SortformerEncLabelModel`` of the architecture of
``nvidia/diar_streaming_sortformer_4spk-v2.1`` (NeMo's streaming_sortformer_diarizer_4spk-v2
configuration: 128 log-mel features, dw_striding subsampling by 8, a rel_pos FastConformer
with untied biases, xscaling, batch-norm convolution modules of kernel 9, a post-LN
Transformer of ReLU feed-forwards, 4 sigmoid speaker outputs, the speaker-cache update
rules and their constants) with its sizes shrunk so that the files stay small: FastConformer
d_model 32 (4 heads, 2 layers, 8 subsampling channels), Transformer 24 (4 heads, inner 48,
2 layers), and a small speaker cache (16 frames, FIFO 8, chunks of 6 with 1 left and 7 right
context frames, update period 8) so that a short input fills and compresses the cache many
times. Weights are random (seed 0), including the biases the defaults set to zero and the
batch-norm statistics; the last layer is scaled up and its biases set so that each
speaker's mean logit on the input is -2.5: probabilities spread over (0, 1), every slot is
active part of the time and a frame is silent for all (the cache's silence profile is
used).

Writes beside this script:
- ``sortformer_tiny.nemo``: the model, saved by NeMo (``save_to``);
- ``sortformer_reference.npz``: for the first 8 s of two_voices.flac (read as float32),
  NeMo's ``mel`` features ``[frames, 128]``, ``pre_encode`` (the subsampling's output),
  ``encoder`` (the FastConformer's output after the projection to the Transformer's size),
  ``offline`` (``forward_infer`` over the whole input: speaker probabilities ``[frames, 4]``),
  ``streaming`` (``forward_streaming`` on the same features) and ``streaming_audio``
  (``forward`` on the audio: front end and streaming together).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent
SECONDS = 8.0


def config():
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "sample_rate": 16000,
            "pil_weight": 0.5,
            "ats_weight": 0.5,
            "max_num_of_spks": 4,
            "streaming_mode": True,
            "model_defaults": {"fc_d_model": 32, "tf_d_model": 24},
            "preprocessor": {
                "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
                "normalize": "NA", "window_size": 0.025, "sample_rate": 16000, "window_stride": 0.01,
                "window": "hann", "features": 128, "n_fft": 512, "frame_splicing": 1, "dither": 0.00001,
            },
            "sortformer_modules": {
                "_target_": "nemo.collections.asr.modules.sortformer_modules.SortformerModules",
                "num_spks": 4, "dropout_rate": 0.5, "fc_d_model": 32, "tf_d_model": 24,
                "spkcache_len": 16, "fifo_len": 8, "chunk_len": 6, "spkcache_update_period": 8,
                "chunk_left_context": 1, "chunk_right_context": 7, "spkcache_sil_frames_per_spk": 3,
                "scores_add_rnd": 0, "pred_score_threshold": 0.25, "max_index": 99999,
                "scores_boost_latest": 0.05, "sil_threshold": 0.2, "strong_boost_rate": 0.75,
                "weak_boost_rate": 1.5, "min_pos_scores_rate": 0.5, "causal_attn_rate": 0.5, "causal_attn_rc": 7,
            },
            "encoder": {
                "_target_": "nemo.collections.asr.modules.ConformerEncoder",
                "feat_in": 128, "feat_out": -1, "n_layers": 2, "d_model": 32,
                "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 8,
                "causal_downsampling": False, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
                "n_heads": 4, "att_context_size": [-1, -1], "att_context_style": "regular", "xscaling": True,
                "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9,
                "conv_norm_type": "batch_norm", "conv_context_size": None, "dropout": 0.1,
                "dropout_pre_encoder": 0.1, "dropout_emb": 0.0, "dropout_att": 0.1,
            },
            "transformer_encoder": {
                "_target_": "nemo.collections.asr.modules.transformer.transformer_encoders.TransformerEncoder",
                "num_layers": 2, "hidden_size": 24, "inner_size": 48, "num_attention_heads": 4,
                "attn_score_dropout": 0.5, "attn_layer_dropout": 0.5, "ffn_dropout": 0.5,
                "hidden_act": "relu", "pre_ln": False, "pre_ln_final_layer_norm": True,
            },
            "loss": {"_target_": "nemo.collections.asr.losses.bce_loss.BCELoss", "weight": None, "reduction": "mean"},
        }
    )  # fmt: skip


def main() -> None:
    import torch
    from nemo.collections.asr.models import SortformerEncLabelModel

    torch.manual_seed(0)
    model = SortformerEncLabelModel(cfg=config())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "pos_bias" in name:
                p.copy_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn_like(b))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand_like(b))
        model.sortformer_modules.single_hidden_to_spks.weight.mul_(40.0)
    model.eval()
    audio, sr = sf.read(HERE / "two_voices.flac", dtype="float32")
    assert sr == 16000 and audio.ndim == 1
    audio = audio[: int(SECONDS * sr)]
    x = torch.from_numpy(audio)[None]
    n = torch.tensor([len(audio)])
    with torch.no_grad():
        # centre each speaker's logit on this input, then lower it by 2.5, so that each slot
        # is active part of the time and some frames are silent for all
        mel, mel_len = model.process_signal(audio_signal=x, audio_signal_length=n)
        p = model.forward_infer(*model.frontend_encoder(processed_signal=mel[:, :, : mel_len.max()],
                                                        processed_signal_length=mel_len))[0]
        logit = torch.log(p / (1 - p)).mean(dim=0)
        model.sortformer_modules.single_hidden_to_spks.bias.sub_(logit + 2.5)
    model.save_to(str(HERE / "sortformer_tiny.nemo"))
    with torch.no_grad():
        mel, mel_len = model.process_signal(audio_signal=x, audio_signal_length=n)
        mel = mel[:, :, : mel_len.max()]
        pre, pre_len = model.encoder.pre_encode(x=mel.transpose(1, 2), lengths=mel_len)
        emb, emb_len = model.frontend_encoder(processed_signal=mel, processed_signal_length=mel_len)
        offline = model.forward_infer(emb, emb_len)
        streaming = model.forward_streaming(mel, mel_len)
        streaming_audio = model.forward(audio_signal=x, audio_signal_length=n)
    out = {
        "mel": mel[0].T.numpy(),
        "pre_encode": pre[0].numpy(),
        "encoder": emb[0].numpy(),
        "offline": offline[0].numpy(),
        "streaming": streaming[0].numpy(),
        "streaming_audio": streaming_audio[0].numpy(),
    }
    np.savez_compressed(HERE / "sortformer_reference.npz", **{k: v.astype(np.float32) for k, v in out.items()})
    for k, v in out.items():
        print(k, v.shape, float(np.min(v)), float(np.max(v)))
    s = out["streaming"]
    print("silent frames", int((s.sum(1) < 0.2).sum()), "active frames per speaker", (s > 0.5).sum(0))


if __name__ == "__main__":
    main()
