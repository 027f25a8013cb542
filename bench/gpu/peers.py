#!/usr/bin/env python3
"""peers.py — PyTorch/transformers on the same random bf16 models, and the bandwidth.

  peers.py bw                      -> {"copy_tb_s": ..., "read_tb_s": ...}  (device-to-device
                                      copy, read+write; a float32 sum, read only)
  peers.py eager DIR [--agg]       -> batch-1 decode (256 tokens after 128), prefill 4096,
                                      and with --agg aggregate decode at 8/32/64 (32 steps)
  peers.py compiled DIR            -> static cache + torch.compile decode (a compiled
                                      one-token step, gpt-fast style)
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
    out = {"copy_tb_s": 2 * n / ts[len(ts) // 2] / 1e12, "copy_bytes": n}
    # read only (what decode does with its weights): a float32 sum over the same 2 GiB
    x = a.view(torch.float32)
    x.zero_()
    for _ in range(3):
        x.sum()
    ts = []
    for _ in range(10):
        t0 = now()
        x.sum()
        ts.append(now() - t0)
    ts.sort()
    out["read_tb_s"] = n / ts[len(ts) // 2] / 1e12
    return out


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


def make_static_cache(m, max_len):
    """A StaticCache for batch 1 across transformers versions (v5: lazily sized)."""
    from transformers import StaticCache
    dev = next(m.parameters()).device
    tries = (dict(config=m.config, max_cache_len=max_len),
             dict(config=m.config, max_batch_size=1, max_cache_len=max_len, device=dev,
                  dtype=torch.bfloat16))
    err = None
    for kw in tries:
        try:
            return StaticCache(**kw)
        except TypeError as e:
            err = e
    raise err


def compiled(d, mode="reduce-overhead"):
    """Batch-1 decode as gpt-fast does it: the 128-token prompt eager into a static cache,
    then a compiled one-token step (one shape: one graph), 256 greedy steps timed."""
    m = load(d)
    dev = next(m.parameters()).device
    V = m.config.vocab_size
    P, N = 128, 256
    ids = torch.randint(V // 4, V // 2, (1, P), device=dev)
    cache = make_static_cache(m, P + N + 8)

    def step(tok, pos):
        return m(input_ids=tok, past_key_values=cache, cache_position=pos,
                 use_cache=True).logits[:, -1]

    cstep = torch.compile(step, mode=mode, fullgraph=True)
    got = []
    with torch.no_grad():
        t0 = now()
        logits = m(input_ids=ids, past_key_values=cache, cache_position=torch.arange(P, device=dev),
                   use_cache=True).logits[:, -1]
        tok = logits.argmax(-1, keepdim=True)
        got.append(int(tok))
        pos = torch.tensor([P], device=dev)
        for _ in range(3):  # compiles (and records the CUDA graph) on these steps
            tok = cstep(tok, pos).argmax(-1, keepdim=True)
            got.append(int(tok))
            pos += 1
        warm = now() - t0
        # the timed run continues the same sequence: positions P + 3 .. P + 3 + N - 1 < P + N + 8
        toks = []
        t1 = now()
        for _ in range(N - 8):
            tok = cstep(tok, pos).argmax(-1, keepdim=True)
            toks.append(tok)
            pos += 1
        full = now() - t1
        got += [int(t) for t in toks[:12]]
        # the same sequence eagerly on a fresh cache: the compiled step must follow it (a step
        # that did not update the cache would be fast and wrong)
        c2 = make_static_cache(m, P + N + 8)
        lg = m(input_ids=ids, past_key_values=c2, cache_position=torch.arange(P, device=dev),
               use_cache=True).logits[:, -1]
        ref = [int(lg.argmax(-1))]
        for i in range(len(got) - 1):
            t = torch.tensor([[got[i]]], device=dev)
            lg = m(input_ids=t, past_key_values=c2, cache_position=torch.tensor([P + i], device=dev),
                   use_cache=True).logits[:, -1]
            ref.append(int(lg.argmax(-1)))
    agree = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), len(got))
    return {"impl": "transformers static cache + torch.compile(%s) decode step, bf16" % mode,
            "decode_b1_tok_s": (N - 8) / full, "compile_and_first_run_s": warm,
            "greedy_ids_agree_with_eager": "%d of %d" % (agree, len(got)),
            "note": "one-token steps after a 128-token prompt (eager prefill), gpt-fast style"}


def main():
    what = sys.argv[1]
    if what == "bw":
        r = bw()
    elif what == "eager":
        r = eager(sys.argv[2], "--agg" in sys.argv)
    else:
        try:
            r = compiled(sys.argv[2], *(sys.argv[3:4]))
        except Exception as e:  # record why, so the bench says it
            r = {"status": "failed: %s: %s" % (type(e).__name__, str(e)[:300])}
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
