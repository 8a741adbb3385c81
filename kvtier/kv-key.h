/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

#define KV_TYPE_KEY (kv_key_get_type ())

typedef struct _KvKey KvKey;

KVTIER_AVAILABLE_IN_ALL
GType        kv_key_get_type              (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvKey       *kv_key_new                   (const guint8  *hash,
                                           gsize          hash_len,
                                           guint32        group);
KVTIER_AVAILABLE_IN_ALL
KvKey       *kv_key_new_from_bytes        (GBytes        *hash,
                                           guint32        group);
KVTIER_AVAILABLE_IN_ALL
KvKey       *kv_key_new_from_offload_key  (const guint8  *data,
                                           gsize          len,
                                           GError       **error);
KVTIER_AVAILABLE_IN_ALL
KvKey       *kv_key_ref                   (KvKey         *self);
KVTIER_AVAILABLE_IN_ALL
void         kv_key_unref                 (KvKey         *self);
KVTIER_AVAILABLE_IN_ALL
const guint8 *kv_key_get_hash             (const KvKey   *self,
                                           gsize         *hash_len);
KVTIER_AVAILABLE_IN_ALL
GBytes      *kv_key_get_hash_bytes        (const KvKey   *self);
KVTIER_AVAILABLE_IN_ALL
guint32      kv_key_get_group             (const KvKey   *self);
KVTIER_AVAILABLE_IN_ALL
GBytes      *kv_key_to_offload_key        (const KvKey   *self);
KVTIER_AVAILABLE_IN_ALL
char        *kv_key_to_string             (const KvKey   *self);
KVTIER_AVAILABLE_IN_ALL
guint        kv_key_hash                  (gconstpointer  key);
KVTIER_AVAILABLE_IN_ALL
gboolean     kv_key_equal                 (gconstpointer  a,
                                           gconstpointer  b);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvKey, kv_key_unref)

G_END_DECLS
