/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>

#include "kv-config.h"

G_BEGIN_DECLS

/* The document behind a KvConfig: its sections and their checked values,
 * whatever they were read from (key-file text, an a{sv} dictionary or
 * kv_config_set_value()). Loaders fill it through
 * kv_config_document_add_section(); the builder reads it. */

#define KV_CONFIG_DICTIONARY_ORIGIN "configuration dictionary"
#define KV_CONFIG_DEFAULT_ORIGIN "configuration"

typedef enum {
  KV_CONFIG_SECTION_PRIMARY,
  KV_CONFIG_SECTION_DEVICE,
  KV_CONFIG_SECTION_TIER,
  KV_CONFIG_SECTION_BACKPRESSURE, /* backpressure keys every tier inherits */
} KvConfigSectionKind;

/* What a key sets. */
typedef enum {
  KV_CONFIG_TARGET_PROPERTY,      /* the property of the entry's owner class */
  KV_CONFIG_TARGET_PRIMARY_SIZE,  /* [primary] size: the slot count × slot-size */
  KV_CONFIG_TARGET_POLICY,        /* [primary] policy: an eviction policy by name */
  KV_CONFIG_TARGET_SHARED,        /* [primary] shared: a memfd buffer */
  KV_CONFIG_TARGET_BACKPRESSURE,  /* `backpressure` */
  KV_CONFIG_TARGET_BP_POLICY,     /* `backpressure-policy` */
  KV_CONFIG_TARGET_BP_RAMP,       /* `backpressure-ramp-factor` (throttled policy) */
  KV_CONFIG_TARGET_DETECTOR,      /* `backpressure-<EMA detector property>` */
} KvConfigTarget;

typedef struct
{
  char           *key;
  KvConfigTarget  target;
  GType           owner;    /* KV_CONFIG_TARGET_PROPERTY: the class */
  GParamSpec     *pspec;    /* parses and prints the value; names the property */
  GValue          value;
  guint           line;
} KvConfigEntry;

typedef struct
{
  KvConfigSectionKind  kind;
  char                *name;       /* tier name */
  char                *type_name;  /* device and tier sections */
  GType                type;
  guint                line;
  guint                type_line;
  char                *module;     /* tier sections: `module`, absolute */
  GPtrArray           *entries;    /* (element-type KvConfigEntry), in order */
} KvConfigSection;

typedef struct
{
  KvTierRegistry  *registry;
  char            *origin;    /* file name, dictionary, or NULL */
  char            *base_dir;  /* a file's directory: relative `module` paths */
  KvConfigSection *primary;
  KvConfigSection *device;    /* nullable */
  GPtrArray       *tiers;     /* (element-type KvConfigSection) */
  KvConfigSection *backpressure;  /* nullable: [backpressure] */
} KvConfigDocument;

/* Where an error is: the origin and a line (0 when unknown). */
typedef struct
{
  const char *origin;
  guint       line;
} KvConfigLocation;

/* One key of a section being loaded: text (key files) or a variant. */
typedef struct
{
  const char *key;
  const char *text;
  GVariant   *variant;
  guint       line;
} KvConfigRawKey;

G_GNUC_INTERNAL
KvConfigDocument *kv_config_document_new            (KvTierRegistry          *registry,
                                                     const char              *origin);
G_GNUC_INTERNAL
void              kv_config_document_free           (KvConfigDocument        *self);
G_GNUC_INTERNAL
const char       *kv_config_document_get_origin     (const KvConfigDocument  *self);
G_GNUC_INTERNAL
KvConfigSection  *kv_config_document_find_tier      (const KvConfigDocument  *self,
                                                     const char              *name);
G_GNUC_INTERNAL
KvConfigSection  *kv_config_document_find_section   (const KvConfigDocument  *self,
                                                     const char              *title,
                                                     KvConfigSectionKind     *out_kind,
                                                     char                   **out_name);
G_GNUC_INTERNAL
gboolean          kv_config_document_add_section    (KvConfigDocument        *self,
                                                     KvConfigSectionKind      kind,
                                                     const char              *name,
                                                     guint                    line,
                                                     KvConfigRawKey          *keys,
                                                     guint                    n_keys,
                                                     GError                 **error);
G_GNUC_INTERNAL
gboolean          kv_config_document_set_type       (KvConfigDocument        *self,
                                                     KvConfigSection         *section,
                                                     const char              *type_name,
                                                     const KvConfigLocation  *loc,
                                                     GError                 **error);
G_GNUC_INTERNAL
guint64           kv_config_document_get_primary_size (const KvConfigDocument *self);
G_GNUC_INTERNAL
guint64           kv_config_document_get_slot_size  (const KvConfigDocument  *self);

G_GNUC_INTERNAL
gboolean          kv_config_section_parse_title     (const char              *title,
                                                     KvConfigSectionKind     *out_kind,
                                                     char                   **out_name);
G_GNUC_INTERNAL
gboolean          kv_config_is_valid_name           (const char              *name);
G_GNUC_INTERNAL
char             *kv_config_section_title           (const KvConfigSection   *section);
G_GNUC_INTERNAL
KvConfigEntry    *kv_config_section_find_entry      (const KvConfigSection   *section,
                                                     const char              *key);
G_GNUC_INTERNAL
gint              kv_config_section_get_enum        (const KvConfigSection   *section,
                                                     const char              *key,
                                                     gint                     fallback);
G_GNUC_INTERNAL
gboolean          kv_config_section_set             (KvConfigSection         *section,
                                                     const char              *key,
                                                     const char              *text,
                                                     GVariant                *variant,
                                                     const KvConfigLocation  *loc,
                                                     GError                 **error);
G_GNUC_INTERNAL
gboolean          kv_config_section_validate        (const KvConfigSection   *section,
                                                     const KvConfigSection   *defaults,
                                                     const char              *origin,
                                                     GError                 **error);
G_GNUC_INTERNAL
gboolean          kv_config_document_validate_tiers (const KvConfigDocument  *self,
                                                     GError                 **error);
G_GNUC_INTERNAL
KvConfigSection  *kv_config_section_merge_backpressure (const KvConfigSection *section,
                                                        const KvConfigSection *defaults);
G_GNUC_INTERNAL
void              kv_config_section_free_merged     (KvConfigSection         *merged);

G_GNUC_INTERNAL G_GNUC_PRINTF (6, 7)
void              kv_config_set_error               (GError                 **error,
                                                     KvConfigError            code,
                                                     const KvConfigLocation  *loc,
                                                     const KvConfigSection   *section,
                                                     const char              *key,
                                                     const char              *format,
                                                     ...);

G_END_DECLS
