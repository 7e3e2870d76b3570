-- NVFP4 block scaling (docs/numerics.md 2.4) like nvfp4.lua, without the random Hadamard
-- transform: the columnwise copies of activations and gradients are quantized
-- as they are. Stochastic rounding of gradients and 16x16 weight tiles stay on.
return {
    family = "nvfp4",
    description = "NVFP4 without RHT",
    rht_input = false,
    rht_grad = false,
    stochastic_rounding_grad = true,
    weight_2d = true,
}
