#!/usr/bin/env python3
"""gen_parity.py — build tiny random-weight models and their reference goldens.

For each architecture (llama, llama3rope, qwen2, qwen3, gemma3) this builds a
tiny float32 model with Hugging Face transformers, saves it as an HF directory
(config.json, generation_config.json, model.safetensors) and as a GGUF F32
file written with llama.cpp's conventions, and records golden.json: prompt ids,
the full logits of every prompt position, and a 32-token greedy continuation.
The format is described in tests/data/parity/README.md.

Usage:
  scripts/gen_parity.py [--out tests/data/parity] [--arch NAME ...]
                        [--check-llamacpp]   # also load model.gguf with
                                             # llama-cpp-python and compare
  (set LLAMA_CPP_LIB_PATH to use a separately built libllama.so)
Needs: torch, transformers, safetensors, gguf, numpy (all from PyPI).
"""
from __future__ import annotations

import argparse
import base64
import json
import math
import os
import sys

import numpy as np
import torch

import gguf
import transformers
from safetensors.torch import save_file

PROMPT_LEN = 12
GEN_LEN = 32
MIN_GAP = 1e-2  # greedy steps must have top1 - top2 > this (tie-free)
MIN_DISTINCT = 8  # and use at least this many distinct tokens (no 1-token loop)
VOCAB = 272     # 3 specials + 256 byte tokens + 13 pieces

# ---------------------------------------------------------------- vocabulary
PIECES = ["\u2581", "e", "t", "a", "o", "i", "n", "s",
          "\u2581t", "\u2581a", "\u2581th", "\u2581the", "he"]


def make_vocab():
    """A small sentencepiece-style ("llama") vocab: <unk> <s> </s>, the 256
    byte-fallback tokens, then a few pieces. ids: unk 0, bos 1, eos 2."""
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        toks.append("<0x%02X>" % b)
        scores.append(0.0)
        types.append(6)  # BYTE
    for i, p in enumerate(PIECES):
        toks.append(p)
        scores.append(-float(i))
        types.append(1)  # NORMAL
    assert len(toks) == VOCAB
    return toks, scores, types


# ---------------------------------------------------------------- model specs
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-5,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)

SPECS = {
    # GQA (4 q heads / 2 kv heads), untied output, plain rope theta 10000.
    "llama": dict(cls="LlamaForCausalLM", cfg="LlamaConfig", gguf_arch="llama",
                  seed=1001, cfg_kw=dict(COMMON, tie_word_embeddings=False,
                                         rope_theta=10000.0, attention_bias=False,
                                         mlp_bias=False, hidden_act="silu")),
    # Llama 3.x style rope scaling (rope_freqs tensor in GGUF), tied output.
    # original_max_position_embeddings=64 puts the 8 frequencies of head_dim 16
    # in all three regimes (kept, smoothed, divided by factor).
    "llama3rope": dict(cls="LlamaForCausalLM", cfg="LlamaConfig", gguf_arch="llama",
                       seed=2002, cfg_kw=dict(COMMON, tie_word_embeddings=True,
                                              rope_theta=500000.0, attention_bias=False,
                                              mlp_bias=False, hidden_act="silu",
                                              rope_scaling=dict(rope_type="llama3", factor=8.0,
                                                                low_freq_factor=1.0,
                                                                high_freq_factor=4.0,
                                                                original_max_position_embeddings=64))),
    # q/k/v biases, tied embeddings, theta 1e6.
    "qwen2": dict(cls="Qwen2ForCausalLM", cfg="Qwen2Config", gguf_arch="qwen2",
                  seed=3003, cfg_kw=dict(COMMON, tie_word_embeddings=True,
                                         rope_theta=1000000.0, rms_norm_eps=1e-6,
                                         use_sliding_window=False, hidden_act="silu")),
    # per-head q/k RMSNorm, tied embeddings.
    "qwen3": dict(cls="Qwen3ForCausalLM", cfg="Qwen3Config", gguf_arch="qwen3",
                  seed=4004, cfg_kw=dict(COMMON, tie_word_embeddings=True,
                                         rope_theta=1000000.0, rms_norm_eps=1e-6,
                                         attention_bias=False, use_sliding_window=False,
                                         hidden_act="silu")),
    # 6 layers: 5 sliding (window 8, theta 10000) + 1 global (theta 1e6);
    # head_dim 16 independent of hidden 32; q/k norms; sandwich norms; tied.
    # query_pre_attn_scalar = head_dim because llama.cpp derives the attention
    # scale from key_length (1/sqrt(head_dim)) for every size except 27B.
    "gemma3": dict(cls="Gemma3ForCausalLM", cfg="Gemma3TextConfig", gguf_arch="gemma3",
                   seed=5005, cfg_kw=dict(COMMON, hidden_size=32, intermediate_size=32,
                                          num_hidden_layers=6, tie_word_embeddings=True,
                                          rms_norm_eps=1e-6, sliding_window=8,
                                          sliding_window_pattern=6,
                                          rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                          query_pre_attn_scalar=16,
                                          hidden_activation="gelu_pytorch_tanh",
                                          final_logit_softcapping=None,
                                          attn_logit_softcapping=None)),
}


def build_model(spec, seed):
    cfg_cls = getattr(transformers, spec["cfg"])
    kw = dict(spec["cfg_kw"])
    cfg = cfg_cls(**kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, spec["cls"])(cfg).float().eval()
    gemma = spec["gguf_arch"] == "gemma3"
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                # gemma: y = x * (1 + w); others: y = x * w. Gemma's post-norms
                # get (1 + w) ~ 4 so that the blocks outweigh the (sqrt(hidden)
                # scaled) embedding in the residual stream.
                base = (3.0 if ".post_" in name else 0.0) if gemma else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_((0.2 if gemma else 0.3) * torch.randn(p.shape, generator=g))
            else:
                # std 2/sqrt(fan_in): the blocks must dominate the residual
                # stream, or a tied model just echoes its input token.
                p.copy_(2.0 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=g))
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model


def logits_of(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].float()


def _cache_kw():
    import inspect
    params = inspect.signature(transformers.LlamaForCausalLM.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


CACHE_KW = _cache_kw()


def greedy(model, prompt):
    """Manual argmax loop with the KV cache; returns ids, top-1 logits, gaps."""
    ids, top1, gaps = [], [], []
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        for _ in range(GEN_LEN):
            last = out.logits[0, -1].float()
            v, i = torch.topk(last, 2)
            ids.append(int(i[0]))
            top1.append(float(v[0]))
            gaps.append(float(v[0] - v[1]))
            cache = getattr(out, "cache", None) or out.past_key_values
            out = model(input_ids=torch.tensor([[ids[-1]]]),
                        **{CACHE_KW: cache}, use_cache=True)
    return ids, top1, gaps


def f32_b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode()


# ---------------------------------------------------------------- GGUF
def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf permutation: HF rotate-half q/k rows ->
    interleaved (GPT-J style) pairs, per head."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(rp, head_dim, theta):
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp["original_max_position_embeddings"]
    lo_wl, hi_wl = old / lo, old / hi
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < hi_wl:
            out.append(1.0)
        elif wl > lo_wl:
            out.append(factor)
        else:
            s = (old / wl - lo) / (hi - lo)
            out.append(1.0 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def write_gguf(path, name, spec, model):
    cfg = model.config
    arch = spec["gguf_arch"]
    kw = spec["cfg_kw"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"cinfer parity {name}")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(kw["rope_theta"])
    head_dim = kw["head_dim"]
    if arch == "llama":
        w.add_vocab_size(cfg.vocab_size)
        w.add_rope_dimension_count(head_dim)
    if arch in ("qwen3", "gemma3"):
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch == "gemma3":
        w.add_sliding_window(kw["sliding_window"])
        w.add_rope_freq_base_swa(kw["rope_local_base_freq"])
    toks, scores, types = make_vocab()
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(arch != "gemma3")

    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], cfg.num_hidden_layers)
    sd = model.state_dict()
    seen = set()
    if arch == "llama" and kw.get("rope_scaling"):
        w.add_tensor("rope_freqs.weight",
                     llama3_rope_factors(kw["rope_scaling"], head_dim, kw["rope_theta"]))
    for hf_name, t in sd.items():
        if cfg.tie_word_embeddings and hf_name == "lm_head.weight":
            continue
        gname = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gname is None:
            raise SystemExit(f"no GGUF name for {hf_name}")
        a = t.detach().cpu().numpy().astype(np.float32)
        if arch == "llama":
            if ".self_attn.q_proj." in hf_name:
                a = llama_permute(a, cfg.num_attention_heads)
            elif ".self_attn.k_proj." in hf_name:
                a = llama_permute(a, cfg.num_key_value_heads)
        if arch == "gemma3" and hf_name.endswith("norm.weight"):
            a = a + np.float32(1.0)
        assert gname not in seen, gname
        seen.add(gname)
        w.add_tensor(gname, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------- llama.cpp
def llamacpp_logits(gguf_path, ids):
    from llama_cpp import Llama
    import llama_cpp
    # F32 KV cache: the default F16 cache alone moves logits by ~1e-3.
    m = Llama(model_path=gguf_path, n_ctx=64, n_batch=64, n_threads=2,
              logits_all=True, verbose=False,
              type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    m.reset()
    m.eval(ids)
    out = np.array(m.scores[: len(ids)], dtype=np.float32)
    del m
    return out


def gelu_fp16_logits(model, ids):
    """Logits with each MLP activation computed like ggml's CPU GELU: the
    input rounded to fp16, the result read from an fp16 table."""
    class Fp16Table(torch.nn.Module):
        def __init__(self, f):
            super().__init__()
            self.f = f

        def forward(self, x):
            table = self.f(x.half().float()).half().float()
            big = torch.where(x > 0, x, torch.zeros_like(x))
            return torch.where(x.abs() >= 10.0, big, table)

    saved = []
    for layer in model.model.layers:
        saved.append(layer.mlp.act_fn)
        layer.mlp.act_fn = Fp16Table(layer.mlp.act_fn)
    try:
        return logits_of(model, ids).numpy()
    finally:
        for layer, act in zip(model.model.layers, saved):
            layer.mlp.act_fn = act


# ---------------------------------------------------------------- main
def save_hf(model, d):
    cfg = model.config
    cdict = cfg.to_dict()
    # legacy (transformers 4.x) spellings beside the new ones, so a C reader
    # can use either; transformers 5 reloads this file unchanged.
    kw = SPECS_BY_DIR[d]["cfg_kw"]
    cdict.setdefault("rope_theta", kw.get("rope_theta"))
    if "rope_scaling" in kw:
        cdict["rope_scaling"] = kw["rope_scaling"]
    if "rope_local_base_freq" in kw:
        cdict["rope_local_base_freq"] = kw["rope_local_base_freq"]
        cdict["sliding_window_pattern"] = kw["sliding_window_pattern"]
    cdict["torch_dtype"] = "float32"
    cdict.pop("_attn_implementation_autoset", None)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cdict, f, indent=2, sort_keys=True)
        f.write("\n")
    gen = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": False}
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    sd = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


SPECS_BY_DIR = {}


def gen_one(name, out_dir, check_llamacpp):
    spec = SPECS[name]
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    SPECS_BY_DIR[d] = spec
    rng = np.random.default_rng(spec["seed"])
    for attempt in range(50):
        seed = spec["seed"] + attempt
        model = build_model(spec, seed)
        prompt = [1] + [int(x) for x in rng.integers(3, VOCAB, PROMPT_LEN - 1)]
        ids, top1, gaps = greedy(model, prompt)
        if min(gaps) > MIN_GAP and len(set(ids)) >= MIN_DISTINCT:
            break
        print(f"  {name}: seed {seed} rejected (min gap {min(gaps):.2e}, "
              f"{len(set(ids))} distinct)")
    else:
        raise SystemExit(f"{name}: no tie-free seed found")

    # consistency: uncached full forward over prompt+gen must give the same argmaxes
    full = logits_of(model, prompt + ids[:-1])
    re_ids = full[PROMPT_LEN - 1:].argmax(-1).tolist()
    assert re_ids == ids, f"{name}: cached/uncached greedy mismatch"
    plog = full[:PROMPT_LEN].numpy()

    save_hf(model, d)
    gguf_path = os.path.join(d, "model.gguf")
    write_gguf(gguf_path, name, spec, model)

    # reload the HF dir and check the logits are reproduced
    re = getattr(transformers, spec["cls"]).from_pretrained(d, torch_dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    re_full = logits_of(re, prompt + ids[:-1]).numpy()
    hf_reload_diff = float(np.abs(re_full - full.numpy()).max())
    assert hf_reload_diff < 1e-5, f"{name}: reloaded HF model differs by {hf_reload_diff}"

    golden = {
        "format": "cinfer-parity-golden-1",
        "arch": spec["gguf_arch"],
        "name": name,
        "hf_class": spec["cls"],
        "vocab_size": VOCAB,
        "seed": seed,
        "prompt_ids": prompt,
        "prompt_logits": {
            "shape": [PROMPT_LEN, VOCAB],
            "dtype": "float32",
            "byte_order": "little",
            "encoding": "base64",
            "data": f32_b64(plog),
        },
        "prompt_argmax": plog.argmax(-1).tolist(),
        "greedy_ids": ids,
        "greedy_top1_logit": [round(x, 6) for x in top1],
        "greedy_min_gap": round(min(gaps), 6),
        "suggested_tolerance": {"logits_max_abs": 1e-3},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "gguf": getattr(gguf, "__version__", None) or _pkg_version("gguf"),
                     "numpy": np.__version__},
    }
    if check_llamacpp:
        lc = llamacpp_logits(gguf_path, prompt + ids[:-1])
        ref = full.numpy()
        diff = float(np.abs(lc - ref).max())
        emu_diff = None
        if spec["gguf_arch"] == "gemma3":
            # ggml's CPU GELU looks its input up in an fp16 table (~1e-3 off);
            # emulate that to confirm the conversion itself is exact.
            emu_diff = float(np.abs(lc - gelu_fp16_logits(model, prompt + ids[:-1])).max())
            print(f"  {name}: llama.cpp vs transformers with fp16-table GELU: "
                  f"max |dlogit| = {emu_diff:.3e}")
        lc_ids = lc[PROMPT_LEN - 1:].argmax(-1).tolist()
        golden["llamacpp_check"] = {
            "llama_cpp_python": _pkg_version("llama_cpp_python"),
            "positions": len(prompt) + len(ids) - 1,
            "max_abs_logit_diff": diff,
            "greedy_ids_match": lc_ids == ids,
        }
        if emu_diff is not None:
            golden["llamacpp_check"]["max_abs_logit_diff_fp16_gelu_emulated"] = emu_diff
        print(f"  {name}: llama.cpp max |dlogit| = {diff:.3e} over {lc.shape[0]} positions, "
              f"greedy match = {lc_ids == ids}")
        if (emu_diff if emu_diff is not None else diff) > 1e-3 or diff > 1e-2 or lc_ids != ids:
            raise SystemExit(f"{name}: GGUF does not match transformers in llama.cpp")
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"  {name}: seed {seed}, prompt {prompt}, greedy {ids}, "
          f"min gap {min(gaps):.3f}, |logits| std {plog.std():.3f}")


def _pkg_version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                  "tests", "data", "parity"))
    ap.add_argument("--arch", nargs="*", default=list(SPECS))
    ap.add_argument("--check-llamacpp", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.arch:
        if name not in SPECS:
            sys.exit(f"unknown arch {name}; known: {', '.join(SPECS)}")
        gen_one(name, os.path.normpath(args.out), args.check_llamacpp)


if __name__ == "__main__":
    main()
