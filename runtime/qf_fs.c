/* qf_fs.c: see qf_fs.h. */
#include "qf_fs.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* 0 when dir is (now) a directory; else errno. A failed mkdir of something already a directory
 * is no failure: EEXIST, but also EACCES or EROFS under a parent this process cannot write. */
static int qf_mkdir1(const char *dir, mode_t mode, int *created) {
    *created = 0;
    if (mkdir(dir, mode) == 0) {
        *created = 1;
        return 0;
    }
    const int err = errno;
    struct stat st;
    if (stat(dir, &st) != 0)
        return err; /* EEXIST with nothing behind it: a link to nothing */
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

int qf_mkdirs(const char *path, mode_t mode, size_t *failed_len) {
    char buf[PATH_MAX];
    const size_t n = strlen(path);
    if (failed_len)
        *failed_len = n;
    if (n == 0)
        return ENOENT;
    if (n >= sizeof buf)
        return ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    size_t first_made = 0; /* the end of the first component this call made (0: none yet) */
    for (size_t i = 1, start = 0; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        if (buf[i - 1] == '/') { /* "a//b", or a trailing '/' */
            start = i + 1;
            continue;
        }
        const size_t len = i - start; /* the component buf[start, i) */
        const int dotdot = len == 2 && buf[start] == '.' && buf[start + 1] == '.';
        const char c = buf[i];
        buf[i] = '\0';
        int created = 0;
        /* ".." after a directory this call made: "new/../x" would leave "new" behind */
        const int err = dotdot && first_made ? ENOENT : qf_mkdir1(buf, mode, &created);
        buf[i] = c;
        start = i + 1;
        if (!err && created && !first_made)
            first_made = i;
        if (err) {
            if (failed_len)
                *failed_len = i;
            /* all or nothing: the directories made above the failure are removed, deepest
             * first (each was made empty; one that is no longer empty stays) */
            for (size_t j = i; first_made && j-- > first_made;) /* down to first_made itself */
                if (buf[j] == '/' && buf[j - 1] != '/') {
                    buf[j] = '\0';
                    rmdir(buf);
                }
            return err;
        }
    }
    return 0;
}

int qf_mkdirs_dotdot(int err, const char *path, size_t failed_len) {
    return err == ENOENT && failed_len >= 2 && failed_len <= strlen(path) &&
           path[failed_len - 1] == '.' && path[failed_len - 2] == '.' &&
           (failed_len == 2 || path[failed_len - 3] == '/');
}

const char *qf_mkdirs_why(int err, const char *path, size_t failed_len) {
    return err == EEXIST ? "a symbolic link to nothing"
           : qf_mkdirs_dotdot(err, path, failed_len)
               ? "a '..' after a folder that does not exist yet"
               : strerror(err);
}
