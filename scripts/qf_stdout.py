"""The exit of the scripts/ tools written in Python: a tool's main, then its standard output
flushed, so that output that cannot be written (a closed stream, a full disk, a closed pipe) is
exit status 1 with one line on the standard error, as for the C tools (docs/tools.md); an
argparse parser whose --help does not hide such an error; the opening of their input files
(open_input), which are regular files of bounded size, as the C tools read; and the text of
their plots (plot_text)."""
import argparse
import errno
import io
import os
import stat
import sys

INPUT_MAX = 1 << 30  # bytes: no CSV or page these tools read comes near it


def open_input(path, **kwargs):
    """open(path, **kwargs) for reading a regular file of at most INPUT_MAX bytes; else the OSError
    that names path and why ("not a regular file": a device, FIFO or folder, which could block or
    never end; or its size), as a failed open would."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", path)
    if st.st_size > INPUT_MAX:
        raise OSError(errno.EFBIG, "%d bytes, more than the %d read" % (st.st_size, INPUT_MAX),
                      path)
    return open(path, **kwargs)


def run(name, main, *args):
    """Exits with main(*args)'s status (its return value, or the code of the SystemExit it raises;
    None is 0), or 1 when the standard output is closed or cannot be written; `name` starts the
    message."""
    if sys.stdout is None:  # started with it closed: print() would drop text in silence
        sys.stdout = _Closed()  # main runs (its usage errors are its own), each write fails
    try:
        try:
            rc = main(*args)
        except SystemExit as e:
            rc = e.code
        sys.stdout.flush()
    except (OSError, StdoutError) as e:  # the standard output full, or a pipe closed
        if isinstance(e, StdoutError):
            e = e.err
        elif e.filename is not None:  # a named file's error, main's own to report
            raise
        print("%s: cannot write the standard output: %s" % (name, e.strerror or e),
              file=sys.stderr)
        if not isinstance(sys.stdout, _Closed):  # no second error when Python flushes at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rc = 1
    sys.exit(rc)


def why(err):
    """The reason an error gives in a one-line message that names the file itself: an OSError's
    strerror ("No such file or directory", "not a regular file"), not its "[Errno 2] ...: 'path'"
    text; any other error's text."""
    return err.strerror if isinstance(err, OSError) and err.strerror else str(err)


def plot_text(text):
    """text (a run's, recipe's or shape's name) as matplotlib draws it unchanged: each "$"
    escaped, since two of them would start TeX math (mathtext), which also draws the plots' own
    labels (a log axis's 10^x) and so stays on."""
    return text.replace("$", "\\$")


class StdoutError(Exception):
    """A write to the standard output failed (err, the OSError): for a tool whose main turns every
    other error into its own message, to raise through it to run()."""

    def __init__(self, err):
        super().__init__(str(err))
        self.err = err


def print_line(text, file=None):
    """print(text) to file (default: the standard output), flushed; a failed write raises
    StdoutError, which a main that turns every other error into its own message lets through to
    run()."""
    try:
        print(text, file=file, flush=True)
    except OSError as e:
        raise StdoutError(e) from None


class _Closed(io.TextIOBase):
    """The standard output of a process started without one: every write is the error EBADF
    (Bad file descriptor), as the C tools' writes to a closed descriptor."""

    def writable(self):
        return True

    def write(self, text):
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose --help text goes through the standard output's own errors
    (argparse drops them), so that run() sees a help that could not be written; options spelled
    in full, as the C tools take them (no abbreviation: "--cs" is not "--csv")."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def print_help(self, file=None):
        (file or sys.stdout).write(self.format_help())
