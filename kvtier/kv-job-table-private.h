/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>

#include "kv-pin-lease-private.h"
#include "kv-tiering-manager-private.h"
#include "kv-transfer-job.h"

G_BEGIN_DECLS

/* The manager's jobs between submit and report (kv-job-table.c): every
 * transfer job it numbered (promotions, cascades, stores tiers serve to
 * their peers) until its tier reports it, the results it makes itself for
 * jobs a tier refused, the slots of jobs failed at their deadline that
 * the tier may still touch, and the pin leases tiers hold to read chunks.
 * Processing a result applies it to the primary tier (a promotion's keys
 * become readable, a cascade's unpin) and tells the admission policy and
 * the metrics.
 *
 * Owner thread only, no lock: the leases are released from any thread
 * into their own table (KvPinTable), and read here. */

/* A job in flight. */
typedef struct
{
  guint64        id;
  KvTransferJob *job;
  guint          tier;
  gboolean       lazy;       /* a promotion whose tier reserves its slots */
  gboolean       reserved;   /* lazy: the tier asked for its slots (once) */
  gboolean       has_slots;  /* the job holds primary slots */
  KvJobKind      kind;
} KvJobEntry;

/* Embedded in the manager; kv-job-table.c writes it, the manager reads it
 * through the accessors below. */
typedef struct
{
  guint64     next_id;
  GHashTable *entries;      /* guint64* (KvJobEntry.id) → KvJobEntry */
  /* slots of jobs failed at their deadline that the tier may still touch
   * (promotions it may write, cascades of a tier that cannot cancel
   * stores, which it may read): guint64* job id → held slots, until the
   * tier answers */
  GHashTable *held_slots;
  /* leases of chunks pinned for tiers to read (KvParentManager.pin),
   * released from any thread: NULL until the first pin */
  KvPinTable *pins;
} KvJobTable;

G_GNUC_INTERNAL
void        _kv_job_table_init     (KvJobTable *table);
/* dispose: forgets the jobs and closes the pin table (a lease released
 * later fails cleanly); finalize: forgets the held slots. */
G_GNUC_INTERNAL
void        _kv_job_table_dispose  (KvJobTable *table);
G_GNUC_INTERNAL
void        _kv_job_table_finalize (KvJobTable *table);

static inline guint
_kv_job_table_get_n_jobs (KvJobTable *table)
{
  return g_hash_table_size (table->entries);
}

static inline KvJobEntry *
_kv_job_table_lookup (KvJobTable *table,
                      guint64     id)
{
  return g_hash_table_lookup (table->entries, &id);
}

/* A released lease waits to be unpinned. */
static inline gboolean
_kv_job_table_has_released_leases (KvJobTable *table)
{
  return table->pins != NULL && _kv_pin_table_has_released (table->pins);
}

/* Registers an admitted job and tells the admission policy. A lazy
 * promotion holds no slot yet (@chunk_ids are all G_MAXUINT32). */
G_GNUC_INTERNAL
KvTransferJob *_kv_tiering_manager_register_job         (KvTieringManager  *self,
                                                         KvKey * const     *keys,
                                                         const guint32     *chunk_ids,
                                                         guint              n_keys,
                                                         KvJobKind          kind,
                                                         KvRequest         *request,
                                                         guint              tier,
                                                         gboolean           lazy);
/* The tier refused @job at submit: a failed result for it is queued for
 * the next poll, as if the tier had reported it. */
G_GNUC_INTERNAL
void           _kv_tiering_manager_refuse_job           (KvTieringManager  *self,
                                                         guint              tier,
                                                         KvTransferJob     *job,
                                                         const GError      *error);
/* A successful store of @keys to the primary tier, cascaded to every tier
 * that admits it. */
G_GNUC_INTERNAL
void           _kv_tiering_manager_complete_store_and_cascade (KvTieringManager *self,
                                                               KvKey * const    *keys,
                                                               guint             n_keys,
                                                               KvRequest        *request);
/* Cascades @keys (ready in the primary tier) to @tier unless it drops the
 * store. */
G_GNUC_INTERNAL
void           _kv_tiering_manager_cascade_to_tier      (KvTieringManager  *self,
                                                         KvKey * const     *keys,
                                                         guint              n_keys,
                                                         KvRequest         *request,
                                                         guint              tier);
/* Unpins released leases, then consumes every tier's results: the
 * refused jobs', then what the tier reports, then the slots held for jobs
 * it answered late. */
G_GNUC_INTERNAL
void           _kv_tiering_manager_process_results      (KvTieringManager  *self);
/* reset_cache, after every tier drained: FALSE with @error while a slot
 * may still be touched (held for a late tier, pinned by a lease) or a job
 * was never reported. */
G_GNUC_INTERNAL
gboolean       _kv_tiering_manager_check_jobs_idle      (KvTieringManager  *self,
                                                         GError           **error);
/* shutdown, after the last results: unpins what cascades a tier never
 * answered still pin. */
G_GNUC_INTERNAL
void           _kv_tiering_manager_release_held_pins    (KvTieringManager  *self);
/* shutdown: closes the pin table and unpins the leases not released yet
 * (with a warning). */
G_GNUC_INTERNAL
void           _kv_tiering_manager_close_pins           (KvTieringManager  *self);

G_END_DECLS
