#!/usr/bin/env bash
# deps.sh — installs the Debian packages cinfer builds against (idempotent; needs root or sudo).
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev libjansson-dev libpcre2-dev
      libutf8proc-dev libevent-dev libssl-dev zlib1g-dev libopenblas-dev libzmq3-dev libmsgpack-dev
      libcurl4-openssl-dev python3 python3-pip jq
      libjs-marked node-dompurify libjs-highlight.js libjs-katex  # embedded in the chat page
      chromium chromium-driver)                                   # its tests in a real browser
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    echo "deps: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
