/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

#include "kv-fs-types.h"

G_BEGIN_DECLS

typedef enum {
  KV_FS_ENTRY_STORING,   /* a store is writing it; not readable */
  KV_FS_ENTRY_PRESENT,   /* published and readable */
  KV_FS_ENTRY_DELETING,  /* chosen for removal; the delete is in flight */
} KvFsEntryState;

/* One chunk the tier knows about. Owned by KvFsIndex; every field is
 * guarded by the index lock. */
typedef struct _KvFsEntry KvFsEntry;
struct _KvFsEntry
{
  KvKey          *key;
  guint64         size;        /* bytes charged against max-size */
  guint           root;
  KvFsEntryState  state;
  guint           readers;     /* loads in flight: never evicted while > 0 */
  gboolean        in_table;
  gboolean        gone;        /* removed from the table; freed when readers drop to 0 */

  /* evictor */
  GList           link;
  guint8          list;
  KvFsEntry      *parent;
  KvFsEntry      *first_child;
  KvFsEntry      *next_sibling;
  guint           n_children;
  gboolean        orphan;      /* its predecessor was removed: unreachable */
};

/*
 * KvFsEvictor: the eviction order over the PRESENT entries.
 *
 * lru:   one list, least recently used first.
 * chain: three lists. Orphans (a predecessor of theirs was removed, so no
 *        prefix lookup can reach them) go first; then chain tails (no
 *        successor stored), least recently used first; entries with a
 *        successor only when nothing else is left. When the last successor
 *        of an entry goes, the entry becomes the coldest tail, so a cold
 *        chain is peeled from its end.
 */
typedef struct _KvFsEvictor KvFsEvictor;

KvFsEvictor *kv_fs_evictor_new      (KvFsEviction  policy);
void         kv_fs_evictor_free     (KvFsEvictor  *self);
KvFsEviction kv_fs_evictor_get_policy (KvFsEvictor *self);

void         kv_fs_evictor_link     (KvFsEvictor  *self,
                                     KvFsEntry    *entry,
                                     KvFsEntry    *parent);
void         kv_fs_evictor_add      (KvFsEvictor  *self,
                                     KvFsEntry    *entry,
                                     gboolean      as_oldest);
void         kv_fs_evictor_touch    (KvFsEvictor  *self,
                                     KvFsEntry    *entry);
void         kv_fs_evictor_remove   (KvFsEvictor  *self,
                                     KvFsEntry    *entry);
void         kv_fs_evictor_detach   (KvFsEvictor  *self,
                                     KvFsEntry    *entry);
KvFsEntry   *kv_fs_evictor_pick     (KvFsEvictor  *self);
KvFsEntry   *kv_fs_evictor_pick_on_root (KvFsEvictor *self,
                                     guint         root,
                                     guint         window);

G_END_DECLS
