/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The peer tier's counters, shared by its client and server sides and
 * exported as kvtier_peer_<name>_total (kv-peer-tier.c names them). Updated from
 * any thread with atomic adds. */
typedef enum {
  /* client */
  KV_PEER_COUNTER_LOOKUP_KEYS,
  KV_PEER_COUNTER_LOOKUP_HITS,
  KV_PEER_COUNTER_FETCHED_CHUNKS,
  KV_PEER_COUNTER_FETCHED_BYTES,
  KV_PEER_COUNTER_FETCH_MISSES,
  KV_PEER_COUNTER_FETCH_FAILURES,
  KV_PEER_COUNTER_CHECKSUM_FAILURES,
  KV_PEER_COUNTER_CONNECT_FAILURES,
  KV_PEER_COUNTER_PEER_ERRORS,
  KV_PEER_COUNTER_PEER_SKIPPED,
  KV_PEER_COUNTER_PEER_BREAKER_OPENINGS,
  KV_PEER_COUNTER_PEER_OUTAGES,
  /* server */
  KV_PEER_COUNTER_CONNECTIONS_ACCEPTED,
  KV_PEER_COUNTER_CONNECTIONS_REJECTED,
  KV_PEER_COUNTER_HANDSHAKE_FAILURES,
  KV_PEER_COUNTER_AUTH_FAILURES,
  KV_PEER_COUNTER_NAMESPACE_MISMATCHES,
  KV_PEER_COUNTER_BAD_FRAMES,
  KV_PEER_COUNTER_LIMIT_VIOLATIONS,
  KV_PEER_COUNTER_HANDSHAKE_TIMEOUTS,
  KV_PEER_COUNTER_IDLE_TIMEOUTS,
  KV_PEER_COUNTER_SLOW_READERS,
  KV_PEER_COUNTER_CONNECTION_ERRORS,
  KV_PEER_COUNTER_SERVED_LOOKUP_KEYS,
  KV_PEER_COUNTER_SERVED_CHUNKS,
  KV_PEER_COUNTER_SERVED_BYTES,
  KV_PEER_COUNTER_SERVED_MISSES,
  KV_PEER_COUNTER_SERVE_FAILURES,
  KV_PEER_COUNTER_HANDSHAKES_EVICTED,
  KV_PEER_COUNTER_ACCEPT_PAUSES,
  KV_PEER_N_COUNTERS
} KvPeerCounter;

typedef struct
{
  guint64 values[KV_PEER_N_COUNTERS];
} KvPeerCounters;

static inline void
kv_peer_counters_add (KvPeerCounters *counters,
                      KvPeerCounter   counter,
                      guint64         n)
{
  __atomic_fetch_add (&counters->values[counter], n, __ATOMIC_RELAXED);
}

static inline guint64
kv_peer_counters_get (KvPeerCounters *counters,
                      KvPeerCounter   counter)
{
  return __atomic_load_n (&counters->values[counter], __ATOMIC_RELAXED);
}

G_END_DECLS
