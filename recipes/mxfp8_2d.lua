-- MXFP8 block scaling (docs/numerics.md 2.3), 2D weight blocks: mxfp8.lua's defaults
-- (E4M3 everywhere, scales rounded up), but one E8M0 scale per 32x32 tile of a
-- weight, written to every rowwise and columnwise scale entry the tile covers,
-- so that a weight and its transpose quantize to the same values. Activations
-- and gradients keep 1x32 blocks.
return {
    family = "mxfp8",
    weight_2d = true,
}
