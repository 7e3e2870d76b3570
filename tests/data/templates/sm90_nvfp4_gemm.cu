// Stub of the NVFP4 GEMM template (test data): every placeholder of the contract in
// gen/gen_variant.h once, so tests can generate the tests/data NVFP4 recipes (shapes, registry).
void __KERNEL_NAME__() {
    int a[] = {__BLOCK_THREADS__, __TILE_M__};
}
