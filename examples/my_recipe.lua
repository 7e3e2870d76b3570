-- my_recipe.lua: an MXFP8 recipe of one's own, run without a rebuild by examples/recipe_file.c
-- (any op takes this file's path where it takes a recipe name). The recipe's name is the file
-- stem, my_recipe, so its kernels are qf_my_recipe_* and cached apart from the shipped ones.
-- Fields left out keep their defaults (qfuse-gen --fields lists every family's fields).
return {
    family = "mxfp8",
    description = "MXFP8 with E5M2 gradients and OCP MX v1.0 (floor) scale rounding",
    grad_format = "e5m2",       -- gradients in E5M2 (activations and weights stay E4M3)
    scale_rounding = "floor",   -- E8M0 exponent floor(log2(amax)) - emax instead of ceil
}
