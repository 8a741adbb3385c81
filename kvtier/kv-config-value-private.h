/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* Conversions between configuration text / GVariant values and the GValue
 * of a GObject property, shared by KvConfig and KvTierRegistry. Errors are
 * KV_CONFIG_ERROR_INVALID_VALUE without a location: callers prefix the
 * file, section and key. */

G_GNUC_INTERNAL
gboolean  kv_config_value_is_configurable (GParamSpec    *pspec,
                                           GType          type);
G_GNUC_INTERNAL
gboolean  kv_config_value_is_size         (GParamSpec    *pspec);
G_GNUC_INTERNAL
gboolean  kv_config_value_from_string     (GParamSpec    *pspec,
                                           const char    *text,
                                           GValue        *value,
                                           GError       **error);
G_GNUC_INTERNAL
gboolean  kv_config_value_from_variant    (GParamSpec    *pspec,
                                           GVariant      *variant,
                                           GValue        *value,
                                           GError       **error);
G_GNUC_INTERNAL
char     *kv_config_value_to_string       (GParamSpec    *pspec,
                                           const GValue  *value);
G_GNUC_INTERNAL
GVariant *kv_config_value_to_variant      (GParamSpec    *pspec,
                                           const GValue  *value);
G_GNUC_INTERNAL
char     *kv_config_value_describe_type   (GParamSpec    *pspec);
G_GNUC_INTERNAL
gboolean  kv_config_value_parse_size      (const char    *text,
                                           guint64       *out_size,
                                           GError       **error);
G_GNUC_INTERNAL
char     *kv_config_value_format_size     (guint64        size);

G_END_DECLS
