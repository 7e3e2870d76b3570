/* qfuse_bench.c: `make bench`: every qfuse op timed against ceilings measured in the same run;
 * options and main here, the sections in bench_quant.c, bench_gemm.c and bench_jit.c.
 *
 * Rows (printed as a table and written as CSV, see usage()):
 * - ceilings: device-to-device copy of 1 GiB (TB/s, bytes read + written), bf16 and FP8 GEMMs
 *   called on cuBLASLt directly (TN, fp32 compute) at each GEMM shape;
 * - norm + quantize and weight quantize for every recipe x norm x x dtype x outputs x shape:
 *   bytes counted from the recipe's fake shapes, median time, TB/s and the ratio to the copy;
 * - qf_gemm: per-tensor FP8 with TFLOP/s and the ratio to cuBLASLt FP8 alone and to bf16, and
 *   the generated GEMM of every recipe that has one next to bf16 cuBLASLt;
 * - JIT: cold NVRTC compile, disk-cache load in a fresh context, in-memory lookup per kernel (a
 *   GEMM module's two instances apart).
 * Times: CUDA events around batches of back-to-back launches (the per-launch time is the batch
 * time over its size; the median over batches is reported), after a warm-up, with inputs rotated
 * between sets that together exceed twice the L2 cache, filled with random data.
 * Without a GPU it says so and exits 0. scripts/bench_peers.py and scripts/bench_report.py add
 * the PyTorch peers, the plot and the tables of docs/bench.md. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tool_file.h"

#define COPY_BYTES (1ull << 30)

/* GEMMs as M, K, N (y[M, N] = x[M, K] W[N, K]^T) of real models' layers, and the TN GEMMs of
 * their backward (numerics 6): dgrad M, N -> K and wgrad N, M -> K (8192^3's are its own). */
static const bench_gemm_case gemm_shapes_full[] = {
    {{8192, 8192, 8192}, "fprop, dgrad, wgrad", QF_GEMM_FPROP},
    {{16384, 4096, 14336}, "fprop", QF_GEMM_FPROP},
    {{16384, 14336, 4096}, "dgrad of 16384 x 4096 -> 14336", QF_GEMM_DGRAD},
    {{14336, 16384, 4096}, "wgrad of 16384 x 4096 -> 14336", QF_GEMM_WGRAD},
    {{2048, 4096, 14336}, "fprop", QF_GEMM_FPROP},
    {{2048, 14336, 4096}, "dgrad of 2048 x 4096 -> 14336", QF_GEMM_DGRAD},
    {{14336, 2048, 4096}, "wgrad of 2048 x 4096 -> 14336", QF_GEMM_WGRAD},
};
static const bench_gemm_case gemm_shapes_quick[] = {
    {{8192, 8192, 8192}, "fprop, dgrad, wgrad", QF_GEMM_FPROP}};

/* ==================================================================== ceiling: D2D copy */

typedef struct copy_run {
    void *src, *dst;
} copy_run;

static void copy_launch(void *arg, int rot) {
    (void)rot; /* 1 GiB is far beyond L2: no rotation needed */
    copy_run *c = arg;
    CUDA_OR_DIE(cudaMemcpyAsync(c->dst, c->src, COPY_BYTES, cudaMemcpyDeviceToDevice, NULL));
}

static void bench_copy(bench *b) {
    void *h = bench_host_random(QF_DTYPE_BF16, (int64_t)(COPY_BYTES / 2), 7);
    copy_run c = {bench_dev_upload(h, COPY_BYTES), NULL};
    free(h);
    CUDA_OR_DIE(cudaMalloc(&c.dst, COPY_BYTES));
    row r = bench_row_new("ceiling", "", "copy_d2d");
    r.bytes = 2.0 * COPY_BYTES;
    r.us = bench_time_launches(b, copy_launch, &c, 1);
    b->copy_tbps = r.bytes / (r.us * 1e6);
    r.ratio_copy = 1.0;
    snprintf(r.note, sizeof r.note, "cudaMemcpyAsync D2D of 1 GiB; bytes = read + written");
    bench_row_emit(b, &r);
    cudaFree(c.src), cudaFree(c.dst);
}

/* ==================================================================== main */

static void usage(FILE *f) {
    fprintf(f, "usage: qfuse-bench [--csv FILE] [--quick] [--iters N] [--batch N]\n"
               "                   [--recipe NAME]... [--dtype bf16|fp16|fp32] [--section S]...\n"
               "                   [--shape MxKxN] [--gemm-data quantized|bytes]\n"
               "Times every qfuse op at the shapes of real models' layers against ceilings\n"
               "measured in the same run (D2D copy, cuBLASLt bf16 and FP8 GEMMs), the\n"
               "generated MXFP8 and NVFP4 GEMMs next to bf16 cuBLASLt, and reports\n"
               "bytes, FLOPs, median microseconds, TB/s, TFLOP/s and the ratios; then the JIT:\n"
               "cold NVRTC compile, disk-cache load and in-memory lookup of every kernel of the\n"
               "first selected recipe and of each selected recipe's GEMM module (its GEMM kernel\n"
               "and its staged instance apart: outputs \"staged\"); then one LayerNorm + MLP\n"
               "training step (SwiGLU, tokens 16384, hidden 4096, ffn 14336) per recipe, split\n"
               "into its GEMM stages and the rest.\n"
               "  --csv FILE  CSV output (default out/bench/qfuse.csv)\n"
               "  --quick     one shape per section, 10 iterations (smoke run)\n"
               "  --iters N   timed batches per row, median reported (default 50; 1..1000000)\n"
               "  --batch N   back-to-back launches per timed batch (default 10; 1..1000000)\n"
               "  --recipe R  only recipe R (repeatable; default: every recipe)\n"
               "  --dtype D   only the quant section's rows with x in dtype D\n"
               "  --section S only section S: quant (norm + quantize), gemm, jit or step\n"
               "              (repeatable; default: all; the copy ceiling always runs;\n"
               "              --dtype, --shape and --gemm-data need their section in it)\n"
               "  --shape S   only the GEMM rows of shape S = MxKxN, one of the GEMM section's\n"
               "              (8192x8192x8192, 16384x4096x14336, ...; for profiling one GEMM)\n"
               "  --gemm-data D  operands of the block-scaled GEMM rows (MXFP8, NVFP4,\n"
               "              fp8_block): quantized (default: the recipe's own quantizers applied\n"
               "              to N(0, 1) data, in each operand's role) or bytes (random data\n"
               "              bytes, every block scale 1)\n"
               "  --help, -h  this text\n"
               "CSV columns: kind,recipe,op,norm,dtype,outputs,M,K,N,bytes,flops,us_median,tbps,\n"
               "tflops,ratio_copy,ratio_cublaslt,speedup_eager,speedup_compile,note (the speedups\n"
               "are filled by scripts/bench_report.py). Without a GPU it exits 0.\n"
               "Exit status: 0 success, 1 failure, 2 bad usage.\n");
}

/* --iters and --batch: a count in 1..1000000 into *out; 0, or -1 with a message. */
static int parse_count(const char *opt, const char *v, int *out) {
    long long n;
    if (tool_count_arg(opt, v, 1, 1000000, &n) < 0)
        return -1;
    *out = (int)n;
    return 0;
}

/* --dtype: the qf_dtype of bf16, fp16 or fp32, or -1 with a message. */
static int parse_dtype(const char *v) {
    for (size_t d = 0; d < BENCH_N_X_DTYPES; d++)
        if (strcmp(v, qf_dtype_name(bench_x_dtypes[d])) == 0)
            return (int)bench_x_dtypes[d];
    fprintf(stderr, "qfuse-bench: --dtype '%s': expected bf16, fp16 or fp32\n", v);
    tool_usage_hint();
    return -1;
}

/* --section: adds quant, gemm, jit or step to *mask; 0, or -1 with a message. */
static int parse_section(const char *v, unsigned *mask) {
    static const char *const names[] = {"quant", "gemm", "jit", "step"};
    static const unsigned bits[] = {SEC_QUANT, SEC_GEMM, SEC_JIT, SEC_STEP};
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0) {
            *mask |= bits[i];
            return 0;
        }
    fprintf(stderr, "qfuse-bench: --section '%s': expected quant, gemm, jit or step\n", v);
    tool_usage_hint();
    return -1;
}

/* --gemm-data: quantized or bytes into o->gemm_bytes; 0, or -1 with a message. */
static int parse_gemm_data(const char *v, bench_opts *o) {
    if (strcmp(v, "quantized") == 0 || strcmp(v, "bytes") == 0) {
        o->gemm_bytes = v[0] == 'b';
        return 0;
    }
    fprintf(stderr, "qfuse-bench: --gemm-data '%s': expected quantized or bytes\n", v);
    tool_usage_hint();
    return -1;
}

/* --shape MxKxN: one of gemm_shapes_full, into o->shape; 0, or -1 with a message. */
static int parse_shape(const char *v, bench_opts *o) {
    long long d[3];
    const char *p = v;
    for (int i = 0; i < 3; i++) { /* M, K, N: digits up to the next 'x' (the last, to the end) */
        const char *x = i < 2 ? strchr(p, 'x') : p + strlen(p);
        if (!x || tool_count_parse(p, (size_t)(x - p), 1, 1LL << 40, &d[i]) < 0) {
            fprintf(stderr, "qfuse-bench: --shape '%s': expected MxKxN, three integers joined by "
                    "'x' (e.g. 8192x8192x8192)\n", v);
            tool_usage_hint();
            return -1;
        }
        p = x + 1;
    }
    const long long m = d[0], k = d[1], n = d[2];
    for (size_t i = 0; i < sizeof gemm_shapes_full / sizeof gemm_shapes_full[0]; i++)
        if (gemm_shapes_full[i].s[0] == m && gemm_shapes_full[i].s[1] == k &&
            gemm_shapes_full[i].s[2] == n) {
            o->shape = (int)i + 1;
            return 0;
        }
    fprintf(stderr, "qfuse-bench: --shape '%s' is not one of the GEMM section's shapes (MxKxN):",
            v);
    for (size_t i = 0; i < sizeof gemm_shapes_full / sizeof gemm_shapes_full[0]; i++)
        fprintf(stderr, " %lldx%lldx%lld", (long long)gemm_shapes_full[i].s[0],
                (long long)gemm_shapes_full[i].s[1], (long long)gemm_shapes_full[i].s[2]);
    fprintf(stderr, "\n");
    tool_usage_hint();
    return -1;
}

static int parse_args(int argc, char **argv, bench_opts *o) {
    static const struct option longs[] = {{"csv", required_argument, 0, 'c'},
                                          {"quick", no_argument, 0, 'q'},
                                          {"iters", required_argument, 0, 'i'},
                                          {"batch", required_argument, 0, 'b'},
                                          {"recipe", required_argument, 0, 'r'},
                                          {"dtype", required_argument, 0, 'd'},
                                          {"section", required_argument, 0, 's'},
                                          {"shape", required_argument, 0, 'S'},
                                          {"gemm-data", required_argument, 0, 'g'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    *o = (bench_opts){.csv = "out/bench/qfuse.csv", .iters = 0, .batch = 10, .dtype = -1};
    argv[0] = (char *)"qfuse-bench"; /* getopt's messages name the program, not its path */
    int c;
    unsigned seen = 0;
    int gemm_data_given = 0;
    while ((c = tool_getopt(argc, argv, longs)) != -1) {
        if (tool_once(longs, "rsqh", c, &seen) < 0) /* --recipe and --section add up */
            return 2;
        gemm_data_given |= c == 'g';
        if (c == 'c' && !(o->csv = tool_path_arg("--csv", optarg)))
            return 2;
        else if (c == 'q')
            o->quick = 1;
        else if (c == 'i' && parse_count("--iters", optarg, &o->iters) < 0)
            return 2;
        else if (c == 'b' && parse_count("--batch", optarg, &o->batch) < 0)
            return 2;
        else if (c == 'r' && tool_recipes_add(&o->recipes, optarg) < 0)
            return 2;
        else if (c == 'd' && (o->dtype = parse_dtype(optarg)) < 0)
            return 2;
        else if (c == 's' && parse_section(optarg, &o->sections) < 0)
            return 2;
        else if (c == 'S' && parse_shape(optarg, o) < 0)
            return 2;
        else if (c == 'g' && parse_gemm_data(optarg, o) < 0)
            return 2;
        else if (c == 'c' || c == 'i' || c == 'b' || c == 'r' || c == 'd' || c == 's' ||
                 c == 'S' || c == 'g')
            continue;
        else
            return tool_usage_exit(c == 'h', usage);
    }
    if (!o->iters)
        o->iters = o->quick ? 10 : 50;
    /* the options that act on one section's rows, refused where --section leaves that out */
    const struct {
        int given;
        unsigned sec;
        const char *opt, *rows, *sec_name;
    } picks[] = {{o->shape != 0, SEC_GEMM, "--shape", "GEMM", "gemm"},
                 {gemm_data_given, SEC_GEMM, "--gemm-data", "GEMM", "gemm"},
                 {o->dtype >= 0, SEC_QUANT, "--dtype", "norm + quantize", "quant"}};
    for (size_t i = 0; i < sizeof picks / sizeof picks[0]; i++)
        if (picks[i].given && o->sections && !(o->sections & picks[i].sec)) {
            fprintf(stderr, "qfuse-bench: %s acts on the %s rows; the sections asked (--section) "
                    "have none: add --section %s\n", picks[i].opt, picks[i].rows,
                    picks[i].sec_name);
            tool_usage_hint();
            return 2;
        }
    if (!o->sections)
        o->sections = SEC_ALL;
    if (optind != argc) {
        fprintf(stderr, "qfuse-bench: unexpected argument '%s'\n", argv[optind]);
        tool_usage_hint();
        return 2;
    }
    return -1;
}

/* The run; main adds stdout's write errors. Returns the exit status. */
static int bench_main(int argc, char **argv) {
    bench b = {0};
    int rc = parse_args(argc, argv, &b.o);
    if (rc >= 0)
        return rc;
    if (tool_out_check(b.o.csv) != 0) { /* a bad --csv fails before any work, GPU or not */
        fprintf(stderr, "qfuse-bench: --csv %s: %s\n", b.o.csv, tool_out_why(b.o.csv, errno));
        tool_usage_hint();
        return 2;
    }
    qf_status s = qf_ctx_init(&b.ctx, 0);
    if (s == QF_ERR_NO_DEVICE) {
        printf("no GPU: nothing to benchmark (%s)\n", qf_last_error());
        return 0;
    }
    QF_OR_DIE(s);
    bench_open(&b);
    bench_print_table_header();
    bench_copy(&b);
    if (b.o.sections & SEC_QUANT)
        bench_quantizers(&b);
    const bench_gemm_case *gs = b.o.shape   ? &gemm_shapes_full[b.o.shape - 1]
                                : b.o.quick ? gemm_shapes_quick
                                            : gemm_shapes_full;
    int ng = b.o.shape || b.o.quick ? 1
                                    : (int)(sizeof gemm_shapes_full / sizeof gemm_shapes_full[0]);
    for (int i = 0; (b.o.sections & SEC_GEMM) && i < ng; i++)
        bench_gemm_shape(&b, &gs[i]);
    if (b.o.sections & SEC_JIT)
        bench_jit(&b);
    if (b.o.sections & SEC_STEP)
        bench_steps(&b);
    bench_close(&b);
    qf_ctx_free(b.ctx);
    printf("\nwrote %s\n", b.o.csv);
    return 0;
}

int main(int argc, char **argv) {
    tool_std_fds();
    return tool_stdout_status("qfuse-bench", bench_main(argc, argv));
}
