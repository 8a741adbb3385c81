/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-config-schema-private.h"

#include <string.h>

#include "kv-config-value-private.h"
#include "kv-ema-backpressure-detector.h"
#include "kv-host-buffer.h"
#include "kv-primary-tier.h"
#include "kv-throttled-drop-policy.h"
#include "kv-tiering-manager.h"

#define KIB G_GUINT64_CONSTANT (1024)
#define PSPEC_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS)

static GType
cache_policy_choice_get_type (void)
{
  static gsize type;
  static const GEnumValue values[] = {
    { KV_CONFIG_POLICY_LRU, "KV_CONFIG_POLICY_LRU", "lru" },
    { KV_CONFIG_POLICY_ARC, "KV_CONFIG_POLICY_ARC", "arc" },
    { 0, NULL, NULL }
  };

  if (g_once_init_enter (&type))
    g_once_init_leave (&type, g_enum_register_static ("KvConfigCachePolicyChoice", values));
  return type;
}

static GType
backpressure_choice_get_type (void)
{
  static gsize type;
  static const GEnumValue values[] = {
    { KV_CONFIG_BACKPRESSURE_NONE, "KV_CONFIG_BACKPRESSURE_NONE", "none" },
    { KV_CONFIG_BACKPRESSURE_EMA, "KV_CONFIG_BACKPRESSURE_EMA", "ema" },
    { 0, NULL, NULL }
  };

  if (g_once_init_enter (&type))
    g_once_init_leave (&type, g_enum_register_static ("KvConfigBackpressureChoice", values));
  return type;
}

static GType
backpressure_policy_choice_get_type (void)
{
  static gsize type;
  static const GEnumValue values[] = {
    { KV_CONFIG_BP_POLICY_THROTTLED, "KV_CONFIG_BP_POLICY_THROTTLED", "throttled" },
    { KV_CONFIG_BP_POLICY_DROP, "KV_CONFIG_BP_POLICY_DROP", "drop" },
    { 0, NULL, NULL }
  };

  if (g_once_init_enter (&type))
    g_once_init_leave (&type, g_enum_register_static ("KvConfigBackpressurePolicyChoice", values));
  return type;
}

/* ------------------------------------------------------------------------ */
/* [primary] */

/* The [primary] keys, in the order errors list them. A key that sets a
 * property of the host buffer or the primary tier parses with that
 * property's GParamSpec (type, range, choices); the configuration adds
 * only what the objects leave to whoever creates them: the size of the
 * whole tier (the buffer's n-slots is size / slot-size), a default slot
 * size, the policy by name and `shared` for a memfd backing. Every other
 * configurable property of the two classes is a key of its own name. */
typedef struct
{
  const char     *key;
  KvConfigTarget  target;
  GType         (*owner) (void);
  const char     *property;
} PrimaryKey;

static const PrimaryKey primary_keys[] = {
  { "size", KV_CONFIG_TARGET_PRIMARY_SIZE, NULL, NULL },
  { "slot-size", KV_CONFIG_TARGET_PROPERTY, kv_host_buffer_get_type, "slot-size" },
  { "policy", KV_CONFIG_TARGET_POLICY, NULL, NULL },
  { "shared", KV_CONFIG_TARGET_SHARED, NULL, NULL },
  { "file", KV_CONFIG_TARGET_PROPERTY, kv_host_buffer_get_type, "path" },
  { "events", KV_CONFIG_TARGET_PROPERTY, kv_primary_tier_get_type, "enable-events" },
};

/* Properties the configuration derives from the keys above, or that only
 * a running process can give (a descriptor). */
static const char * const derived_properties[] = { "n-slots", "backing", "fd", NULL };

typedef struct
{
  GParamSpec *primary[G_N_ELEMENTS (primary_keys)];
  GParamSpec *backpressure;
  GParamSpec *backpressure_policy;
} Schema;

static GParamSpec *
object_pspec (GType       type,
              const char *name)
{
  g_autoptr(GTypeClass) klass = g_type_class_ref (type);
  GParamSpec *pspec = g_object_class_find_property (G_OBJECT_CLASS (klass), name);

  g_assert (pspec != NULL);
  return pspec;
}

static const Schema *
get_schema (void)
{
  static gsize initialized;
  static Schema schema;

  if (g_once_init_enter (&initialized))
    {
      GParamSpec *buffer_slot_size = object_pspec (KV_TYPE_HOST_BUFFER, "slot-size");

      schema.primary[0] =
        g_param_spec_uint64 ("size", NULL,
                             "Bytes of primary memory; whole slots of slot-size",
                             4096, G_MAXUINT64, 1024 * 1024 * KIB, PSPEC_FLAGS);
      /* The buffer's slot-size with the configuration's default; a slot is
       * at least a page. */
      schema.primary[1] =
        g_param_spec_uint64 (buffer_slot_size->name, NULL,
                             "Bytes of one slot, i.e. of one chunk; a multiple of 4096",
                             MAX (4096, G_PARAM_SPEC_UINT64 (buffer_slot_size)->minimum),
                             MIN (G_MAXUINT32 * KIB, G_PARAM_SPEC_UINT64 (buffer_slot_size)->maximum),
                             2 * 1024 * KIB, PSPEC_FLAGS);
      schema.primary[2] =
        g_param_spec_enum ("policy", NULL, "Eviction policy",
                           cache_policy_choice_get_type (), KV_CONFIG_POLICY_LRU, PSPEC_FLAGS);
      schema.primary[3] =
        g_param_spec_boolean ("shared", NULL,
                              "Back the slots with a memfd another process can map",
                              FALSE, PSPEC_FLAGS);
      schema.primary[4] = object_pspec (KV_TYPE_HOST_BUFFER, "path");
      schema.primary[5] = object_pspec (KV_TYPE_PRIMARY_TIER, "enable-events");
      for (guint i = 0; i < G_N_ELEMENTS (schema.primary); i++)
        g_param_spec_ref_sink (schema.primary[i]);

      schema.backpressure =
        g_param_spec_ref_sink (g_param_spec_enum ("backpressure", NULL,
                                                  "Backpressure detector of the tier",
                                                  backpressure_choice_get_type (),
                                                  KV_CONFIG_BACKPRESSURE_NONE, PSPEC_FLAGS));
      schema.backpressure_policy =
        g_param_spec_ref_sink (g_param_spec_enum ("backpressure-policy", NULL,
                                                  "What the detector drops under pressure",
                                                  backpressure_policy_choice_get_type (),
                                                  KV_CONFIG_BP_POLICY_THROTTLED, PSPEC_FLAGS));
      g_once_init_leave (&initialized, 1);
    }
  return &schema;
}

GParamSpec *
kv_config_schema_primary_pspec (const char *key)
{
  const Schema *schema = get_schema ();

  for (guint i = 0; i < G_N_ELEMENTS (primary_keys); i++)
    if (g_str_equal (primary_keys[i].key, key))
      return schema->primary[i];
  return NULL;
}

/* Whether @pspec of @type is a [primary] key under its own name. */
static gboolean
is_primary_extra (GType       type,
                  GParamSpec *pspec)
{
  if (!kv_config_value_is_configurable (pspec, type) ||
      g_strv_contains (derived_properties, pspec->name))
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (primary_keys); i++)
    if (primary_keys[i].owner != NULL && primary_keys[i].owner () == type &&
        g_str_equal (primary_keys[i].property, pspec->name))
      return FALSE;
  /* A later key may not hide an earlier one. */
  return kv_config_schema_primary_pspec (pspec->name) == NULL;
}

static GParamSpec *
resolve_primary_key (const char     *key,
                     KvConfigTarget *out_target,
                     GType          *out_owner)
{
  const Schema *schema = get_schema ();
  const GType owners[] = { KV_TYPE_HOST_BUFFER, KV_TYPE_PRIMARY_TIER, KV_TYPE_TIERING_MANAGER };

  for (guint i = 0; i < G_N_ELEMENTS (primary_keys); i++)
    if (g_str_equal (primary_keys[i].key, key))
      {
        *out_target = primary_keys[i].target;
        *out_owner = primary_keys[i].owner != NULL ? primary_keys[i].owner () : G_TYPE_INVALID;
        return schema->primary[i];
      }

  for (guint i = 0; i < G_N_ELEMENTS (owners); i++)
    {
      g_autoptr(GTypeClass) klass = g_type_class_ref (owners[i]);
      GParamSpec *pspec = g_object_class_find_property (G_OBJECT_CLASS (klass), key);

      if (pspec != NULL && g_str_equal (pspec->name, key) && is_primary_extra (owners[i], pspec))
        {
          *out_target = KV_CONFIG_TARGET_PROPERTY;
          *out_owner = owners[i];
          return pspec;
        }
    }
  return NULL;
}

static void
append_primary_keys (GString *s)
{
  const GType owners[] = { KV_TYPE_HOST_BUFFER, KV_TYPE_PRIMARY_TIER, KV_TYPE_TIERING_MANAGER };

  for (guint i = 0; i < G_N_ELEMENTS (primary_keys); i++)
    g_string_append_printf (s, "%s%s", i > 0 ? ", " : "", primary_keys[i].key);
  for (guint i = 0; i < G_N_ELEMENTS (owners); i++)
    {
      g_autoptr(GTypeClass) klass = g_type_class_ref (owners[i]);
      g_autofree GParamSpec **pspecs = NULL;
      guint n_pspecs;

      pspecs = g_object_class_list_properties (G_OBJECT_CLASS (klass), &n_pspecs);
      for (guint p = 0; p < n_pspecs; p++)
        if (is_primary_extra (owners[i], pspecs[p]))
          g_string_append_printf (s, ", %s", pspecs[p]->name);
    }
}

/* ------------------------------------------------------------------------ */
/* Tiers and devices */

static gboolean
is_detector_property (GParamSpec *pspec)
{
  return kv_config_value_is_configurable (pspec, KV_TYPE_EMA_BACKPRESSURE_DETECTOR) &&
         (pspec->flags & (G_PARAM_CONSTRUCT | G_PARAM_CONSTRUCT_ONLY)) != 0;
}

/* A key is a property's canonical name: GObject also finds "max_size" for
 * "max-size", and a section giving both would set one property twice. */
GParamSpec *
kv_config_schema_resolve_key (const KvConfigSection *section,
                              const char            *key,
                              KvConfigTarget        *out_target,
                              GType                 *out_owner)
{
  GParamSpec *pspec;

  *out_target = KV_CONFIG_TARGET_PROPERTY;
  *out_owner = section->type;
  if (section->kind == KV_CONFIG_SECTION_PRIMARY)
    return resolve_primary_key (key, out_target, out_owner);

  /* [backpressure] takes the backpressure keys of a tier, nothing else */
  if (section->kind == KV_CONFIG_SECTION_TIER || section->kind == KV_CONFIG_SECTION_BACKPRESSURE)
    {
      *out_owner = G_TYPE_INVALID;
      if (g_str_equal (key, "backpressure"))
        {
          *out_target = KV_CONFIG_TARGET_BACKPRESSURE;
          return get_schema ()->backpressure;
        }
      if (g_str_equal (key, "backpressure-policy"))
        {
          *out_target = KV_CONFIG_TARGET_BP_POLICY;
          return get_schema ()->backpressure_policy;
        }
      if (g_str_equal (key, "backpressure-ramp-factor"))
        {
          *out_target = KV_CONFIG_TARGET_BP_RAMP;
          *out_owner = KV_TYPE_THROTTLED_DROP_POLICY;
          return object_pspec (KV_TYPE_THROTTLED_DROP_POLICY, "ramp-factor");
        }
      if (g_str_has_prefix (key, KV_CONFIG_BACKPRESSURE_PREFIX))
        {
          g_autoptr(GTypeClass) klass = g_type_class_ref (KV_TYPE_EMA_BACKPRESSURE_DETECTOR);

          pspec = g_object_class_find_property (G_OBJECT_CLASS (klass),
                                                key + strlen (KV_CONFIG_BACKPRESSURE_PREFIX));
          if (pspec != NULL && is_detector_property (pspec) &&
              g_str_equal (pspec->name, key + strlen (KV_CONFIG_BACKPRESSURE_PREFIX)))
            {
              *out_target = KV_CONFIG_TARGET_DETECTOR;
              *out_owner = KV_TYPE_EMA_BACKPRESSURE_DETECTOR;
              return pspec;
            }
          return NULL;
        }
      if (section->kind == KV_CONFIG_SECTION_BACKPRESSURE)
        return NULL;
      *out_owner = section->type;
    }

  {
    g_autoptr(GTypeClass) klass = g_type_class_ref (section->type);

    pspec = g_object_class_find_property (G_OBJECT_CLASS (klass), key);
    if (pspec != NULL && g_str_equal (pspec->name, key) &&
        kv_config_value_is_configurable (pspec, section->type))
      return pspec;
  }
  return NULL;
}

char *
kv_config_schema_accepted_keys (const KvConfigSection *section)
{
  GString *s = g_string_new (NULL);
  g_autofree GParamSpec **pspecs = NULL;
  guint n_pspecs = 0;

  if (section->kind == KV_CONFIG_SECTION_PRIMARY)
    {
      append_primary_keys (s);
      return g_string_free (s, FALSE);
    }

  if (section->kind != KV_CONFIG_SECTION_BACKPRESSURE)
    {
      g_autoptr(GTypeClass) klass = g_type_class_ref (section->type);

      g_string_append (s, section->kind == KV_CONFIG_SECTION_TIER ? "type, module" : "type");
      pspecs = g_object_class_list_properties (G_OBJECT_CLASS (klass), &n_pspecs);
      for (guint i = 0; i < n_pspecs; i++)
        if (kv_config_value_is_configurable (pspecs[i], section->type))
          g_string_append_printf (s, ", %s", pspecs[i]->name);
    }

  if (section->kind != KV_CONFIG_SECTION_DEVICE)
    {
      g_autoptr(GTypeClass) klass = g_type_class_ref (KV_TYPE_EMA_BACKPRESSURE_DETECTOR);
      g_autofree GParamSpec **bp = NULL;
      guint n_bp;

      g_string_append (s, s->len > 0 ? ", " : "");
      g_string_append (s, "backpressure, backpressure-policy, backpressure-ramp-factor");
      bp = g_object_class_list_properties (G_OBJECT_CLASS (klass), &n_bp);
      for (guint i = 0; i < n_bp; i++)
        if (is_detector_property (bp[i]))
          g_string_append_printf (s, ", " KV_CONFIG_BACKPRESSURE_PREFIX "%s", bp[i]->name);
    }
  return g_string_free (s, FALSE);
}
