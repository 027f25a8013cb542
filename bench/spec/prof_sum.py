#!/usr/bin/env python3
"""prof_sum.py — one compact line per server from the step profiles that CINFER_STEP_PROF
writes (src/engine/spec/step_prof.h; run.py names them DIR/WORKLOAD-KIND.PID.txt when
CINFER_STEP_PROF_DIR is set). Not a test: the device script prints it into its summary.

Per server: for each class of step (plain: the host waited for it; verify: drafts in it;
burst: queued behind the step before; prompt) the steps, mean ms, and the host's gap before
it; the verify steps by size (tokens: steps x mean ms); the CUDA graph counters.
Usage: python3 bench/spec/prof_sum.py DIR
"""
import glob
import os
import re
import sys


def parse(path):
    cls, sizes, graphs = {}, {}, ""
    for line in open(path):
        m = re.match(r"\s+(\w+)\s+all: +(\d+) steps, ([\d.]+) ms in all, ([\d.]+) ms a step, "
                     r"gap ([\d.]+) ms", line)
        if m:
            cls[m.group(1)] = (int(m.group(2)), float(m.group(3)), float(m.group(4)),
                               float(m.group(5)))
            continue
        m = re.match(r"\s+(\w+)\s+(\d+)\+?: +(\d+), ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+)", line)
        if m:
            sizes.setdefault(m.group(1), []).append(
                (int(m.group(2)), int(m.group(3)), float(m.group(4)), float(m.group(5))))
            continue
        if line.startswith("cuda graphs:"):
            g = re.findall(r"(\d+(?:\.\d+)?) (replays|captures|ms capturing|failed|lists run|"
                           r"calls|graphs evicted)", line)
            graphs = " ".join(f"{k.split()[0][:4]}={v}" for v, k in g)
    return cls, sizes, graphs


def main():
    d = sys.argv[1]
    files = sorted(glob.glob(os.path.join(d, "*.txt")))
    for f in files:
        name = re.sub(r"\.\d+\.txt$", "", os.path.basename(f))
        cls, sizes, graphs = parse(f)
        parts = []
        for c in ("plain", "burst", "verify", "prompt"):
            if c in cls:
                n, tot, mean, gap = cls[c]
                parts.append(f"{c} {n}x{mean:.2f}ms" + (f" gap{gap:.2f}" if c != "burst" else ""))
        vs = " ".join(f"{s}:{n}x{mean:.2f}(min{mn:.2f})" for s, n, mean, mn in
                      sorted(sizes.get("verify", [])))
        pl = " ".join(f"{s}:{n}x{mean:.2f}(min{mn:.2f})" for s, n, mean, mn in
                      sorted(sizes.get("plain", [])) if n >= 3)
        print(f"{name}: {' | '.join(parts)}")
        if pl:
            print(f"   plain by size {pl}")
        if vs:
            print(f"   verify by size {vs}")
        if graphs:
            print(f"   graphs {graphs}")


if __name__ == "__main__":
    main()
