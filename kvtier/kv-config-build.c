/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-config-build-private.h"

#include "kv-config-schema-private.h"
#include "kv-config-value-private.h"
#include "kv-configurable.h"
#include "kv-drop-store-policy.h"
#include "kv-enums.h"
#include "kv-ema-backpressure-detector.h"
#include "kv-secondary-tier.h"
#include "kv-throttled-drop-policy.h"
#include "kv-tier-registry-private.h"

/* ------------------------------------------------------------------------ */
/* Construct properties */

/* The names and values an object is constructed with. */
typedef struct
{
  GPtrArray *names;   /* static or interned strings */
  GArray    *values;  /* (element-type GValue) */
} Properties;

static void
properties_init (Properties *props)
{
  props->names = g_ptr_array_new ();
  props->values = g_array_new (FALSE, TRUE, sizeof (GValue));
  g_array_set_clear_func (props->values, (GDestroyNotify) g_value_unset);
}

static void
properties_clear (Properties *props)
{
  g_clear_pointer (&props->names, g_ptr_array_unref);
  g_clear_pointer (&props->values, g_array_unref);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Properties, properties_clear)

/* Appends property @name and returns its value, initialized to @type. */
static GValue *
properties_add (Properties *props,
                const char *name,
                GType       type)
{
  g_ptr_array_add (props->names, (gpointer) name);
  g_array_set_size (props->values, props->values->len + 1);
  return g_value_init (&g_array_index (props->values, GValue, props->values->len - 1), type);
}

/* Appends the properties of @owner that @section's keys set, but
 * @except (a property set otherwise). */
static void
properties_add_entries (Properties            *props,
                        const KvConfigSection *section,
                        KvConfigTarget         target,
                        GType                  owner,
                        const char            *except)
{
  for (guint i = 0; i < section->entries->len; i++)
    {
      const KvConfigEntry *entry = g_ptr_array_index (section->entries, i);

      if (entry->target != target || entry->owner != owner ||
          g_strcmp0 (entry->pspec->name, except) == 0)
        continue;
      g_value_copy (&entry->value, properties_add (props, entry->pspec->name,
                                                   G_VALUE_TYPE (&entry->value)));
    }
}

static gboolean
has_property (Properties *props,
              const char *name)
{
  for (guint i = 0; i < props->names->len; i++)
    if (g_str_equal (g_ptr_array_index (props->names, i), name))
      return TRUE;
  return FALSE;
}

static GObject *
properties_new_object (Properties *props,
                       GType       type)
{
  return g_object_new_with_properties (type, props->names->len,
                                       (const char **) props->names->pdata,
                                       (const GValue *) props->values->data);
}

/* Starts @object (building) or only checks it (@dry); consumes @object on
 * failure. */
static GObject *
start_or_check (GObject  *object,
                gboolean  dry,
                GError  **error)
{
  if (dry)
    {
      if (KV_IS_CONFIGURABLE (object) && !kv_configurable_check (KV_CONFIGURABLE (object), error))
        g_clear_object (&object);
    }
  else if (G_IS_INITABLE (object) && !g_initable_init (G_INITABLE (object), NULL, error))
    g_clear_object (&object);
  return object;
}

/* ------------------------------------------------------------------------ */
/* Backpressure detectors */

static gboolean
wants_detector (const KvConfigSection *section)
{
  if (section->kind != KV_CONFIG_SECTION_TIER)
    return FALSE;
  if (kv_config_section_find_entry (section, "backpressure") != NULL)
    return kv_config_section_get_enum (section, "backpressure",
                                       KV_CONFIG_BACKPRESSURE_NONE) == KV_CONFIG_BACKPRESSURE_EMA;
  /* backpressure-* keys alone ask for the EMA detector. */
  for (guint i = 0; i < section->entries->len; i++)
    {
      const KvConfigEntry *entry = g_ptr_array_index (section->entries, i);

      if (entry->target == KV_CONFIG_TARGET_DETECTOR ||
          entry->target == KV_CONFIG_TARGET_BP_POLICY ||
          entry->target == KV_CONFIG_TARGET_BP_RAMP)
        return TRUE;
    }
  return FALSE;
}

/* Builds the tier's detector from the section; NULL without an error when
 * the tier has none. A detector only computes: checking builds it too. */
KvBackpressureDetector *
kv_config_build_detector (const KvConfigSection  *section,
                          GError                **error)
{
  g_auto(Properties) props = { 0 };
  g_autoptr(KvBackpressurePolicy) policy = NULL;
  KvLocality locality = KV_LOCALITY_UNSPECIFIED;
  KvConfigEntry *entry;
  gdouble high, low;

  if (!wants_detector (section))
    return NULL;

  properties_init (&props);
  properties_add_entries (&props, section, KV_CONFIG_TARGET_DETECTOR,
                          KV_TYPE_EMA_BACKPRESSURE_DETECTOR, NULL);

  /* Water marks not given come from the reference presets for the tier's
   * type and locality. */
  entry = kv_config_section_find_entry (section, "locality");
  if (entry != NULL && entry->target == KV_CONFIG_TARGET_PROPERTY)
    locality = g_value_get_enum (&entry->value);
  kv_ema_backpressure_detector_get_default_config (section->type_name, locality, &high, &low);
  if (!has_property (&props, "high-water-s"))
    g_value_set_double (properties_add (&props, "high-water-s", G_TYPE_DOUBLE), high);
  if (!has_property (&props, "low-water-s"))
    g_value_set_double (properties_add (&props, "low-water-s", G_TYPE_DOUBLE), low);

  if (kv_config_section_get_enum (section, "backpressure-policy",
                                  KV_CONFIG_BP_POLICY_THROTTLED) == KV_CONFIG_BP_POLICY_DROP)
    policy = KV_BACKPRESSURE_POLICY (kv_drop_store_policy_new ());
  else
    {
      KvConfigEntry *ramp = kv_config_section_find_entry (section, "backpressure-ramp-factor");

      policy = KV_BACKPRESSURE_POLICY (kv_throttled_drop_policy_new (
        ramp != NULL ? g_value_get_double (&ramp->value) : 2.0));
    }
  g_value_set_object (properties_add (&props, "policy", KV_TYPE_BACKPRESSURE_POLICY), policy);

  return KV_BACKPRESSURE_DETECTOR (start_or_check (properties_new_object (
                                     &props, KV_TYPE_EMA_BACKPRESSURE_DETECTOR),
                                   FALSE, error));
}

/* ------------------------------------------------------------------------ */
/* The primary tier */

/* The slot count and size of `[primary]`, refused as building refuses
 * them. */
static gboolean
primary_geometry (const KvConfigDocument  *document,
                  guint                   *out_n_slots,
                  guint64                 *out_slot_size,
                  GError                 **error)
{
  guint64 size = kv_config_document_get_primary_size (document);
  guint64 slot_size = kv_config_document_get_slot_size (document);
  guint64 n_slots = size / slot_size;
  KvConfigLocation loc = { kv_config_document_get_origin (document), document->primary->line };

  if (n_slots == 0 || n_slots > G_MAXUINT32)
    {
      g_autofree char *s = kv_config_value_format_size (size);
      g_autofree char *ss = kv_config_value_format_size (slot_size);

      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, document->primary, "size",
                           "%s makes %" G_GUINT64_FORMAT " slots of %s (1 to %u accepted)",
                           s, n_slots, ss, G_MAXUINT32);
      return FALSE;
    }
  *out_n_slots = (guint) n_slots;
  *out_slot_size = slot_size;
  return TRUE;
}

/* `file` (the buffer's path) maps a shared file; `shared` makes a memfd. */
static KvHostBufferBacking
primary_backing (const KvConfigDocument *document)
{
  KvConfigEntry *file = kv_config_section_find_entry (document->primary, "file");
  KvConfigEntry *shared = kv_config_section_find_entry (document->primary, "shared");

  if (file != NULL && g_value_get_string (&file->value) != NULL &&
      *g_value_get_string (&file->value) != '\0')
    return KV_HOST_BUFFER_BACKING_FILE;
  if (shared != NULL && g_value_get_boolean (&shared->value))
    return KV_HOST_BUFFER_BACKING_MEMFD;
  return KV_HOST_BUFFER_BACKING_ANONYMOUS;
}

/* The primary tier's buffer with every KvHostBuffer property `[primary]`
 * sets; mapped when building, only constructed when checking (tiers and
 * devices read its geometry at construction). */
static KvHostBuffer *
primary_buffer (const KvConfigDocument  *document,
                gboolean                 dry,
                GError                 **error)
{
  g_auto(Properties) props = { 0 };
  guint64 slot_size;
  guint n_slots;

  if (!primary_geometry (document, &n_slots, &slot_size, error))
    return NULL;

  properties_init (&props);
  g_value_set_uint (properties_add (&props, "n-slots", G_TYPE_UINT), n_slots);
  g_value_set_uint64 (properties_add (&props, "slot-size", G_TYPE_UINT64), slot_size);
  g_value_set_enum (properties_add (&props, "backing", KV_TYPE_HOST_BUFFER_BACKING),
                    primary_backing (document));
  properties_add_entries (&props, document->primary, KV_CONFIG_TARGET_PROPERTY,
                          KV_TYPE_HOST_BUFFER, "slot-size");

  return KV_HOST_BUFFER (start_or_check (properties_new_object (&props, KV_TYPE_HOST_BUFFER),
                                         dry, error));
}

KvPrimaryTier *
kv_config_build_primary (const KvConfigDocument  *document,
                         GError                 **error)
{
  g_autoptr(KvHostBuffer) buffer = NULL;
  g_autoptr(KvCachePolicy) policy = NULL;
  g_auto(Properties) props = { 0 };
  KvConfigEntry *entry;

  buffer = primary_buffer (document, FALSE, error);
  if (buffer == NULL)
    return NULL;

  /* The policy by name; a primary tier sizes an ARC policy to its slots. */
  entry = kv_config_section_find_entry (document->primary, "policy");
  if (entry != NULL)
    {
      g_autofree char *name = kv_config_value_to_string (entry->pspec, &entry->value);

      policy = kv_cache_policy_new_for_name (name, error);
      if (policy == NULL)
        return NULL;
    }

  properties_init (&props);
  g_value_set_object (properties_add (&props, "buffer", KV_TYPE_HOST_BUFFER), buffer);
  g_value_set_object (properties_add (&props, "policy", KV_TYPE_CACHE_POLICY), policy);
  properties_add_entries (&props, document->primary, KV_CONFIG_TARGET_PROPERTY,
                          KV_TYPE_PRIMARY_TIER, NULL);
  return KV_PRIMARY_TIER (start_or_check (properties_new_object (&props, KV_TYPE_PRIMARY_TIER),
                                          FALSE, error));
}

/* ------------------------------------------------------------------------ */
/* Tiers and the device */

/* Constructs the object of a `[device]` or `[tier NAME]` section with its
 * properties. Building initializes it ([iface@Gio.Initable]); checking
 * (@dry) runs only its [iface@Kv.Configurable] check. Both construct the
 * same object with the same properties, so a check refuses what building
 * would. */
static GObject *
construct_section (const KvConfigDocument  *document,
                   const KvConfigSection   *section,
                   KvHostBuffer            *buffer,
                   KvBackpressureDetector  *detector,
                   gboolean                 dry,
                   GError                 **error)
{
  gboolean device = section->kind == KV_CONFIG_SECTION_DEVICE;
  g_auto(Properties) props = { 0 };
  g_autoptr(GMainContext) completion_context = NULL;
  GType type;

  type = device
    ? kv_tier_registry_lookup_device_type (document->registry, section->type_name, error)
    : kv_tier_registry_lookup_tier_type (document->registry, section->type_name, error);
  if (type == G_TYPE_INVALID)
    return NULL;

  properties_init (&props);
  g_value_set_object (properties_add (&props, "primary", KV_TYPE_HOST_BUFFER), buffer);
  if (!device)
    {
      g_value_set_string (properties_add (&props, "tier-type", G_TYPE_STRING), section->type_name);
      /* a JavaScript tier module's jobs complete on its main context */
      completion_context = kv_tier_registry_dup_completion_context (document->registry,
                                                                    section->type_name);
      if (completion_context != NULL)
        g_value_set_boxed (properties_add (&props, "completion-context", G_TYPE_MAIN_CONTEXT),
                           completion_context);
    }
  if (detector != NULL)
    g_value_set_object (properties_add (&props, "backpressure-detector",
                                        KV_TYPE_BACKPRESSURE_DETECTOR), detector);
  properties_add_entries (&props, section, KV_CONFIG_TARGET_PROPERTY, section->type, NULL);

  return start_or_check (properties_new_object (&props, type), dry, error);
}

static KvSecondaryTier *
construct_tier (const KvConfigDocument  *document,
                const KvConfigSection   *section,
                KvHostBuffer            *buffer,
                gboolean                 dry,
                GError                 **error)
{
  g_autoptr(KvBackpressureDetector) detector = NULL;
  g_autoptr(GError) local_error = NULL;
  GObject *tier = NULL;
  KvConfigSection *merged;

  /* the tier's backpressure keys over those of [backpressure] */
  merged = kv_config_section_merge_backpressure (section, document->backpressure);
  detector = kv_config_build_detector (merged, &local_error);
  kv_config_section_free_merged (merged);
  if (local_error == NULL)
    tier = construct_section (document, section, buffer, detector, dry, &local_error);
  if (tier == NULL)
    {
      KvConfigLocation loc = { kv_config_document_get_origin (document), section->line };

      kv_config_set_error (error, KV_CONFIG_ERROR_FAILED, &loc, section, NULL,
                           "cannot create the tier: %s", local_error->message);
      return NULL;
    }
  return KV_SECONDARY_TIER (tier);
}

static KvDevice *
construct_device (const KvConfigDocument  *document,
                  KvHostBuffer            *buffer,
                  gboolean                 dry,
                  GError                 **error)
{
  g_autoptr(GError) local_error = NULL;
  GObject *device;

  device = construct_section (document, document->device, buffer, NULL, dry, &local_error);
  if (device == NULL)
    {
      KvConfigLocation loc = { kv_config_document_get_origin (document), document->device->line };

      kv_config_set_error (error, KV_CONFIG_ERROR_FAILED, &loc, document->device, NULL,
                           "cannot create the device: %s", local_error->message);
      return NULL;
    }
  return KV_DEVICE (device);
}

gboolean
kv_config_build_check (const KvConfigDocument  *document,
                       GError                 **error)
{
  g_autoptr(KvHostBuffer) buffer = primary_buffer (document, TRUE, error);

  if (buffer == NULL)
    return FALSE;
  for (guint i = 0; i < document->tiers->len; i++)
    {
      g_autoptr(KvSecondaryTier) tier = construct_tier (document,
                                                        g_ptr_array_index (document->tiers, i),
                                                        buffer, TRUE, error);

      if (tier == NULL)
        return FALSE;
    }
  if (document->device != NULL)
    {
      g_autoptr(KvDevice) device = construct_device (document, buffer, TRUE, error);

      if (device == NULL)
        return FALSE;
    }
  return TRUE;
}

static void
shut_down_tiers (GPtrArray *created)
{
  for (guint j = created->len; j > 0; j--)
    {
      g_autoptr(GError) shutdown_error = NULL;
      KvSecondaryTier *done = g_ptr_array_index (created, j - 1);

      if (!kv_secondary_tier_shutdown (done, &shutdown_error))
        g_debug ("Shutting down tier #%u after a failed start: %s", j, shutdown_error->message);
    }
}

KvTieringManager *
kv_config_build_manager (const KvConfigDocument  *document,
                         GError                 **error)
{
  g_autoptr(KvPrimaryTier) primary = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(GPtrArray) created = NULL;
  KvHostBuffer *buffer;

  primary = kv_config_build_primary (document, error);
  if (primary == NULL)
    return NULL;
  buffer = kv_primary_tier_get_buffer (primary);
  {
    g_auto(Properties) props = { 0 };

    /* the manager's own [primary] keys, e.g. hit-pending-deadline */
    properties_init (&props);
    g_value_set_object (properties_add (&props, "primary", KV_TYPE_PRIMARY_TIER), primary);
    properties_add_entries (&props, document->primary, KV_CONFIG_TARGET_PROPERTY,
                            KV_TYPE_TIERING_MANAGER, NULL);
    manager = KV_TIERING_MANAGER (properties_new_object (&props, KV_TYPE_TIERING_MANAGER));
  }
  created = g_ptr_array_new_with_free_func (g_object_unref);

  for (guint i = 0; i < document->tiers->len; i++)
    {
      const KvConfigSection *section = g_ptr_array_index (document->tiers, i);
      g_autoptr(KvSecondaryTier) tier = NULL;
      g_autoptr(GError) add_error = NULL;

      tier = construct_tier (document, section, buffer, FALSE, error);
      if (tier == NULL)
        {
          shut_down_tiers (created);
          return NULL;
        }
      /* Shut down with the others on failure, added or not. */
      g_ptr_array_add (created, g_object_ref (tier));
      if (!kv_tiering_manager_add_tier (manager, tier, &add_error))
        {
          KvConfigLocation loc = { kv_config_document_get_origin (document), section->line };

          kv_config_set_error (error, KV_CONFIG_ERROR_FAILED, &loc, section, NULL,
                               "cannot create the tier: %s", add_error->message);
          shut_down_tiers (created);
          return NULL;
        }
      g_debug ("Created secondary tier #%u (%s)", i + 1, section->name);
    }

  return g_steal_pointer (&manager);
}

KvDevice *
kv_config_build_device (const KvConfigDocument  *document,
                        KvHostBuffer            *primary,
                        GError                 **error)
{
  if (document->device == NULL)
    {
      KvConfigLocation loc = { kv_config_document_get_origin (document), 0 };

      kv_config_set_error (error, KV_CONFIG_ERROR_MISSING_KEY, &loc, NULL, NULL,
                           "the configuration has no [device] section");
      return NULL;
    }
  return construct_device (document, primary, FALSE, error);
}
