/* gen_cli.c: the qfuse-gen command line (parsing and the generate / --list / --check commands). */
#include "gen_cli.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen_emit.h"
#include "gen_plan.h"
#include "names.h"
#include "qf_arch.h"
#include "tool_common.h"

/* ORDER GEN_CMD (private to this file: the values are never stored) */
typedef enum qf_gen_cmd {
    QF_GEN_CMD_GENERATE,
    QF_GEN_CMD_LIST,
    QF_GEN_CMD_CHECK,
    QF_GEN_CMD_FIELDS, /* the first that reads no recipe, template or header */
    QF_GEN_CMD_VERSION,
    QF_GEN_CMD_COUNT
} qf_gen_cmd; /* --help is no command: it wins over everything (qf_gen_cli_main) */

typedef struct qf_gen_args {
    qf_gen_cmd cmd;
    const char *out_dir;
    int arch;
    qf_gen_opts opts;
    int n_recipes;
    const char **recipes; /* points into argv (owned array) */
    unsigned given;       /* bit per valued option seen (qf_gen_parse_opt): each is given once */
} qf_gen_args;

#ifndef QF_GEN_DATADIR
#define QF_GEN_DATADIR "/usr/local/share/qfuse" /* set by the Makefile from PREFIX */
#endif

static const char qf_gen_usage[] =
    "usage: qfuse-gen [-o DIR] [--templates DIR] [--include DIR] RECIPE.lua...\n"
    "       qfuse-gen --list [--arch sm_XX] RECIPE.lua...   recipes, variants and fusion keys\n"
    "       qfuse-gen --check RECIPE.lua...                  validate only, write nothing\n"
    "       qfuse-gen --fields                               every family's recipe fields\n"
    "       qfuse-gen --help | -h | --version\n"
    "Generates DIR (-o DIR, -o=DIR or --output=DIR; default out): kernels/<variant>.cu,\n"
    "registry.c, shapes.c, shapes.h and manifest.json, and removes the DIR/kernels/qf_*.cu\n"
    "regular files this run did not write (variants a recipe no longer has); manifest.json's\n"
    "fusion keys are sm_90's. --arch (default sm_90) picks the architecture of --list's\n"
    "keys; --templates (default ./templates, else those of the source tree this qfuse-gen\n"
    "was built in, else the installed " QF_GEN_DATADIR "/templates) holds the CUDA\n"
    "templates, --include (default ./runtime, else the tree's, else\n"
    QF_GEN_DATADIR "/include) qf_formats.h. Arguments after -- are recipes, whatever they\n"
    "start with.\n"
    "Exit status: 0 success, 1 failure (a recipe, a template or the output), 2 bad usage.\n";

/* What a usage error's message ends with, as the other tools' (docs/tools.md). */
static const char qf_gen_try[] = "Try 'qfuse-gen --help'.\n";

/* The value of option argv[*i] ("--x V" or "--x=V"); NULL when missing. */
static const char *qf_gen_optval(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) == 0 && argv[*i][n] == '=')
        return argv[*i] + n + 1;
    /* a next argument that is an option is not taken as the value (-o --list) */
    return *i + 1 < argc && !tool_looks_like_opt(argv[*i + 1]) ? argv[++*i] : NULL;
}

static int qf_gen_is_opt(const char *arg, const char *name) {
    size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

/* Flags that pick the command other than generating: one of them, once. */
static const struct {
    const char *flag;
    qf_gen_cmd cmd;
} qf_gen_cmd_flags[] = {
    {"--list", QF_GEN_CMD_LIST},
    {"--check", QF_GEN_CMD_CHECK},
    {"--version", QF_GEN_CMD_VERSION},
    {"--fields", QF_GEN_CMD_FIELDS},
};

/* The flag of command c, as messages name it (qf_gen_cmd_flags; "" for generating). */
static const char *qf_gen_cmd_flag(qf_gen_cmd c) {
    for (size_t k = 0; k < sizeof qf_gen_cmd_flags / sizeof qf_gen_cmd_flags[0]; k++)
        if (qf_gen_cmd_flags[k].cmd == c)
            return qf_gen_cmd_flags[k].flag;
    return "";
}

/* Sets a->cmd when arg is a command flag; returns 1 then, or 2 with the usage error printed when
 * two of --list, --check, --fields and --version are given, or one twice. */
static int qf_gen_parse_cmd(const char *arg, qf_gen_args *a, FILE *err) {
    for (size_t k = 0; k < sizeof qf_gen_cmd_flags / sizeof qf_gen_cmd_flags[0]; k++)
        if (strcmp(arg, qf_gen_cmd_flags[k].flag) == 0) {
            const qf_gen_cmd c = qf_gen_cmd_flags[k].cmd;
            if (a->cmd != QF_GEN_CMD_GENERATE) {
                if (a->cmd == c)
                    fprintf(err, "qfuse-gen: %s given twice\n%s", arg, qf_gen_try);
                else
                    fprintf(err, "qfuse-gen: %s and %s are exclusive\n%s",
                            qf_gen_cmd_flag(a->cmd), arg, qf_gen_try);
                return 2;
            }
            a->cmd = c;
            return 1;
        }
    return 0;
}

/* The valued options (bit 1 << OPT_x of qf_gen_args.given once seen), their long names, and how
 * messages name them (qf_gen_opt_shown). */
enum { OPT_OUTPUT, OPT_TEMPLATES, OPT_INCLUDE, OPT_ARCH, OPT_NONE };
static const char *const qf_gen_opt_names[] = {"--output", "--templates", "--include", "--arch"};

static const char *qf_gen_opt_shown(int o) {
    return o == OPT_OUTPUT ? "-o/--output" : qf_gen_opt_names[o];
}

/* Handles one option of argv[*i]. Returns 0, or 2 with the usage error printed. */
static int qf_gen_parse_opt(int argc, char **argv, int *i, qf_gen_args *a, FILE *err) {
    const char *arg = argv[*i], *v = NULL;
    const int cmd = qf_gen_parse_cmd(arg, a, err);
    if (cmd)
        return cmd == 1 ? 0 : 2;
    /* the valued options, each given once (bit 1 << o of a->given) */
    int o = qf_gen_is_opt(arg, "-o") ? OPT_OUTPUT : OPT_NONE; /* -o DIR or -o=DIR */
    for (int k = 0; k < OPT_NONE && o == OPT_NONE; k++)
        o = qf_gen_is_opt(arg, qf_gen_opt_names[k]) ? k : OPT_NONE;
    if (o != OPT_NONE && (a->given & (1u << o))) {
        fprintf(err, "qfuse-gen: %s given twice\n%s", qf_gen_opt_shown(o), qf_gen_try);
        return 2;
    }
    if (o != OPT_NONE)
        a->given |= 1u << o;
    if (o == OPT_OUTPUT)
        v = a->out_dir = qf_gen_optval(argc, argv, i, arg[1] == 'o' ? "-o" : "--output");
    else if (o == OPT_TEMPLATES)
        v = a->opts.templates_dir = qf_gen_optval(argc, argv, i, "--templates");
    else if (o == OPT_INCLUDE)
        v = a->opts.include_dir = qf_gen_optval(argc, argv, i, "--include");
    else if (o == OPT_ARCH) {
        v = qf_gen_optval(argc, argv, i, "--arch");
        if (v && (a->arch = qf_arch_parse(v)) < 0) {
            qf_gen_shown shown;
            fprintf(err,
                    "qfuse-gen: --arch '%s' is not a supported architecture; expected sm_XX "
                    "with XX in %d..%d (e.g. sm_90; sm_90a, its compile target, is the only "
                    "suffixed spelling: other archs compile without one)\n%s",
                    qf_gen_path_shown(v, &shown), QF_ARCH_MIN, QF_ARCH_MAX, qf_gen_try);
            return 2;
        }
    } else {
        qf_gen_shown shown; /* as messages show a path: no raw control or non-UTF-8 bytes */
        fprintf(err, "qfuse-gen: unknown option '%s'\n%s", qf_gen_path_shown(arg, &shown),
                qf_gen_try);
        return 2;
    }
    if (!v || !*v) {
        qf_gen_shown shown, next;
        const int opt_next = !v && *i + 1 < argc && tool_looks_like_opt(argv[*i + 1]);
        fprintf(err, "qfuse-gen: option '%s' needs a value%s%s%s\n%s",
                qf_gen_path_shown(arg, &shown), opt_next ? " (the next argument, '" : "",
                opt_next ? qf_gen_path_shown(argv[*i + 1], &next) : "",
                opt_next ? "', is an option; a value that starts with '-' goes after '=')" : "",
                qf_gen_try);
        return 2;
    }
    return 0;
}

/* Nonzero when path is a directory. */
static int qf_gen_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The source tree this qfuse-gen was built in, when it still holds the templates: the folder
 * above the executable's (build/qfuse-gen), found through /proc/self/exe; NULL otherwise (an
 * installed copy, or no /proc). The path lives in a static buffer. */
static const char *qf_gen_exe_tree(void) {
    static char dir[4096], probe[4096 + 32];
    const ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0 || (size_t)n >= sizeof dir - 1)
        return NULL;
    dir[n] = '\0';
    for (int up = 0; up < 2; up++) { /* drop "qfuse-gen", then "build" */
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            return NULL;
        *slash = '\0';
    }
    snprintf(probe, sizeof probe, "%s/templates", dir);
    if (!qf_gen_is_dir(probe))
        return NULL;
    snprintf(probe, sizeof probe, "%s/runtime", dir);
    return qf_gen_is_dir(probe) ? dir : NULL;
}

/* Fills a from argv. Returns 0 or 2 (usage error, printed). a->recipes is malloc'ed. */
static int qf_gen_parse(int argc, char **argv, qf_gen_args *a, FILE *err) {
    static char tree_templates[4096 + 16], tree_include[4096 + 16];
    memset(a, 0, sizeof *a);
    a->out_dir = "out";
    a->arch = 90;
    /* In a source tree use its templates; else those of the tree this binary was built in;
     * else the installed copies (make install). */
    const char *tree =
        qf_gen_is_dir("templates") && qf_gen_is_dir("runtime") ? NULL : qf_gen_exe_tree();
    snprintf(tree_templates, sizeof tree_templates, "%s/templates", tree ? tree : "");
    snprintf(tree_include, sizeof tree_include, "%s/runtime", tree ? tree : "");
    a->opts.templates_dir = qf_gen_is_dir("templates") ? "templates"
                            : tree                     ? tree_templates
                                                       : QF_GEN_DATADIR "/templates";
    a->opts.include_dir = qf_gen_is_dir("runtime") ? "runtime"
                          : tree                   ? tree_include
                                                   : QF_GEN_DATADIR "/include";
    a->recipes = calloc((size_t)(argc > 0 ? argc : 1), sizeof *a->recipes);
    if (!a->recipes) {
        fprintf(err, "qfuse-gen: out of memory\n");
        return 2;
    }
    int options = 1; /* until "--": every argument after it is a recipe, even one like "-x" */
    for (int i = 1; i < argc; i++) {
        if (options && strcmp(argv[i], "--") == 0)
            options = 0;
        else if (!options || argv[i][0] != '-' || strcmp(argv[i], "-") == 0)
            a->recipes[a->n_recipes++] = argv[i];
        else if (qf_gen_parse_opt(argc, argv, &i, a, err) != 0)
            return 2;
    }
    /* what a command would ignore is refused: --list, --check,
     * --fields and --version write nothing; only --list makes keys for an arch (--arch:
     * generating writes sm_90's, the manifest's key_sm90); --fields and --version read no
     * template or header */
    const int writes = a->cmd == QF_GEN_CMD_GENERATE, keys = a->cmd == QF_GEN_CMD_LIST;
    const int reads = a->cmd < QF_GEN_CMD_FIELDS;
    const struct {
        int opt, used;
        const char *why;
    } uses[] = {{OPT_OUTPUT, writes, "it writes nothing"},
                {OPT_ARCH, keys,
                 writes ? "the manifest's fusion keys are sm_90's, key_sm90; --list --arch sm_XX "
                          "prints another architecture's"
                        : "it makes no fusion key"},
                {OPT_TEMPLATES, reads, "it reads no template"},
                {OPT_INCLUDE, reads, "it reads no header"}};
    for (size_t u = 0; u < sizeof uses / sizeof uses[0]; u++)
        if (!uses[u].used && (a->given & (1u << uses[u].opt))) {
            fprintf(err, "qfuse-gen: %s has no effect %s%s (%s)\n%s",
                    qf_gen_opt_shown(uses[u].opt), writes ? "when generating" : "with ",
                    qf_gen_cmd_flag(a->cmd), uses[u].why, qf_gen_try);
            return 2;
        }
    if (a->n_recipes == 0 && a->cmd < QF_GEN_CMD_FIELDS) { /* fields and version take none */
        fprintf(err, "qfuse-gen: no recipe given\n%s", qf_gen_try);
        return 2;
    }
    if (a->n_recipes > 0 && (a->cmd == QF_GEN_CMD_VERSION || a->cmd == QF_GEN_CMD_FIELDS)) {
        qf_gen_shown shown;
        fprintf(err, "qfuse-gen: %s takes no recipe (got '%s')\n%s",
                a->cmd == QF_GEN_CMD_FIELDS ? "--fields" : "--version",
                qf_gen_path_shown(a->recipes[0], &shown), qf_gen_try);
        return 2;
    }
    return 0;
}

/* --list: every recipe and its variants with their fusion keys for the chosen arch. */
static void qf_gen_list(const qf_gen_plan *p, int arch, FILE *out) {
    for (int r = 0; r < p->n_recipes; r++) {
        const qf_gen_plan_recipe *pr = &p->recipes[r];
        char key[33];
        qf_gen_shown shown;
        fprintf(out, "%s: %s (%s), %d kernels, keys for sm_%d%s\n",
                qf_gen_path_shown(pr->recipe.path, &shown),
                pr->recipe.name, pr->recipe.options, pr->n_variants, arch, qf_arch_feature(arch));
        for (int v = 0; v < pr->n_variants; v++) {
            qf_gen_plan_key(p, r, v, arch, key);
            fprintf(out, "  %s  ", key);
            qf_gen_kernel_desc_print(out, &pr->variants[v].desc);
            fputs("  ", out);
            qf_gen_kernel_config_print(out, &pr->variants[v].cfg);
            fputc('\n', out);
        }
    }
}

/* What field fd accepts: "one of 'a', 'b'", "integer in lo..hi", "boolean", "number in a..b". */
static void qf_gen_field_accepts(const qf_field *fd, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    if (fd->type == QF_FIELD_INTEGER)
        snprintf(buf, n, "integer %lld..%lld", (long long)fd->lo, (long long)fd->hi);
    else if (fd->type == QF_FIELD_BOOLEAN)
        snprintf(buf, n, "boolean");
    else if (fd->type == QF_FIELD_NUMBER)
        snprintf(buf, n, "number %g..%g", fd->min, fd->max);
    for (int v = 0; fd->type == QF_FIELD_OPTION && v < qf_enum_count((qf_enum)fd->names); v++)
        if ((fd->allowed == 0 || ((fd->allowed >> v) & 1u)) && used < n)
            used += (size_t)snprintf(buf + used, n - used, "%s'%s'", used ? " | " : "",
                                     qf_enum_name((qf_enum)fd->names, v));
}

/* --fields: the schema of every implemented family (the families table, runtime/family.c),
 * each field with what it accepts, its default (as the loader fills it in) and whether it enters
 * the fusion key. The rules every recipe follows come first. */
static int qf_gen_fields(FILE *out, FILE *err) {
    fputs("A recipe is a file NAME.lua (NAME: [a-z0-9_]+, at most 48 characters) returning one\n"
          "table: family = '<family>', an optional description (UTF-8, at most 255 bytes), and\n"
          "the family's fields; every field has a default, and unknown fields are errors.\n",
          out);
    for (int f = 0; f < QF_FAMILY_COUNT; f++) {
        const qf_family_traits *t = &qf_families[f];
        qf_recipe r;
        qf_gen_err e;
        char text[64], accepts[160];
        snprintf(text, sizeof text, "return {family = '%s'}", t->name);
        if (!t->implemented)
            continue;
        if (qf_gen_recipe_load_buffer("defaults.lua", text, strlen(text), NULL, &r, &e) != 0) {
            fprintf(err, "qfuse-gen: %s\n", e.msg);
            return 1;
        }
        qf_gen_option opts[QF_GEN_OPTIONS_MAX];
        const int n = qf_gen_recipe_option_list(&r, opts);
        fprintf(out, "\nfamily '%s' (%s)\n", t->name, t->spec);
        for (int i = 0; i < t->n_fields; i++) {
            const qf_field *fd = &t->fields[i];
            const char *def = "?";
            for (int k = 0; k < n; k++)
                if (strcmp(opts[k].key, fd->name) == 0)
                    def = opts[k].value;
            qf_gen_field_accepts(fd, accepts, sizeof accepts);
            fprintf(out, "  %-26s %-36s default %s%s\n", fd->name, accepts, def,
                    fd->key ? "" : " (not in the key)");
        }
    }
    return 0;
}

/* The plan of recipes[0..n), or 1 with the error printed. */
static int qf_gen_plan_or_say(const qf_gen_args *a, const char **recipes, int n, qf_gen_plan *plan,
                              FILE *err) {
    qf_gen_err e = {{0}, QF_GEN_ERR_INVALID};
    if (qf_gen_plan_build(plan, &a->opts, recipes, n, &e) == 0)
        return 0;
    /* a folder that is not one: said (naming the option when it was given, else where the folder
     * came from) instead of the error, where that error is about the folder */
    int said = 0;
    const struct {
        const char *dir, *what, *are;
        int opt;
    } dirs[] = {{a->opts.templates_dir, "the CUDA templates", "are", OPT_TEMPLATES},
                {a->opts.include_dir, "qf_formats.h", "is", OPT_INCLUDE}};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if (qf_gen_is_dir(dirs[i].dir))
            continue;
        struct stat st;
        const char *is = stat(dirs[i].dir, &st) != 0 ? "does not exist" : "is not a directory";
        const char *opt = qf_gen_opt_shown(dirs[i].opt);
        if (a->given & (1u << dirs[i].opt))
            fprintf(err, "qfuse-gen: %s %s %s (the folder of %s)\n", opt, dirs[i].dir, is,
                    dirs[i].what);
        else
            fprintf(err, "qfuse-gen: %s %s read from %s, which %s: run from the source tree, "
                    "pass %s DIR, or `make install`\n", dirs[i].what, dirs[i].are, dirs[i].dir,
                    is, opt);
        const size_t len = strlen(dirs[i].dir); /* the error names a path inside the folder */
        said |= strncmp(e.msg, dirs[i].dir, len) == 0 && (e.msg[len] == ':' || e.msg[len] == '/');
    }
    if (!said)
        fprintf(err, "qfuse-gen: %s\n", e.msg);
    return 1;
}

/* --check: every recipe on its own (each one's error said, none stops the others), then those
 * that pass together (two files with one name), whether or not others failed. Returns the exit
 * status. */
static int qf_gen_check(const qf_gen_args *a, FILE *out, FILE *err) {
    qf_gen_plan plan;
    const char **ok = calloc((size_t)a->n_recipes, sizeof *ok);
    if (!ok) {
        fprintf(err, "qfuse-gen: out of memory\n");
        return 1;
    }
    int bad = 0, n_ok = 0;
    for (int i = 0; i < a->n_recipes; i++) {
        if (qf_gen_plan_or_say(a, &a->recipes[i], 1, &plan, err) != 0) {
            bad++;
            continue;
        }
        qf_gen_plan_free(&plan);
        qf_gen_shown shown; /* as errors show it: no raw control or non-UTF-8 bytes */
        fprintf(out, "%s: ok\n", qf_gen_path_shown(a->recipes[i], &shown));
        ok[n_ok++] = a->recipes[i];
    }
    fflush(out); /* the "ok" lines before what follows, on a terminal or in one pipe */
    int together = 0;
    if (n_ok > 1) {
        together = qf_gen_plan_or_say(a, ok, n_ok, &plan, err) != 0;
        if (!together)
            qf_gen_plan_free(&plan);
        else if (bad == 0)
            fprintf(err, "qfuse-gen: each recipe passes on its own, but not all %d together\n",
                    n_ok);
        else
            fprintf(err, "qfuse-gen: the %d recipes that pass on their own fail together\n",
                    n_ok);
    }
    free(ok);
    if (bad && a->n_recipes > 1)
        fprintf(err, "qfuse-gen: %d of %d recipes failed the check\n", bad, a->n_recipes);
    return bad || together ? 1 : 0;
}

/* Runs a parsed command that needs the plan. Returns the exit status. */
static int qf_gen_run(const qf_gen_args *a, FILE *out, FILE *err) {
    qf_gen_plan plan;
    qf_gen_files files;
    qf_gen_err e = {{0}, QF_GEN_ERR_INVALID};
    if (a->cmd == QF_GEN_CMD_CHECK)
        return qf_gen_check(a, out, err);
    if (qf_gen_plan_or_say(a, a->recipes, a->n_recipes, &plan, err) != 0)
        return 1;
    int rc = 0;
    if (a->cmd == QF_GEN_CMD_LIST) {
        qf_gen_list(&plan, a->arch, out);
    } else if (qf_gen_emit_build(&plan, &files, &e) != 0) {
        rc = 1;
    } else {
        rc = qf_gen_emit_write(a->out_dir, &files, &e) != 0;
        qf_gen_files_free(&files);
    }
    if (rc)
        fprintf(err, "qfuse-gen: %s\n", e.msg);
    qf_gen_plan_free(&plan);
    return rc;
}

int qf_gen_cli_main(int argc, char **argv, FILE *out, FILE *err) {
    if (tool_help_asked(argc, argv)) { /* whatever else is given, as in every tool */
        fputs(qf_gen_usage, out);
        return 0;
    }
    qf_gen_args a;
    int rc = qf_gen_parse(argc, argv, &a, err);
    if (rc == 0 && a.cmd == QF_GEN_CMD_VERSION)
        fprintf(out, "qfuse-gen %s\n", QF_GEN_VERSION);
    else if (rc == 0 && a.cmd == QF_GEN_CMD_FIELDS)
        rc = qf_gen_fields(out, err);
    else if (rc == 0)
        rc = qf_gen_run(&a, out, err);
    free(a.recipes);
    return rc;
}
