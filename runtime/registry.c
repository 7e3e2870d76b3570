/* registry.c: lookups in the generated registry (build/generated/registry.c): recipes by name,
 * kernels by (recipe, op, role, norm, zero_centered_gamma, input dtype). Recipe files are
 * recipe_file.c's. Both return entry pointers, so that entries from outside the static arrays
 * (recipes loaded at run time) can be handed out alike. */
#include <stdio.h>
#include <string.h>

#include "ctx.h"

const qf_recipe *qf_registry_recipe(const char *name) {
    for (int i = 0; name && i < qf_recipe_count; i++)
        if (strcmp(qf_recipes[i].name, name) == 0)
            return &qf_recipes[i];
    char known[256] = "";
    for (int i = 0, n = 0; i < qf_recipe_count && n < (int)sizeof known; i++)
        n += snprintf(known + n, sizeof known - (size_t)n, "%s%s", i ? ", " : "",
                      qf_recipes[i].name);
    /* at most 200 characters of the name, so that the reason and the list stay in the message */
    qf_set_error(QF_ERR_NOT_FOUND, "recipe '%.200s%s' not found: this build ships %s; a recipe "
                 "file is named by its path (ending in .lua)", name ? name : "(null)",
                 name && strlen(name) > 200 ? "..." : "", known);
    return NULL;
}

const qf_recipe *qf_registry_kernel_recipe(const qf_kernel_entry *k) {
    return k->recipe;
}

const qf_kernel_entry *qf_registry_kernel(const qf_recipe *r, qf_op op, qf_role role,
                                          qf_norm norm, int zcg, qf_dtype in_dtype) {
    for (int i = 0; i < r->n_kernels; i++) {
        const qf_kernel_entry *k = &r->kernels[i];
        if (k->op == op && k->role == role &&
            k->norm == norm && k->zero_centered_gamma == !!zcg && k->in_dtype == in_dtype)
            return k;
    }
    qf_set_error(QF_ERR_NOT_FOUND, "recipe '%s' has no kernel for op %d role %d norm %d zcg %d "
                 "dtype %s", r->name, (int)op, (int)role, (int)norm, zcg,
                 qf_dtype_name(in_dtype));
    return NULL;
}
