/* test_gen_keys.c: a key given twice in a recipe's table (gen_keys.c), in the source forms Lua
 * accepts, and the places where the same text is not a duplicate (comments, strings, nested
 * tables, code before the return, `==`); then the loader's message. */
#include "test_util.h"

#include "gen_keys.h"
#include "gen_recipe.h"

typedef struct key_case {
    const char *what, *src;
    int dup;          /* 1: a duplicate is expected */
    const char *key;  /* its name */
    int first, line;  /* its lines */
} key_case;

static const key_case kCases[] = {
    {"plain", "return {\n a = 1,\n b = 2,\n a = 3,\n}\n", 1, "a", 2, 4},
    {"bracket form", "return { [\"fam\"] = 1,\n fam = 2 }", 1, "fam", 1, 2},
    {"semicolons", "return { x = 1; y = 2; x = 3 }", 1, "x", 1, 1},
    {"none", "return { a = 1, b = 2, c = 3 }", 0, NULL, 0, 0},
    {"comment", "return { a = 1, -- a = 2\n b = 3 }", 0, NULL, 0, 0},
    {"long comment", "return { a = 1, --[==[ a = 2 ]] ]==] b = 3 }", 0, NULL, 0, 0},
    {"string", "return { a = 'a = 1', b = \"a = \\\"2\" }", 0, NULL, 0, 0},
    {"long string", "return { a = [[\na = 2]], b = 1 }", 0, NULL, 0, 0},
    {"nested table", "return { a = { a = 1, b = 2 }, b = { a = 3 } }", 0, NULL, 0, 0},
    {"code before", "local t = { a = 1, a = 2 }\nreturn { a = t.a }", 0, NULL, 0, 0},
    {"comparison", "return { a = 1 == 1, b = (1 == 2) }", 0, NULL, 0, 0},
    {"last return", "if false then return { a = 1 } end\nreturn { a = 1, a = 2 }", 1, "a", 2, 2},
    {"call argument", "return { a = f(a, b), b = 1, c = g{ c = 1 } }", 0, NULL, 0, 0},
    {"no table", "return 42", 0, NULL, 0, 0},
    {"unterminated", "return { a = 1, b = 'x", 0, NULL, 0, 0},
};

static void test_duplicate_key_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; i++) {
        const key_case *c = &kCases[i];
        qf_gen_dup d = {{0}, 0, 0};
        const int got = qf_gen_duplicate_key(c->src, strlen(c->src), &d);
        if (got != c->dup)
            fail_msg("case '%s': duplicate %d, expected %d", c->what, got, c->dup);
        if (c->dup) {
            assert_string_equal(d.key, c->key);
            assert_int_equal(d.first_line, c->first);
            assert_int_equal(d.line, c->line);
        }
    }
}

/* The text is read up to len only: a duplicate past len is not seen. */
static void test_duplicate_key_length(void **state) {
    (void)state;
    const char src[] = "return { a = 1 } a = 2, a = 3 }";
    qf_gen_dup d;
    assert_int_equal(qf_gen_duplicate_key(src, 16, &d), 0);
}

/* The loader rejects the recipe, naming the field and both lines. */
static void test_loader_rejects_duplicate(void **state) {
    (void)state;
    const char src[] = "return {\n    family = \"mxfp8\",\n    weight_2d = true,\n"
                       "    weight_2d = false,\n}\n";
    qf_recipe r;
    qf_gen_err e = {{0}, QF_GEN_ERR_INVALID};
    assert_int_equal(qf_gen_recipe_load_buffer("dup.lua", src, strlen(src), NULL, &r, &e), -1);
    assert_non_null(strstr(e.msg, "dup.lua:4: field 'weight_2d' given twice (first at line 3)"));
    assert_int_equal(e.kind, QF_GEN_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duplicate_key_cases),
        cmocka_unit_test(test_duplicate_key_length),
        cmocka_unit_test(test_loader_rejects_duplicate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
