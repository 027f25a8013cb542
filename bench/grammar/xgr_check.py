"""xgr_check.py — cinfer's token masks against xgrammar's (the oracle) on the same regexes and
EBNF grammars, the same vocabulary and the same token ids, step by step (opt-in; xgrammar is
not a CI dependency). Schemas are left out: the two compile JSON Schema to different
languages (cinfer: declared property order, bounded whitespace; xgrammar: any order of
optional ones, free whitespace), so their masks differ by design.
usage: bench_grammar with BENCH_DUMP_MASKS=OUT_DIR/masks.txt first, then
       xgr_check.py INPUTS.json OUT_DIR   -> prints a JSON summary; exit 1 on a difference."""
import json
import sys

import numpy as np
import xgrammar as xgr

from bench_xgr import load_vocab


def main(inputs, outdir):
    cin = json.load(open(outdir + "/cinfer.json"))
    toks = load_vocab(outdir + "/vocab.bin")
    info = xgr.TokenizerInfo(toks, vocab_type=xgr.VocabType.RAW, vocab_size=len(toks), stop_token_ids=cin.get("eog", [cin["eos"]]))
    comp = xgr.GrammarCompiler(info, max_threads=1)
    ours = {}
    for line in open(outdir + "/masks.txt"):
        name, step, hexs = line.split()
        ours[(name, int(step))] = np.frombuffer(bytes.fromhex(hexs), dtype=">u4").astype(np.uint32)
    byname = {r["name"]: r for r in cin["inputs"]}
    res, bad = [], 0
    for it in json.load(open(inputs)):
        if it["kind"] == "schema" or "ids" not in byname.get(it["name"], {}):
            continue
        try:
            cg = comp.compile_regex(it["source"]) if it["kind"] == "regex" else comp.compile_grammar(it["source"], root_rule_name="root")
        except Exception as e:  # noqa: BLE001
            res.append({"name": it["name"], "error": str(e)[:200]})
            continue
        m = xgr.GrammarMatcher(cg)
        bm = xgr.allocate_token_bitmask(1, info.vocab_size)
        ids = byname[it["name"]]["ids"]
        steps = diff = 0
        for k, tid in enumerate(ids + [None]):
            if (it["name"], k) not in ours:
                break
            m.fill_next_token_bitmask(bm)
            theirs = bm[0].numpy().astype(np.uint32)
            a = ours[(it["name"], k)][: len(theirs)]
            steps += 1
            if not np.array_equal(a, theirs):
                x = np.nonzero(np.unpackbits((a ^ theirs).view(np.uint8), bitorder="little"))[0]
                diff += 1
                if diff <= 2:
                    print(it["name"], "step", k, "ids differ:", [(int(i), toks[i]) for i in x[:5]], file=sys.stderr)
            if tid is None or not m.accept_token(tid):
                break
        bad += diff
        res.append({"name": it["name"], "steps": steps, "masks_differ": diff})
    print(json.dumps({"inputs": res, "masks_differ": bad}, indent=1))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
