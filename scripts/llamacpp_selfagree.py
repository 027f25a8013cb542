#!/usr/bin/env python3
"""llamacpp_selfagree.py — how well llama.cpp agrees with itself across batch sizes.

Evaluates the reference ids of tests/data/llamacpp/<model>.json with llama.cpp again, this
time with n_batch = N (1 = token by token), and prints the top-1 agreement with the
one-batch reference; writes the N-batch top-1 ids to OUT.json. This is the noise floor any
other engine's agreement with llama.cpp is measured against.

Usage: LLAMA_CPP_LIB_PATH=... scripts/llamacpp_selfagree.py MODEL.gguf REF.json N OUT.json
"""
import json, sys, numpy as np, llama_cpp
from llama_cpp import Llama
model, refp, nb = sys.argv[1], sys.argv[2], int(sys.argv[3])
ref = json.load(open(refp)); ids = ref['ids']; n = len(ids)
llm = Llama(model_path=model, n_ctx=1024, n_batch=nb, n_ubatch=nb, logits_all=True, verbose=False, n_threads=2,
            type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
llm.eval(ids)
sc = np.array(llm.scores[:n])
top1 = sc.argmax(1)
agree = (top1 == np.array(ref['top1'])).mean()
json.dump([int(x) for x in top1], open(sys.argv[4], "w"))
print(f"llama.cpp n_batch={nb} vs reference (one batch): top-1 agreement {agree*100:.2f}%")
