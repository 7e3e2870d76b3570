/* tool_file.h: the output files the tools write (qfuse-bench --csv, qfuse-demo --loss-csv):
 * checked before any work, so that a bad path fails at once, GPU or not, and their folders made
 * when the file is written. */
#ifndef QF_TOOL_FILE_H
#define QF_TOOL_FILE_H

/* 0 when a file can be written at path: an existing regular file that is writable, or a new one
 * under the nearest existing ancestor directory, writable (tool_make_parents creates the
 * directories between). A new file in an existing folder is tried: created and removed again
 * (access(2) passes root where the filesystem refuses one, as /proc does); nothing else is
 * created or changed, and nothing is left. -1 with errno otherwise: ENOENT (empty
 * path, or a "." or ".." after a folder that does not exist yet), ESPIPE ("-", which other tools
 * read as the standard output; "./-" names such a file), EISDIR (a path ending in '/',
 * or a directory there), EINVAL (another kind of file is there), ENOTDIR (an ancestor is a file),
 * or access(2)'s. */
int tool_out_check(const char *path);

/* What tool_out_check's errno err for path means for the tool's message: for EINVAL "not a
 * regular file (a device, pipe or socket is there)", for ESPIPE what "-" is not, for ENOENT from
 * a "." or ".." after a folder that does not exist yet that, for EISDIR from a path ending in '/'
 * that it names a folder, else strerror(err). A static string. */
const char *tool_out_why(const char *path, int err);

/* Creates the missing parent directories of path (mkdir -p of its dirname, mode 0755 before the
 * umask). 0, or -1 with errno from the first directory that could not be made. */
int tool_make_parents(const char *path);

/* 1 when paths a and b both exist and are one file (one device and inode: a link, or another
 * spelling of the path), else 0 with errno 0. */
int tool_same_file(const char *a, const char *b);

#endif /* QF_TOOL_FILE_H */
