/* main.c: entry point of qfuse-gen; the command line lives in gen_cli.c. */
#include <stdio.h>

#include "gen_cli.h"
#include "tool_common.h"

int main(int argc, char **argv) {
    tool_std_fds();
    return tool_stdout_status("qfuse-gen", qf_gen_cli_main(argc, argv, stdout, stderr));
}
