#!/usr/bin/env python3
"""sampler_reference.py — numpy oracle for src/engine/sampler.c; writes tests/data/sampler/golden.json.

Written from the reference's definitions (mlx-lm make_logits_processors + make_sampler, as the
server inventory §4.2 describes them): processors as numpy fancy-index updates on float32
logits (presence once per distinct id, frequency once per occurrence), log-softmax, then top_p
on the ascending cumulative sum, min_p in log space, XTC as a mask of probabilities, top_k,
temperature. The draw itself is cinfer's documented rule (one uniform from
sampler_uniform(seed, step, 0), inverse CDF over the survivors: in rank order when a prefix
filter ran, else in id order), since the reference's categorical draw uses another RNG.

    python3 scripts/sampler_reference.py [--cases 48] [--out tests/data/sampler/golden.json]
"""
import argparse
import json
import math
import os

import numpy as np

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def uniform(seed, step, stream):
    """sampler_uniform: splitmix64 finalisers over seed, step and stream."""
    k = mix64((seed + 0x9E3779B97F4A7C15) & M64)
    k = mix64(k ^ ((step * 0xD1B54A32D192ED03 + 0x8CB92BA72F3D8DD7) & M64))
    k = mix64((k + (stream + 1) * 0x9E3779B97F4A7C15) & M64)
    return (k >> 11) * (1.0 / 9007199254740992.0)


def process(logits, hist, p):
    l = logits.astype(np.float32).copy()
    for tid, b in p["logit_bias"]:
        l[tid] += np.float32(b)
    for name, ctxn in (("repetition", 0), ("presence", 1), ("frequency", 2)):
        pen = np.float32(p[name + "_penalty"])
        ctx = p[name + "_context_size"]
        if pen == 0 or (name == "repetition" and pen == 1) or not hist:
            continue
        toks = np.array(hist[-ctx:] if ctx else hist, dtype=np.int64)
        if name == "repetition":
            sel = l[toks]
            l[toks] = np.where(sel < 0, sel * pen, sel / pen)
        elif name == "presence":
            l[toks] -= pen  # fancy assignment: once per distinct id
        else:
            cnt = np.bincount(toks, minlength=len(l)).astype(np.float32)
            l -= pen * cnt  # once per occurrence
    return l


def rank_order(l):
    """Ids by descending logit, ties by ascending id."""
    ids = np.arange(len(l))
    return np.lexsort((ids, -l.astype(np.float64)))


def sample(l, p, step, exempt):
    n = len(l)
    l64 = l.astype(np.float64)
    mx = l64.max()
    lse = mx + math.log(np.exp(l64 - mx).sum())
    logprobs = l64 - lse
    temp = float(np.float32(p["temperature"]))
    if temp == 0:
        return int(np.argmax(l)), logprobs
    keep = np.ones(n, dtype=bool)
    order = rank_order(l)
    top_p, min_p, top_k = float(np.float32(p["top_p"])), float(np.float32(p["min_p"])), p["top_k"]
    top_p_on, min_p_on, top_k_on = 0 < top_p < 1, min_p > 0, 0 < top_k < n
    if top_p_on:  # the reference: ascending cumulative probability > 1 - top_p
        probs = np.exp(logprobs)
        asc = order[::-1]
        cum = np.cumsum(probs[asc])
        keep[asc] &= cum > 1 - top_p
        keep[order[0]] = True
    if min_p_on:
        keep &= logprobs >= logprobs.max() + math.log(min_p)
    xp, xt = float(np.float32(p["xtc_probability"])), float(np.float32(p["xtc_threshold"]))
    if xp > 0 and uniform(p["seed"], step, 1) <= xp:
        w = np.where(keep, np.exp(l64 - mx), 0.0)
        q = w / w.sum()
        above = keep & (q > xt)
        if above.any():
            mask = keep & (q > q[above].min())
            mask[list(exempt)] = False
            keep &= ~mask
    if top_k_on:
        kept_ranked = [i for i in order if keep[i]]
        for i in kept_ranked[top_k:]:
            keep[i] = False
    fmx = l64[keep].max()
    draw_order = order if (top_p_on or min_p_on or top_k_on) else np.arange(n)
    w = [np.float32(math.exp((l64[i] - fmx) / temp)) if keep[i] else np.float32(0) for i in draw_order]
    tsum = 0.0
    for x in w:
        tsum += float(x)
    r, acc, last = uniform(p["seed"], step, 0) * tsum, 0.0, 0
    for j, x in enumerate(w):
        if x > 0:
            last = j
        acc += float(x)
        if r < acc:
            return int(draw_order[j]), logprobs
    return int(draw_order[last]), logprobs


def random_params(rng, n):
    p = {
        "temperature": rng.choice([0.0, 0.3, 0.7, 1.0, 1.5]),
        "top_p": rng.choice([1.0, 0.0, 0.5, 0.8, 0.95]),
        "top_k": int(rng.choice([0, 0, 1, 5, 20])),
        "min_p": rng.choice([0.0, 0.0, 0.02, 0.1, 0.3]),
        "xtc_probability": rng.choice([0.0, 0.5, 1.0]),
        "xtc_threshold": rng.choice([0.0, 0.05, 0.1, 0.3, 0.5]),
        "repetition_penalty": rng.choice([1.0, 0.8, 1.2, 1.5]),
        "repetition_context_size": int(rng.choice([0, 1, 5, 20])),
        "presence_penalty": rng.choice([0.0, -1.0, 0.5, 2.0]),
        "presence_context_size": int(rng.choice([0, 3, 20])),
        "frequency_penalty": rng.choice([0.0, -0.5, 0.25, 1.0]),
        "frequency_context_size": int(rng.choice([0, 3, 20])),
        "seed": int(rng.integers(0, 1 << 62)),
        "top_logprobs": int(rng.choice([-1, 0, 3, 11])),
    }
    p = {k: (float(v) if isinstance(v, np.floating) else v) for k, v in p.items()}
    nb = int(rng.integers(0, 4))
    p["logit_bias"] = [[int(rng.integers(0, n)), float(rng.choice([-100.0, -5.0, 2.5, 10.0]))]
                       for _ in range(nb)]
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=48)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", default="tests/data/sampler/golden.json")
    a = ap.parse_args()
    rng = np.random.default_rng(20261129)
    cases = []
    for _ in range(a.cases):
        n = int(rng.integers(16, 49))
        p = random_params(rng, n)
        hist = [int(x) for x in rng.integers(0, min(n, 12), size=int(rng.integers(0, 30)))]
        exempt = sorted(set(int(x) for x in rng.integers(0, n, size=int(rng.integers(0, 4)))))
        case = {"n_vocab": n, "params": p, "history": list(hist), "exempt": exempt, "steps": []}
        for step in range(a.steps):
            # centi-unit integer logits: exact float32 values with plenty of ties
            logits = rng.integers(-800, 801, size=n)
            l = process(logits.astype(np.float32) / np.float32(100), hist, p)
            tid, lp = sample(l, p, step, exempt)
            k = max(p["top_logprobs"], 0)
            top = [int(i) for i in rank_order(l)[:k]]
            case["steps"].append({"logits": [int(x) for x in logits], "id": tid,
                                  "logprob": round(float(lp[tid]), 7),
                                  "top_id": top, "top_lp": [round(float(lp[i]), 7) for i in top]})
            hist.append(tid)
        cases.append(case)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"generator": "scripts/sampler_reference.py", "cases": cases}, f,
                  separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
