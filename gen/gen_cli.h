/* gen_cli.h: the qfuse-gen command line (parsing and the generate / --list / --check commands). */
#ifndef QF_GEN_CLI_H
#define QF_GEN_CLI_H

#include <stdio.h>

#define QF_GEN_VERSION "0.1.0"

/* Runs qfuse-gen with argv (argv[0] = program name), printing results to out and errors to err.
 * Returns the exit status: 0 success, 1 error, 2 usage error. Never exits. */
int qf_gen_cli_main(int argc, char **argv, FILE *out, FILE *err);

#endif /* QF_GEN_CLI_H */
