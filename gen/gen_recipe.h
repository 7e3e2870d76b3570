/* gen_recipe.h: loading a recipe file in a Lua sandbox and validating it, field by field of its
 * family's schema (runtime/family.h), into a qf_recipe. The runtime links the same loader. */
#ifndef QF_GEN_RECIPE_H
#define QF_GEN_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#include "gen_buf.h"
#include "family.h"

/* Resource caps of the recipe sandbox: a recipe is data and must finish fast in little memory. */
typedef struct qf_gen_limits {
    size_t mem_bytes;           /* Lua heap cap; default 32 MiB */
    unsigned long instructions; /* VM instruction budget; default 10^7 */
    double seconds;             /* wall-clock budget; default 10 s. One VM instruction can cost
                                 * a 4 MiB copy or compare, so the instruction count alone does
                                 * not bound the time */
} qf_gen_limits;

#define QF_GEN_MEM_DEFAULT ((size_t)32 << 20)
#define QF_GEN_INSTRUCTIONS_DEFAULT 10000000ul
#define QF_GEN_SECONDS_DEFAULT 10.0

/* Recipe files are small data files; a larger one (or a FIFO, device or directory) is refused
 * before any Lua runs, so reading it can neither block nor exhaust memory. */
#define QF_GEN_RECIPE_FILE_MAX ((size_t)1 << 20)

/* Loads and validates the recipe at path (errors name path as given). lim NULL = defaults.
 * Returns 0, or -1 with the message in e. Never exits, whatever the recipe does. */
int qf_gen_recipe_load(const char *path, const qf_gen_limits *lim, qf_recipe *out,
                       qf_gen_err *e);

/* Same for recipe text already in memory: text[0..len) (not NUL-terminated, does not own it) is
 * loaded as if read from the file `path`, which names the recipe (its stem) and the errors. A
 * UTF-8 BOM and a first line starting with '#' are skipped, as luaL_loadfilex does. */
int qf_gen_recipe_load_buffer(const char *path, const char *text, size_t len,
                              const qf_gen_limits *lim, qf_recipe *out, qf_gen_err *e);

/* One recipe option as text, for the options string and the manifest. */
typedef struct qf_gen_option {
    const char *key;
    char value[32];
    int is_integer; /* value is a decimal number (a JSON number), else a string */
    int is_boolean; /* value is "true" or "false" (a JSON boolean) */
} qf_gen_option;

#define QF_GEN_OPTIONS_MAX 16

/* Every key field of r's schema and `family`, defaults included, sorted by key; returns the
 * count. The description is not an option: it changes no kernel, so it stays out of the fusion
 * key. */
int qf_gen_recipe_option_list(const qf_recipe *r, qf_gen_option out[QF_GEN_OPTIONS_MAX]);

/* Canonical "key=value;..." of qf_gen_recipe_option_list
 * ("amax_compute=max;amax_history_len=1024;family=fp8_delayed;format=hybrid;margin=0",
 * "family=mxfp8;grad_format=e4m3;input_format=e4m3;scale_rounding=ceil;weight_2d=false;
 * weight_format=e4m3", "family=nvfp4;rht_grad=true;rht_input=true;rht_seed=none;
 * stochastic_rounding_grad=true;weight_2d=true"). */
void qf_gen_recipe_options(const qf_recipe *r, char *buf, size_t n);

#endif /* QF_GEN_RECIPE_H */
