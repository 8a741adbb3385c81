#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Two kvtier nodes on one host, each the other's peer, on free loopback
# ports, in a temporary directory removed at exit:
#
#   two-nodes.sh           start them, print their addresses and the
#                          Prometheus targets, run until Ctrl-C
#   two-nodes.sh --check   start them, check /health and /metrics on both,
#                          stop them
#
# Node A stores 32 generated chunks (kvtier serve --synthetic-chunks); node B
# has an fs tier of its own. KVTIER names the kvtier program (default: the
# one on PATH). The nodes are stopped by PID (SIGTERM, then SIGKILL).
set -euo pipefail

kvtier=${KVTIER:-kvtier}
check=no
case "${1:-}" in
  --check) check=yes ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
command -v "$kvtier" >/dev/null || { echo "$0: $kvtier not found (set KVTIER)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "$0: python3 is needed to pick free ports" >&2; exit 1; }
command -v curl >/dev/null || { echo "$0: curl is needed" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-two-nodes.XXXXXX")
pids=()
stop() {
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT TERM

# four ports nothing listens on now (the kernel's choice): each node's
# peer port is in the other's configuration before either starts
read -r peer_a http_a peer_b http_b < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')

head -c 32 /dev/urandom > "$dir/peer.secret"
chmod 600 "$dir/peer.secret"
mkdir -m 700 "$dir/b-disk"
node_config() {  # NAME LISTEN PEER [MORE]
  cat > "$dir/$1.conf" <<CONF
[primary]
size = 64MiB
slot-size = 256KiB

[tier peer]
type = peer
namespace = example-model/fp16/tp1
secret-file = $dir/peer.secret
listen = 127.0.0.1:$2
peers = 127.0.0.1:$3
$4
CONF
}
node_config a "$peer_a" "$peer_b" ""
node_config b "$peer_b" "$peer_a" "
[tier disk]
type = fs
root = $dir/b-disk"

start_node() {  # NAME HTTP [ARGS...]
  local name=$1 http=$2
  shift 2
  "$kvtier" serve --config "$dir/$name.conf" --http "127.0.0.1:$http" "$@" \
    > "$dir/$name.out" 2> "$dir/$name.log" &
  pids+=($!)
  for _ in $(seq 300); do
    grep -q '^ready' "$dir/$name.out" 2>/dev/null && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "$0: node $name did not start:" >&2
  cat "$dir/$name.log" >&2
  exit 1
}
start_node a "$http_a" --synthetic-chunks 32
start_node b "$http_b"

cat <<INFO
node A: $(cat "$dir/a.out")   (log: $dir/a.log)
node B: $(cat "$dir/b.out")   (log: $dir/b.log)
Prometheus targets (deploy/prometheus.yml):
      - targets: ['127.0.0.1:$http_a', '127.0.0.1:$http_b']
INFO

if [ "$check" = no ]; then
  echo "running; Ctrl-C stops both"
  wait
  exit 0
fi

for node in "a $http_a" "b $http_b"; do
  set -- $node
  [ "$(curl -sf "http://127.0.0.1:$2/health")" = ok ] || { echo "$0: node $1: /health" >&2; exit 1; }
  curl -sf "http://127.0.0.1:$2/metrics" > "$dir/$1.metrics"
  for family in vllm:kv_offload_tiering_chunk_queries_total kvtier_peer_served_chunks_total \
                kvtier_tier_breaker_open; do
    grep -q "^$family{tier=\"1:peer\"}" "$dir/$1.metrics" || \
      { echo "$0: node $1: no $family in /metrics" >&2; exit 1; }
  done
done
echo "check: both nodes answer /health and /metrics"
