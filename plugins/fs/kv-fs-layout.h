/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <json-glib/json-glib.h>
#include <kvtier.h>

#include "kv-fs-format.h"
#include "kv-fs-types.h"

G_BEGIN_DECLS

/*
 * KvFsLayout: where chunk files live and how they are named, for one tier
 * (one or more roots). Immutable after kv_fs_layout_new(), so any thread
 * may use it.
 *
 * kvtier layout:  <root>/kvtier-<ns16>/<aa>/<hashhex>_g<group>.kv
 *                 (<aa>: the top byte of XXH3-64 of the offload key)
 * vLLM layout:    <root>/<model>_<digest12>/config.json
 *                 <root>/<model>_<digest12>_r<rank>/<hex[:3]>/<hex[3:5]>_g<group>/<hex>.bin
 */
typedef struct _KvFsLayout KvFsLayout;

KvFsLayout     *kv_fs_layout_new                (KvFsLayoutKind   kind,
                                                 const char      *roots,
                                                 const char      *namespace_,
                                                 gsize            block_size,
                                                 const char      *vllm_identity,
                                                 guint            vllm_rank,
                                                 GError         **error);
void            kv_fs_layout_free               (KvFsLayout      *self);

KvFsLayoutKind  kv_fs_layout_get_kind           (const KvFsLayout *self);
guint           kv_fs_layout_get_n_roots        (const KvFsLayout *self);
const char     *kv_fs_layout_get_root           (const KvFsLayout *self,
                                                 guint             root);
const char     *kv_fs_layout_get_chunk_dir      (const KvFsLayout *self,
                                                 guint             root);
const guint8   *kv_fs_layout_get_namespace_digest (const KvFsLayout *self);
gsize           kv_fs_layout_get_block_size     (const KvFsLayout *self);
gboolean        kv_fs_layout_has_header         (const KvFsLayout *self);
gsize           kv_fs_layout_get_file_size      (const KvFsLayout *self);

gboolean        kv_fs_layout_create_dirs        (const KvFsLayout *self,
                                                 GError          **error);

gboolean        kv_fs_layout_key_supported      (const KvFsLayout *self,
                                                 const KvKey      *key);
guint           kv_fs_layout_root_for_key       (const KvFsLayout *self,
                                                 const KvKey      *key);
char           *kv_fs_layout_chunk_path         (const KvFsLayout *self,
                                                 const KvKey      *key,
                                                 guint            *out_root);
gboolean        kv_fs_layout_is_temp_name       (const char       *name);

char           *kv_fs_vllm_digest               (const char       *identity_json,
                                                 char            **out_model_name,
                                                 GError          **error);
char           *kv_fs_json_canonical            (JsonNode         *node,
                                                 gboolean          pretty);

/*
 * Scanning (warm restart). For each complete chunk file: @chunk_func with
 * its key, path, size and modification time; for each temporary file:
 * @temp_func with its path and modification time. Returns the number of
 * entries seen; stops early when *@cancel becomes non-zero.
 */
typedef void (*KvFsScanChunkFunc) (KvKey      *key,
                                   guint       root,
                                   const char *path,
                                   guint64     size,
                                   gint64      mtime_us,
                                   gpointer    user_data);
typedef void (*KvFsScanTempFunc)  (const char *path,
                                   gint64      mtime_us,
                                   gpointer    user_data);

guint64         kv_fs_layout_scan               (const KvFsLayout  *self,
                                                 guint              root,
                                                 KvFsScanChunkFunc  chunk_func,
                                                 KvFsScanTempFunc   temp_func,
                                                 gpointer           user_data,
                                                 const gint        *cancel);

G_END_DECLS
