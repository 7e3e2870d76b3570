/* test_gen_hostile.c: qfuse-gen against hostile recipes: the sandbox's memory cap, instruction
 * budget and empty environment, odd files and bytes, and a replay of every fuzzing input
 * (tests/fuzz/corpus, seeds, regressions, and recipes/) through the loader and generator without
 * the fuzzer. */
#include "test_gen_util.h"

#include <dirent.h>

/* ========================================================================= helpers */

#define QF_HOSTILE_PATH "hostile.lua" /* names every in-memory recipe */
#define QF_KEYS_40 "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"

/* ========================================================================= in-memory recipes */

/* One hostile recipe: its bytes (len 0: strlen) and the expected message after "hostile.lua"
 * (exact, or a substring when contains); expect NULL: it must load, with margin `margin`. */
typedef struct qf_hostile_case {
    const char *text;
    size_t len;
    size_t mem_bytes; /* 0: the default cap */
    const char *expect;
    int contains;
    int margin;
} qf_hostile_case;

#define MEM32 ": memory limit of 33554432 bytes (32 MiB) exceeded"
#define MEM1 ": memory limit of 1048576 bytes (1 MiB) exceeded"
#define MEM4 ": memory limit of 4194304 bytes (4 MiB) exceeded"
#define DEEP ": calls nested deeper than 200 (endless recursion?)"
/* Live data just under the cap, then garbage: every allocation would force a full collection
 * (seconds to hours within the instruction budget); the allocator gives up after a few. */
#define CHURN(n) "local t = {} for i = 1, " #n " do t[i] = {i, i} end " \
                 "for i = 1, 1e7 do local x = {i} end return {}"
#define FAM "return {family = 'fp8_delayed', "
#define FAM_FIELDS                                                                                 \
    " (this family's fields: family, description, amax_compute, amax_history_len, format, margin)"
#define RAW(s) s, sizeof s - 1 /* a literal with NUL bytes: its length */

static const qf_hostile_case qf_hostile_cases[] = {
    /* memory cap: the stack, strings and tables all live in the capped heap */
    {"local function f() return f() + 1 end f()", 0, 0, DEEP, 1, 0},
    {"local s = 'x' for i = 1, 40 do s = s .. s end return {}", 0, 0, MEM32, 0, 0},
    {"local t = {} for i = 1, 1e9 do t[i] = {i} end return t", 0, 0, MEM32, 0, 0},
    {"local t = {} t[1] = t for i = 1, 1e9 do t = {t, t} end", 0, 1 << 20, MEM1, 0, 0},
    {CHURN(34000), 0, 4 << 20, MEM4, 0, 0},
    {CHURN(35500), 0, 4 << 20, MEM4, 0, 0},
    {CHURN(285000), 0, 0, MEM32, 0, 0},
    /* recursion: the call depth limit, before the frames fill the heap or Lua's stack */
    {"local function f(...) return 1 + f(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...) end return f()", 0,
     0, DEEP, 1, 0},
    {"local function f(n) if n > 0 then return 1 + f(n - 1) end return 0 end "
     "return {family = 'fp8_delayed', margin = f(150) - 150}", 0, 0, NULL, 0, 0},
    /* instruction budget: every kind of loop */
    {"::top:: goto top", 0, 0, ": instruction budget of 10000000 exceeded (endless loop?)", 1, 0},
    {"local function f() return f() end return f()", 0, 0, ": instruction budget of 10000000", 1,
     0},
    {"repeat until false", 0, 0, ": instruction budget of 10000000", 1, 0},
    /* no metatables, coroutines, errors with objects, closing values */
    {"setmetatable({}, {__gc = function() while true do end end})", 0, 0,
     ":1: undefined name 'setmetatable'", 1, 0},
    {"return getmetatable('').__index", 0, 0,
     ":1: undefined name 'getmetatable'", 1, 0},
    {"return coroutine.wrap(function() end)()", 0, 0,
     ":1: undefined name 'coroutine'", 1, 0},
    {"error({}, 0)", 0, 0, ":1: undefined name 'error'", 1, 0},
    {"local x <close> = {} return {}", 0, 0, ":1: variable 'x' got a non-closable value", 1, 0},
    /* what the chunk returns */
    {"return function() end", 0, 0, ": recipe must return a table (got function)", 0, 0},
    {"return io", 0, 0, ":1: undefined name 'io' (a recipe sees no globals; a string value "
     "needs quotes: \"io\")", 1, 0},
    {"local t = nil return t", 0, 0, ": recipe must return a table (got nil)", 0, 0},
    {"return {family = {1, {2, {3}}}}", 0, 0,
     ": field 'family' (one of 'fp8_delayed', 'fp8_current', 'mxfp8', 'nvfp4', 'fp8_block' "
     "expected, got table)",
     0, 0},
    /* a second value (another recipe, say) would be dropped unseen: refused */
    {FAM "margin = 4}, 'ignored'", 0, 0, ": recipe must return one table (got 2 values)", 0, 0},
    {"return {family = 'mxfp8'}, {family = 'nvfp4'}", 0, 0,
     ": recipe must return one table (got 2 values)", 0, 0},
    {"family = 'fp8_delayed' margin = 3 return _ENV", 0, 0, NULL, 0, 3},
    /* keys */
    {FAM "[true] = 1}", 0, 0, ": unknown field [boolean] (fields are named: key = value)", 0, 0},
    {FAM "[1.5] = 1}", 0, 0, ": unknown field [number] (fields are named: key = value)", 0, 0},
    {FAM "[{}] = 1}", 0, 0, ": unknown field [table] (fields are named: key = value)", 0, 0},
    {FAM "[function() end] = 1}", 0, 0, ": unknown field [function]", 1, 0},
    {"local k = 'k' for i = 1, 16 do k = k .. k end " FAM "[k] = 1}", 0, 0,
     ": unknown field '" QF_KEYS_40 "...'" FAM_FIELDS, 0, 0},
    {FAM "['a\\nb'] = 1}", 0, 0, ": unknown field 'a\\10b'" FAM_FIELDS, 0, 0},
    /* NUL bytes: never a prefix match */
    {FAM "['margin\\0x'] = 5}", 0, 0, ": unknown field 'margin\\0x'" FAM_FIELDS, 0, 0},
    {"return {family = 'fp8_delayed\\0evil'}", 0, 0,
     ": field 'family' (one of 'fp8_delayed', 'fp8_current', 'mxfp8', 'nvfp4', 'fp8_block' "
     "expected, got "
     "'fp8_delayed\\0evil')",
     0, 0},
    {FAM "format = 'e4m3\\0'}", 0, 0, "got 'e4m3\\0')", 1, 0},
    {RAW("return {family = 'fp8\0_delayed'}"), 0, "got 'fp8\\0_delayed')", 1, 0},
    {RAW("return\0{}"), 0, ":1: unexpected symbol", 0, 0},
    {FAM "description = 'a\\0b'}", 0, 0,
     ": field 'description' (string of at most 255 bytes without NUL expected)", 0, 0},
    {"local k = 'k' for i = 1, 16 do k = k .. k end return {family = k}", 0, 0,
     "expected, got '" QF_KEYS_40 "...')", 1, 0},
    /* the description must be UTF-8: manifest.json holds it */
    {FAM "description = 'caf\\xe9'}", 0, 0, ": field 'description' (UTF-8 text expected)", 0, 0},
    {FAM "description = '\\xc0\\xaf'}", 0, 0, "(UTF-8 text expected)", 1, 0},     /* overlong */
    {FAM "description = '\\xed\\xa0\\x80'}", 0, 0, "(UTF-8 text expected)", 1, 0}, /* surrogate */
    {FAM "description = '\\xf4\\x90\\x80\\x80'}", 0, 0, "(UTF-8 text expected)", 1, 0},
    {FAM "description = '\\xe2\\x80'}", 0, 0, "(UTF-8 text expected)", 1, 0}, /* truncated */
    {FAM "margin = 1, description = 'caf\\xc3\\xa9 \\u{1F600} \\u{10FFFF}'}", 0, 0, NULL, 0, 1},
    /* numbers */
    {FAM "margin = 9223372036854775807 + 1}", 0, 0,
     ": field 'margin' (value -9223372036854775808 out of range 0..32)", 0, 0},
    {FAM "margin = 0/0}", 0, 0, ": field 'margin' (nan: an integer in 0..32 expected)", 0, 0},
    /* parser limits: deep nesting, and running out of memory while parsing */
    {"return {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
     "{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
     "{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{",
     0, 0, ": C stack overflow (nested about 200 levels deep: tables, parentheses, calls, or a "
     "chain of right-associative operators such as .. or ^)", 0,
     0},
    {"", 0, 0, ": recipe must return a table (got nil)", 0, 0},
    /* what luaL_loadfilex skips: a BOM and a '#' first line; line numbers stay right */
    {"\xef\xbb\xbf" FAM "margin = 5}", 0, 0, NULL, 0, 5},
    {"\xef\xbb\xbf#!/usr/bin/env lua\n" FAM "margin = 6}", 0, 0, NULL, 0, 6},
    {"#!/usr/bin/env lua\n\nlocal y\nlocal x = y + 1", 0, 0,
     ":4: attempt to perform arithmetic on a nil value (local 'y')", 1, 0},
    {"#!/usr/bin/env lua", 0, 0, ": recipe must return a table (got nil)", 0, 0},
    {"\xef\xbb", 0, 0, ":1: unexpected symbol near '<\\239>'", 0, 0},
};

static void test_hostile_buffer(void **state) {
    const qf_hostile_case *c = *state;
    qf_gen_limits lim = {.mem_bytes = c->mem_bytes};
    qf_recipe r;
    qf_gen_err e = {{0}, QF_GEN_ERR_INVALID};
    char want[1024];
    size_t len = c->len ? c->len : strlen(c->text);
    int rc = qf_gen_recipe_load_buffer(QF_HOSTILE_PATH, c->text, len, &lim, &r, &e);
    if (!c->expect) {
        if (rc != 0)
            fail_msg("refused: %s", e.msg);
        assert_int_equal(r.margin, c->margin);
        return;
    }
    assert_int_equal(rc, -1);
    snprintf(want, sizeof want, "%s%s", c->contains ? "" : QF_HOSTILE_PATH, c->expect);
    qf_test_message(e.msg, want, c->contains);
    assert_true(strncmp(e.msg, QF_HOSTILE_PATH, strlen(QF_HOSTILE_PATH)) == 0);
}

/* Nothing that reaches files, processes or the environment, nor any library, is visible: reading
 * any of these names is refused as an undefined name (it would not be if the name were there). */
static void test_hostile_no_globals(void **state) {
    (void)state;
    static const char *const names[] = {
        "io",     "os",       "package",  "require",  "load",     "loadfile",       "dofile",
        "debug",  "string",   "utf8",     "table",    "math",     "coroutine",      "print",
        "error",  "pcall",    "xpcall",   "assert",   "select",   "collectgarbage", "rawget",
        "rawset", "rawequal", "rawlen",   "next",     "pairs",    "ipairs",         "tostring",
        "type",   "tonumber", "_G",       "_VERSION", "warn",     "getmetatable",   "setmetatable",
        "arg",    "loadstring", "module", "unpack",   "setfenv",  "getfenv",        "jit",
    };
    char text[256], want[128];
    qf_recipe r;
    qf_gen_err e;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(text, sizeof text, FAM "margin = %s == nil and 1 or 2}", names[i]);
        if (qf_gen_recipe_load_buffer(QF_HOSTILE_PATH, text, strlen(text), NULL, &r, &e) == 0)
            fail_msg("global '%s' is visible to recipes", names[i]);
        snprintf(want, sizeof want, ":1: undefined name '%s'", names[i]);
        qf_test_message(e.msg, want, 1);
    }
}

/* A binary chunk is refused, also behind a '#' first line (luaL_loadfilex's rule). */
static void test_hostile_binary_chunk(void **state) {
    (void)state;
    qf_gen_buf b;
    qf_recipe r;
    qf_gen_err e;
    const char *want = QF_HOSTILE_PATH ": attempt to load a binary chunk (mode is 't')";
    for (int shebang = 0; shebang < 2; shebang++) {
        qf_gen_buf_init(&b);
        if (shebang)
            qf_gen_buf_adds(&b, "#!/usr/bin/lua\n");
        qf_test_binary_chunk(&b);
        assert_false(b.failed);
        assert_int_equal(qf_gen_recipe_load_buffer(QF_HOSTILE_PATH, b.p, b.len, NULL, &r, &e), -1);
        qf_test_message(e.msg, want, 0);
        qf_gen_buf_free(&b);
    }
}

/* Running out of memory while parsing (60000 distinct string constants under a 1 MiB cap) is
 * the memory message too, not Lua's bare "not enough memory". */
static void test_hostile_memory_in_parser(void **state) {
    (void)state;
    qf_gen_buf b;
    qf_recipe r;
    qf_gen_err e;
    qf_gen_limits lim = {.mem_bytes = 1 << 20};
    qf_gen_buf_init(&b);
    qf_gen_buf_adds(&b, "local t = {");
    for (int i = 0; i < 60000; i++)
        qf_gen_buf_addf(&b, "'s%06d',", i);
    qf_gen_buf_adds(&b, "} return {}");
    assert_false(b.failed);
    assert_int_equal(qf_gen_recipe_load_buffer(QF_HOSTILE_PATH, b.p, b.len, &lim, &r, &e), -1);
    qf_test_message(e.msg, QF_HOSTILE_PATH MEM1, 0);
    qf_gen_buf_free(&b);
}

/* A path longer than Lua's chunk id (60 bytes) still starts every message. */
static void test_hostile_long_path(void **state) {
    (void)state;
    const char *path = "some/very/long/directory/name/that/lua/shortens/in/its/messages/x.lua";
    const char *text = "return {";
    qf_recipe r;
    qf_gen_err e;
    assert_int_equal(qf_gen_recipe_load_buffer(path, text, strlen(text), NULL, &r, &e), -1);
    assert_true(strncmp(e.msg, path, strlen(path)) == 0);
    assert_non_null(strstr(e.msg, "/messages/x.lua:1: unexpected symbol near <eof>"));
}

/* A path of thousands of bytes is shown as "..." and its last 200 bytes, so that the reason
 * stays in the 4096-byte message: a Lua error, a bad name, a missing file. */
static void test_hostile_very_long_path(void **state) {
    (void)state;
    static char path[6000];
    size_t n = 0;
    while (n + 8 < sizeof path - 16)
        n += (size_t)snprintf(path + n, sizeof path - n, "dirname/");
    snprintf(path + n, sizeof path - n, "x.lua");
    const char *text = "return {";
    qf_recipe r;
    qf_gen_err e;
    assert_int_equal(qf_gen_recipe_load_buffer(path, text, strlen(text), NULL, &r, &e), -1);
    assert_true(strncmp(e.msg, "...", 3) == 0);
    const char *at = strstr(e.msg, "dirname/x.lua:1: unexpected symbol near <eof>");
    assert_non_null(at);
    /* named once: Lua's chunk id is replaced by the path, not added to it */
    assert_null(strstr(at + strlen("dirname/x.lua"), "x.lua"));
    assert_true(strlen(e.msg) < 600);
    snprintf(path + n, sizeof path - n, "X.lua");
    assert_int_equal(qf_gen_recipe_load(path, NULL, &r, &e), -1);
    assert_non_null(strstr(e.msg, "dirname/X.lua: recipe name 'X' must match [a-z0-9_]+"));
    snprintf(path + n, sizeof path - n, "x.lua");
    assert_int_equal(qf_gen_recipe_load(path, NULL, &r, &e), -1);
    assert_true(strncmp(e.msg, "cannot open ...", 15) == 0);
    assert_non_null(strstr(e.msg, "dirname/x.lua: "));
    /* cut inside a 2-byte character: the shown path starts after it */
    memset(path, 0, sizeof path);
    for (n = 0; n + 2 < 1001; n += 2)
        memcpy(path + n, "\xc3\xa9", 2);
    snprintf(path + n, sizeof path - n, "/x.lua");
    assert_int_equal(qf_gen_recipe_load_buffer(path, text, strlen(text), NULL, &r, &e), -1);
    assert_true(strncmp(e.msg, "...", 3) == 0);
    assert_true((e.msg[3] & 0xC0) != 0x80);
    /* control characters and bytes that are not UTF-8 are shown as \xNN */
    assert_int_equal(qf_gen_recipe_load_buffer("d\xff/a\x1b[31m\n.lua", text, strlen(text), NULL,
                                               &r, &e), -1);
    assert_non_null(strstr(e.msg, "d\\xFF/a\\x1B[31m\\x0A.lua: recipe name 'a\\x1B[31m\\x0A' must"));
    assert_null(strchr(e.msg, '\x1b'));
    assert_null(strchr(e.msg, '\n'));
}

/* ========================================================================= odd files */

/* A directory, a FIFO (must not block) and a device (must not be read forever) are refused. */
static void test_hostile_not_regular(void **state) {
    const qf_test_dir *d = *state;
    char path[512], want[700];
    qf_recipe r;
    qf_gen_err e;
    static const char *const names[] = {"dir.lua", "fifo.lua", "zero.lua"};
    static const char *const why[] = {"Is a directory", "not a regular file", "not a regular file"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", d->path, names[i]);
        int made = i == 0 ? mkdir(path, 0700) : i == 1 ? mkfifo(path, 0600) : symlink("/dev/zero", path);
        assert_int_equal(made, 0);
        assert_int_equal(qf_gen_recipe_load(path, NULL, &r, &e), -1);
        snprintf(want, sizeof want, "cannot read %s: %s", path, why[i]);
        qf_test_message(e.msg, want, 0);
    }
}

/* An empty file, one with a BOM and a shebang line, and a file over the size cap. */
static void test_hostile_files(void **state) {
    const qf_test_dir *d = *state;
    char path[512];
    qf_recipe r;
    qf_test_write(d->path, "empty.lua", "", 0, path);
    qf_test_refused(path, NULL, "recipe must return a table (got nil)", 0);
    static const char bom[] = "\xef\xbb\xbf#!/usr/bin/env lua\nreturn {family = 'fp8_delayed'}";
    qf_test_write(d->path, "bom.lua", bom, sizeof bom - 1, path);
    qf_test_load_ok(path, &r);
    assert_string_equal(r.name, "bom");
    char *big = malloc(QF_GEN_RECIPE_FILE_MAX + 1);
    assert_non_null(big);
    memset(big, ' ', QF_GEN_RECIPE_FILE_MAX + 1);
    qf_test_write(d->path, "big.lua", big, QF_GEN_RECIPE_FILE_MAX + 1, path);
    free(big);
    qf_test_refused(path, NULL, "recipe file of 1048577 bytes is larger than 1048576 bytes (1 MiB)",
                    0);
}

/* A binary chunk on disk is refused like one in memory. */
static void test_hostile_binary_file(void **state) {
    const qf_test_dir *d = *state;
    char path[512];
    qf_gen_buf b;
    qf_gen_buf_init(&b);
    qf_test_binary_chunk(&b);
    qf_test_write(d->path, "bin.lua", b.p, b.len, path);
    qf_gen_buf_free(&b);
    qf_test_refused(path, NULL, "attempt to load a binary chunk (mode is 't')", 0);
}

/* ========================================================================= fuzzing inputs */

/* The limits of tests/fuzz/fuzz_recipe.c. */
static const qf_gen_opts qf_replay_opts = {
    .templates_dir = "templates",
    .include_dir = "runtime",
    .limits = {.mem_bytes = (size_t)8 << 20, .instructions = 1000000},
};

/* What fuzz_recipe.c checks of one input: a failure names the recipe; an accepted recipe goes
 * through the whole generator, from the file too, to files with a banner and no NUL byte. */
static void qf_test_replay(const char *dir, const char *text, size_t len, const char *what) {
    qf_recipe r;
    qf_gen_err e = {{0}, QF_GEN_ERR_INVALID};
    char path[512];
    if (qf_gen_recipe_load_buffer("fuzz.lua", text, len, &qf_replay_opts.limits, &r, &e) != 0) {
        if (strncmp(e.msg, "fuzz.lua", 8) != 0)
            fail_msg("%s: message without the recipe's name: %s", what, e.msg);
        return;
    }
    qf_test_write(dir, "fuzz.lua", text, len, path);
    const char *paths[] = {path};
    qf_gen_plan plan;
    qf_gen_files files;
    if (qf_gen_plan_build(&plan, &qf_replay_opts, paths, 1, &e) != 0)
        fail_msg("%s: loaded, then refused by the generator: %s", what, e.msg);
    qf_recipe from_file = plan.recipes[0].recipe;
    assert_string_equal(from_file.path, path);
    memcpy(from_file.path, r.path, sizeof r.path); /* the one field that differs */
    assert_memory_equal(&from_file, &r, sizeof r);
    assert_int_equal(qf_gen_emit_build(&plan, &files, &e), 0);
    for (int i = 0; i < files.n; i++)
        assert_int_equal(strlen(files.v[i].text), files.v[i].len);
    qf_gen_files_free(&files);
    qf_gen_plan_free(&plan);
}

/* Replays every file of dir; returns how many. */
static int qf_test_replay_dir(const char *tmp, const char *dir) {
    char path[600];
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot open %s (tests run from the repository root)", dir);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        char *text;
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat st;
        if (de->d_name[0] == '.' || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        assert_int_equal(qf_gen_read_file(path, "fuzz input", &text, &len, NULL), 0);
        qf_test_replay(tmp, text, len, path);
        free(text);
        n++;
    }
    closedir(d);
    return n;
}

/* Every fuzzing input (the shipped recipes are seeds too), crashes found included, replayed on
 * every test run (CI too). */
static void test_hostile_fuzz_replay(void **state) {
    const qf_test_dir *tmp = *state;
    int seeds = qf_test_replay_dir(tmp->path, "tests/fuzz/seeds");
    int shipped = qf_test_replay_dir(tmp->path, "recipes");
    int corpus = qf_test_replay_dir(tmp->path, "tests/fuzz/corpus");
    int regressions = qf_test_replay_dir(tmp->path, "tests/fuzz/regressions");
    print_message("replayed %d seeds, %d shipped recipes, %d corpus inputs, %d regressions\n",
                  seeds, shipped, corpus, regressions);
    assert_true(seeds > 0 && shipped > 0 && corpus > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_no_globals),
        cmocka_unit_test(test_hostile_binary_chunk),
        cmocka_unit_test(test_hostile_memory_in_parser),
        cmocka_unit_test(test_hostile_long_path),
        cmocka_unit_test(test_hostile_very_long_path),
        T(test_hostile_not_regular),
        T(test_hostile_files),
        T(test_hostile_binary_file),
        T(test_hostile_fuzz_replay),
    };
    return QF_TEST_RUN_CASES("gen_hostile", test_hostile_buffer, qf_hostile_cases, tests);
}
