/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <json-glib/json-glib.h>
#include <kvtier.h>
#include <sys/stat.h>

#include "kv-chunk-format.h"
#include "kv-fs-types.h"

G_BEGIN_DECLS

/*
 * KvFsLayout: where chunk files live and how they are named, for one tier
 * (one or more roots), and the roots' directories, held open once
 * kv_fs_layout_create_dirs() checked them. Immutable after that but for
 * the directories of a root removed under the tier (made again under a
 * lock), so any thread may use it.
 *
 * kvtier layout:  <root>/kvtier-<ns16>/<aa>/<hashhex>_g<group>.kv
 *                 (<aa>: the top byte of XXH3-64 of the offload key)
 * vLLM layout:    <root>/<model>_<digest12>/config.json
 *                 <root>/<model>_<digest12>_r<rank>/<hex[:3]>/<hex[3:5]>_g<group>/<hex>.bin
 */
typedef struct _KvFsLayout KvFsLayout;

/* The kvtier layout's shard directories per root. */
#define KV_FS_N_SHARDS 256
/* The deepest directory below a chunk directory that a file may be in
 * (vLLM's layout uses 2). */
#define KV_FS_MAX_DIR_DEPTH 4
/* Under each root's chunk directory: the spare files (see KvFsSpares). */
#define KV_FS_SPARE_DIR_NAME ".kvtier-spare"

/*
 * KvFsRootDirs: one root's directories, held open once checked (see
 * kv_fs_layout_trusts()); every file operation of the tier is made
 * relative to them. Reference counted, any thread: a root removed under
 * a running tier gets new ones (kv_fs_layout_reopen_dirs()) while
 * operations still in flight keep theirs.
 */
typedef struct _KvFsRootDirs KvFsRootDirs;

KvFsRootDirs   *kv_fs_root_dirs_ref             (KvFsRootDirs     *dirs);
void            kv_fs_root_dirs_unref           (KvFsRootDirs     *dirs);
int             kv_fs_root_dirs_get_chunk_fd    (const KvFsRootDirs *dirs);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvFsRootDirs, kv_fs_root_dirs_unref)

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

void            kv_fs_layout_set_trusted_gid    (KvFsLayout       *self,
                                                 gint64            gid);
gint64          kv_fs_layout_get_trusted_gid    (const KvFsLayout *self);
gboolean        kv_fs_layout_trusts             (const KvFsLayout *self,
                                                 const struct stat *st,
                                                 gboolean          is_file);
gboolean        kv_fs_layout_create_dirs        (KvFsLayout       *self,
                                                 GError          **error);
gboolean        kv_fs_layout_root_is_device     (const KvFsLayout *self,
                                                 guint             root);
KvFsRootDirs   *kv_fs_layout_ref_dirs           (const KvFsLayout *self,
                                                 guint             root);
KvFsRootDirs   *kv_fs_layout_reopen_dirs        (const KvFsLayout *self,
                                                 guint             root,
                                                 KvFsRootDirs     *stale);
int             kv_fs_layout_open_parent        (const KvFsLayout *self,
                                                 guint             root,
                                                 KvFsRootDirs     *dirs,
                                                 const char       *path,
                                                 gboolean          create,
                                                 const char      **out_name,
                                                 gboolean         *out_owned);
int             kv_fs_layout_open_subdir        (const KvFsLayout *self,
                                                 guint             root,
                                                 const char       *name,
                                                 gboolean          create);
gboolean        kv_fs_layout_chunk_exists       (const KvFsLayout *self,
                                                 const KvKey      *key);
gboolean        kv_fs_layout_has_entries        (const KvFsLayout *self,
                                                 guint             root);
int             kv_fs_layout_unlink             (const KvFsLayout *self,
                                                 guint             root,
                                                 const char       *path);

gboolean        kv_fs_layout_key_supported      (const KvFsLayout *self,
                                                 const KvKey      *key);
guint           kv_fs_layout_root_for_key       (const KvFsLayout *self,
                                                 const KvKey      *key);
char           *kv_fs_layout_chunk_path         (const KvFsLayout *self,
                                                 const KvKey      *key,
                                                 guint            *out_root);

char           *kv_fs_vllm_digest               (const char       *identity_json,
                                                 char            **out_model_name,
                                                 GError          **error);
char           *kv_fs_json_canonical            (JsonNode         *node,
                                                 gboolean          pretty);

/*
 * Scanning (warm restart), on the directories held open. For each
 * complete-looking chunk file of the tier's user: @chunk with its key,
 * its directory and name, path, size and modification time; for each
 * temporary file of a name the tier's format defines: @temp; for each
 * file of a chunk or temporary name, or shard directory, that the tier
 * does not trust (another user's, a link...): @foreign. Names the format
 * does not define are skipped. Returns the number of entries seen;
 * stops early when *@cancel becomes non-zero.
 */
typedef struct
{
  void (*chunk)   (KvKey      *key,
                   guint       root,
                   int         dir_fd,
                   const char *name,
                   const char *path,
                   guint64     size,
                   gint64      mtime_us,
                   gpointer    user_data);
  void (*temp)    (int         dir_fd,
                   const char *name,
                   const char *path,
                   gint64      mtime_us,
                   gpointer    user_data);
  void (*foreign) (const char *path,
                   gpointer    user_data);
} KvFsScanFuncs;

guint64         kv_fs_layout_scan               (const KvFsLayout    *self,
                                                 guint                root,
                                                 const KvFsScanFuncs *funcs,
                                                 gpointer             user_data,
                                                 const gint          *cancel);

G_END_DECLS
