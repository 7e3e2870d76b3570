/* bench_util.c: qfuse-bench's shared parts: random inputs rotated on the device, CUDA-event
 * timing, result rows (table and CSV with its header), output buffers from the fake shapes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "tool_file.h"
#include "jit_compile.h"
#include "ref.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n-1] (sorts v). */
double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ==================================================================== random inputs */

/* Element i of a random array: N(0, 1) for float dtypes, E4M3 bytes of U[-200, 200] (never NaN). */
static void store_random(void *p, qf_dtype dt, int64_t i, uint64_t *s) {
    switch (dt) {
    case QF_DTYPE_FP32:
        ((float *)p)[i] = rng_normal(s);
        break;
    case QF_DTYPE_FP16:
        ((uint16_t *)p)[i] = qf_float_to_fp16(rng_normal(s));
        break;
    case QF_DTYPE_BF16:
        ((uint16_t *)p)[i] = qf_float_to_bf16(rng_normal(s));
        break;
    default:
        ((uint8_t *)p)[i] = qf_e4m3_from_float_ref((float)(400.0 * rng_uniform(s) - 200.0));
        break;
    }
}

/* n random elements of dt in a new host array. Deterministic for a seed. */
void *bench_host_random(qf_dtype dt, int64_t n, uint64_t seed) {
    void *p = tool_xmalloc((size_t)n * qf_dtype_size(dt));
    const int64_t chunk = 1 << 14;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < (n + chunk - 1) / chunk; c++) {
        uint64_t s = seed ^ ((uint64_t)c * 0xD1B54A32D192ED03ull);
        int64_t end = (c + 1) * chunk < n ? (c + 1) * chunk : n;
        for (int64_t i = c * chunk; i < end; i++)
            store_random(p, dt, i, &s);
    }
    return p;
}

/* A device copy of h rotated left by about `part` / `parts` of its length (256-byte aligned), so
 * that rotated sets share the statistics but not the contents. */
void *bench_dev_rotated(const void *h, size_t bytes, int part, int parts) {
    void *d;
    size_t shift = (bytes / (size_t)parts * (size_t)part) & ~(size_t)255;
    CUDA_OR_DIE(cudaMalloc(&d, bytes));
    CUDA_OR_DIE(cudaMemcpy(d, (const char *)h + shift, bytes - shift, cudaMemcpyHostToDevice));
    if (shift)
        CUDA_OR_DIE(cudaMemcpy((char *)d + bytes - shift, h, shift, cudaMemcpyHostToDevice));
    return d;
}

void *bench_dev_upload(const void *h, size_t bytes) {
    return bench_dev_rotated(h, bytes, 0, 1);
}

/* How many sets of set_bytes to rotate between so that together they exceed twice the L2. */
int bench_rotation_count(const bench *b, double set_bytes) {
    int n = (int)(2.0 * (double)b->l2 / set_bytes) + 1;
    return n < 2 ? 2 : n > MAX_ROT ? MAX_ROT : n;
}

/* ==================================================================== timing */

void bench_time_rounds(const bench *b, bench_timed *t, int n) {
    cudaEvent_t e0, e1;
    double *us = tool_xmalloc((size_t)n * (size_t)b->o.iters * sizeof *us);
    CUDA_OR_DIE(cudaEventCreate(&e0));
    CUDA_OR_DIE(cudaEventCreate(&e1));
    long long k = 0; /* launches so far of each t[s]: its operand set is k % n_rot (64-bit:
                      * --iters x --batch may pass 2^31) */
    for (int i = 0; i < WARMUP; i++, k++)
        for (int s = 0; s < n; s++)
            t[s].fn(t[s].arg, (int)(k % t[s].n_rot));
    CUDA_OR_DIE(cudaDeviceSynchronize());
    for (int it = 0; it < b->o.iters; it++, k += b->o.batch)
        for (int s = 0; s < n; s++) {
            CUDA_OR_DIE(cudaEventRecord(e0, NULL));
            for (int j = 0; j < b->o.batch; j++)
                t[s].fn(t[s].arg, (int)((k + j) % t[s].n_rot));
            CUDA_OR_DIE(cudaEventRecord(e1, NULL));
            CUDA_OR_DIE(cudaEventSynchronize(e1));
            float ms = 0.0f;
            CUDA_OR_DIE(cudaEventElapsedTime(&ms, e0, e1));
            us[s * b->o.iters + it] = 1e3 * ms / b->o.batch;
        }
    CUDA_OR_DIE(cudaGetLastError());
    for (int s = 0; s < n; s++)
        t[s].us = bench_median(us + s * b->o.iters, b->o.iters);
    free(us);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
}

double bench_time_launches(const bench *b, launch_fn fn, void *arg, int n_rot) {
    bench_timed t = {fn, arg, n_rot, 0.0};
    bench_time_rounds(b, &t, 1);
    return t.us;
}

/* ==================================================================== rows: table and CSV */

row bench_row_new(const char *kind, const char *recipe, const char *op) {
    row r = {.kind = kind, .recipe = recipe, .op = op, .norm = "", .dtype = "", .outputs = "",
             .bytes = NAN, .flops = NAN, .us = NAN, .ratio_copy = NAN, .ratio_lt = NAN};
    return r;
}

static void csv_num(FILE *f, double v, const char *fmt) {
    fputc(',', f);
    if (!isnan(v))
        fprintf(f, fmt, v);
}

static void csv_dim(FILE *f, int64_t v) {
    if (v > 0)
        fprintf(f, ",%lld", (long long)v);
    else
        fputc(',', f);
}

static void row_csv(FILE *f, const row *r, double tbps, double tflops) {
    fprintf(f, "%s,%s,%s,%s,%s,%s", r->kind, r->recipe, r->op, r->norm, r->dtype, r->outputs);
    csv_dim(f, r->M), csv_dim(f, r->K), csv_dim(f, r->N);
    csv_num(f, r->bytes, "%.0f"), csv_num(f, r->flops, "%.0f"), csv_num(f, r->us, "%.3f");
    csv_num(f, tbps, "%.4f"), csv_num(f, tflops, "%.2f");
    csv_num(f, r->ratio_copy, "%.4f"), csv_num(f, r->ratio_lt, "%.4f");
    /* speedup_eager, speedup_compile: bench_report.py; the note quoted (notes hold no '"') */
    fprintf(f, ",,,\"%s\"\n", r->note);
    fflush(f);
}

static void print_field(const char *fmt, double v) {
    if (isnan(v))
        printf(" %9s |", "");
    else
        printf(fmt, v);
}

/* Prints r as a table line and appends it to the CSV. */
void bench_row_emit(bench *b, const row *r) {
    double tbps = r->bytes / (r->us * 1e6), tflops = r->flops / (r->us * 1e6);
    char shape[48];
    int n = snprintf(shape, sizeof shape, "%lld x %lld", (long long)r->M, (long long)r->K);
    if (r->N > 0)
        snprintf(shape + n, sizeof shape - (size_t)n, " -> %lld", (long long)r->N);
    printf("| %-10s | %-12s | %-34s | %-9s | %-5s | %-18s | %-22s |", r->kind, r->recipe, r->op,
           r->norm, r->dtype, r->outputs, r->M > 0 ? shape : "");
    print_field(" %9.1f |", r->us), print_field(" %9.3f |", tbps);
    print_field(" %9.1f |", tflops), print_field(" %9.3f |", r->ratio_copy);
    print_field(" %9.3f |", r->ratio_lt);
    printf(" %s\n", r->note);
    fflush(stdout);
    row_csv(b->csv, r, tbps, tflops);
}

void bench_print_table_header(void) {
    printf("\n| %-10s | %-12s | %-34s | %-9s | %-5s | %-18s | %-22s | %9s | %9s | %9s | %9s | %9s "
           "| %s\n", "kind", "recipe", "op", "norm", "dtype", "outputs", "M x K (-> N)", "us",
           "TB/s", "TFLOP/s", "x copy", "x cuBLASLt", "note");
}

/* ==================================================================== header and CSV file */

/* The CSV's comment lines: `# gpu=..., cuda=..., date=...` (read by bench_report.py). */
static void write_header(bench *b, const struct cudaDeviceProp *p) {
    int rt = 0, drv = 0, nv_major = 0, nv_minor = 0;
    cudaRuntimeGetVersion(&rt), cudaDriverGetVersion(&drv);
    qf_jit_nvrtc_version(&nv_major, &nv_minor);
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    char info[512];
    snprintf(info, sizeof info, "gpu=%s, cuda=%d.%d, driver=%d.%d, cublaslt=%zu, nvrtc=%d.%d, "
             "date=%s", p->name, rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10,
             cublasLtGetVersion(), nv_major, nv_minor, date);
    fprintf(b->csv, "# %s\n", info);
    fprintf(b->csv, "# sm=%d%d, sms=%d, l2_bytes=%zu, iters=%d, batch=%d, warmup=%d\n", p->major,
            p->minor, p->multiProcessorCount, b->l2, b->o.iters, b->o.batch, WARMUP);
    fprintf(b->csv, "# recipes=");
    for (int i = 0; i < qf_recipe_count; i++)
        fprintf(b->csv, "%s%s:%s", i ? ";" : "", qf_recipes[i].name,
                qf_family_name(qf_recipes[i].family));
    fprintf(b->csv, "\n# timing=median over iters batches of batch back-to-back launches between "
            "two CUDA events / batch; inputs rotated between sets exceeding 2x L2; random data\n");
    fprintf(b->csv, "kind,recipe,op,norm,dtype,outputs,M,K,N,bytes,flops,us_median,tbps,tflops,"
            "ratio_copy,ratio_cublaslt,speedup_eager,speedup_compile,note\n");
    printf("%s\nsm_%d%d, %d SMs, L2 %.1f MB; %s\n", info, p->major, p->minor,
           p->multiProcessorCount, b->l2 / 1e6, "times: median over batches of back-to-back "
           "launches between two CUDA events, divided by the batch size");
    printf("iters %d x batch %d after %d warm-up launches; CSV %s\n", b->o.iters, b->o.batch,
           WARMUP, b->o.csv);
}

void bench_open(bench *b) {
    struct cudaDeviceProp p;
    CUDA_OR_DIE(cudaGetDeviceProperties(&p, 0));
    b->l2 = (size_t)p.l2CacheSize;
    if (tool_make_parents(b->o.csv) != 0)
        fprintf(stderr, "qfuse-bench: warning: cannot create the folders of %s: %s\n", b->o.csv,
                strerror(errno));
    if (!(b->csv = fopen(b->o.csv, "w"))) {
        fprintf(stderr, "qfuse-bench: cannot write %s: %s\n", b->o.csv, strerror(errno));
        exit(1);
    }
    LT_OR_DIE(cublasLtCreate(&b->lt));
    CUDA_OR_DIE(cudaMalloc(&b->lt_ws, LT_WORKSPACE));
    write_header(b, &p);
}

void bench_close(bench *b) {
    fclose(b->csv);
    cudaFree(b->lt_ws);
    cublasLtDestroy(b->lt);
}

qf_tensor bench_tensor_2d(void *d, qf_dtype dt, int64_t r, int64_t c) {
    qf_tensor t = {.data = d, .dtype = dt, .ndim = 2, .dims = {r, c}};
    return t;
}

qf_tensor bench_tensor_1d(void *d, qf_dtype dt, int64_t n) {
    qf_tensor t = {.data = d, .dtype = dt, .ndim = 1, .dims = {n}};
    return t;
}

qf_shape_query bench_operand_query(qf_role role, qf_copy c, int64_t rows, int64_t K) {
    const int col = c == QF_COPY_COLUMNWISE;
    return (qf_shape_query){.op = QF_OP_QUANTIZE, .role = role,
                            .outputs = col ? QF_OUT_COLUMNWISE : QF_OUT_ROWWISE,
                            .M = col ? K : rows, .K = col ? rows : K};
}

void bench_out_alloc(out_set *o, const qf_recipe *r, const qf_shape_query *q) {
    o->n = r->shapes(q, o->sh, MAX_OUT);
    if (o->n < 0) {
        fprintf(stderr, "qfuse-bench: shape function of %s rejected op %d M=%lld K=%lld\n",
                r->name, (int)q->op, (long long)q->M, (long long)q->K);
        exit(1);
    }
    for (int i = 0; i < o->n; i++) {
        CUDA_OR_DIE(cudaMalloc(&o->buf[i], o->sh[i].bytes));
        CUDA_OR_DIE(cudaMemset(o->buf[i], 0, o->sh[i].bytes));
    }
}

void bench_out_free(out_set *o) {
    for (int i = 0; i < o->n; i++)
        cudaFree(o->buf[i]);
    o->n = 0;
}

/* The output called name as a tensor; data NULL when the op does not produce it. */
qf_tensor bench_out_tensor(const out_set *o, const char *name) {
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->sh[i].name, name) == 0) {
            qf_tensor t = {.data = o->buf[i], .dtype = o->sh[i].dtype, .ndim = o->sh[i].ndim};
            memcpy(t.dims, o->sh[i].dims, sizeof o->sh[i].dims);
            return t;
        }
    qf_tensor none = {0};
    return none;
}

const char *bench_norm_name(qf_norm n) {
    return n == QF_NORM_LAYERNORM ? "layernorm" : n == QF_NORM_RMSNORM ? "rmsnorm" : "none";
}


/* A quantized tensor whose slots are the buffers of o, matched by fake-shape name (the "y" of a
 * GEMM names no slot and is left out). */
qf_quantized bench_out_quantized(const out_set *o, qf_scale_layout layout) {
    qf_quantized q = {.layout = layout};
    for (int i = 0; i < o->n; i++) {
        int slot = qf_slot_from_name(o->sh[i].name);
        if (slot >= 0)
            q.t[slot] = bench_out_tensor(o, o->sh[i].name);
    }
    return q;
}

int bench_first_recipe(const bench *b) {
    int ri = 0;
    while (ri < qf_recipe_count &&
           (!tool_recipe_selected(&b->o.recipes, ri) || !tool_recipe_quantizes(ri)))
        ri++;
    return ri;
}
