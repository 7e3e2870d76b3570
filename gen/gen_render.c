/* gen_render.c: a variant's prelude (the `__NAME__` placeholders of its CUDA template as
 * #defines, STYLE 12), the entry points a template defines, and the placeholder-free check of
 * shared headers. */
#include "gen_render.h"

#include <stdio.h>

#include <string.h>

#include "registry.h"

/* Upper-case `__X__` names that belong to compilers and CUDA, never to us. CUDA code uses many
 * lower-case ones too (__global__, __shared__), which the upper-case rule already excludes. */
static const char *const qf_gen_macro_prefixes[] = {
    "__CUDA",   "__NV",   "__GNUC",  "__STDC",     "__SIZEOF_", "__BYTE_ORDER",
    "__ORDER_", "__LP64", "__CLANG", "__OPTIMIZE", NULL};
static const char *const qf_gen_macro_names[] = {
    "__FILE__",      "__LINE__",          "__DATE__",   "__TIME__",     "__TIMESTAMP__",
    "__COUNTER__",   "__VA_ARGS__",       "__VA_OPT__", "__FUNCTION__", "__PRETTY_FUNCTION__",
    "__BASE_FILE__", "__INCLUDE_LEVEL__", NULL};

static int qf_gen_is_known_macro(const char *tok) {
    for (int i = 0; qf_gen_macro_prefixes[i]; i++)
        if (strncmp(tok, qf_gen_macro_prefixes[i], strlen(qf_gen_macro_prefixes[i])) == 0)
            return 1;
    for (int i = 0; qf_gen_macro_names[i]; i++)
        if (strcmp(tok, qf_gen_macro_names[i]) == 0)
            return 1;
    return 0;
}

int qf_gen_is_placeholder(const char *tok) {
    size_t n = strlen(tok);
    if (n < 5 || strncmp(tok, "__", 2) != 0 || strcmp(tok + n - 2, "__") != 0)
        return 0;
    if (!(tok[2] >= 'A' && tok[2] <= 'Z'))
        return 0;
    if (strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != n)
        return 0;
    return !qf_gen_is_known_macro(tok);
}

static int qf_gen_is_ident_char(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Index of tok[0..n) among vals' names, or -1. */
static int qf_gen_value_index(const qf_gen_values *vals, const char *tok, size_t n) {
    for (int i = 0; i < vals->n; i++)
        if (strlen(vals->name[i]) == n && memcmp(vals->name[i], tok, n) == 0)
            return i;
    return -1;
}

/* Handles one identifier token tok[0..n) found on `line`: marks its value used, or fails when
 * it is a placeholder without one. */
static int qf_gen_render_token(const char *tpl_name, int line, const char *tok, size_t n,
                               const qf_gen_values *vals, int *used, qf_gen_err *e) {
    int i = qf_gen_value_index(vals, tok, n);
    if (i >= 0) {
        used[i] = 1;
        return 0;
    }
    char name[128];
    if (n < sizeof name && tok[0] == '_') {
        memcpy(name, tok, n);
        name[n] = '\0';
        if (qf_gen_is_placeholder(name))
            return qf_gen_fail(e, "%s:%d: placeholder '%s' has no value", tpl_name, line, name);
    }
    return 0;
}

/* Fails when a supplied value was never used. */
static int qf_gen_render_check_used(const char *tpl_name, const qf_gen_values *vals,
                                    const int *used, qf_gen_err *e) {
    for (int i = 0; i < vals->n; i++)
        if (!used[i])
            return qf_gen_fail(e, "%s: value for placeholder '%s' is never used", tpl_name,
                               vals->name[i]);
    return 0;
}

/* Calls fn(arg, line, tok, n) on every identifier token of text; stops at the first nonzero. */
typedef int (*qf_gen_token_fn)(void *arg, int line, const char *tok, size_t n);
static int qf_gen_tokens(const char *text, qf_gen_token_fn fn, void *arg) {
    int line = 1;
    size_t i = 0;
    while (text[i]) {
        int starts = qf_gen_is_ident_char(text[i]) && !(text[i] >= '0' && text[i] <= '9') &&
                     (i == 0 || !qf_gen_is_ident_char(text[i - 1]));
        if (!starts) {
            line += text[i] == '\n';
            i++;
            continue;
        }
        size_t j = i;
        while (qf_gen_is_ident_char(text[j]))
            j++;
        int rc = fn(arg, line, text + i, j - i);
        if (rc != 0)
            return rc;
        i = j;
    }
    return 0;
}

typedef struct qf_gen_render_scan {
    const char *tpl_name;
    const qf_gen_values *vals;
    int used[QF_GEN_VALUES_MAX];
    qf_gen_err *e;
} qf_gen_render_scan;

static int qf_gen_render_scan_token(void *arg, int line, const char *tok, size_t n) {
    qf_gen_render_scan *s = arg;
    return qf_gen_render_token(s->tpl_name, line, tok, n, s->vals, s->used, s->e);
}

int qf_gen_render(const char *tpl_name, const char *tpl, const qf_gen_values *vals, qf_gen_buf *out,
                  qf_gen_err *e) {
    qf_gen_render_scan s = {.tpl_name = tpl_name, .vals = vals, .e = e};
    if (qf_gen_tokens(tpl, qf_gen_render_scan_token, &s) != 0 ||
        qf_gen_render_check_used(tpl_name, vals, s.used, e) != 0)
        return -1;
    for (int i = 0; i < vals->n; i++)
        qf_gen_buf_addf(out, "#define %s %s\n", vals->name[i], vals->value[i]);
    return 0;
}

/* ========================================================================= shared headers */

typedef struct qf_gen_header_scan {
    const char *name;
    qf_gen_err *e;
} qf_gen_header_scan;

static int qf_gen_header_scan_token(void *arg, int line, const char *tok, size_t n) {
    qf_gen_header_scan *s = arg;
    char name[128];
    if (n >= sizeof name || tok[0] != '_')
        return 0;
    memcpy(name, tok, n);
    name[n] = '\0';
    if (!qf_gen_is_placeholder(name))
        return 0;
    return qf_gen_fail(s->e,
                       "%s:%d: placeholder '%s' in a shared header (headers take template "
                       "parameters; only templates have placeholders)",
                       s->name, line, name);
}

int qf_gen_header_check(const char *name, const char *text, qf_gen_err *e) {
    qf_gen_header_scan s = {.name = name, .e = e};
    return qf_gen_tokens(text, qf_gen_header_scan_token, &s) != 0 ? -1 : 0;
}

/* ========================================================================= entry points */

/* How a template defines its entry points: the main entry is the placeholder __KERNEL_NAME__
 * followed by its parameter list; the others are invocations of their macro
 * (templates/qf_dev_module.cuh) at the start of a line. */
static const struct {
    const char *mark;
    unsigned entries;
} qf_gen_entry_marks[] = {
    {"__KERNEL_NAME__(", QF_ENTRY_BIT(QF_ENTRY_MAIN)},
    {"\nQF_ROWS_ENTRIES(", QF_ENTRY_BIT(QF_ENTRY_ROWS1) | QF_ENTRY_BIT(QF_ENTRY_ROWS2) |
                              QF_ENTRY_BIT(QF_ENTRY_ROWS4) | QF_ENTRY_BIT(QF_ENTRY_ROWS8)},
    {"\nQF_AMAX_ENTRY(", QF_ENTRY_BIT(QF_ENTRY_AMAX)},
    {"\nQF_AMAX_ENTRY_MIN(", QF_ENTRY_BIT(QF_ENTRY_AMAX)},
    {"\nQF_COLS_ENTRY(", QF_ENTRY_BIT(QF_ENTRY_COLS)},
    {"\nQF_COLS_ENTRY_MIN(", QF_ENTRY_BIT(QF_ENTRY_COLS)},
    {"\nQF_ALPHA_ENTRY(", QF_ENTRY_BIT(QF_ENTRY_ALPHA)},
    {"\nQF_DEQUANT_ENTRY(", QF_ENTRY_BIT(QF_ENTRY_DEQUANT)},
    {"\nQF_REDUCE_ENTRY(", QF_ENTRY_BIT(QF_ENTRY_REDUCE)},
    {"\nQF_GRAD_ENTRY(", QF_ENTRY_BIT(QF_ENTRY_GRAD)},
};

int qf_gen_template_entries(const char *tpl_name, const char *tpl, unsigned *entries,
                            qf_gen_err *e) {
    *entries = 0;
    for (size_t i = 0; i < sizeof qf_gen_entry_marks / sizeof qf_gen_entry_marks[0]; i++)
        if (strstr(tpl, qf_gen_entry_marks[i].mark))
            *entries |= qf_gen_entry_marks[i].entries;
    if (!(*entries & QF_ENTRY_BIT(QF_ENTRY_MAIN)))
        return qf_gen_fail(e, "%s: no main entry point (`__KERNEL_NAME__(`)", tpl_name);
    return 0;
}

char *qf_gen_variant_prelude(const qf_recipe *r, const qf_gen_variant *v, const char *tpath,
                             const char *tpl, qf_gen_err *e) {
    const char *tname = v->cfg.template_name;
    qf_gen_values vals;
    qf_gen_variant_values(r, v, &vals);
    qf_gen_buf b;
    qf_gen_buf_init(&b);
    qf_gen_buf_addf(&b,
                    "/* Generated by gen/qfuse-gen from %s + templates/%s " QF_GEN_BANNER_DASH
                    " do not edit */\n",
                    r->file, tname);
    if (qf_gen_render(tpath, tpl, &vals, &b, e) != 0) {
        qf_gen_buf_free(&b);
        return NULL;
    }
    qf_gen_buf_addf(&b, "#line 1 \"templates/%s\"\n", tname);
    char *text = qf_gen_buf_take(&b);
    if (!text)
        qf_gen_fail(e, "out of memory rendering %s", v->desc.name);
    return text;
}
