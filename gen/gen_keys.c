/* gen_keys.c: finds a key given twice in a recipe's returned table. A Lua table constructor keeps
 * the last of two equal keys without a word, so the check reads the source text: a small
 * tokenizer (Lua 5.4's comments, short and long strings, names) finds the table constructor
 * after the chunk's last top-level `return` and compares the keys of its own fields, `name = v`
 * and `["name"] = v`. Nested tables and code before the `return` are not looked at. */
#include "gen_keys.h"

#include <ctype.h>
#include <string.h>

typedef enum qf_tok_kind { QF_TOK_END, QF_TOK_NAME, QF_TOK_STRING, QF_TOK_PUNCT } qf_tok_kind;

typedef struct qf_tok {
    qf_tok_kind kind;
    const char *s; /* the name, the string's contents, or the punctuation character */
    size_t n;
    int line;
} qf_tok;

typedef struct qf_lex {
    const char *p, *end;
    int line;
} qf_lex;

/* Level of a long bracket at p ("[==[" -> 2), or -1 when p does not open one. */
static int qf_lex_long_open(const char *p, const char *end) {
    if (p >= end || *p != '[')
        return -1;
    int level = 0;
    for (p++; p < end && *p == '='; p++)
        level++;
    return p < end && *p == '[' ? level : -1;
}

/* Skips a long bracket of `level` whose opening starts at x->p; its contents into *t. */
static void qf_lex_long(qf_lex *x, int level, qf_tok *t) {
    x->p += level + 2;
    t->s = x->p;
    for (; x->p < x->end; x->p++) {
        if (*x->p == '\n')
            x->line++;
        if (*x->p == ']' && x->end - x->p >= level + 2 && x->p[level + 1] == ']' &&
            strspn(x->p + 1, "=") >= (size_t)level) {
            t->n = (size_t)(x->p - t->s);
            x->p += level + 2;
            return;
        }
    }
    t->n = (size_t)(x->p - t->s); /* unterminated: Lua has reported it already */
}

/* Skips white space and comments. */
static void qf_lex_space(qf_lex *x) {
    while (x->p < x->end) {
        if (*x->p == '\n') {
            x->line++;
            x->p++;
        } else if (isspace((unsigned char)*x->p)) {
            x->p++;
        } else if (x->end - x->p >= 2 && x->p[0] == '-' && x->p[1] == '-') {
            x->p += 2;
            const int level = qf_lex_long_open(x->p, x->end);
            qf_tok ignored;
            if (level >= 0)
                qf_lex_long(x, level, &ignored);
            else
                while (x->p < x->end && *x->p != '\n')
                    x->p++;
        } else {
            return;
        }
    }
}

static qf_tok qf_lex_next(qf_lex *x) {
    qf_lex_space(x);
    qf_tok t = {QF_TOK_END, x->p, 0, x->line};
    if (x->p >= x->end)
        return t;
    const char c = *x->p;
    const int level = qf_lex_long_open(x->p, x->end);
    if (level >= 0) {
        t.kind = QF_TOK_STRING;
        qf_lex_long(x, level, &t);
    } else if (c == '"' || c == '\'') {
        t.kind = QF_TOK_STRING;
        t.s = ++x->p;
        while (x->p < x->end && *x->p != c && *x->p != '\n')
            x->p += *x->p == '\\' && x->p + 1 < x->end ? 2 : 1;
        t.n = (size_t)(x->p - t.s);
        if (x->p < x->end)
            x->p++;
    } else if (isalpha((unsigned char)c) || c == '_') {
        t.kind = QF_TOK_NAME;
        while (x->p < x->end && (isalnum((unsigned char)*x->p) || *x->p == '_'))
            x->p++;
        t.n = (size_t)(x->p - t.s);
    } else {
        t.kind = QF_TOK_PUNCT;
        t.n = 1;
        x->p++;
        if (c == '=' && x->p < x->end && *x->p == '=') /* "==" is not an assignment */
            t.n = 2, x->p++;
    }
    return t;
}

static int qf_tok_is(const qf_tok *t, const char *punct) {
    return t->kind == QF_TOK_PUNCT && t->n == strlen(punct) && memcmp(t->s, punct, t->n) == 0;
}

/* Start of the constructor after the chunk's last `return` at brace depth 0, or NULL. */
static const char *qf_keys_table(const char *text, size_t len, int *line) {
    qf_lex x = {text, text + len, 1};
    const char *found = NULL;
    int depth = 0;
    qf_tok prev = {QF_TOK_END, NULL, 0, 0};
    for (qf_tok t = qf_lex_next(&x); t.kind != QF_TOK_END; prev = t, t = qf_lex_next(&x)) {
        if (qf_tok_is(&t, "{")) {
            if (depth == 0 && prev.kind == QF_TOK_NAME && prev.n == 6 &&
                memcmp(prev.s, "return", 6) == 0)
                found = t.s, *line = t.line;
            depth++;
        } else if (qf_tok_is(&t, "}") && depth > 0) {
            depth--;
        }
    }
    return found;
}

int qf_gen_duplicate_key(const char *text, size_t len, qf_gen_dup *dup) {
    int line = 1;
    const char *start = qf_keys_table(text, len, &line);
    if (!start)
        return 0;
    enum { MAX_KEYS = 128 };
    qf_tok keys[MAX_KEYS];
    int n_keys = 0, depth = 0;
    qf_lex x = {start, text + len, line};
    qf_tok win[4] = {{QF_TOK_END, NULL, 0, 0}}; /* the last tokens at depth 1, newest last */
    for (qf_tok t = qf_lex_next(&x); t.kind != QF_TOK_END; t = qf_lex_next(&x)) {
        if (qf_tok_is(&t, "{") || qf_tok_is(&t, "(") || qf_tok_is(&t, "["))
            depth++;
        if (qf_tok_is(&t, "}") || qf_tok_is(&t, ")") || qf_tok_is(&t, "]"))
            depth--;
        if (depth == 0)
            break; /* the constructor's closing brace */
        if (depth > 2 || (depth == 2 && !qf_tok_is(&t, "[") && t.kind != QF_TOK_STRING))
            continue; /* inside a nested value; ["key"] sits at depth 2 */
        memmove(win, win + 1, 3 * sizeof win[0]);
        win[3] = t;
        if (!qf_tok_is(&t, "=") || depth != 1)
            continue;
        const int sep = qf_tok_is(&win[1], "{") || qf_tok_is(&win[1], ",") ||
                        qf_tok_is(&win[1], ";");
        qf_tok key = {QF_TOK_END, NULL, 0, 0};
        if (win[2].kind == QF_TOK_NAME && sep)
            key = win[2];
        else if (qf_tok_is(&win[2], "]") && win[1].kind == QF_TOK_STRING && qf_tok_is(&win[0], "["))
            key = win[1];
        if (key.kind == QF_TOK_END)
            continue;
        for (int i = 0; i < n_keys; i++)
            if (keys[i].n == key.n && memcmp(keys[i].s, key.s, key.n) == 0) {
                const size_t shown = key.n < sizeof dup->key - 1 ? key.n : sizeof dup->key - 1;
                memcpy(dup->key, key.s, shown);
                dup->key[shown] = '\0';
                dup->first_line = keys[i].line;
                dup->line = key.line;
                return 1;
            }
        if (n_keys < MAX_KEYS)
            keys[n_keys++] = key;
    }
    return 0;
}
