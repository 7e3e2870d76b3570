/* main.c: entry point of qfuse-gen; the command line lives in gen_cli.c. */
#include "gen_cli.h"

int main(int argc, char **argv) {
    return qf_gen_cli_main(argc, argv, stdout, stderr);
}
