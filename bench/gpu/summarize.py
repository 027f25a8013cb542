#!/usr/bin/env python3
"""summarize.py — bench/results/gpu.json from the files device_run.sh leaves (res.tgz).

  summarize.py RESULT_DIR COMMIT [--previous RESULT_DIR2 COMMIT2] > bench/results/gpu.json
ceiling_tok_s = measured copy bandwidth / weight bytes read per token; ceiling_frac =
decode_b1_tok_s / ceiling_tok_s; ceiling_read_* the same at the read-only bandwidth of a
torch sum (when bw.json has read_tb_s); ceiling_stream_* at the streaming-read bandwidth of
a plain CUDA kernel (bw_read.cu, when bw_read.json is there): the strictest, since a decode
step only reads its weights.
"""
import json
import os
import sys


def load(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        return None
    return json.loads(open(p).read().strip().splitlines()[-1])


def one_run(d, commit):
    bw = load(d, "bw.json")
    machine = open(os.path.join(d, "machine.txt")).read().strip().splitlines()
    gpu = machine[1].split(", ")
    out = {"commit": commit, "gpu": gpu[0], "driver": gpu[1], "memory_mib": gpu[2],
           "cuda": machine[-1].strip().replace("Build cuda_", "toolkit ").replace(
               "/compiler.", " (compiler ") + ")", "copy_tb_s": round(bw["copy_tb_s"], 3),
           "models": {}}
    if "read_tb_s" in bw:
        out["read_tb_s"] = round(bw["read_tb_s"], 3)
    sr = load(d, "bw_read.json")
    if sr:
        out["stream_read_tb_s"] = round(sr["read_tb_s"], 3)
    for m in ("l1b", "l8b"):
        c = load(d, "cinfer_%s.json" % m)
        if not c:
            continue
        ceil = bw["copy_tb_s"] * 1e12 / c["weight_bytes"]
        r = {"decode_b1_tok_s": c["decode_b1_tok_s"], "ceiling_tok_s": round(ceil, 1),
             "ceiling_frac": round(c["decode_b1_tok_s"] / ceil, 3),
             "prefill_4k_tok_s": c["prefill_tok_s"],
             "agg_decode_tok_s": c["agg"], "peak_device_bytes": c["peak_device_bytes"],
             "weight_bytes": c["weight_bytes"], "load_s": c["load_s"],
             "peers": {}}
        if "read_tb_s" in bw:  # the ceiling at the read-only bandwidth (decode reads weights)
            rc = bw["read_tb_s"] * 1e12 / c["weight_bytes"]
            r["ceiling_read_tok_s"] = round(rc, 1)
            r["ceiling_read_frac"] = round(c["decode_b1_tok_s"] / rc, 3)
        if sr:  # the streaming-read bandwidth of bw_read.cu
            sc = sr["read_tb_s"] * 1e12 / c["weight_bytes"]
            r["ceiling_stream_tok_s"] = round(sc, 1)
            r["ceiling_stream_frac"] = round(c["decode_b1_tok_s"] / sc, 3)
        if "decode_b1_sync_tok_s" in c:  # queued (decode bursts) vs one step at a time
            r["decode_b1_sync_tok_s"] = c["decode_b1_sync_tok_s"]
            r["decode_queued_same_ids"] = bool(c["decode_queued_same_ids"] == 1)
            r["decode_gpu_step_us"] = c["decode_gpu_step_us"]
        e = load(d, "eager_%s.json" % m)
        if e:
            r["peers"]["transformers_eager_sdpa_bf16"] = {
                "decode_b1_tok_s": round(e["decode_b1_tok_s"], 2),
                "prefill_4k_tok_s": round(e["prefill_4k_tok_s"], 1),
                "agg_decode_tok_s": {k: round(v, 1) for k, v in e["agg_decode_tok_s"].items()},
                "peak_device_bytes": e["peak_device_bytes"]}
        cp = load(d, "compiled_%s.json" % m)
        r["peers"]["transformers_static_cache_torch_compile"] = cp or {
            "status": "not measured in this run (COMPILED unset, or no result within "
                      "COMPILE_TIMEOUT); the issue's figures on this H200: 139 (8B) / 344 (1B) "
                      "tok/s decode"}
        out["models"][m] = r
    return out


def main():
    a = sys.argv[1:]
    res = one_run(a[0], a[1])
    res["method"] = ("bench/gpu/device_run.sh all: cinfer_gpu_bench MODEL perf (batch-1 decode "
                     "of 256 tokens after a 128-token prompt, steps queued as the engine's "
                     "decode bursts queue them (model_forward_queue; decode_b1_sync_tok_s: one "
                     "step at a time, same ids checked; decode_gpu_step_us: one step's graphs "
                     "replayed back to back, without its last plainly launched segment); "
                     "prefill of a 4096-token prompt in a fresh context, best of 2; aggregate "
                     "decode = B sequences x 64 queued steps after 128-token prompts; F16 KV cache; random bf16 weights made on the "
                     "device by bench/gpu/models.py); peers by bench/gpu/peers.py on the same "
                     "files; copy_tb_s = 2 GiB device-to-device copy, read+write, median of 10; read_tb_s = a "
                     "float32 sum over the same 2 GiB, median of 10")
    if "--previous" in a:
        i = a.index("--previous")
        res["previous_run"] = one_run(a[i + 1], a[i + 2])
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
