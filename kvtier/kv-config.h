/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-device.h"
#include "kv-primary-tier.h"
#include "kv-tier-registry.h"
#include "kv-tiering-manager.h"

G_BEGIN_DECLS

/**
 * KV_CONFIG_ERROR:
 *
 * Error domain of [class@Kv.Config]. Errors in this domain are from the
 * [error@Kv.ConfigError] enumeration; their messages name the file (or
 * dictionary), the line where known, the section, the key and the accepted
 * choices.
 */
#define KV_CONFIG_ERROR (kv_config_error_quark ())

/**
 * KvConfigError:
 * @KV_CONFIG_ERROR_FAILED: generic failure (for example a tier failed to
 *   start); callers treat unknown codes as this.
 * @KV_CONFIG_ERROR_PARSE: the text is not a key file (a line that is no
 *   section header, `key = value` or comment; a key outside any section).
 * @KV_CONFIG_ERROR_UNKNOWN_SECTION: a section other than `[primary]`,
 *   `[device]` and `[tier NAME]`.
 * @KV_CONFIG_ERROR_UNKNOWN_KEY: a key that the section's object has no
 *   configurable property for.
 * @KV_CONFIG_ERROR_INVALID_VALUE: a value of the wrong type or out of
 *   range.
 * @KV_CONFIG_ERROR_MISSING_KEY: a required key is missing (`type` in a tier
 *   or device section).
 * @KV_CONFIG_ERROR_UNKNOWN_TYPE: a `type` that no registered tier or device
 *   has.
 * @KV_CONFIG_ERROR_DUPLICATE: a section, key or tier name given twice.
 *
 * Error codes for %KV_CONFIG_ERROR.
 */
typedef enum {
  KV_CONFIG_ERROR_FAILED,
  KV_CONFIG_ERROR_PARSE,
  KV_CONFIG_ERROR_UNKNOWN_SECTION,
  KV_CONFIG_ERROR_UNKNOWN_KEY,
  KV_CONFIG_ERROR_INVALID_VALUE,
  KV_CONFIG_ERROR_MISSING_KEY,
  KV_CONFIG_ERROR_UNKNOWN_TYPE,
  KV_CONFIG_ERROR_DUPLICATE,
} KvConfigError;

KVTIER_AVAILABLE_IN_ALL
GQuark kv_config_error_quark (void);

#define KV_TYPE_CONFIG (kv_config_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvConfig, kv_config, KV, CONFIG, GObject)

KVTIER_AVAILABLE_IN_ALL
KvConfig         *kv_config_new              (KvTierRegistry  *registry);
KVTIER_AVAILABLE_IN_ALL
KvConfig         *kv_config_new_from_file    (KvTierRegistry  *registry,
                                              const char      *path,
                                              GError         **error);
KVTIER_AVAILABLE_IN_ALL
KvConfig         *kv_config_new_from_data    (KvTierRegistry  *registry,
                                              const char      *data,
                                              gssize           length,
                                              const char      *origin,
                                              GError         **error);
KVTIER_AVAILABLE_IN_ALL
KvConfig         *kv_config_new_from_variant (KvTierRegistry  *registry,
                                              GVariant        *variant,
                                              GError         **error);

KVTIER_AVAILABLE_IN_ALL
KvTierRegistry   *kv_config_get_registry     (KvConfig        *self);
KVTIER_AVAILABLE_IN_ALL
gboolean          kv_config_set_value        (KvConfig        *self,
                                              const char      *section,
                                              const char      *key,
                                              const char      *value,
                                              GError         **error);
KVTIER_AVAILABLE_IN_ALL
char             *kv_config_get_value        (KvConfig        *self,
                                              const char      *section,
                                              const char      *key);
KVTIER_AVAILABLE_IN_ALL
char            **kv_config_get_tier_names   (KvConfig        *self);
KVTIER_AVAILABLE_IN_ALL
const char       *kv_config_get_tier_type    (KvConfig        *self,
                                              const char      *name);
KVTIER_AVAILABLE_IN_ALL
const char       *kv_config_get_device_type  (KvConfig        *self);
KVTIER_AVAILABLE_IN_ALL
guint64           kv_config_get_primary_size (KvConfig        *self);
KVTIER_AVAILABLE_IN_ALL
guint64           kv_config_get_slot_size    (KvConfig        *self);

KVTIER_AVAILABLE_IN_ALL
GVariant         *kv_config_to_variant       (KvConfig        *self);
KVTIER_AVAILABLE_IN_ALL
char             *kv_config_to_data          (KvConfig        *self,
                                              gsize           *length);

KVTIER_AVAILABLE_IN_ALL
gboolean          kv_config_check            (KvConfig        *self,
                                              GError         **error);
KVTIER_AVAILABLE_IN_ALL
KvPrimaryTier    *kv_config_create_primary   (KvConfig        *self,
                                              GError         **error);
KVTIER_AVAILABLE_IN_ALL
KvTieringManager *kv_config_create_manager   (KvConfig        *self,
                                              GError         **error);
KVTIER_AVAILABLE_IN_ALL
KvDevice         *kv_config_create_device    (KvConfig        *self,
                                              KvHostBuffer    *primary,
                                              GError         **error);

G_END_DECLS
