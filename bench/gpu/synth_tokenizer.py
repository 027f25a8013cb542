#!/usr/bin/env python3
"""synth_tokenizer.py DIR [N_VOCAB] — writes DIR/tokenizer.json (+ tokenizer_config.json) for
the random-weight bench models (models.py writes none): a byte-level BPE whose first 256 ids
are the bytes and whose other ids are distinct lowercase words, no merges, so text encodes
to byte ids and every id the model can emit decodes to text. Ids 128000/128001 are the
special begin/end tokens of the Llama-3 shape (generation_config's bos/eos)."""
import json
import os
import sys


def byte_chars():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    d = sys.argv[1]
    nv = int(sys.argv[2]) if len(sys.argv) > 2 else 128256
    bc = byte_chars()
    vocab = {bc[b]: b for b in range(256)}
    special = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>"}
    i = 256
    k = 0
    while i < nv:
        if i in special:
            vocab[special[i]] = i
            i += 1
            continue
        w, x = "", k
        while True:  # base-26 words: a..z, aa..zz, ...
            w = chr(ord("a") + x % 26) + w
            x = x // 26 - 1
            if x < 0:
                break
        k += 1
        tok = "\u0120" + w  # a leading space, byte-level
        if tok in vocab:
            continue
        vocab[tok] = i
        i += 1
    added = [{"id": j, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for j, t in special.items()]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
          "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                            "use_regex": True},
          "post_processor": None,
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                      "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None,
                    "continuing_subword_prefix": None, "end_of_word_suffix": None,
                    "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": vocab, "merges": []}}
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": special[128000], "eos_token": special[128001],
                   "add_bos_token": True, "tokenizer_class": "PreTrainedTokenizerFast"}, f)


if __name__ == "__main__":
    main()
