/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-leak-check.h"

#if defined(__SANITIZE_ADDRESS__)
# include <sanitizer/lsan_interface.h>
#endif

/* In the sanitizer build, runs LeakSanitizer's check at once (the check at
 * exit is then skipped). The tests that make TLS connections call it as
 * main() returns. LeakSanitizer's tracer itself (not a leak) crashed in
 * the check at exit of the peer TLS test in about one full run in two
 * ("Tracer caught signal 11"); checked here, before the exit handlers, it
 * passed 4 runs of 4. Not understood: with GSocketClient's proxy turned
 * off the crash happens every run, here as well. */
void
test_leak_check_now (void)
{
#if defined(__SANITIZE_ADDRESS__)
  __lsan_do_leak_check ();
#endif
}
