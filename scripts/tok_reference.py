#!/usr/bin/env python3
"""tok_reference.py — reference tokenizations for cinfer's tokenizer parity tests.

For each tokenizer it can load, encodes every chunk of a corpus (gen_tok_corpus.py output)
with the reference implementation and writes <out>/<name>.ref.json.gz:
  {"name", "path", "chunks": [{"text", "plain", "special", "add", "decoded"}]}
  plain   = ids with special-token strings treated as text   (cinfer flags 0)
  special = ids with special-token strings matched           (TOK_PARSE_SPECIAL)
  add     = special + the post-processor's BOS/EOS           (TOK_PARSE_SPECIAL|TOK_ADD_SPECIAL)
  decoded = the reference decode of `special` (specials kept)
References: HF `tokenizers` for tokenizer.json (decode + transformers' clean_up_tokenization
when tokenizer_config.json asks for it); `sentencepiece` for tokenizer.model (it never matches
special strings, so only plain/decoded are given); transformers' GGUF loader
(AutoTokenizer.from_pretrained(dir, gguf_file=...)) for GGUF vocabularies.
With --sample DIR it also writes DIR/<name>.sample.json.gz: the same for a small fixed
subset of chunks (the committed files the C test always checks).

With --make-synth DIR it first trains small tokenizers (600-token BPE on the corpus) whose
pipelines exercise the components the real tokenizers above do not use (NFKC, Lowercase,
Strip, regex Replace, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, Strip
and Metaspace decoders, BERT's WordPiece pipeline, TemplateProcessing with EOS, added tokens with lstrip / rstrip /
single_word / normalized) and writes DIR/synth-*.tokenizer.json; they join SPECS as "repo:".

usage: tok_reference.py --corpus C.jsonl --out DIR [--sample DIR] [--only name,name]
                        [--make-synth tests/data/tokenizer]
env: CINFER_FIXTURES (default tests/data/fixtures), CINFER_MODELS (default <repo>/models)
"""
import argparse
import gzip
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.environ.get("CINFER_FIXTURES", os.path.join(REPO, "tests", "data", "fixtures"))
MODELS = os.environ.get("CINFER_MODELS", os.path.join(REPO, "models"))

# name, path ("fixtures:" or "models:" prefix, as the C test resolves it), reference kind
SPECS = [
    ("qwen3", "fixtures:qwen3-tokenizer/tokenizer.json.gz", "json"),
    ("llama3", "fixtures:llama3-tokenizer/tokenizer.json.gz", "json"),
    ("llama2", "fixtures:llama2-tokenizer/tokenizer.model", "spm"),
    ("mistral", "fixtures:mistral-7b-tokenizer/tokenizer.model", "spm"),
    ("llama2-gguf", "fixtures:llamacpp-vocab/ggml-vocab-llama-spm.gguf", "spm:llama2-tokenizer/tokenizer.model"),
    ("gpt2", "fixtures:llamacpp-vocab/ggml-vocab-gpt-2.gguf", "gguf"),
    ("phi3", "fixtures:llamacpp-vocab/ggml-vocab-phi-3.gguf", "gguf"),
    ("gemma3", "models:gemma3-270m-Q4_K_M.gguf", "gguf"),
    ("smollm2", "models:smollm2-135m-instruct-Q4_1.gguf", "gguf"),
    ("qwen2.5-coder-0.5b", "models:qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf", "gguf"),
    ("qwen2.5-coder-1.5b", "models:qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf", "gguf"),
]

SAMPLE_EVERY = 97  # plus the fixed edge cases at the start of the corpus
N_EDGE = 18


def resolve(p):
    kind, rel = p.split(":", 1)
    return os.path.join({"fixtures": FIX, "models": MODELS, "repo": REPO}[kind], rel)


def make_synth(chunks, outdir):
    """Trains small BPE tokenizers with unusual pipelines; returns their SPECS entries."""
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)
    os.makedirs(outdir, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    train = chunks[::3]
    out = []

    def finish(tk, name, added):
        tr = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False,
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
                                 if name.endswith("bytelevel") else [])
        tk.train_from_iterator(train, trainer=tr)
        tk.add_tokens(added)
        path = os.path.join(outdir, name + ".tokenizer.json")
        tk.save(path)
        out.append((name, "repo:" + os.path.relpath(path, REPO), "json"))

    # 1. byte-level BPE behind NFKC + Lowercase + regex Replace + Strip, BOS/EOS template
    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                          normalizers.Replace(Regex(r"[0-9]{4,}"), "#"),
                                          normalizers.Strip(left=True, right=True)])
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                      special_tokens=[("<s>", 1), ("</s>", 2)])
    finish(tk, "synth-nfkc-bytelevel", [AddedToken("<tool>", single_word=True),
                                        AddedToken(" [[x]] ", lstrip=True, rstrip=True, normalized=False)])
    # 2. SentencePiece-like: Metaspace (first, split) + byte fallback + Metaspace decoder
    tk = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tk.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(prepend_scheme="first")])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    finish(tk, "synth-metaspace", [AddedToken("hello world", normalized=True),
                                   AddedToken("<sep>", lstrip=True)])
    # 3. Digits + Punctuation + WhitespaceSplit, unk, Replace/Strip/Fuse decoders
    tk = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False))
    tk.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Replace("\t", " "),
                                          normalizers.Prepend("_")])
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.Punctuation(behavior="isolated")])
    tk.decoder = decoders.Sequence([decoders.Replace("_", " "), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    finish(tk, "synth-digits-punct", [])
    # 4. Whitespace pre-tokenizer + Split(MergedWithNext/Contiguous) + no decoder
    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[,;]"), behavior="merged_with_next"),
        pre_tokenizers.Split(" ", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="contiguous"),
        pre_tokenizers.Whitespace()])
    finish(tk, "synth-split", [AddedToken("<x>", special=False)])
    # 5. BERT: BertNormalizer + BertPreTokenizer + WordPiece (+ decoder), [CLS] A [SEP]
    tk = Tokenizer(models.WordPiece(unk_token="<unk>", max_input_chars_per_word=30))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece()
    tk.post_processor = processors.BertProcessing(("</s>", 2), ("<s>", 1))
    tr = trainers.WordPieceTrainer(vocab_size=800, special_tokens=specials, show_progress=False)
    tk.train_from_iterator(train, trainer=tr)
    path = os.path.join(outdir, "synth-wordpiece.tokenizer.json")
    tk.save(path)
    out.append(("synth-wordpiece", "repo:" + os.path.relpath(path, REPO), "json"))
    return out


def cleanup(s):
    # transformers' PreTrainedTokenizerBase.clean_up_tokenization
    for a, b in [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                 (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]:
        s = s.replace(a, b)
    return s


def hf_funcs(tk, clean):
    def enc(text):
        tk.encode_special_tokens = True
        plain = tk.encode(text, add_special_tokens=False).ids
        tk.encode_special_tokens = False
        special = tk.encode(text, add_special_tokens=False).ids
        add = tk.encode(text, add_special_tokens=True).ids
        dec = tk.decode(special, skip_special_tokens=False)
        return {"plain": plain, "special": special, "add": add,
                "decoded": cleanup(dec) if clean else dec}
    return enc


def load_ref(path, kind):
    if kind == "json":
        from tokenizers import Tokenizer
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
        tk = Tokenizer.from_str(raw.decode("utf-8"))
        cfgp = os.path.join(os.path.dirname(path), "tokenizer_config.json")
        clean = False
        if os.path.exists(cfgp):
            clean = bool(json.load(open(cfgp)).get("clean_up_tokenization_spaces", False))
        return hf_funcs(tk, clean)
    if kind.startswith("spm"):
        import sentencepiece as spm
        model = path if kind == "spm" else os.path.join(FIX, kind.split(":", 1)[1])
        sp = spm.SentencePieceProcessor(model_file=model)

        def enc(text):
            ids = sp.encode(text)
            return {"plain": ids, "decoded": sp.decode(ids)}
        return enc
    if kind == "gguf":
        from transformers import AutoTokenizer
        d, f = os.path.split(path)
        t = AutoTokenizer.from_pretrained(d, gguf_file=f)
        return hf_funcs(t.backend_tokenizer, bool(getattr(t, "clean_up_tokenization_spaces", False)))
    raise ValueError(kind)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sample")
    ap.add_argument("--only")
    ap.add_argument("--make-synth")
    a = ap.parse_args()
    chunks = [json.loads(l) for l in open(a.corpus, encoding="utf-8")]
    specs = list(SPECS)
    if a.make_synth:
        specs += make_synth(chunks, a.make_synth)
    else:
        synth_dir = os.path.join(REPO, "tests", "data", "tokenizer")
        if os.path.isdir(synth_dir):
            for fn in sorted(os.listdir(synth_dir)):
                if fn.endswith(".tokenizer.json"):
                    specs.append((fn[:-len(".tokenizer.json")],
                                  "repo:tests/data/tokenizer/" + fn, "json"))
    os.makedirs(a.out, exist_ok=True)
    only = set(a.only.split(",")) if a.only else None
    done = 0
    for name, p, kind in specs:
        if only and name not in only:
            continue
        path = resolve(p)
        if not os.path.exists(path):
            print(f"skip {name}: {path} not present", file=sys.stderr)
            continue
        try:
            enc = load_ref(path, kind)
        except Exception as ex:  # a missing pip package or an unsupported file
            print(f"skip {name}: reference unavailable: {ex}", file=sys.stderr)
            continue
        rows = []
        for text in chunks:
            r = {"text": text}
            r.update(enc(text))
            rows.append(r)
        doc = {"name": name, "path": p, "reference": kind, "chunks": rows}
        with gzip.open(os.path.join(a.out, name + ".ref.json.gz"), "wt", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
        if a.sample:
            os.makedirs(a.sample, exist_ok=True)
            pick = [r for i, r in enumerate(rows) if i < N_EDGE or i % SAMPLE_EVERY == 0]
            sdoc = dict(doc, chunks=pick)
            with gzip.GzipFile(os.path.join(a.sample, name + ".sample.json.gz"), "wb", mtime=0) as f:
                f.write(json.dumps(sdoc, ensure_ascii=False).encode("utf-8"))
        n = sum(len(r["plain"]) for r in rows)
        print(f"{name}: {len(rows)} chunks, {n} ids", file=sys.stderr)
        done += 1
    print(f"{done} tokenizers written to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
