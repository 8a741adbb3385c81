/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-tier-filter.h"

#include <json-glib/json-glib.h>

typedef struct
{
  KvMedium medium;
  KvLocality locality;
} KvTierMatcher;

/**
 * KvTierFilter:
 *
 * Says which secondary tiers a request may load from: a list of matchers,
 * each a (medium, locality) pair in which %KV_MEDIUM_UNSPECIFIED and
 * %KV_LOCALITY_UNSPECIFIED match anything. A tier is allowed when any
 * matcher matches its medium and locality.
 *
 * [func@Kv.TierFilter.get_all] is the filter that allows every tier (vLLM's
 * `TierFilter.ALL`); a filter with no matchers allows none. The primary tier
 * is never filtered, and stores ignore the filter.
 *
 * Requests carry a filter parsed from the `kv_load_tiers` entry of their
 * transfer parameters ([func@Kv.TierFilter.parse_variant]).
 *
 * Filters are atomically reference counted. Add matchers before sharing a
 * filter; after that it is read-only and may be used from any thread.
 */
struct _KvTierFilter
{
  gatomicrefcount ref_count;
  GArray *matchers; /* of KvTierMatcher */
};

G_DEFINE_BOXED_TYPE (KvTierFilter, kv_tier_filter, kv_tier_filter_ref, kv_tier_filter_unref)

static KvTierFilter *
kv_tier_filter_alloc (void)
{
  KvTierFilter *self = g_new0 (KvTierFilter, 1);

  g_atomic_ref_count_init (&self->ref_count);
  self->matchers = g_array_new (FALSE, FALSE, sizeof (KvTierMatcher));

  return self;
}

/**
 * kv_tier_filter_get_all:
 *
 * Gets the process-wide filter that allows every tier: one matcher that
 * matches any medium and any locality. It is recognised by identity
 * ([method@Kv.TierFilter.is_all]), as vLLM's `TierFilter.ALL` is, and
 * cannot be modified.
 *
 * May be called from any thread.
 *
 * Returns: (transfer none): the allow-all filter
 */
KvTierFilter *
kv_tier_filter_get_all (void)
{
  static KvTierFilter *all = NULL;

  if (g_once_init_enter (&all))
    {
      KvTierFilter *filter = kv_tier_filter_alloc ();
      KvTierMatcher any = { KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_UNSPECIFIED };

      g_array_append_val (filter->matchers, any);
      g_once_init_leave (&all, filter);
    }

  return all;
}

/**
 * kv_tier_filter_new:
 *
 * Creates a filter with no matchers, which allows no tier until matchers
 * are added with [method@Kv.TierFilter.add_matcher].
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new filter
 */
KvTierFilter *
kv_tier_filter_new (void)
{
  return kv_tier_filter_alloc ();
}

/**
 * kv_tier_filter_add_matcher:
 * @self: a filter that is not the allow-all filter
 * @medium: the medium to match, or %KV_MEDIUM_UNSPECIFIED for any
 * @locality: the locality to match, or %KV_LOCALITY_UNSPECIFIED for any
 *
 * Adds a matcher to @self. Only call this before the filter is shared (for
 * example before it is set on a request): filters are read without locks.
 */
void
kv_tier_filter_add_matcher (KvTierFilter *self,
                            KvMedium      medium,
                            KvLocality    locality)
{
  KvTierMatcher matcher = { medium, locality };

  g_return_if_fail (self != NULL);
  g_return_if_fail (!kv_tier_filter_is_all (self));
  g_return_if_fail (medium >= KV_MEDIUM_UNSPECIFIED && medium <= KV_MEDIUM_STORAGE);
  g_return_if_fail (locality >= KV_LOCALITY_UNSPECIFIED && locality <= KV_LOCALITY_REMOTE);

  g_array_append_val (self->matchers, matcher);
}

/**
 * kv_tier_filter_get_n_matchers:
 * @self: a filter
 *
 * Gets the number of matchers of @self. The allow-all filter has one.
 *
 * May be called from any thread.
 *
 * Returns: the number of matchers; 0 means the filter allows no tier
 */
guint
kv_tier_filter_get_n_matchers (const KvTierFilter *self)
{
  g_return_val_if_fail (self != NULL, 0);

  return self->matchers->len;
}

/**
 * kv_tier_filter_is_all:
 * @self: a filter
 *
 * Checks whether @self is the allow-all filter returned by
 * [func@Kv.TierFilter.get_all]. This is an identity check: another filter
 * with an equivalent matcher is not the allow-all filter, even though it
 * allows the same tiers.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE if @self is the allow-all filter
 */
gboolean
kv_tier_filter_is_all (const KvTierFilter *self)
{
  g_return_val_if_fail (self != NULL, FALSE);

  return self == kv_tier_filter_get_all ();
}

/**
 * kv_tier_filter_allows:
 * @self: a filter
 * @medium: the medium of a tier
 * @locality: the locality of a tier
 *
 * Checks whether a request with this filter may load from a tier of the
 * given medium and locality: the allow-all filter allows everything; any
 * other filter allows the tier when one of its matchers has, for both
 * fields, an unspecified value on either side or equal values.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE if the tier is allowed
 */
gboolean
kv_tier_filter_allows (const KvTierFilter *self,
                       KvMedium            medium,
                       KvLocality          locality)
{
  g_return_val_if_fail (self != NULL, FALSE);

  if (kv_tier_filter_is_all (self))
    return TRUE;

  for (guint i = 0; i < self->matchers->len; i++)
    {
      const KvTierMatcher *m = &g_array_index (self->matchers, KvTierMatcher, i);
      gboolean medium_ok = m->medium == KV_MEDIUM_UNSPECIFIED ||
                           medium == KV_MEDIUM_UNSPECIFIED ||
                           m->medium == medium;
      gboolean locality_ok = m->locality == KV_LOCALITY_UNSPECIFIED ||
                             locality == KV_LOCALITY_UNSPECIFIED ||
                             m->locality == locality;

      if (medium_ok && locality_ok)
        return TRUE;
    }

  return FALSE;
}

/* Strips `v` boxes and maybe types. Returns a new reference, or NULL for a
 * null value (`mv` Nothing, which is what JSON null deserializes to). */
static GVariant *
unbox (GVariant *value)
{
  GVariant *v = g_variant_ref (value);

  for (;;)
    {
      GVariant *inner;

      if (g_variant_is_of_type (v, G_VARIANT_TYPE_VARIANT))
        inner = g_variant_get_variant (v);
      else if (g_variant_is_of_type (v, G_VARIANT_TYPE_MAYBE))
        inner = g_variant_get_maybe (v);
      else
        return v;

      g_variant_unref (v);
      if (inner == NULL)
        return NULL;
      v = inner;
    }
}

/* A list, as opposed to a dictionary (which GVariant also types as an
 * array) or a scalar or tuple. */
static gboolean
is_list (GVariant *v)
{
  return g_variant_is_of_type (v, G_VARIANT_TYPE_ARRAY) &&
         !g_variant_type_is_dict_entry (g_variant_type_element (g_variant_get_type (v)));
}

/* Reads one optional "medium"/"locality" field of an entry into
 * @out_upper, upper-cased since vLLM matches the names case-insensitively;
 * a missing or null field leaves it NULL (matches anything). Returns FALSE,
 * rejecting the entry, if the value is not a string. */
static gboolean
get_field (GVariant    *entry,
           const char  *name,
           char       **out_upper)
{
  g_autoptr(GVariant) boxed = g_variant_lookup_value (entry, name, NULL);
  g_autoptr(GVariant) value = NULL;

  *out_upper = NULL;
  if (boxed == NULL || (value = unbox (boxed)) == NULL)
    return TRUE;

  if (!g_variant_is_of_type (value, G_VARIANT_TYPE_STRING))
    {
      g_debug ("%s: skipping entry whose “%s” is of type %s, not a string",
               KV_LOAD_TIERS_KEY, name, g_variant_get_type_string (value));
      return FALSE;
    }

  *out_upper = g_ascii_strup (g_variant_get_string (value, NULL), -1);
  return TRUE;
}

/* Turns one list element into a matcher; FALSE if the entry is skipped. */
static gboolean
parse_entry (GVariant      *entry,
             KvTierMatcher *out)
{
  g_autofree char *medium = NULL;
  g_autofree char *locality = NULL;

  out->medium = KV_MEDIUM_UNSPECIFIED;
  out->locality = KV_LOCALITY_UNSPECIFIED;

  if (!get_field (entry, "medium", &medium) ||
      !get_field (entry, "locality", &locality))
    return FALSE;

  if (medium != NULL && !kv_medium_from_string (medium, &out->medium, NULL))
    {
      g_debug ("%s: skipping entry with unknown medium “%s”", KV_LOAD_TIERS_KEY, medium);
      return FALSE;
    }

  if (locality != NULL && !kv_locality_from_string (locality, &out->locality, NULL))
    {
      g_debug ("%s: skipping entry with unknown locality “%s”", KV_LOAD_TIERS_KEY, locality);
      return FALSE;
    }

  return TRUE;
}

/**
 * kv_tier_filter_parse_variant:
 * @value: (nullable): the value of a request's `kv_load_tiers` transfer
 *   parameter, or %NULL if the request has none
 *
 * Builds a request's load filter from its `kv_load_tiers` parameter, with
 * the rules of vLLM's connector:
 *
 * - %NULL gives the allow-all filter;
 * - @value must be a list (an array that is not a dictionary, possibly
 *   boxed in a `v`); anything else gives the allow-all filter and a
 *   warning;
 * - each element (after unboxing `v`) must be a dictionary with string
 *   keys (such as `a{sv}`); other elements are skipped;
 * - an entry's optional `medium` and `locality` values are strings,
 *   compared case-insensitively with `CPU`/`STORAGE` and `LOCAL`/`REMOTE`;
 *   a missing or null value matches anything; an unknown or non-string
 *   value skips the entry;
 * - if no entry was kept, an empty list gives a filter that allows no tier,
 *   and a non-empty list gives the allow-all filter.
 *
 * A floating @value is consumed.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): the filter
 */
KvTierFilter *
kv_tier_filter_parse_variant (GVariant *value)
{
  g_autoptr(GVariant) list = NULL;
  KvTierFilter *filter;
  gsize n_entries;

  if (value == NULL)
    return kv_tier_filter_ref (kv_tier_filter_get_all ());

  g_variant_ref_sink (value);
  list = unbox (value);

  if (list == NULL || !is_list (list))
    {
      g_warning ("%s must be a list of {medium, locality} dictionaries, got a value of type %s; "
                 "loading from all tiers",
                 KV_LOAD_TIERS_KEY,
                 list != NULL ? g_variant_get_type_string (list) : g_variant_get_type_string (value));
      g_variant_unref (value);
      return kv_tier_filter_ref (kv_tier_filter_get_all ());
    }
  g_variant_unref (value);

  filter = kv_tier_filter_new ();
  n_entries = g_variant_n_children (list);
  for (gsize i = 0; i < n_entries; i++)
    {
      g_autoptr(GVariant) child = g_variant_get_child_value (list, i);
      g_autoptr(GVariant) entry = unbox (child);
      KvTierMatcher matcher;

      if (entry == NULL || !g_variant_is_of_type (entry, G_VARIANT_TYPE ("a{s*}")))
        {
          g_debug ("%s: skipping entry %" G_GSIZE_FORMAT " of type %s, not a dictionary",
                   KV_LOAD_TIERS_KEY, i,
                   entry != NULL ? g_variant_get_type_string (entry) : "null");
          continue;
        }

      if (parse_entry (entry, &matcher))
        g_array_append_val (filter->matchers, matcher);
    }

  /* An explicit [] denies every tier; a list whose entries were all
   * unusable is treated as if no filter had been given. */
  if (filter->matchers->len == 0 && n_entries > 0)
    {
      g_debug ("%s: no usable entry in %" G_GSIZE_FORMAT "; loading from all tiers",
               KV_LOAD_TIERS_KEY, n_entries);
      kv_tier_filter_unref (filter);
      return kv_tier_filter_ref (kv_tier_filter_get_all ());
    }

  return filter;
}

/**
 * kv_tier_filter_parse_json:
 * @json: a `kv_load_tiers` value as JSON text, such as
 *   `[{"medium": "storage", "locality": "local"}]`
 * @error: return location for a #GError
 *
 * Builds a load filter from JSON text, with the rules of
 * [func@Kv.TierFilter.parse_variant] (JSON objects are dictionaries, and
 * `null` values match anything).
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): the filter, or %NULL with @error set to
 *   %KV_TIER_ERROR_INVALID_ARGUMENT if @json is not well-formed JSON
 */
KvTierFilter *
kv_tier_filter_parse_json (const char  *json,
                           GError     **error)
{
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GVariant) value = NULL;
  g_autoptr(GError) local_error = NULL;
  JsonNode *root;

  g_return_val_if_fail (json != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, json, -1, &local_error))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Invalid %s JSON “%s”: %s", KV_LOAD_TIERS_KEY, json, local_error->message);
      return NULL;
    }

  root = json_parser_get_root (parser);
  if (root == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Invalid %s JSON “%s”: the document is empty", KV_LOAD_TIERS_KEY, json);
      return NULL;
    }

  /* Without a signature, arrays become `av`, objects `a{sv}` and null
   * `mv`: the shapes parse_variant() expects, so the rules live there. */
  value = json_gvariant_deserialize (root, NULL, &local_error);
  if (value == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Invalid %s JSON “%s”: %s", KV_LOAD_TIERS_KEY, json, local_error->message);
      return NULL;
    }
  g_variant_ref_sink (value);

  return kv_tier_filter_parse_variant (value);
}

/**
 * kv_tier_filter_ref:
 * @self: a filter
 *
 * Takes a reference on @self. Thread-safe.
 *
 * Returns: (transfer full): @self
 */
KvTierFilter *
kv_tier_filter_ref (KvTierFilter *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  /* The allow-all filter lives as long as the process. */
  if (!kv_tier_filter_is_all (self))
    g_atomic_ref_count_inc (&self->ref_count);

  return self;
}

/**
 * kv_tier_filter_unref:
 * @self: (transfer full): a filter
 *
 * Drops a reference on @self, freeing it when the last one is gone.
 * Thread-safe.
 */
void
kv_tier_filter_unref (KvTierFilter *self)
{
  g_return_if_fail (self != NULL);

  if (kv_tier_filter_is_all (self))
    return;

  if (g_atomic_ref_count_dec (&self->ref_count))
    {
      g_array_unref (self->matchers);
      g_free (self);
    }
}
