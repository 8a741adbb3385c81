/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-config.h"
#include "kv-config-value-private.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv-arc-policy.h"
#include "kv-configurable.h"
#include "kv-drop-store-policy.h"
#include "kv-ema-backpressure-detector.h"
#include "kv-lru-policy.h"
#include "kv-secondary-tier.h"
#include "kv-throttled-drop-policy.h"

/**
 * kv_config_error_quark:
 *
 * The error domain of configuration errors, also available as
 * %KV_CONFIG_ERROR. Error codes are from [error@Kv.ConfigError].
 *
 * May be called from any thread.
 *
 * Returns: the error domain quark
 */
G_DEFINE_QUARK (kv-config-error-quark, kv_config_error)

#define KIB G_GUINT64_CONSTANT (1024)
#define DICTIONARY_ORIGIN "configuration dictionary"
#define DEFAULT_ORIGIN "configuration"
#define BACKPRESSURE_PREFIX "backpressure-"

/* ------------------------------------------------------------------------ */
/* Choices that are not GObject properties of any class: private enums so
 * that they parse, print and list like every other enum. */

enum { POLICY_LRU, POLICY_ARC };
enum { BACKPRESSURE_NONE, BACKPRESSURE_EMA };
enum { BP_POLICY_THROTTLED, BP_POLICY_DROP };

static GType
cache_policy_choice_get_type (void)
{
  static gsize type;
  static const GEnumValue values[] = {
    { POLICY_LRU, "POLICY_LRU", "lru" },
    { POLICY_ARC, "POLICY_ARC", "arc" },
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
    { BACKPRESSURE_NONE, "BACKPRESSURE_NONE", "none" },
    { BACKPRESSURE_EMA, "BACKPRESSURE_EMA", "ema" },
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
    { BP_POLICY_THROTTLED, "BP_POLICY_THROTTLED", "throttled" },
    { BP_POLICY_DROP, "BP_POLICY_DROP", "drop" },
    { 0, NULL, NULL }
  };

  if (g_once_init_enter (&type))
    g_once_init_leave (&type, g_enum_register_static ("KvConfigBackpressurePolicyChoice", values));
  return type;
}

#define PSPEC_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS)

typedef struct
{
  GParamSpec *primary[6];
  GParamSpec *backpressure;
  GParamSpec *backpressure_policy;
} Schema;

static const Schema *
get_schema (void)
{
  static gsize initialized;
  static Schema schema;

  if (g_once_init_enter (&initialized))
    {
      schema.primary[0] =
        g_param_spec_uint64 ("size", NULL,
                             "Bytes of primary memory; whole slots of slot-size",
                             4096, G_MAXUINT64, 1024 * 1024 * KIB, PSPEC_FLAGS);
      schema.primary[1] =
        g_param_spec_uint64 ("slot-size", NULL,
                             "Bytes of one slot, i.e. of one chunk; a multiple of 4096",
                             4096, G_MAXUINT32 * KIB, 2 * 1024 * KIB, PSPEC_FLAGS);
      schema.primary[2] =
        g_param_spec_enum ("policy", NULL, "Eviction policy",
                           cache_policy_choice_get_type (), POLICY_LRU, PSPEC_FLAGS);
      schema.primary[3] =
        g_param_spec_boolean ("shared", NULL,
                              "Back the slots with a memfd another process can map",
                              FALSE, PSPEC_FLAGS);
      schema.primary[4] =
        g_param_spec_string ("file", NULL,
                             "Map this shared file (such as vLLM's /dev/shm region)"
                             " instead of private memory",
                             NULL, PSPEC_FLAGS);
      schema.primary[5] =
        g_param_spec_boolean ("events", NULL,
                              "Record KV events of the primary tier",
                              FALSE, PSPEC_FLAGS);
      for (guint i = 0; i < G_N_ELEMENTS (schema.primary); i++)
        g_param_spec_ref_sink (schema.primary[i]);

      schema.backpressure =
        g_param_spec_ref_sink (g_param_spec_enum ("backpressure", NULL,
                                                  "Backpressure detector of the tier",
                                                  backpressure_choice_get_type (),
                                                  BACKPRESSURE_NONE, PSPEC_FLAGS));
      schema.backpressure_policy =
        g_param_spec_ref_sink (g_param_spec_enum ("backpressure-policy", NULL,
                                                  "What the detector drops under pressure",
                                                  backpressure_policy_choice_get_type (),
                                                  BP_POLICY_THROTTLED, PSPEC_FLAGS));
      g_once_init_leave (&initialized, 1);
    }
  return &schema;
}

/* ------------------------------------------------------------------------ */
/* The model */

typedef enum {
  SECTION_PRIMARY,
  SECTION_DEVICE,
  SECTION_TIER,
} SectionKind;

typedef enum {
  TARGET_OBJECT,        /* a property of the section's object */
  TARGET_BACKPRESSURE,  /* `backpressure` */
  TARGET_BP_POLICY,     /* `backpressure-policy` */
  TARGET_BP_RAMP,       /* `backpressure-ramp-factor` (throttled policy) */
  TARGET_DETECTOR,      /* `backpressure-<EMA detector property>` */
} Target;

typedef struct
{
  char       *key;
  Target      target;
  GParamSpec *pspec;
  GValue      value;
  guint       line;
} Entry;

typedef struct
{
  SectionKind  kind;
  char        *name;       /* tier name */
  char        *type_name;  /* device and tier sections */
  GType        type;
  guint        line;
  guint        type_line;
  GPtrArray   *entries;    /* (element-type Entry), in order */
} Section;

static void
entry_free (Entry *entry)
{
  g_free (entry->key);
  g_param_spec_unref (entry->pspec);
  g_value_unset (&entry->value);
  g_free (entry);
}

static Section *
section_new (SectionKind  kind,
             const char  *name,
             guint        line)
{
  Section *section = g_new0 (Section, 1);

  section->kind = kind;
  section->name = g_strdup (name);
  section->line = line;
  section->entries = g_ptr_array_new_with_free_func ((GDestroyNotify) entry_free);
  return section;
}

static void
section_free (Section *section)
{
  g_free (section->name);
  g_free (section->type_name);
  g_ptr_array_unref (section->entries);
  g_free (section);
}

static char *
section_title (const Section *section)
{
  switch (section->kind)
    {
    case SECTION_PRIMARY: return g_strdup ("[primary]");
    case SECTION_DEVICE: return g_strdup ("[device]");
    case SECTION_TIER: return g_strdup_printf ("[tier %s]", section->name);
    default: g_assert_not_reached ();
    }
}

/**
 * KvConfig:
 *
 * A kvtier configuration: the primary tier, the device and the ordered
 * secondary tiers, each named by type and configured through the GObject
 * properties of its class.
 *
 * The text form is a key file (see `doc/config.md`):
 *
 * ```
 * [primary]
 * size = 8GiB
 * slot-size = 2MiB
 * policy = lru
 *
 * [device]
 * type = host
 * n-blocks = 4096
 * block-bytes = 64KiB
 * n-layers = 32
 *
 * [tier fs]
 * type = fs
 * root = /var/cache/kvtier
 * backpressure = ema
 * ```
 *
 * Tiers are consulted in file order. Values are parsed by the type of the
 * property they set: sizes take `B`, `KiB`, `MiB`, `GiB`, `TiB`; numbers
 * are range-checked against the property; enums take their nick; booleans
 * `true`/`false` (or yes/no, on/off, 1/0); string lists are comma
 * separated. A `[tier NAME]` section may give the tier an EMA backpressure
 * detector with `backpressure = ema` and `backpressure-<property>` keys for
 * the detector's properties (`backpressure-high-water-s = 0.05`), plus
 * `backpressure-policy = throttled|drop` and `backpressure-ramp-factor`.
 *
 * The same configuration is a [struct@GLib.Variant] dictionary (`a{sv}`),
 * for Python and JavaScript callers: `primary` and `device` are `a{sv}`
 * dictionaries of the sections' keys, `tiers` is an array of dictionaries
 * (`aa{sv}`), each with `name` and `type` plus its keys. Values are either
 * strings in the text syntax or typed values (`b`, integers, `d`, `as`).
 * [method@Kv.Config.to_variant] and [method@Kv.Config.to_data] write either
 * form back.
 *
 * Loading checks everything it can without side effects: unknown sections
 * and keys, bad values, missing and unknown types and duplicates fail with a
 * [error@Kv.ConfigError] that names the file, the line, the section, the key
 * and the accepted choices. [method@Kv.Config.create_manager] then builds
 * the objects. A configuration is not thread-safe: use it from one thread at
 * a time.
 */
struct _KvConfig
{
  GObject         parent_instance;

  KvTierRegistry *registry;
  char           *origin;    /* file name, or NULL for a dictionary */
  Section        *primary;
  Section        *device;    /* nullable */
  GPtrArray      *tiers;     /* (element-type Section) */
};

G_DEFINE_FINAL_TYPE (KvConfig, kv_config, G_TYPE_OBJECT)

static void
kv_config_finalize (GObject *object)
{
  KvConfig *self = KV_CONFIG (object);

  g_clear_object (&self->registry);
  g_free (self->origin);
  section_free (self->primary);
  g_clear_pointer (&self->device, section_free);
  g_ptr_array_unref (self->tiers);

  G_OBJECT_CLASS (kv_config_parent_class)->finalize (object);
}

static void
kv_config_class_init (KvConfigClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = kv_config_finalize;
}

static void
kv_config_init (KvConfig *self)
{
  self->primary = section_new (SECTION_PRIMARY, NULL, 0);
  self->tiers = g_ptr_array_new_with_free_func ((GDestroyNotify) section_free);
}

/**
 * kv_config_new:
 * @registry: (nullable): the registry that resolves type names, or %NULL
 *   for [func@Kv.TierRegistry.get_default]
 *
 * Creates an empty configuration (a default primary tier, no device, no
 * tiers), to be filled with [method@Kv.Config.set_value].
 *
 * Returns: (transfer full): a new configuration
 */
KvConfig *
kv_config_new (KvTierRegistry *registry)
{
  KvConfig *self;

  g_return_val_if_fail (registry == NULL || KV_IS_TIER_REGISTRY (registry), NULL);

  self = g_object_new (KV_TYPE_CONFIG, NULL);
  self->registry = g_object_ref (registry != NULL ? registry : kv_tier_registry_get_default ());
  return self;
}

/* ------------------------------------------------------------------------ */
/* Errors with locations */

typedef struct
{
  const char *origin;
  guint       line;
} Loc;

G_GNUC_PRINTF (6, 7)
static void
set_error (GError        **error,
           KvConfigError   code,
           const Loc      *loc,
           const Section  *section,
           const char     *key,
           const char     *format,
           ...)
{
  g_autofree char *message = NULL;
  g_autofree char *title = section != NULL ? section_title (section) : NULL;
  GString *s = g_string_new (loc->origin);
  va_list args;

  va_start (args, format);
  message = g_strdup_vprintf (format, args);
  va_end (args);

  if (loc->line > 0)
    g_string_append_printf (s, ":%u", loc->line);
  g_string_append (s, ": ");
  if (title != NULL)
    g_string_append (s, title);
  if (key != NULL)
    g_string_append_printf (s, "%skey '%s'", title != NULL ? " " : "", key);
  if (title != NULL || key != NULL)
    g_string_append (s, ": ");
  g_string_append (s, message);

  g_set_error_literal (error, KV_CONFIG_ERROR, code, s->str);
  g_string_free (s, TRUE);
}

/* ------------------------------------------------------------------------ */
/* Keys of a section */

static GParamSpec *
find_primary_pspec (const char *key)
{
  const Schema *schema = get_schema ();

  for (guint i = 0; i < G_N_ELEMENTS (schema->primary); i++)
    if (g_str_equal (schema->primary[i]->name, key))
      return schema->primary[i];
  return NULL;
}

static gboolean
is_construct_property (GParamSpec *pspec)
{
  return (pspec->flags & (G_PARAM_CONSTRUCT | G_PARAM_CONSTRUCT_ONLY)) != 0;
}

/* Resolves @key of @section to the pspec it sets. */
static GParamSpec *
resolve_key (const Section *section,
             const char    *key,
             Target        *out_target)
{
  GParamSpec *pspec;

  *out_target = TARGET_OBJECT;
  if (section->kind == SECTION_PRIMARY)
    return find_primary_pspec (key);

  if (section->kind == SECTION_TIER)
    {
      if (g_str_equal (key, "backpressure"))
        {
          *out_target = TARGET_BACKPRESSURE;
          return get_schema ()->backpressure;
        }
      if (g_str_equal (key, "backpressure-policy"))
        {
          *out_target = TARGET_BP_POLICY;
          return get_schema ()->backpressure_policy;
        }
      if (g_str_equal (key, "backpressure-ramp-factor"))
        {
          g_autoptr(GTypeClass) klass = g_type_class_ref (KV_TYPE_THROTTLED_DROP_POLICY);

          *out_target = TARGET_BP_RAMP;
          return g_object_class_find_property (G_OBJECT_CLASS (klass), "ramp-factor");
        }
      if (g_str_has_prefix (key, BACKPRESSURE_PREFIX))
        {
          g_autoptr(GTypeClass) klass = g_type_class_ref (KV_TYPE_EMA_BACKPRESSURE_DETECTOR);

          pspec = g_object_class_find_property (G_OBJECT_CLASS (klass),
                                                key + strlen (BACKPRESSURE_PREFIX));
          if (pspec != NULL &&
              kv_config_value_is_configurable (pspec, KV_TYPE_EMA_BACKPRESSURE_DETECTOR) &&
              is_construct_property (pspec))
            {
              *out_target = TARGET_DETECTOR;
              return pspec;
            }
          return NULL;
        }
    }

  {
    g_autoptr(GTypeClass) klass = g_type_class_ref (section->type);

    pspec = g_object_class_find_property (G_OBJECT_CLASS (klass), key);
    if (pspec != NULL && kv_config_value_is_configurable (pspec, section->type))
      return pspec;
  }
  return NULL;
}

static char *
accepted_keys (const Section *section)
{
  GString *s = g_string_new (NULL);
  g_autofree GParamSpec **pspecs = NULL;
  guint n_pspecs = 0;

  if (section->kind == SECTION_PRIMARY)
    {
      const Schema *schema = get_schema ();

      for (guint i = 0; i < G_N_ELEMENTS (schema->primary); i++)
        g_string_append_printf (s, "%s%s", i > 0 ? ", " : "", schema->primary[i]->name);
      return g_string_free (s, FALSE);
    }

  g_string_append (s, "type");
  {
    g_autoptr(GTypeClass) klass = g_type_class_ref (section->type);

    pspecs = g_object_class_list_properties (G_OBJECT_CLASS (klass), &n_pspecs);
    for (guint i = 0; i < n_pspecs; i++)
      if (kv_config_value_is_configurable (pspecs[i], section->type))
        g_string_append_printf (s, ", %s", pspecs[i]->name);
  }

  if (section->kind == SECTION_TIER)
    {
      g_autoptr(GTypeClass) klass = g_type_class_ref (KV_TYPE_EMA_BACKPRESSURE_DETECTOR);
      g_autofree GParamSpec **bp = NULL;
      guint n_bp;

      g_string_append (s, ", backpressure, backpressure-policy, backpressure-ramp-factor");
      bp = g_object_class_list_properties (G_OBJECT_CLASS (klass), &n_bp);
      for (guint i = 0; i < n_bp; i++)
        if (kv_config_value_is_configurable (bp[i], KV_TYPE_EMA_BACKPRESSURE_DETECTOR) &&
            is_construct_property (bp[i]))
          g_string_append_printf (s, ", " BACKPRESSURE_PREFIX "%s", bp[i]->name);
    }
  return g_string_free (s, FALSE);
}

static Entry *
find_entry (const Section *section,
            const char    *key)
{
  for (guint i = 0; i < section->entries->len; i++)
    {
      Entry *entry = g_ptr_array_index (section->entries, i);

      if (g_str_equal (entry->key, key))
        return entry;
    }
  return NULL;
}

/* Sets one key (text or typed variant) of a section whose type is known.
 * An existing value of the key is replaced. */
static gboolean
section_set (Section     *section,
             const char  *key,
             const char  *text,
             GVariant    *variant,
             const Loc   *loc,
             GError     **error)
{
  g_autoptr(GError) local_error = NULL;
  GValue value = G_VALUE_INIT;
  GParamSpec *pspec;
  Target target;
  Entry *entry;
  gboolean ok;

  pspec = resolve_key (section, key, &target);
  if (pspec == NULL)
    {
      g_autofree char *accepted = accepted_keys (section);

      if (section->kind == SECTION_PRIMARY)
        set_error (error, KV_CONFIG_ERROR_UNKNOWN_KEY, loc, section, key,
                   "unknown key (accepted: %s)", accepted);
      else
        set_error (error, KV_CONFIG_ERROR_UNKNOWN_KEY, loc, section, key,
                   "unknown key for %s type '%s' (accepted: %s)",
                   section->kind == SECTION_DEVICE ? "device" : "tier",
                   section->type_name, accepted);
      return FALSE;
    }

  ok = variant != NULL ? kv_config_value_from_variant (pspec, variant, &value, &local_error)
                       : kv_config_value_from_string (pspec, text, &value, &local_error);
  if (!ok)
    {
      set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, loc, section, key,
                 "%s", local_error->message);
      return FALSE;
    }

  if (section->kind == SECTION_PRIMARY && g_str_equal (key, "slot-size") &&
      g_value_get_uint64 (&value) % 4096 != 0)
    {
      g_autofree char *printed = kv_config_value_to_string (pspec, &value);

      set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, loc, section, key,
                 "%s is not a multiple of 4096 bytes", printed);
      g_value_unset (&value);
      return FALSE;
    }

  entry = find_entry (section, key);
  if (entry == NULL)
    {
      entry = g_new0 (Entry, 1);
      entry->key = g_strdup (key);
      g_ptr_array_add (section->entries, entry);
    }
  else
    {
      g_param_spec_unref (entry->pspec);
      g_value_unset (&entry->value);
    }
  entry->target = target;
  entry->pspec = g_param_spec_ref (pspec);
  entry->value = value;
  entry->line = loc->line;
  return TRUE;
}

static gint
entry_enum (const Section *section,
            const char    *key,
            gint           fallback)
{
  Entry *entry = find_entry (section, key);

  return entry != NULL ? g_value_get_enum (&entry->value) : fallback;
}

static gboolean
section_has_detector_keys (const Section *section,
                           const Entry  **out_first)
{
  for (guint i = 0; i < section->entries->len; i++)
    {
      const Entry *entry = g_ptr_array_index (section->entries, i);

      if (entry->target == TARGET_DETECTOR || entry->target == TARGET_BP_POLICY ||
          entry->target == TARGET_BP_RAMP)
        {
          *out_first = entry;
          return TRUE;
        }
    }
  return FALSE;
}

static gboolean
wants_detector (const Section *section)
{
  const Entry *first;

  if (section->kind != SECTION_TIER)
    return FALSE;
  if (find_entry (section, "backpressure") != NULL)
    return entry_enum (section, "backpressure", BACKPRESSURE_NONE) == BACKPRESSURE_EMA;
  /* backpressure-* keys alone ask for the EMA detector. */
  return section_has_detector_keys (section, &first);
}

/* Builds the tier's detector from the section; NULL without an error when
 * the tier has none. */
static KvBackpressureDetector *
build_detector (const Section  *section,
                GError        **error)
{
  g_autoptr(GPtrArray) names = NULL;
  g_autoptr(GArray) values = NULL;
  g_autoptr(KvBackpressurePolicy) policy = NULL;
  gboolean have_high = FALSE, have_low = FALSE;
  KvLocality locality = KV_LOCALITY_UNSPECIFIED;
  GValue value = G_VALUE_INIT;
  gdouble high, low;
  GObject *detector;

  if (!wants_detector (section))
    return NULL;

  names = g_ptr_array_new ();
  values = g_array_new (FALSE, TRUE, sizeof (GValue));
  g_array_set_clear_func (values, (GDestroyNotify) g_value_unset);

  for (guint i = 0; i < section->entries->len; i++)
    {
      const Entry *entry = g_ptr_array_index (section->entries, i);

      if (entry->target == TARGET_OBJECT && g_str_equal (entry->key, "locality"))
        locality = g_value_get_enum (&entry->value);
      if (entry->target != TARGET_DETECTOR)
        continue;
      have_high |= g_str_equal (entry->pspec->name, "high-water-s");
      have_low |= g_str_equal (entry->pspec->name, "low-water-s");
      memset (&value, 0, sizeof value);
      g_value_init (&value, G_VALUE_TYPE (&entry->value));
      g_value_copy (&entry->value, &value);
      g_ptr_array_add (names, (gpointer) entry->pspec->name);
      g_array_append_val (values, value);
    }

  /* Water marks not given come from the reference presets for the tier's
   * type and locality. */
  kv_ema_backpressure_detector_get_default_config (section->type_name, locality, &high, &low);
  if (!have_high)
    {
      memset (&value, 0, sizeof value);
      g_value_init (&value, G_TYPE_DOUBLE);
      g_value_set_double (&value, high);
      g_ptr_array_add (names, (gpointer) "high-water-s");
      g_array_append_val (values, value);
    }
  if (!have_low)
    {
      memset (&value, 0, sizeof value);
      g_value_init (&value, G_TYPE_DOUBLE);
      g_value_set_double (&value, low);
      g_ptr_array_add (names, (gpointer) "low-water-s");
      g_array_append_val (values, value);
    }

  if (entry_enum (section, "backpressure-policy", BP_POLICY_THROTTLED) == BP_POLICY_DROP)
    policy = KV_BACKPRESSURE_POLICY (kv_drop_store_policy_new ());
  else
    {
      Entry *ramp = find_entry (section, "backpressure-ramp-factor");

      policy = KV_BACKPRESSURE_POLICY (kv_throttled_drop_policy_new (
        ramp != NULL ? g_value_get_double (&ramp->value) : 2.0));
    }
  memset (&value, 0, sizeof value);
  g_value_init (&value, KV_TYPE_BACKPRESSURE_POLICY);
  g_value_set_object (&value, policy);
  g_ptr_array_add (names, (gpointer) "policy");
  g_array_append_val (values, value);

  detector = g_object_new_with_properties (KV_TYPE_EMA_BACKPRESSURE_DETECTOR, names->len,
                                           (const char **) names->pdata,
                                           (const GValue *) values->data);
  if (!g_initable_init (G_INITABLE (detector), NULL, error))
    {
      g_object_unref (detector);
      return NULL;
    }
  return KV_BACKPRESSURE_DETECTOR (detector);
}

/* Checks what needs the whole section: backpressure keys and the detector
 * they build. */
static gboolean
section_validate (const Section  *section,
                  const char     *origin,
                  GError        **error)
{
  g_autoptr(KvBackpressureDetector) detector = NULL;
  g_autoptr(GError) local_error = NULL;
  const Entry *first;

  if (section->kind != SECTION_TIER)
    return TRUE;

  if (find_entry (section, "backpressure") != NULL &&
      entry_enum (section, "backpressure", BACKPRESSURE_NONE) == BACKPRESSURE_NONE &&
      section_has_detector_keys (section, &first))
    {
      Loc loc = { origin, first->line };

      set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, section, first->key,
                 "backpressure keys need 'backpressure = ema' (the section says"
                 " 'backpressure = none')");
      return FALSE;
    }

  detector = build_detector (section, &local_error);
  if (detector == NULL && local_error != NULL)
    {
      Entry *bp = find_entry (section, "backpressure");
      Loc loc = { origin, bp != NULL ? bp->line : section->line };

      set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, section,
                 bp != NULL ? "backpressure" : NULL, "%s", local_error->message);
      return FALSE;
    }
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* Sections */

static gboolean
valid_name (const char *name)
{
  if (name == NULL || *name == '\0')
    return FALSE;
  for (const char *p = name; *p; p++)
    if (!g_ascii_isalnum (*p) && *p != '-' && *p != '_' && *p != '.')
      return FALSE;
  return TRUE;
}

/* Splits a section title into its kind and tier name. */
static gboolean
parse_title (const char   *title,
             SectionKind  *out_kind,
             char        **out_name)
{
  *out_name = NULL;
  if (g_str_equal (title, "primary"))
    {
      *out_kind = SECTION_PRIMARY;
      return TRUE;
    }
  if (g_str_equal (title, "device"))
    {
      *out_kind = SECTION_DEVICE;
      return TRUE;
    }
  if (g_str_has_prefix (title, "tier") && g_ascii_isspace (title[4]))
    {
      g_autofree char *name = g_strstrip (g_strdup (title + 4));

      if (valid_name (name))
        {
          *out_kind = SECTION_TIER;
          *out_name = g_steal_pointer (&name);
          return TRUE;
        }
    }
  return FALSE;
}

static Section *
find_tier (KvConfig   *self,
           const char *name)
{
  for (guint i = 0; i < self->tiers->len; i++)
    {
      Section *section = g_ptr_array_index (self->tiers, i);

      if (g_str_equal (section->name, name))
        return section;
    }
  return NULL;
}

static char *
registered_types (KvConfig *self,
                  gboolean  devices)
{
  g_auto(GStrv) names = devices ? kv_tier_registry_list_device_types (self->registry)
                                : kv_tier_registry_list_tier_types (self->registry);
  g_autofree char *joined = g_strjoinv (", ", names);

  return g_strdup_printf ("%s types: %s", devices ? "device" : "tier",
                          *joined != '\0' ? joined : "none registered");
}

/* Gives @section its type; @type_name NULL means the key is missing. */
static gboolean
section_set_type (KvConfig    *self,
                  Section     *section,
                  const char  *type_name,
                  const Loc   *loc,
                  GError     **error)
{
  gboolean device = section->kind == SECTION_DEVICE;
  g_autoptr(GError) local_error = NULL;
  GType type;

  if (type_name == NULL)
    {
      g_autofree char *choices = registered_types (self, device);

      set_error (error, KV_CONFIG_ERROR_MISSING_KEY, loc, section, NULL,
                 "missing key 'type' (%s)", choices);
      return FALSE;
    }

  type = device ? kv_tier_registry_lookup_device_type (self->registry, type_name, &local_error)
                : kv_tier_registry_lookup_tier_type (self->registry, type_name, &local_error);
  if (type == G_TYPE_INVALID)
    {
      set_error (error, KV_CONFIG_ERROR_UNKNOWN_TYPE, loc, section, "type",
                 "%s", local_error->message);
      return FALSE;
    }

  if (section->type_name != NULL && !g_str_equal (section->type_name, type_name))
    {
      set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, loc, section, "type",
                 "the section already has type '%s'", section->type_name);
      return FALSE;
    }

  g_free (section->type_name);
  section->type_name = g_strdup (type_name);
  section->type = type;
  section->type_line = loc->line;
  return TRUE;
}

/* One key of a section being loaded: text (files) or a variant. */
typedef struct
{
  const char *key;
  const char *text;
  GVariant   *variant;
  guint       line;
} RawKey;

/* Adds a section from its raw keys, checking everything. */
static gboolean
add_section (KvConfig     *self,
             SectionKind   kind,
             const char   *name,
             guint         line,
             RawKey       *keys,
             guint         n_keys,
             const char   *origin,
             GError      **error)
{
  Section *section;
  g_autoptr(GError) local_error = NULL;
  const RawKey *type_key = NULL;
  Loc loc = { origin, line };

  if (kind == SECTION_PRIMARY)
    section = self->primary;
  else
    {
      Section probe = { .kind = kind, .name = (char *) name };

      if ((kind == SECTION_DEVICE && self->device != NULL) ||
          (kind == SECTION_TIER && find_tier (self, name) != NULL))
        {
          const Section *first = kind == SECTION_DEVICE ? self->device : find_tier (self, name);

          if (first->line > 0)
            set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, &probe, NULL,
                       "duplicate section (first at line %u)", first->line);
          else
            set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, &probe, NULL,
                       kind == SECTION_TIER ? "duplicate tier name" : "duplicate section");
          return FALSE;
        }

      for (guint i = 0; i < n_keys; i++)
        if (g_str_equal (keys[i].key, "type"))
          type_key = &keys[i];

      section = section_new (kind, name, line);
      if (type_key != NULL)
        {
          g_autofree char *type_text = NULL;
          Loc type_loc = { origin, type_key->line != 0 ? type_key->line : line };

          if (type_key->variant != NULL &&
              !g_variant_is_of_type (type_key->variant, G_VARIANT_TYPE_STRING))
            {
              set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &type_loc, section, "type",
                         "the type must be a string, not '%s'",
                         g_variant_get_type_string (type_key->variant));
              section_free (section);
              return FALSE;
            }
          type_text = g_strstrip (g_strdup (type_key->variant != NULL
                                            ? g_variant_get_string (type_key->variant, NULL)
                                            : type_key->text));
          if (!section_set_type (self, section, type_text, &type_loc, error))
            {
              section_free (section);
              return FALSE;
            }
        }
      else if (!section_set_type (self, section, NULL, &loc, error))
        {
          section_free (section);
          return FALSE;
        }

      if (kind == SECTION_DEVICE)
        self->device = section;
      else
        g_ptr_array_add (self->tiers, section);
    }

  if (kind == SECTION_PRIMARY && line > 0)
    section->line = line;

  for (guint i = 0; i < n_keys; i++)
    {
      Loc key_loc = { origin, keys[i].line };

      if (&keys[i] == type_key)
        continue;
      if (kind == SECTION_PRIMARY && g_str_equal (keys[i].key, "type"))
        {
          set_error (error, KV_CONFIG_ERROR_UNKNOWN_KEY, &key_loc, section, "type",
                     "the primary tier has no type");
          return FALSE;
        }
      if (!section_set (section, keys[i].key, keys[i].text, keys[i].variant, &key_loc, error))
        return FALSE;
    }

  return section_validate (section, origin, error);
}

/* ------------------------------------------------------------------------ */
/* Key files */

typedef struct
{
  char       *title;
  guint       line;
  GHashTable *keys;   /* key → line (GUINT_TO_POINTER) */
} ScannedSection;

static void
scanned_section_free (ScannedSection *scanned)
{
  g_free (scanned->title);
  g_hash_table_unref (scanned->keys);
  g_free (scanned);
}

/* GKeyFile knows no line numbers and merges repeated sections and keys
 * silently, so the text is scanned first: for the lines that errors name,
 * and to refuse duplicates and malformed lines with their line number. */
static GPtrArray *
scan_key_file (const char  *data,
               gsize        length,
               const char  *origin,
               GError     **error)
{
  g_autoptr(GPtrArray) sections = g_ptr_array_new_with_free_func ((GDestroyNotify) scanned_section_free);
  g_autofree char *copy = g_strndup (data, length);
  g_auto(GStrv) lines = g_strsplit (copy, "\n", -1);
  ScannedSection *current = NULL;

  for (guint n = 0; lines[n] != NULL; n++)
    {
      char *line = g_strstrip (lines[n]);
      Loc loc = { origin, n + 1 };

      if (*line == '\0' || *line == '#')
        continue;

      if (*line == '[')
        {
          char *end = strrchr (line, ']');

          if (end == NULL || end[1] != '\0')
            {
              set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, NULL,
                         "'%s' is not a section header ('[NAME]')", line);
              return NULL;
            }
          *end = '\0';
          for (guint i = 0; i < sections->len; i++)
            {
              ScannedSection *other = g_ptr_array_index (sections, i);

              if (g_str_equal (other->title, line + 1))
                {
                  set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, NULL, NULL,
                             "duplicate section [%s] (first at line %u)",
                             line + 1, other->line);
                  return NULL;
                }
            }
          current = g_new0 (ScannedSection, 1);
          current->title = g_strdup (line + 1);
          current->line = n + 1;
          current->keys = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
          g_ptr_array_add (sections, current);
          continue;
        }

      {
        char *eq = strchr (line, '=');
        g_autofree char *key = NULL;
        gpointer first_line;

        if (eq == NULL)
          {
            set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, NULL,
                       "'%s' is not a section header, 'key = value' or comment", line);
            return NULL;
          }
        key = g_strstrip (g_strndup (line, (gsize) (eq - line)));
        if (current == NULL)
          {
            set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, key,
                       "key outside any section");
            return NULL;
          }
        if (g_hash_table_lookup_extended (current->keys, key, NULL, &first_line))
          {
            set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, NULL, NULL,
                       "[%s] key '%s': duplicate key (first at line %u)",
                       current->title, key, GPOINTER_TO_UINT (first_line));
            return NULL;
          }
        g_hash_table_insert (current->keys, g_steal_pointer (&key), GUINT_TO_POINTER (n + 1));
      }
    }

  return g_steal_pointer (&sections);
}

static gboolean
load_key_file (KvConfig     *self,
               const char   *data,
               gsize         length,
               const char   *origin,
               GError      **error)
{
  g_autoptr(GKeyFile) key_file = g_key_file_new ();
  g_autoptr(GPtrArray) scanned = NULL;
  g_autoptr(GError) local_error = NULL;
  const char *nul = memchr (data, '\0', length);

  /* GKeyFile and the scan below read C strings: text after a NUL byte
   * would be seen by one and not the other, so neither may see any. */
  if (nul != NULL)
    {
      guint line = 1;
      const char *line_start = data;

      for (const char *p = data; p < nul; p++)
        if (*p == '\n')
          {
            line++;
            line_start = p + 1;
          }
      {
        Loc loc = { origin, line };

        set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, NULL,
                   "a NUL byte at column %u (a configuration is text)",
                   (guint) (nul - line_start) + 1);
      }
      return FALSE;
    }

  scanned = scan_key_file (data, length, origin, error);
  if (scanned == NULL)
    return FALSE;

  if (!g_key_file_load_from_data (key_file, data, length, G_KEY_FILE_NONE, &local_error))
    {
      Loc loc = { origin, 0 };

      set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, NULL, "%s", local_error->message);
      return FALSE;
    }

  for (guint s = 0; s < scanned->len; s++)
    {
      ScannedSection *sc = g_ptr_array_index (scanned, s);
      g_auto(GStrv) keys = NULL;
      g_autoptr(GPtrArray) texts = g_ptr_array_new_with_free_func (g_free);
      g_autofree RawKey *raw = NULL;
      g_autofree char *name = NULL;
      SectionKind kind;
      gsize n_keys = 0;
      Loc loc = { origin, sc->line };

      if (!parse_title (sc->title, &kind, &name))
        {
          set_error (error, KV_CONFIG_ERROR_UNKNOWN_SECTION, &loc, NULL, NULL,
                     "unknown section [%s] (accepted: [primary], [device],"
                     " [tier NAME] where NAME is letters, digits, '-', '_' or '.')",
                     sc->title);
          return FALSE;
        }

      keys = g_key_file_get_keys (key_file, sc->title, &n_keys, NULL);
      raw = g_new0 (RawKey, n_keys + 1);
      for (gsize k = 0; k < n_keys; k++)
        {
          g_autoptr(GError) key_error = NULL;
          char *text = g_key_file_get_string (key_file, sc->title, keys[k], &key_error);

          /* An invalid escape still returns text, with an error: the
           * error is what counts. */
          if (key_error != NULL || text == NULL)
            {
              Loc key_loc = { origin, GPOINTER_TO_UINT (g_hash_table_lookup (sc->keys, keys[k])) };
              Section probe = { .kind = kind, .name = name };
              g_autofree char *raw_text = g_key_file_get_value (key_file, sc->title, keys[k], NULL);

              g_free (text);
              if (raw_text != NULL &&
                  g_error_matches (key_error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE))
                set_error (error, KV_CONFIG_ERROR_PARSE, &key_loc, &probe, keys[k],
                           "'%s' has an invalid escape sequence (accepted: \\s \\n \\t"
                           " \\r \\\\)", raw_text);
              else
                set_error (error, KV_CONFIG_ERROR_PARSE, &key_loc, &probe, keys[k],
                           "%s", key_error != NULL ? key_error->message : "no value");
              return FALSE;
            }
          g_ptr_array_add (texts, text);
          raw[k].key = keys[k];
          raw[k].text = text;
          raw[k].line = GPOINTER_TO_UINT (g_hash_table_lookup (sc->keys, keys[k]));
        }

      if (!add_section (self, kind, name, sc->line, raw, (guint) n_keys, origin, error))
        return FALSE;
    }

  return TRUE;
}

/**
 * kv_config_new_from_data:
 * @registry: (nullable): the registry that resolves type names, or %NULL
 *   for [func@Kv.TierRegistry.get_default]
 * @data: configuration text (key-file syntax)
 * @length: the length of @data, or -1 when it is NUL-terminated
 * @origin: (nullable): the name errors give the text (a file name), or
 *   %NULL for `<data>`
 * @error: return location for a #GError
 *
 * Parses and checks a configuration text. Nothing is created yet.
 *
 * Returns: (transfer full): the configuration, or %NULL with @error set
 *   (%KV_CONFIG_ERROR)
 */
KvConfig *
kv_config_new_from_data (KvTierRegistry  *registry,
                         const char      *data,
                         gssize           length,
                         const char      *origin,
                         GError         **error)
{
  g_autoptr(KvConfig) self = NULL;

  g_return_val_if_fail (registry == NULL || KV_IS_TIER_REGISTRY (registry), NULL);
  g_return_val_if_fail (data != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  self = kv_config_new (registry);
  self->origin = g_strdup (origin != NULL ? origin : "<data>");
  if (!load_key_file (self, data, length < 0 ? strlen (data) : (gsize) length,
                      self->origin, error))
    return NULL;
  return g_steal_pointer (&self);
}

/**
 * kv_config_new_from_file:
 * @registry: (nullable): the registry that resolves type names, or %NULL
 *   for [func@Kv.TierRegistry.get_default]
 * @path: (type filename): a configuration file
 * @error: return location for a #GError
 *
 * Reads, parses and checks a configuration file. Nothing is created yet.
 *
 * Returns: (transfer full): the configuration, or %NULL with @error set (a
 *   [error@GLib.FileError] when the file cannot be read, else
 *   %KV_CONFIG_ERROR)
 */
KvConfig *
kv_config_new_from_file (KvTierRegistry  *registry,
                         const char      *path,
                         GError         **error)
{
  g_autofree char *data = NULL;
  gsize length;

  g_return_val_if_fail (registry == NULL || KV_IS_TIER_REGISTRY (registry), NULL);
  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!g_file_get_contents (path, &data, &length, error))
    return NULL;
  return kv_config_new_from_data (registry, data, (gssize) length, path, error);
}

/* ------------------------------------------------------------------------ */
/* Dictionaries */

static gboolean
collect_dict (GVariant    *dict,
              const char  *what,
              GPtrArray   *out_keys,
              GError     **error)
{
  GVariantIter iter;
  const char *key;
  GVariant *value;
  Loc loc = { DICTIONARY_ORIGIN, 0 };

  g_variant_iter_init (&iter, dict);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      RawKey *raw;

      for (guint i = 0; i < out_keys->len; i++)
        if (g_str_equal (((RawKey *) g_ptr_array_index (out_keys, i))->key, key))
          {
            set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, NULL, NULL,
                       "%s key '%s': duplicate key", what, key);
            g_variant_unref (value);
            return FALSE;
          }
      raw = g_new0 (RawKey, 1);
      raw->key = key;
      raw->variant = value;
      g_ptr_array_add (out_keys, raw);
    }
  return TRUE;
}

static void
raw_key_free (RawKey *raw)
{
  g_clear_pointer (&raw->variant, g_variant_unref);
  g_free (raw);
}

static gboolean
add_dict_section (KvConfig     *self,
                  SectionKind   kind,
                  GVariant     *dict,
                  const char   *what,
                  GError      **error)
{
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) raw_key_free);
  g_autofree char *name = NULL;
  g_autofree RawKey *flat = NULL;
  guint n = 0;
  Loc loc = { DICTIONARY_ORIGIN, 0 };

  if (!g_variant_is_of_type (dict, G_VARIANT_TYPE_VARDICT))
    {
      set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, NULL, NULL,
                 "%s must be a dictionary (a{sv}), not '%s'", what,
                 g_variant_get_type_string (dict));
      return FALSE;
    }
  if (!collect_dict (dict, what, keys, error))
    return FALSE;

  flat = g_new0 (RawKey, keys->len + 1);
  for (guint i = 0; i < keys->len; i++)
    {
      RawKey *raw = g_ptr_array_index (keys, i);

      if (kind == SECTION_TIER && g_str_equal (raw->key, "name"))
        {
          if (!g_variant_is_of_type (raw->variant, G_VARIANT_TYPE_STRING) ||
              !valid_name (g_variant_get_string (raw->variant, NULL)))
            {
              g_autofree char *printed = g_variant_print (raw->variant, TRUE);

              set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, NULL, NULL,
                         "%s key 'name': %s is not a tier name (letters, digits,"
                         " '-', '_' or '.')", what, printed);
              return FALSE;
            }
          name = g_variant_dup_string (raw->variant, NULL);
          continue;
        }
      flat[n++] = *raw;
    }

  if (kind == SECTION_TIER && name == NULL)
    {
      set_error (error, KV_CONFIG_ERROR_MISSING_KEY, &loc, NULL, NULL,
                 "%s: missing key 'name'", what);
      return FALSE;
    }

  return add_section (self, kind, name, 0, flat, n, DICTIONARY_ORIGIN, error);
}

/**
 * kv_config_new_from_variant:
 * @registry: (nullable): the registry that resolves type names, or %NULL
 *   for [func@Kv.TierRegistry.get_default]
 * @variant: an `a{sv}` dictionary: `primary` (`a{sv}`), `device`
 *   (`a{sv}` with `type`) and `tiers` (`aa{sv}`, each with `name` and
 *   `type`), all optional
 * @error: return location for a #GError
 *
 * Checks a configuration given as a dictionary, the form Python and
 * JavaScript pass. Values are strings in the text syntax or typed values.
 * A floating @variant is consumed.
 *
 * Returns: (transfer full): the configuration, or %NULL with @error set
 *   (%KV_CONFIG_ERROR)
 */
KvConfig *
kv_config_new_from_variant (KvTierRegistry  *registry,
                            GVariant        *variant,
                            GError         **error)
{
  g_autoptr(KvConfig) self = NULL;
  g_autoptr(GVariant) owned = NULL;
  GVariantIter iter;
  const char *key;
  GVariant *value;
  Loc loc = { DICTIONARY_ORIGIN, 0 };
  gboolean seen[3] = { FALSE, FALSE, FALSE };

  g_return_val_if_fail (registry == NULL || KV_IS_TIER_REGISTRY (registry), NULL);
  g_return_val_if_fail (variant != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  owned = g_variant_ref_sink (variant);
  self = kv_config_new (registry);
  self->origin = g_strdup (DICTIONARY_ORIGIN);

  if (!g_variant_is_of_type (variant, G_VARIANT_TYPE_VARDICT))
    {
      set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, NULL, NULL,
                 "a configuration is a dictionary (a{sv}), not '%s'",
                 g_variant_get_type_string (variant));
      return NULL;
    }

  g_variant_iter_init (&iter, variant);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      g_autoptr(GVariant) section = value;
      int which = g_str_equal (key, "primary") ? 0 : g_str_equal (key, "device") ? 1
                  : g_str_equal (key, "tiers") ? 2 : -1;

      if (which < 0)
        {
          set_error (error, KV_CONFIG_ERROR_UNKNOWN_SECTION, &loc, NULL, NULL,
                     "unknown section '%s' (accepted: primary, device, tiers)", key);
          return NULL;
        }
      if (seen[which])
        {
          set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, NULL, NULL,
                     "duplicate section '%s'", key);
          return NULL;
        }
      seen[which] = TRUE;

      if (which == 0 && !add_dict_section (self, SECTION_PRIMARY, section, "'primary'", error))
        return NULL;
      if (which == 1 && !add_dict_section (self, SECTION_DEVICE, section, "'device'", error))
        return NULL;
      if (which == 2)
        {
          GVariantIter tiers;
          GVariant *tier;
          guint index = 0;

          if (!g_variant_is_of_type (section, G_VARIANT_TYPE ("aa{sv}")) &&
              !g_variant_is_of_type (section, G_VARIANT_TYPE ("av")))
            {
              set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, NULL, NULL,
                         "'tiers' must be an array of dictionaries (aa{sv}), not '%s'",
                         g_variant_get_type_string (section));
              return NULL;
            }
          g_variant_iter_init (&tiers, section);
          while ((tier = g_variant_iter_next_value (&tiers)) != NULL)
            {
              g_autoptr(GVariant) owned_tier = tier;
              g_autoptr(GVariant) inner = g_variant_is_of_type (tier, G_VARIANT_TYPE_VARIANT)
                                          ? g_variant_get_variant (tier) : g_variant_ref (tier);
              g_autofree char *what = g_strdup_printf ("'tiers'[%u]", index++);

              if (!add_dict_section (self, SECTION_TIER, inner, what, error))
                return NULL;
            }
        }
    }

  return g_steal_pointer (&self);
}

/* ------------------------------------------------------------------------ */
/* Editing and reading */

/**
 * kv_config_get_registry:
 * @self: a configuration
 *
 * Gets the registry that resolves the configuration's type names.
 *
 * Returns: (transfer none): the registry
 */
KvTierRegistry *
kv_config_get_registry (KvConfig *self)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  return self->registry;
}

static Section *
find_section (KvConfig   *self,
              const char *title,
              SectionKind *out_kind,
              char       **out_name)
{
  if (!parse_title (title, out_kind, out_name))
    return NULL;
  switch (*out_kind)
    {
    case SECTION_PRIMARY: return self->primary;
    case SECTION_DEVICE: return self->device;
    case SECTION_TIER: return find_tier (self, *out_name);
    default: g_assert_not_reached ();
    }
}

/**
 * kv_config_set_value:
 * @self: a configuration
 * @section: `primary`, `device` or `tier NAME`
 * @key: a key of the section (`type`, or a property name)
 * @value: the value, in the text syntax
 * @error: return location for a #GError
 *
 * Sets one key, replacing its value, and checks it as loading would.
 * Setting `type` of a `device` or `tier NAME` section that does not exist
 * yet adds it (a new tier goes last); the type of an existing section
 * cannot change.
 *
 * Returns: %TRUE on success, %FALSE with @error set (%KV_CONFIG_ERROR)
 */
gboolean
kv_config_set_value (KvConfig    *self,
                     const char  *section,
                     const char  *key,
                     const char  *value,
                     GError     **error)
{
  g_autofree char *name = NULL;
  SectionKind kind;
  Section *target;
  Loc loc = { self != NULL && self->origin != NULL ? self->origin : DEFAULT_ORIGIN, 0 };

  g_return_val_if_fail (KV_IS_CONFIG (self), FALSE);
  g_return_val_if_fail (section != NULL, FALSE);
  g_return_val_if_fail (key != NULL, FALSE);
  g_return_val_if_fail (value != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!parse_title (section, &kind, &name))
    {
      set_error (error, KV_CONFIG_ERROR_UNKNOWN_SECTION, &loc, NULL, NULL,
                 "unknown section [%s] (accepted: [primary], [device], [tier NAME])",
                 section);
      return FALSE;
    }

  target = kind == SECTION_PRIMARY ? self->primary
           : kind == SECTION_DEVICE ? self->device : find_tier (self, name);
  if (target == NULL)
    {
      RawKey raw = { "type", value, NULL, 0 };

      if (!g_str_equal (key, "type"))
        {
          Section probe = { .kind = kind, .name = name };

          set_error (error, KV_CONFIG_ERROR_MISSING_KEY, &loc, &probe, key,
                     "the section does not exist yet: set its 'type' first");
          return FALSE;
        }
      return add_section (self, kind, name, 0, &raw, 1, loc.origin, error);
    }

  if (g_str_equal (key, "type"))
    {
      g_autofree char *type_name = g_strstrip (g_strdup (value));

      if (kind == SECTION_PRIMARY)
        {
          set_error (error, KV_CONFIG_ERROR_UNKNOWN_KEY, &loc, target, key,
                     "the primary tier has no type");
          return FALSE;
        }
      return section_set_type (self, target, type_name, &loc, error);
    }

  if (!section_set (target, key, value, NULL, &loc, error))
    return FALSE;
  return section_validate (target, loc.origin, error);
}

/**
 * kv_config_get_value:
 * @self: a configuration
 * @section: `primary`, `device` or `tier NAME`
 * @key: a key of the section
 *
 * Gets a key that the configuration sets, in canonical text form (sizes
 * with units, enums by nick). Keys left to their default are not set.
 *
 * Returns: (transfer full) (nullable): the value, or %NULL when the section
 *   or the key is not set
 */
char *
kv_config_get_value (KvConfig   *self,
                     const char *section,
                     const char *key)
{
  g_autofree char *name = NULL;
  SectionKind kind;
  Section *target;
  Entry *entry;

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (section != NULL, NULL);
  g_return_val_if_fail (key != NULL, NULL);

  target = find_section (self, section, &kind, &name);
  if (target == NULL)
    return NULL;
  if (g_str_equal (key, "type"))
    return g_strdup (target->type_name);
  entry = find_entry (target, key);
  return entry != NULL ? kv_config_value_to_string (entry->pspec, &entry->value) : NULL;
}

/**
 * kv_config_get_tier_names:
 * @self: a configuration
 *
 * Lists the tier names in lookup order (the order of the file).
 *
 * Returns: (transfer full) (array zero-terminated=1): the names
 */
char **
kv_config_get_tier_names (KvConfig *self)
{
  char **names;

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  names = g_new0 (char *, self->tiers->len + 1);
  for (guint i = 0; i < self->tiers->len; i++)
    names[i] = g_strdup (((Section *) g_ptr_array_index (self->tiers, i))->name);
  return names;
}

/**
 * kv_config_get_tier_type:
 * @self: a configuration
 * @name: a tier name
 *
 * Gets the type of the tier called @name.
 *
 * Returns: (nullable): the type name, or %NULL when there is no such tier
 */
const char *
kv_config_get_tier_type (KvConfig   *self,
                         const char *name)
{
  Section *section;

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);

  section = find_tier (self, name);
  return section != NULL ? section->type_name : NULL;
}

/**
 * kv_config_get_device_type:
 * @self: a configuration
 *
 * Gets the type of the `[device]` section.
 *
 * Returns: (nullable): the type name, or %NULL when the configuration has
 *   no device
 */
const char *
kv_config_get_device_type (KvConfig *self)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  return self->device != NULL ? self->device->type_name : NULL;
}

static guint64
primary_uint64 (KvConfig   *self,
                const char *key)
{
  Entry *entry = find_entry (self->primary, key);

  if (entry != NULL)
    return g_value_get_uint64 (&entry->value);
  return G_PARAM_SPEC_UINT64 (find_primary_pspec (key))->default_value;
}

/**
 * kv_config_get_primary_size:
 * @self: a configuration
 *
 * Gets the `size` of the primary tier (its default when not set).
 *
 * Returns: the size in bytes
 */
guint64
kv_config_get_primary_size (KvConfig *self)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), 0);

  return primary_uint64 (self, "size");
}

/**
 * kv_config_get_slot_size:
 * @self: a configuration
 *
 * Gets the `slot-size` of the primary tier (its default when not set).
 *
 * Returns: the slot size in bytes
 */
guint64
kv_config_get_slot_size (KvConfig *self)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), 0);

  return primary_uint64 (self, "slot-size");
}

/* ------------------------------------------------------------------------ */
/* Writing back */

static GVariant *
section_to_variant (const Section *section)
{
  GVariantBuilder builder;

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  if (section->kind == SECTION_TIER)
    g_variant_builder_add (&builder, "{sv}", "name", g_variant_new_string (section->name));
  if (section->type_name != NULL)
    g_variant_builder_add (&builder, "{sv}", "type", g_variant_new_string (section->type_name));
  for (guint i = 0; i < section->entries->len; i++)
    {
      const Entry *entry = g_ptr_array_index (section->entries, i);

      g_variant_builder_add (&builder, "{sv}", entry->key,
                             kv_config_value_to_variant (entry->pspec, &entry->value));
    }
  return g_variant_builder_end (&builder);
}

/**
 * kv_config_to_variant:
 * @self: a configuration
 *
 * Writes the configuration as the dictionary that
 * [ctor@Kv.Config.new_from_variant] reads: typed values (sizes as
 * integers, enums as nicks) for every key that is set, `primary` always
 * present.
 *
 * Returns: (transfer floating): an `a{sv}` dictionary
 */
GVariant *
kv_config_to_variant (KvConfig *self)
{
  GVariantBuilder builder;
  GVariantBuilder tiers;

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "primary", section_to_variant (self->primary));
  if (self->device != NULL)
    g_variant_builder_add (&builder, "{sv}", "device", section_to_variant (self->device));
  g_variant_builder_init (&tiers, G_VARIANT_TYPE ("aa{sv}"));
  for (guint i = 0; i < self->tiers->len; i++)
    g_variant_builder_add_value (&tiers, section_to_variant (g_ptr_array_index (self->tiers, i)));
  g_variant_builder_add (&builder, "{sv}", "tiers", g_variant_builder_end (&tiers));
  return g_variant_builder_end (&builder);
}

static void
section_to_key_file (const Section *section,
                     GKeyFile      *key_file)
{
  g_autofree char *title = section_title (section);

  /* section_title() gives "[...]"; groups are named without brackets. */
  title[strlen (title) - 1] = '\0';
  if (section->type_name != NULL)
    g_key_file_set_string (key_file, title + 1, "type", section->type_name);
  for (guint i = 0; i < section->entries->len; i++)
    {
      const Entry *entry = g_ptr_array_index (section->entries, i);
      g_autofree char *text = kv_config_value_to_string (entry->pspec, &entry->value);

      g_key_file_set_string (key_file, title + 1, entry->key, text);
    }
  if (section->type_name == NULL && section->entries->len == 0)
    g_key_file_set_comment (key_file, title + 1, NULL, " defaults", NULL);
}

/**
 * kv_config_to_data:
 * @self: a configuration
 * @length: (out) (optional): return location for the length of the text
 *
 * Writes the configuration as key-file text that
 * [ctor@Kv.Config.new_from_data] reads: canonical values (sizes with
 * units, enums by nick, lists comma separated) for every key that is set.
 *
 * Returns: (transfer full): the text
 */
char *
kv_config_to_data (KvConfig *self,
                   gsize    *length)
{
  g_autoptr(GKeyFile) key_file = g_key_file_new ();

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  section_to_key_file (self->primary, key_file);
  if (self->device != NULL)
    section_to_key_file (self->device, key_file);
  for (guint i = 0; i < self->tiers->len; i++)
    section_to_key_file (g_ptr_array_index (self->tiers, i), key_file);
  return g_key_file_to_data (key_file, length, NULL);
}

/* ------------------------------------------------------------------------ */
/* Building the objects */

static const char *
config_origin (KvConfig *self)
{
  return self->origin != NULL ? self->origin : DEFAULT_ORIGIN;
}

/* The slot count and size of `[primary]`, refused as building refuses
 * them. */
static gboolean
primary_geometry (KvConfig  *self,
                  guint     *out_n_slots,
                  guint64   *out_slot_size,
                  GError   **error)
{
  guint64 size = kv_config_get_primary_size (self);
  guint64 slot_size = kv_config_get_slot_size (self);
  guint64 n_slots = size / slot_size;
  Loc loc = { config_origin (self), self->primary->line };

  if (n_slots == 0 || n_slots > G_MAXUINT32)
    {
      g_autofree char *s = kv_config_value_format_size (size);
      g_autofree char *ss = kv_config_value_format_size (slot_size);

      set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, self->primary, "size",
                 "%s makes %" G_GUINT64_FORMAT " slots of %s (1 to %u accepted)",
                 s, n_slots, ss, G_MAXUINT32);
      return FALSE;
    }
  *out_n_slots = (guint) n_slots;
  *out_slot_size = slot_size;
  return TRUE;
}

static const char *
primary_file (KvConfig *self)
{
  Entry *file = find_entry (self->primary, "file");

  if (file == NULL || g_value_get_string (&file->value) == NULL ||
      *g_value_get_string (&file->value) == '\0')
    return NULL;
  return g_value_get_string (&file->value);
}

static KvHostBufferBacking
primary_backing (KvConfig *self)
{
  Entry *shared = find_entry (self->primary, "shared");

  if (primary_file (self) != NULL)
    return KV_HOST_BUFFER_BACKING_FILE;
  if (shared != NULL && g_value_get_boolean (&shared->value))
    return KV_HOST_BUFFER_BACKING_MEMFD;
  return KV_HOST_BUFFER_BACKING_ANONYMOUS;
}

/**
 * kv_config_create_primary:
 * @self: a configuration
 * @error: return location for a #GError
 *
 * Creates the primary tier of `[primary]`: a [class@Kv.HostBuffer] of
 * `size / slot-size` slots (private memory, a memfd with `shared = true`,
 * or the shared `file`) and the `policy` (`lru` or `arc`).
 *
 * Returns: (transfer full): the primary tier, or %NULL with @error set
 *   when the sizes do not make a slot or the memory cannot be had
 */
KvPrimaryTier *
kv_config_create_primary (KvConfig  *self,
                          GError   **error)
{
  g_autoptr(KvHostBuffer) buffer = NULL;
  g_autoptr(KvCachePolicy) policy = NULL;
  Entry *events;
  guint64 slot_size;
  guint n_slots;

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!primary_geometry (self, &n_slots, &slot_size, error))
    return NULL;

  switch (primary_backing (self))
    {
    case KV_HOST_BUFFER_BACKING_FILE:
      buffer = kv_host_buffer_new_for_file (primary_file (self), n_slots, slot_size, error);
      break;
    case KV_HOST_BUFFER_BACKING_MEMFD:
      buffer = kv_host_buffer_new_shared (n_slots, slot_size, error);
      break;
    default:
      buffer = kv_host_buffer_new (n_slots, slot_size, error);
      break;
    }
  if (buffer == NULL)
    return NULL;

  if (entry_enum (self->primary, "policy", POLICY_LRU) == POLICY_ARC)
    policy = kv_arc_policy_new (n_slots);
  else
    policy = kv_lru_policy_new ();

  events = find_entry (self->primary, "events");
  return kv_primary_tier_new (buffer, policy,
                              events != NULL && g_value_get_boolean (&events->value));
}

/* Constructs the object of a `[device]` or `[tier NAME]` section with its
 * properties. Building initializes it ([iface@Gio.Initable]); checking
 * (@dry) runs only its [iface@Kv.Configurable] check, which must not touch
 * files, devices or memory. Both see the same objects and properties, so
 * a check refuses what building would. */
static GObject *
construct_section (KvConfig                *self,
                   const Section           *section,
                   KvHostBuffer            *buffer,
                   KvBackpressureDetector  *detector,
                   gboolean                 dry,
                   GError                 **error)
{
  gboolean device = section->kind == SECTION_DEVICE;
  g_autoptr(GPtrArray) names = g_ptr_array_new ();
  g_autoptr(GArray) values = g_array_new (FALSE, TRUE, sizeof (GValue));
  GObject *object;
  GType type;

  g_array_set_clear_func (values, (GDestroyNotify) g_value_unset);
  type = device ? kv_tier_registry_lookup_device_type (self->registry, section->type_name, error)
                : kv_tier_registry_lookup_tier_type (self->registry, section->type_name, error);
  if (type == G_TYPE_INVALID)
    return NULL;

  g_ptr_array_add (names, (gpointer) "primary");
  g_array_set_size (values, values->len + 1);
  g_value_set_object (g_value_init (&g_array_index (values, GValue, values->len - 1),
                                    KV_TYPE_HOST_BUFFER), buffer);
  if (!device)
    {
      g_ptr_array_add (names, (gpointer) "tier-type");
      g_array_set_size (values, values->len + 1);
      g_value_set_string (g_value_init (&g_array_index (values, GValue, values->len - 1),
                                        G_TYPE_STRING), section->type_name);
    }
  if (detector != NULL)
    {
      g_ptr_array_add (names, (gpointer) "backpressure-detector");
      g_array_set_size (values, values->len + 1);
      g_value_set_object (g_value_init (&g_array_index (values, GValue, values->len - 1),
                                        KV_TYPE_BACKPRESSURE_DETECTOR), detector);
    }
  for (guint i = 0; i < section->entries->len; i++)
    {
      const Entry *entry = g_ptr_array_index (section->entries, i);
      GValue *value;

      if (entry->target != TARGET_OBJECT)
        continue;
      g_ptr_array_add (names, (gpointer) entry->pspec->name);
      g_array_set_size (values, values->len + 1);
      value = g_value_init (&g_array_index (values, GValue, values->len - 1),
                            G_VALUE_TYPE (&entry->value));
      g_value_copy (&entry->value, value);
    }

  object = g_object_new_with_properties (type, names->len, (const char **) names->pdata,
                                         (const GValue *) values->data);
  if (dry)
    {
      if (KV_IS_CONFIGURABLE (object) && !kv_configurable_check (KV_CONFIGURABLE (object), error))
        g_clear_object (&object);
    }
  else if (G_IS_INITABLE (object) && !g_initable_init (G_INITABLE (object), NULL, error))
    g_clear_object (&object);
  return object;
}

/* Builds (or, @dry, checks) the tier of @section. */
static KvSecondaryTier *
construct_tier (KvConfig       *self,
                const Section  *section,
                KvHostBuffer   *buffer,
                gboolean        dry,
                GError        **error)
{
  g_autoptr(KvBackpressureDetector) detector = NULL;
  g_autoptr(GError) local_error = NULL;
  GObject *tier = NULL;
  Loc loc = { config_origin (self), section->line };

  detector = build_detector (section, &local_error);
  if (local_error == NULL)
    tier = construct_section (self, section, buffer, detector, dry, &local_error);
  if (tier == NULL)
    {
      set_error (error, KV_CONFIG_ERROR_FAILED, &loc, section, NULL,
                 "cannot create the tier: %s", local_error->message);
      return NULL;
    }
  return KV_SECONDARY_TIER (tier);
}

/* Builds (or, @dry, checks) the device of `[device]`. */
static KvDevice *
construct_device (KvConfig      *self,
                  KvHostBuffer  *buffer,
                  gboolean       dry,
                  GError       **error)
{
  g_autoptr(GError) local_error = NULL;
  GObject *device;
  Loc loc = { config_origin (self), self->device->line };

  device = construct_section (self, self->device, buffer, NULL, dry, &local_error);
  if (device == NULL)
    {
      set_error (error, KV_CONFIG_ERROR_FAILED, &loc, self->device, NULL,
                 "cannot create the device: %s", local_error->message);
      return NULL;
    }
  return KV_DEVICE (device);
}

/**
 * kv_config_check:
 * @self: a configuration
 * @error: return location for a #GError
 *
 * Checks everything that building the configuration would check, without
 * building: the primary tier's slot count, then each tier and the device,
 * constructed with their properties and backpressure detectors but not
 * started. No memory is mapped and no file, directory, socket or device is
 * opened. A tier or device class that implements [iface@Kv.Configurable]
 * also runs the checks its start would run (the fs tier's root and layout,
 * the device's chunk size); one that does not can still fail to start.
 * What only starting can find out (a directory that cannot be created,
 * memory that cannot be had) is not checked.
 *
 * Returns: %TRUE when the configuration builds as far as can be told,
 *   %FALSE with @error set to the error that
 *   [method@Kv.Config.create_manager] or [method@Kv.Config.create_device]
 *   would return
 */
gboolean
kv_config_check (KvConfig  *self,
                 GError   **error)
{
  g_autoptr(KvHostBuffer) buffer = NULL;
  guint64 slot_size;
  guint n_slots;

  g_return_val_if_fail (KV_IS_CONFIG (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!primary_geometry (self, &n_slots, &slot_size, error))
    return FALSE;
  /* The buffer's properties without its memory: what tiers and devices
   * read from it at construction. */
  buffer = g_object_new (KV_TYPE_HOST_BUFFER, "n-slots", n_slots, "slot-size", slot_size,
                         "backing", primary_backing (self), "path", primary_file (self),
                         NULL);

  for (guint i = 0; i < self->tiers->len; i++)
    {
      g_autoptr(KvSecondaryTier) tier = construct_tier (self, g_ptr_array_index (self->tiers, i),
                                                        buffer, TRUE, error);

      if (tier == NULL)
        return FALSE;
    }
  if (self->device != NULL)
    {
      g_autoptr(KvDevice) device = construct_device (self, buffer, TRUE, error);

      if (device == NULL)
        return FALSE;
    }
  return TRUE;
}

/**
 * kv_config_create_manager:
 * @self: a configuration
 * @error: return location for a #GError
 *
 * Builds the objects: the primary tier ([method@Kv.Config.create_primary]),
 * then each tier in order, created with its properties and backpressure
 * detector and started, then a [class@Kv.TieringManager] with the tiers
 * added in order. When a tier fails, the tiers created so far are shut
 * down in reverse order and nothing is returned. The device is separate:
 * [method@Kv.Config.create_device]. Call on the thread that will own the
 * manager.
 *
 * Returns: (transfer full): the manager, or %NULL with @error set
 *   (%KV_CONFIG_ERROR_FAILED naming the section, for a tier that failed to
 *   start)
 */
KvTieringManager *
kv_config_create_manager (KvConfig  *self,
                          GError   **error)
{
  g_autoptr(KvPrimaryTier) primary = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(GPtrArray) created = NULL;
  KvHostBuffer *buffer;

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  primary = kv_config_create_primary (self, error);
  if (primary == NULL)
    return NULL;
  buffer = kv_primary_tier_get_buffer (primary);
  manager = kv_tiering_manager_new (primary);
  created = g_ptr_array_new_with_free_func (g_object_unref);

  for (guint i = 0; i < self->tiers->len; i++)
    {
      const Section *section = g_ptr_array_index (self->tiers, i);
      g_autoptr(KvSecondaryTier) tier = NULL;
      g_autoptr(GError) add_error = NULL;
      gboolean ok;

      tier = construct_tier (self, section, buffer, FALSE, error);
      ok = tier != NULL;
      if (ok)
        {
          /* Shut down with the others on failure, added or not. */
          g_ptr_array_add (created, g_object_ref (tier));
          if (!kv_tiering_manager_add_tier (manager, tier, &add_error))
            {
              Loc loc = { config_origin (self), section->line };

              set_error (error, KV_CONFIG_ERROR_FAILED, &loc, section, NULL,
                         "cannot create the tier: %s", add_error->message);
              ok = FALSE;
            }
        }

      if (!ok)
        {
          for (guint j = created->len; j > 0; j--)
            {
              g_autoptr(GError) shutdown_error = NULL;
              KvSecondaryTier *done = g_ptr_array_index (created, j - 1);

              if (!kv_secondary_tier_shutdown (done, &shutdown_error))
                g_debug ("Shutting down tier #%u after a failed start: %s",
                         j, shutdown_error->message);
            }
          return NULL;
        }
      g_debug ("Created secondary tier #%u (%s)", i + 1, section->name);
    }

  return g_steal_pointer (&manager);
}

/**
 * kv_config_create_device:
 * @self: a configuration
 * @primary: the primary tier's buffer (from the manager's primary tier)
 * @error: return location for a #GError
 *
 * Creates and initializes the device of `[device]`.
 *
 * Returns: (transfer full): the device, or %NULL with @error set when the
 *   configuration has no device section (%KV_CONFIG_ERROR_MISSING_KEY) or
 *   the device cannot be created (%KV_CONFIG_ERROR_FAILED)
 */
KvDevice *
kv_config_create_device (KvConfig      *self,
                         KvHostBuffer  *primary,
                         GError       **error)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (KV_IS_HOST_BUFFER (primary), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (self->device == NULL)
    {
      Loc loc = { config_origin (self), 0 };

      set_error (error, KV_CONFIG_ERROR_MISSING_KEY, &loc, NULL, NULL,
                 "the configuration has no [device] section");
      return NULL;
    }
  return construct_device (self, primary, FALSE, error);
}
