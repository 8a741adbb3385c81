/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-config-test-tier.h"

static GPtrArray *shutdown_log;


struct _KvConfigTestTier
{
  KvSecondaryTier  parent_instance;
  guint64         max_size;
  guint           n_threads;
  gint            offset;
  gdouble         ratio;
  char           *label;
  gboolean        verify;
  char          **hosts;
  GFileCreateFlags create_flags;
  gboolean        fail_start;
};

enum {
  PROP_0,
  PROP_MAX_SIZE,
  PROP_N_THREADS,
  PROP_OFFSET,
  PROP_RATIO,
  PROP_LABEL,
  PROP_VERIFY,
  PROP_HOSTS,
  PROP_CREATE_FLAGS,
  PROP_FAIL_START,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static guint n_started;       /* (atomic) */

static void kv_config_test_tier_initable_iface_init (GInitableIface *iface);
static void kv_config_test_tier_configurable_iface_init (KvConfigurableInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvConfigTestTier, kv_config_test_tier, KV_TYPE_SECONDARY_TIER,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      kv_config_test_tier_initable_iface_init)
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CONFIGURABLE,
                                                      kv_config_test_tier_configurable_iface_init))

/* What init refuses before it starts anything: shared by check and init. */
static gboolean
kv_config_test_tier_check (KvConfigurable  *configurable,
                        GError         **error)
{
  KvConfigTestTier *self = KV_CONFIG_TEST_TIER (configurable);

  if (self->fail_start)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                   "tier %s refuses to start", self->label);
      return FALSE;
    }
  return TRUE;
}

static void
kv_config_test_tier_configurable_iface_init (KvConfigurableInterface *iface)
{
  iface->check = kv_config_test_tier_check;
}

static gboolean
kv_config_test_tier_initable_init (GInitable     *initable,
                                GCancellable  *cancellable,
                                GError       **error)
{
  if (!kv_config_test_tier_check (KV_CONFIGURABLE (initable), error))
    return FALSE;
  g_atomic_int_inc (&n_started);
  return TRUE;
}

static void
kv_config_test_tier_initable_iface_init (GInitableIface *iface)
{
  iface->init = kv_config_test_tier_initable_init;
}

static KvLookupResult
kv_config_test_tier_lookup (KvSecondaryTier *tier,
                         KvKey           *key,
                         KvRequest       *request)
{
  return KV_LOOKUP_RESULT_MISS;
}

static gboolean
kv_config_test_tier_submit (KvSecondaryTier  *tier,
                         KvTransferJob    *job,
                         GError          **error)
{
  g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (job), TRUE);

  kv_secondary_tier_complete_job (tier, result);
  return TRUE;
}

static KvOffloadPolicy
kv_config_test_tier_on_new_request (KvSecondaryTier *tier,
                                 KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

static gboolean
kv_config_test_tier_drain_jobs (KvSecondaryTier  *tier,
                             GError          **error)
{
  return TRUE;
}

static gboolean
kv_config_test_tier_shutdown (KvSecondaryTier  *tier,
                           GError          **error)
{
  if (shutdown_log != NULL)
    g_ptr_array_add (shutdown_log, g_strdup (KV_CONFIG_TEST_TIER (tier)->label));
  return TRUE;
}

static void
kv_config_test_tier_finalize (GObject *object)
{
  KvConfigTestTier *self = KV_CONFIG_TEST_TIER (object);

  g_free (self->label);
  g_strfreev (self->hosts);
  G_OBJECT_CLASS (kv_config_test_tier_parent_class)->finalize (object);
}

static void
kv_config_test_tier_get_property (GObject    *object,
                               guint       prop_id,
                               GValue     *value,
                               GParamSpec *pspec)
{
  KvConfigTestTier *self = KV_CONFIG_TEST_TIER (object);

  switch (prop_id)
    {
    case PROP_MAX_SIZE: g_value_set_uint64 (value, self->max_size); break;
    case PROP_N_THREADS: g_value_set_uint (value, self->n_threads); break;
    case PROP_OFFSET: g_value_set_int (value, self->offset); break;
    case PROP_RATIO: g_value_set_double (value, self->ratio); break;
    case PROP_LABEL: g_value_set_string (value, self->label); break;
    case PROP_VERIFY: g_value_set_boolean (value, self->verify); break;
    case PROP_HOSTS: g_value_set_boxed (value, self->hosts); break;
    case PROP_CREATE_FLAGS: g_value_set_flags (value, self->create_flags); break;
    case PROP_FAIL_START: g_value_set_boolean (value, self->fail_start); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_config_test_tier_set_property (GObject      *object,
                               guint         prop_id,
                               const GValue *value,
                               GParamSpec   *pspec)
{
  KvConfigTestTier *self = KV_CONFIG_TEST_TIER (object);

  switch (prop_id)
    {
    case PROP_MAX_SIZE: self->max_size = g_value_get_uint64 (value); break;
    case PROP_N_THREADS: self->n_threads = g_value_get_uint (value); break;
    case PROP_OFFSET: self->offset = g_value_get_int (value); break;
    case PROP_RATIO: self->ratio = g_value_get_double (value); break;
    case PROP_LABEL: g_free (self->label); self->label = g_value_dup_string (value); break;
    case PROP_VERIFY: self->verify = g_value_get_boolean (value); break;
    case PROP_HOSTS: g_strfreev (self->hosts); self->hosts = g_value_dup_boxed (value); break;
    case PROP_CREATE_FLAGS: self->create_flags = g_value_get_flags (value); break;
    case PROP_FAIL_START: self->fail_start = g_value_get_boolean (value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_config_test_tier_class_init (KvConfigTestTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);
  GParamFlags flags = G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS;

  object_class->finalize = kv_config_test_tier_finalize;
  object_class->get_property = kv_config_test_tier_get_property;
  object_class->set_property = kv_config_test_tier_set_property;
  tier_class->lookup = kv_config_test_tier_lookup;
  tier_class->submit_store = kv_config_test_tier_submit;
  tier_class->submit_load = kv_config_test_tier_submit;
  tier_class->on_new_request = kv_config_test_tier_on_new_request;
  tier_class->drain_jobs = kv_config_test_tier_drain_jobs;
  tier_class->shutdown = kv_config_test_tier_shutdown;

  properties[PROP_MAX_SIZE] = g_param_spec_uint64 ("max-size", NULL, NULL,
                                                   0, G_MAXUINT64, 0, flags);
  properties[PROP_N_THREADS] = g_param_spec_uint ("n-threads", NULL, NULL, 1, 64, 4, flags);
  properties[PROP_OFFSET] = g_param_spec_int ("offset", NULL, NULL, -10, 10, 0, flags);
  properties[PROP_RATIO] = g_param_spec_double ("ratio", NULL, NULL, 0.0, 1.0, 0.5, flags);
  properties[PROP_LABEL] = g_param_spec_string ("label", NULL, NULL, NULL, flags);
  properties[PROP_VERIFY] = g_param_spec_boolean ("verify", NULL, NULL, FALSE, flags);
  properties[PROP_HOSTS] = g_param_spec_boxed ("hosts", NULL, NULL, G_TYPE_STRV, flags);
  properties[PROP_CREATE_FLAGS] = g_param_spec_flags ("create-flags", NULL, NULL,
                                                      G_TYPE_FILE_CREATE_FLAGS,
                                                      G_FILE_CREATE_NONE, flags);
  properties[PROP_FAIL_START] = g_param_spec_boolean ("fail-start", NULL, NULL, FALSE, flags);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_config_test_tier_init (KvConfigTestTier *self)
{
  self->n_threads = 4;
  self->ratio = 0.5;
}

guint
kv_config_test_tier_get_n_started (void)
{
  return (guint) g_atomic_int_get (&n_started);
}

void
kv_config_test_tier_reset_n_started (void)
{
  g_atomic_int_set (&n_started, 0);
}

void
kv_config_test_tier_set_shutdown_log (GPtrArray *log)
{
  shutdown_log = log;
}
