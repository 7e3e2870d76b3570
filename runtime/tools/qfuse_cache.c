/* qfuse_cache.c: qfuse-cache, the disk kernel cache: list, clear, prune and warm (docs/tools.md).
 *
 * Entries are the files named as qf_cache_store names them (jit_cache.h), whatever they hold;
 * files of other names in the directory are never touched. `warm` compiles through a
 * device-less context (qf_ctx_init_host), i.e. through exactly the lookup the runtime makes on
 * first use, so the keys it stores are the keys a job will ask for. Exit status: 0 success, 1
 * failure, 2 bad usage. */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctx.h"
#include "jit_cache.h"
#include "names.h"
#include "recipe_file.h"
#include "tool_common.h"
#include "tool_compile.h"
#include "qf_arch.h"

#define QF_TEMP_STALE_S 600 /* a store keeps its temporary file for milliseconds; older: a crash */
#define QF_WARM_MAX_JOBS 256

static const char qf_usage[] =
    "usage: qfuse-cache [--dir DIR] COMMAND [ARGS]\n"
    "Manages the disk cache of compiled qfuse kernels ($QFUSE_CACHE_DIR, else\n"
    "$XDG_CACHE_HOME/qfuse, else ~/.cache/qfuse; --dir overrides, and is used even when\n"
    "QFUSE_DISABLE_DISK_CACHE is set; a relative DIR is taken from the working directory).\n"
    "list, clear and prune never create the directory.\n"
    "  list                       key, recipe, kernel, instance, arch, size, age and state of\n"
    "                             each entry (ok, stale, foreign, invalid, temp)\n"
    "  clear                      remove every entry (and temporary files left by crashes)\n"
    "  prune --older-than AGE     remove entries written AGE or longer ago (AGE: 30s, 15m,\n"
    "                             12h, 7d, 2w; a bare number is seconds; an entry dated\n"
    "                             in the future counts as written now)\n"
    "  warm [--arch sm_XX] [--jobs N] [--kernel GLOB] [RECIPE...]\n"
    "                             compile every kernel variant of the recipes (built-in names\n"
    "                             or paths of .lua recipe files; default: every built-in one)\n"
    "                             for sm_XX (default: this GPU's, else sm_90; sm_90 is\n"
    "                             compiled as sm_90a, the target the library loads there)\n"
    "                             with N parallel jobs (default: CPUs; 1..256), skipping\n"
    "                             variants already cached; --kernel keeps the kernels\n"
    "                             whose name matches GLOB (repeatable: any pattern may\n"
    "                             match); on a read-only cache (QFUSE_CACHE_READONLY) it\n"
    "                             compiles nothing and fails unless every selected variant\n"
    "                             is cached\n"
    "  --help, -h                 this text (anywhere before --, whatever else is given)\n"
    "-- ends the options (before COMMAND, or before warm's recipes).\n"
    "Exit status: 0 success, 1 failure, 2 bad usage.\n";

/* Prints "qfuse-cache: <message>" and a hint to stderr; returns 2 (bad usage). */
static int qf_tool_usage_error(const char *fmt, ...) QF_PRINTF(1, 2);
static int qf_tool_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("qfuse-cache: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'qfuse-cache --help'.\n", stderr);
    return 2;
}

/* 1 when arg is option `name`, alone or as name=VALUE. */
static int qf_tool_is_opt(const char *arg, const char *name) {
    const size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

/* Matches argv[*i] against option name as "--name VALUE" or "--name=VALUE". Returns 0 when it is
 * another argument, else 1 with *value set (NULL when the value is missing). */
static int qf_tool_opt(int argc, char **argv, int *i, const char *name, const char **value) {
    size_t n = strlen(name);
    if (!qf_tool_is_opt(argv[*i], name))
        return 0;
    if (argv[*i][n] == '=')
        *value = argv[*i] + n + 1;
    else /* a next argument that is an option is not taken as the value (--kernel --jobs) */
        *value = *i + 1 < argc && !tool_looks_like_opt(argv[*i + 1]) ? argv[++*i] : NULL;
    return 1;
}

/* Nonzero (with a message) when QFUSE_DISABLE_DISK_CACHE is on (qf_env_flag), as the runtime
 * reads it (an explicit --dir unsets it: see qf_tool_global). */
static int qf_tool_cache_disabled(void) {
    if (!qf_env_flag("QFUSE_DISABLE_DISK_CACHE"))
        return 0;
    fprintf(stderr, "qfuse-cache: the disk cache is disabled (QFUSE_DISABLE_DISK_CACHE=%s)\n",
            getenv("QFUSE_DISABLE_DISK_CACHE"));
    return 1;
}

/* Why the cache directory is read-only: QFUSE_CACHE_READONLY, or its permissions. */
static const char *qf_tool_read_only_why(void) {
    return qf_env_flag("QFUSE_CACHE_READONLY") ? "QFUSE_CACHE_READONLY is on"
                                               : "this process cannot write it";
}

/* The cache directory, created if missing (warm), or NULL after saying why there is none;
 * *read_only: 1 when this process only reads it (qf_cache_dir_read_only). */
static const char *qf_tool_dir(int *read_only) {
    *read_only = 0;
    if (qf_tool_cache_disabled())
        return NULL;
    const char *dir = qf_cache_dir();
    if (!dir)
        fprintf(stderr, "qfuse-cache: no usable disk cache (see the warning above)\n");
    else
        *read_only = qf_cache_dir_read_only();
    return dir;
}

/* {===================================================================== entries */

/* Every file of dir that qf_cache_name_parse accepts, sorted by name; *n their count. Returns
 * NULL with *n = -1 when dir cannot be read. Free with qf_tool_free_names. */
static struct dirent **qf_tool_scan(const char *dir, int *n) {
    struct dirent **all = NULL;
    *n = scandir(dir, &all, NULL, alphasort);
    if (*n < 0) {
        fprintf(stderr, "qfuse-cache: cannot read %s: %s\n", dir, strerror(errno));
        return NULL;
    }
    int kept = 0;
    for (int i = 0; i < *n; i++) {
        qf_cache_info info;
        if (qf_cache_name_parse(all[i]->d_name, &info))
            all[kept++] = all[i];
        else
            free(all[i]);
    }
    *n = kept;
    return all;
}

static void qf_tool_free_names(struct dirent **names, int n) {
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* "812B", "14.2K", "3.1M", "2.4G". */
static void qf_tool_size(uint64_t b, char *buf, size_t cap) {
    if (b < 1024)
        snprintf(buf, cap, "%lluB", (unsigned long long)b);
    else if (b < 1024 * 1024)
        snprintf(buf, cap, "%.1fK", b / 1024.0);
    else if (b < 1024ull * 1024 * 1024)
        snprintf(buf, cap, "%.1fM", b / (1024.0 * 1024.0));
    else
        snprintf(buf, cap, "%.1fG", b / (1024.0 * 1024.0 * 1024.0));
}

/* "42s", "17m", "5h", "12d"; "future" for a time after now (a clock set wrong, here or on the
 * file's server). */
static void qf_tool_age(time_t mtime, time_t now, char *buf, size_t cap) {
    const long long s = (long long)(now - mtime);
    if (mtime > now)
        snprintf(buf, cap, "future");
    else if (s < 120)
        snprintf(buf, cap, "%llds", s);
    else if (s < 2 * 3600)
        snprintf(buf, cap, "%lldm", s / 60);
    else if (s < 2 * 86400)
        snprintf(buf, cap, "%lldh", s / 3600);
    else
        snprintf(buf, cap, "%lldd", s / 86400);
}

/* The registry kernel named label, or -1 (an entry of another build or recipe set). */
static int qf_tool_kernel(const char *label) {
    for (int i = 0; i < qf_kernel_count; i++)
        if (strcmp(qf_kernels[i].name, label) == 0)
            return i;
    return -1;
}

/* 1 when the runtime loads instance inst of kernel k on arch: every kernel but a generated GEMM
 * module, which is loaded where its family's row says the generated kernel runs (Hopper's
 * block-scaled GEMMs), and elsewhere (cuBLASLt's modes on Blackwell) only as the staged instance
 * of a module with an `_alpha` entry (NVFP4's alpha), the one instance that holds it. */
static int qf_tool_runs_on(const qf_kernel_entry *k, const qf_kernel_instance *inst, int arch) {
    return k->op != QF_OP_GEMM ||
           qf_family_gemm_path(k->family, arch).engine == QF_GEMM_KERNEL ||
           (qf_kernel_instance_entries(k, inst) & QF_ENTRY_BIT(QF_ENTRY_ALPHA));
}

/* The instance of kernel kidx whose key for arch is key into *inst, and 1; 0 when none has it
 * (this build's runtime never asks for the entry). */
static int qf_tool_key_instance(int kidx, int arch, const char *key, qf_kernel_instance *inst) {
    const qf_kernel_entry *k = &qf_kernels[kidx];
    qf_kernel_instance all[QF_KERNEL_MAX_INSTANCES];
    char hex[QF_KEY_HEX_LEN + 1];
    int n = qf_kernel_instances(k, all);
    for (int i = 0; i < n; i++) {
        qf_kernel_key(k->recipe, k, &all[i], qf_nvrtc_header_names,
                      qf_nvrtc_headers, qf_nvrtc_header_count, arch, hex);
        if (strcmp(hex, key) == 0) {
            *inst = all[i];
            return 1;
        }
    }
    return 0;
}

/* What sets instance inst of kernel k apart from the kernel's other entries, naming only what
 * applies: the copies a quantizer writes, the gamma dtype of a norm, the scale layout of a
 * block-scaled quantizer, an activation prologue ("rowwise+columnwise, swizzled scales, dh of
 * swiglu"), a GEMM module's staged instance ("staged: no GEMM kernel"); "" for a GEMM module's
 * GEMM kernel and the ops with one instance. */
static void qf_tool_instance_text(const qf_kernel_entry *k, const qf_kernel_instance *inst,
                                  char *buf, size_t n) {
    static const char *const outs[] = {"?", "rowwise", "columnwise", "rowwise+columnwise"};
    if (inst->staged) { /* a GEMM module's: nothing else applies */
        snprintf(buf, n, "staged: no GEMM kernel");
        return;
    }
    buf[0] = '\0';
    int w = 0;
    if (k->op == QF_OP_NORM_QUANTIZE || k->op == QF_OP_QUANTIZE) {
        w = snprintf(buf, n, "%s", outs[inst->outputs & 3u]);
        if (k->op == QF_OP_NORM_QUANTIZE && w >= 0 && (size_t)w < n)
            w += snprintf(buf + w, n - (size_t)w, ", gamma %s", qf_dtype_name(inst->gamma_dtype));
        if (qf_families[k->family].scale_layout && w >= 0 && (size_t)w < n)
            w += snprintf(buf + w, n - (size_t)w, ", %s scales",
                          qf_enum_name(QF_ENUM_SCALE_LAYOUT, inst->layout));
    } else if (k->op == QF_OP_NORM_BACKWARD) { /* gamma in x's dtype or fp32 */
        w = snprintf(buf, n, "gamma %s", qf_dtype_name(inst->gamma_dtype));
    }
    if (inst->prologue != QF_PROLOGUE_NONE && w >= 0 && (size_t)w < n) {
        const int grad = inst->prologue >= QF_PROLOGUE_DACT(0);
        const int act = inst->prologue - (grad ? QF_PROLOGUE_DACT(0) : QF_PROLOGUE_ACT(0));
        snprintf(buf + w, n - (size_t)w, "%s%s of %s", w ? ", " : "", grad ? "dh" : "a",
                 qf_enum_name(QF_ENUM_ACTIVATION, act));
    }
}

/* =====================================================================} */

/* {===================================================================== list, clear, prune */

/* " and N temporary file(s)" into buf (cap bytes) for temps > 0, else "": the count of
 * temporary files that list and clear / prune give after their entries. */
static void qf_tool_temps_text(int temps, char *buf, size_t cap) {
    buf[0] = '\0';
    if (temps)
        snprintf(buf, cap, " and %d temporary file%s", temps, temps == 1 ? "" : "s");
}

/* The columns of `list` (KEY, RECIPE, KERNEL, INSTANCE, ARCH, SIZE, AGE, STATE): one row's
 * texts. */
enum { QF_LIST_SIZE = 5, QF_LIST_COLS = 8 }; /* SIZE's column (right-aligned), the count */
typedef struct qf_list_row {
    char key[QF_KEY_HEX_LEN + 1], recipe[64], label[QF_CACHE_LABEL_MAX + 1], inst[64], arch[16],
        size[32], age[32], state[256];
} qf_list_row;

/* The texts of column c of row r. */
static const char *qf_list_cell(const qf_list_row *r, int c) {
    const char *const cells[QF_LIST_COLS] = {r->key,  r->recipe, r->label, r->inst,
                                             r->arch, r->size,   r->age,   r->state};
    return cells[c];
}

/* One row of `list`: the entry's state is "ok" (this build asks for it), "stale" (a kernel of this
 * build, but a key it no longer asks for, or a GEMM it does not run on that arch), "foreign" (a
 * kernel this build does not have: another build, or a recipe file loaded at run time; the
 * entries of a file named like a shipped recipe carry that recipe's kernel names, so they are
 * "stale"), "temp" or "invalid: why". */
static void qf_tool_list_row(const qf_cache_info *info, time_t now, qf_list_row *row) {
    const int kidx = qf_tool_kernel(info->label);
    qf_kernel_instance inst;
    snprintf(row->key, sizeof row->key, "%s", info->key);
    snprintf(row->recipe, sizeof row->recipe, "%s",
             kidx >= 0 ? qf_kernels[kidx].recipe->name : "?");
    snprintf(row->label, sizeof row->label, "%s", info->label);
    snprintf(row->inst, sizeof row->inst, "?");
    qf_tool_size(info->bytes, row->size, sizeof row->size);
    qf_tool_age(info->mtime, now, row->age, sizeof row->age);
    snprintf(row->arch, sizeof row->arch, info->arch ? "sm_%d%s" : "?", info->arch,
             qf_arch_feature(info->arch));
    if (info->temp)
        snprintf(row->state, sizeof row->state, "temp");
    else if (!info->valid)
        snprintf(row->state, sizeof row->state, "invalid: %s", info->why);
    else if (kidx < 0)
        snprintf(row->state, sizeof row->state, "foreign");
    else if (!qf_tool_key_instance(kidx, info->arch, info->key, &inst) ||
             !qf_tool_runs_on(&qf_kernels[kidx], &inst, info->arch))
        snprintf(row->state, sizeof row->state, "stale");
    else {
        snprintf(row->state, sizeof row->state, "ok");
        qf_tool_instance_text(&qf_kernels[kidx], &inst, row->inst, sizeof row->inst);
        if (!row->inst[0])
            snprintf(row->inst, sizeof row->inst, "-");
    }
}

/* Prints the rows under the header, each column as wide as its widest text (SIZE right-aligned,
 * STATE last and unpadded). */
static void qf_tool_list_print(const qf_list_row *rows, int n) {
    static const qf_list_row head = {"KEY", "RECIPE", "KERNEL", "INSTANCE", "ARCH", "SIZE", "AGE",
                                     "STATE"};
    int w[QF_LIST_COLS];
    for (int c = 0; c < QF_LIST_COLS; c++) {
        w[c] = (int)strlen(qf_list_cell(&head, c));
        for (int i = 0; i < n; i++) {
            const int len = (int)strlen(qf_list_cell(&rows[i], c));
            w[c] = len > w[c] ? len : w[c];
        }
    }
    for (int i = -1; i < n; i++) {
        const qf_list_row *r = i < 0 ? &head : &rows[i];
        for (int c = 0; c < QF_LIST_COLS - 1; c++)
            printf(c == QF_LIST_SIZE ? "%*s  " : "%-*s  ", w[c], qf_list_cell(r, c));
        printf("%s\n", qf_list_cell(r, QF_LIST_COLS - 1));
    }
}

/* The configured directory into dir (cap bytes) without creating it. Returns 0, or -1 after
 * saying why there is none (the disk cache switched off, nothing configured, a relative
 * QFUSE_CACHE_DIR, a missing HOME). */
static int qf_tool_resolve(char *dir, size_t cap) {
    if (qf_tool_cache_disabled())
        return -1;
    const int err = qf_cache_resolve(dir, cap);
    if (err) {
        char why[PATH_MAX + 128];
        fprintf(stderr, "qfuse-cache: %s%s\n", qf_cache_resolve_why(err, why, sizeof why),
                err == ENAMETOOLONG ? "; give a shorter one"
                                    : " (set QFUSE_CACHE_DIR to an absolute path, or pass --dir)");
        return -1;
    }
    return 0;
}

/* The configured directory into dir without creating it, and its entries (*names, *n; free with
 * qf_tool_free_names): 0 when it exists, 1 when it does not (nothing to list or remove), -1
 * after saying why there is none or why it cannot be read. */
static int qf_tool_entries(char *dir, size_t cap, struct dirent ***names, int *n) {
    struct stat st;
    if (qf_tool_resolve(dir, cap) != 0)
        return -1;
    const char *set = getenv("QFUSE_CACHE_DIR");
    if (set && !*set)
        fprintf(stderr, "qfuse-cache: QFUSE_CACHE_DIR is set but empty; using %s\n", dir);
    if (stat(dir, &st) != 0 && errno == ENOENT)
        return 1;
    *names = qf_tool_scan(dir, n);
    return *names ? 0 : -1;
}

/* list, clear and prune take the configured directory as it is: they never create it (a
 * missing directory has no entries), and list needs no write access (a read-only, pre-filled
 * cache lists normally). */
static int qf_tool_list(void) {
    char dir[PATH_MAX];
    struct dirent **names;
    int n, count = 0, temps = 0, exists = qf_tool_entries(dir, sizeof dir, &names, &n);
    uint64_t total = 0;
    if (exists == 1)
        printf("0 entries, 0B in %s (the directory does not exist yet)\n", dir);
    if (exists != 0)
        return exists < 0 ? 1 : 0;
    time_t now = time(NULL);
    qf_list_row *rows = calloc((size_t)n + 1, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "qfuse-cache: list: out of memory for %d rows\n", n);
        qf_tool_free_names(names, n);
        return 1;
    }
    int nrows = 0;
    for (int i = 0; i < n; i++) {
        qf_cache_info info;
        if (qf_cache_entry_info(dir, names[i]->d_name, &info) != 0)
            continue; /* removed meanwhile by another process */
        qf_tool_list_row(&info, now, &rows[nrows++]);
        count += !info.temp;
        temps += info.temp;
        total += info.bytes;
    }
    qf_tool_list_print(rows, nrows);
    free(rows);
    char size[32], extra[64];
    qf_tool_size(total, size, sizeof size);
    qf_tool_temps_text(temps, extra, sizeof extra); /* listed, and their bytes in the total */
    printf("%d entr%s%s, %s in %s\n", count, count == 1 ? "y" : "ies", extra, size, dir);
    unsigned mode;
    if (qf_cache_dir_open_to_all(dir, &mode))
        fprintf(stderr, "qfuse-cache: warning: %s is writable by every user (mode %04o): the "
                "runtime does not use it, so no entry listed here is loaded\n", dir, mode);
    qf_tool_free_names(names, n);
    return 0;
}

/* Files that could not be removed named one by one (the rest counted in one line). */
#define QF_TOOL_ERRORS_SHOWN 3

/* Removes the entries of the configured directory written at least min_age seconds ago (all for
 * clear, min_age 0), and temporary files older than QF_TEMP_STALE_S (left by crashed writers;
 * younger ones may belong to a store in progress), and says how many of each. A symbolic link
 * named like an entry is removed (not its target); a directory is left alone with a note. */
static int qf_tool_remove(long long min_age, const char *verb) {
    char dir[PATH_MAX];
    struct dirent **names;
    if (qf_env_flag("QFUSE_CACHE_READONLY")) {
        fprintf(stderr, "qfuse-cache: %s: QFUSE_CACHE_READONLY is on: the cache is not written "
                        "(unset it to remove entries)\n", verb);
        return 1;
    }
    int n, removed = 0, temps = 0, failed = 0, err = 0;
    const int exists = qf_tool_entries(dir, sizeof dir, &names, &n);
    if (exists == 1)
        printf("%s: nothing to remove; %s does not exist\n", verb, dir);
    if (exists != 0)
        return exists < 0 ? 1 : 0;
    time_t now = time(NULL);
    for (int i = 0; i < n; i++) {
        qf_cache_info info;
        char path[PATH_MAX];
        if (qf_cache_entry_info(dir, names[i]->d_name, &info) != 0)
            continue;
        long long age = now > info.mtime ? (long long)(now - info.mtime) : 0;
        if (age < (info.temp ? QF_TEMP_STALE_S : min_age))
            continue;
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name) >= (int)sizeof path)
            continue; /* not reached: qf_cache_entry_info rejects such names */
        if (unlink(path) == 0) {
            removed += !info.temp;
            temps += info.temp;
        } else if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            fprintf(stderr, "qfuse-cache: %s: leaving %s alone: a directory, not a cache entry "
                    "(it keeps that kernel from being stored; remove it by hand)\n", verb, path);
        } else if (errno != ENOENT) {
            err = errno;
            if (++failed <= QF_TOOL_ERRORS_SHOWN)
                fprintf(stderr, "qfuse-cache: cannot remove %s: %s\n", path, strerror(err));
        }
    }
    if (failed > QF_TOOL_ERRORS_SHOWN)
        fprintf(stderr, "qfuse-cache: %s: %d more files of %s could not be removed (the last: "
                "%s)\n", verb, failed - QF_TOOL_ERRORS_SHOWN, dir, strerror(err));
    char extra[64];
    qf_tool_temps_text(temps, extra, sizeof extra); /* left by crashed writers */
    printf("%s: removed %d entr%s%s from %s\n", verb, removed, removed == 1 ? "y" : "ies", extra,
           dir);
    qf_tool_free_names(names, n);
    return failed ? 1 : 0;
}

/* Parses "7d", "12h", "30m", "45s", "2w" or a bare number of seconds (decimal digits only:
 * tool_count_parse). Returns 0, -1 (not a duration) or -2 (a duration too large for seconds in a
 * long long). */
static int qf_tool_duration(const char *s, long long *out) {
    static const char units[] = "smhdw";
    static const long long mult[] = {1, 60, 3600, 86400, 604800};
    const size_t len = strspn(s, "0123456789");
    const char *u = s[len] ? strchr(units, s[len]) : units;
    if (!u || (s[len] && s[len + 1]))
        return -1;
    long long v;
    const int rc = tool_count_parse(s, len, 0, LLONG_MAX / mult[u - units], &v);
    if (rc < 0)
        return rc;
    *out = v * mult[u - units];
    return 0;
}

/* What follows a refused argument in its message: where --dir belongs, when the argument is
 * --dir given after the command; else "". */
static const char *qf_tool_dir_hint(const char *arg) {
    return qf_tool_is_opt(arg, "--dir")
               ? " (--dir goes before the command: qfuse-cache --dir DIR COMMAND ...)"
               : "";
}

/* How a refused argument is named: "unknown option" for one that starts with '-' (more than "-"),
 * else "unexpected argument". */
static const char *qf_tool_arg_kind(const char *arg) {
    return arg[0] == '-' && arg[1] ? "unknown option" : "unexpected argument";
}

static int qf_tool_prune(int argc, char **argv) {
    long long age = -1;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        if (!qf_tool_opt(argc, argv, &i, "--older-than", &v))
            return qf_tool_usage_error("prune: %s '%s'%s", qf_tool_arg_kind(argv[i]), argv[i],
                                       qf_tool_dir_hint(argv[i]));
        if (!v)
            return qf_tool_usage_error("prune: --older-than needs a value");
        if (age >= 0)
            return qf_tool_usage_error("prune: --older-than given twice");
        const int d = qf_tool_duration(v, &age);
        if (d == -2)
            return qf_tool_usage_error("prune: --older-than '%s' is too large", v);
        if (d != 0)
            return qf_tool_usage_error("prune: --older-than '%s' is not a duration (e.g. 30s, "
                                       "15m, 12h, 7d, 2w)", v);
    }
    if (age < 0)
        return qf_tool_usage_error("prune: --older-than AGE is required");
    return qf_tool_remove(age, "prune");
}

/* =====================================================================} */

/* {===================================================================== warm */

/* The selection and the counters of one warm run (counters updated by qf_warm_done, which the
 * compile engine calls under its lock). */
#define QF_WARM_MAX_RECIPES 64 /* recipes named on one command line */
#define QF_WARM_MAX_GLOBS 16   /* --kernel patterns on one command line */

typedef struct qf_warm {
    int arch, n_items, compiled, cached, failed, tty;
    const char *globs[QF_WARM_MAX_GLOBS]; /* --kernel patterns (any may match); none: all */
    int n_globs;
    const qf_recipe *recipes[QF_WARM_MAX_RECIPES]; /* the selected ones, each once */
    int n_recipes;
    int twins; /* two of them share a name (qf_warm_twins): progress names each file's path */
    qf_tool_job *items;
} qf_warm;

/* Progress after one item: a bar redrawn in place on a terminal, one line per item otherwise. */
static void qf_warm_progress(const qf_warm *w, const qf_tool_job *it, int done, const char *how) {
    const char *name = it->k->name;
    if (w->tty) {
        char bar[41];
        int fill = (int)(40L * done / w->n_items);
        memset(bar, '#', (size_t)fill);
        memset(bar + fill, '.', (size_t)(40 - fill));
        bar[40] = '\0';
        fprintf(stderr, "\r[%s] %d/%d %-44.44s", bar, done, w->n_items, name);
        if (done == w->n_items)
            fputc('\n', stderr);
    } else {
        char variant[96];
        qf_tool_instance_text(it->k, &it->inst, variant, sizeof variant);
        const qf_recipe *r = it->k->recipe; /* a file's kernels, beside a built-in twin's */
        const int file = w->twins && !(r >= qf_recipes && r < qf_recipes + qf_recipe_count);
        fprintf(stderr, "warm: [%d/%d] %s %s%s%s%s%s%s\n", done, w->n_items, how, name,
                *variant ? " (" : "", variant, *variant ? ")" : "", file ? " from " : "",
                file ? r->path : "");
    }
}

/* Counts one looked-up item: compiled and stored, found in the cache, or failed (the lookup, or
 * the store of what it compiled). */
static void qf_warm_done(void *ud, const qf_tool_job *it, int done, int total, qf_status s,
                         const qf_kernel_info *info) {
    qf_warm *w = ud;
    (void)total;
    const int disk = s == QF_OK && info->source == QF_KSRC_DISK;
    const int unstored = s == QF_OK && !info->on_disk; /* compiled; its store failed */
    if (s != QF_OK || unstored) {
        w->failed++;
        fprintf(stderr, "%sqfuse-cache: %s: %s: %s\n", w->tty ? "\n" : "", it->k->name,
                unstored ? "compiled" : qf_status_name(s),
                unstored ? "but not stored (see the warning above)" : qf_last_error());
    }
    w->compiled += s == QF_OK && !disk && !unstored;
    w->cached += disk;
    qf_warm_progress(w, it, done, s != QF_OK || unstored ? "FAILED" : disk ? "cached" : "compiled");
}

/* 1 when two of the selected recipes share a name (a built-in recipe and a file of its name, or
 * two such files): their kernels have the same names, and the same keys where their fields are
 * the same. */
static int qf_warm_twins(const qf_warm *w) {
    for (int a = 0; a < w->n_recipes; a++)
        for (int b = a + 1; b < w->n_recipes; b++)
            if (strcmp(w->recipes[a]->name, w->recipes[b]->name) == 0)
                return 1;
    return 0;
}

/* 1 when job j has the fusion key of one of w's first n items (keys[0..n): theirs). */
static int qf_warm_seen(const qf_warm *w, const qf_tool_job *j, char (*keys)[QF_KEY_HEX_LEN + 1],
                        int n) {
    qf_kernel_key(j->k->recipe, j->k, &j->inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                  qf_nvrtc_header_count, w->arch, keys[n]);
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], keys[n]) == 0)
            return 1;
    return 0;
}

/* Every instance of every kernel of the selected recipes into w->items, each key once (recipes
 * of one name with the same fields give the same kernels: qfuse-cache warm mxfp8
 * recipes/mxfp8.lua compiles them once). */
static int qf_warm_collect(qf_warm *w) {
    int skipped_gemm = 0; /* instances of matching GEMM modules the runtime never loads here */
    int n_kernels = 0;
    for (int r = 0; r < w->n_recipes; r++)
        n_kernels += w->recipes[r]->n_kernels;
    const size_t cap = (size_t)n_kernels * QF_KERNEL_MAX_INSTANCES + 1;
    w->items = calloc(cap, sizeof *w->items);
    w->twins = qf_warm_twins(w);
    char (*keys)[QF_KEY_HEX_LEN + 1] = w->twins ? calloc(cap, sizeof *keys) : NULL;
    if (!w->items || (w->twins && !keys)) {
        free(keys);
        fprintf(stderr, "qfuse-cache: out of memory\n");
        return -1;
    }
    for (int r = 0; r < w->n_recipes; r++)
        for (int k = 0; k < w->recipes[r]->n_kernels; k++) {
            const qf_kernel_entry *ke = &w->recipes[r]->kernels[k];
            qf_kernel_instance inst[QF_KERNEL_MAX_INSTANCES];
            int keep = w->n_globs == 0;
            for (int g = 0; g < w->n_globs && !keep; g++)
                keep = fnmatch(w->globs[g], ke->name, 0) == 0;
            const int n = keep ? qf_kernel_instances(ke, inst) : 0;
            for (int i = 0; i < n; i++) {
                const qf_tool_job j = {.k = ke, .inst = inst[i]};
                if (!qf_tool_runs_on(ke, &inst[i], w->arch)) {
                    skipped_gemm++;
                    continue;
                }
                if (!keys || !qf_warm_seen(w, &j, keys, w->n_items))
                    w->items[w->n_items++] = j;
            }
        }
    free(keys);
    if (w->n_items == 0 && skipped_gemm)
        fprintf(stderr, "qfuse-cache: warm: nothing to compile: the matching GEMM kernels do not "
                        "run on sm_%d (the runtime uses cuBLASLt there)\n", w->arch);
    else if (w->n_items == 0 && w->n_globs)
        fprintf(stderr, "qfuse-cache: warm: no kernel of the selected recipes matches the --kernel "
                        "patterns (kernel names are qf_<recipe>_<op>..., e.g. "
                        "qf_fp8_block_nq_layernorm_bf16; qfuse-gen --list RECIPE.lua lists a "
                        "recipe's)\n");
    else if (w->n_items == 0)
        fprintf(stderr, "qfuse-cache: warm: the selected recipes have no kernels\n");
    return w->n_items ? 0 : 1;
}

/* Runs the workers and prints the summary. Returns the exit status. */
static int qf_warm_run(qf_warm *w, int jobs, const char *dir) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int missing = qf_tool_compile(w->items, w->n_items, w->arch, jobs, qf_warm_done, w);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("warm: sm_%d%s, %d variant%s: %d compiled, %d already cached, %d failed in %.1f s "
           "(cache %s)\n", w->arch, qf_arch_feature(w->arch), w->n_items,
           w->n_items == 1 ? "" : "s", w->compiled, w->cached, w->failed + missing, secs, dir);
    return w->failed + missing ? 1 : 0;
}

/* warm on a read-only cache directory: nothing can be stored, so it checks that every item is
 * there and loads (qf_cache_load, as an op's first use would). Names at most QF_TOOL_ERRORS_SHOWN
 * missing variants and counts the rest. Returns 0 when all are cached, else 1. */
static int qf_warm_check(qf_warm *w, const char *dir) {
    int missing = 0;
    for (int i = 0; i < w->n_items; i++) {
        const qf_tool_job *it = &w->items[i];
        char key[QF_KEY_HEX_LEN + 1];
        qf_kernel_key(it->k->recipe, it->k, &it->inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                      qf_nvrtc_header_count, w->arch, key);
        void *cubin = NULL;
        size_t size = 0;
        if (qf_cache_load(it->k->name, key, w->arch, &cubin, &size)) {
            free(cubin);
            continue;
        }
        if (missing++ < QF_TOOL_ERRORS_SHOWN) {
            char variant[96];
            qf_tool_instance_text(it->k, &it->inst, variant, sizeof variant);
            fprintf(stderr, "qfuse-cache: warm: not cached: %s%s%s%s\n", it->k->name,
                    *variant ? " (" : "", variant, *variant ? ")" : "");
        }
    }
    if (missing > QF_TOOL_ERRORS_SHOWN)
        fprintf(stderr, "qfuse-cache: warm: and %d more not cached\n",
                missing - QF_TOOL_ERRORS_SHOWN);
    if (missing) {
        fprintf(stderr, "qfuse-cache: %s is used read-only (%s): %d of %d variant%s for "
                "sm_%d%s %s not cached (or not loadable) and cannot be stored there\n", dir,
                qf_tool_read_only_why(), missing, w->n_items, w->n_items == 1 ? "" : "s",
                w->arch, qf_arch_feature(w->arch), missing == 1 ? "is" : "are");
        return 1;
    }
    printf("warm: sm_%d%s, %d variant%s: all already cached (cache %s, read-only: %s)\n",
           w->arch, qf_arch_feature(w->arch), w->n_items, w->n_items == 1 ? "" : "s", dir,
           qf_tool_read_only_why());
    return 0;
}

/* This GPU's architecture when there is one, else sm_90, with why there is no GPU in no_gpu
 * (cap bytes; empty when there is one), for warm to say once its directory is settled. */
static int qf_warm_default_arch(char *no_gpu, size_t cap) {
    qf_ctx_t *ctx = NULL;
    no_gpu[0] = '\0';
    if (qf_ctx_init(&ctx, 0) == QF_OK) {
        int arch = qf_ctx_arch(ctx);
        qf_ctx_free(ctx);
        return arch;
    }
    snprintf(no_gpu, cap, "%s", qf_last_error());
    return 90;
}

/* "--jobs N": an integer in 1..QF_WARM_MAX_JOBS (decimal digits only). Returns 0 or -1. */
static int qf_warm_parse_jobs(const char *s, int *jobs) {
    long long v;
    if (tool_count_parse(s, strlen(s), 1, QF_WARM_MAX_JOBS, &v) != 0)
        return -1;
    *jobs = (int)v;
    return 0;
}

/* Adds r to the selection unless it is there already. Returns -1, or the exit status. */
static int qf_warm_select(qf_warm *w, const qf_recipe *r) {
    for (int i = 0; i < w->n_recipes; i++)
        if (w->recipes[i] == r)
            return -1;
    if (w->n_recipes == QF_WARM_MAX_RECIPES)
        return qf_tool_usage_error("warm: more than %d recipes", QF_WARM_MAX_RECIPES);
    w->recipes[w->n_recipes++] = r;
    return -1;
}

/* A recipe name, or the path of a recipe file (loaded and validated as the runtime does): adds
 * it to the selection. Returns -1, or the exit status: 2 for an unknown name (or, while options
 * are still read, one starting with '-'), 1 for a recipe file that cannot be read or is invalid. */
static int qf_warm_recipe(const char *name, qf_warm *w, int options) {
    if (options && name[0] == '-')
        return qf_tool_usage_error("warm: unknown option '%s'%s", name, qf_tool_dir_hint(name));
    const qf_recipe *r = NULL;
    qf_status s = qf_recipe_find(name, &r);
    if (s != QF_OK && qf_recipe_is_path(name)) { /* a bad file is a failure, not bad usage */
        fprintf(stderr, "qfuse-cache: warm: %s\n", qf_last_error());
        return 1;
    }
    if (!r) {
        char known[512] = "";
        for (int i = 0, len = 0; i < qf_recipe_count && len < (int)sizeof known; i++)
            len += snprintf(known + len, sizeof known - (size_t)len, "%s%s", i ? ", " : "",
                            qf_recipes[i].name);
        return qf_tool_usage_error("warm: unknown recipe '%s' (this build has: %s; or give the "
                                   "path of a .lua recipe file)", name, known);
    }
    return qf_warm_select(w, r);
}

/* Options of warm: --arch, --jobs, --kernel and recipes (names or .lua paths) into w (all built-in
 * ones when none is named). Returns -1 to go on, or the exit status. */
static int qf_warm_args(int argc, char **argv, qf_warm *w, int *jobs) {
    int any = 0, rc = -1, jobs_given = 0, options = 1; /* after "--": recipes only */
    char known[256];
    for (int i = 0; i < argc && rc < 0; i++) {
        const char *v = NULL;
        if (options && strcmp(argv[i], "--") == 0) {
            options = 0;
        } else if (!options) {
            rc = qf_warm_recipe(argv[i], w, 0);
            any = 1;
        } else if (qf_tool_opt(argc, argv, &i, "--kernel", &v)) {
            if (!v || !*v)
                rc = qf_tool_usage_error("warm: --kernel needs a pattern");
            else if (w->n_globs == QF_WARM_MAX_GLOBS)
                rc = qf_tool_usage_error("warm: more than %d --kernel patterns",
                                         QF_WARM_MAX_GLOBS);
            else
                w->globs[w->n_globs++] = v;
        } else if (qf_tool_opt(argc, argv, &i, "--arch", &v)) {
            if (w->arch)
                rc = qf_tool_usage_error("warm: --arch given twice (one architecture per run)");
            else if (!v || !*v)
                rc = qf_tool_usage_error("warm: --arch needs a value (sm_XX, e.g. sm_90)");
            else if ((w->arch = qf_arch_parse(v)) < 0)
                rc = qf_tool_usage_error("warm: --arch '%s' is not a supported architecture; "
                                         "expected sm_XX with XX in %d..%d (FP8 needs sm_89+; "
                                         "e.g. sm_90; sm_90a, its compile target, is the "
                                         "only suffixed spelling: other archs compile without "
                                         "one)", v,
                                         QF_ARCH_MIN, QF_ARCH_MAX);
            else if (!qf_jit_arch_known(w->arch, known, sizeof known))
                rc = qf_tool_usage_error("warm: --arch '%s' is not a GPU architecture this NVRTC "
                                         "compiles for (%s)", v, known);
        } else if (qf_tool_opt(argc, argv, &i, "--jobs", &v)) {
            if (jobs_given++)
                rc = qf_tool_usage_error("warm: --jobs given twice");
            else if (!v || !*v)
                rc = qf_tool_usage_error("warm: --jobs needs a value");
            else if (qf_warm_parse_jobs(v, jobs) != 0)
                rc = qf_tool_usage_error("warm: --jobs '%s' must be an integer in 1..%d",
                                         v ? v : "", QF_WARM_MAX_JOBS);
        } else {
            rc = qf_warm_recipe(argv[i], w, 1);
            any = 1;
        }
    }
    for (int r = 0; !any && r < qf_recipe_count; r++)
        qf_warm_select(w, &qf_recipes[r]);
    return rc;
}

static int qf_tool_warm(int argc, char **argv) {
    int jobs = qf_tool_cpus(QF_WARM_MAX_JOBS);
    qf_warm w = {.tty = isatty(2)};
    int rc = qf_warm_args(argc, argv, &w, &jobs);
    char where[PATH_MAX];
    if (rc < 0 && qf_tool_resolve(where, sizeof where) != 0) /* said before any other line */
        rc = 1;
    char no_gpu[512] = "";
    if (rc < 0) { /* the directory is made only once there is something to compile */
        w.arch = w.arch ? w.arch : qf_warm_default_arch(no_gpu, sizeof no_gpu);
        const int max = qf_jit_max_arch();
        if (max > 0 && w.arch > max)
            fprintf(stderr, "qfuse-cache: this NVRTC targets at most sm_%d: the sm_%d entries hold "
                    "sm_%d code (what the runtime would compile on such a device)\n", max,
                    w.arch, max);
        int read_only = 0;
        const char *dir = qf_warm_collect(&w) == 0 ? qf_tool_dir(&read_only) : NULL;
        if (dir && no_gpu[0]) /* said once the directory is settled, not before its errors */
            fprintf(stderr, "qfuse-cache: no usable GPU (%s); warming for sm_%d%s (--arch "
                    "chooses)\n", no_gpu, w.arch, qf_arch_feature(w.arch));
        rc = !dir ? 1 : read_only ? qf_warm_check(&w, dir) : qf_warm_run(&w, jobs, dir);
    }
    free(w.items);
    return rc;
}

/* =====================================================================} */

/* Global options before the command (--dir DIR). Returns the index of the command, or
 * -1 with *rc the exit status. */
static int qf_tool_global(int argc, char **argv, int *rc) {
    int i = 1, dirs = 0;
    *rc = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *v = NULL;
        if (strcmp(argv[i], "--") == 0) { /* the end of the global options */
            i++;
            break;
        }
        if (!qf_tool_opt(argc, argv, &i, "--dir", &v))
            *rc = qf_tool_usage_error("unknown option '%s'", argv[i]);
        else if (dirs++)
            *rc = qf_tool_usage_error("--dir given twice");
        else if (!v || !*v)
            *rc = qf_tool_usage_error("--dir needs a directory");
        else { /* an explicit directory is used even where QFUSE_DISABLE_DISK_CACHE is set; a
                * relative one is taken from the working directory, as a user means it */
            char cwd[PATH_MAX], abs[PATH_MAX];
            if (v[0] != '/' && (!getcwd(cwd, sizeof cwd) ||
                                snprintf(abs, sizeof abs, "%s/%s", cwd, v) >= (int)sizeof abs))
                *rc = qf_tool_usage_error("--dir %s: cannot make it an absolute path", v);
            else {
                setenv("QFUSE_CACHE_DIR", v[0] == '/' ? v : abs, 1);
                unsetenv("QFUSE_DISABLE_DISK_CACHE");
            }
        }
        if (*rc)
            return -1;
    }
    if (i == argc)
        *rc = qf_tool_usage_error("missing command (list, clear, prune, warm)");
    return i == argc ? -1 : i;
}

/* The command line; main adds stdout's write errors. Returns the exit status. */
static int qf_tool_main(int argc, char **argv) {
    if (tool_help_asked(argc, argv)) { /* whatever else is given, as in every tool */
        fputs(qf_usage, stdout);
        return 0;
    }
    int rc, c = qf_tool_global(argc, argv, &rc);
    if (c < 0)
        return rc;
    const char *cmd = argv[c];
    int simple = !strcmp(cmd, "list") || !strcmp(cmd, "clear");
    if (simple && c + 1 < argc)
        return qf_tool_usage_error("%s: %s '%s'%s", cmd, qf_tool_arg_kind(argv[c + 1]),
                                   argv[c + 1], qf_tool_dir_hint(argv[c + 1]));
    if (!strcmp(cmd, "list"))
        return qf_tool_list();
    if (!strcmp(cmd, "clear"))
        return qf_tool_remove(0, "clear");
    if (!strcmp(cmd, "prune"))
        return qf_tool_prune(argc - c - 1, argv + c + 1);
    if (!strcmp(cmd, "warm"))
        return qf_tool_warm(argc - c - 1, argv + c + 1);
    return qf_tool_usage_error("unknown command '%s' (list, clear, prune, warm)", cmd);
}

int main(int argc, char **argv) {
    tool_std_fds();
    return tool_stdout_status("qfuse-cache", qf_tool_main(argc, argv));
}
