/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

/**
 * KvLookupResult:
 * @KV_LOOKUP_RESULT_MISS: the chunk is absent (also: present in a secondary
 *   tier but the primary tier cannot allocate a slot for it). Zero, so that a
 *   binding vfunc that fails silently reads as a miss.
 * @KV_LOOKUP_RESULT_HIT: the chunk is present and readable now.
 * @KV_LOOKUP_RESULT_HIT_PENDING: the chunk is present but not readable yet (a
 *   write or promotion is in flight). Count it as a hit for the prefix, but
 *   defer the request and look the chunk up again in a later step: the
 *   answer then is %KV_LOOKUP_RESULT_HIT, or %KV_LOOKUP_RESULT_MISS when the
 *   promotion failed or, with lazy promotion allocation, found no room in
 *   the primary tier when its load started (the request recomputes the
 *   chunk). It is not a promise that the chunk will be loaded.
 * @KV_LOOKUP_RESULT_RETRY: the location is not known yet (an asynchronous
 *   lookup is in flight). Not a hit; ask again in a later step.
 *
 * The answer to a lookup of one chunk.
 */
typedef enum {
  KV_LOOKUP_RESULT_MISS = 0,
  KV_LOOKUP_RESULT_HIT,
  KV_LOOKUP_RESULT_HIT_PENDING,
  KV_LOOKUP_RESULT_RETRY,
} KvLookupResult;

/**
 * KvMedium:
 * @KV_MEDIUM_UNSPECIFIED: no medium (matches any medium in a filter).
 * @KV_MEDIUM_CPU: host memory.
 * @KV_MEDIUM_STORAGE: disks, object stores and other storage.
 *
 * Where a tier keeps its chunks.
 */
typedef enum {
  KV_MEDIUM_UNSPECIFIED = 0,
  KV_MEDIUM_CPU,
  KV_MEDIUM_STORAGE,
} KvMedium;

/**
 * KvLocality:
 * @KV_LOCALITY_UNSPECIFIED: not said (matches any locality in a filter).
 * @KV_LOCALITY_LOCAL: on this machine.
 * @KV_LOCALITY_REMOTE: across a network.
 *
 * How far a tier's storage is from this process.
 */
typedef enum {
  KV_LOCALITY_UNSPECIFIED = 0,
  KV_LOCALITY_LOCAL,
  KV_LOCALITY_REMOTE,
} KvLocality;

/**
 * KvOffloadPolicy:
 * @KV_OFFLOAD_POLICY_CHUNK_LEVEL: offload only chunks the request computed.
 * @KV_OFFLOAD_POLICY_REQUEST_LEVEL: also (re)offload the chunks the request
 *   got as prefix hits, so a tier receives the whole request.
 *
 * What a tier wants to receive for a request.
 */
typedef enum {
  KV_OFFLOAD_POLICY_CHUNK_LEVEL = 0,
  KV_OFFLOAD_POLICY_REQUEST_LEVEL,
} KvOffloadPolicy;

/**
 * KV_TIER_ERROR:
 *
 * Error domain for tiers and the tiering manager. Errors in this domain are
 * from the [error@Kv.TierError] enumeration.
 */
#define KV_TIER_ERROR (kv_tier_error_quark ())

/**
 * KvTierError:
 * @KV_TIER_ERROR_FAILED: generic failure; callers treat unknown codes as this.
 * @KV_TIER_ERROR_INVALID_ARGUMENT: an argument or value was malformed.
 * @KV_TIER_ERROR_NOT_FOUND: a key, job, request or tier is unknown.
 * @KV_TIER_ERROR_NO_SPACE: the primary tier cannot allocate the slots asked for.
 * @KV_TIER_ERROR_CLOSED: the object was shut down.
 * @KV_TIER_ERROR_TIMED_OUT: an operation ran past its deadline.
 * @KV_TIER_ERROR_BUSY: the operation is not allowed in the current state
 *   (for example adding a tier to a manager that is already running).
 *
 * Error codes for %KV_TIER_ERROR.
 */
typedef enum {
  KV_TIER_ERROR_FAILED,
  KV_TIER_ERROR_INVALID_ARGUMENT,
  KV_TIER_ERROR_NOT_FOUND,
  KV_TIER_ERROR_NO_SPACE,
  KV_TIER_ERROR_CLOSED,
  KV_TIER_ERROR_TIMED_OUT,
  KV_TIER_ERROR_BUSY,
} KvTierError;

KVTIER_AVAILABLE_IN_ALL
GQuark kv_tier_error_quark (void);

KVTIER_AVAILABLE_IN_ALL
gboolean     kv_medium_from_string   (const char  *str,
                                      KvMedium    *out_medium,
                                      GError     **error);
KVTIER_AVAILABLE_IN_ALL
const char  *kv_medium_to_string     (KvMedium     medium);
KVTIER_AVAILABLE_IN_ALL
gboolean     kv_locality_from_string (const char  *str,
                                      KvLocality  *out_locality,
                                      GError     **error);
KVTIER_AVAILABLE_IN_ALL
const char  *kv_locality_to_string   (KvLocality   locality);
KVTIER_AVAILABLE_IN_ALL
const char  *kv_lookup_result_to_string (KvLookupResult result);

KVTIER_AVAILABLE_IN_ALL
guint        kv_get_major_version    (void);
KVTIER_AVAILABLE_IN_ALL
guint        kv_get_minor_version    (void);
KVTIER_AVAILABLE_IN_ALL
guint        kv_get_micro_version    (void);

G_END_DECLS
