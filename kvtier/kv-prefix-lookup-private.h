/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-prefix-lookup.h"

G_BEGIN_DECLS

struct _KvPrefixLookup
{
  gatomicrefcount ref_count;
  KvRequest *request;
  guint      n_chunks;
  KvKey    **keys;        /* n_chunks references, then NULL */
  guint      n_device;
  guint      n_hits;
  guint      n_ready;
  gboolean   retry;
  gboolean   loaded;      /* kv_connector_load() used it */
  guint      n_sources;
  guint     *n_from;      /* n_sources counts over [0, n_device + n_hits) */
  guint8    *sources;     /* n_chunks; G_MAXUINT8: not found */
};

KvPrefixLookup *_kv_prefix_lookup_new (KvRequest     *request,
                                       KvKey * const *keys,
                                       guint          n_keys,
                                       guint          n_sources);

G_END_DECLS
