/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What every tests/fuzz/fuzz-<name>.c defines: libFuzzer's entry points.
 * The same object is linked either with libFuzzer (clang builds with
 * -Dfuzzing) or with fuzz-replay.c, which feeds it every file of the
 * target's seed corpus as an ordinary test. See README.md. */

#include <glib.h>
#include <stddef.h>
#include <stdint.h>

/* Called once per input; must not keep state between inputs, and must
 * return 0. A crash, sanitizer report or failed g_assert is a finding. */
int LLVMFuzzerTestOneInput (const uint8_t *data,
                            size_t         size);

/* Optional, called once before the first input. */
int LLVMFuzzerInitialize   (int           *argc,
                            char        ***argv);

/* Criticals and warnings abort the process: a g_return_if_fail() hit by
 * bad input is a finding, as it is in the test suites under
 * G_DEBUG=fatal-criticals. */
static inline void
fuzz_make_criticals_fatal (void)
{
  g_log_set_always_fatal (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
}
