#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The CUDA device's GPU check, run from a bundle made by
# tests/gpu/bundle.sh (this file is copied there as run.sh):
#
#   1. the device type listed by `kvtier plugins`, the host-side tests,
#      then the GPU tests (byte-exact round trips, both directions, drain,
#      cancellation, bad ids, freed memory);
#   2. bench/cuda-copy: the ceiling (one large pinned copy each way and both
#      at once) and the device at 64 KiB, 512 KiB and 2 MiB blocks;
#   3. `kvtier bench --device cuda` on the bundled trace excerpt: chunks
#      computed and every loaded chunk checked on the GPU, an fs tier in a
#      temporary directory (io_uring, or its threads engine where io_uring
#      is missing, e.g. under gVisor).
#
# Without a GPU the GPU parts say so and are skipped; the exit status is
# then 0 if the rest passed. Logs go to $OUT (or ./out next to this file)
# as well as to the terminal. The steps' time limits add up to 8 minutes;
# on an H200 it should take two or three (an estimate: not yet run).

set -u

here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVTIER_PLUGIN_PATH="$here/plugins"
export G_DEBUG=fatal-criticals
export TMPDIR=${TMPDIR:-/tmp}

failures=0
gpu=yes

say() {
  echo "== $*" | tee -a "$out/summary.txt"
}

# run NAME LIMIT_S COMMAND...: runs with a time limit, logs to $out/NAME.log
run() {
  local name=$1 limit=$2 rc
  shift 2
  echo "-- $name: $*" | tee -a "$out/$name.log"
  if command -v timeout >/dev/null; then
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$out/$name.log"
    rc=${PIPESTATUS[0]}
  else
    "$@" 2>&1 | tee -a "$out/$name.log"
    rc=${PIPESTATUS[0]}
  fi
  return "$rc"
}

verdict() {
  local name=$1 rc=$2
  case "$rc" in
    0) say "$name: passed" ;;
    77) say "$name: skipped (no GPU)" ;;
    124|137) say "$name: FAILED (timed out)"; failures=$((failures + 1)) ;;
    *) say "$name: FAILED (exit $rc)"; failures=$((failures + 1)) ;;
  esac
}

: > "$out/summary.txt"
say "kvtier GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -srm)"
sed -n '2,5p' "$here/MANIFEST" | tee -a "$out/summary.txt"

# The libraries need a glibc at least as new as the newest symbol version
# they use; on an older system every program runs under the bundle's own
# loader and glibc instead (KVTIER_BUNDLE_GLIBC=1 forces that).
need=$(sed -n 's/^glibc-needed: //p' "$here/MANIFEST")
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
prefix=()
if [ "${KVTIER_BUNDLE_GLIBC:-0}" = 1 ] ||
   { [ -n "$need" ] && [ -n "$have" ] &&
     [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; }; then
  loader=$(ls "$here"/glibc/ld-linux* | head -n 1)
  prefix=("$loader" --library-path "$here/lib:$here/glibc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  say "glibc ${have:-unknown} here, the bundle needs $need: running under the bundle's glibc"
fi
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current \
    --format=csv,noheader 2>&1 | tee -a "$out/summary.txt"
fi

run plugins 30 "${prefix[@]}" "$here/bin/kvtier" plugins
rc=$?
if [ "$rc" -eq 0 ] && ! grep -q '^  cuda ' "$out/plugins.log"; then
  echo "the cuda device type is not listed" | tee -a "$out/plugins.log"
  rc=1
fi
verdict "kvtier plugins lists cuda" "$rc"

run test-cuda-layout 30 "${prefix[@]}" "$here/bin/test-cuda-layout"
verdict test-cuda-layout $?
run test-cuda-plugin 30 "${prefix[@]}" "$here/bin/test-cuda-plugin"
verdict test-cuda-plugin $?

run test-cuda-device 150 "${prefix[@]}" "$here/bin/test-cuda-device"
rc=$?
verdict test-cuda-device "$rc"
[ "$rc" -eq 77 ] && gpu=no

if [ "$gpu" = yes ]; then
  run cuda-copy 120 "${prefix[@]}" "$here/bin/cuda-copy"
  verdict cuda-copy $?
  grep -E '^(store|load|bidir) ' "$out/cuda-copy.log" >> "$out/summary.txt"

  # Kvtier-Fs debug: the one line saying io_uring is missing and the fs
  # tier took its threads engine, if it did.
  run kvtier-bench 120 env G_MESSAGES_DEBUG=Kvtier-Fs "${prefix[@]}" "$here/bin/kvtier" bench --device cuda \
    --trace "$here/data/mooncake-excerpt.jsonl" --gpu-size 64MiB --primary-size 256MiB \
    --no-progress --json "$out/kvtier-bench.json"
  rc=$?
  # A device of 256 chunks: chunks come back from the primary and fs tiers,
  # and every one is checked on the GPU.
  if [ "$rc" -eq 0 ] &&
     ! grep -Eq 'verified +[1-9][0-9]* loaded chunks checked byte for byte, 0 mismatches' \
       "$out/kvtier-bench.log"; then
    echo "no loaded chunk was verified, or some did not match" | tee -a "$out/kvtier-bench.log"
    rc=1
  fi
  verdict "kvtier bench --device cuda" "$rc"
  grep -E '^  (device|tiers|verified) |^  (device|primary) → (device|primary) |io-engine=auto' "$out/kvtier-bench.log" >> "$out/summary.txt"
else
  run cuda-copy 60 "${prefix[@]}" "$here/bin/cuda-copy"
  verdict "cuda-copy (no GPU: it says so and exits 0)" $?
  say "kvtier bench --device cuda: skipped (no GPU)"
fi

# Whether the primary could be registered with CUDA, or copies went through
# bounce memory (sandboxes that cannot pin memory they did not allocate).
grep -h 'copies go through pinned bounce memory' "$out"/*.log 2>/dev/null | head -n 1 |
  sed 's/^/note: /' | tee -a "$out/summary.txt"

if [ "$failures" -eq 0 ]; then
  say "all passed$([ "$gpu" = no ] && echo ', GPU parts skipped: no GPU')"
else
  say "$failures FAILED"
fi
echo "logs: $out"
[ "$failures" -eq 0 ]
