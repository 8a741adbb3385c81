/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-tier-parent-private.h"
#include "kv-tiering-manager-private.h"

/* The KvParentManager a tier receives in serve_external_requests(). It
 * forwards every call to the manager with its origin tier excluded, so a
 * tier never promotes from itself, is not asked about its own remote
 * requests, and owns the store jobs and pin leases it creates (reference
 * §5.9). The manager owns the wrapper; the wrapper only points back
 * (weakly). */
struct _KvTierParent
{
  GObject parent_instance;

  KvTieringManager *manager;
  guint origin;
};

static void kv_tier_parent_iface_init (KvParentManagerInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvTierParent, kv_tier_parent, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_PARENT_MANAGER,
                                                      kv_tier_parent_iface_init))

static KvOffloadPolicy
kv_tier_parent_on_new_request (KvParentManager *parent,
                               KvRequest       *request)
{
  KvTierParent *self = KV_TIER_PARENT (parent);

  g_return_val_if_fail (self->manager != NULL, KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  return _kv_tiering_manager_on_new_request_excluding (self->manager, request, self->origin);
}

static KvLookupResult
kv_tier_parent_lookup (KvParentManager *parent,
                       KvKey           *key,
                       KvRequest       *request)
{
  KvTierParent *self = KV_TIER_PARENT (parent);

  g_return_val_if_fail (self->manager != NULL, KV_LOOKUP_RESULT_MISS);
  return _kv_tiering_manager_lookup_excluding (self->manager, key, request, self->origin);
}

static KvTransferJob *
kv_tier_parent_create_store_job (KvParentManager  *parent,
                                 KvKey           **keys,
                                 KvRequest        *request,
                                 GError          **error)
{
  KvTierParent *self = KV_TIER_PARENT (parent);
  KvTransferJob *job;
  guint n_keys = 0;

  if (self->manager == NULL)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                           "The tiering manager of this parent handle is gone");
      return NULL;
    }
  while (keys[n_keys] != NULL)
    n_keys++;
  job = _kv_tiering_manager_create_store_job (self->manager, keys, n_keys,
                                              request, self->origin, error);
  /* the manager keeps its own reference until the origin tier reports it */
  return job != NULL ? kv_transfer_job_ref (job) : NULL;
}

static KvPinLease *
kv_tier_parent_pin (KvParentManager  *parent,
                    KvKey           **keys,
                    guint             n_keys,
                    GError          **error)
{
  KvTierParent *self = KV_TIER_PARENT (parent);

  if (self->manager == NULL)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                           "The tiering manager of this parent handle is gone");
      return NULL;
    }
  return _kv_tiering_manager_pin (self->manager, keys, n_keys, self->origin, error);
}

static void
kv_tier_parent_on_request_finished (KvParentManager *parent,
                                    KvRequest       *request)
{
  KvTierParent *self = KV_TIER_PARENT (parent);

  g_return_if_fail (self->manager != NULL);
  _kv_tiering_manager_on_request_finished_excluding (self->manager, request, self->origin);
}

static void
kv_tier_parent_iface_init (KvParentManagerInterface *iface)
{
  iface->on_new_request = kv_tier_parent_on_new_request;
  iface->lookup = kv_tier_parent_lookup;
  iface->create_store_job = kv_tier_parent_create_store_job;
  iface->on_request_finished = kv_tier_parent_on_request_finished;
  iface->pin = kv_tier_parent_pin;
}

static void
kv_tier_parent_dispose (GObject *object)
{
  KvTierParent *self = KV_TIER_PARENT (object);

  if (self->manager != NULL)
    g_object_remove_weak_pointer (G_OBJECT (self->manager), (gpointer *) &self->manager);
  self->manager = NULL;

  G_OBJECT_CLASS (kv_tier_parent_parent_class)->dispose (object);
}

static void
kv_tier_parent_class_init (KvTierParentClass *klass)
{
  G_OBJECT_CLASS (klass)->dispose = kv_tier_parent_dispose;
}

static void
kv_tier_parent_init (KvTierParent *self)
{
}

KvTierParent *
kv_tier_parent_new (KvTieringManager *manager,
                    guint             origin_tier_index)
{
  KvTierParent *self = g_object_new (KV_TYPE_TIER_PARENT, NULL);

  self->manager = manager;
  self->origin = origin_tier_index;
  g_object_add_weak_pointer (G_OBJECT (manager), (gpointer *) &self->manager);
  return self;
}
