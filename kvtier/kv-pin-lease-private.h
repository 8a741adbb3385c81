/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-clock.h"
#include "kv-pin-lease.h"

G_BEGIN_DECLS

/* The manager's side of pin leases: the table of leases it made, the
 * queue of those released (from any thread) and not unpinned yet, and
 * whether it closed (shut down). One lock; the queued func runs under it,
 * so that a manager that closes the table never has it called again. */
typedef struct _KvPinTable KvPinTable;

/* Called, under the table's lock, on the thread that released a lease:
 * it must only signal (the manager's eventfd). */
typedef void (*KvPinTableQueuedFunc) (gpointer data);

G_GNUC_INTERNAL
KvPinTable *_kv_pin_table_new           (KvClock               *clock,
                                         KvPinTableQueuedFunc   queued_func,
                                         gpointer               queued_data);
G_GNUC_INTERNAL
void        _kv_pin_table_unref         (KvPinTable            *table);

/* A lease of @n_keys keys for @tier; @chunk_ids (taken) holds each key's
 * pinned slot, G_MAXUINT32 for a key not pinned. */
G_GNUC_INTERNAL
KvPinLease *_kv_pin_table_add           (KvPinTable            *table,
                                         guint                  tier,
                                         KvKey * const         *keys,
                                         guint32               *chunk_ids,
                                         guint                  n_keys);

/* Whether a lease was released since the last take (one atomic read). */
G_GNUC_INTERNAL
gboolean    _kv_pin_table_has_released  (KvPinTable            *table);
/* The leases released since the last take, in release order (transfer
 * full), or NULL when there are none; the owner unpins them. */
G_GNUC_INTERNAL
GPtrArray  *_kv_pin_table_take_released (KvPinTable            *table);
/* Leases not released yet. */
G_GNUC_INTERNAL
guint       _kv_pin_table_get_n_held    (KvPinTable            *table);
/* Closes the table: every lease still held or released but not taken is
 * returned (transfer full; NULL when none), for the owner to unpin, and
 * releasing any lease from now on fails with KV_TIER_ERROR_CLOSED.
 * *@n_unreleased (optional): how many of them were never released. */
G_GNUC_INTERNAL
GPtrArray  *_kv_pin_table_close         (KvPinTable            *table,
                                         guint                 *n_unreleased);

/* For the owner, once a lease is taken from the table. */
G_GNUC_INTERNAL
guint       _kv_pin_lease_get_tier      (KvPinLease            *lease);
/* The pinned keys only (borrowed), in lease order. */
G_GNUC_INTERNAL
KvKey     **_kv_pin_lease_get_pinned    (KvPinLease            *lease,
                                         guint                 *n_pinned);
/* What the releaser said; FALSE for a lease closed unreleased. */
G_GNUC_INTERNAL
gboolean    _kv_pin_lease_get_success   (KvPinLease            *lease);
/* Seconds from the pin to the release (to the close for one closed). */
G_GNUC_INTERNAL
gdouble     _kv_pin_lease_get_held_time (KvPinLease            *lease);

G_END_DECLS
