-- MXFP8 block scaling (docs/numerics.md 2.3): one E8M0 scale per 32 consecutive elements.
-- Defaults are Transformer Engine's MXFP8BlockScaling recipe: E4M3 for every
-- role, 1x32 blocks everywhere, scales rounded up.
return {
    family = "mxfp8",
    input_format = "e4m3",      -- activations (the only choice)
    weight_format = "e4m3",     -- weights (the only choice)
    grad_format = "e4m3",       -- output gradients: "e4m3" or "e5m2"
    scale_rounding = "ceil",    -- "ceil" (TE, cvt.rp.satfinite.ue8m0) or "floor" (OCP MX v1.0)
    weight_2d = false,          -- true: 32x32 weight blocks
}
