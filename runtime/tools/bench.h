/* bench.h: what the parts of qfuse-bench share (qfuse_bench.c: options and main; bench_util.c:
 * inputs, timing, rows and the CSV; bench_quant.c, bench_gemm.c, bench_jit.c: the sections). */
#ifndef QF_BENCH_H
#define QF_BENCH_H

#include <stdio.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "registry.h"
#define QF_TOOL_NAME "qfuse-bench"
#include "tool_util.h"

#define MAX_ROT 64          /* most input sets rotated between */
#define MAX_OUT 12          /* outputs of one op per fake-shape function */
#define WARMUP 5            /* launches before timing */
#define LT_WORKSPACE (32u << 20) /* cuBLASLt workspace: the same size libqfuse uses */
#define PROBE_M 256         /* JIT probes: a small problem, kernels do not depend on M or K */
#define PROBE_K 1024
#define PROBE_N 128         /* a GEMM probe's N: under 256, so sm_90 runs the module's kernel */
#define PROBE_N_STAGED 256  /* the staged instance's probe: M and N 256, the staged path */
#define NORM_EPS 1e-5f

#define LT_OR_DIE(call)                                                                       \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            fprintf(stderr, "qfuse-bench: %s failed: %s\n", #call, cublasLtGetStatusString(s_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* Sections of the run (--section); the copy ceiling always runs. */
enum { SEC_QUANT = 1, SEC_GEMM = 2, SEC_JIT = 4, SEC_STEP = 8, SEC_ALL = 15 };

typedef struct bench_opts {
    const char *csv;
    int quick, iters, batch;
    unsigned sections;          /* SEC_* mask */
    int dtype;                  /* --dtype: one x dtype, or -1 for all */
    int shape;                  /* --shape: 1 + its index in the GEMM shapes, or 0 for all */
    int gemm_bytes;             /* --gemm-data bytes: the block-scaled GEMMs' operands are random
                                 * bytes with unit scales; 0 (quantized): the recipe's own
                                 * quantization of N(0, 1) data */
    tool_recipes recipes;       /* --recipe */
} bench_opts;

/* Everything measured once per run and shared by the sections. */
typedef struct bench {
    bench_opts o;
    qf_ctx_t *ctx;
    FILE *csv;
    size_t l2;                  /* L2 bytes (cudaDeviceProp.l2CacheSize) */
    double copy_tbps;           /* measured D2D copy bandwidth */
    cublasLtHandle_t lt;        /* the tool's own handle for the direct cuBLASLt calls */
    void *lt_ws;
} bench;

/* {===================================================================== bench_util.c */

/* Median of v[0..n-1] (sorts v). */
double bench_median(double *v, int n);

/* n random elements of dt in a new host array: N(0, 1) for float dtypes, E4M3 bytes of
 * U[-200, 200] (never NaN) otherwise. Deterministic for a seed. */
void *bench_host_random(qf_dtype dt, int64_t n, uint64_t seed);
/* A device copy of h rotated left by about `part` / `parts` of its length (256-byte aligned), so
 * that rotated sets share the statistics but not the contents. */
void *bench_dev_rotated(const void *h, size_t bytes, int part, int parts);
void *bench_dev_upload(const void *h, size_t bytes);
/* How many sets of set_bytes to rotate between so that together they exceed twice the L2. */
int bench_rotation_count(const bench *b, double set_bytes);

typedef void (*launch_fn)(void *arg, int rot);

/* Median microseconds per launch: WARMUP launches, then o.iters batches of o.batch back-to-back
 * launches between two CUDA events on the legacy default stream, cycling through n_rot sets. */
double bench_time_launches(const bench *b, launch_fn fn, void *arg, int n_rot);

/* One of the launches timed side by side by bench_time_rounds: fn over n_rot operand sets; us,
 * written there, its median microseconds per launch. */
typedef struct bench_timed {
    launch_fn fn;
    void *arg;
    int n_rot;
    double us;
} bench_timed;

/* Times n launches side by side, as bench_time_launches times one: WARMUP launches of each in
 * turn, then o.iters rounds, each timing one batch of o.batch launches of every t[i] in turn, so
 * that a row and the ceiling it is compared with run under the same clocks (a GPU's clocks drift
 * by several percent over a run of compute-bound launches: docs/bench.md); t[i].us is the
 * median of t[i]'s batches. */
void bench_time_rounds(const bench *b, bench_timed *t, int n);

/* One result. Numbers that do not apply are NAN and print as empty CSV fields. */
typedef struct row {
    const char *kind, *recipe, *op, *norm, *dtype, *outputs;
    int64_t M, K, N;
    double bytes, flops, us, ratio_copy, ratio_lt;
    char note[256];
} row;

row bench_row_new(const char *kind, const char *recipe, const char *op);
/* Prints r as a table line and appends it to the CSV. */
void bench_row_emit(bench *b, const row *r);
void bench_print_table_header(void);
/* Opens the CSV and the tool's cuBLASLt handle, writes the header lines; bench_close undoes. */
void bench_open(bench *b);
void bench_close(bench *b);

/* Outputs of one launch exactly as the recipe's fake-shape function describes them. */
typedef struct out_set {
    qf_shape sh[MAX_OUT];
    void *buf[MAX_OUT];
    int n;
} out_set;

/* The quantize query whose output holds copy c of a GEMM operand with `rows` rows and
 * reduction K (a columnwise copy quantizes the [K, rows] tensor). */
qf_shape_query bench_operand_query(qf_role role, qf_copy c, int64_t rows, int64_t K);
/* One zeroed device buffer per fake shape of q (exits when the shape function rejects it). */
void bench_out_alloc(out_set *o, const qf_recipe *r, const qf_shape_query *q);
void bench_out_free(out_set *o);
/* The output called name as a tensor; data NULL when the op does not produce it. */
qf_tensor bench_out_tensor(const out_set *o, const char *name);
/* A quantized tensor whose slots are the buffers of o, matched by fake-shape name. */
qf_quantized bench_out_quantized(const out_set *o, qf_scale_layout layout);

qf_tensor bench_tensor_2d(void *d, qf_dtype dt, int64_t r, int64_t c);
qf_tensor bench_tensor_1d(void *d, qf_dtype dt, int64_t n);
const char *bench_norm_name(qf_norm n);
/* Index of the first recipe selected by --recipe whose family quantizes, qf_recipe_count when
 * none. */
int bench_first_recipe(const bench *b);

/* =====================================================================} */

/* {===================================================================== sections */

/* bench_quant.c: the x dtypes of the quantizer rows (--dtype picks one). */
#define BENCH_N_X_DTYPES 3
extern const qf_dtype bench_x_dtypes[BENCH_N_X_DTYPES];
/* bench_quant.c: norm + quantize and weight quantize of every selected recipe. */
void bench_quantizers(bench *b);
/* One GEMM shape s = {M, K, N} and the training GEMM it is ("fprop", "dgrad of 2048 x 4096 ->
 * 14336"), which starts the note of its qfuse rows. */
typedef struct bench_gemm_case {
    int64_t s[3];
    const char *kind;
    qf_gemm_kind gemm; /* the copies the block-scaled rows read (qf_gemm_kinds) */
} bench_gemm_case;
/* bench_gemm.c: one GEMM shape: bf16 and FP8 cuBLASLt called directly (the ceilings), qfuse's
 * per-tensor FP8 GEMM, then the generated GEMM of every selected recipe that has one (and FP8
 * block scaling's), each qfuse row timed side by side with the bf16 ceiling (bench_time_rounds;
 * the block-scaled rows' ratio_lt is that ceiling's time over theirs). */
void bench_gemm_shape(bench *b, const bench_gemm_case *c);
/* bench_jit.c: cold compile, disk-cache and memory lookups of every kernel of the first selected
 * recipe. */
void bench_jit(bench *b);
/* bench_step.c: one LayerNorm + MLP training step (SwiGLU) of every selected recipe, its time
 * split into the GEMM stages and the rest. */
void bench_steps(bench *b);

/* =====================================================================} */

#endif /* QF_BENCH_H */
