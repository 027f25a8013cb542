"""bench_xgr.py — the xgrammar peer on the same inputs, vocabulary and token ids.
usage: bench_xgr.py INPUTS.json OUT_DIR   (reads OUT_DIR/vocab.bin and cinfer.json; writes
OUT_DIR/xgrammar.json). Mask time per step is GrammarMatcher.fill_next_token_bitmask (thread
CPU time); compile is GrammarCompiler.compile_* with one thread and no cache (best of 5).
xgrammar installs with `pip install --no-deps xgrammar apache-tvm-ffi` beside torch."""
import json
import struct
import sys
import time

import xgrammar as xgr


def load_vocab(path):
    data = open(path, "rb").read()
    toks, o = [], 0
    while o < len(data):
        (n,) = struct.unpack_from("<I", data, o)
        o += 4
        if n == 0xFFFFFFFF:
            toks.append(b"")
        else:
            toks.append(data[o:o + n])
            o += n
    return toks


def main(inputs, outdir):
    cin = json.load(open(outdir + "/cinfer.json"))
    toks = load_vocab(outdir + "/vocab.bin")
    t0 = time.thread_time()
    info = xgr.TokenizerInfo(toks, vocab_type=xgr.VocabType.RAW, vocab_size=len(toks),
                             stop_token_ids=cin.get("eog", [cin["eos"]]))
    tok_us = (time.thread_time() - t0) * 1e6
    items = json.load(open(inputs))
    byname = {r["name"]: r for r in cin["inputs"]}
    res = []
    for it in items:
        r = {"name": it["name"], "kind": it["kind"]}
        res.append(r)
        c = byname.get(it["name"], {})
        if "ids" not in c:
            r["error"] = "cinfer did not compile it"
            continue
        best, cg = 1e30, None
        try:
            for _ in range(5):
                comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
                a = time.thread_time()
                if it["kind"] == "schema":
                    cg = comp.compile_json_schema(json.dumps(it["source"]), any_whitespace=True, strict_mode=True)
                elif it["kind"] == "regex":
                    cg = comp.compile_regex(it["source"])
                else:
                    cg = comp.compile_grammar(it["source"], root_rule_name="root")
                best = min(best, (time.thread_time() - a) * 1e6)
        except Exception as e:  # noqa: BLE001 - a peer's refusal is a result
            r["error"] = str(e)[:300]
            continue
        r["compile_us"] = best
        m = xgr.GrammarMatcher(cg)
        bm = xgr.allocate_token_bitmask(1, info.vocab_size)
        times, ok = [], True
        for tid in c["ids"]:
            a = time.thread_time()
            m.fill_next_token_bitmask(bm)
            times.append((time.thread_time() - a) * 1e6)
            if not m.accept_token(tid):
                ok = False
                break
        r["ok"] = ok
        r["mask_us"] = times
    ver = getattr(xgr, "__version__", "")
    if not ver:
        try:
            from importlib.metadata import version
            ver = version("xgrammar")
        except Exception:  # noqa: BLE001
            ver = ""
    json.dump({"tokenizer_us": tok_us, "version": ver, "inputs": res}, open(outdir + "/xgrammar.json", "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
