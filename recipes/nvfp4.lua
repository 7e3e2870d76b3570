-- NVFP4 block scaling (docs/numerics.md 2.4), Transformer Engine's NVFP4BlockScaling defaults:
-- E2M1 elements in 1x16 blocks with E4M3 block scales and an fp32 global scale;
-- a 16-point random Hadamard transform on the columnwise copy of inputs and
-- gradients, stochastic rounding of gradients, 16x16 tiles for weights.
return {
    family = "nvfp4",
    description = "TE NVFP4BlockScaling defaults",
    rht_input = true,                 -- RHT on the columnwise (wgrad) copy of activations
    rht_grad = true,                  -- RHT on the columnwise copy of output gradients
    stochastic_rounding_grad = true,  -- Philox4x32-10 stochastic rounding of gradients
    weight_2d = true,                 -- one 16x16 tile scale for weights
    -- rht_seed = 1234,               -- absent: TE's fixed sign mask 0xD7E8
}
