-- FP8 block scaling (docs/numerics.md 2.5), DeepSeek-V3 style: E4M3 for every role, one fp32
-- scale per 1x128 block along K for inputs and gradients (128x1 along M for their transposed
-- columnwise copy) and one per 128x128 tile for weights. TE's Float8BlockScaling defaults.
return {
    family = "fp8_block",
    description = "FP8 block scaling: E4M3, 1x128 blocks for inputs and gradients, 128x128 weights",
    amax_epsilon = 0.0,         -- lower bound of every block's amax
    power_2_scales = true,      -- scales rounded down to powers of two (TE's default here)
}
