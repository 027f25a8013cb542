#!/usr/bin/env python3
"""lora_reference.py — random PEFT LoRA adapters for the parity models, and their goldens.

For each base model of tests/data/parity (llama, qwen2, qwen3, gemma3: tiny random-weight
float32 models written by scripts/gen_parity.py) this writes, under tests/data/lora/<arch>/:

  a/      a PEFT adapter (adapter_config.json + adapter_model.safetensors) on all seven
          projections (q, k, v, o, gate, up, down), rank 4, lora_alpha 8
  b/      a PEFT adapter on q, v, o and down only, rank 2, lora_alpha 4, use_rslora
  a.gguf, b.gguf   the same adapters in llama.cpp's GGUF LoRA format (general.type adapter,
          adapter.type lora, adapter.lora.alpha, blk.N.<proj>.weight.lora_a / .lora_b;
          llama's q/k B rows permuted for the GGUF base's interleaved RoPE, as llama.cpp's
          convert_lora_to_gguf.py does; rsLoRA folded into alpha = alpha_rs * sqrt(r))
  golden.json  for the cases "a", "b" (transformers + peft, the unmerged PEFT forward) and
          "a+b" (the base with both adapters merged into its weights: the stacked
          reference): the logits of every prompt position and a 32-token greedy
          continuation.

Usage:  scripts/lora_reference.py [--out tests/data/lora] [--arch NAME ...]
Needs:  torch, transformers, peft, safetensors, gguf, numpy (PyPI). The goldens committed
        here were made on a CPU (see tests/data/lora/README.md); the same script runs on the
        GPU machine (it uses the CPU and float32 either way).
"""
from __future__ import annotations

import argparse
import base64
import json
import math
import os
import shutil
import sys

import numpy as np
import torch

import gguf
import peft
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN_LEN = 32
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
              "o_proj": "attn_output", "gate_proj": "ffn_gate", "up_proj": "ffn_up",
              "down_proj": "ffn_down"}
ADAPTERS = {
    "a": dict(r=4, lora_alpha=8, target_modules=ALL, use_rslora=False, seed=11),
    "b": dict(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"],
              use_rslora=True, seed=22),
}
ARCHS = ["llama", "qwen2", "qwen3", "gemma3"]


def load_base(arch):
    d = os.path.join(ROOT, "tests/data/parity", arch)
    m = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager")
    return m.float().eval()


def make_adapter(arch, name, out_dir, attempt=0):
    spec = ADAPTERS[name]
    base = load_base(arch)
    cfg = peft.LoraConfig(r=spec["r"], lora_alpha=spec["lora_alpha"],
                          target_modules=spec["target_modules"], use_rslora=spec["use_rslora"],
                          lora_dropout=0.0, bias="none", init_lora_weights=False)
    pm = peft.get_peft_model(base, cfg)
    g = torch.Generator().manual_seed(spec["seed"] + 1000 * ARCHS.index(arch) + 100 * attempt)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_A" in n:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            elif "lora_B" in n:
                p.copy_(0.5 * torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    pm.save_pretrained(d)
    cp = os.path.join(d, "adapter_config.json")
    c = json.load(open(cp))  # a path relative to the repository, not this machine's
    c["base_model_name_or_path"] = os.path.relpath(c["base_model_name_or_path"], ROOT)
    with open(cp, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    for extra in ("README.md",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    return d


def llama_permute(w, n_head):
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_gguf_lora(arch, peft_dir, path):
    """llama.cpp's GGUF LoRA layout, from a PEFT directory."""
    from safetensors.numpy import load_file
    cfg = json.load(open(os.path.join(peft_dir, "adapter_config.json")))
    base_cfg = json.load(open(os.path.join(ROOT, "tests/data/parity", arch, "config.json")))
    sd = load_file(os.path.join(peft_dir, "adapter_model.safetensors"))
    r = cfg["r"]
    alpha = float(cfg["lora_alpha"])
    if cfg.get("use_rslora"):  # scale alpha/sqrt(r) == (alpha sqrt(r)) / r
        alpha = alpha * math.sqrt(r)
    w = gguf.GGUFWriter(path, arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    for k in sorted(sd):
        t = sd[k].astype(np.float32)
        layer = int(k.split("layers.")[1].split(".")[0])
        mod = next(m for m in ALL if f".{m}." in k)
        ab = "a" if ".lora_A." in k else "b"
        if arch == "llama" and ab == "b" and mod in ("q_proj", "k_proj"):
            nh = base_cfg["num_attention_heads"] if mod == "q_proj" else base_cfg["num_key_value_heads"]
            t = llama_permute(t, nh)
        w.add_tensor(f"blk.{layer}.{GGUF_NAMES[mod]}.weight.lora_{ab}", np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def f32_b64(a):
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode()


def run_case(model, prompt):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=False)
        logits = out.logits[0].float().numpy()
        ids, gaps, seq = [], [], list(prompt)
        for _ in range(GEN_LEN):  # no KV cache: the plainest reference
            lg = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float()
            v, i = torch.topk(lg, 2)
            ids.append(int(i[0]))
            gaps.append(float(v[0] - v[1]))
            seq.append(ids[-1])
    return logits, ids, min(gaps)


MIN_GAP = 0.005  # every greedy step's top1 - top2 (tie-free continuations)


def gen_arch(arch, out_root):
    for attempt in range(8):  # new random adapters until every continuation is tie-free
        g = gen_attempt(arch, out_root, attempt)
        if min(c["greedy_min_gap"] for c in g["cases"].values()) >= MIN_GAP:
            break
    out = os.path.join(out_root, arch)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")
    print(f"{arch}: attempt {attempt}: " +
          ", ".join(f"{n} gap {c['greedy_min_gap']:.3g}" for n, c in g["cases"].items()))


def gen_attempt(arch, out_root, attempt):
    out = os.path.join(out_root, arch)
    os.makedirs(out, exist_ok=True)
    dirs = {n: make_adapter(arch, n, out, attempt) for n in ADAPTERS}
    for n, d in dirs.items():
        write_gguf_lora(arch, d, os.path.join(out, n + ".gguf"))
    pg = json.load(open(os.path.join(ROOT, "tests/data/parity", arch, "golden.json")))
    prompt = pg["prompt_ids"]
    cases = {}
    for n, d in dirs.items():
        pm = peft.PeftModel.from_pretrained(load_base(arch), d).eval()
        lg, ids, gap = run_case(pm, prompt)
        cases[n] = dict(logits=dict(shape=list(lg.shape), data=f32_b64(lg)), greedy_ids=ids,
                        greedy_min_gap=gap)
    # a+b: both merged into the base weights (the stacked reference)
    m = peft.PeftModel.from_pretrained(load_base(arch), dirs["a"]).merge_and_unload()
    m = peft.PeftModel.from_pretrained(m, dirs["b"]).merge_and_unload().eval()
    lg, ids, gap = run_case(m, prompt)
    cases["a+b"] = dict(logits=dict(shape=list(lg.shape), data=f32_b64(lg)), greedy_ids=ids,
                        greedy_min_gap=gap)
    return dict(format="cinfer-lora-golden-1", arch=arch, prompt_ids=prompt, attempt=attempt,
             adapters={n: {k: v for k, v in s.items() if k != "seed"} for n, s in ADAPTERS.items()},
             cases=cases,
             versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                           peft=peft.__version__, gguf=getattr(gguf, "__version__", "?"),
                           device="cpu"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/lora"))
    ap.add_argument("--arch", nargs="*", default=ARCHS)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for arch in a.arch:
        gen_arch(arch, a.out)


if __name__ == "__main__":
    main()
