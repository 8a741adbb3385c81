/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-parent-manager.h"

/**
 * KvParentManager:
 *
 * What a secondary tier may ask of the tiering manager while it serves
 * requests that other nodes sent to it.
 *
 * The manager hands an object implementing this interface to
 * [vfunc@Kv.SecondaryTier.serve_external_requests]; it is valid only
 * during that call, and every method runs on the owner thread. The tier
 * that receives it is left out of every call: a lookup never asks it, and
 * it is never asked to promote from itself.
 *
 * For each request that a remote node sends, the tier calls, in order:
 *
 * 1. [method@Kv.ParentManager.on_new_request];
 * 2. [method@Kv.ParentManager.lookup] for each chunk, and
 *    [method@Kv.ParentManager.pin] (or, as vLLM's p2p tier does,
 *    [method@Kv.ParentManager.create_store_job]) for the chunks it will
 *    send (both may interleave);
 * 3. [method@Kv.ParentManager.on_request_finished], always, even when
 *    nothing was found, or the manager keeps per-request state forever.
 *
 * To send chunks, a tier pins them with [method@Kv.ParentManager.pin]: the
 * [class@Kv.PinLease] names the slots to read and is released once, from
 * any thread, when the bytes are sent. vLLM's way, a store job made by
 * [method@Kv.ParentManager.create_store_job], is also available: the
 * calling tier carries it out (it reads the pinned primary slots and
 * sends them) and reports it like any other job, with
 * [method@Kv.SecondaryTier.complete_job].
 */
G_DEFINE_INTERFACE (KvParentManager, kv_parent_manager, G_TYPE_OBJECT)

static void
kv_parent_manager_default_init (KvParentManagerInterface *iface)
{
}

/* The vfuncs share their invokers' signatures, so g-ir-scanner documents
 * them with the invokers' text; every one runs on the owner thread. */

/**
 * kv_parent_manager_on_new_request:
 * @self: a parent manager
 * @request: a request that a remote node sent
 *
 * Starts serving @request: the manager and the tiers other than the
 * caller learn about it. Owner thread only. Pair it with
 * [method@Kv.ParentManager.on_request_finished].
 *
 * Returns: the offload policy the manager chose for @request
 */
KvOffloadPolicy
kv_parent_manager_on_new_request (KvParentManager *self,
                                  KvRequest       *request)
{
  KvParentManagerInterface *iface;

  g_return_val_if_fail (KV_IS_PARENT_MANAGER (self), KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_return_val_if_fail (KV_IS_REQUEST (request), KV_OFFLOAD_POLICY_CHUNK_LEVEL);

  iface = KV_PARENT_MANAGER_GET_IFACE (self);
  g_return_val_if_fail (iface->on_new_request != NULL, KV_OFFLOAD_POLICY_CHUNK_LEVEL);

  return iface->on_new_request (self, request);
}

/**
 * kv_parent_manager_lookup:
 * @self: a parent manager
 * @key: the chunk to look for
 * @request: the request, as passed to
 *   [method@Kv.ParentManager.on_new_request]
 *
 * Looks @key up in the primary tier, then in every secondary tier except
 * the caller (which may start a promotion, answered
 * %KV_LOOKUP_RESULT_HIT_PENDING). Owner thread only; does not block.
 *
 * Returns: whether @key can be served
 */
KvLookupResult
kv_parent_manager_lookup (KvParentManager *self,
                          KvKey           *key,
                          KvRequest       *request)
{
  KvParentManagerInterface *iface;
  KvLookupResult result;

  g_return_val_if_fail (KV_IS_PARENT_MANAGER (self), KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (key != NULL, KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (KV_IS_REQUEST (request), KV_LOOKUP_RESULT_MISS);

  iface = KV_PARENT_MANAGER_GET_IFACE (self);
  g_return_val_if_fail (iface->lookup != NULL, KV_LOOKUP_RESULT_MISS);

  result = iface->lookup (self, key, request);
  switch ((int) result)
    {
    case KV_LOOKUP_RESULT_MISS:
    case KV_LOOKUP_RESULT_HIT:
    case KV_LOOKUP_RESULT_HIT_PENDING:
    case KV_LOOKUP_RESULT_RETRY:
      return result;

    default:
      g_debug ("%s.lookup answered %d, not a KvLookupResult; read as MISS",
               G_OBJECT_TYPE_NAME (self), (int) result);
      return KV_LOOKUP_RESULT_MISS;
    }
}

/**
 * kv_parent_manager_create_store_job:
 * @self: a parent manager
 * @keys: (array zero-terminated=1) (transfer none): the chunks to send,
 *   each a hit of [method@Kv.ParentManager.lookup] in the primary tier
 * @request: the request, as passed to
 *   [method@Kv.ParentManager.on_new_request]
 * @error: return location for an error
 *
 * Pins @keys in the primary tier (they cannot be evicted until the job is
 * reported) and registers a store job under the calling tier. The tier
 * reads the slots named by [method@Kv.TransferJob.get_chunk_ids], sends
 * the bytes, and reports the job exactly once with
 * [method@Kv.SecondaryTier.complete_job]; the slots are unpinned then.
 * Owner thread only.
 *
 * The tiering manager asks its [iface@Kv.AdmissionPolicy] first
 * ([method@Kv.AdmissionPolicy.should_admit], as a store to the calling
 * tier), as vLLM's manager does: when the policy refuses the store,
 * nothing is pinned, no job id is used, and this fails with
 * %KV_TIER_ERROR_BUSY; the tier then answers its peer with a miss for
 * @keys (as vLLM's p2p server does when `create_store_job` returns
 * `None`). [method@Kv.ParentManager.pin] pins without asking the policy.
 *
 * Fails with %KV_TIER_ERROR_FAILED if the implementation returned %NULL
 * without saying why.
 *
 * Returns: (transfer full): the job, or %NULL with @error set
 */
KvTransferJob *
kv_parent_manager_create_store_job (KvParentManager  *self,
                                    KvKey           **keys,
                                    KvRequest        *request,
                                    GError          **error)
{
  KvParentManagerInterface *iface;
  GError *local_error = NULL;
  KvTransferJob *job;

  g_return_val_if_fail (KV_IS_PARENT_MANAGER (self), NULL);
  g_return_val_if_fail (keys != NULL, NULL);
  g_return_val_if_fail (KV_IS_REQUEST (request), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  iface = KV_PARENT_MANAGER_GET_IFACE (self);
  if (iface->create_store_job == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "%s does not implement create_store_job", G_OBJECT_TYPE_NAME (self));
      return NULL;
    }

  job = iface->create_store_job (self, keys, request, &local_error);
  if (job != NULL)
    {
      if (local_error != NULL)
        {
          g_debug ("%s.create_store_job returned a job but set an error, ignored: %s",
                   G_OBJECT_TYPE_NAME (self), local_error->message);
          g_error_free (local_error);
        }
      return job;
    }

  if (local_error == NULL)
    local_error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                               "%s.create_store_job failed without setting an error",
                               G_OBJECT_TYPE_NAME (self));
  g_propagate_error (error, local_error);
  return NULL;
}

/**
 * kv_parent_manager_on_request_finished:
 * @self: a parent manager
 * @request: the request, as passed to
 *   [method@Kv.ParentManager.on_new_request]
 *
 * Ends a request started with [method@Kv.ParentManager.on_new_request].
 * Always call it, even when no chunk was found. Owner thread only. Store
 * jobs of the request may still be in flight.
 */
void
kv_parent_manager_on_request_finished (KvParentManager *self,
                                       KvRequest       *request)
{
  KvParentManagerInterface *iface;

  g_return_if_fail (KV_IS_PARENT_MANAGER (self));
  g_return_if_fail (KV_IS_REQUEST (request));

  iface = KV_PARENT_MANAGER_GET_IFACE (self);
  g_return_if_fail (iface->on_request_finished != NULL);

  iface->on_request_finished (self, request);
}

/**
 * kv_parent_manager_pin:
 * @self: a parent manager
 * @keys: (array length=n_keys) (transfer none): the chunks to read
 * @n_keys: the length of @keys
 * @error: return location for an error
 *
 * Pins the chunks of @keys that are ready in the primary tier, so that the
 * calling tier can read their slots (to send them to another node) until
 * it releases the returned lease with [method@Kv.PinLease.release], from
 * any thread. A key that is not in the primary tier, or is still being
 * written, is left out (a miss for whoever asked); the lease says which
 * keys are pinned and where their bytes are. Nothing is asked of the
 * admission policy, no job is made, and no tier is called. Owner thread
 * only.
 *
 * Fails with %KV_TIER_ERROR_CLOSED when the manager shut down, and with
 * %KV_TIER_ERROR_FAILED when the implementation has no pin.
 *
 * Returns: (transfer full): the lease, or %NULL with @error set
 */
KvPinLease *
kv_parent_manager_pin (KvParentManager  *self,
                       KvKey           **keys,
                       guint             n_keys,
                       GError          **error)
{
  KvParentManagerInterface *iface;
  GError *local_error = NULL;
  KvPinLease *lease;

  g_return_val_if_fail (KV_IS_PARENT_MANAGER (self), NULL);
  g_return_val_if_fail (keys != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  for (guint i = 0; i < n_keys; i++)
    if (keys[i] == NULL)
      {
        g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                     "kv_parent_manager_pin: key %u of %u is NULL", i, n_keys);
        return NULL;
      }

  iface = KV_PARENT_MANAGER_GET_IFACE (self);
  if (iface->pin == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "%s does not implement pin", G_OBJECT_TYPE_NAME (self));
      return NULL;
    }

  lease = iface->pin (self, keys, n_keys, &local_error);
  if (lease != NULL)
    {
      if (local_error != NULL)
        {
          g_debug ("%s.pin returned a lease but set an error, ignored: %s",
                   G_OBJECT_TYPE_NAME (self), local_error->message);
          g_error_free (local_error);
        }
      return lease;
    }

  if (local_error == NULL)
    local_error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                               "%s.pin failed without setting an error",
                               G_OBJECT_TYPE_NAME (self));
  g_propagate_error (error, local_error);
  return NULL;
}
