#!/usr/bin/env bash
# cpu_hogs.sh — runs a command beside busy-looping processes, to show that the suite does
# not depend on how fast the machine is (docs/testing.md).
# Usage: scripts/cpu_hogs.sh [command args...]   (default: ./scripts/test.sh)
# Env: CINFER_HOGS (number of hog processes, default 2). Prints the elapsed time and the
# load average at the end; the exit status is the command's.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- ./scripts/test.sh
pids=()
cleanup() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq "${CINFER_HOGS:-2}"); do
    bash -c 'while :; do :; done' &
    pids+=($!)
done
echo "cpu_hogs: ${#pids[@]} hogs (pids ${pids[*]}) beside: $*"
t0=$(date +%s)
"$@"
rc=$?
echo "cpu_hogs: exit $rc after $(( $(date +%s) - t0 )) s with ${#pids[@]} hogs ($(uptime | sed 's/.*load/load/'))"
exit $rc
