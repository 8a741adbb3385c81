/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-types.h"

#include <string.h>

#include "kv-version.h"

/**
 * kv_tier_error_quark:
 *
 * The error domain of tiers and the tiering manager, also available as
 * %KV_TIER_ERROR. Error codes are from [error@Kv.TierError].
 *
 * May be called from any thread.
 *
 * Returns: the error domain quark
 */
G_DEFINE_QUARK (kv-tier-error-quark, kv_tier_error)

/* Both enums parse with exact, case-sensitive matching, as the reference's
 * Enum("...") constructors do: "local" or "" is an error, not LOCAL. Config
 * readers that want to be lenient upper-case first (see KvTierFilter). */
static const char * const medium_names[] = {
  [KV_MEDIUM_UNSPECIFIED] = NULL,
  [KV_MEDIUM_CPU] = "CPU",
  [KV_MEDIUM_STORAGE] = "STORAGE",
};

static const char * const locality_names[] = {
  [KV_LOCALITY_UNSPECIFIED] = NULL,
  [KV_LOCALITY_LOCAL] = "LOCAL",
  [KV_LOCALITY_REMOTE] = "REMOTE",
};

static const char * const lookup_result_names[] = {
  [KV_LOOKUP_RESULT_MISS] = "MISS",
  [KV_LOOKUP_RESULT_HIT] = "HIT",
  [KV_LOOKUP_RESULT_HIT_PENDING] = "HIT_PENDING",
  [KV_LOOKUP_RESULT_RETRY] = "RETRY",
};

/**
 * kv_medium_from_string:
 * @str: a medium name: exactly `CPU` or `STORAGE`
 * @out_medium: (out): return location for the medium
 * @error: return location for a #GError
 *
 * Parses the name of a medium. Matching is exact and case-sensitive, as in
 * vLLM: `cpu` and the empty string are errors.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE if @str named a medium; %FALSE with @error set to
 *   %KV_TIER_ERROR_INVALID_ARGUMENT otherwise
 */
gboolean
kv_medium_from_string (const char  *str,
                       KvMedium    *out_medium,
                       GError     **error)
{
  g_return_val_if_fail (str != NULL, FALSE);
  g_return_val_if_fail (out_medium != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  for (guint i = 0; i < G_N_ELEMENTS (medium_names); i++)
    {
      if (medium_names[i] != NULL && strcmp (str, medium_names[i]) == 0)
        {
          *out_medium = (KvMedium) i;
          return TRUE;
        }
    }

  g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
               "Invalid medium “%s”: expected one of CPU, STORAGE", str);
  return FALSE;
}

/**
 * kv_medium_to_string:
 * @medium: a medium
 *
 * Gets the name of @medium as used in configurations and vLLM events.
 *
 * May be called from any thread.
 *
 * Returns: (nullable): `CPU` or `STORAGE`, or %NULL for
 *   %KV_MEDIUM_UNSPECIFIED (vLLM's `None`)
 */
const char *
kv_medium_to_string (KvMedium medium)
{
  g_return_val_if_fail ((guint) medium < G_N_ELEMENTS (medium_names), NULL);

  return medium_names[medium];
}

/**
 * kv_locality_from_string:
 * @str: a locality name: exactly `LOCAL` or `REMOTE`
 * @out_locality: (out): return location for the locality
 * @error: return location for a #GError
 *
 * Parses the name of a locality. Matching is exact and case-sensitive, as in
 * vLLM: `local` and the empty string are errors.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE if @str named a locality; %FALSE with @error set to
 *   %KV_TIER_ERROR_INVALID_ARGUMENT otherwise
 */
gboolean
kv_locality_from_string (const char  *str,
                         KvLocality  *out_locality,
                         GError     **error)
{
  g_return_val_if_fail (str != NULL, FALSE);
  g_return_val_if_fail (out_locality != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  for (guint i = 0; i < G_N_ELEMENTS (locality_names); i++)
    {
      if (locality_names[i] != NULL && strcmp (str, locality_names[i]) == 0)
        {
          *out_locality = (KvLocality) i;
          return TRUE;
        }
    }

  g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
               "Invalid locality “%s”: expected one of LOCAL, REMOTE", str);
  return FALSE;
}

/**
 * kv_locality_to_string:
 * @locality: a locality
 *
 * Gets the name of @locality as used in configurations and vLLM events.
 *
 * May be called from any thread.
 *
 * Returns: (nullable): `LOCAL` or `REMOTE`, or %NULL for
 *   %KV_LOCALITY_UNSPECIFIED (vLLM's `None`)
 */
const char *
kv_locality_to_string (KvLocality locality)
{
  g_return_val_if_fail ((guint) locality < G_N_ELEMENTS (locality_names), NULL);

  return locality_names[locality];
}

/**
 * kv_lookup_result_to_string:
 * @result: a lookup result
 *
 * Gets the name of @result for logs and metric labels.
 *
 * May be called from any thread.
 *
 * Returns: `MISS`, `HIT`, `HIT_PENDING` or `RETRY`
 */
const char *
kv_lookup_result_to_string (KvLookupResult result)
{
  g_return_val_if_fail ((guint) result < G_N_ELEMENTS (lookup_result_names), NULL);

  return lookup_result_names[result];
}

/**
 * kv_get_major_version:
 *
 * Gets the major version of the kvtier library that is running, which may
 * differ from the `KVTIER_MAJOR_VERSION` a program was compiled against.
 *
 * May be called from any thread.
 *
 * Returns: the major version
 */
guint
kv_get_major_version (void)
{
  return KVTIER_MAJOR_VERSION;
}

/**
 * kv_get_minor_version:
 *
 * Gets the minor version of the kvtier library that is running.
 *
 * May be called from any thread.
 *
 * Returns: the minor version
 */
guint
kv_get_minor_version (void)
{
  return KVTIER_MINOR_VERSION;
}

/**
 * kv_get_micro_version:
 *
 * Gets the micro version of the kvtier library that is running.
 *
 * May be called from any thread.
 *
 * Returns: the micro version
 */
guint
kv_get_micro_version (void)
{
  return KVTIER_MICRO_VERSION;
}
