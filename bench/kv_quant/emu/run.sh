#!/usr/bin/env bash
# Builds and runs tc_emu.c (CINFER_KVQ_DEC=tc's score arithmetic on the host, over the
# fragment tables of mma.m16n8k32 .s8.u8): the kernel's arithmetic must pass and each
# planted mistake (1..4) must fail. Exit 0 when all of that holds. Run from anywhere.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${TMPDIR:-/tmp}/tc_emu.$$
cc -std=c17 -O2 -Wall -Wextra -Werror -I"$root/src" "$here/tc_emu.c" -o "$bin" -lm || exit 1
rc=0
"$bin" 0 || { echo "FAIL: the kernel's arithmetic does not match the reference"; rc=1; }
for p in 1 2 3 4; do
    if "$bin" $p 2> /dev/null; then
        echo "FAIL: planted mistake $p was not caught"; rc=1
    else
        echo "planted mistake $p caught"
    fi
done
rm -f "$bin"
[ $rc = 0 ] && echo "tc_emu: all checks passed"
exit $rc
