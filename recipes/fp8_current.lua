-- Per-tensor FP8 with current scaling (docs/numerics.md 2.2): each tensor's scale comes from its
-- own amax, taken over the tensor as it is quantized. TE's Float8CurrentScaling defaults.
return {
    family = "fp8_current",
    description = "Per-tensor FP8, current scaling: E4M3 input and weight, E5M2 gradients",
    format = "hybrid",
    amax_epsilon = 0.0,
    power_2_scales = false,
}
