/* jit_cache.h: on-disk kernel cache shared by processes (numerics 5, DESIGN "Runtime conventions").
 *
 * One file per key: <dir>/<label>.<key>.cubin, holding a fixed header (magic, format version, key,
 * arch, NVRTC version, payload size, XXH64 checksum of the payload) followed by the CUBIN. Written
 * to a unique temporary name in the same directory and renamed into place, so readers never see
 * a partial entry. An entry is validated on read; a corrupt or foreign one is reported (with the
 * path) and treated as a miss, and the next store replaces it. */
#ifndef QF_JIT_CACHE_H
#define QF_JIT_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "jit_key.h"
#include "status.h"

#define QF_CACHE_LABEL_MAX 64 /* keeps <label>.<key>.cubin.tmp.<pid>.<rand> < NAME_MAX */

/* Cache directory: $QFUSE_CACHE_DIR, else $XDG_CACHE_HOME/qfuse (when absolute), else
 * $HOME/.cache/qfuse; empty variables count as unset; QFUSE_CACHE_DIR must be absolute. Missing
 * directories (parents included) are created with mode 0700, except HOME itself: where HOME is not
 * an existing directory there is no disk cache (one warning). An existing directory this process can
 * read but not write is used read-only (entries loaded, stores skipped: a shared node cache; one
 * warning), as is the directory when QFUSE_CACHE_READONLY is on (silently; it must exist). Returns
 * NULL when the disk cache is disabled (QFUSE_DISABLE_DISK_CACHE on, silently) or the directory
 * cannot be used, a directory writable by every user included (one warning per process in that
 * case: memory-only). Decided once and memoized;
 * the string is owned by the cache and stays valid until qf_cache_reset. Thread-safe. */
QF_INTERNAL const char *qf_cache_dir(void);

/* 1 with the mode bits in *mode when dir is writable by every user: anyone could put a kernel
 * there under a name a process will ask for, so qf_cache_dir does not use it (a group-writable
 * directory, a team's shared cache, it does). 0 otherwise, or when dir cannot be read. */
QF_INTERNAL int qf_cache_dir_open_to_all(const char *dir, unsigned *mode);

/* 1 when qf_cache_dir() is a directory this process only reads (see qf_cache_dir). */
QF_INTERNAL int qf_cache_dir_read_only(void);

/* Writes the configured cache directory (QFUSE_CACHE_DIR, $XDG_CACHE_HOME/qfuse or ~/.cache/qfuse)
 * into buf without creating it. Returns 0, ENOENT (nothing configured), EINVAL (a relative
 * QFUSE_CACHE_DIR), ENOTDIR (buf is the one below HOME, and HOME is not an existing directory:
 * it is never made) or ENAMETOOLONG. XDG_CACHE_HOME (as the XDG spec says) and HOME count only
 * when absolute. */
QF_INTERNAL int qf_cache_resolve(char *buf, size_t cap);

/* Why qf_cache_resolve returned err (nonzero), as a clause for a message, into buf (cap bytes,
 * always terminated): what is unset or wrong, naming the variable and its value. The runtime's
 * warning and qfuse-cache's error both say it, each with its own remedy. Returns buf. */
QF_INTERNAL const char *qf_cache_resolve_why(int err, char *buf, size_t cap);

/* Resets the memoized directory decision, and so re-arms its warning (tests change
 * QFUSE_CACHE_DIR between cases). Thread-safe, but invalidates strings qf_cache_dir returned. */
QF_INTERNAL void qf_cache_reset(void);

/* Looks up key (exactly QF_KEY_HEX_LEN lower-case hex digits, as qf_key_compute writes; anything
 * else is a bug and aborts). label: readable file-name prefix, reduced to [A-Za-z0-9_-]; NULL or
 * "" means "kernel". On a valid hit returns 1 and a malloc'ed copy of the CUBIN (*data, *size;
 * caller frees). Returns 0 with *data NULL on a miss (silent when absent or memory-only), and
 * also on an invalid entry, after one warning naming the path and the reason (truncated, bad
 * magic, checksum, wrong key, format, arch or NVRTC version, writable by every user). Thread-safe.
 */
QF_INTERNAL int qf_cache_load(const char *label, const char *key, int arch, void **data,
                              size_t *size);

/* Stores data[size] under key atomically: written to <entry>.tmp.<pid>.<random> (O_EXCL, mode
 * 0644 under the umask; fsync'ed only when QFUSE_CACHE_FSYNC=1), then renamed over the entry. key and label as
 * for qf_cache_load; data is not retained. Failures remove the temporary file, degrade to a
 * warning and return QF_OK: the disk cache is an optimization. Thread-safe. */
QF_INTERNAL qf_status qf_cache_store(const char *label, const char *key, int arch,
                                     const void *data, size_t size);

/* The outcome of this thread's last qf_cache_store: 1 stored, 0 not attempted (disk cache
 * disabled, memory-only or read-only), -1 failed (after its warning). */
QF_INTERNAL int qf_cache_last_stored(void);

/* One file of the cache directory, as qf_cache_name_parse and qf_cache_entry_info see it (for
 * qfuse-cache: list, clear, prune). */
typedef struct qf_cache_info {
    char label[QF_CACHE_LABEL_MAX + 1]; /* from the file name: the kernel variant name */
    char key[QF_KEY_HEX_LEN + 1];       /* from the file name */
    int temp;        /* 1: a store's temporary file (in progress, or left by a crashed writer) */
    int valid;       /* entry intact and loadable by this process (qf_cache_load would hit) */
    char why[192];   /* !valid: the reason, as in qf_cache_load's warning */
    int arch;        /* from the header; 0 when unreadable */
    uint64_t bytes;  /* file size */
    time_t mtime;    /* when it was written */
} qf_cache_info;

/* Recognises a file name of the cache directory: returns 1 for an entry <label>.<key>.cubin,
 * 2 for a temporary <label>.<key>.cubin.tmp.<pid>.<random>, and 0 for anything else (not ours;
 * never touched). Fills label, key and temp of *info. */
QF_INTERNAL int qf_cache_name_parse(const char *name, qf_cache_info *info);

/* Fills *info for dir/name, a name qf_cache_name_parse accepts: size and time, and for an entry
 * the header (arch, 0 without a valid magic) and a full validation (magic, format, key, NVRTC
 * version, size, checksum) with the reason when it fails; a symbolic link is not followed and is
 * invalid ("not a regular file"), and so is a file there that cannot be opened ("cannot be read:
 * why", e.g. another user's). Warns about nothing. Returns 0, or -1 with errno when the file
 * cannot be stat'ed (e.g. removed meanwhile by another process). Thread-safe. */
QF_INTERNAL int qf_cache_entry_info(const char *dir, const char *name, qf_cache_info *info);

#endif /* QF_JIT_CACHE_H */
