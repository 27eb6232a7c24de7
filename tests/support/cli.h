/*
 * cli.h - run the `nexus` binary from a test, as a separate process: the test binaries link the
 * library only, so the CLI is exercised the way a user runs it (its exit status, its output).
 * The binary is $NX_NEXUS_BIN, or `nexus` in the directory above the test binary's own
 * (build/tests/test_x -> build/nexus; build-san/ likewise).
 */
#ifndef NX_TEST_CLI_H
#define NX_TEST_CLI_H

#include <stdbool.h>

/*
 * Runs `nexus args[0] args[1] ...` (args NULL-ended; args[0] is the command, e.g. "route").
 * Its stdout (and its stderr too when with_stderr; otherwise stderr goes to the test's own)
 * is returned in *out when out is not NULL (NUL-ended; free with free()). Returns the exit
 * status, 128 + the signal number when it was killed, or -1 when it could not be started
 * (with a message on stderr).
 */
int test_cli(const char *const *args, bool with_stderr, char **out);

#endif
