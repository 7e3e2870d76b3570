// Stub of the NVFP4 norm + quantize template (test data): every placeholder of the contract in
// gen/gen_variant.h once, so tests can generate the tests/data NVFP4 recipes (shapes, registry).
void __KERNEL_NAME__() {
    int a[] = {__NORM__, __ZERO_CENTERED_GAMMA__, __IN_DTYPE__, __RHT__, __RHT_MASK__,
               __STOCHASTIC_ROUNDING__, __BLOCK_2D__, __BLOCK_THREADS__, __TILE_M__};
}
