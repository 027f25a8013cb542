#!/usr/bin/env python3
"""make_split_fixture.py — rewrites tests/data/parity/qwen2/model.gguf as a 3-file split set
(llama.cpp gguf-split naming, split.* keys written by gguf-py) in tests/data/split/, so the
model loader's split path is tested against the same goldens."""
import os, sys
import gguf

src = "tests/data/parity/qwen2/model.gguf"
dst = "tests/data/split/qwen2.gguf"
r = gguf.GGUFReader(src)
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
w = gguf.GGUFWriter(dst, arch, split_max_tensors=len(r.tensors) // 3 + 1)
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[1]
        vals = [bytes(f.parts[i]).decode() if sub == gguf.GGUFValueType.STRING else f.parts[i].tolist()[0]
                for i in f.data]
        w.add_array(name, vals)
    elif t == gguf.GGUFValueType.STRING:
        w.add_string(name, bytes(f.parts[-1]).decode())
    else:
        w.add_key_value(name, f.parts[-1].tolist()[0], t)
for t in r.tensors:
    w.add_tensor(t.name, t.data, raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(sorted(os.listdir("tests/data/split")))
