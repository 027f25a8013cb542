#!/usr/bin/env python3
"""gen.py — regenerates the reference files in this folder with the official writers
(gguf-py 0.19 GGUFWriter, safetensors 0.8 numpy API), so the C readers are checked against
files they did not build themselves. Run from anywhere: python3 tests/data/format/gen.py
Outputs (all small): ref.gguf, ref-0000{1,2}-of-00002.gguf, ref.safetensors."""
import os
import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType, GGUFValueType
from safetensors.numpy import save_file

here = os.path.dirname(os.path.abspath(__file__))


def fill(w):
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -32000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.25)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 1e300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo wörld")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "", "ccc"])
    w.add_array("t.arr_f32", [0.5, 1.5])
    w.add_chat_template("{{ messages }}")


w = GGUFWriter(os.path.join(here, "ref.gguf"), "llama")
fill(w)
w.add_tensor("f32", np.arange(6, dtype=np.float32).reshape(2, 3))
w.add_tensor("f16", np.arange(8, dtype=np.float16))
q8 = np.zeros((2, 34), dtype=np.uint8)  # two rows of one Q8_0 block (32 elements)
q8[1, 2] = 7
w.add_tensor("q8", q8, raw_dtype=GGMLQuantizationType.Q8_0)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

w = GGUFWriter(os.path.join(here, "ref.gguf"), "llama", split_max_tensors=1)
w.add_tensor("a", np.full(4, 1.0, dtype=np.float32))
w.add_tensor("b", np.full(4, 2.0, dtype=np.float32))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

save_file({
    "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
    "f16": np.arange(4, dtype=np.float16),
    "i64": np.array(7, dtype=np.int64),
    "u8": np.arange(5, dtype=np.uint8),
    "b": np.array([True, False]),
    "f64": np.zeros((1, 2, 1, 2), dtype=np.float64),
}, os.path.join(here, "ref.safetensors"), metadata={"format": "np"})
