/* gen_render.c: filling the `__NAME__` placeholders of a CUDA template (STYLE 12). */
#include "gen_render.h"

#include <string.h>

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

/* Handles one identifier token tok[0..n) found on `line`: substitutes, copies or fails. */
static int qf_gen_render_token(const char *tpl_name, int line, const char *tok, size_t n,
                               const qf_gen_values *vals, int *used, qf_gen_buf *out,
                               qf_gen_err *e) {
    int i = qf_gen_value_index(vals, tok, n);
    if (i >= 0) {
        used[i] = 1;
        qf_gen_buf_adds(out, vals->value[i]);
        return 0;
    }
    char name[128];
    if (n < sizeof name && tok[0] == '_') {
        memcpy(name, tok, n);
        name[n] = '\0';
        if (qf_gen_is_placeholder(name))
            return qf_gen_fail(e, "%s:%d: placeholder '%s' has no value", tpl_name, line, name);
    }
    qf_gen_buf_addn(out, tok, n);
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

int qf_gen_render(const char *tpl_name, const char *tpl, const qf_gen_values *vals, qf_gen_buf *out,
                  qf_gen_err *e) {
    int used[QF_GEN_VALUES_MAX] = {0}, line = 1;
    size_t i = 0;
    while (tpl[i]) {
        int starts = qf_gen_is_ident_char(tpl[i]) && !(tpl[i] >= '0' && tpl[i] <= '9') &&
                     (i == 0 || !qf_gen_is_ident_char(tpl[i - 1]));
        if (!starts) {
            line += tpl[i] == '\n';
            qf_gen_buf_addn(out, tpl + i, 1);
            i++;
            continue;
        }
        size_t j = i;
        while (qf_gen_is_ident_char(tpl[j]))
            j++;
        if (qf_gen_render_token(tpl_name, line, tpl + i, j - i, vals, used, out, e) != 0)
            return -1;
        i = j;
    }
    return qf_gen_render_check_used(tpl_name, vals, used, e);
}
