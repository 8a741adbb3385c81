/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

#include "kv-fs-layout.h"
#include "kv-fs-op.h"
#include "kv-fs-types.h"

G_BEGIN_DECLS

#define KV_TYPE_FS_ENGINE (kv_fs_engine_get_type ())

G_DECLARE_DERIVABLE_TYPE (KvFsEngine, kv_fs_engine, KV, FS_ENGINE, GObject)

/**
 * KvFsEngineClass:
 * @parent_class: the parent class
 * @start: start the engine's threads (and ring); called once.
 * @kick: new work may be runnable (ops queued, a stall lifted). Called
 *   from any thread with no engine lock held.
 * @stop: stop the threads; every op taken from the queue has finished
 *   (its done function was called) when it returns.
 *
 * An I/O engine: runs [struct@KvFsOp]s on its own threads. The base class
 * keeps the queues (loads ahead of stores), the per-root budget of bytes
 * in flight, cancellation of queued ops and the test hooks; subclasses
 * take runnable ops with _kv_fs_engine_pop() and report each with
 * _kv_fs_engine_finish().
 */
struct _KvFsEngineClass
{
  GObjectClass parent_class;

  gboolean (*start) (KvFsEngine  *self,
                     GError     **error);
  void     (*kick)  (KvFsEngine  *self);
  void     (*stop)  (KvFsEngine  *self);

  /*< private >*/
  gpointer _reserved[4];
};

/* Construction parameters shared by every engine. */
typedef struct
{
  guint    n_roots;
  guint64  inflight_bytes;    /* per root; 0 = unlimited */
  guint    n_read_threads;
  guint    n_write_threads;
  guint    queue_depth;       /* most ops running at once (uring, gio) */
  gpointer buffer;            /* primary slot memory, registered by uring */
  gsize    buffer_size;
  gsize    slot_size;
  /* the roots: every file operation is made relative to the directories
   * it holds open (borrowed; outlives the engine) */
  const KvFsLayout *layout;
  /* every record is a copy from a mapping (a slab on memory-backed
   * roots): no request to make, CPUs to copy with */
  gboolean mapped;
} KvFsEngineConfig;

KvFsEngine   *kv_fs_engine_new           (KvFsIoEngine            kind,
                                          const KvFsEngineConfig *config,
                                          GError                **error);
const char   *kv_fs_engine_get_name      (KvFsEngine             *self);
KvFsIoEngine  kv_fs_engine_get_kind      (KvFsEngine             *self);
void          kv_fs_engine_submit        (KvFsEngine             *self,
                                          KvFsOp * const         *ops,
                                          guint                   n_ops);
guint         kv_fs_engine_cancel        (KvFsEngine             *self,
                                          KvFsOp * const         *ops,
                                          guint                   n_ops);
void          kv_fs_engine_shutdown      (KvFsEngine             *self);
guint         kv_fs_engine_get_n_queued  (KvFsEngine             *self);
guint         kv_fs_engine_get_n_running (KvFsEngine             *self);

/* Test hooks. A stalled engine starts no op until it is released (queued
 * ops can still be cancelled); an injected error makes the next @count
 * ops of @kind fail with @errnum before they touch the disk. */
void          kv_fs_engine_set_stalled   (KvFsEngine             *self,
                                          gboolean                stalled);
void          kv_fs_engine_inject_error  (KvFsEngine             *self,
                                          KvFsOpKind              kind,
                                          int                     errnum,
                                          guint                   count);

/* For subclasses. */
const KvFsEngineConfig *_kv_fs_engine_get_config (KvFsEngine *self);
KvFsOp       *_kv_fs_engine_pop          (KvFsEngine             *self,
                                          gboolean                prefer_loads,
                                          gboolean                wait);
void          _kv_fs_engine_finish       (KvFsEngine             *self,
                                          KvFsOp                 *op);
gboolean      _kv_fs_engine_take_injected (KvFsEngine            *self,
                                          KvFsOp                 *op);
gboolean      _kv_fs_engine_is_stopping  (KvFsEngine             *self);
void          _kv_fs_engine_wait_idle    (KvFsEngine             *self);

G_END_DECLS
