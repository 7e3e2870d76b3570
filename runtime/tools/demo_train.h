/* demo_train.h: the demo's training part. The checkpoint's LayerNorm + MLP block
 * (scripts/get-real-weights) is trained with every recipe and with an unquantized fp64 baseline
 * on the same task; qfuse-demo prints the losses side by side and writes them to a CSV file. */
#ifndef QF_DEMO_TRAIN_H
#define QF_DEMO_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "qfuse.h"
#include "registry.h"

/* The block file's tensors (numbers as double; x rounded to bf16, the precision the GPU reads):
 * x [M, K] (real activations), ln_w, ln_b [K], w1 [F, K], b1 [F], w2 [N, F], b2 [N]. */
typedef struct demo_block {
    int64_t M, K, F, N;
    double eps;              /* the LayerNorm's (1e-12, BERT's) */
    double *x, *ln_w, *ln_b, *w1, *b1, *w2, *b2;
} demo_block;

/* Reads the block file at path (at most 2 GiB): every tensor's presence and shape is checked
 * before any is converted. Tool code: a bad file prints what is wrong and exits 1. */
void demo_block_load(const char *path, demo_block *b);
void demo_block_free(demo_block *b);

typedef struct demo_train_opts {
    int steps;               /* Adam steps per run (default 300) */
    double lr;               /* Adam's learning rate (default 1e-3) */
    double noise;            /* W1, W2 start at W + noise * rms(W) * N(0, 1) (default 0.5) */
    uint64_t seed;           /* of the perturbation and of NVFP4's stochastic rounding */
    FILE *csv;               /* loss curves (run,step,loss) written here (open), or NULL */
    const struct tool_recipes *recipes; /* which registry recipes run (tool_util.h) */
} demo_train_opts;

/* Trains the block (gelu, LayerNorm) with every selected recipe and with the fp64 baseline.
 * Task: the checkpoint's own output y* = fc2(gelu(fc1(ln(x)))) from perturbed W1, W2; loss
 * ||y - y*||^2 / ||y*||^2 over all M rows, full batch; every parameter (W1, b1, W2, b2, gamma,
 * beta) trained by Adam on fp64 master weights, the recipes' runs through qf_layernorm_mlp_fwd /
 * _bwd on the GPU (weights re-quantized once per step through the weight cache, delayed scaling's
 * scales updated once per step). A recipe whose fake shapes reject the block's tensors is left
 * out with a line saying why. Prints a table; returns the number of runs whose loss became NaN
 * or did not fall below half its start, plus 1 when writing o->csv failed; 1, with a line saying
 * why and nothing run (ctx unused), when ||y*||^2 is 0 or not finite (no loss to train). */
int demo_train(qf_ctx_t *ctx, const demo_block *b, const demo_train_opts *o);

/* 1 when registry recipe r would train block b (it has a quantizer and a GEMM, and its fake
 * shapes accept every tensor of the block's step); else 0 after a table row "| <recipe> | not
 * trained: <why>" on stdout. demo_train asks it of every recipe; qfuse-demo without a GPU too, so
 * that a checkpoint a recipe refuses is said before a GPU run. Host only. */
int demo_block_fits(const qf_recipe *r, const demo_block *b);

#endif /* QF_DEMO_TRAIN_H */
