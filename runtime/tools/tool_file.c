/* tool_file.c: the tools' output files (tool_file.h). */
#include "tool_file.h"
#include "qf_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* 0 when every "." or ".." component of path follows a folder that exists now; else -1 with errno
 * ENOENT, as open(2) answers today. NOTES: tool_make_parents would create the missing folders
 * first, and "new/../x" would then name x: an existing file that tool_same_file cannot see
 * behind a folder that does not exist yet (a --loss-csv over the --weights it reads). */
static int tool_dots_resolve(const char *path) {
    for (const char *c = path; *c;) {
        const size_t n = strcspn(c, "/");
        if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) {
            char *prefix = c == path ? strdup(".") : strndup(path, (size_t)(c - path));
            struct stat st;
            const int ok = prefix && stat(prefix, &st) == 0 && S_ISDIR(st.st_mode);
            free(prefix);
            if (!ok) {
                errno = ENOENT;
                return -1;
            }
        }
        c += n;
        c += *c == '/';
    }
    return 0;
}

const char *tool_out_why(const char *path, int err) {
    return err == EINVAL   ? "not a regular file (a device, pipe or socket is there)"
           : err == ESPIPE ? "'-' does not mean the standard output here, which carries the "
                             "tool's own text; name a file (./- for one called '-')"
           : err == ENOENT && *path && tool_dots_resolve(path) != 0
               ? "a '.' or '..' after a folder that does not exist yet"
           : err == EISDIR && *path && path[strlen(path) - 1] == '/'
               ? "a path ending in '/' names a folder; name the file"
               : strerror(err);
}

/* Creates path (new, in an existing folder) and removes it again: 0, or -1 with open(2)'s errno.
 * access(2) lets root pass where the filesystem refuses a new file (/proc, /sys). */
static int tool_out_probe(const char *path) {
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno == EEXIST ? 0 : -1; /* made meanwhile: the tool's own open decides */
    close(fd);
    unlink(path);
    return 0;
}

int tool_out_check(const char *path) {
    struct stat st;
    if (!*path) {
        errno = ENOENT;
        return -1;
    }
    if (strcmp(path, "-") == 0) {
        errno = ESPIPE;
        return -1;
    }
    if (path[strlen(path) - 1] == '/') { /* names a folder, existing or not */
        errno = EISDIR;
        return -1;
    }
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
            return -1;
        }
        return access(path, W_OK);
    }
    if (errno != ENOENT || tool_dots_resolve(path) != 0)
        return -1;
    char *dir = strdup(path);
    if (!dir)
        return -1;
    const char *d = NULL; /* the nearest existing ancestor, a folder */
    int parent = 1;       /* d is path's own folder */
    for (;; parent = 0) {
        char *slash = strrchr(dir, '/');
        if (!slash) {
            d = ".";
            break;
        }
        *slash = '\0';
        const char *up = slash == dir ? "/" : dir;
        if (stat(up, &st) == 0) {
            if (S_ISDIR(st.st_mode))
                d = up;
            else
                errno = ENOTDIR;
            break;
        }
        if (errno != ENOENT || slash == dir)
            break;
    }
    int rc = d ? access(d, W_OK | X_OK) : -1;
    if (rc == 0 && parent)
        rc = tool_out_probe(path);
    const int e = errno;
    free(dir);
    errno = e;
    return rc;
}

int tool_make_parents(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return 0; /* in the working directory, or directly under / */
    char *dir = strndup(path, (size_t)(slash - path));
    if (!dir)
        return -1;
    const int err = qf_mkdirs(dir, 0755, NULL);
    free(dir);
    errno = err;
    return err ? -1 : 0;
}

int tool_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    const int same = stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
                     sa.st_ino == sb.st_ino;
    errno = 0;
    return same;
}
