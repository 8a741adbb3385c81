/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

#include "kv-fs-index.h"
#include "kv-fs-layout.h"

G_BEGIN_DECLS

/*
 * KvFsSpares: the spare files of a tier with preallocate=true, and the
 * thread that writes them. Spares live in a dot directory under each
 * root's chunk directory; their bytes are reserved in the tier's index,
 * so that chunks plus spares never exceed max-size. A store takes a
 * spare of its root out of the pool (kv_fs_spares_pop()) instead of
 * creating a file, and puts it back if it never ran.
 *
 * Once told the index is built, the thread takes over the spares of a
 * previous run (deleting those of another size, half-written ones, and
 * all of them without preallocate), writes new ones until chunks and
 * spares fill max-size, then sleeps until kv_fs_spares_want() says room
 * appeared that no store filled. Every function may be called from any
 * thread.
 */
typedef struct _KvFsSpares KvFsSpares;

/* Called on the spare thread for each spare file written. */
typedef void (*KvFsSpareCreatedFunc) (gpointer user_data);

KvFsSpares *kv_fs_spares_new           (const KvFsLayout     *layout,
                                        KvFsIndex            *index,
                                        guint64               file_size,
                                        const gboolean       *o_direct,
                                        gboolean              preallocate,
                                        KvFsSpareCreatedFunc  created,
                                        gpointer              user_data);
void        kv_fs_spares_stop          (KvFsSpares           *self);
void        kv_fs_spares_free          (KvFsSpares           *self);
gboolean    kv_fs_spares_any_on_disk   (const KvFsLayout     *layout);

void        kv_fs_spares_index_ready   (KvFsSpares           *self);
void        kv_fs_spares_want          (KvFsSpares           *self);
void        kv_fs_spares_wait_idle     (KvFsSpares           *self);

char       *kv_fs_spares_pop           (KvFsSpares           *self,
                                        guint                 root);
void        kv_fs_spares_push          (KvFsSpares           *self,
                                        guint                 root,
                                        char                 *path);
gboolean    kv_fs_spares_has           (KvFsSpares           *self,
                                        guint                 root);
char       *kv_fs_spares_pop_elsewhere (KvFsSpares           *self,
                                        guint                 root,
                                        guint                *out_root);
guint       kv_fs_spares_get_n         (KvFsSpares           *self);

G_END_DECLS
