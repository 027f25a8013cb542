#!/usr/bin/env python3
"""models.py — random-weight bf16 Hugging Face models for the GPU bench and parity runs.

Shapes: l1b = Llama-3.2-1B, l8b = Llama-3.1-8B (vocab 128256), weights drawn on the GPU
(normal, std 0.02; norms 1) and written as config.json + model.safetensors (bf16). Parity
models (llama, qwen2, qwen3, gemma3) are small, with weights scaled as
scripts/gen_parity.py does so that greedy continuations are not degenerate.

  models.py bench DIR [l1b l8b]     # DIR/l1b, DIR/l8b
  models.py parity DIR              # DIR/{llama,qwen2,qwen3,gemma3}
"""
import json
import math
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

BENCH = {
    "l1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                tie_word_embeddings=True, rope_factor=32.0),
    "l8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                tie_word_embeddings=False, rope_factor=8.0),
}


def write_config(d, cfg, extra):
    cd = cfg.to_dict()
    cd.update(extra)
    cd["torch_dtype"] = "bfloat16"
    cd.pop("_attn_implementation_autoset", None)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cd, f, indent=1, sort_keys=True)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 128000, "eos_token_id": 128001, "do_sample": False}, f)


def make_bench(d, name):
    s = dict(BENCH[name])
    factor = s.pop("rope_factor")
    rs = dict(rope_type="llama3", factor=factor, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=8192)
    cfg = transformers.LlamaConfig(vocab_size=128256, max_position_embeddings=131072,
                                   rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=rs,
                                   bos_token_id=128000, eos_token_id=128001,
                                   attention_bias=False, mlp_bias=False, **s)
    cfg.architectures = ["LlamaForCausalLM"]
    os.makedirs(d, exist_ok=True)
    write_config(d, cfg, {"rope_theta": 500000.0, "rope_scaling": rs})
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(1234)
    E, F, H, KV, HD = (s["hidden_size"], s["intermediate_size"], s["num_attention_heads"],
                       s["num_key_value_heads"], s["head_dim"])

    def rnd(*shape):
        t = torch.empty(shape, dtype=torch.bfloat16, device=dev)
        t.normal_(0.0, 0.02, generator=g)
        return t.cpu()

    sd = {"model.embed_tokens.weight": rnd(128256, E),
          "model.norm.weight": torch.ones(E, dtype=torch.bfloat16)}
    if not s["tie_word_embeddings"]:
        sd["lm_head.weight"] = rnd(128256, E)
    for i in range(s["num_hidden_layers"]):
        p = "model.layers.%d." % i
        sd[p + "input_layernorm.weight"] = torch.ones(E, dtype=torch.bfloat16)
        sd[p + "post_attention_layernorm.weight"] = torch.ones(E, dtype=torch.bfloat16)
        sd[p + "self_attn.q_proj.weight"] = rnd(H * HD, E)
        sd[p + "self_attn.k_proj.weight"] = rnd(KV * HD, E)
        sd[p + "self_attn.v_proj.weight"] = rnd(KV * HD, E)
        sd[p + "self_attn.o_proj.weight"] = rnd(E, H * HD)
        sd[p + "mlp.gate_proj.weight"] = rnd(F, E)
        sd[p + "mlp.up_proj.weight"] = rnd(F, E)
        sd[p + "mlp.down_proj.weight"] = rnd(E, F)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


COMMON = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=2, head_dim=32,
              max_position_embeddings=1024, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
              pad_token_id=0)
PARITY = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", 11,
              dict(COMMON, tie_word_embeddings=False, rope_theta=10000.0, hidden_act="silu"),
              {"rope_theta": 10000.0}),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", 22,
              dict(COMMON, tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
                   use_sliding_window=False, hidden_act="silu"), {"rope_theta": 1000000.0}),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", 33,
              dict(COMMON, tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6,
                   attention_bias=False, use_sliding_window=False, hidden_act="silu"),
              {"rope_theta": 1000000.0}),
    "gemma3": ("Gemma3ForCausalLM", "Gemma3TextConfig", 44,
               dict(COMMON, num_hidden_layers=6, tie_word_embeddings=True, rms_norm_eps=1e-6,
                    sliding_window=16, sliding_window_pattern=6, rope_theta=1000000.0,
                    rope_local_base_freq=10000.0, query_pre_attn_scalar=32,
                    hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
                    attn_logit_softcapping=None),
               {"rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                "sliding_window_pattern": 6}),
}


def make_parity(d, name):
    cls, cfgcls, seed, kw, extra = PARITY[name]
    cfg = getattr(transformers, cfgcls)(**kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, cls)(cfg).float().eval()
    gemma = name == "gemma3"
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or "layernorm" in n:
                base = (3.0 if ".post_" in n else 0.0) if gemma else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif n.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in n or "lm_head" in n:
                p.copy_((0.2 if gemma else 0.3) * torch.randn(p.shape, generator=g))
            else:
                p.copy_(2.0 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=g))
    if cfg.tie_word_embeddings:
        model.tie_weights()
    model = model.to(torch.bfloat16)
    cfg.architectures = [cls]
    os.makedirs(d, exist_ok=True)
    write_config(d, cfg, extra)
    sd = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def main():
    what, root = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or (list(BENCH) if what == "bench" else list(PARITY))
    for n in names:
        (make_bench if what == "bench" else make_parity)(os.path.join(root, n), n)
        print("made", os.path.join(root, n), flush=True)


if __name__ == "__main__":
    main()
