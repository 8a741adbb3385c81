/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <gmodule.h>
#include <kvtier.h>

/*
 * Test plugins for test-tier-registry, one source built five ways:
 *   TEST_PLUGIN_GOOD   registers the tier type "test-good";
 *   TEST_PLUGIN_DUP    registers another class under "test-good";
 *   TEST_PLUGIN_ABI    exports the wrong ABI version and aborts if called;
 *   TEST_PLUGIN_NOREG  exports the ABI version but no register function;
 *   TEST_PLUGIN_NONE   is a module that is no kvtier plugin at all.
 */

#if defined(TEST_PLUGIN_GOOD) || defined(TEST_PLUGIN_DUP)

#ifdef TEST_PLUGIN_GOOD
# define TIER_TYPE_NAME "KvTestGoodTier"
#else
# define TIER_TYPE_NAME "KvTestDupTier"
#endif

typedef struct
{
  KvSecondaryTier parent_instance;
  guint64         max_size;
  char           *label;
  gboolean        verify;
  gdouble         ratio;
  char          **hosts;
} KvTestTier;

typedef struct
{
  KvSecondaryTierClass parent_class;
} KvTestTierClass;

enum {
  PROP_0,
  PROP_MAX_SIZE,
  PROP_LABEL,
  PROP_VERIFY,
  PROP_RATIO,
  PROP_HOSTS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];
static GType kv_test_tier_type;
static gpointer kv_test_tier_parent_class;

static KvLookupResult
kv_test_tier_lookup (KvSecondaryTier *tier,
                     KvKey           *key,
                     KvRequest       *request)
{
  return KV_LOOKUP_RESULT_MISS;
}

static gboolean
kv_test_tier_submit (KvSecondaryTier  *tier,
                     KvTransferJob    *job,
                     GError          **error)
{
  g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (job),
                                                     !kv_transfer_job_is_promotion (job));

  kv_secondary_tier_complete_job (tier, result);
  return TRUE;
}

static KvOffloadPolicy
kv_test_tier_on_new_request (KvSecondaryTier *tier,
                             KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

static gboolean
kv_test_tier_drain_jobs (KvSecondaryTier  *tier,
                         GError          **error)
{
  return TRUE;
}

static void
kv_test_tier_finalize (GObject *object)
{
  KvTestTier *self = (KvTestTier *) object;

  g_free (self->label);
  g_strfreev (self->hosts);
  G_OBJECT_CLASS (kv_test_tier_parent_class)->finalize (object);
}

static void
kv_test_tier_get_property (GObject    *object,
                           guint       prop_id,
                           GValue     *value,
                           GParamSpec *pspec)
{
  KvTestTier *self = (KvTestTier *) object;

  switch (prop_id)
    {
    case PROP_MAX_SIZE: g_value_set_uint64 (value, self->max_size); break;
    case PROP_LABEL: g_value_set_string (value, self->label); break;
    case PROP_VERIFY: g_value_set_boolean (value, self->verify); break;
    case PROP_RATIO: g_value_set_double (value, self->ratio); break;
    case PROP_HOSTS: g_value_set_boxed (value, self->hosts); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_test_tier_set_property (GObject      *object,
                           guint         prop_id,
                           const GValue *value,
                           GParamSpec   *pspec)
{
  KvTestTier *self = (KvTestTier *) object;

  switch (prop_id)
    {
    case PROP_MAX_SIZE: self->max_size = g_value_get_uint64 (value); break;
    case PROP_LABEL: g_free (self->label); self->label = g_value_dup_string (value); break;
    case PROP_VERIFY: self->verify = g_value_get_boolean (value); break;
    case PROP_RATIO: self->ratio = g_value_get_double (value); break;
    case PROP_HOSTS: g_strfreev (self->hosts); self->hosts = g_value_dup_boxed (value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_test_tier_class_init (gpointer klass,
                         gpointer class_data)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);
  GParamFlags flags = G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS;

  kv_test_tier_parent_class = g_type_class_peek_parent (klass);
  object_class->finalize = kv_test_tier_finalize;
  object_class->get_property = kv_test_tier_get_property;
  object_class->set_property = kv_test_tier_set_property;
  tier_class->lookup = kv_test_tier_lookup;
  tier_class->submit_store = kv_test_tier_submit;
  tier_class->submit_load = kv_test_tier_submit;
  tier_class->on_new_request = kv_test_tier_on_new_request;
  tier_class->drain_jobs = kv_test_tier_drain_jobs;

  properties[PROP_MAX_SIZE] = g_param_spec_uint64 ("max-size", NULL, "Bytes the tier may hold",
                                                   0, G_MAXUINT64, 1 << 30, flags);
  properties[PROP_LABEL] = g_param_spec_string ("label", NULL, "A label", "none", flags);
  properties[PROP_VERIFY] = g_param_spec_boolean ("verify", NULL, "Verify", FALSE, flags);
  properties[PROP_RATIO] = g_param_spec_double ("ratio", NULL, "A ratio", 0.0, 1.0, 0.5, flags);
  properties[PROP_HOSTS] = g_param_spec_boxed ("hosts", NULL, "Hosts", G_TYPE_STRV, flags);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_test_tier_class_finalize (gpointer klass,
                             gpointer class_data)
{
}

static void
kv_test_tier_init (GTypeInstance *instance,
                   gpointer       klass)
{
}

static void
kv_test_plugin_register (KvTierRegistry *registry,
                         GTypeModule    *module)
{
  const GTypeInfo info = {
    sizeof (KvTestTierClass), NULL, NULL,
    kv_test_tier_class_init, kv_test_tier_class_finalize, NULL,
    sizeof (KvTestTier), 0, kv_test_tier_init, NULL
  };

  kv_test_tier_type = g_type_module_register_type (module, KV_TYPE_SECONDARY_TIER,
                                                   TIER_TYPE_NAME, &info, 0);
  /* A failure (the duplicate plugin) is reported by the registry's
   * load_plugin(); nothing to do here. */
  (void) kv_tier_registry_register_tier_type (registry, "test-good", kv_test_tier_type, NULL);
}

KV_PLUGIN_DEFINE (kv_test_plugin_register);

/* The broken plugins below spell their exports out: KV_PLUGIN_DEFINE()
 * cannot get them wrong. */
#elif defined(TEST_PLUGIN_ABI)

G_MODULE_EXPORT const guint32 kvtier_plugin_abi_version = KV_PLUGIN_ABI_VERSION + 1;

G_MODULE_EXPORT void kvtier_plugin_register (KvTierRegistry *registry,
                                             GTypeModule    *module);

G_MODULE_EXPORT void
kvtier_plugin_register (KvTierRegistry *registry,
                        GTypeModule    *module)
{
  g_error ("a plugin of the wrong ABI must never be called");
}

#elif defined(TEST_PLUGIN_NOREG)

G_MODULE_EXPORT const guint32 kvtier_plugin_abi_version = KV_PLUGIN_ABI_VERSION;

#elif defined(TEST_PLUGIN_NONE)

G_MODULE_EXPORT int kvtier_test_not_a_plugin (void);

G_MODULE_EXPORT int
kvtier_test_not_a_plugin (void)
{
  return 42;
}

#endif
