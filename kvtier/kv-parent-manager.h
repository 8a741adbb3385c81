/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-key.h"
#include "kv-pin-lease.h"
#include "kv-request.h"
#include "kv-transfer-job.h"
#include "kv-types.h"

G_BEGIN_DECLS

#define KV_TYPE_PARENT_MANAGER (kv_parent_manager_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_INTERFACE (KvParentManager, kv_parent_manager, KV, PARENT_MANAGER, GObject)

/**
 * KvParentManagerInterface:
 * @on_new_request: start serving a remotely originated request.
 * @lookup: look a key up in the primary tier and every tier but the caller.
 * @create_store_job: pin @keys in the primary tier and register a store job
 *   that the calling tier carries out and reports itself.
 * @on_request_finished: end a request started with @on_new_request.
 * @pin: pin the chunks of @keys that are in the primary tier, for the
 *   calling tier to read until it releases the lease.
 *
 * What a tier may ask of the manager while it serves other nodes'
 * requests from [vfunc@Kv.SecondaryTier.serve_external_requests].
 */
struct _KvParentManagerInterface
{
  GTypeInterface g_iface;

  KvOffloadPolicy (*on_new_request)      (KvParentManager *self,
                                          KvRequest       *request);
  KvLookupResult  (*lookup)              (KvParentManager *self,
                                          KvKey           *key,
                                          KvRequest       *request);
  KvTransferJob  *(*create_store_job)    (KvParentManager *self,
                                          KvKey          **keys,
                                          KvRequest       *request,
                                          GError         **error);
  void            (*on_request_finished) (KvParentManager *self,
                                          KvRequest       *request);
  KvPinLease     *(*pin)                 (KvParentManager *self,
                                          KvKey          **keys,
                                          guint            n_keys,
                                          GError         **error);

  /*< private >*/
  gpointer _reserved[7];
};

KVTIER_AVAILABLE_IN_ALL
KvOffloadPolicy kv_parent_manager_on_new_request      (KvParentManager *self,
                                                       KvRequest       *request);
KVTIER_AVAILABLE_IN_ALL
KvLookupResult  kv_parent_manager_lookup              (KvParentManager *self,
                                                       KvKey           *key,
                                                       KvRequest       *request);
KVTIER_AVAILABLE_IN_ALL
KvTransferJob  *kv_parent_manager_create_store_job    (KvParentManager *self,
                                                       KvKey          **keys,
                                                       KvRequest       *request,
                                                       GError         **error);
KVTIER_AVAILABLE_IN_ALL
void            kv_parent_manager_on_request_finished (KvParentManager *self,
                                                       KvRequest       *request);
KVTIER_AVAILABLE_IN_ALL
KvPinLease     *kv_parent_manager_pin                 (KvParentManager *self,
                                                       KvKey          **keys,
                                                       guint            n_keys,
                                                       GError         **error);

G_END_DECLS
