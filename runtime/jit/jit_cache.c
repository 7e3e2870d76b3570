/* jit_cache.c: the on-disk kernel cache: directory choice, atomic entry writes, validated reads. */
#include "jit_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "jit_compile.h"
#include "jit_key.h"
#include "qf_arch.h"
#include "qf_fs.h"

#define QF_CACHE_MAGIC "QFUSEKC1"
#define QF_CACHE_FORMAT 1u              /* bump when the header or the payload's meaning changes */
#define QF_CACHE_MAX_PAYLOAD (1u << 30) /* a CUBIN is KBs to MBs; a larger size field is damage */

/* The fixed header in front of every entry's CUBIN. Native byte order: a cache directory belongs
 * to one host, and a foreign-endian file fails the format check rather than being misread. */
typedef struct qf_cache_header {
    char magic[8];   /* QF_CACHE_MAGIC, no NUL */
    uint32_t format; /* QF_CACHE_FORMAT */
    char key[QF_KEY_HEX_LEN];
    int32_t arch; /* 10*major+minor the CUBIN was built for */
    int32_t nvrtc_major, nvrtc_minor;
    uint64_t size;     /* payload bytes following the header */
    uint64_t checksum; /* XXH64(payload, seed 0) */
} qf_cache_header;
_Static_assert(sizeof(qf_cache_header) == 72, "qf_cache_header must have no padding");
_Static_assert(offsetof(qf_cache_header, size) == 56, "qf_cache_header layout changed");

/* {===================================================================== directory */

/* NOTES: the only mutable static state: the memoized directory decision. A mutex rather than
 * pthread_once because qf_cache_reset must be able to undo the decision. */
static pthread_mutex_t qf_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static int qf_cache_decided;
static const char *qf_cache_chosen; /* qf_cache_path, or NULL for memory-only */
static char qf_cache_path[PATH_MAX];
static int qf_cache_read_only; /* the chosen directory is read, never written */

/* The length of path without its trailing slashes ("/x/" -> 2, "/" -> 0), for joining. */
static int qf_cache_trimmed(const char *path) {
    size_t n = strlen(path);
    while (n > 0 && path[n - 1] == '/')
        n--;
    return n > INT_MAX ? INT_MAX : (int)n;
}

/* Where the cache directory comes from, by the precedence qf_cache_resolve documents: a set
 * QFUSE_CACHE_DIR (absolute or not), else an absolute XDG_CACHE_HOME, else an absolute HOME. */
typedef enum { QF_SRC_DIR, QF_SRC_XDG, QF_SRC_HOME, QF_SRC_NONE } qf_cache_src;

static qf_cache_src qf_cache_source(void) {
    const char *dir = getenv("QFUSE_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    return dir && *dir                ? QF_SRC_DIR
           : xdg && xdg[0] == '/'     ? QF_SRC_XDG
           : home && home[0] == '/'   ? QF_SRC_HOME /* a relative one would follow the cwd */
                                      : QF_SRC_NONE;
}

int qf_cache_resolve(char *buf, size_t cap) {
    const char *dir = getenv("QFUSE_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    struct stat st;
    int n;
    switch (qf_cache_source()) {
    case QF_SRC_DIR:
        if (dir[0] != '/')
            return EINVAL; /* relative: it would follow the working directory */
        n = snprintf(buf, cap, "%s", dir);
        break;
    case QF_SRC_XDG:
        n = snprintf(buf, cap, "%.*s/qfuse", qf_cache_trimmed(xdg), xdg);
        break;
    case QF_SRC_HOME:
        n = snprintf(buf, cap, "%.*s/.cache/qfuse", qf_cache_trimmed(home), home);
        if (n >= 0 && (size_t)n < cap && (stat(home, &st) != 0 || !S_ISDIR(st.st_mode)))
            return ENOTDIR; /* never made: a service account's HOME is often /nonexistent */
        break;
    default:
        return ENOENT;
    }
    return n < 0 || (size_t)n >= cap ? ENAMETOOLONG : 0;
}

const char *qf_cache_resolve_why(int err, char *buf, size_t cap) {
    static const char *const from[] = {[QF_SRC_DIR] = "QFUSE_CACHE_DIR, or qfuse-cache's --dir",
                                       [QF_SRC_XDG] = "$XDG_CACHE_HOME/qfuse",
                                       [QF_SRC_HOME] = "$HOME/.cache/qfuse",
                                       [QF_SRC_NONE] = "none"};
    const char *dir = getenv("QFUSE_CACHE_DIR"), *home = getenv("HOME");
    if (err == EINVAL)
        snprintf(buf, cap, "QFUSE_CACHE_DIR=%s is not an absolute path", dir ? dir : "");
    else if (err == ENOTDIR)
        snprintf(buf, cap, "HOME=%s is not an existing directory, so there is no ~/.cache/qfuse",
                 home ? home : "");
    else if (err == ENOENT)
        snprintf(buf, cap, "QFUSE_CACHE_DIR, XDG_CACHE_HOME and HOME are unset, empty or not "
                           "absolute paths, so there is no kernel cache directory");
    else if (err == ENAMETOOLONG)
        snprintf(buf, cap, "the kernel cache directory's path (%s) is longer than %d bytes",
                 from[qf_cache_source()], PATH_MAX - 1);
    else
        snprintf(buf, cap, "the kernel cache directory's path cannot be formed (%s)",
                 strerror(err));
    return buf;
}

/* mkdir -p (qf_mkdirs), creating each missing directory with mode 0700, then checks that path is
 * a directory this process may create files in. Returns 0, or EACCES/EROFS with *read_only set
 * when it is an existing directory this process can only read, or another errno value (with
 * qf_mkdirs' *failed_len; all of path when the check failed). */
static int qf_cache_mkdirs(const char *path, int *read_only, size_t *failed_len) {
    *read_only = 0;
    *failed_len = strlen(path);
    const int made = qf_mkdirs(path, 0700, failed_len);
    if (made)
        return made;
    if (access(path, W_OK | X_OK) == 0)
        return 0;
    const int err = errno;
    *read_only = (err == EACCES || err == EROFS) && access(path, R_OK | X_OK) == 0;
    return err;
}

int qf_cache_dir_open_to_all(const char *dir, unsigned *mode) {
    struct stat st;
    if (stat(dir, &st) != 0 || !(st.st_mode & S_IWOTH))
        return 0;
    *mode = (unsigned)(st.st_mode & 07777);
    return 1;
}

/* 1 (after a warning) when the chosen directory is writable by every user (it is not used). */
static int qf_cache_world_writable(const char *dir) {
    unsigned mode;
    if (!qf_cache_dir_open_to_all(dir, &mode))
        return 0;
    qf_warn("kernel cache directory %s is writable by every user (mode %04o): anyone could put "
            "kernels there that this process would load; using the in-memory cache only (set "
            "QFUSE_CACHE_DIR to a directory that only you or your group can write)", dir, mode);
    return 1;
}

/* Decides the directory (called once under the mutex); warns when falling back to memory-only,
 * or when the directory can only be read (entries are loaded, none stored). */
static const char *qf_cache_decide(void) {
    if (qf_env_flag("QFUSE_DISABLE_DISK_CACHE"))
        return NULL;
    int err = qf_cache_resolve(qf_cache_path, sizeof qf_cache_path), ro = 0;
    size_t bad = 0; /* qf_cache_mkdirs' failed_len */
    const char *set = getenv("QFUSE_CACHE_DIR");
    const int set_empty = set && !*set; /* the default, but said, as a relative path is */
    if (!err && set_empty)
        qf_warn("QFUSE_CACHE_DIR is set but empty; using %s", qf_cache_path);
    if (err == ENOTDIR || err == ENOENT || err == EINVAL) {
        char why[PATH_MAX + 128];
        qf_warn("%s; using the in-memory cache only (%s)",
                qf_cache_resolve_why(err, why, sizeof why),
                set_empty ? "QFUSE_CACHE_DIR is set but empty: set it to a directory for a disk "
                            "cache"
                          : "set QFUSE_CACHE_DIR to an absolute path for a disk cache");
        return NULL;
    }
    if (!err && qf_env_flag("QFUSE_CACHE_READONLY")) { /* use the entries, never write */
        struct stat st;
        const int there = stat(qf_cache_path, &st) == 0;
        if (there && S_ISDIR(st.st_mode)) {
            if (qf_cache_world_writable(qf_cache_path))
                return NULL;
            qf_cache_read_only = 1;
            return qf_cache_path;
        }
        qf_warn("QFUSE_CACHE_READONLY is on, but kernel cache directory %s %s; using the "
                "in-memory cache only", qf_cache_path,
                there ? "is not a directory" : "does not exist");
        return NULL;
    }
    if (!err)
        err = qf_cache_mkdirs(qf_cache_path, &ro, &bad);
    if ((!err || ro) && qf_cache_world_writable(qf_cache_path))
        return NULL;
    if (err && ro) {
        qf_warn("kernel cache directory %s is read-only (%s); its entries are used, new kernels "
                "are not stored", qf_cache_path, strerror(err));
        qf_cache_read_only = 1;
        return qf_cache_path;
    }
    if (err) {
        qf_warn("kernel cache directory %s cannot be created or written (%s); using the "
                "in-memory cache only", qf_cache_path, qf_mkdirs_why(err, qf_cache_path, bad));
        return NULL;
    }
    return qf_cache_path;
}

const char *qf_cache_dir(void) {
    pthread_mutex_lock(&qf_cache_mu);
    if (!qf_cache_decided) {
        qf_cache_chosen = qf_cache_decide();
        qf_cache_decided = 1;
    }
    const char *dir = qf_cache_chosen;
    pthread_mutex_unlock(&qf_cache_mu);
    return dir;
}

int qf_cache_dir_read_only(void) {
    (void)qf_cache_dir();
    pthread_mutex_lock(&qf_cache_mu);
    const int ro = qf_cache_read_only;
    pthread_mutex_unlock(&qf_cache_mu);
    return ro;
}

void qf_cache_reset(void) {
    pthread_mutex_lock(&qf_cache_mu);
    qf_cache_decided = 0;
    qf_cache_read_only = 0;
    qf_cache_chosen = NULL;
    pthread_mutex_unlock(&qf_cache_mu);
}

/* =====================================================================} */

/* {===================================================================== entries */

/* A key is exactly what qf_key_compute writes; anything else is a bug, and it becomes part of a
 * path, so it is checked before use. */
static int qf_cache_key_ok(const char *key) {
    if (!key || strlen(key) != QF_KEY_HEX_LEN)
        return 0;
    return strspn(key, "0123456789abcdef") == QF_KEY_HEX_LEN;
}

/* <dir>/<label>.<key>.cubin, the label reduced to [A-Za-z0-9_-] (a readable prefix only: the key
 * alone identifies the entry). Returns 0, or -1 when the path does not fit. */
static int qf_cache_entry_path(char *buf, size_t cap, const char *dir, const char *label,
                               const char *key) {
    char clean[QF_CACHE_LABEL_MAX + 1];
    size_t n = 0;
    for (const char *s = label && *label ? label : "kernel"; *s && n < QF_CACHE_LABEL_MAX; s++) {
        int keep = (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
                   (*s >= 'A' && *s <= 'Z') || *s == '_' || *s == '-';
        clean[n++] = keep ? *s : '_';
    }
    clean[n] = '\0';
    int w = snprintf(buf, cap, "%s/%s.%s.cubin", dir, clean, key);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
}

/* read(2) (or write(2) when out) until all n bytes moved. Returns 0, or -1 with errno (EIO when
 * the file ends early or nothing was written). */
static int qf_cache_io_all(int fd, void *buf, size_t n, int out) {
    for (size_t done = 0; done < n;) {
        const ssize_t r = out ? write(fd, (const char *)buf + done, n - done)
                              : read(fd, (char *)buf + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

/* =====================================================================} */

/* {===================================================================== load */

#define QF_CACHE_WHY_LINK "not a regular file (a symbolic link)" /* entries are never followed */

/* Formats the reason an entry is rejected into why and returns its kind (for the warning). */
static const char *qf_cache_reject(const char *kind, char *why, size_t cap, const char *fmt, ...)
    QF_PRINTF(4, 5);
static const char *qf_cache_reject(const char *kind, char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return kind;
}

/* Checks h against what the caller wants. Returns NULL when it matches, else "corrupt" (damaged)
 * or "foreign" (intact but built for something else) with the reason in why. */
static const char *qf_cache_check_header(const qf_cache_header *h, const char *key, int arch,
                                         char *why, size_t cap) {
    int major = 0, minor = 0;
    qf_jit_nvrtc_version(&major, &minor);
    if (memcmp(h->magic, QF_CACHE_MAGIC, sizeof h->magic) != 0)
        return qf_cache_reject("corrupt", why, cap, "bad magic (not a qfuse cache entry)");
    if (h->format != QF_CACHE_FORMAT)
        return qf_cache_reject("foreign", why, cap, "format version %u, expected %u",
                               (unsigned)h->format, QF_CACHE_FORMAT);
    if (h->size > QF_CACHE_MAX_PAYLOAD)
        return qf_cache_reject("corrupt", why, cap, "implausible payload size %llu",
                               (unsigned long long)h->size);
    for (int i = 0; i < QF_KEY_HEX_LEN; i++) /* printed below, so checked first */
        if (!((h->key[i] >= '0' && h->key[i] <= '9') || (h->key[i] >= 'a' && h->key[i] <= 'f')))
            return qf_cache_reject("corrupt", why, cap,
                                   "its stored key is not %d lowercase hex digits",
                                   QF_KEY_HEX_LEN);
    if (memcmp(h->key, key, QF_KEY_HEX_LEN) != 0)
        return qf_cache_reject("foreign", why, cap, "key mismatch (it holds %.32s)", h->key);
    if (h->arch != arch)
        return qf_cache_reject("foreign", why, cap, "built for sm_%d, expected sm_%d", (int)h->arch,
                               arch);
    if (h->nvrtc_major != major || h->nvrtc_minor != minor)
        return qf_cache_reject("foreign", why, cap,
                               "built with NVRTC %d.%d, this process uses %d.%d",
                               (int)h->nvrtc_major, (int)h->nvrtc_minor, major, minor);
    return NULL;
}

/* Reads and validates the entry open on fd. On success returns NULL with *data malloc'ed; else
 * returns "corrupt"/"foreign" with the reason in why. */
static const char *qf_cache_read_entry(int fd, const char *key, int arch, void **data, size_t *size,
                                       char *why, size_t cap) {
    struct stat st;
    qf_cache_header h;
    if (fstat(fd, &st) != 0)
        return qf_cache_reject("unreadable", why, cap, "fstat: %s", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return qf_cache_reject("corrupt", why, cap, "not a regular file (%s)",
                               S_ISDIR(st.st_mode)    ? "a directory"
                               : S_ISFIFO(st.st_mode) ? "a FIFO"
                               : S_ISSOCK(st.st_mode) ? "a socket"
                               : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                            : "a special file");
    if (st.st_mode & S_IWOTH) /* anyone could have written the code it holds */
        return qf_cache_reject("untrusted", why, cap, "writable by every user (mode %04o)",
                               (unsigned)(st.st_mode & 07777));
    if (st.st_size < (off_t)sizeof h || qf_cache_io_all(fd, &h, sizeof h, 0) != 0)
        return qf_cache_reject("corrupt", why, cap,
                               "truncated (%lld bytes, the header alone is %zu)",
                               (long long)st.st_size, sizeof h);
    const char *kind = qf_cache_check_header(&h, key, arch, why, cap);
    if (kind)
        return kind;
    if ((uint64_t)st.st_size - sizeof h != h.size)
        return qf_cache_reject(
            "corrupt", why, cap, "truncated or padded (%llu payload bytes, header says %llu)",
            (unsigned long long)(st.st_size - sizeof h), (unsigned long long)h.size);
    void *buf = malloc(h.size ? h.size : 1);
    if (!buf)
        return qf_cache_reject("unreadable", why, cap, "no memory for %llu bytes",
                               (unsigned long long)h.size);
    if (qf_cache_io_all(fd, buf, h.size, 0) != 0 || XXH64(buf, h.size, 0) != h.checksum) {
        free(buf);
        return qf_cache_reject("corrupt", why, cap, "checksum mismatch");
    }
    *data = buf;
    *size = h.size;
    return NULL;
}

/* What follows a cache entry that could not be used, for its warning: the kernel is compiled
 * again, and the entry (when there is one to replace) replaced, unless the cache is read-only. */
static const char *qf_cache_miss_fate(int replace) {
    if (qf_cache_dir_read_only())
        return replace ? "the cache is read-only: the kernel is compiled in memory, the entry "
                         "left as it is"
                       : "the cache is read-only: the kernel is compiled in memory";
    return replace ? "it will be recompiled and replaced" : "it will be recompiled";
}

int qf_cache_load(const char *label, const char *key, int arch, void **data, size_t *size) {
    QF_ASSERT(qf_cache_key_ok(key) && data && size);
    char path[PATH_MAX], why[192];
    const char *dir = qf_cache_dir();
    *data = NULL;
    *size = 0;
    if (!dir || qf_cache_entry_path(path, sizeof path, dir, label, key) != 0)
        return 0;
    /* a FIFO must not block; a symbolic link is not followed (ELOOP) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    const char *kind;
    if (fd < 0 && errno == ELOOP) {
        kind = qf_cache_reject("corrupt", why, sizeof why, QF_CACHE_WHY_LINK);
    } else if (fd < 0) {
        if (errno != ENOENT) /* a plain miss is silent; anything else is worth a line */
            qf_warn("cannot read kernel cache entry %s (%s); %s", path, strerror(errno),
                    qf_cache_miss_fate(0));
        return 0;
    } else {
        kind = qf_cache_read_entry(fd, key, arch, data, size, why, sizeof why);
        close(fd);
    }
    if (kind) {
        qf_warn("ignoring %s kernel cache entry %s: %s; %s", kind, path, why,
                qf_cache_miss_fate(1));
        return 0;
    }
    return 1;
}

/* =====================================================================} */

/* {===================================================================== store */

/* Random bits for temporary names. NOTES: the pid alone is not unique when processes in different
 * PID namespaces (containers) share one cache directory; O_EXCL catches the rest. */
static uint64_t qf_cache_random(void) {
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r)
        return r;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ (uintptr_t)&r;
}

/* Creates <final>.tmp.<pid>.<random> (O_EXCL, mode 0644 under the umask: readable by the group of
 * a shared cache directory, writable by its owner only) and writes its name into tmp.
 * Returns the fd, or -1 with errno. */
static int qf_cache_open_temp(const char *final, char *tmp, size_t cap) {
    for (int attempt = 0; attempt < 8; attempt++) {
        int w = snprintf(tmp, cap, "%s.tmp.%ld.%016llx", final, (long)getpid(),
                         (unsigned long long)qf_cache_random());
        if (w < 0 || (size_t)w >= cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

/* Writes header and payload to fd and closes it. Returns NULL, or the failed step with errno.
 * NOTES: no fsync by default: a power cut can leave a short or zeroed entry, which the size and
 * checksum checks turn into a recompile; QFUSE_CACHE_FSYNC=1 trades store latency for that. */
static const char *qf_cache_write_entry(int fd, const qf_cache_header *h, const void *data,
                                        size_t size) {
    const char *step = NULL;
    if (qf_cache_io_all(fd, (void *)h, sizeof *h, 1) != 0 ||
        qf_cache_io_all(fd, (void *)data, size, 1) != 0)
        step = "write";
    else if (qf_env_flag("QFUSE_CACHE_FSYNC") && fsync(fd) != 0)
        step = "fsync";
    int err = errno;
    if (close(fd) != 0 && !step) {
        step = "close";
        err = errno;
    }
    errno = err;
    return step;
}

static void qf_cache_fill_header(qf_cache_header *h, const char *key, int arch, const void *data,
                                 size_t size) {
    int major = 0, minor = 0;
    qf_jit_nvrtc_version(&major, &minor);
    memset(h, 0, sizeof *h);
    memcpy(h->magic, QF_CACHE_MAGIC, sizeof h->magic);
    h->format = QF_CACHE_FORMAT;
    memcpy(h->key, key, QF_KEY_HEX_LEN);
    h->arch = arch;
    h->nvrtc_major = major;
    h->nvrtc_minor = minor;
    h->size = size;
    h->checksum = XXH64(data, size, 0);
}

static _Thread_local int qf_cache_stored; /* outcome of this thread's last qf_cache_store */

int qf_cache_last_stored(void) {
    return qf_cache_stored;
}

qf_status qf_cache_store(const char *label, const char *key, int arch, const void *data,
                         size_t size) {
    QF_ASSERT(qf_cache_key_ok(key) && (data || size == 0) && size <= QF_CACHE_MAX_PAYLOAD);
    char path[PATH_MAX], tmp[PATH_MAX];
    const char *dir = qf_cache_dir();
    qf_cache_stored = 0;
    if (!dir || qf_cache_dir_read_only())
        return QF_OK;
    qf_cache_stored = -1;
    if (qf_cache_entry_path(path, sizeof path, dir, label, key) != 0) {
        qf_warn("kernel cache entry path under %s is too long; not stored", dir);
        return QF_OK;
    }
    qf_cache_header h;
    qf_cache_fill_header(&h, key, arch, data, size);
    int fd = qf_cache_open_temp(path, tmp, sizeof tmp);
    const char *step = fd < 0 ? "create temporary file" : qf_cache_write_entry(fd, &h, data, size);
    if (!step && rename(tmp, path) != 0) /* atomic: readers see the old entry or the new one */
        step = "rename";
    if (step) {
        int err = errno;
        if (fd >= 0)
            unlink(tmp);
        qf_warn("could not store kernel cache entry %s (%s: %s); it will be recompiled next "
                "time%s", path, step, strerror(err),
                err == EISDIR ? " (a directory has the entry's name: remove it by hand)" : "");
    } else
        qf_cache_stored = 1;
    return QF_OK;
}

/* =====================================================================} */

/* {===================================================================== listing (qfuse-cache) */

/* Length of a label at the start of s: [A-Za-z0-9_-]+ up to the first '.', as
 * qf_cache_entry_path writes it; 0 when s does not start with one. */
static size_t qf_cache_label_len(const char *s) {
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
    return n <= QF_CACHE_LABEL_MAX && s[n] == '.' ? n : 0;
}

int qf_cache_name_parse(const char *name, qf_cache_info *info) {
    static const char ext[] = ".cubin", tmp[] = ".cubin.tmp.";
    size_t n = qf_cache_label_len(name);
    if (n == 0 || strspn(name + n + 1, "0123456789abcdef") < QF_KEY_HEX_LEN)
        return 0;
    const char *key = name + n + 1, *rest = key + QF_KEY_HEX_LEN;
    int kind = strcmp(rest, ext) == 0 ? 1 : strncmp(rest, tmp, sizeof tmp - 1) == 0 ? 2 : 0;
    if (!kind)
        return 0;
    memset(info, 0, sizeof *info);
    memcpy(info->label, name, n);
    memcpy(info->key, key, QF_KEY_HEX_LEN);
    info->temp = kind == 2;
    return kind;
}

/* Validates the entry open on fd as qf_cache_load would, for the arch its header names. */
static void qf_cache_info_validate(int fd, qf_cache_info *info) {
    qf_cache_header h;
    void *data = NULL;
    size_t size = 0;
    if (pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
        memcmp(h.magic, QF_CACHE_MAGIC, sizeof h.magic) == 0) {
        if (h.arch < QF_ARCH_MIN || h.arch > QF_ARCH_MAX) { /* a damaged field, not an arch */
            info->valid = 0;
            qf_cache_reject("corrupt", info->why, sizeof info->why,
                            "the header names no GPU architecture (%d)", (int)h.arch);
            return;
        }
        info->arch = h.arch; /* else 0: no architecture to show */
    }
    const char *kind = qf_cache_read_entry(fd, info->key, info->arch, &data, &size, info->why,
                                           sizeof info->why);
    free(data);
    info->valid = kind == NULL;
}

int qf_cache_entry_info(const char *dir, const char *name, qf_cache_info *info) {
    char path[PATH_MAX];
    struct stat st;
    int w = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= sizeof path || !qf_cache_name_parse(name, info)) {
        errno = w < 0 || (size_t)w >= sizeof path ? ENAMETOOLONG : EINVAL;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* FIFOs: no block */
    if (fd < 0 && errno == ELOOP && lstat(path, &st) == 0) { /* a symbolic link: not followed */
        info->bytes = (uint64_t)st.st_size;
        info->mtime = st.st_mtime;
        info->valid = 0;
        qf_cache_reject("corrupt", info->why, sizeof info->why, QF_CACHE_WHY_LINK);
        return 0;
    }
    const int open_err = fd < 0 ? errno : 0;
    if (fd < 0 && open_err != ENOENT && lstat(path, &st) == 0) { /* there, but not readable */
        info->bytes = (uint64_t)st.st_size;
        info->mtime = st.st_mtime;
        info->valid = 0;
        qf_cache_reject("corrupt", info->why, sizeof info->why, "cannot be read: %s",
                        strerror(open_err));
        return 0;
    }
    if (fd < 0 || fstat(fd, &st) != 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        errno = err;
        return -1;
    }
    info->bytes = (uint64_t)st.st_size;
    info->mtime = st.st_mtime;
    if (!info->temp)
        qf_cache_info_validate(fd, info);
    close(fd);
    return 0;
}

/* =====================================================================} */
