"""The exit of the scripts/ tools written in Python: a tool's main, then its standard output
flushed, so that output that cannot be written (a closed stream, a full disk, a closed pipe) is
exit status 1 with one line on the standard error, as for the C tools (docs/tools.md); and an
argparse parser whose --help does not hide such an error."""
import argparse
import errno
import os
import sys


def run(name, main, *args):
    """Exits with main(*args)'s status (its return value, or the code of the SystemExit it raises;
    None is 0), or 1 when the standard output is closed or cannot be written; `name` starts the
    message."""
    if sys.stdout is None:  # started with the standard output closed: print() would drop text
        print("%s: cannot write the standard output: %s" % (name, os.strerror(errno.EBADF)),
              file=sys.stderr)
        sys.exit(1)
    try:
        try:
            rc = main(*args)
        except SystemExit as e:
            rc = e.code
        sys.stdout.flush()
    except OSError as e:  # the standard output full, or a pipe closed
        if e.filename is not None:  # a named file's error, main's own to report
            raise
        print("%s: cannot write the standard output: %s" % (name, e.strerror or e),
              file=sys.stderr)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        rc = 1
    sys.exit(rc)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose --help text goes through the standard output's own errors
    (argparse drops them), so that run() sees a help that could not be written."""

    def print_help(self, file=None):
        (file or sys.stdout).write(self.format_help())
