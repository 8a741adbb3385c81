/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <pthread.h>

#include "kv-pin-lease.h"
#include "kv-tiering-manager.h"

G_BEGIN_DECLS

/* Index meaning "no tier is excluded" for the *_excluding entry points. */
#define KV_TIER_INDEX_NONE G_MAXUINT

/* The KvParentManager entry points: same as the public ones, with the
 * origin tier excluded from lookups, request hooks and finalization, and
 * store jobs registered under it (reference §5.9). */
KvOffloadPolicy _kv_tiering_manager_on_new_request_excluding      (KvTieringManager *self,
                                                                   KvRequest        *request,
                                                                   guint             exclude_tier);
KvLookupResult  _kv_tiering_manager_lookup_excluding              (KvTieringManager *self,
                                                                   KvKey            *key,
                                                                   KvRequest        *request,
                                                                   guint             exclude_tier);
KvTransferJob  *_kv_tiering_manager_create_store_job              (KvTieringManager *self,
                                                                   KvKey * const    *keys,
                                                                   guint             n_keys,
                                                                   KvRequest        *request,
                                                                   guint             tier_index,
                                                                   GError          **error);
void            _kv_tiering_manager_on_request_finished_excluding (KvTieringManager *self,
                                                                   KvRequest        *request,
                                                                   guint             exclude_tier);
/* kv_tiering_manager_lookup(), telling where a promotion started: when
 * this lookup started one, *@promoted_from is its tier's index, else
 * KV_TIER_INDEX_NONE. */
KvLookupResult  _kv_tiering_manager_lookup_promoting              (KvTieringManager *self,
                                                                   KvKey            *key,
                                                                   KvRequest        *request,
                                                                   guint            *promoted_from);
/* Pins the ready chunks of @keys for @tier to read (KvParentManager.pin). */
KvPinLease     *_kv_tiering_manager_pin                           (KvTieringManager *self,
                                                                   KvKey * const    *keys,
                                                                   guint             n_keys,
                                                                   guint             tier,
                                                                   GError          **error);

/* The owner thread of a manager (and of its primary tier): the first
 * thread that calls one of its serving entry points after construction.
 * Checking it costs a load and a compare against the caller's thread
 * pointer; the critical of a call from another thread names the function
 * and both threads. */
typedef struct
{
  guintptr   id;          /* (atomic) the owner's _kv_thread_id(), 0 until bound */
  gint       binding;     /* (atomic) a first call is binding it */
  GThread   *gthread;
  char       name[16];
} KvOwnerThread;

/* The calling thread's identity: its thread pointer (the TCB address
 * pthread_self() returns too), read inline where the compiler can. */
static inline guintptr
_kv_thread_id (void)
{
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && \
    (defined(__x86_64__) || defined(__aarch64__))
  return (guintptr) __builtin_thread_pointer ();
#else
  return (guintptr) pthread_self ();
#endif
}

G_GNUC_INTERNAL
gboolean _kv_owner_thread_check_slow (KvOwnerThread *owner,
                                      const char    *function,
                                      const char    *what,
                                      gboolean       bind);

/* TRUE when the caller is the owner thread (binding it when @bind and no
 * thread owns @owner yet); otherwise a critical and FALSE. */
static inline gboolean
_kv_owner_thread_check (KvOwnerThread *owner,
                        const char    *function,
                        const char    *what,
                        gboolean       bind)
{
  if (G_LIKELY ((guintptr) g_atomic_pointer_get (&owner->id) == _kv_thread_id ()))
    return TRUE;
  return _kv_owner_thread_check_slow (owner, function, what, bind);
}

/* Returns @val from the calling function, without touching any state, when
 * the caller is not the manager's owner thread. */
#define KV_OWNER_CHECK_RETURN(owner, what, bind, val) \
  G_STMT_START { \
    if (G_UNLIKELY (!_kv_owner_thread_check ((owner), G_STRFUNC, (what), (bind)))) \
      return val; \
  } G_STMT_END

/* What a job moves: a promotion (tier -> primary), a cascade (primary ->
 * tier) or a store a tier serves to another node's request through its
 * KvParentManager (primary -> the tier's peer: not written into the tier,
 * so counted apart from cascades). */
typedef enum
{
  KV_JOB_KIND_CASCADE,
  KV_JOB_KIND_PROMOTION,
  KV_JOB_KIND_SERVED,
} KvJobKind;

/* What the manager reports about its work, through one hook: every event
 * that vLLM's metrics count. The manager calls the hook only when it has
 * one (metrics enabled); @data is the hook's own. Label 0 is the primary
 * tier, label i the secondary tier of index i - 1. All on the owner
 * thread. */
typedef struct
{
  /* A primary lookup; @stamp (HIT only, else NULL) is the chunk's stamp
   * word, see _kv_primary_tier_lookup_stamp(). */
  void (*primary_lookup)     (gpointer data, KvRequest *request, KvKey *key,
                              KvLookupResult result, guint64 *stamp);
  /* A secondary tier's answer and how long it took. */
  void (*tier_lookup)        (gpointer data, KvRequest *request, KvKey *key, guint label,
                              KvLookupResult result, gint64 duration_us);
  /* A lookup that the primary tier did not answer HIT for is over;
   * @promoted_stamp is the stamp word of the primary entry it made for a
   * promotion (0 in a new entry), NULL when it made none. The hook may
   * keep what the lookup's earlier calls saw there instead of in a table
   * of its own. */
  void (*lookup_settled)     (gpointer data, guint64 *promoted_stamp);
  /* A stamp word a lazy promotion kept (see KvPromotions.lazy_promoting)
   * goes into @word, the stamp word of the key's new primary entry, or,
   * with @word NULL, is dropped: the promotion reserved no slot for it. */
  void (*stamp_moved)        (gpointer data, KvKey *key, guint64 stamp, guint64 *word);
  void (*job_registered)     (gpointer data, guint label, KvJobKind kind, guint n_keys);
  void (*job_finished)       (gpointer data, guint label, KvJobKind kind, guint n_keys,
                              KvJobResult *result);
  void (*promotion_allocation_failed) (gpointer data);
  /* A request id the manager tracks already was announced again. */
  void (*request_restarted)  (gpointer data, const char *request_id);
  /* The request got its device blocks (step end): its lookups stop counting. */
  void (*request_allocated)  (gpointer data, const char *request_id);
  void (*request_finished)   (gpointer data, const char *request_id);
  /* A lazy promotion of tier @label reserved @n_chunks primary slots. */
  void (*promotion_reserved) (gpointer data, guint label, guint n_chunks);
  /* A request stopped waiting on a HIT_PENDING chunk at the deadline. */
  void (*hit_pending_released) (gpointer data, const char *request_id);
} KvTieringManagerHooks;

G_END_DECLS
