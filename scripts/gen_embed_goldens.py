#!/usr/bin/env python3
"""gen_embed_goldens.py — sentence-transformers goldens for the BERT encoder (tests/unit/test_bert.c).

Writes under tests/data/embeddings/:
  tinybert/     a tiny random-weight BERT saved by sentence-transformers (WordPiece tokenizer
                over a small vocabulary, CLS pooling + Normalize: the bge layout), and
                golden.json with its embeddings of SENTENCES;
  minilm.json   all-MiniLM-L6-v2 (mean pooling + Normalize) embeddings of SENTENCES, from
                the model directory given with --minilm (scripts/fetch_models.sh all-minilm-l6-v2
                puts it in models/all-MiniLM-L6-v2); the test runs when that directory exists.
  decoders.json  last-token and mean pooling (then L2 normalization) of the final-normed
                hidden states (transformers' last_hidden_state) of the tiny random decoders in
                tests/data/parity/{llama,qwen2,gemma3}, for three id sequences (12, 80 and 300 tokens:
                the C side packs short inputs and chunks long ones by 256).
golden.json / minilm.json: {"model", "versions", "sentences", "ids" (the HF tokenizer's,
with [CLS]/[SEP]), "embeddings" (float32 values as JSON numbers)}.

Usage: scripts/gen_embed_goldens.py [--out tests/data/embeddings] [--minilm models/all-MiniLM-L6-v2]
Needs: torch, transformers, sentence-transformers, tokenizers (PyPI), CPU only.
"""
import argparse
import json
import os

import numpy as np
import torch

import sentence_transformers
import transformers
from sentence_transformers import SentenceTransformer, models
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer
from tokenizers.processors import TemplateProcessing
from tokenizers.decoders import WordPiece as WordPieceDecoder

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A lighthouse keeper counts the ships at dawn.",
    "Embeddings map sentences to vectors; similar meanings land close together.",
    "Café crème, naïve résumé — accents are stripped by the normalizer.",
    "北京 is a city; 東京 too.",
    "hello",
    "Hello, HELLO, hello!!! ... ???",
    "def add(a, b):\n    return a + b  # a tiny function",
]


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__}


def encode_golden(model, name):
    tok = model.tokenizer
    ids = [tok(s)["input_ids"] for s in SENTENCES]
    emb = model.encode(SENTENCES, convert_to_numpy=True, batch_size=4)
    return {"model": name, "versions": versions(), "sentences": SENTENCES, "ids": ids,
            "embeddings": [[float(x) for x in row] for row in emb.astype(np.float32)]}


def tiny_vocab():
    words = ("the quick brown fox jumps over lazy dog a light house keeper counts ships at "
             "dawn hello cafe creme naive resume city is too def add return b").split()
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    punct = list(".,;:!?-()#+=") + ["\u5317", "\u4eac", "\u6771"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + letters + \
        ["##" + c for c in letters] + ["##s", "##ing", "##er"] + punct
    seen, out = set(), []
    for v in vocab:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return {v: i for i, v in enumerate(out)}


def make_tiny(out_dir):
    torch.manual_seed(1234)
    vocab = tiny_vocab()
    tk = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tk.normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                   strip_accents=None, lowercase=True)
    tk.pre_tokenizer = BertPreTokenizer()
    tk.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tk.decoder = WordPieceDecoder(prefix="##")
    hf_dir = os.path.join(out_dir, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
        cls_token="[CLS]", mask_token="[MASK]", model_max_length=64)
    fast.save_pretrained(hf_dir)
    cfg = transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64,
                                  max_position_embeddings=64, type_vocab_size=2,
                                  hidden_act="gelu", layer_norm_eps=1e-12)
    bert = transformers.BertModel(cfg, add_pooling_layer=False)
    with torch.no_grad():  # larger than the init's 0.02 so the layers matter
        for p in bert.parameters():
            p.normal_(0.0, 0.3)
    bert.eval()
    bert.save_pretrained(hf_dir, safe_serialization=True)
    tr = models.Transformer(hf_dir, max_seq_length=64)
    pool = models.Pooling(tr.get_word_embedding_dimension(), pooling_mode="cls")
    st = SentenceTransformer(modules=[tr, pool, models.Normalize()], device="cpu")
    st.save(out_dir)
    import shutil
    shutil.rmtree(hf_dir)
    st = SentenceTransformer(out_dir, device="cpu")
    g = encode_golden(st, "tinybert (random weights, CLS pooling, Normalize)")
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(g, f)


def make_decoders(out_path, parity_dir):
    g = torch.Generator().manual_seed(7)
    res = {"versions": versions(), "models": {}}
    for arch in ("llama", "qwen2", "gemma3"):
        d = os.path.join(parity_dir, arch)
        m = transformers.AutoModel.from_pretrained(d, dtype=torch.float32)
        m.eval()
        vocab = m.config.vocab_size
        seqs = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (12, 80, 300)]
        entry = {"ids": seqs, "last": [], "mean": []}
        with torch.no_grad():
            for ids in seqs:
                h = m(input_ids=torch.tensor([ids])).last_hidden_state[0].float()
                for mode, v in (("last", h[-1]), ("mean", h.mean(0))):
                    v = torch.nn.functional.normalize(v, dim=0)
                    entry[mode].append([float(x) for x in v])
        res["models"][arch] = entry
    with open(out_path, "w") as f:
        json.dump(res, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/embeddings")
    ap.add_argument("--minilm", default="models/all-MiniLM-L6-v2")
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    make_tiny(os.path.join(a.out, "tinybert"))
    make_decoders(os.path.join(a.out, "decoders.json"), os.path.join(os.path.dirname(a.out), "parity"))
    if os.path.isdir(a.minilm):
        st = SentenceTransformer(a.minilm, device="cpu")
        g = encode_golden(st, "sentence-transformers/all-MiniLM-L6-v2")
        with open(os.path.join(a.out, "minilm.json"), "w") as f:
            json.dump(g, f)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
