/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* `kvtier inspect`'s namespace.json validator (tools/kvtier-namespace.c)
 * on arbitrary bytes: it accepts only what the fs tier could have written
 * (doc/on-disk-format.md), names the file in every refusal, never
 * crashes or logs a critical, and what it accepts reads back the same
 * when written out as the tier writes it. */

#include "config.h"

#include "fuzz-common.h"

#include "../../tools/kvtier-namespace.h"

#include <string.h>

#include <json-glib/json-glib.h>

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_make_criticals_fatal ();
  return 0;
}

/* namespace.json as the tier writes it (sorted keys, two-space indent). */
static char *
namespace_to_json (const char *name,
                   guint64     block_size)
{
  g_autoptr(JsonBuilder) builder = json_builder_new ();
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;

  json_builder_begin_object (builder);
  json_builder_set_member_name (builder, "block_size");
  json_builder_add_int_value (builder, (gint64) block_size);
  json_builder_set_member_name (builder, "format_version");
  json_builder_add_int_value (builder, TOOL_NAMESPACE_FORMAT_VERSION);
  json_builder_set_member_name (builder, "header_size");
  json_builder_add_int_value (builder, TOOL_NAMESPACE_HEADER_SIZE);
  json_builder_set_member_name (builder, "namespace");
  json_builder_add_string_value (builder, name);
  json_builder_end_object (builder);
  root = json_builder_get_root (builder);
  json_generator_set_root (generator, root);
  json_generator_set_pretty (generator, TRUE);
  json_generator_set_indent (generator, 2);
  return json_generator_to_data (generator, NULL);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *name = NULL;
  g_autofree char *again_name = NULL;
  g_autofree char *json = NULL;
  guint64 block_size = 0;
  guint64 again_size = 0;
  guint8 digest[32];

  if (!tool_namespace_parse ((const char *) data, size, "ns/namespace.json", &name,
                             &block_size, &error))
    {
      g_assert_nonnull (error);
      g_assert_true (g_str_has_prefix (error->message, "ns/namespace.json"));
      g_assert_null (name);
      return 0;
    }
  g_assert_no_error (error);

  g_assert_cmpuint (size, <=, TOOL_NAMESPACE_JSON_MAX_BYTES);
  g_assert_nonnull (name);
  g_assert_true (g_utf8_validate (name, -1, NULL));
  g_assert_cmpuint (block_size, >, 0);
  g_assert_cmpuint (block_size % 4096, ==, 0);
  g_assert_cmpuint (block_size, <=, TOOL_NAMESPACE_MAX_BLOCK_SIZE);
  tool_namespace_digest (name, block_size, digest);

  /* Written out as the tier writes it, it reads back the same (a name
   * long enough to pass the size limit once escaped is the exception). */
  json = namespace_to_json (name, block_size);
  if (strlen (json) <= TOOL_NAMESPACE_JSON_MAX_BYTES)
    {
      g_assert_true (tool_namespace_parse (json, strlen (json), "again", &again_name, &again_size,
                                           &error));
      g_assert_no_error (error);
      g_assert_cmpstr (again_name, ==, name);
      g_assert_cmpuint (again_size, ==, block_size);
    }
  return 0;
}
