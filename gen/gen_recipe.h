/* gen_recipe.h: loading a recipe file in a Lua sandbox and validating it into a C struct. */
#ifndef QF_GEN_RECIPE_H
#define QF_GEN_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#include "gen_buf.h"
#include "qf_formats.h"

#define QF_RECIPE_NAME_MAX 48 /* recipe names are part of every kernel name */
#define QF_RECIPE_DESCRIPTION_MAX 255

/* fp8_delayed `format` option. ORDER GEN_FORMAT (qf_gen_format_opts in gen_recipe.c) */
typedef enum qf_gen_format {
    QF_GEN_FORMAT_HYBRID = 0, /* E4M3 input/weight, E5M2 grad */
    QF_GEN_FORMAT_E4M3 = 1,   /* E4M3 everywhere */
    QF_GEN_FORMAT_COUNT
} qf_gen_format;

/* Resource caps of the recipe sandbox: a recipe is data and must finish fast in little memory. */
typedef struct qf_gen_limits {
    size_t mem_bytes;           /* Lua heap cap; default 32 MiB */
    unsigned long instructions; /* VM instruction budget; default 10^7 */
} qf_gen_limits;

#define QF_GEN_MEM_DEFAULT ((size_t)32 << 20)
#define QF_GEN_INSTRUCTIONS_DEFAULT 10000000ul

/* A validated recipe. Every option holds its value, defaults filled in. */
typedef struct qf_recipe {
    char name[QF_RECIPE_NAME_MAX + 1];  /* file stem: "fp8_delayed" */
    char file[QF_RECIPE_NAME_MAX + 16]; /* canonical "recipes/<name>.lua" (generated files) */
    char path[256];                         /* the path it was read from (messages, --list) */
    char description[QF_RECIPE_DESCRIPTION_MAX + 1];
    qf_family family;
    qf_gen_format format;
    int margin;           /* 0..32 */
    int amax_history_len; /* 1..8192 */
    qf_amax_compute amax_compute;
    qf_dtype fmt[QF_ROLE_COUNT]; /* element format per role, from `format` (fp8_delayed) or
                                  * input_format, weight_format, grad_format (mxfp8) */
    qf_scale_rounding scale_rounding; /* mxfp8: E8M0 exponent rounding */
    int weight_2d;                    /* mxfp8: 1 = 32x32 weight blocks, 0 = 1x32;
                                       * nvfp4: 1 = 16x16 weight tiles, 0 = 1x16 */
    unsigned rht_roles; /* nvfp4: bit (1u << role) set = RHT on that role's columnwise copy */
    int sr_grad;        /* nvfp4: stochastic rounding of gradients */
    int has_rht_seed;   /* nvfp4: rht_seed given (else TE's fixed mask 0xD7E8) */
    uint64_t rht_seed;  /* nvfp4: RHT signs drawn from this seed (SPEC 2.4) */
} qf_recipe;

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
    int is_integer; /* value is a decimal integer (a JSON number), else a string */
    int is_boolean; /* value is "true" or "false" (a JSON boolean) */
} qf_gen_option;

#define QF_GEN_OPTIONS_MAX 8

/* Every numerics option of r, defaults included, sorted by key; returns the count. The
 * description is not an option: it changes no kernel, so it stays out of the fusion key. */
int qf_gen_recipe_option_list(const qf_recipe *r, qf_gen_option out[QF_GEN_OPTIONS_MAX]);

/* Canonical "key=value;..." of qf_gen_recipe_option_list
 * ("amax_compute=max;amax_history_len=1024;family=fp8_delayed;format=hybrid;margin=0",
 * "family=mxfp8;grad_format=e4m3;input_format=e4m3;scale_rounding=ceil;weight_2d=false;
 * weight_format=e4m3", "family=nvfp4;rht_grad=true;rht_input=true;rht_seed=none;
 * stochastic_rounding_grad=true;weight_2d=true"). */
void qf_gen_recipe_options(const qf_recipe *r, char *buf, size_t n);

/* Name of r's `format` option ("hybrid"). */
const char *qf_gen_recipe_format_name(const qf_recipe *r);

#endif /* QF_GEN_RECIPE_H */
