/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-request.h"

/**
 * KvRequest:
 *
 * The context of one inference request as the tiers see it (vLLM's
 * `ReqContext`): its id, its opaque transfer parameters, the filter that
 * says which secondary tiers it may load from, and per-tier scratch state.
 *
 * The same object is passed to every call made for a request, so tiers may
 * batch work by request identity. Tiers that need something parsed from the
 * transfer parameters parse it once and keep it with
 * [method@Kv.Request.set_state].
 *
 * A request is created and used on the owner thread. Its id, transfer
 * parameters and load filter may be read from any thread once the request
 * is shared (for example by a tier's worker holding a [struct@Kv.TransferJob]),
 * provided the load filter is not replaced meanwhile; the state slots are
 * owner-thread only.
 */
struct _KvRequest
{
  GObject parent_instance;

  char *id;
  GVariant *transfer_params;
  KvTierFilter *load_tier_filter;
  GHashTable *states; /* owner → StateSlot; created on first use */
};

typedef struct
{
  gpointer data;
  GDestroyNotify destroy;
} StateSlot;

enum {
  PROP_0,
  PROP_ID,
  PROP_TRANSFER_PARAMS,
  PROP_LOAD_TIER_FILTER,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (KvRequest, kv_request, G_TYPE_OBJECT)

static void
state_slot_free (gpointer data)
{
  StateSlot *slot = data;

  if (slot->destroy != NULL)
    slot->destroy (slot->data);
  g_free (slot);
}

static void
kv_request_constructed (GObject *object)
{
  KvRequest *self = KV_REQUEST (object);

  G_OBJECT_CLASS (kv_request_parent_class)->constructed (object);

  if (self->id == NULL || self->id[0] == '\0')
    g_critical ("KvRequest needs a non-empty “id”");

  /* The default filter comes from the parameters; an explicit
   * load-tier-filter given to g_object_new() is set after this and wins. */
  if (self->load_tier_filter == NULL)
    {
      g_autoptr(GVariant) tiers = NULL;

      if (self->transfer_params != NULL)
        tiers = g_variant_lookup_value (self->transfer_params, KV_LOAD_TIERS_KEY, NULL);
      self->load_tier_filter = kv_tier_filter_parse_variant (tiers);
    }
}

static void
kv_request_finalize (GObject *object)
{
  KvRequest *self = KV_REQUEST (object);

  g_clear_pointer (&self->states, g_hash_table_unref);
  g_clear_pointer (&self->load_tier_filter, kv_tier_filter_unref);
  g_clear_pointer (&self->transfer_params, g_variant_unref);
  g_clear_pointer (&self->id, g_free);

  G_OBJECT_CLASS (kv_request_parent_class)->finalize (object);
}

static void
kv_request_get_property (GObject    *object,
                         guint       prop_id,
                         GValue     *value,
                         GParamSpec *pspec)
{
  KvRequest *self = KV_REQUEST (object);

  switch (prop_id)
    {
    case PROP_ID:
      g_value_set_string (value, self->id);
      break;
    case PROP_TRANSFER_PARAMS:
      g_value_set_variant (value, self->transfer_params);
      break;
    case PROP_LOAD_TIER_FILTER:
      g_value_set_boxed (value, self->load_tier_filter);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_request_set_property (GObject      *object,
                         guint         prop_id,
                         const GValue *value,
                         GParamSpec   *pspec)
{
  KvRequest *self = KV_REQUEST (object);

  switch (prop_id)
    {
    case PROP_ID:
      self->id = g_value_dup_string (value);
      break;
    case PROP_TRANSFER_PARAMS:
      self->transfer_params = g_value_dup_variant (value);
      break;
    case PROP_LOAD_TIER_FILTER:
      kv_request_set_load_tier_filter (self, g_value_get_boxed (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_request_class_init (KvRequestClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->constructed = kv_request_constructed;
  object_class->finalize = kv_request_finalize;
  object_class->get_property = kv_request_get_property;
  object_class->set_property = kv_request_set_property;

  /**
   * KvRequest:id:
   *
   * The engine's id of the request. Required, not empty.
   */
  properties[PROP_ID] =
    g_param_spec_string ("id", NULL, NULL,
                         NULL,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvRequest:transfer-params:
   *
   * The request's KV transfer parameters (vLLM's `kv_transfer_params`) as a
   * `a{sv}` dictionary, or %NULL. kvtier reads the `kv_load_tiers` entry
   * (%KV_LOAD_TIERS_KEY); tiers may read their own entries.
   */
  properties[PROP_TRANSFER_PARAMS] =
    g_param_spec_variant ("transfer-params", NULL, NULL,
                          G_VARIANT_TYPE_VARDICT, NULL,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvRequest:load-tier-filter:
   *
   * Which secondary tiers the request may load from. Defaults to the filter
   * parsed from the `kv_load_tiers` entry of [property@Kv.Request:transfer-params]
   * (see [func@Kv.TierFilter.parse_variant]), or the allow-all filter.
   * Setting %NULL restores the allow-all filter.
   */
  properties[PROP_LOAD_TIER_FILTER] =
    g_param_spec_boxed ("load-tier-filter", NULL, NULL,
                        KV_TYPE_TIER_FILTER,
                        G_PARAM_READWRITE |
                        G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_request_init (KvRequest *self)
{
}

/**
 * kv_request_new:
 * @id: the engine's id of the request; not empty
 * @transfer_params: (nullable): the request's transfer parameters, an
 *   `a{sv}` dictionary; a floating reference is consumed
 *
 * Creates the context of a request. Its load filter is parsed from the
 * `kv_load_tiers` entry of @transfer_params.
 *
 * Call on the owner thread.
 *
 * Returns: (transfer full): a new request
 */
KvRequest *
kv_request_new (const char *id,
                GVariant   *transfer_params)
{
  g_return_val_if_fail (id != NULL && id[0] != '\0', NULL);
  g_return_val_if_fail (transfer_params == NULL ||
                        g_variant_is_of_type (transfer_params, G_VARIANT_TYPE_VARDICT), NULL);

  return g_object_new (KV_TYPE_REQUEST,
                       "id", id,
                       "transfer-params", transfer_params,
                       NULL);
}

/**
 * kv_request_get_id:
 * @self: a request
 *
 * Gets the engine's id of the request.
 *
 * May be called from any thread.
 *
 * Returns: (transfer none): the id
 */
const char *
kv_request_get_id (KvRequest *self)
{
  g_return_val_if_fail (KV_IS_REQUEST (self), NULL);

  return self->id;
}

/**
 * kv_request_get_transfer_params:
 * @self: a request
 *
 * Gets the request's transfer parameters.
 *
 * May be called from any thread.
 *
 * Returns: (transfer none) (nullable): the `a{sv}` parameters, or %NULL
 */
GVariant *
kv_request_get_transfer_params (KvRequest *self)
{
  g_return_val_if_fail (KV_IS_REQUEST (self), NULL);

  return self->transfer_params;
}

/**
 * kv_request_get_load_tier_filter:
 * @self: a request
 *
 * Gets the filter that says which secondary tiers the request may load from.
 *
 * May be called from any thread, unless the filter is being replaced.
 *
 * Returns: (transfer none): the filter
 */
KvTierFilter *
kv_request_get_load_tier_filter (KvRequest *self)
{
  g_return_val_if_fail (KV_IS_REQUEST (self), NULL);

  return self->load_tier_filter;
}

/**
 * kv_request_set_load_tier_filter:
 * @self: a request
 * @filter: (nullable): the new filter, or %NULL for the allow-all filter
 *
 * Replaces the request's load filter, overriding the one parsed from its
 * transfer parameters.
 *
 * Call on the owner thread, before the request is shared with tiers.
 */
void
kv_request_set_load_tier_filter (KvRequest    *self,
                                 KvTierFilter *filter)
{
  g_return_if_fail (KV_IS_REQUEST (self));

  if (filter == NULL)
    filter = kv_tier_filter_get_all ();

  if (filter == self->load_tier_filter)
    return;

  kv_tier_filter_ref (filter);
  g_clear_pointer (&self->load_tier_filter, kv_tier_filter_unref);
  self->load_tier_filter = filter;

  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_LOAD_TIER_FILTER]);
}

/**
 * kv_request_get_state:
 * @self: a request
 * @owner: (not nullable): the owner of the slot, usually a tier
 *
 * Gets the state that @owner stored on this request with
 * [method@Kv.Request.set_state].
 *
 * Owner thread only: state slots are not locked.
 *
 * Returns: (transfer none) (nullable): the state, or %NULL if @owner has none
 */
gpointer
kv_request_get_state (KvRequest     *self,
                      gconstpointer  owner)
{
  StateSlot *slot;

  g_return_val_if_fail (KV_IS_REQUEST (self), NULL);
  g_return_val_if_fail (owner != NULL, NULL);

  if (self->states == NULL)
    return NULL;

  slot = g_hash_table_lookup (self->states, owner);

  return slot != NULL ? slot->data : NULL;
}

/**
 * kv_request_set_state:
 * @self: a request
 * @owner: (not nullable): the owner of the slot, usually a tier
 * @state: (nullable): the state to store, or %NULL to clear the slot
 * @destroy: (nullable): called on @state when it is replaced or cleared, or
 *   when the request is finalized
 *
 * Stores per-request scratch state for @owner, so that a tier can parse the
 * request's transfer parameters once (vLLM's `ReqContext.set_state`). Each
 * owner has one slot. Storing a new value calls the old value's @destroy;
 * storing the value already there only updates its @destroy.
 *
 * Owner thread only: state slots are not locked, and @destroy runs on the
 * thread that replaces the state or drops the last reference.
 */
void
kv_request_set_state (KvRequest      *self,
                      gconstpointer   owner,
                      gpointer        state,
                      GDestroyNotify  destroy)
{
  StateSlot *slot;

  g_return_if_fail (KV_IS_REQUEST (self));
  g_return_if_fail (owner != NULL);

  if (state == NULL)
    {
      if (self->states != NULL)
        g_hash_table_remove (self->states, owner);
      return;
    }

  if (self->states == NULL)
    self->states = g_hash_table_new_full (NULL, NULL, NULL, state_slot_free);

  slot = g_hash_table_lookup (self->states, owner);
  if (slot != NULL && slot->data == state)
    {
      slot->destroy = destroy;
      return;
    }

  slot = g_new (StateSlot, 1);
  slot->data = state;
  slot->destroy = destroy;
  /* Frees the previous slot, calling its destroy. */
  g_hash_table_insert (self->states, (gpointer) owner, slot);
}
