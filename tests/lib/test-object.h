/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Objects made from lists of named properties, as the tier constructors of
 * the tests take them (`"deadline-ms", 1000, "layout", ..., NULL`): a later
 * setting of a name replaces an earlier one, so a test's settings win over
 * a constructor's defaults. */

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct _TestProperties TestProperties;

TestProperties *test_properties_new           (GType            type);
void            test_properties_free          (TestProperties  *self);
void            test_properties_set           (TestProperties  *self,
                                               const char      *name,
                                               GType            value_type,
                                               ...);
void            test_properties_collect       (TestProperties  *self,
                                               const char      *first_property,
                                               va_list          args);
GObject        *test_properties_new_initable  (TestProperties  *self,
                                               GError         **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (TestProperties, test_properties_free)

G_END_DECLS
