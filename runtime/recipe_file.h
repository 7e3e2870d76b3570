/* recipe_file.h: recipes loaded from .lua files at run time (DESIGN data flow 4). */
#ifndef QF_RECIPE_FILE_H
#define QF_RECIPE_FILE_H

#include "registry.h"
#include "status.h"

/* 1 when s names a recipe file rather than a built-in recipe: it holds a '/' or ends in ".lua"
 * (built-in names are [a-z0-9_]+). */
QF_INTERNAL int qf_recipe_is_path(const char *s);

/* The recipe of the file at path, loaded, validated and expanded into its kernel variants on the
 * first call for that file (the same sandbox, schema, variants and preludes as qfuse-gen), then
 * returned again as is: a process reads each file once, known by its path made absolute (a
 * relative path is joined to the working directory of each call; links are not resolved, so
 * each spelling through a link loads on its own). The recipe and its kernels are owned by
 * qfuse and live until the process ends; *out points to it. Thread-safe. Errors (message set,
 * *out NULL): QF_ERR_NOT_FOUND (the file cannot be opened), QF_ERR_UNSUPPORTED (a family that is
 * not implemented yet), QF_ERR_INVALID_ARG (not a valid recipe: the message names the file and
 * the field, as qfuse-gen --check does). */
QF_INTERNAL qf_status qf_recipe_file_load(const char *path, const qf_recipe **out);

/* The recipe an op names, into *out: a recipe file when name is a path (qf_recipe_is_path), else
 * the built-in recipe of that name (qf_registry_recipe: QF_ERR_NOT_FOUND when absent). Errors
 * as those two say. */
QF_INTERNAL qf_status qf_recipe_find(const char *name, const qf_recipe **out);

#endif /* QF_RECIPE_FILE_H */
