/* gen_recipe.c: loading a recipe file in a Lua sandbox and validating it into a C struct.
 *
 * A recipe is data (STYLE 8): a text chunk run in an empty environment (no standard library at
 * all), under a heap cap and an instruction budget, that returns one table. All Lua work happens
 * in qf_gen_recipe_pmain under lua_pcall (STYLE 11); helpers raise with luaL_error, and validated
 * values are copied into fixed-size fields of qf_recipe, so no malloc'ed memory is live across
 * a call that can raise. A recipe file is read whole (size-capped, regular files only) and loaded
 * from memory, the entry point the fuzzer (tests/fuzz/fuzz_recipe.c) drives directly. */
#include "gen_recipe.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "gen_keys.h"
#include "names.h"
#include "status.h"

/* ========================================================================= formats */

/* The element format of each role under the per-tensor FP8 `format` option (numerics 2.1, 2.2).
 * ORDER FP8_FORMAT */
static const qf_dtype qf_gen_fp8_format_fmts[][QF_ROLE_COUNT] = {
    [QF_FP8_FORMAT_HYBRID] = {[QF_ROLE_INPUT] = QF_DTYPE_E4M3,
                              [QF_ROLE_WEIGHT] = QF_DTYPE_E4M3,
                              [QF_ROLE_GRAD] = QF_DTYPE_E5M2},
    [QF_FP8_FORMAT_E4M3] = {[QF_ROLE_INPUT] = QF_DTYPE_E4M3,
                            [QF_ROLE_WEIGHT] = QF_DTYPE_E4M3,
                            [QF_ROLE_GRAD] = QF_DTYPE_E4M3},
};
_Static_assert(sizeof(qf_gen_fp8_format_fmts) / sizeof(qf_gen_fp8_format_fmts[0]) ==
                   QF_FP8_FORMAT_COUNT,
               "format options");
_Static_assert(sizeof(qf_dtype) == sizeof(int) && sizeof(qf_fp8_format) == sizeof(int) &&
                   sizeof(qf_amax_compute) == sizeof(int) &&
                   sizeof(qf_scale_rounding) == sizeof(int),
               "option fields are stored as int");

/* Fields every family accepts besides its schema. */
static const char *const qf_gen_common_fields[] = {"family", "description"};
#define QF_GEN_COMMON_FIELDS 2

/* ========================================================================= sandbox */

/* The chunk's name in Lua's messages (one control character, which a shown path never holds:
 * qf_gen_path_shown escapes them); qf_gen_recipe_error puts the path in its place. */
#define QF_GEN_CHUNK_MARK "\x1e"

/* State shared by the allocator, the instruction hook and the protected main function. */
typedef struct qf_gen_sandbox {
    const char *path; /* as given: error messages name it */
    const char *text; /* the recipe's bytes (not owned) */
    size_t len;
    size_t used, cap; /* heap bytes in use and the cap */
    unsigned refusals; /* allocations refused so far (QF_GEN_REFUSALS_MAX) */
    unsigned long insns, insn_budget;
    double t0, seconds; /* CLOCK_MONOTONIC start and the wall-clock budget */
    int in_chunk; /* 1 while the recipe's own code runs: errors get a traceback */
    int depth;    /* Lua calls open now (call hook) */
    int unsupported; /* the recipe names a family that is not implemented */
    qf_recipe *out;
} qf_gen_sandbox;

/* Instructions between two hook calls: cheap, yet an endless loop stops within 1000. */
#define QF_GEN_HOOK_STEP 1000
/* Calls a recipe may nest: ample for data, and an endless recursion stops with its own message
 * long before its stack reaches the memory cap. */
#define QF_GEN_DEPTH_MAX 200

/* Refused allocations after which the heap counts as exhausted for good.
 * NOTES: Lua answers a refusal with a full (emergency) collection and one retry. A recipe that
 * keeps its live data just under the cap and churns garbage would get a full collection every
 * few allocations: minutes of work within its instruction budget, which counts no GC. Past this
 * many refusals every growth fails, so it ends with the memory error instead. */
#define QF_GEN_REFUSALS_MAX 16

/* lua_Alloc that refuses to grow the heap past sb->cap; Lua turns NULL into a memory error. */
static void *qf_gen_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    qf_gen_sandbox *sb = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        sb->used -= old;
        return NULL;
    }
    if (nsize > old &&
        (sb->refusals >= QF_GEN_REFUSALS_MAX || nsize - old > sb->cap - sb->used)) {
        sb->refusals += sb->refusals < QF_GEN_REFUSALS_MAX;
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (p)
        sb->used = sb->used - old + nsize;
    return p;
}

/* Seconds on CLOCK_MONOTONIC. */
static double qf_gen_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Count hook: stops a recipe that runs past its instruction budget (an endless loop); call and
 * return events keep the call depth (a tail call replaces its caller: no change). */
static void qf_gen_hook(lua_State *L, lua_Debug *ar) {
    void *ud;
    lua_getallocf(L, &ud);
    qf_gen_sandbox *sb = ud;
    if (ar->event == LUA_HOOKCALL && ++sb->depth > QF_GEN_DEPTH_MAX)
        luaL_error(L, "calls nested deeper than %d (endless recursion?)", QF_GEN_DEPTH_MAX);
    if (ar->event == LUA_HOOKRET)
        sb->depth -= sb->depth > 0;
    if (ar->event != LUA_HOOKCOUNT)
        return;
    if (qf_gen_now() - sb->t0 > sb->seconds)
        luaL_error(L, "%s: ran longer than %f s (a recipe is data: an endless or very slow loop?)",
                   sb->path, sb->seconds);
    sb->insns += QF_GEN_HOOK_STEP;
    if (sb->insns > sb->insn_budget)
        luaL_error(L, "%s: instruction budget of %I exceeded (endless loop?)", sb->path,
                   (lua_Integer)sb->insn_budget); /* lua_pushfstring has no %lu */
}

/* Message handler: an error raised by the recipe's code is one line, "file:line: message" (Lua
 * names the position), with a stack traceback under QFUSE_VERBOSE; validation errors are
 * already complete sentences and stay one line. */
static int qf_gen_msghandler(lua_State *L) {
    const qf_gen_sandbox *sb = lua_touserdata(L, lua_upvalueindex(1));
    const char *msg = lua_tostring(L, 1);
    if (!msg)
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    if (sb->in_chunk && qf_verbose())
        luaL_traceback(L, L, msg, 1);
    return 1;
}

/* ========================================================================= field readers */

/* Bytes of a recipe string shown in a message; longer ones are cut with "...". */
#define QF_GEN_SHOW_MAX 40

/* Pushes s[0..len) as messages show it: cut to QF_GEN_SHOW_MAX bytes, bytes other than
 * printable ASCII (NUL, newline, non-ASCII) and the backslash written as \ddd, Lua's escape. */
static const char *qf_gen_push_shown(lua_State *L, const char *s, size_t len) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < len && i < QF_GEN_SHOW_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            luaL_addchar(&b, (char)c);
        } else {
            char esc[8];
            snprintf(esc, sizeof esc, "\\%u", c);
            luaL_addstring(&b, esc);
        }
    }
    if (len > QF_GEN_SHOW_MAX)
        luaL_addstring(&b, "...");
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

/* Pushes t[name] without metamethods (t at index 1). */
static int qf_gen_getfield(lua_State *L, const char *name) {
    lua_pushstring(L, name);
    return lua_rawget(L, 1);
}

/* Pushes t[name] and returns 1 when it is present, 0 when absent (nil); raises "field 'x' (what
 * expected, got T)" when it has another Lua type than `type`: recipes are typed, so 0/1 is no
 * boolean and "5" no integer. */
static int qf_gen_field_typed(lua_State *L, const qf_gen_sandbox *sb, const char *name, int type,
                              const char *what) {
    const int t = qf_gen_getfield(L, name);
    if (t != LUA_TNIL && t != type)
        luaL_error(L, "%s: field '%s' (%s expected, got %s)", sb->path, name, what,
                   luaL_typename(L, -1));
    return t != LUA_TNIL;
}

/* 1 when value v of enum kind is allowed by mask (0: every value). */
static int qf_gen_allowed(unsigned allowed, int v) {
    return allowed == 0 || (v < 32 && ((allowed >> v) & 1u));
}

/* Raises "field 'x' (one of 'a', 'b' expected, got 'c')" for the string s[0..len); when s is
 * NULL, for a value of Lua type `type`: "field 'x' is missing (one of 'a', 'b' expected)" (nil)
 * or "field 'x' (one of 'a', 'b' expected, got number)". Lists the allowed values of enum kind
 * (families: the implemented ones). */
static void qf_gen_option_error(lua_State *L, const qf_gen_sandbox *sb, const char *name,
                                qf_enum kind, unsigned allowed, const char *s, size_t len,
                                int type) {
    s = s ? qf_gen_push_shown(L, s, len) : NULL;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int v = 0, i = 0; v < qf_enum_count(kind); v++)
        if (qf_gen_allowed(allowed, v) && (kind != QF_ENUM_FAMILY || qf_families[v].implemented)) {
            lua_pushfstring(L, "%s'%s'", i++ ? ", " : "", qf_enum_name(kind, v));
            luaL_addvalue(&b);
        }
    luaL_pushresult(&b);
    if (!s && type == LUA_TNIL)
        luaL_error(L, "%s: field '%s' is missing (one of %s expected)", sb->path, name,
                   lua_tostring(L, -1));
    if (!s)
        luaL_error(L, "%s: field '%s' (one of %s expected, got %s)", sb->path, name,
                   lua_tostring(L, -1), lua_typename(L, type));
    luaL_error(L, "%s: field '%s' (one of %s expected, got '%s')", sb->path, name,
               lua_tostring(L, -1), s);
}

/* Reads option field `name` (default value def, or required when def < 0) as a value of enum
 * kind that allowed permits (STYLE 10: one name list, the enum's); raises "field 'x' (one of
 * 'a', 'b' expected, got 'c')" (or got a type, or is missing). Pops the value. */
static int qf_gen_field_option(lua_State *L, const qf_gen_sandbox *sb, const char *name,
                               qf_enum kind, unsigned allowed, int def) {
    const int type = qf_gen_getfield(L, name);
    if (type == LUA_TNIL && def >= 0) {
        lua_pop(L, 1);
        return def;
    }
    if (type != LUA_TSTRING) /* absent and required, or not a string */
        qf_gen_option_error(L, sb, name, kind, allowed, NULL, 0, type);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    int v = qf_enum_find(kind, s, len);
    if (v < 0 || !qf_gen_allowed(allowed, v))
        qf_gen_option_error(L, sb, name, kind, allowed, s, len, type);
    lua_pop(L, 1);
    return v;
}

/* Reads integer field `name` in lo..hi; def (which may lie outside lo..hi: "not given") when
 * absent. Pops the value. */
static lua_Integer qf_gen_field_integer(lua_State *L, const qf_gen_sandbox *sb, const char *name,
                                        lua_Integer lo, lua_Integer hi, lua_Integer def) {
    lua_Integer v = def;
    if (qf_gen_field_typed(L, sb, name, LUA_TNUMBER, "integer")) {
        int isint = 0;
        v = lua_tointegerx(L, -1, &isint);
        if (!isint) {
            const lua_Number x = lua_tonumber(L, -1);
            luaL_error(L, "%s: field '%s' (%s: an integer in %I..%I expected)", sb->path, name,
                       x != x ? "nan" : lua_tostring(L, -1), lo, hi);
        }
        if (v < lo && hi == LUA_MAXINTEGER) { /* 64-bit fields: maybe a hex literal that wrapped */
            char hex[24];
            snprintf(hex, sizeof hex, "0x%llX", (unsigned long long)v);
            luaL_error(L, "%s: field '%s' (value %I out of range %I..%I; if written in hex: a "
                       "literal above 0x7FFFFFFFFFFFFFFF wraps to a negative integer, %s reads as "
                       "%I)",
                       sb->path, name, v, lo, hi, hex, v);
        }
        if (v < lo || v > hi)
            luaL_error(L, "%s: field '%s' (value %I out of range %I..%I)", sb->path, name, v, lo,
                       hi);
    }
    lua_pop(L, 1);
    return v;
}

/* Reads number field `name`, finite and in lo..hi (def when absent), as a float. Pops it. */
static float qf_gen_field_number(lua_State *L, const qf_gen_sandbox *sb, const char *name,
                                 double lo, double hi, double def) {
    double v = def;
    if (qf_gen_field_typed(L, sb, name, LUA_TNUMBER, "number")) {
        const double given = (double)lua_tonumber(L, -1);
        if (given != given)
            luaL_error(L, "%s: field '%s' (a number expected, got nan)", sb->path, name);
        /* the field is an fp32: the value is rounded to it first (3.4028235e38, the usual
         * spelling of FLT_MAX, is FLT_MAX), then checked; doubles at or past 2^128 - 2^103
         * would round to infinity */
        v = fabs(given) < 0x1.ffffffp+127 ? (double)(float)given : given;
        if (!(given >= lo && v >= lo && v <= hi)) /* given: -1e-46 is below 0, not 0 */
            luaL_error(L, "%s: field '%s' (value %f out of range %f..%f)", sb->path, name,
                       (lua_Number)given, (lua_Number)lo, (lua_Number)hi);
        if (v == 0.0 && given != 0.0)
            luaL_error(L, "%s: field '%s' (value %f is 0 in fp32: at most 2^-150, half its "
                       "smallest subnormal; write 0 if 0 is meant)", sb->path, name,
                       (lua_Number)given);
    }
    lua_pop(L, 1);
    return v == 0.0 ? 0.0f : (float)v; /* -0.0 is 0: one recipe, one options string and key */
}

/* Reads boolean field `name` (default def when absent). Pops the value. */
static int qf_gen_field_boolean(lua_State *L, const qf_gen_sandbox *sb, const char *name,
                                int def) {
    int v = def;
    if (qf_gen_field_typed(L, sb, name, LUA_TBOOLEAN, "boolean"))
        v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* Length of the UTF-8 sequence at s[0..n) (RFC 3629: shortest form, no surrogates, at most
 * U+10FFFF), or 0 when it is malformed. */
static size_t qf_gen_utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0], lo = 0x80, hi = 0xbf;
    if (c < 0x80)
        return 1;
    if (c < 0xc2 || c > 0xf4) /* a continuation byte, an overlong lead, or past U+10FFFF */
        return 0;
    size_t k = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    /* The second byte's range rules out overlong forms, surrogates and code points > U+10FFFF. */
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (k > n)
        return 0;
    for (size_t i = 1; i < k; i++, lo = 0x80, hi = 0xbf)
        if (s[i] < lo || s[i] > hi)
            return 0;
    return k;
}

/* 1 when s[0..n) is valid UTF-8: the description goes into manifest.json, which must be. */
static int qf_gen_is_utf8(const char *s, size_t n) {
    for (size_t i = 0, k; i < n; i += k)
        if ((k = qf_gen_utf8_seq((const unsigned char *)s + i, n - i)) == 0)
            return 0;
    return 1;
}

/* Copies optional string field `name` (at most n-1 bytes) into dst; "" when absent. */
static void qf_gen_field_string(lua_State *L, const qf_gen_sandbox *sb, const char *name, char *dst,
                                size_t n) {
    dst[0] = '\0';
    if (qf_gen_field_typed(L, sb, name, LUA_TSTRING, "string")) {
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        if (len >= n || strlen(s) != len)
            luaL_error(L, "%s: field '%s' (string of at most %d bytes without NUL expected)",
                       sb->path, name, (int)n - 1);
        if (!qf_gen_is_utf8(s, len))
            luaL_error(L, "%s: field '%s' (UTF-8 text expected)", sb->path, name);
        memcpy(dst, s, len + 1);
    }
    lua_pop(L, 1);
}

/* ========================================================================= validation */

/* Byte order of two strings that may hold NUL bytes (then the shorter first). */
static int qf_gen_cmp_bytes(const char *a, size_t na, const char *b, size_t nb) {
    int c = memcmp(a, b, na < nb ? na : nb);
    return c ? c : (na > nb) - (na < nb);
}

/* Name of field i of family t: the common fields first, then its schema. */
static const char *qf_gen_field_name(const qf_family_traits *t, int i) {
    return i < QF_GEN_COMMON_FIELDS ? qf_gen_common_fields[i]
                                    : t->fields[i - QF_GEN_COMMON_FIELDS].name;
}

/* 1 when s[0..len) names a field of family t. Compares whole strings, so "margin\0x" (an
 * embedded NUL) matches nothing. */
static int qf_gen_is_field(const qf_family_traits *t, const char *s, size_t len) {
    for (int i = 0; i < QF_GEN_COMMON_FIELDS + t->n_fields; i++) {
        const char *f = qf_gen_field_name(t, i);
        if (strlen(f) == len && memcmp(s, f, len) == 0)
            return 1;
    }
    return 0;
}

/* Raises "unknown field 'x'" for the first (sorted, so the message does not depend on the
 * table's traversal order) key of the table at index 1 that family t does not accept. */
static void qf_gen_check_unknown(lua_State *L, const qf_gen_sandbox *sb,
                                 const qf_family_traits *t) {
    const char *first = NULL;
    size_t first_len = 0, len;
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {
        lua_pop(L, 1); /* the value */
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: unknown field [%s] (fields are named: key = value)", sb->path,
                       luaL_typename(L, -1));
        const char *k = lua_tolstring(L, -1, &len); /* stays alive: the table holds it */
        if (!qf_gen_is_field(t, k, len) &&
            (!first || qf_gen_cmp_bytes(k, len, first, first_len) < 0))
            first = k, first_len = len;
    }
    if (!first)
        return;
    luaL_Buffer known; /* "a, b, c": the fields this family accepts */
    luaL_buffinit(L, &known);
    for (int i = 0; i < QF_GEN_COMMON_FIELDS + t->n_fields; i++) {
        if (i)
            luaL_addstring(&known, ", ");
        luaL_addstring(&known, qf_gen_field_name(t, i));
    }
    luaL_pushresult(&known);
    const char *list = lua_tostring(L, -1); /* kept alive on the stack */
    const char *shown = qf_gen_push_shown(L, first, first_len);
    luaL_error(L, "%s: unknown field '%s' (this family's fields: %s)", sb->path, shown, list);
}

/* Reads schema field fd of the table (index 1) into sb->out, its default when absent. */
static void qf_gen_read_field(lua_State *L, const qf_gen_sandbox *sb, const qf_field *fd) {
    char *p = (char *)sb->out + fd->offset;
    switch (fd->type) {
    case QF_FIELD_OPTION:
        *(int *)p = qf_gen_field_option(L, sb, fd->name, (qf_enum)fd->names, fd->allowed,
                                        (int)fd->def);
        if (fd->sets_formats)
            memcpy(sb->out->fmt, qf_gen_fp8_format_fmts[*(int *)p], sizeof sb->out->fmt);
        break;
    case QF_FIELD_INTEGER:
        *(int64_t *)p = qf_gen_field_integer(L, sb, fd->name, fd->lo, fd->hi, (lua_Integer)fd->def);
        break;
    case QF_FIELD_BOOLEAN:
        *(int *)p = qf_gen_field_boolean(L, sb, fd->name, (int)fd->def);
        break;
    case QF_FIELD_NUMBER:
        *(float *)p = qf_gen_field_number(L, sb, fd->name, fd->min, fd->max, fd->def);
        break;
    default:
        luaL_error(L, "%s: field '%s' has no reader for its type", sb->path, fd->name);
    }
}

/* Reads `family`, then every field of its schema (defaults for the absent ones), then the
 * family's cross-field rules. */
static void qf_gen_read_recipe(lua_State *L, qf_gen_sandbox *sb) {
    qf_recipe *r = sb->out;
    r->family = (qf_family)qf_gen_field_option(L, sb, "family", QF_ENUM_FAMILY, 0, -1);
    const qf_family_traits *t = &qf_families[r->family];
    if (!t->implemented) {
        sb->unsupported = 1;
        luaL_error(L, "%s: family '%s' is not implemented yet", sb->path, t->name);
    }
    qf_gen_check_unknown(L, sb, t);
    qf_gen_field_string(L, sb, "description", r->description, sizeof r->description);
    memcpy(r->fmt, t->fmt, sizeof r->fmt);
    r->rht_seed = -1;
    for (int i = 0; i < t->n_fields; i++)
        qf_gen_read_field(L, sb, &t->fields[i]);
    char msg[256];
    const char *bad = t->check ? t->check(r, msg, sizeof msg) : NULL;
    if (bad)
        luaL_error(L, "%s: %s", sb->path, bad);
}

/* Skips what luaL_loadfilex skips at the start of a file: a UTF-8 BOM, then a first line that
 * starts with '#' (a shebang), keeping its newline so line numbers stay right, unless a binary
 * chunk follows (which the text-only mode then refuses). Returns the start; *len shrinks. */
static const char *qf_gen_skip_prefix(const char *s, size_t *len) {
    const char *end = s + *len;
    if (*len >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0)
        s += 3;
    if (s < end && *s == '#') {
        while (s < end && *s != '\n')
            s++;
        if (end - s > 1 && s[1] == LUA_SIGNATURE[0])
            s++;
    }
    *len = (size_t)(end - s);
    return s;
}

/* __index of the recipe's _ENV: reading a name the recipe never assigned is an error, not nil,
 * so that an unquoted string (grad_format = e5m2) or a misspelt boolean (True) does not silently
 * leave the field at its default. Arguments: _ENV, the name. */
static int qf_gen_undefined_name(lua_State *L) {
    size_t len = 0;
    const char *name = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &len) : "?";
    const char *shown = qf_gen_push_shown(L, name, len);
    return luaL_error(L, "undefined name '%s' (a recipe sees no globals; a string value needs "
                      "quotes: \"%s\")", shown, shown);
}

/* The one function that does Lua work (STYLE 11): load text-only, run in an empty _ENV (reading
 * an unassigned name raises: qf_gen_undefined_name), validate the returned table. Argument 1:
 * the sandbox (light userdata). */
static int qf_gen_recipe_pmain(lua_State *L) {
    qf_gen_sandbox *sb = lua_touserdata(L, 1);
    lua_settop(L, 0);
    size_t len = sb->len;
    const char *text = qf_gen_skip_prefix(sb->text, &len);
    /* Lua's messages name the chunk "<id>:line:"; a path longer than its 59-byte chunk id would
     * be cut by bytes (maybe inside a character), so the id is a marker that
     * qf_gen_recipe_error replaces with the path as qfuse shows it */
    int st = luaL_loadbufferx(L, text, len, "=" QF_GEN_CHUNK_MARK, "t");
    if (st != LUA_OK)
        return lua_error(L); /* a memory error stays one: lua_error knows its message */
    lua_newtable(L); /* the recipe's whole world: no io, os, require, load, string... */
    lua_newtable(L); /* its metatable, out of the recipe's reach (no getmetatable) */
    lua_pushcfunction(L, qf_gen_undefined_name);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    lua_setupvalue(L, -2, 1);
    sb->in_chunk = 1;
    lua_call(L, 0, LUA_MULTRET);
    sb->in_chunk = 0;
    lua_sethook(L, NULL, 0, 0);
    const int n = lua_gettop(L); /* the chunk, at index 1, was replaced by its results */
    if (n == 0)
        lua_pushnil(L);
    if (!lua_istable(L, 1))
        luaL_error(L, "%s: recipe must return a table (got %s)", sb->path, luaL_typename(L, 1));
    if (n > 1) /* a second recipe in the same file would be silently dropped */
        luaL_error(L, "%s: recipe must return one table (got %d values)", sb->path, n);
    lua_settop(L, 1); /* the table */
    qf_gen_read_recipe(L, sb);
    return 0;
}

/* ========================================================================= entry points */

/* Sets out->name and out->file from the path's stem; the name must be [a-z0-9_]+. shown: the
 * path as messages show it (qf_gen_path_shown). */
static int qf_gen_recipe_name(const char *path, const char *shown, qf_recipe *out,
                              qf_gen_err *e) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n == 0)
        return qf_gen_fail(e, "'%s': no recipe file name (a path ending in <name>.lua)", shown);
    if (n < 4 || strcmp(base + n - 4, ".lua") != 0)
        return qf_gen_fail(e, "%s: recipe file name must end in .lua", shown);
    if (n == 4)
        return qf_gen_fail(e, "%s: recipe file name has nothing before .lua (the name is the "
                           "file name without .lua)", shown);
    n -= 4;
    if (n > QF_RECIPE_NAME_MAX)
        return qf_gen_fail(e, "%s: recipe name longer than %d characters", shown,
                           QF_RECIPE_NAME_MAX);
    if (strspn(base, "abcdefghijklmnopqrstuvwxyz0123456789_") != n) {
        char name[QF_RECIPE_NAME_MAX + 1];
        qf_gen_shown name_shown;
        snprintf(name, sizeof name, "%.*s", (int)n, base);
        return qf_gen_fail(e, "%s: recipe name '%s' must match [a-z0-9_]+", shown,
                           qf_gen_path_shown(name, &name_shown));
    }
    memcpy(out->name, base, n);
    out->name[n] = '\0';
    /* NOTES: generated files name the recipe by its canonical path, wherever the file was read
     * from, so out/ never holds an absolute or machine-specific path. */
    snprintf(out->file, sizeof out->file, "recipes/%s.lua", out->name);
    snprintf(out->path, sizeof out->path, "%s", path);
    return 0;
}

/* Turns a failed pcall into the error message, which always starts with the path: Lua's chunk
 * id (QF_GEN_CHUNK_MARK, in its positions "<id>:line:" and traceback lines) becomes the path as
 * shown, and messages that do not start with it ("C stack overflow" from the parser, the
 * binary-chunk refusal, "error in error handling") get it in front. */
static int qf_gen_recipe_error(lua_State *L, int st, const qf_gen_sandbox *sb, qf_gen_err *e) {
    if (st == LUA_ERRMEM)
        return qf_gen_fail(e, "%s: memory limit of %zu bytes (%zu MiB) exceeded", sb->path, sb->cap,
                           sb->cap >> 20);
    const char *msg = lua_tostring(L, -1);
    if (!msg)
        msg = "(no error message)";
    char named[sizeof e->msg]; /* in C: the Lua state may be at its memory limit */
    size_t o = 0;
    const size_t plen = strlen(sb->path);
    for (const char *c = msg; *c && o + 1 < sizeof named; c++) {
        if (*c == QF_GEN_CHUNK_MARK[0]) {
            const size_t k = plen < sizeof named - 1 - o ? plen : sizeof named - 1 - o;
            memcpy(named + o, sb->path, k), o += k;
        } else {
            named[o++] = *c;
        }
    }
    named[o] = '\0';
    /* Lua's parser says this without a line where a recipe nests past its C-stack limit
     * (LUAI_MAXCCALLS, 200 levels in Lua 5.4) */
    const char *hint = strcmp(named, "C stack overflow") == 0
                           ? " (nested about 200 levels deep: tables, parentheses, calls, or a "
                             "chain of right-associative operators such as .. or ^)"
                           : "";
    if (strncmp(named, sb->path, plen) != 0)
        return qf_gen_fail(e, "%s: %s%s", sb->path, named, hint);
    return qf_gen_fail(e, "%s", named);
}

int qf_gen_recipe_load_buffer(const char *path, const char *text, size_t len,
                              const qf_gen_limits *lim, qf_recipe *out, qf_gen_err *e) {
    memset(out, 0, sizeof *out);
    qf_gen_shown buf;
    const char *shown = qf_gen_path_shown(path, &buf);
    if (qf_gen_recipe_name(path, shown, out, e) != 0)
        return -1;
    qf_gen_sandbox sb = {.path = shown, .text = text, .len = len, .out = out};
    sb.cap = lim && lim->mem_bytes ? lim->mem_bytes : QF_GEN_MEM_DEFAULT;
    sb.insn_budget = lim && lim->instructions ? lim->instructions : QF_GEN_INSTRUCTIONS_DEFAULT;
    sb.seconds = lim && lim->seconds > 0 ? lim->seconds : QF_GEN_SECONDS_DEFAULT;
    sb.t0 = qf_gen_now();
    lua_State *L = lua_newstate(qf_gen_alloc, &sb);
    if (!L)
        return qf_gen_fail(e, "%s: cannot create a Lua state (memory limit %zu bytes)", shown,
                           sb.cap);
    lua_sethook(L, qf_gen_hook, LUA_MASKCOUNT | LUA_MASKCALL | LUA_MASKRET, QF_GEN_HOOK_STEP);
    lua_pushlightuserdata(L, &sb);
    lua_pushcclosure(L, qf_gen_msghandler, 1);
    lua_pushcfunction(L, qf_gen_recipe_pmain);
    lua_pushlightuserdata(L, &sb);
    int st = lua_pcall(L, 1, 0, 1);
    int rc = st == LUA_OK ? 0 : qf_gen_recipe_error(L, st, &sb, e);
    qf_gen_dup dup;
    if (rc == 0 && qf_gen_duplicate_key(text, len, &dup))
        rc = qf_gen_fail(e, "%s:%d: field '%s' given twice (first at line %d); Lua keeps the last",
                         shown, dup.line, dup.key, dup.first_line);
    if (rc && e)
        e->kind = sb.unsupported ? QF_GEN_ERR_UNSUPPORTED : QF_GEN_ERR_INVALID;
    lua_close(L);
    if (rc == 0)
        qf_gen_recipe_options(out, out->options, sizeof out->options);
    return rc;
}

/* Opens path for reading a recipe: a regular file of at most QF_GEN_RECIPE_FILE_MAX bytes.
 * O_NONBLOCK: opening a FIFO must not wait for a writer. Returns the fd, or -1 with e set. */
static int qf_gen_recipe_open(const char *path, size_t *size, qf_gen_err *e) {
    qf_gen_shown buf;
    const char *shown = qf_gen_path_shown(path, &buf);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        qf_gen_fail(e, "cannot open %s: %s", shown, strerror(err));
        if (e)
            e->kind = QF_GEN_ERR_NO_FILE;
        return -1;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0)
        why = strerror(errno);
    else if (S_ISDIR(st.st_mode))
        why = strerror(EISDIR);
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
    if (why) {
        close(fd);
        return qf_gen_fail(e, "cannot read %s: %s", shown, why);
    }
    if ((unsigned long long)st.st_size > QF_GEN_RECIPE_FILE_MAX) {
        close(fd);
        return qf_gen_fail(e, "%s: recipe file of %lld bytes is larger than %zu bytes (%zu MiB)",
                           shown, (long long)st.st_size, QF_GEN_RECIPE_FILE_MAX,
                           QF_GEN_RECIPE_FILE_MAX >> 20);
    }
    *size = (size_t)st.st_size;
    return fd;
}

/* Reads the whole recipe file into *text (malloc'ed; *len bytes). Returns 0, or -1 with e set. */
static int qf_gen_recipe_read(const char *path, char **text, size_t *len, qf_gen_err *e) {
    size_t size = 0, got = 0;
    int fd = qf_gen_recipe_open(path, &size, e), err = 0;
    if (fd < 0)
        return -1;
    char *buf = malloc(size + 1); /* + 1: malloc(0) may return NULL */
    if (!buf)
        err = ENOMEM;
    while (!err && got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n > 0)
            got += (size_t)n;
        else if (n == 0) /* the file shrank since fstat: take what is there */
            break;
        else if (errno != EINTR)
            err = errno;
    }
    close(fd);
    if (err) {
        free(buf);
        qf_gen_shown shown;
        return qf_gen_fail(e, "cannot read %s: %s", qf_gen_path_shown(path, &shown),
                           strerror(err));
    }
    *text = buf;
    *len = got;
    return 0;
}

int qf_gen_recipe_load(const char *path, const qf_gen_limits *lim, qf_recipe *out,
                       qf_gen_err *e) {
    char *text = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    qf_gen_shown buf;
    if (qf_gen_recipe_name(path, qf_gen_path_shown(path, &buf), out, e) != 0)
        return -1; /* checked first: no need to open a bad name */
    if (qf_gen_recipe_read(path, &text, &len, e) != 0)
        return -1;
    int rc = qf_gen_recipe_load_buffer(path, text, len, lim, out, e);
    free(text);
    return rc;
}

/* ========================================================================= options text */

/* Field fd of r as an option: its key, its value as text and its JSON kind. */
static void qf_gen_field_text(const qf_recipe *r, const qf_field *fd, qf_gen_option *o) {
    const void *p = qf_field_ptr(r, fd);
    *o = (qf_gen_option){.key = fd->name};
    switch (fd->type) {
    case QF_FIELD_OPTION:
        snprintf(o->value, sizeof o->value, "%s", qf_enum_name((qf_enum)fd->names, *(const int *)p));
        break;
    case QF_FIELD_INTEGER: {
        int64_t v = *(const int64_t *)p;
        o->is_integer = !(fd->absent && (v < fd->lo || v > fd->hi));
        if (o->is_integer)
            snprintf(o->value, sizeof o->value, "%lld", (long long)v);
        else
            snprintf(o->value, sizeof o->value, "%s", fd->absent);
        break;
    }
    case QF_FIELD_BOOLEAN:
        o->is_boolean = 1;
        snprintf(o->value, sizeof o->value, "%s", *(const int *)p ? "true" : "false");
        break;
    case QF_FIELD_NUMBER: /* %.9g: exact for a float; a JSON number */
        o->is_integer = 1;
        snprintf(o->value, sizeof o->value, "%.9g", (double)*(const float *)p);
        break;
    default:
        snprintf(o->value, sizeof o->value, "?");
    }
}

static int qf_gen_option_cmp(const void *a, const void *b) {
    return strcmp(((const qf_gen_option *)a)->key, ((const qf_gen_option *)b)->key);
}

int qf_gen_recipe_option_list(const qf_recipe *r, qf_gen_option out[QF_GEN_OPTIONS_MAX]) {
    const qf_family_traits *t = qf_family_get(r->family);
    int n = 0;
    out[n] = (qf_gen_option){.key = "family"};
    snprintf(out[n++].value, sizeof out->value, "%s", t ? t->name : "?");
    for (int i = 0; t && i < t->n_fields && n < QF_GEN_OPTIONS_MAX; i++)
        if (t->fields[i].key)
            qf_gen_field_text(r, &t->fields[i], &out[n++]);
    qsort(out, (size_t)n, sizeof *out, qf_gen_option_cmp); /* canonical: sorted by key */
    return n;
}

void qf_gen_recipe_options(const qf_recipe *r, char *buf, size_t n) {
    qf_gen_option opts[QF_GEN_OPTIONS_MAX];
    int count = qf_gen_recipe_option_list(r, opts);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s=%s", i ? ";" : "", opts[i].key, opts[i].value);
        used += w > 0 ? (size_t)w : 0;
    }
}
