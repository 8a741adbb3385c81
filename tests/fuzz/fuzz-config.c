/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* libFuzzer target for the configuration parser. Each input is read as
 * key-file text and, the same bytes, as a serialized a{sv} dictionary.
 * Every configuration that parses is written back (key file and
 * dictionary) and read again: the sections, keys and values must come back
 * the same, the text must be a fixed point, and kv_config_check() must give
 * the same verdict and message (without the location: lines move when the
 * text is rewritten). Inputs that do not parse must fail with a
 * KV_CONFIG_ERROR. */

#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvtier.h>

#include "kv-config-test-tier.h"

int LLVMFuzzerInitialize (int *argc, char ***argv);
int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static KvTierRegistry *registry;

static void
fail (const char *what,
      const char *first,
      const char *second)
{
  fprintf (stderr, "fuzz-config: %s\n--- first:\n%s\n--- second:\n%s\n", what,
           first != NULL ? first : "(null)", second != NULL ? second : "(null)");
  abort ();
}

/* The message without its "origin[:line]: " prefix: lines move when the
 * text is rewritten, and a dictionary has none. */
static const char *
without_location (const GError *error)
{
  static const char * const origins[] = { "configuration dictionary", "config" };
  const char *p = error->message;

  for (guint i = 0; i < G_N_ELEMENTS (origins); i++)
    if (g_str_has_prefix (p, origins[i]))
      {
        p += strlen (origins[i]);
        if (*p == ':' && g_ascii_isdigit (p[1]))
          for (p++; g_ascii_isdigit (*p); p++)
            ;
        if (g_str_has_prefix (p, ": "))
          p += 2;
        break;
      }
  return p;
}

static void
check_same_verdict (KvConfig *first,
                    KvConfig *second)
{
  g_autoptr(GError) first_error = NULL;
  g_autoptr(GError) second_error = NULL;
  gboolean first_ok = kv_config_check (first, &first_error);
  gboolean second_ok = kv_config_check (second, &second_error);

  if (first_ok != second_ok)
    fail ("the build verdict changed on a round trip",
          first_ok ? "valid" : first_error->message,
          second_ok ? "valid" : second_error->message);
  if (!first_ok &&
      (first_error->domain != second_error->domain || first_error->code != second_error->code ||
       strcmp (without_location (first_error), without_location (second_error)) != 0))
    fail ("the build error changed on a round trip", first_error->message, second_error->message);
}

/* A warning or critical is a bug: abort (not trap, as GLib's fatal logs
 * do) so that libFuzzer keeps the input. Debug messages are dropped. */
static GLogWriterOutput
abort_on_warnings (GLogLevelFlags   log_level,
                   const GLogField *fields,
                   gsize            n_fields,
                   gpointer         user_data)
{
  if ((log_level & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING)) == 0)
    return G_LOG_WRITER_HANDLED;
  g_log_writer_standard_streams (log_level, fields, n_fields, user_data);
  abort ();
}

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  registry = kv_tier_registry_new ();
  /* No plugins: a target linked with the library statically would load a
   * second copy of it with each plugin. */
  kv_tier_registry_register_tier_type (registry, "fuzz", KV_TYPE_CONFIG_TEST_TIER, NULL);
  g_log_set_writer_func (abort_on_warnings, NULL, NULL);
  return 0;
}

/* A refused input must say why, in the configuration's error domain. */
static void
expect_config_error (const GError *error)
{
  if (error == NULL || error->domain != KV_CONFIG_ERROR || error->message[0] == '\0')
    fail ("a refused input without a KV_CONFIG_ERROR",
          error != NULL ? g_quark_to_string (error->domain) : NULL,
          error != NULL ? error->message : NULL);
}

/* Writes @config both ways, reads it back and compares. */
static void
round_trip (KvConfig *config)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) reread = NULL;
  g_autoptr(KvConfig) from_variant = NULL;
  g_autoptr(GVariant) variant = NULL;
  g_autoptr(GVariant) reread_variant = NULL;
  g_autoptr(GVariant) variant_again = NULL;
  g_autofree char *text = NULL;
  g_autofree char *text_again = NULL;
  gsize length = 0, length_again = 0;

  /* The key file: read back to the same sections, keys and values. */
  text = kv_config_to_data (config, &length);
  reread = kv_config_new_from_data (registry, text, (gssize) length, "config", &error);
  if (reread == NULL)
    fail ("the written configuration does not read back", text, error->message);
  variant = g_variant_ref_sink (kv_config_to_variant (config));
  reread_variant = g_variant_ref_sink (kv_config_to_variant (reread));
  if (!g_variant_equal (variant, reread_variant))
    {
      g_autofree char *a = g_variant_print (variant, TRUE);
      g_autofree char *b = g_variant_print (reread_variant, TRUE);

      fail ("the key file round trip changed the configuration", a, b);
    }
  text_again = kv_config_to_data (reread, &length_again);
  if (length != length_again || memcmp (text, text_again, length) != 0)
    fail ("writing is not a fixed point", text, text_again);
  check_same_verdict (config, reread);

  /* The dictionary: the same. */
  from_variant = kv_config_new_from_variant (registry, variant, &error);
  if (from_variant == NULL)
    fail ("the written dictionary does not read back", text, error->message);
  variant_again = g_variant_ref_sink (kv_config_to_variant (from_variant));
  if (!g_variant_equal (variant, variant_again))
    {
      g_autofree char *a = g_variant_print (variant, TRUE);
      g_autofree char *b = g_variant_print (variant_again, TRUE);

      fail ("the dictionary round trip changed the configuration", a, b);
    }
  check_same_verdict (config, from_variant);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GError) variant_error = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvConfig) from_variant = NULL;
  g_autoptr(GBytes) bytes = NULL;
  g_autoptr(GVariant) variant = NULL;

  if (registry == NULL)
    LLVMFuzzerInitialize (NULL, NULL);

  /* The input as key-file text. */
  config = kv_config_new_from_data (registry, (const char *) data, (gssize) size, "config",
                                    &error);
  if (config != NULL)
    round_trip (config);
  else
    expect_config_error (error);

  /* The same bytes as a serialized a{sv} dictionary, the form Python and
   * JavaScript pass (GVariant reads untrusted data safely). */
  bytes = g_bytes_new (data, size);
  variant = g_variant_ref_sink (g_variant_new_from_bytes (G_VARIANT_TYPE_VARDICT, bytes, FALSE));
  from_variant = kv_config_new_from_variant (registry, variant, &variant_error);
  if (from_variant != NULL)
    round_trip (from_variant);
  else
    expect_config_error (variant_error);
  return 0;
}
