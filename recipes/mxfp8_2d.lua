-- MXFP8 block scaling (docs/numerics.md 2.3) with 2D weight blocks: like mxfp8.lua, but one
-- E8M0 scale per 32x32 tile of a weight, written to every rowwise and
-- columnwise scale entry the tile covers, so a weight and its transpose quantize
-- to the same values. Activations and gradients keep 1x32 blocks.
return {
    family = "mxfp8",
    input_format = "e4m3",      -- activations (the only choice)
    weight_format = "e4m3",     -- weights (the only choice)
    grad_format = "e4m3",       -- output gradients: "e4m3" or "e5m2"
    scale_rounding = "ceil",    -- "ceil" (TE, cvt.rp.satfinite.ue8m0) or "floor" (OCP MX v1.0)
    weight_2d = true,           -- 32x32 weight blocks
}
