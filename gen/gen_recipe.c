/* gen_recipe.c: loading a recipe file in a Lua sandbox and validating it into a C struct.
 *
 * A recipe is data (STYLE 8): a text chunk run in an empty environment (no standard library at
 * all), under a heap cap and an instruction budget, that returns one table. All Lua work happens
 * in qf_gen_recipe_pmain under lua_pcall (STYLE 11); helpers raise with luaL_error, and validated
 * values are copied into fixed-size fields of qf_gen_recipe, so no malloc'ed memory is live across
 * a call that can raise. */
#include "gen_recipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "gen_enum.h"

/* ========================================================================= option lists */
/* Recipe strings become C enums through one option list and a parallel value array (STYLE 10). */

static const char *const qf_gen_family_opts[] = {"fp8_delayed", "fp8_current", "mxfp8",
                                                 "nvfp4",       "fp8_block",   NULL};
static const qf_family qf_gen_family_vals[] = {QF_FAMILY_FP8_DELAYED, QF_FAMILY_FP8_CURRENT,
                                               QF_FAMILY_MXFP8, QF_FAMILY_NVFP4,
                                               QF_FAMILY_FP8_BLOCK};
_Static_assert(sizeof(qf_gen_family_vals) / sizeof(qf_gen_family_vals[0]) == QF_FAMILY_COUNT,
               "family options");

/* ORDER GEN_FORMAT */
static const char *const qf_gen_format_opts[] = {"hybrid", "e4m3", NULL};
static const qf_dtype qf_gen_format_fmts[][QF_ROLE_COUNT] = {
    [QF_GEN_FORMAT_HYBRID] = {[QF_ROLE_INPUT] = QF_DTYPE_E4M3,
                              [QF_ROLE_WEIGHT] = QF_DTYPE_E4M3,
                              [QF_ROLE_GRAD] = QF_DTYPE_E5M2},
    [QF_GEN_FORMAT_E4M3] = {[QF_ROLE_INPUT] = QF_DTYPE_E4M3,
                            [QF_ROLE_WEIGHT] = QF_DTYPE_E4M3,
                            [QF_ROLE_GRAD] = QF_DTYPE_E4M3},
};
_Static_assert(sizeof(qf_gen_format_fmts) / sizeof(qf_gen_format_fmts[0]) == QF_GEN_FORMAT_COUNT,
               "format options");

static const char *const qf_gen_amax_opts[] = {"max", "most_recent", NULL};
static const qf_amax_compute qf_gen_amax_vals[] = {QF_AMAX_COMPUTE_MAX,
                                                   QF_AMAX_COMPUTE_MOST_RECENT};
_Static_assert(sizeof(qf_gen_amax_vals) / sizeof(qf_gen_amax_vals[0]) == QF_AMAX_COMPUTE_COUNT,
               "amax_compute options");

/* Fields an fp8_delayed recipe may set; anything else is an error (STYLE 9). */
static const char *const qf_gen_fp8_delayed_fields[] = {
    "family", "description", "format", "margin", "amax_history_len", "amax_compute", NULL};

/* ========================================================================= sandbox */

/* State shared by the allocator, the instruction hook and the protected main function. */
typedef struct qf_gen_sandbox {
    const char *path; /* as given: error messages name it */
    size_t used, cap; /* heap bytes in use and the cap */
    unsigned long insns, insn_budget;
    int in_chunk; /* 1 while the recipe's own code runs: errors get a traceback */
    qf_gen_recipe *out;
} qf_gen_sandbox;

/* Instructions between two hook calls: cheap, yet an endless loop stops within 1000. */
#define QF_GEN_HOOK_STEP 1000

/* lua_Alloc that refuses to grow the heap past sb->cap; Lua turns NULL into a memory error. */
static void *qf_gen_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    qf_gen_sandbox *sb = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        sb->used -= old;
        return NULL;
    }
    if (nsize > old && nsize - old > sb->cap - sb->used)
        return NULL;
    void *p = realloc(ptr, nsize);
    if (p)
        sb->used = sb->used - old + nsize;
    return p;
}

/* Count hook: stops a recipe that runs past its instruction budget (an endless loop). */
static void qf_gen_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    void *ud;
    lua_getallocf(L, &ud);
    qf_gen_sandbox *sb = ud;
    sb->insns += QF_GEN_HOOK_STEP;
    if (sb->insns > sb->insn_budget)
        luaL_error(L, "%s: instruction budget of %I exceeded (endless loop?)", sb->path,
                   (lua_Integer)sb->insn_budget); /* lua_pushfstring has no %lu */
}

/* Message handler: errors raised by the recipe's code get a traceback; validation errors are
 * already complete sentences and stay one line. */
static int qf_gen_msghandler(lua_State *L) {
    const qf_gen_sandbox *sb = lua_touserdata(L, lua_upvalueindex(1));
    const char *msg = lua_tostring(L, 1);
    if (!msg)
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    if (sb->in_chunk)
        luaL_traceback(L, L, msg, 1);
    return 1;
}

/* ========================================================================= field readers */

/* Pushes t[name] without metamethods (t at index 1). */
static int qf_gen_getfield(lua_State *L, const char *name) {
    lua_pushstring(L, name);
    return lua_rawget(L, 1);
}

/* Reads option field `name` (default index def, or required when def < 0) as an index into
 * opts; raises "field 'x' (one of 'a', 'b' expected, got 'c')". Pops the value. */
static int qf_gen_field_option(lua_State *L, const qf_gen_sandbox *sb, const char *name,
                               const char *const *opts, int def) {
    int t = qf_gen_getfield(L, name);
    if (t == LUA_TNIL && def >= 0) {
        lua_pop(L, 1);
        return def;
    }
    if (t != LUA_TSTRING)
        luaL_error(L, "%s: field '%s' (string expected, got %s)", sb->path, name,
                   luaL_typename(L, -1));
    const char *s = lua_tostring(L, -1);
    for (int i = 0; opts[i]; i++)
        if (strcmp(s, opts[i]) == 0) {
            lua_pop(L, 1);
            return i;
        }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; opts[i]; i++) {
        lua_pushfstring(L, "%s'%s'", i ? ", " : "", opts[i]);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    return luaL_error(L, "%s: field '%s' (one of %s expected, got '%s')", sb->path, name,
                      lua_tostring(L, -1), s);
}

/* Reads integer field `name` in lo..hi (default def when absent). Pops the value. */
static int qf_gen_field_integer(lua_State *L, const qf_gen_sandbox *sb, const char *name,
                                lua_Integer lo, lua_Integer hi, lua_Integer def) {
    int t = qf_gen_getfield(L, name);
    lua_Integer v = def;
    if (t != LUA_TNIL) {
        int isint = 0;
        if (t != LUA_TNUMBER) /* strings like "5" are not integers here: recipes are typed */
            luaL_error(L, "%s: field '%s' (integer expected, got %s)", sb->path, name,
                       luaL_typename(L, -1));
        v = lua_tointegerx(L, -1, &isint);
        if (!isint)
            luaL_error(L, "%s: field '%s' (number has no integer representation)", sb->path, name);
    }
    if (v < lo || v > hi)
        luaL_error(L, "%s: field '%s' (value %I out of range %I..%I)", sb->path, name, v, lo, hi);
    lua_pop(L, 1);
    return (int)v;
}

/* Copies optional string field `name` (at most n-1 bytes) into dst; "" when absent. */
static void qf_gen_field_string(lua_State *L, const qf_gen_sandbox *sb, const char *name, char *dst,
                                size_t n) {
    int t = qf_gen_getfield(L, name);
    dst[0] = '\0';
    if (t != LUA_TNIL) {
        size_t len;
        if (t != LUA_TSTRING)
            luaL_error(L, "%s: field '%s' (string expected, got %s)", sb->path, name,
                       luaL_typename(L, -1));
        const char *s = lua_tolstring(L, -1, &len);
        if (len >= n || strlen(s) != len)
            luaL_error(L, "%s: field '%s' (string of at most %d bytes without NUL expected)",
                       sb->path, name, (int)n - 1);
        memcpy(dst, s, len + 1);
    }
    lua_pop(L, 1);
}

/* ========================================================================= validation */

static int qf_gen_is_field(const char *key, const char *const *fields) {
    for (int i = 0; fields[i]; i++)
        if (strcmp(key, fields[i]) == 0)
            return 1;
    return 0;
}

/* Raises "unknown field 'x'" for the first (sorted, so the message is stable) key of the table
 * at index 1 that is not in fields. */
static void qf_gen_check_unknown(lua_State *L, const qf_gen_sandbox *sb,
                                 const char *const *fields) {
    const char *first = NULL;
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {
        lua_pop(L, 1); /* the value */
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: unknown field [%s] (fields are named: key = value)", sb->path,
                       luaL_typename(L, -1));
        const char *k = lua_tostring(L, -1); /* key strings stay alive: the table holds them */
        if (!qf_gen_is_field(k, fields) && (!first || strcmp(k, first) < 0))
            first = k;
    }
    if (first)
        luaL_error(L, "%s: unknown field '%s'", sb->path, first);
}

/* Validates an fp8_delayed recipe table (index 1) into sb->out. */
static void qf_gen_read_fp8_delayed(lua_State *L, const qf_gen_sandbox *sb) {
    qf_gen_recipe *r = sb->out;
    qf_gen_check_unknown(L, sb, qf_gen_fp8_delayed_fields);
    qf_gen_field_string(L, sb, "description", r->description, sizeof r->description);
    r->format = (qf_gen_format)qf_gen_field_option(L, sb, "format", qf_gen_format_opts, 0);
    r->margin = qf_gen_field_integer(L, sb, "margin", 0, 32, 0);
    r->amax_history_len = qf_gen_field_integer(L, sb, "amax_history_len", 1, 8192, 1024);
    r->amax_compute =
        qf_gen_amax_vals[qf_gen_field_option(L, sb, "amax_compute", qf_gen_amax_opts, 0)];
    memcpy(r->fmt, qf_gen_format_fmts[r->format], sizeof r->fmt);
}

/* Reads `family`, then dispatches to the family's validator (one switch, STYLE 10). */
static void qf_gen_read_recipe(lua_State *L, const qf_gen_sandbox *sb) {
    int i = qf_gen_field_option(L, sb, "family", qf_gen_family_opts, -1);
    sb->out->family = qf_gen_family_vals[i];
    switch (sb->out->family) {
    case QF_FAMILY_FP8_DELAYED:
        qf_gen_read_fp8_delayed(L, sb);
        break;
    default:
        luaL_error(L, "%s: family '%s' is not implemented yet", sb->path, qf_gen_family_opts[i]);
    }
}

/* The one function that does Lua work (STYLE 11): load text-only, run in an empty _ENV, validate
 * the returned table. Argument 1: the sandbox (light userdata). */
static int qf_gen_recipe_pmain(lua_State *L) {
    qf_gen_sandbox *sb = lua_touserdata(L, 1);
    lua_settop(L, 0);
    int st = luaL_loadfilex(L, sb->path, "t");
    if (st != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        if (st == LUA_ERRSYNTAX && strncmp(msg, sb->path, strlen(sb->path)) != 0)
            lua_pushfstring(L, "%s: %s", sb->path, msg); /* the mode error names no file */
        return lua_error(L);
    }
    lua_newtable(L); /* the recipe's whole world: no io, os, require, load, string... */
    lua_setupvalue(L, -2, 1);
    sb->in_chunk = 1;
    lua_call(L, 0, 1);
    sb->in_chunk = 0;
    lua_sethook(L, NULL, 0, 0);
    if (!lua_istable(L, -1))
        luaL_error(L, "%s: recipe must return a table (got %s)", sb->path, luaL_typename(L, -1));
    lua_replace(L, 1);
    lua_settop(L, 1);
    qf_gen_read_recipe(L, sb);
    return 0;
}

/* ========================================================================= entry points */

/* Sets out->name and out->file from the path's stem; the name must be [a-z0-9_]+. */
static int qf_gen_recipe_name(const char *path, qf_gen_recipe *out, qf_gen_err *e) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n < 5 || strcmp(base + n - 4, ".lua") != 0)
        return qf_gen_fail(e, "%s: recipe file name must end in .lua", path);
    n -= 4;
    if (n > QF_GEN_RECIPE_NAME_MAX)
        return qf_gen_fail(e, "%s: recipe name longer than %d characters", path,
                           QF_GEN_RECIPE_NAME_MAX);
    if (strspn(base, "abcdefghijklmnopqrstuvwxyz0123456789_") != n)
        return qf_gen_fail(e, "%s: recipe name '%.*s' must match [a-z0-9_]+", path, (int)n, base);
    memcpy(out->name, base, n);
    out->name[n] = '\0';
    /* NOTES: generated files name the recipe by its canonical path, wherever the file was read
     * from, so out/ never holds an absolute or machine-specific path. */
    snprintf(out->file, sizeof out->file, "recipes/%s.lua", out->name);
    return 0;
}

/* Turns a failed pcall into the error message. */
static int qf_gen_recipe_error(lua_State *L, int st, const qf_gen_sandbox *sb, qf_gen_err *e) {
    if (st == LUA_ERRMEM)
        return qf_gen_fail(e, "%s: memory limit of %zu bytes (%zu MiB) exceeded", sb->path, sb->cap,
                           sb->cap >> 20);
    const char *msg = lua_tostring(L, -1);
    return qf_gen_fail(e, "%s", msg ? msg : "(no error message)");
}

int qf_gen_recipe_load(const char *path, const qf_gen_limits *lim, qf_gen_recipe *out,
                       qf_gen_err *e) {
    memset(out, 0, sizeof *out);
    if (qf_gen_recipe_name(path, out, e) != 0)
        return -1;
    qf_gen_sandbox sb = {.path = path, .out = out};
    sb.cap = lim && lim->mem_bytes ? lim->mem_bytes : QF_GEN_MEM_DEFAULT;
    sb.insn_budget = lim && lim->instructions ? lim->instructions : QF_GEN_INSTRUCTIONS_DEFAULT;
    lua_State *L = lua_newstate(qf_gen_alloc, &sb);
    if (!L)
        return qf_gen_fail(e, "%s: cannot create a Lua state (memory limit %zu bytes)", path,
                           sb.cap);
    lua_sethook(L, qf_gen_hook, LUA_MASKCOUNT, QF_GEN_HOOK_STEP);
    lua_pushlightuserdata(L, &sb);
    lua_pushcclosure(L, qf_gen_msghandler, 1);
    lua_pushcfunction(L, qf_gen_recipe_pmain);
    lua_pushlightuserdata(L, &sb);
    int st = lua_pcall(L, 1, 0, 1);
    int rc = st == LUA_OK ? 0 : qf_gen_recipe_error(L, st, &sb, e);
    lua_close(L);
    return rc;
}

/* ========================================================================= options text */

int qf_gen_recipe_option_list(const qf_gen_recipe *r, qf_gen_option out[QF_GEN_OPTIONS_MAX]) {
    /* Sorted by key by hand; test_gen checks the order. */
    int n = 0;
    out[n] = (qf_gen_option){.key = "amax_compute"};
    snprintf(out[n++].value, sizeof out->value, "%s",
             qf_gen_enum_name(QF_GEN_ENUM_AMAX_COMPUTE, r->amax_compute));
    out[n] = (qf_gen_option){.key = "amax_history_len", .is_integer = 1};
    snprintf(out[n++].value, sizeof out->value, "%d", r->amax_history_len);
    out[n] = (qf_gen_option){.key = "family"};
    snprintf(out[n++].value, sizeof out->value, "%s",
             qf_gen_enum_name(QF_GEN_ENUM_FAMILY, r->family));
    out[n] = (qf_gen_option){.key = "format"};
    snprintf(out[n++].value, sizeof out->value, "%s", qf_gen_recipe_format_name(r));
    out[n] = (qf_gen_option){.key = "margin", .is_integer = 1};
    snprintf(out[n++].value, sizeof out->value, "%d", r->margin);
    return n;
}

void qf_gen_recipe_options(const qf_gen_recipe *r, char *buf, size_t n) {
    qf_gen_option opts[QF_GEN_OPTIONS_MAX];
    int count = qf_gen_recipe_option_list(r, opts);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && used < n; i++) {
        int w = snprintf(buf + used, n - used, "%s%s=%s", i ? ";" : "", opts[i].key, opts[i].value);
        used += w > 0 ? (size_t)w : 0;
    }
}

const char *qf_gen_recipe_format_name(const qf_gen_recipe *r) {
    return (unsigned)r->format < QF_GEN_FORMAT_COUNT ? qf_gen_format_opts[r->format] : "?";
}
