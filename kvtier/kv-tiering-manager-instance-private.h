/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-tiering-manager.h"
#include "kv-tiering-manager-private.h"

#include "kv-job-table-private.h"
#include "kv-primary-tier-private.h"
#include "kv-promotions-private.h"
#include "kv-secondary-tier.h"
#include "kv-tier-parent-private.h"
#include "kv-tiering-metrics-private.h"

G_BEGIN_DECLS

/* The instance of KvTieringManager, shared by the units it is made of
 * (kv-tiering-manager.c, kv-job-table.c and kv-promotions.c) and by nothing
 * else. */

typedef struct
{
  KvRequest *request;
  guint pending_primary_stores;
  gboolean finished;
  guint origin;           /* tier that started a remote request, or NONE */
  GArray *request_level_tiers;  /* guint tier indices; NULL when none */
  GPtrArray *parked_keys; /* KvKey, owned: request-level cascade keys still pending */
} KvRequestState;

typedef struct
{
  KvSecondaryTier *tier;
  KvTierParent *parent;
  KvMedium medium;
  KvLocality locality;
  /* kv-promotions.c: promotions allocated this step, submitted at its
   * end, in insertion order */
  GPtrArray *pending_loads;         /* KvPendingPromotion */
  GHashTable *pending_loads_by_req; /* req id → KvPendingPromotion */
  gboolean lazy;                    /* the tier reserves its loads' slots */
  gboolean no_cascades;             /* the tier does not accept cascaded stores */
  /* kv-job-table.c: results the manager produced itself for jobs a tier
   * refused at submit */
  GPtrArray *refused;               /* KvJobResult */
  /* the tier reports through complete_job() and the default
   * get_finished_jobs(): a step with nothing queued skips the call */
  gboolean default_drain;
} KvTierSlot;

struct _KvTieringManager
{
  GObject parent_instance;

  KvPrimaryTier *primary;
  KvClock *clock;
  GArray *tiers;            /* KvTierSlot */

  KvJobTable jobs;          /* kv-job-table.c */
  KvPromotions promotions;  /* kv-promotions.c */

  GHashTable *requests;     /* req id → KvRequestState */
  guint n_parked_requests;

  /* The one hook every metric goes through: NULL with metrics off. */
  const KvTieringManagerHooks *hooks;
  gpointer hooks_data;
  KvTieringMetrics *metrics;  /* the hook's data with metrics on, from construction */

  gboolean enable_metrics;
  gboolean processed_jobs_this_step;
  gboolean started;
  gboolean shut_down;

  int wakeup_fd;
  gint wakeup_pending;      /* atomic: something was written to wakeup_fd */

  KvOwnerThread owner;      /* shared with the primary tier */

  KvAdmissionPolicy *admission;
  KvAdmissionPolicyInterface *admission_iface;  /* cached: one indirect call per job */
};

/* The units' shorthands below keep the names they had when the manager
 * was one file. */

static inline KvTierSlot *
tier_slot (KvTieringManager *self,
           guint             index)
{
  return &g_array_index (self->tiers, KvTierSlot, index);
}

/* Reports an event to the hook, if there is one. */
#define HOOK(self, event, ...) \
  G_STMT_START { \
    if ((self)->hooks != NULL) \
      (self)->hooks->event ((self)->hooks_data, __VA_ARGS__); \
  } G_STMT_END

/* The checks of the public entry points. OWNER_SERVE binds the owner
 * thread at the first call; OWNER_SETUP (configuration and getters) only
 * checks once a thread owns the manager, so that a manager may be built and
 * configured on one thread and driven from another. */
#define OWNER_SERVE(self, val) KV_OWNER_CHECK_RETURN (&(self)->owner, "KvTieringManager", TRUE, val)
#define OWNER_SETUP(self, val) KV_OWNER_CHECK_RETURN (&(self)->owner, "KvTieringManager", FALSE, val)

/* The admission policy's verdict on @terminated (NULL-terminated keys),
 * asked before anything is pinned, allocated or numbered. */
static inline gboolean
policy_admits (KvTieringManager *self,
               KvKey * const    *terminated,
               guint             tier,
               gboolean          is_promotion)
{
  if (G_UNLIKELY (self->admission_iface->should_admit == NULL))
    return TRUE;
  return self->admission_iface->should_admit (self->admission, (KvKey **) terminated,
                                              tier, is_promotion);
}

/* Any thread: a tier queued results (makes the wake-up fd readable). */
G_GNUC_INTERNAL
void _kv_tiering_manager_tier_queued (gpointer user_data);

G_END_DECLS
