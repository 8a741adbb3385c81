/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-engine.h"

#include "kv-fs-config.h"
#include "kv-fs-gio-engine.h"
#include "kv-fs-threads-engine.h"
#if KV_FS_HAVE_URING
# include "kv-fs-uring-engine.h"
#endif

/*
 * The queues every engine shares. Per root there is a load queue and a
 * store queue (stores, deletes); engines take loads first ("reads ahead
 * of writes": a promotion is on a request's critical path, a cascade is
 * not), round-robin over the roots, and only while the root's bytes in
 * flight stay within its budget, so one slow drive cannot absorb every
 * slot of the engine.
 */

typedef struct
{
  GQueue  loads;
  GQueue  stores;
  guint64 inflight;
} RootQueue;

typedef struct
{
  int     errnum;
  guint   count;
} Injection;

typedef struct
{
  KvFsEngineConfig config;

  GMutex     lock;
  GCond      cond;
  guint      n_waiting;   /* threads in g_cond_wait() on cond: a wake-up
                           * is a system call, made only for them */
  RootQueue *roots;
  guint      next_root;
  guint      n_queued;
  guint      n_running;
  gboolean   stalled;
  gboolean   stopping;
  gboolean   started;
  gboolean   shut_down;
  Injection  injections[KV_FS_OP_PROBE + 1];
} KvFsEnginePrivate;

G_DEFINE_ABSTRACT_TYPE_WITH_PRIVATE (KvFsEngine, kv_fs_engine, G_TYPE_OBJECT)

static void
kv_fs_engine_real_kick (KvFsEngine *self)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);

  g_mutex_lock (&priv->lock);
  if (priv->n_waiting > 0)
    g_cond_broadcast (&priv->cond);
  g_mutex_unlock (&priv->lock);
}

/* Lock held: waits on cond, counted (see n_waiting). */
static void
wait_locked (KvFsEnginePrivate *priv)
{
  priv->n_waiting++;
  g_cond_wait (&priv->cond, &priv->lock);
  priv->n_waiting--;
}

static void
kv_fs_engine_finalize (GObject *object)
{
  KvFsEngine *self = KV_FS_ENGINE (object);
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);

  g_free (priv->roots);
  g_mutex_clear (&priv->lock);
  g_cond_clear (&priv->cond);

  G_OBJECT_CLASS (kv_fs_engine_parent_class)->finalize (object);
}

static void
kv_fs_engine_dispose (GObject *object)
{
  /* Threads hold no reference to the engine: stop them before it goes. */
  kv_fs_engine_shutdown (KV_FS_ENGINE (object));

  G_OBJECT_CLASS (kv_fs_engine_parent_class)->dispose (object);
}

static void
kv_fs_engine_class_init (KvFsEngineClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = kv_fs_engine_dispose;
  object_class->finalize = kv_fs_engine_finalize;
  klass->kick = kv_fs_engine_real_kick;
}

static void
kv_fs_engine_init (KvFsEngine *self)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);

  g_mutex_init (&priv->lock);
  g_cond_init (&priv->cond);
}

static GType
engine_type (KvFsIoEngine kind)
{
  switch (kind)
    {
#if KV_FS_HAVE_URING
    case KV_FS_IO_ENGINE_URING:
      return KV_TYPE_FS_URING_ENGINE;
#endif
    case KV_FS_IO_ENGINE_GIO:
      return KV_TYPE_FS_GIO_ENGINE;
    case KV_FS_IO_ENGINE_THREADS:
      return KV_TYPE_FS_THREADS_ENGINE;
    default:
      return G_TYPE_INVALID;
    }
}

static KvFsEngine *
try_engine (KvFsIoEngine             kind,
            const KvFsEngineConfig  *config,
            GError                 **error)
{
  KvFsEngine *self;
  KvFsEnginePrivate *priv;
  GType type = engine_type (kind);

  g_return_val_if_fail (config->layout != NULL, NULL);
  if (type == G_TYPE_INVALID)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "io-engine=uring is not available: kvtier was built without liburing");
      return NULL;
    }
  self = g_object_new (type, NULL);
  priv = kv_fs_engine_get_instance_private (self);
  priv->config = *config;
  priv->config.n_roots = MAX (config->n_roots, 1);
  priv->config.n_read_threads = MAX (config->n_read_threads, 1);
  priv->config.n_write_threads = MAX (config->n_write_threads, 1);
  priv->config.queue_depth = MAX (config->queue_depth, 2);
  priv->roots = g_new0 (RootQueue, priv->config.n_roots);

  if (!KV_FS_ENGINE_GET_CLASS (self)->start (self, error))
    {
      g_object_unref (self);
      return NULL;
    }
  priv->started = TRUE;
  return self;
}

/* Creates and starts an engine. `auto` means io_uring when it starts
 * (liburing built in, the kernel allows rings), the thread pool
 * otherwise. */
KvFsEngine *
kv_fs_engine_new (KvFsIoEngine             kind,
                  const KvFsEngineConfig  *config,
                  GError                 **error)
{
  if (kind == KV_FS_IO_ENGINE_AUTO)
    {
#if KV_FS_HAVE_URING
      g_autoptr(GError) uring_error = NULL;
      KvFsEngine *self = try_engine (KV_FS_IO_ENGINE_URING, config, &uring_error);

      if (self != NULL)
        return self;
      g_debug ("io-engine=auto: io_uring unavailable (%s), using threads",
               uring_error->message);
#endif
      kind = KV_FS_IO_ENGINE_THREADS;
    }
  return try_engine (kind, config, error);
}

const char *
kv_fs_engine_get_name (KvFsEngine *self)
{
  switch (kv_fs_engine_get_kind (self))
    {
    case KV_FS_IO_ENGINE_URING: return "uring";
    case KV_FS_IO_ENGINE_GIO: return "gio";
    case KV_FS_IO_ENGINE_THREADS: return "threads";
    default: return "auto";
    }
}

KvFsIoEngine
kv_fs_engine_get_kind (KvFsEngine *self)
{
#if KV_FS_HAVE_URING
  if (KV_IS_FS_URING_ENGINE (self))
    return KV_FS_IO_ENGINE_URING;
#endif
  if (KV_IS_FS_GIO_ENGINE (self))
    return KV_FS_IO_ENGINE_GIO;
  return KV_FS_IO_ENGINE_THREADS;
}

const KvFsEngineConfig *
_kv_fs_engine_get_config (KvFsEngine *self)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);

  return &priv->config;
}

static gsize
op_cost (const KvFsOp *op)
{
  switch (op->kind)
    {
    case KV_FS_OP_LOAD:
    case KV_FS_OP_STORE:
      return MAX (kv_fs_op_file_size (op), 4096);
    default:
      return 4096;
    }
}

/* Queues @ops (any thread) and wakes the engine once. */
void
kv_fs_engine_submit (KvFsEngine     *self,
                     KvFsOp * const *ops,
                     guint           n_ops)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);
  GPtrArray *refused = NULL;

  if (n_ops == 0)
    return;

  g_mutex_lock (&priv->lock);
  for (guint i = 0; i < n_ops; i++)
    {
      KvFsOp *op = ops[i];
      RootQueue *rq;

      if (priv->stopping)
        {
          if (refused == NULL)
            refused = g_ptr_array_new ();
          g_ptr_array_add (refused, op);
          continue;
        }
      rq = &priv->roots[MIN (op->root, priv->config.n_roots - 1)];
      op->cost = op_cost (op);
      op->queued = TRUE;
      op->status = KV_FS_OP_STATUS_PENDING;
      op->queue_link.data = op;
      op->queue_link.prev = op->queue_link.next = NULL;
      if (op->kind == KV_FS_OP_PROBE)
        g_queue_push_head_link (&rq->loads, &op->queue_link);
      else if (op->kind == KV_FS_OP_LOAD)
        g_queue_push_tail_link (&rq->loads, &op->queue_link);
      else
        g_queue_push_tail_link (&rq->stores, &op->queue_link);
      priv->n_queued++;
    }
  g_mutex_unlock (&priv->lock);

  /* An engine that is shutting down runs nothing new. */
  if (refused != NULL)
    {
      for (guint i = 0; i < refused->len; i++)
        {
          KvFsOp *op = refused->pdata[i];

          op->status = KV_FS_OP_STATUS_CANCELLED;
          op->error = ECANCELED;
          op->done (op, op->done_data);
        }
      g_ptr_array_unref (refused);
    }

  KV_FS_ENGINE_GET_CLASS (self)->kick (self);
}

static void
unqueue_locked (KvFsEnginePrivate *priv,
                KvFsOp            *op)
{
  RootQueue *rq = &priv->roots[MIN (op->root, priv->config.n_roots - 1)];

  if (op->kind == KV_FS_OP_LOAD || op->kind == KV_FS_OP_PROBE)
    g_queue_unlink (&rq->loads, &op->queue_link);
  else
    g_queue_unlink (&rq->stores, &op->queue_link);
  op->queued = FALSE;
  priv->n_queued--;
}

/* Cancels the ops of @ops that have not started: each is completed with
 * KV_FS_OP_STATUS_CANCELLED on this thread. Ops already running are left
 * alone. Returns how many were cancelled. */
guint
kv_fs_engine_cancel (KvFsEngine     *self,
                     KvFsOp * const *ops,
                     guint           n_ops)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);
  g_autoptr(GPtrArray) cancelled = g_ptr_array_new ();

  g_mutex_lock (&priv->lock);
  for (guint i = 0; i < n_ops; i++)
    {
      if (ops[i] != NULL && ops[i]->queued)
        {
          unqueue_locked (priv, ops[i]);
          g_ptr_array_add (cancelled, ops[i]);
        }
    }
  g_mutex_unlock (&priv->lock);

  for (guint i = 0; i < cancelled->len; i++)
    {
      KvFsOp *op = cancelled->pdata[i];

      op->status = KV_FS_OP_STATUS_CANCELLED;
      op->error = ECANCELED;
      op->end_us = g_get_monotonic_time ();
      op->done (op, op->done_data);
    }
  return cancelled->len;
}

static gboolean
fits_budget (KvFsEnginePrivate *priv,
             RootQueue         *rq,
             KvFsOp            *op)
{
  return rq->inflight == 0 || priv->config.inflight_bytes == 0 ||
         rq->inflight + op->cost <= priv->config.inflight_bytes;
}

static KvFsOp *
pop_locked (KvFsEnginePrivate *priv,
            gboolean           prefer_loads)
{
  guint n = priv->config.n_roots;

  if (priv->stalled || priv->n_queued == 0)
    return NULL;

  for (guint pass = 0; pass < 2; pass++)
    {
      gboolean loads = (pass == 0) == prefer_loads;

      for (guint i = 0; i < n; i++)
        {
          guint r = (priv->next_root + i) % n;
          RootQueue *rq = &priv->roots[r];
          GQueue *q = loads ? &rq->loads : &rq->stores;
          KvFsOp *op;

          if (q->head == NULL)
            continue;
          op = q->head->data;
          if (!fits_budget (priv, rq, op))
            continue;
          unqueue_locked (priv, op);
          rq->inflight += op->cost;
          priv->n_running++;
          priv->next_root = (r + 1) % n;
          op->start_us = g_get_monotonic_time ();
          return op;
        }
    }
  return NULL;
}

/* Takes the next runnable op: loads first when @prefer_loads (stores
 * first otherwise, the other queue when the first is empty), within the
 * root's budget, none while stalled. With @wait, blocks until an op is
 * runnable or the engine stops (then returns NULL). */
KvFsOp *
_kv_fs_engine_pop (KvFsEngine *self,
                   gboolean    prefer_loads,
                   gboolean    wait)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);
  KvFsOp *op;

  g_mutex_lock (&priv->lock);
  for (;;)
    {
      op = pop_locked (priv, prefer_loads);
      if (op != NULL || !wait || priv->stopping)
        break;
      wait_locked (priv);
    }
  g_mutex_unlock (&priv->lock);
  return op;
}

/* Reports a finished op: releases its budget, then calls its done
 * function (no engine lock held). */
void
_kv_fs_engine_finish (KvFsEngine *self,
                      KvFsOp     *op)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);
  RootQueue *rq = &priv->roots[MIN (op->root, priv->config.n_roots - 1)];

  op->end_us = g_get_monotonic_time ();
  kv_fs_op_close_dirs (op);
  g_mutex_lock (&priv->lock);
  rq->inflight -= op->cost;
  priv->n_running--;
  /* budget freed, maybe the last op: for a worker or a drain waiting */
  if (priv->n_waiting > 0)
    g_cond_broadcast (&priv->cond);
  g_mutex_unlock (&priv->lock);

  op->done (op, op->done_data);
}

gboolean
_kv_fs_engine_take_injected (KvFsEngine *self,
                             KvFsOp     *op)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);
  gboolean hit = FALSE;

  g_mutex_lock (&priv->lock);
  if (priv->injections[op->kind].count > 0)
    {
      priv->injections[op->kind].count--;
      op->status = KV_FS_OP_STATUS_IO_ERROR;
      op->error = priv->injections[op->kind].errnum;
      hit = TRUE;
    }
  g_mutex_unlock (&priv->lock);
  return hit;
}

gboolean
_kv_fs_engine_is_stopping (KvFsEngine *self)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);
  gboolean stopping;

  g_mutex_lock (&priv->lock);
  stopping = priv->stopping;
  g_mutex_unlock (&priv->lock);
  return stopping;
}

/* Blocks until no op is running. */
void
_kv_fs_engine_wait_idle (KvFsEngine *self)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);

  g_mutex_lock (&priv->lock);
  while (priv->n_running > 0)
    wait_locked (priv);
  g_mutex_unlock (&priv->lock);
}

guint
kv_fs_engine_get_n_queued (KvFsEngine *self)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);
  guint n;

  g_mutex_lock (&priv->lock);
  n = priv->n_queued;
  g_mutex_unlock (&priv->lock);
  return n;
}

guint
kv_fs_engine_get_n_running (KvFsEngine *self)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);
  guint n;

  g_mutex_lock (&priv->lock);
  n = priv->n_running;
  g_mutex_unlock (&priv->lock);
  return n;
}

void
kv_fs_engine_set_stalled (KvFsEngine *self,
                          gboolean    stalled)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);

  g_mutex_lock (&priv->lock);
  priv->stalled = stalled;
  g_mutex_unlock (&priv->lock);
  if (!stalled)
    KV_FS_ENGINE_GET_CLASS (self)->kick (self);
}

void
kv_fs_engine_inject_error (KvFsEngine *self,
                           KvFsOpKind  kind,
                           int         errnum,
                           guint       count)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);

  g_return_if_fail (kind <= KV_FS_OP_PROBE);
  g_mutex_lock (&priv->lock);
  priv->injections[kind].errnum = errnum;
  priv->injections[kind].count = count;
  g_mutex_unlock (&priv->lock);
}

/* Cancels every queued op, lets running ops finish, stops the threads.
 * Idempotent; blocks. */
void
kv_fs_engine_shutdown (KvFsEngine *self)
{
  KvFsEnginePrivate *priv = kv_fs_engine_get_instance_private (self);
  g_autoptr(GPtrArray) queued = g_ptr_array_new ();

  g_mutex_lock (&priv->lock);
  if (priv->shut_down)
    {
      g_mutex_unlock (&priv->lock);
      return;
    }
  priv->shut_down = TRUE;
  priv->stopping = TRUE;
  for (guint r = 0; priv->roots != NULL && r < priv->config.n_roots; r++)
    {
      for (GList *l = priv->roots[r].loads.head; l != NULL; l = l->next)
        g_ptr_array_add (queued, l->data);
      for (GList *l = priv->roots[r].stores.head; l != NULL; l = l->next)
        g_ptr_array_add (queued, l->data);
    }
  g_cond_broadcast (&priv->cond);
  g_mutex_unlock (&priv->lock);

  kv_fs_engine_cancel (self, (KvFsOp * const *) queued->pdata, queued->len);
  if (priv->started)
    {
      KV_FS_ENGINE_GET_CLASS (self)->kick (self);
      KV_FS_ENGINE_GET_CLASS (self)->stop (self);
    }
}
