#!/usr/bin/env python3
"""device_summary.py BENCH.json — one line per scheme of a cinfer_kvq_bench output: bytes per
token, compression, and each decode_ratio_N with its tok/s (device_kvq.sh's summary)."""
import json
import sys

try:
    d = json.load(open(sys.argv[1]))
except Exception as ex:  # a failed run leaves no JSON: say so, do not fail the script
    print("  no JSON:", ex)
    sys.exit(0)
for name, s in d["schemes"].items():
    print("  %-12s bytes/token %7d  compr %.2f  " % (name, s["bytes_per_token"], s["compression"]) +
          "  ".join("%s %.3f (%.1f tok/s)" % (k, v, s[k.replace("ratio", "tok_s")])
                    for k, v in s.items() if k.startswith("decode_ratio_")))
