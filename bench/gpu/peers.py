#!/usr/bin/env python3
"""peers.py — PyTorch/transformers on the same random bf16 models, and the bandwidth.

  peers.py bw                      -> {"copy_tb_s": ...}  (device-to-device copy, read+write)
  peers.py eager DIR [--agg]       -> batch-1 decode (256 tokens after 128), prefill 4096,
                                      and with --agg aggregate decode at 8/32/64 (32 steps)
  peers.py compiled DIR            -> static cache + torch.compile decode (generate)
Each prints one JSON object. Timings use cuda synchronisation around the timed region.
"""
import json
import sys
import time

import torch
import transformers


def now():
    torch.cuda.synchronize()
    return time.perf_counter()


def bw():
    n = 2 << 30  # 2 GiB per buffer
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    ts = []
    for _ in range(10):
        t0 = now()
        b.copy_(a)
        ts.append(now() - t0)
    ts.sort()
    return {"copy_tb_s": 2 * n / ts[len(ts) // 2] / 1e12, "copy_bytes": n}


def load(d):
    m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16,
                                                          attn_implementation="sdpa")
    return m.cuda().eval()


def decode_loop(m, B, prompt_len, steps):
    V = m.config.vocab_size
    ids = torch.randint(V // 4, V // 2, (B, prompt_len), device="cuda")
    with torch.no_grad():
        out = m(ids, use_cache=True)
        cache = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t0 = now()
        for _ in range(steps):
            out = m(nxt, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        dt = now() - t0
    return B * steps / dt


def eager(d, agg):
    m = load(d)
    r = {"impl": "transformers eager (sdpa), bf16", "decode_b1_tok_s": decode_loop(m, 1, 128, 256)}
    V = m.config.vocab_size
    ids = torch.randint(V // 4, V // 2, (1, 4096), device="cuda")
    best = 0
    with torch.no_grad():
        for _ in range(2):
            t0 = now()
            m(ids, use_cache=False, logits_to_keep=1)
            best = max(best, 4096 / (now() - t0))
    r["prefill_4k_tok_s"] = best
    if agg:
        r["agg_decode_tok_s"] = {str(B): decode_loop(m, B, 128, 32) for B in (8, 32, 64)}
    r["peak_device_bytes"] = torch.cuda.max_memory_allocated()
    return r


def compiled(d):
    m = load(d)
    V = m.config.vocab_size
    ids = torch.randint(V // 4, V // 2, (1, 128), device="cuda")
    m.forward = torch.compile(m.forward, mode="reduce-overhead", fullgraph=True)
    kw = dict(max_new_tokens=256, min_new_tokens=256, do_sample=False,
              cache_implementation="static")
    t0 = now()
    with torch.no_grad():
        m.generate(ids, **kw)  # compiles
        warm = now() - t0
        m.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False,
                   cache_implementation="static")
        t1 = now()
        p1 = now() - t1
        t1 = now()
        m.generate(ids, **kw)
        full = now() - t1
    return {"impl": "transformers static cache + torch.compile(reduce-overhead), bf16",
            "decode_b1_tok_s": 256 / full, "compile_and_first_run_s": warm,
            "note": "generate() time for 256 new tokens incl. the 128-token prefill"}


def main():
    what = sys.argv[1]
    if what == "bw":
        r = bw()
    elif what == "eager":
        r = eager(sys.argv[2], "--agg" in sys.argv)
    else:
        r = compiled(sys.argv[2])
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
