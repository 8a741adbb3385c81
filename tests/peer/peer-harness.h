/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the peer tests share: `kvtier serve` nodes started as processes on
 * 127.0.0.1 (killed by PID on every exit path: explicitly, and by the
 * kernel if the test process dies first), client managers built from a
 * configuration, the synthetic chunks `kvtier serve --synthetic-chunks`
 * stores, and a /metrics scrape with curl. */

#include <kvtier.h>

G_BEGIN_DECLS

typedef struct
{
  GSubprocess *process;
  char        *peer_address;
  char        *http_address;
  char        *config_path;
} PeerNode;

void              harness_init            (void);
void              harness_cleanup         (void);
const char       *harness_dir             (void);
void              harness_remove_tree     (const char *path);
void              harness_child_setup     (gpointer    data);
const char       *harness_secret_path     (void);
char             *harness_write_file      (const char *name,
                                           const char *contents,
                                           int         mode);

PeerNode         *peer_node_start         (const char *tier_settings,
                                           guint       slot_kib,
                                           guint64     first_chunk,
                                           guint64     n_chunks);
PeerNode         *peer_node_start_with    (const char *tier_settings,
                                           const char *more_sections,
                                           guint       slot_kib,
                                           guint       n_slots,
                                           guint64     first_chunk,
                                           guint64     n_chunks);
void              peer_node_signal        (PeerNode   *node,
                                           int         signum);
int               peer_node_terminate     (PeerNode   *node,
                                           guint       timeout_ms);
void              peer_node_free          (PeerNode   *node);

KvKey            *synthetic_key           (guint64     index);
void              synthetic_fill          (guint8     *slot,
                                           gsize       size,
                                           guint64     index);

KvTieringManager *client_manager_new      (const char *tier_settings,
                                           guint       slot_kib,
                                           GError    **error);
KvLookupResult    client_lookup_settled   (KvTieringManager *manager,
                                           KvRequest        *request,
                                           KvKey            *key,
                                           guint             timeout_ms);
void              client_step             (KvTieringManager *manager);
gboolean          client_chunk_is         (KvTieringManager *manager,
                                           KvRequest        *request,
                                           KvKey            *key,
                                           guint64           index);

char             *scrape_metrics          (PeerNode   *node);
gdouble           metric_sum              (const char *text,
                                           const char *name);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PeerNode, peer_node_free)

G_END_DECLS
