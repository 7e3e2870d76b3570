-- Per-tensor FP8 with delayed scaling: the scale of each tensor comes from a
-- history of its amax values (docs/numerics.md 2.1). Defaults are Transformer Engine's
-- DelayedScaling recipe.
return {
    family = "fp8_delayed",
    format = "hybrid",          -- E4M3 for input and weight, E5M2 for grad
    margin = 0,                 -- scale = fp8_max * 2^-margin / amax
    amax_history_len = 1024,    -- steps of amax history kept per tensor
    amax_compute = "max",       -- "max" of the history or "most_recent"
}
