/* test_backend_conformance.c — every op of every backend against the CPU scalar reference.
 *
 * Backends are named in g_backends ("cpu:<isa>" forces a CPU kernel level through
 * CINFER_CPU_ISA; a future "cuda" joins by adding its name). Names this build or machine
 * cannot open are skipped with a note. For each op: seeded random inputs, the candidate's
 * result compared with the scalar reference under a stated tolerance; batch invariance
 * (n = 1 / 7 / 64 rows, 1 / 4 threads) compared bit for bit; and known-answer checks of
 * the scalar reference itself against naive double-precision loops.
 * CUDA (when a GPU is present; otherwise a SKIP line): matmul computes in float with the
 * exact dequantized weights, so it is checked against double precision (1e-5 of |w|.|x|)
 * and is bit-identical for 1..8 rows; 64-row steps go through cuBLAS with activations
 * rounded to 16 bits (5e-3 of |w|.|x|, F32 weights 1e-5). Attention steps of more than 64
 * tokens run without context splits and are compared within 2e-5 instead of bit for bit.
 */
#include "harness.h"

#include <limits.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/be_sample.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/quant.h"
#ifdef CINFER_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif
#include "engine/sampler.h"
#include "util/half.h"

static const char *const g_backends[] = {"cpu:scalar", "cpu:avx2", "cpu:avx512", "cuda"};
enum { N_BACKENDS = sizeof g_backends / sizeof g_backends[0] };
static int is_cpu(int bi) { return strncmp(g_backends[bi], "cpu", 3) == 0; }
static int is_cpu_be(const struct be *b) { return strcmp(b->ops->name, "cpu") == 0; }

static const int g_wtypes[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0,
                               DT_Q5_1, DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K};
enum { N_WTYPES = sizeof g_wtypes / sizeof g_wtypes[0] };

/* ---- helpers ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static void rng_seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 1; }
static uint64_t rng_u64(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rng_f(void) { return (float)((rng_u64() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
static void fill_f(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_f() * scale;
}

/* Opens backend spec ("cpu:avx2", "cuda") with n threads; NULL when unavailable. */
static struct be *open_be(const char *spec, int threads)
{
    struct be_config cfg = {.n_threads = threads};
    struct cerr e = {0};
    if (strcmp(spec, "cuda") == 0) {
        struct be *b = be_new(spec, &cfg, &e);
        if (!b && threads == 1)
            fprintf(stderr, "SKIP cuda: %s\n", e.msg);
        return b;
    }
    if (strncmp(spec, "cpu:", 4) == 0) {
        if (!be_cpu_isa_supported(spec + 4))
            return NULL;
        setenv("CINFER_CPU_ISA", spec + 4, 1);
        struct be *b = be_new("cpu", &cfg, &e);
        unsetenv("CINFER_CPU_ISA");
        return b;
    }
    return be_new(spec, &cfg, &e);
}

/* Backend buffer holding a copy of host data (n bytes); a failure fails the test. */
static void *dev_from(struct be *b, const void *host, size_t n)
{
    struct cerr e = {0};
    void *p = b->ops->alloc(b, n);
    CHECK_MSG(p != NULL, "backend alloc of %zu bytes failed", n);
    if (p && host && b->ops->upload(b, p, host, n, &e))
        CHECK_MSG(0, "backend upload failed: %s", e.msg);
    return p;
}

/* Downloads n bytes; a failed download or a latched error of an earlier op (say, a launch
 * the device refused) fails the test with the backend's message, not as wrong values. */
static void host_from(struct be *b, void *host, const void *dev, size_t n)
{
    struct cerr e = {0};
    int rc = b->ops->download(b, host, dev, n, &e);
    if (!rc)
        rc = b->ops->sync(b, &e);
    CHECK_MSG(rc == 0, "backend download or sync failed: %s", e.msg);
}

/* Random weights of dtype dt, (rows, k): random payload bytes with sane fp16 scales. */
static void *make_weights(int dt, int rows, int k, size_t *nbytes)
{
    size_t rb = dtype_row_bytes(dt, k), n = rb * (size_t)rows;
    uint8_t *w = malloc(n);
    *nbytes = n;
    if (dt == DT_F32) {
        fill_f((float *)w, (int64_t)rows * k, 1.0f);
        return w;
    }
    if (dt == DT_F16 || dt == DT_BF16) {
        uint16_t *h = (uint16_t *)w;
        for (int64_t i = 0; i < (int64_t)rows * k; i++)
            h[i] = dt == DT_F16 ? half_f32_to_f16(rng_f()) : half_f32_to_bf16(rng_f());
        return w;
    }
    for (size_t i = 0; i < n; i++)
        w[i] = (uint8_t)rng_u64();
    /* byte offsets of the fp16 scale fields in each block */
    int offs[2] = {-1, -1};
    switch (dt) {
    case DT_Q4_1: case DT_Q5_1: case DT_Q4_K: case DT_Q5_K: offs[0] = 0, offs[1] = 2; break;
    case DT_Q2_K: offs[0] = 80, offs[1] = 82; break;
    case DT_Q3_K: offs[0] = 108; break;
    case DT_Q6_K: offs[0] = 208; break;
    default: offs[0] = 0;
    }
    size_t bb = dtype_block_bytes(dt);
    float s = dtype_block_elems(dt) == 32 ? 0.1f : 0.01f;
    for (size_t b = 0; b < n / bb; b++)
        for (int j = 0; j < 2; j++)
            if (offs[j] >= 0) {
                uint16_t h = half_f32_to_f16(rng_f() * s);
                memcpy(w + b * bb + offs[j], &h, 2);
            }
    return w;
}

/* |w| . |x| per output element (from the scalar dequantization), for tolerances, and the
 * exact w . x in double when exact is non-NULL. */
static void abs_dot2(int dt, const void *w, int rows, int k, const float *x, int n, double *mag,
                     double *exact)
{
    float *row = malloc(sizeof(float) * (size_t)k);
    size_t rb = dtype_row_bytes(dt, k);
    for (int j = 0; j < rows; j++) {
        quant_dequant_row(dt, (const char *)w + rb * (size_t)j, row, k);
        for (int i = 0; i < n; i++) {
            double s = 0, ex = 0;
            for (int c = 0; c < k; c++) {
                s += fabs((double)row[c] * x[(int64_t)i * k + c]);
                ex += (double)row[c] * x[(int64_t)i * k + c];
            }
            mag[(int64_t)i * rows + j] = s;
            if (exact)
                exact[(int64_t)i * rows + j] = ex;
        }
    }
    free(row);
}

/* Elements of y (n_el) off the exact result by more than rel * mag + 1e-6; prints a few. */
static int count_off(const char *who, int dt, const float *y, const double *exact,
                     const double *mag, int n_el, double rel)
{
    int bad = 0;
    for (int i = 0; i < n_el; i++)
        if (!(fabs((double)y[i] - exact[i]) <= rel * mag[i] + 1e-6) && bad++ < 3)
            fprintf(stderr, "  %s %s[%d]: %.9g vs exact %.9g\n", who, dtype_name(dt), i, y[i],
                    exact[i]);
    return bad;
}

/* A device backend's matmul tolerance relative to |w|.|x|: 16-bit weights multiply 16-bit
 * activations (x rounded to the weight's type: 2^-9 relative for BF16), float math else. */
static double dev_tol(int dt) { return dt == DT_F16 || dt == DT_BF16 ? 5e-3 : 1e-5; }

struct bctx {
    struct be *ref; /* cpu:scalar, 1 thread */
    struct be *cand[N_BACKENDS][2]; /* threads 1 and 4 */
};
static struct bctx g;

/* Runs matmul on backend b: y (n, rows) = x (n, k) * w^T. */
static void run_matmul(struct be *b, int dt, const void *w, size_t wbytes, int rows, int k,
                       const float *x, int n, float *y)
{
    struct be_tensor t = {.dtype = dt, .ne = {k, rows, 1, 1}, .nbytes = wbytes, .name = "w"};
    t.data = dev_from(b, w, wbytes);
    void *orig = t.data; /* weight_prepare may replace it (the CPU's repacked copy) */
    struct cerr e = {0};
    CHECK(b->ops->weight_prepare(b, &t, &e) == 0);
    float *dx = dev_from(b, x, sizeof(float) * (size_t)n * k);
    float *dy = dev_from(b, NULL, sizeof(float) * (size_t)n * rows);
    b->ops->matmul(b, dy, dx, n, &t);
    host_from(b, y, dy, sizeof(float) * (size_t)n * rows);
    b->ops->free(b, dx);
    b->ops->free(b, dy);
    if (t.data != orig && is_cpu_be(b))
        b->ops->free(b, orig);
    b->ops->free(b, t.data);
}

/* ---- matmul ---- */

/* Scalar reference vs naive double loops: F32 within 1e-5 relative, quantized types within
 * the bound set by the activation quantization (|err| <= sum |w_i| * amax_block / 254). */
static void test_matmul_known_answer(void)
{
    for (int ti = 0; ti < N_WTYPES; ti++) {
        int dt = g_wtypes[ti], k = 512, rows = 9, n = 3;
        rng_seed(100 + (uint64_t)dt);
        size_t wb;
        void *w = make_weights(dt, rows, k, &wb);
        float *x = malloc(sizeof(float) * (size_t)n * k), *y = malloc(sizeof(float) * (size_t)n * rows);
        float *wf = malloc(sizeof(float) * (size_t)rows * k);
        fill_f(x, (int64_t)n * k, 2.0f);
        for (int j = 0; j < rows; j++)
            quant_dequant_row(dt, (char *)w + dtype_row_bytes(dt, k) * (size_t)j, wf + (int64_t)j * k, k);
        run_matmul(g.ref, dt, w, wb, rows, k, x, n, y);
        int blk = quant_act_kind(dt) == QA_A8 ? 32 : quant_act_kind(dt) == QA_A8K ? 256 : 0;
        int bad = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < rows; j++) {
                double s = 0, mag = 0, qerr = 0;
                for (int c = 0; c < k; c++) {
                    double p = (double)wf[(int64_t)j * k + c] * x[(int64_t)i * k + c];
                    s += p;
                    mag += fabs(p);
                }
                if (blk)
                    for (int b0 = 0; b0 < k; b0 += blk) {
                        double amax = 0, sw = 0;
                        for (int c = b0; c < b0 + blk; c++) {
                            amax = fmax(amax, fabs(x[(int64_t)i * k + c]));
                            sw += fabs(wf[(int64_t)j * k + c]);
                        }
                        qerr += sw * amax / 254.0;
                    }
                double tol = 1e-5 * mag + 1.01 * qerr + 1e-6;
                double got = y[(int64_t)i * rows + j];
                if (!(fabs(got - s) <= tol)) {
                    if (bad++ < 3)
                        fprintf(stderr, "  %s y[%d][%d] = %.9g, exact %.9g (tol %.3g)\n",
                                dtype_name(dt), i, j, got, s, tol);
                }
            }
        CHECK_MSG(bad == 0, "%s: %d elements off", dtype_name(dt), bad);
        free(w), free(x), free(y), free(wf);
    }
}

/* Each candidate vs the scalar reference. Float-weight types: 2e-6 of |w|.|x| (only the
 * summation order differs); quantized types: 1e-6 of |w|.|x| (the integer block sums are
 * exact, only the float accumulation of block terms differs). */
static void test_matmul_vs_ref(void)
{
    for (int ti = 0; ti < N_WTYPES + 3; ti++) {
        /* the last three rounds: float types with row lengths that exercise the tails */
        static const int odd_k[3] = {77, 200, 1000};
        int dt = ti < N_WTYPES ? g_wtypes[ti] : g_wtypes[ti - N_WTYPES];
        int k = ti < N_WTYPES ? 1024 : odd_k[ti - N_WTYPES], rows = 37, n = 5;
        rng_seed(200 + (uint64_t)dt);
        size_t wb;
        void *w = make_weights(dt, rows, k, &wb);
        float *x = malloc(sizeof(float) * (size_t)n * k);
        fill_f(x, (int64_t)n * k, 1.5f);
        float *yr = malloc(sizeof(float) * (size_t)n * rows), *yc = malloc(sizeof(float) * (size_t)n * rows);
        double *mag = malloc(sizeof(double) * (size_t)n * rows);
        double *exact = malloc(sizeof(double) * (size_t)n * rows);
        abs_dot2(dt, w, rows, k, x, n, mag, exact);
        run_matmul(g.ref, dt, w, wb, rows, k, x, n, yr);
        double rel = quant_act_kind(dt) == QA_F32 ? 2e-6 : 1e-6;
        for (int bi = 0; bi < N_BACKENDS; bi++)
            for (int th = 0; th < 2; th++) {
                struct be *b = g.cand[bi][th];
                if (!b)
                    continue;
                run_matmul(b, dt, w, wb, rows, k, x, n, yc);
                if (!is_cpu(bi)) { /* against double (16-bit weights: 16-bit activations) */
                    int off = count_off(g_backends[bi], dt, yc, exact, mag, n * rows, dev_tol(dt));
                    CHECK_MSG(off == 0, "%s %s: %d elements off", g_backends[bi],
                              dtype_name(dt), off);
                    continue;
                }
                int bad = 0;
                for (int i = 0; i < n * rows; i++)
                    if (!(fabs((double)yc[i] - yr[i]) <= rel * mag[i] + 1e-7) && bad++ < 3)
                        fprintf(stderr, "  %s %s[%d]: %.9g vs ref %.9g\n", g_backends[bi],
                                dtype_name(dt), i, yc[i], yr[i]);
                CHECK_MSG(bad == 0, "%s (%d threads) %s: %d elements off", g_backends[bi],
                          th ? 4 : 1, dtype_name(dt), bad);
            }
        free(w), free(x), free(yr), free(yc), free(mag), free(exact);
    }
}

/* The most rows of a step whose rows are bit-identical to one-row steps (be_ops.exact_rows;
 * every step on a backend without it). CUDA: CINFER_CUDA_INVARIANT_ROWS (default 128). */
static int dev_exact(struct be *b, int dt)
{
    return b->ops->exact_rows ? b->ops->exact_rows(b, dt) : INT_MAX;
}

/* A device backend: rows 5..11 as one 7-row step equal (bit for bit) the same rows as
 * 1-row steps; every step is within dev_tol of |w|.|x| of double precision (the 64-row step
 * runs on cuBLAS, the small ones on the skinny tensor-core kernel for 16-bit weights). */
static void matmul_device_batches(int bi, int dt, const void *w, size_t wb, int rows, int k,
                                  const float *x, int n, float *yfull, float *y)
{
    struct be *b = g.cand[bi][0];
    double *mag = malloc(sizeof(double) * (size_t)n * rows);
    double *exact = malloc(sizeof(double) * (size_t)n * rows);
    abs_dot2(dt, w, rows, k, x, n, mag, exact);
    run_matmul(b, dt, w, wb, rows, k, x, n, yfull);
    int off = count_off(g_backends[bi], dt, yfull, exact, mag, n * rows,
                        dt == DT_F32 ? 1e-5 : 5e-3);
    CHECK_MSG(off == 0, "%s %s %d-row step: %d elements off", g_backends[bi], dtype_name(dt), n,
              off);
    run_matmul(b, dt, w, wb, rows, k, x + 5 * k, 7, y); /* rows 5..11 */
    off = count_off(g_backends[bi], dt, y, exact + 5 * rows, mag + 5 * rows, 7 * rows, dev_tol(dt));
    CHECK_MSG(off == 0, "%s %s 7-row step: %d elements off", g_backends[bi], dtype_name(dt), off);
    float *one = malloc(sizeof(float) * (size_t)rows);
    int bad = 0;
    for (int i = 5; i < 12; i++) {
        run_matmul(b, dt, w, wb, rows, k, x + (int64_t)i * k, 1, one);
        bad += memcmp(one, y + (int64_t)(i - 5) * rows, sizeof(float) * (size_t)rows) != 0;
    }
    CHECK_MSG(bad == 0, "%s %s: 1-row and 7-row steps differ", g_backends[bi], dtype_name(dt));
    if (n <= dev_exact(b, dt)) /* the whole step is row invariant too */
        CHECK_MSG(memcmp(y, yfull + 5 * rows, sizeof(float) * 7 * (size_t)rows) == 0,
                  "%s %s: rows of the %d-row step differ from the 7-row step", g_backends[bi],
                  dtype_name(dt), n);
    free(one), free(mag), free(exact);
}

/* Batch invariance: row i of a 64-row matmul equals, bit for bit, the same row computed in
 * a 1-row and a 7-row call, with 1 and 4 threads. */
static void test_matmul_batch_invariance(void)
{
    enum { N = 64 };
    for (int ti = 0; ti < N_WTYPES + 3; ti++) {
        static const int odd_k[3] = {77, 200, 1000};
        int dt = ti < N_WTYPES ? g_wtypes[ti] : g_wtypes[ti - N_WTYPES];
        int k = ti < N_WTYPES ? 512 : odd_k[ti - N_WTYPES], rows = 45;
        rng_seed(300 + (uint64_t)dt);
        size_t wb;
        void *w = make_weights(dt, rows, k, &wb);
        float *x = malloc(sizeof(float) * N * k);
        fill_f(x, (int64_t)N * k, 1.0f);
        float *yfull = malloc(sizeof(float) * N * rows), *y = malloc(sizeof(float) * N * rows);
        for (int bi = 0; bi < N_BACKENDS; bi++) {
            if (!g.cand[bi][0])
                continue;
            if (!is_cpu(bi)) {
                matmul_device_batches(bi, dt, w, wb, rows, k, x, N, yfull, y);
                continue;
            }
            run_matmul(g.cand[bi][1] ? g.cand[bi][1] : g.cand[bi][0], dt, w, wb, rows, k, x, N, yfull);
            for (int th = 0; th < 2; th++) {
                struct be *b = g.cand[bi][th];
                if (!b)
                    continue;
                int bad = 0;
                for (int i = 0; i < N; i += 13) { /* single rows */
                    run_matmul(b, dt, w, wb, rows, k, x + (int64_t)i * k, 1, y);
                    bad += memcmp(y, yfull + (int64_t)i * rows, sizeof(float) * rows) != 0;
                }
                run_matmul(b, dt, w, wb, rows, k, x + 5 * k, 7, y); /* rows 5..11 */
                bad += memcmp(y, yfull + 5 * rows, sizeof(float) * 7 * rows) != 0;
                run_matmul(b, dt, w, wb, rows, k, x, N, y);
                bad += memcmp(y, yfull, sizeof(float) * N * rows) != 0;
                CHECK_MSG(bad == 0, "%s (%d threads) %s: batch/thread dependent result",
                          g_backends[bi], th ? 4 : 1, dtype_name(dt));
            }
        }
        free(w), free(x), free(yfull), free(y);
    }
}

/* ---- get_rows ---- */

/* ---- matmul_fused and argmax (optional ops of device backends) ---- */

/* Tolerance of a device matmul of n rows: 16-bit weights use 16-bit activations at every n,
 * quantized weights beyond the 8-row matvec go through cuBLAS with BF16 activations, F32
 * weights stay in float. Bit-exact batch invariance is promised where one kernel serves
 * every n: 16-bit weights up to 16 rows, the others up to 8. */
static double fused_tol(int dt, int n)
{
    return dt == DT_F32 ? 1e-5 : dt == DT_F16 || dt == DT_BF16 || n > 8 ? 5e-3 : 1e-5;
}
static int fused_invariant(struct be *b, int dt, int n) { return n <= dev_exact(b, dt); }

/* The expected output j of weight i of a fused projection (exact products ex, magnitudes mag
 * of n rows) and its tolerance: GLU silu(g) * u with the errors of g and u scaled by the
 * slopes; else the product plus add (the residual). */
static void fused_expect(int mode, int dt, int n, double *const *ex, double *const *mag, int i,
                         int64_t j, double add, double *want, double *tol)
{
    if (mode == BE_MM_GLU) {
        double gv = ex[0][j], u = ex[1][j], sg = 1.0 / (1.0 + exp(-gv));
        *want = gv * sg * u;
        *tol = fused_tol(dt, n) * (mag[0][j] * 1.1 * fabs(u) + mag[1][j] * fabs(gv * sg)) + 1e-5;
    } else {
        *want = ex[i][j] + add;
        *tol = fused_tol(dt, n) * mag[i][j] + 1e-5;
    }
}

/* One fused case on backend b: weights of dtype dt, n_w weights of rows m[i] and k columns,
 * n rows of x; the result against double (dev_tol), and for n <= 16 each row equals the
 * same row computed alone, bit for bit. Returns the number of failures. */
static int fused_case(struct be *b, const char *who, int dt, int mode, int n_w, const int *m,
                      int k, int n, int with_norm)
{
    size_t wb[3];
    void *w[3];
    struct be_tensor t[3];
    double *mag[3], *ex[3];
    float *x = malloc(sizeof(float) * (size_t)n * k), *xn = malloc(sizeof(float) * (size_t)n * k);
    float *gn = malloc(sizeof(float) * (size_t)k);
    fill_f(x, (int64_t)n * k, 3.0f);
    fill_f(gn, k, 1.0f);
    memcpy(xn, x, sizeof(float) * (size_t)n * k);
    if (with_norm) /* the expected input: rmsnorm(x) * g in double, rounded to float */
        for (int r = 0; r < n; r++) {
            double sq = 0;
            for (int c = 0; c < k; c++)
                sq += (double)x[(int64_t)r * k + c] * x[(int64_t)r * k + c];
            double rs = 1.0 / sqrt(sq / k + 1e-5);
            for (int c = 0; c < k; c++)
                xn[(int64_t)r * k + c] = (float)(x[(int64_t)r * k + c] * rs * gn[c]);
        }
    for (int i = 0; i < n_w; i++) {
        w[i] = make_weights(dt, m[i], k, &wb[i]);
        t[i] = (struct be_tensor){.dtype = dt, .ne = {k, m[i], 1, 1}, .nbytes = wb[i]};
        t[i].data = dev_from(b, w[i], wb[i]);
        mag[i] = malloc(sizeof(double) * (size_t)n * m[i]);
        ex[i] = malloc(sizeof(double) * (size_t)n * m[i]);
        abs_dot2(dt, w[i], m[i], k, xn, n, mag[i], ex[i]);
    }
    float *dg = dev_from(b, gn, sizeof(float) * (size_t)k);
    int n_out = mode == BE_MM_PLAIN ? n_w : 1, bad = 0;
    float *y0 = malloc(sizeof(float) * (size_t)n * m[0]); /* residual for ADD */
    fill_f(y0, (int64_t)n * m[0], 1.0f);
    float *dx = dev_from(b, x, sizeof(float) * (size_t)n * k);
    float *dy[3], *hy[3];
    for (int i = 0; i < n_out; i++) {
        dy[i] = dev_from(b, i == 0 && mode == BE_MM_ADD ? y0 : NULL, sizeof(float) * (size_t)n * m[i]);
        hy[i] = malloc(sizeof(float) * (size_t)n * m[i]);
    }
    struct be_mm f = {.mode = mode, .act = BE_ACT_SILU, .n = n, .x = dx, .n_w = n_w,
                      .norm = with_norm ? dg : NULL, .eps = 1e-5f};
    for (int i = 0; i < n_w; i++)
        f.w[i] = &t[i];
    for (int i = 0; i < n_out; i++)
        f.y[i] = dy[i];
    b->ops->matmul_fused(b, &f);
    for (int i = 0; i < n_out; i++)
        host_from(b, hy[i], dy[i], sizeof(float) * (size_t)n * m[i]);
    /* expected values */
    for (int i = 0; i < n_out; i++) {
        int64_t ne = (int64_t)n * m[i];
        double *want = malloc(sizeof(double) * (size_t)ne), *tol = malloc(sizeof(double) * (size_t)ne);
        for (int64_t j = 0; j < ne; j++) {
            fused_expect(mode, dt, n, ex, mag, i, j, mode == BE_MM_ADD ? y0[j] : 0.0, &want[j],
                         &tol[j]);
            if (!(fabs(hy[i][j] - want[j]) <= tol[j]) && bad++ < 3)
                fprintf(stderr, "  %s %s mode %d n=%d out %d [%lld]: %.7g vs %.7g\n", who,
                        dtype_name(dt), mode, n, i, (long long)j, hy[i][j], want[j]);
        }
        free(want), free(tol);
    }
    /* batch invariance: each row alone */
    if (n > 1 && fused_invariant(b, dt, n)) {
        float *one = malloc(sizeof(float) * (size_t)m[0]);
        for (int r = 0; r < n; r += 3) {
            struct be_mm f1 = f;
            f1.n = 1;
            f1.x = dx + (int64_t)r * k;
            float *d1[3];
            for (int i = 0; i < n_out; i++) {
                d1[i] = dev_from(b, i == 0 && mode == BE_MM_ADD ? y0 + (int64_t)r * m[0] : NULL,
                                 sizeof(float) * (size_t)m[i]);
                f1.y[i] = d1[i];
            }
            b->ops->matmul_fused(b, &f1);
            for (int i = 0; i < n_out; i++) {
                float *h1 = malloc(sizeof(float) * (size_t)m[i]);
                host_from(b, h1, d1[i], sizeof(float) * (size_t)m[i]);
                if (memcmp(h1, hy[i] + (int64_t)r * m[i], sizeof(float) * (size_t)m[i]) && bad++ < 3)
                    fprintf(stderr, "  %s %s mode %d: row %d of %d differs alone\n", who,
                            dtype_name(dt), mode, r, n);
                free(h1);
                b->ops->free(b, d1[i]);
            }
        }
        free(one);
    }
    for (int i = 0; i < n_out; i++)
        b->ops->free(b, dy[i]), free(hy[i]);
    for (int i = 0; i < n_w; i++)
        b->ops->free(b, t[i].data), free(w[i]), free(mag[i]), free(ex[i]);
    b->ops->free(b, dx), b->ops->free(b, dg);
    free(x), free(xn), free(gn), free(y0);
    return bad;
}

static void test_matmul_fused(void)
{
    static const int dts[] = {DT_BF16, DT_F16, DT_F32, DT_Q8_0};
    static const int ns[] = {1, 3, 8, 13, 16, 40};
    int ran = 0;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        struct be *b = g.cand[bi][0];
        if (!b || !b->ops->matmul_fused)
            continue;
        ran = 1;
        for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                int dt = dts[di], n = ns[ni];
                rng_seed(700 + di * 10 + ni);
                const int mq[3] = {64, 32, 48}, mg[2] = {96, 96}, mo[1] = {80};
                int k = ni % 2 ? 1024 : 288; /* 288: a K with a chunk tail for the 4 warps */
                int bad = fused_case(b, g_backends[bi], dt, BE_MM_PLAIN, 3, mq, k, n, 0) +
                          fused_case(b, g_backends[bi], dt, BE_MM_GLU, 2, mg, k, n, 0) +
                          fused_case(b, g_backends[bi], dt, BE_MM_ADD, 1, mo, k, n, 0) +
                          fused_case(b, g_backends[bi], dt, BE_MM_PLAIN, 3, mq, k, n, 1) +
                          fused_case(b, g_backends[bi], dt, BE_MM_GLU, 2, mg, k, n, 1);
                CHECK_MSG(bad == 0, "%s matmul_fused %s n=%d: %d off", g_backends[bi],
                          dtype_name(dt), n, bad);
            }
    }
    /* BF16 shapes at the skinny kernel's edges: few weight tiles and a long K (many chunks
     * per warp, a long accumulation; the ADD takes the CUDA kernel's 32-warp blocks); many tiles (272 of 16 rows, more than the CUDA skinny
     * kernel's SG_WAVE_TILES = 264: 8-warp blocks there), with a single plain weight too */
    static const struct {
        const char *what;
        int seed, k, mq[3], mg[2], mo, plain1, ns[3];
    } sh[] = {{"long K", 760, 8192, {32, 16, 16}, {32, 32}, 48, 0, {1, 5, 16}},
              {"many tiles", 780, 2048, {2048, 1152, 1152}, {4352, 4352}, 4352, 1, {1, 13, 0}}};
    for (size_t si = 0; si < sizeof sh / sizeof sh[0]; si++)
        for (int bi = 0; bi < N_BACKENDS && ran; bi++) {
            struct be *b = g.cand[bi][0];
            if (!b || !b->ops->matmul_fused)
                continue;
            for (size_t ni = 0; ni < 3 && sh[si].ns[ni]; ni++) {
                rng_seed((uint64_t)sh[si].seed + ni);
                const int n = sh[si].ns[ni], k = sh[si].k, *mo = &sh[si].mo;
                const char *who = g_backends[bi];
                int bad = fused_case(b, who, DT_BF16, BE_MM_PLAIN, 3, sh[si].mq, k, n, 1) +
                          fused_case(b, who, DT_BF16, BE_MM_GLU, 2, sh[si].mg, k, n, 1) +
                          fused_case(b, who, DT_BF16, BE_MM_ADD, 1, mo, k, n, 0);
                if (sh[si].plain1)
                    bad += fused_case(b, who, DT_BF16, BE_MM_PLAIN, 1, mo, k, n, 0);
                CHECK_MSG(bad == 0, "%s matmul_fused %s, n=%d: %d off", who, sh[si].what, n, bad);
            }
        }
    if (!ran)
        fprintf(stderr, "SKIP matmul_fused: no backend here has it\n");
}

/* One run of a chained pair (be_mm.chain) over rows of a residual: ADD (x = a, W_o (k, k0))
 * into the residual, then a projection (PLAIN q/k/v or GLU) that norms it. xsrc: the
 * consumer's x (the residual, or a copy of it: the chain must then be ignored). Downloads the
 * residual and the outputs. */
struct chain_setup {
    int mode, n_w, n_out, k0, k;
    const int *m;
    struct be_tensor wo, w[3];
    float *da, *dg, *dg2; /* dg2: other norm weights (a chain promised for them is ignored) */
    const float *other; /* another residual (n, k): a decoy chained ADD's */
};

/* Consumers the backend ran chained so far (CUDA counts them; -1 elsewhere, and when a knob
 * that changes what is chained is set). */
static int64_t chained_count(struct be *b, const char *who)
{
#ifdef CINFER_HAVE_CUDA
    static const char *const knobs[] = {"CINFER_CUDA_FUSE_NORM", "CINFER_CUDA_PRECISE",
                                        "CINFER_CUDA_SKINNY_PRECISE", "CINFER_CUDA_SKINNY_MAX",
                                        "CINFER_CUDA_INVARIANT_ROWS"};
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
        if (getenv(knobs[i]) && *getenv(knobs[i]))
            return -1;
    if (!strcmp(who, "cuda"))
        return be_cuda_chained(b);
#endif
    (void)b, (void)who;
    return -1;
}
static void chain_run(struct be *b, const struct chain_setup *c, const float *res, int r0, int n,
                      int chain, int copy_x, const float *next_g, float *hres, float **hy)
{
    float *dres = dev_from(b, res + (int64_t)r0 * c->k, sizeof(float) * (size_t)n * c->k);
    float *dcopy = copy_x ? dev_from(b, NULL, sizeof(float) * (size_t)n * c->k) : NULL;
    float *dy[3];
    for (int i = 0; i < c->n_out; i++)
        dy[i] = dev_from(b, NULL, sizeof(float) * (size_t)n * c->m[i]);
    struct be_mm add = {.mode = BE_MM_ADD, .n = n, .x = c->da + (int64_t)r0 * c->k0, .n_w = 1,
                        .w = {&c->wo}, .y = {dres}, .chain = chain,
                        .next_norm = chain ? next_g : NULL};
    b->ops->matmul_fused(b, &add);
    if (copy_x) /* the same values in another buffer (scale by 1 is exact) */
        b->ops->scale(b, dcopy, dres, 1.0f, (int64_t)n * c->k);
    struct be_mm f = {.mode = c->mode, .act = BE_ACT_SILU, .n = n, .x = copy_x ? dcopy : dres,
                      .norm = c->dg, .eps = 1e-5f, .n_w = c->n_w, .chain = chain};
    if (copy_x) { /* the chain claimed across another op: the backend must not trust it; the
                   * decoy ADD right before gathers other sums, so trusting it shows */
        struct be_mm a2 = add;
        float *dtmp = dev_from(b, c->other + (int64_t)r0 * c->k, sizeof(float) * (size_t)n * c->k);
        a2.y[0] = dtmp;
        b->ops->matmul_fused(b, &a2); /* a chained ADD right before, into another buffer */
        b->ops->free(b, dtmp);
    }
    for (int i = 0; i < c->n_w; i++)
        f.w[i] = &c->w[i];
    for (int i = 0; i < c->n_out; i++)
        f.y[i] = dy[i];
    b->ops->matmul_fused(b, &f);
    host_from(b, hres, dres, sizeof(float) * (size_t)n * c->k);
    for (int i = 0; i < c->n_out; i++) {
        host_from(b, hy[i], dy[i], sizeof(float) * (size_t)n * c->m[i]);
        b->ops->free(b, dy[i]);
    }
    b->ops->free(b, dres);
    if (dcopy)
        b->ops->free(b, dcopy);
}

/* The chained pair on BF16 weights: the outputs against double from the residual read back
 * (rmsnorm in double), the residual identical with and without the chain, each third row
 * alone bit for bit, and a chain claimed for a copy of x (ignored) against no chain at all
 * bit for bit. Returns the number of failures. */
static int chain_case(struct be *b, const char *who, int mode, int n, int k0, int k)
{
    static const int mq[3] = {64, 32, 48}, mg[2] = {96, 96};
    struct chain_setup c = {.mode = mode, .n_w = mode == BE_MM_GLU ? 2 : 3,
                            .n_out = mode == BE_MM_GLU ? 1 : 3, .k0 = k0, .k = k,
                            .m = mode == BE_MM_GLU ? mg : mq};
    const int dt = DT_BF16;
    size_t wob, wb[3];
    void *wo = make_weights(dt, k, k0, &wob), *w[3];
    c.wo = (struct be_tensor){.dtype = dt, .ne = {k0, k, 1, 1}, .nbytes = wob};
    c.wo.data = dev_from(b, wo, wob);
    for (int i = 0; i < c.n_w; i++) {
        w[i] = make_weights(dt, c.m[i], k, &wb[i]);
        c.w[i] = (struct be_tensor){.dtype = dt, .ne = {k, c.m[i], 1, 1}, .nbytes = wb[i]};
        c.w[i].data = dev_from(b, w[i], wb[i]);
    }
    float *a = malloc(sizeof(float) * (size_t)n * k0), *res = malloc(sizeof(float) * (size_t)n * k);
    float *gn = malloc(sizeof(float) * (size_t)k), *other = malloc(sizeof(float) * (size_t)n * k);
    fill_f(a, (int64_t)n * k0, 1.0f);
    fill_f(res, (int64_t)n * k, 3.0f);
    fill_f(other, (int64_t)n * k, 30.0f);
    c.other = other;
    fill_f(gn, k, 1.0f);
    c.da = dev_from(b, a, sizeof(float) * (size_t)n * k0);
    c.dg = dev_from(b, gn, sizeof(float) * (size_t)k);
    float *gn2 = malloc(sizeof(float) * (size_t)k);
    fill_f(gn2, k, 2.0f);
    c.dg2 = dev_from(b, gn2, sizeof(float) * (size_t)k);
    /* runs: chained, unchained, chain claimed for a copy, chain promised for other norm weights */
    float *hres[4], *hy[4][3];
    int bad = 0;
    /* CUDA chains q/k/v and gate/up (the default CINFER_CUDA_FUSE_NORM=1) on the skinny path
     * (up to its row-invariant rows: 128 by default): exactly the first run, never the other
     * three */
    const int64_t want_chain = n <= dev_exact(b, dt) ? 1 : 0;
    for (int v = 0; v < 4; v++) {
        hres[v] = malloc(sizeof(float) * (size_t)n * k);
        for (int i = 0; i < c.n_out; i++)
            hy[v][i] = malloc(sizeof(float) * (size_t)n * c.m[i]);
        const int64_t c0 = chained_count(b, who);
        chain_run(b, &c, res, 0, n, v != 1, v == 2, v == 3 ? c.dg2 : c.dg, hres[v], hy[v]);
        const int64_t ran = chained_count(b, who) - c0;
        if (c0 >= 0 && ran != (v == 0 ? want_chain : 0) && bad++ < 3)
            fprintf(stderr, "  %s chain mode %d n=%d run %d: %lld calls chained, expected %lld\n",
                    who, mode, n, v, (long long)ran, (long long)(v == 0 ? want_chain : 0));
    }
    if (memcmp(hres[0], hres[1], sizeof(float) * (size_t)n * k) && bad++ < 3)
        fprintf(stderr, "  %s chain mode %d n=%d: the residual differs with the chain\n", who,
                mode, n);
    for (int i = 0; i < c.n_out; i++)
        if (memcmp(hy[2][i], hy[1][i], sizeof(float) * (size_t)n * c.m[i]) && bad++ < 3)
            fprintf(stderr, "  %s chain mode %d n=%d: a chain claimed for a copy of x was used\n",
                    who, mode, n);
    for (int i = 0; i < c.n_out; i++)
        if (memcmp(hy[3][i], hy[1][i], sizeof(float) * (size_t)n * c.m[i]) && bad++ < 3)
            fprintf(stderr, "  %s chain mode %d n=%d: a chain for other norm weights was used\n",
                    who, mode, n);
    /* expected: rmsnorm(residual) * g in double, rounded to float, through the weights */
    float *xn = malloc(sizeof(float) * (size_t)n * k);
    for (int r = 0; r < n; r++) {
        double sq = 0;
        for (int j = 0; j < k; j++)
            sq += (double)hres[0][(int64_t)r * k + j] * hres[0][(int64_t)r * k + j];
        double rs = 1.0 / sqrt(sq / k + 1e-5);
        for (int j = 0; j < k; j++)
            xn[(int64_t)r * k + j] = (float)(hres[0][(int64_t)r * k + j] * rs * gn[j]);
    }
    double *mag[3], *ex[3];
    for (int i = 0; i < c.n_w; i++) {
        mag[i] = malloc(sizeof(double) * (size_t)n * c.m[i]);
        ex[i] = malloc(sizeof(double) * (size_t)n * c.m[i]);
        abs_dot2(dt, w[i], c.m[i], k, xn, n, mag[i], ex[i]);
    }
    for (int i = 0; i < c.n_out; i++)
        for (int64_t j = 0; j < (int64_t)n * c.m[i]; j++) {
            double want, tol;
            fused_expect(mode, dt, n, ex, mag, i, j, 0.0, &want, &tol);
            if (!(fabs(hy[0][i][j] - want) <= tol) && bad++ < 3)
                fprintf(stderr, "  %s chain mode %d n=%d out %d [%lld]: %.7g vs %.7g\n", who,
                        mode, n, i, (long long)j, hy[0][i][j], want);
        }
    /* each third row alone through the same chained pair */
    float *r1 = malloc(sizeof(float) * (size_t)k), *y1[3];
    for (int i = 0; i < c.n_out; i++)
        y1[i] = malloc(sizeof(float) * (size_t)c.m[i]);
    for (int r = 0; r < n && n > 1 && fused_invariant(b, dt, n); r += 3) {
        chain_run(b, &c, res, r, 1, 1, 0, c.dg, r1, y1);
        for (int i = 0; i < c.n_out; i++)
            if (memcmp(y1[i], hy[0][i] + (int64_t)r * c.m[i], sizeof(float) * (size_t)c.m[i]) &&
                bad++ < 3)
                fprintf(stderr, "  %s chain mode %d: row %d of %d differs alone\n", who, mode, r, n);
    }
    for (int i = 0; i < c.n_out; i++)
        free(y1[i]);
    free(r1);
    for (int i = 0; i < c.n_w; i++)
        b->ops->free(b, c.w[i].data), free(w[i]), free(mag[i]), free(ex[i]);
    for (int v = 0; v < 4; v++) {
        free(hres[v]);
        for (int i = 0; i < c.n_out; i++)
            free(hy[v][i]);
    }
    b->ops->free(b, c.wo.data), b->ops->free(b, c.da), b->ops->free(b, c.dg);
    b->ops->free(b, c.dg2);
    free(wo), free(a), free(res), free(gn), free(gn2), free(xn), free(other);
    return bad;
}

static void test_matmul_chain(void)
{
    static const int ns[] = {1, 2, 7, 16, 40};
    int ran = 0;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        struct be *b = g.cand[bi][0];
        if (!b || !b->ops->matmul_fused)
            continue;
        ran = 1;
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            rng_seed(800 + ni);
            int k = ni % 2 ? 2048 : 512, k0 = ni % 2 ? 1024 : 768;
            int bad = chain_case(b, g_backends[bi], BE_MM_PLAIN, ns[ni], k0, k) +
                      chain_case(b, g_backends[bi], BE_MM_GLU, ns[ni], k0, k);
            CHECK_MSG(bad == 0, "%s matmul_fused chain n=%d: %d off", g_backends[bi], ns[ni], bad);
        }
    }
    if (!ran)
        fprintf(stderr, "SKIP matmul_fused chain: no backend here has it\n");
}

/* argmax against the host rule (lowest index on ties, NaN never wins, -inf rows). */
static int32_t host_argmax(const float *x, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best]))
            best = i;
    return best < 0 ? 0 : best;
}

/* Row lengths: one block a row (5000), and rows a device may split over blocks whose best
 * are merged (9000: two slices; a 128256 vocabulary: many), each called 3 times (the split's
 * arrival counters must be back to zero after every call). */
static void test_argmax(void)
{
    enum { ROWS = 7 };
    static const int lens[] = {5000, 9000, 128256};
    for (int li = 0; li < 3; li++) {
        const int N = lens[li];
        float *x = malloc(sizeof(float) * ROWS * N);
        rng_seed(800 + (uint64_t)li);
        fill_f(x, (int64_t)ROWS * N, 10.0f);
        x[0 * N + N * 4 / 5] = 50.0f, x[0 * N + 17] = 50.0f; /* tie: lowest index wins */
        x[1 * N + 3] = NAN, x[1 * N + N - 1] = 20.0f;       /* NaN never wins */
        for (int i = 0; i < N; i++)
            x[2 * N + i] = -INFINITY, x[3 * N + i] = NAN; /* all -inf: 0; all NaN: 0 */
        x[4 * N + N - 1] = 99.0f;
        x[5 * N + 0] = INFINITY;
        x[6 * N + N / 2] = 60.0f, x[6 * N + N / 2 + 1] = 60.0f; /* tie inside one slice */
        int32_t want[ROWS], got[ROWS];
        for (int r = 0; r < ROWS; r++)
            want[r] = host_argmax(x + (int64_t)r * N, N);
        CHECK(want[0] == 17 && want[1] == N - 1 && want[2] == 0 && want[3] == 0 &&
              want[4] == N - 1 && want[5] == 0 && want[6] == N / 2);
        for (int bi = 0; bi < N_BACKENDS; bi++) {
            struct be *b = g.cand[bi][0];
            if (!b || !b->ops->argmax)
                continue;
            float *dx = dev_from(b, x, sizeof(float) * ROWS * N);
            int32_t *dout = dev_from(b, NULL, sizeof(int32_t) * ROWS);
            for (int rep = 0; rep < 3; rep++) {
                memset(got, 0xff, sizeof got);
                b->ops->argmax(b, dout, dx, ROWS - rep, N); /* 7, 6, 5 rows */
                host_from(b, got, dout, sizeof(int32_t) * (size_t)(ROWS - rep));
                for (int r = 0; r < ROWS - rep; r++)
                    CHECK_MSG(got[r] == want[r], "%s argmax n %d call %d row %d: %d, want %d",
                              g_backends[bi], N, rep, r, got[r], want[r]);
            }
            b->ops->free(b, dx), b->ops->free(b, dout);
        }
        free(x);
    }
}

/* ---- topcand: the sampling candidates of a row (backend.h) ---- */

static int tc_cmp(const void *pa, const void *pb)
{
    const struct be_topcand_ent *a = pa, *b = pb;
    if (a->logit != b->logit)
        return a->logit > b->logit ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* The straightforward reference of one row: returns the header, fills ent (n entries). */
static struct be_topcand_hdr tc_ref(const float *x, int n, float span, int cap,
                                    struct be_topcand_ent *ent, double *sum_exact)
{
    struct be_topcand_hdr h = {.argmax = host_argmax(x, n), .nc = -1};
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx)
            mx = x[i];
    h.mx = mx;
    *sum_exact = 0;
    if (!isfinite(mx))
        return h;
    for (int i = 0; i < n; i++)
        if (x[i] == x[i])
            *sum_exact += exp((double)x[i] - (double)mx);
    h.sum = (float)*sum_exact;
    /* the widest bound cut(k) that keeps at most cap values */
    int nc = 0;
    for (int k = BE_TOPCAND_BINS; k >= 0; k--) {
        float cut = be_topcand_cut(mx, span, k);
        nc = 0;
        for (int i = 0; i < n; i++)
            if (x[i] >= cut && nc < cap + 1)
                ent[nc].logit = x[i], ent[nc].id = i, nc++;
        if (nc <= cap)
            break;
    }
    if (nc > cap)
        return h;
    qsort(ent, (size_t)nc, sizeof *ent, tc_cmp);
    h.nc = nc;
    return h;
}

/* Row kinds of the topcand test: n values far below 0, a max of 0 at a random place, then
 * `hot` values within the span (with ties, -0/+0, a NaN), or the special rows. */
static void tc_row(float *x, int n, int kind, int hot, float span)
{
    for (int i = 0; i < n; i++)
        x[i] = -2.0f * span - 10.0f + rng_f() * 5.0f;
    int at = (int)(rng_u64() % (uint64_t)n);
    switch (kind) {
    case 0: /* hot values, quantized so that many tie; one at exactly mx - span, one just below */
        for (int j = 0; j < hot; j++)
            x[rng_u64() % (uint64_t)n] = -(float)(rng_u64() % 40) * (span / 40.0f);
        x[at] = 0.0f;
        x[(at + 1) % n] = -span;
        x[(at + 2) % n] = nextafterf(-span, -INFINITY);
        x[(at + 3) % n] = -0.0f; /* equal to the max: ranked by id with it */
        x[(at + 4) % n] = NAN;
        break;
    case 1: /* exactly `hot` candidates, distinct */
        for (int j = 0; j < hot; j++)
            x[(at + j) % n] = -(float)j * (span / (float)(hot + 1));
        break;
    case 2: for (int i = 0; i < n; i++) x[i] = -INFINITY; break;
    case 3: for (int i = 0; i < n; i++) x[i] = NAN; break;
    case 4: x[at] = INFINITY; break;
    case 6: /* `hot` values tied at the max: more than cap overflows */
        for (int j = 0; j < hot; j++)
            x[(at + 7 * j) % n] = 1.5f;
        break;
    default: /* 5: -inf and NaN mixed with finite values, the max tied twice */
        for (int i = 0; i < n; i += 7)
            x[i] = i % 2 ? -INFINITY : NAN;
        x[at] = 3.0f, x[(at + n / 2) % n] = 3.0f;
        break;
    }
}

static void test_topcand(void)
{
    const float span = 20.0f;
    struct tcase { int n, rows, cap; } cases[] = {{5000, 9, 64}, {128256, 4, 4096}, {37, 4, 5}};
    int ran = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int n = cases[ci].n, rows = cases[ci].rows, cap = cases[ci].cap;
        size_t stride = be_topcand_stride(cap);
        float *x = malloc(sizeof(float) * (size_t)rows * n);
        struct be_topcand_ent *ref = malloc(sizeof *ref * (size_t)n);
        char *want = calloc((size_t)rows, stride), *got = calloc((size_t)rows, stride);
        char *alone = calloc(1, stride);
        rng_seed(900 + ci);
        /* kinds: mixed hot, exactly cap, 3 cap (a narrower bound), -inf, NaN, +inf, mixed,
         * cap + 1 tied at the max (overflow), few hot */
        int kind[9] = {0, 1, 1, 2, 3, 4, 5, 6, 0};
        int hot[9] = {40, cap, 3 * cap, 0, 0, 0, 0, cap + 1, 3};
        if (n == 128256)
            kind[0] = 1, hot[0] = cap, kind[1] = 0, hot[1] = 3000, kind[2] = 1, hot[2] = 3 * cap;
        if (n != 5000)
            kind[3] = 6, hot[3] = cap + 1;
        for (int r = 0; r < rows; r++)
            tc_row(x + (size_t)r * n, n, kind[r], hot[r] < n ? hot[r] : n, span);
        /* the CPU reference op against the straightforward loops */
        int nc_seen[4] = {0}; /* overflow, exactly cap, some, other */
        int narrowed = 0;     /* rows with more than cap values in the span */
        for (int r = 0; r < rows; r++) {
            double sx;
            struct be_topcand_hdr h = tc_ref(x + (size_t)r * n, n, span, cap, ref, &sx);
            struct be_topcand_hdr *w = (struct be_topcand_hdr *)(want + (size_t)r * stride);
            g.ref->ops->topcand(g.ref, w, x + (size_t)r * n, 1, n, span, cap);
            CHECK_MSG(memcmp(&w->mx, &h.mx, 4) == 0 && w->argmax == h.argmax && w->nc == h.nc,
                      "n %d row %d: mx %g argmax %d nc %d, want %g %d %d", n, r, w->mx,
                      w->argmax, w->nc, h.mx, h.argmax, h.nc);
            CHECK_MSG(fabs(w->sum - sx) <= 1e-6 * sx, "n %d row %d: sum %.9g, want %.9g", n, r,
                      w->sum, sx);
            if (w->nc == h.nc && h.nc > 0)
                CHECK_MSG(memcmp(w + 1, ref, (size_t)h.nc * sizeof *ref) == 0,
                          "n %d row %d: candidates differ", n, r);
            nc_seen[h.nc < 0 ? 0 : h.nc == cap ? 1 : h.nc > 0 ? 2 : 3]++;
            int in_span = 0;
            for (int i = 0; i < n; i++)
                in_span += x[(size_t)r * n + i] >= be_topcand_cut(h.mx, span, BE_TOPCAND_BINS);
            narrowed += isfinite(h.mx) && h.nc > 0 && in_span > cap;
        }
        CHECK(nc_seen[0] >= 1 && nc_seen[1] >= 1);
        if (n != 37)
            CHECK(narrowed >= 1);
        if (n == 5000)
            CHECK(nc_seen[2] >= 2); /* the hot rows: ties, the span's edge, -0 */
        for (int bi = 0; bi < N_BACKENDS; bi++) {
            struct be *b = g.cand[bi][0];
            if (!b || !b->ops->topcand)
                continue;
            ran++;
            float *dx = dev_from(b, x, sizeof(float) * (size_t)rows * n);
            void *dout = dev_from(b, NULL, (size_t)rows * stride);
            b->ops->topcand(b, dout, dx, rows, n, span, cap);
            host_from(b, got, dout, (size_t)rows * stride);
            for (int r = 0; r < rows; r++) {
                const struct be_topcand_hdr *w = (void *)(want + (size_t)r * stride);
                const struct be_topcand_hdr *h = (void *)(got + (size_t)r * stride);
                CHECK_MSG(memcmp(&h->mx, &w->mx, 4) == 0 && h->argmax == w->argmax &&
                              h->nc == w->nc,
                          "%s n %d row %d: mx %g argmax %d nc %d, want %g %d %d", g_backends[bi],
                          n, r, h->mx, h->argmax, h->nc, w->mx, w->argmax, w->nc);
                CHECK_MSG(fabsf(h->sum - w->sum) <= 1e-5f * w->sum, "%s n %d row %d: sum %.9g, "
                          "want %.9g", g_backends[bi], n, r, h->sum, w->sum);
                if (h->nc == w->nc && w->nc > 0)
                    CHECK_MSG(memcmp(h + 1, w + 1, (size_t)w->nc * sizeof *ref) == 0,
                              "%s n %d row %d: candidates differ", g_backends[bi], n, r);
                /* batch invariance: the row alone gives the same bytes */
                b->ops->topcand(b, dout, dx + (size_t)r * n, 1, n, span, cap);
                host_from(b, alone, dout, stride);
                size_t used = sizeof *h + (size_t)(h->nc > 0 ? h->nc : 0) * sizeof *ref;
                CHECK_MSG(memcmp(alone, h, used) == 0, "%s n %d row %d: alone differs from "
                          "batched", g_backends[bi], n, r);
            }
            b->ops->free(b, dx), b->ops->free(b, dout);
        }
        free(x), free(ref), free(want), free(got), free(alone);
    }
    CHECK(ran > 0);
}

/* ---- sample: rows decided on the backend vs the host sampler (backend/be_sample.h) ----
 * Each row's parameters come from a real sampler (sampler_device_row); the expected id and
 * processed logits come from sampler_sample on a copy of the row, with a sampler that saw
 * the same history (and, for a continuation, the previous id and one more step). Exact:
 * the same ids and the same logit bits, on every backend, batched and alone. */
enum { SP_ROWS = 9 };

static void sp_params(int kind, uint64_t seed, struct sampler_params *p, struct sampler_bias *bias,
                      int V)
{
    sampler_params_default(p);
    p->seed = seed;
    switch (kind) {
    case 0: break; /* temperature 0.7 alone: the SDK default */
    case 1: p->temperature = 1.0f; break;
    case 2: p->temperature = 0.25f; break;
    case 3: /* greedy + 256 logit_bias ids (one banned) */
    case 4: /* T = 1.3 + the same bias */
        p->temperature = kind == 3 ? 0.0f : 1.3f;
        for (int i = 0; i < 256; i++)
            bias[i].id = (int32_t)(rng_u64() % (uint64_t)V), bias[i].bias = rng_f() * 8.0f;
        bias[7].bias = -INFINITY;
        p->logit_bias = bias, p->n_logit_bias = 256;
        break;
    case 5: /* the three penalties on three windows (frequency: the whole history) */
        p->repetition_penalty = 1.3f, p->repetition_context_size = 20;
        p->presence_penalty = 0.7f, p->presence_context_size = 64;
        p->frequency_penalty = 0.4f, p->frequency_context_size = 0;
        break;
    case 6: /* greedy + repetition penalty: the penalised argmax */
        p->temperature = 0.0f, p->repetition_penalty = 1.5f;
        break;
    case 7: p->temperature = 2.0f, p->presence_penalty = -1.0f; break;
    default: p->temperature = 0.7f, p->xtc_probability = 0.0f; break;
    }
}

static void test_sample(void)
{
    static const int lens[] = {5000, 128256};
    int ran = 0;
    for (int li = 0; li < 2; li++) {
        const int V = lens[li];
        for (int round = 0; round < 3; round++) {
            const int ahead = round == 2; /* the last round continues a queued step */
            rng_seed(900 + (uint64_t)li * 10 + (uint64_t)round);
            float *x = malloc(sizeof(float) * SP_ROWS * V), *want_x = malloc(sizeof(float) * SP_ROWS * V);
            float *got_x = malloc(sizeof(float) * SP_ROWS * V);
            int32_t *blob = calloc((size_t)SP_ROWS * (BE_SAMPLE_ROW_WORDS + BE_SAMPLE_AUX_PER_ROW), 4);
            int32_t want[SP_ROWS], got[SP_ROWS], prev[SP_ROWS], hist[300];
            static struct sampler_bias bias[SP_ROWS][256];
            int used = SP_ROWS * BE_SAMPLE_ROW_WORDS;
            fill_f(x, (int64_t)SP_ROWS * V, 8.0f);
            for (int i = 0; i < V; i += 97) /* a few NaN and -inf: never drawn */
                x[(size_t)1 * V + i] = NAN, x[(size_t)2 * V + i + 1] = -INFINITY;
            memcpy(want_x, x, sizeof(float) * SP_ROWS * V);
            for (int r = 0; r < SP_ROWS; r++) {
                struct sampler_params p;
                sp_params(r, 1000 + (uint64_t)round * 31 + (uint64_t)r, &p, bias[r], V);
                int nh = 40 + (int)(rng_u64() % 200);
                for (int i = 0; i < nh; i++) /* repeats: a small alphabet near the top */
                    hist[i] = (int32_t)(rng_u64() % 50) * (V / 50);
                prev[r] = hist[rng_u64() % (uint64_t)nh];
                struct sampler *s = NULL, *ref = NULL;
                struct cerr e = {0};
                CHECK(sampler_new(&s, &p, V, &e) == 0 && sampler_new(&ref, &p, V, &e) == 0);
                if (!s || !ref)
                    return;
                sampler_prime(s, hist, nh);
                sampler_prime(ref, hist, nh);
                struct be_sample_row row;
                int k = sampler_device_row(s, ahead, hist, nh, &row, blob + used,
                                           SP_ROWS * (BE_SAMPLE_ROW_WORDS + BE_SAMPLE_AUX_PER_ROW) - used, used, 0);
                CHECK_MSG(k >= 0, "row %d: the op cannot take it", r);
                if (r == SP_ROWS - 1 && round == 1)
                    row.skip = 1; /* left alone: -1, logits untouched */
                memcpy(blob + (size_t)r * BE_SAMPLE_ROW_WORDS, &row, sizeof row);
                used += k > 0 ? k : 0;
                if (ahead) { /* the sampler saw the previous id and one more step */
                    sampler_accept(ref, prev[r]);
                    sampler_skip(ref);
                }
                want[r] = row.skip ? -1 : sampler_sample(ref, want_x + (size_t)r * V, NULL);
                sampler_free(s), sampler_free(ref);
            }
            for (int bi = 0; bi < N_BACKENDS; bi++) {
                struct be *b = g.cand[bi][0];
                if (!b || !b->ops->sample)
                    continue;
                ran++;
                float *dx = dev_from(b, x, sizeof(float) * SP_ROWS * V);
                int32_t *dp = dev_from(b, blob, (size_t)used * 4);
                int32_t *dprev = dev_from(b, prev, sizeof prev);
                int32_t *dout = dev_from(b, NULL, sizeof got);
                b->ops->sample(b, dout, dx, SP_ROWS, V, dp, ahead ? dprev : NULL);
                host_from(b, got, dout, sizeof got);
                host_from(b, got_x, dx, sizeof(float) * SP_ROWS * V);
                for (int r = 0; r < SP_ROWS; r++) {
                    CHECK_MSG(got[r] == want[r], "%s n %d round %d row %d: id %d, sampler %d",
                              g_backends[bi], V, round, r, got[r], want[r]);
                    CHECK_MSG(memcmp(got_x + (size_t)r * V, want_x + (size_t)r * V,
                                     sizeof(float) * (size_t)V) == 0,
                              "%s n %d round %d row %d: processed logits differ", g_backends[bi],
                              V, round, r);
                }
                /* batch invariance: the last rows alone (the params blob seen from row r) */
                for (int r = SP_ROWS - 3; r < SP_ROWS; r++) {
                    b->ops->upload(b, dx, x, sizeof(float) * SP_ROWS * V, &(struct cerr){0});
                    int32_t one = -2;
                    struct be_sample_row row;
                    memcpy(&row, blob + (size_t)r * BE_SAMPLE_ROW_WORDS, sizeof row);
                    int32_t *ob = malloc((size_t)used * 4);
                    memcpy(ob, blob, (size_t)used * 4);
                    memcpy(ob, &row, sizeof row); /* row r as row 0 (offsets are absolute) */
                    b->ops->upload(b, dp, ob, (size_t)used * 4, &(struct cerr){0});
                    b->ops->sample(b, dout, dx + (size_t)r * V, 1, V, dp,
                                   ahead ? dprev + r : NULL);
                    host_from(b, &one, dout, 4);
                    CHECK_MSG(one == want[r], "%s n %d round %d row %d alone: %d, want %d",
                              g_backends[bi], V, round, r, one, want[r]);
                    b->ops->upload(b, dp, blob, (size_t)used * 4, &(struct cerr){0});
                    free(ob);
                }
                b->ops->free(b, dx), b->ops->free(b, dp), b->ops->free(b, dprev),
                    b->ops->free(b, dout);
            }
            free(x), free(want_x), free(got_x), free(blob);
        }
    }
    CHECK(ran > 0);
}

/* A distribution check of the op's draw at T = 0.7 on a small row: 20000 seeded draws of
 * one row on each backend (one call of 20000 rows) against the exact softmax, chi-square
 * over the ids with expected count >= 5 (df ~ 40: fails above 100). */
static void test_sample_distribution(void)
{
    enum { DN = 64, DR = 20000 };
    float row[DN];
    rng_seed(77);
    fill_f(row, DN, 3.0f);
    double pr[DN], z = 0, mx = -INFINITY;
    for (int i = 0; i < DN; i++)
        mx = row[i] > mx ? row[i] : mx;
    for (int i = 0; i < DN; i++)
        z += pr[i] = exp((row[i] - mx) / 0.7);
    float *x = malloc(sizeof(float) * DN * DR);
    int32_t *blob = calloc((size_t)DR * BE_SAMPLE_ROW_WORDS, 4), *ids = malloc(4 * DR);
    for (int r = 0; r < DR; r++) {
        memcpy(x + (size_t)r * DN, row, sizeof row);
        struct be_sample_row p = {.inv_t = 1.0f / 0.7f, .rep_w = -1, .pres_w = -1, .freq_w = -1};
        uint64_t u = sampler_uniform_bits(5, (uint64_t)r, 0);
        p.u_lo = (uint32_t)u, p.u_hi = (uint32_t)(u >> 32);
        memcpy(blob + (size_t)r * BE_SAMPLE_ROW_WORDS, &p, sizeof p);
    }
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        struct be *b = g.cand[bi][0];
        if (!b || !b->ops->sample)
            continue;
        float *dx = dev_from(b, x, sizeof(float) * DN * DR);
        int32_t *dp = dev_from(b, blob, (size_t)DR * BE_SAMPLE_ROW_WORDS * 4);
        int32_t *dout = dev_from(b, NULL, 4 * DR);
        b->ops->sample(b, dout, dx, DR, DN, dp, NULL);
        host_from(b, ids, dout, 4 * DR);
        int cnt[DN] = {0}, bad = 0;
        for (int r = 0; r < DR; r++)
            if (ids[r] >= 0 && ids[r] < DN)
                cnt[ids[r]]++;
            else
                bad++;
        double chi = 0;
        int df = 0;
        for (int i = 0; i < DN; i++) {
            double e = DR * pr[i] / z;
            if (e >= 5)
                chi += (cnt[i] - e) * (cnt[i] - e) / e, df++;
        }
        CHECK_EQ_INT(bad, 0);
        CHECK_MSG(chi < 2.5 * df, "%s: chi-square %.1f over %d ids", g_backends[bi], chi, df);
        b->ops->free(b, dx), b->ops->free(b, dp), b->ops->free(b, dout);
    }
    free(x), free(blob), free(ids);
}

/* sample with grammar masks (be_sample_row.mask_off): every backend gives be_sample_ref's ids
 * and processed logits bit for bit; the id is an allowed one and every id the bitset rules
 * out reads -inf (the mask comes after logit_bias and the penalties). Rows: greedy, T 0.7,
 * T 1.3 + logit_bias (raising ruled-out ids too), greedy + repetition penalty, no mask, an
 * empty mask (every id ruled out: the argmax rule's first -inf). Row lengths not a multiple
 * of 32 (the bitset's last word). */
static void test_sample_mask(void)
{
    static const int lens[] = {5003, 151937};
    enum { MR = 6 };
    int ran = 0;
    for (int li = 0; li < 2; li++) {
        const int V = lens[li], nw = (V + 31) / 32;
        rng_seed(1300 + (uint64_t)li);
        float *x = malloc(sizeof(float) * MR * V), *want_x = malloc(sizeof(float) * MR * V);
        float *got_x = malloc(sizeof(float) * MR * V);
        int words = MR * BE_SAMPLE_ROW_WORDS + 256 + MR * nw, used = MR * BE_SAMPLE_ROW_WORDS;
        int32_t *blob = calloc((size_t)words, 4), want[MR], got[MR];
        fill_f(x, (int64_t)MR * V, 8.0f);
        memcpy(want_x, x, sizeof(float) * MR * V);
        for (int r = 0; r < MR; r++) {
            struct be_sample_row p = {.rep_w = -1, .pres_w = -1, .freq_w = -1};
            p.inv_t = r == 1 ? 1.0f / 0.7f : r == 2 ? 1.0f / 1.3f : r == 4 ? 1.0f / 0.7f : 0.0f;
            uint64_t u = sampler_uniform_bits(11, (uint64_t)r, 0);
            p.u_lo = (uint32_t)u, p.u_hi = (uint32_t)(u >> 32);
            if (r == 2) { /* 40 biased ids, pushed far up: half of them ruled out below */
                p.n_bias = 40, p.bias_off = used;
                for (int i = 0; i < 40; i++) {
                    blob[used + 2 * i] = (int32_t)(rng_u64() % (uint64_t)V);
                    blob[used + 2 * i + 1] = (int32_t)be_f2u(30.0f);
                }
                used += 80;
            }
            if (r == 3) { /* history of 30 ids: the repetition penalty */
                p.n_hist = 30, p.hist_off = used, p.rep_w = 0, p.rep = 1.5f;
                for (int i = 0; i < 30; i++)
                    blob[used + i] = (int32_t)(rng_u64() % (uint64_t)V);
                used += 30;
            }
            if (r != 4) {
                p.mask_off = used;
                uint32_t *mk = (uint32_t *)(blob + used);
                for (int w = 0; w < nw; w++) /* r 5: empty; else about 1 id in 8 allowed */
                    mk[w] = r == 5 ? 0u
                                   : (uint32_t)(rng_u64() & rng_u64() & rng_u64());
                used += nw;
            }
            memcpy(blob + (size_t)r * BE_SAMPLE_ROW_WORDS, &p, sizeof p);
        }
        be_sample_ref(want, want_x, MR, V, blob, NULL);
        for (int r = 0; r < MR; r++) { /* the reference itself keeps the mask */
            struct be_sample_row p;
            memcpy(&p, blob + (size_t)r * BE_SAMPLE_ROW_WORDS, sizeof p);
            if (!p.mask_off)
                continue;
            const uint32_t *mk = (const uint32_t *)(blob + p.mask_off);
            int bad = 0;
            for (int i = 0; i < V; i++)
                bad += !((mk[i >> 5] >> (i & 31)) & 1u) && want_x[(size_t)r * V + i] != -INFINITY;
            CHECK_MSG(bad == 0, "n %d row %d: %d ruled-out ids are not -inf", V, r, bad);
            CHECK_MSG(r == 5 ? want[r] == 0 : ((mk[want[r] >> 5] >> (want[r] & 31)) & 1u),
                      "n %d row %d: id %d is not allowed", V, r, want[r]);
        }
        for (int bi = 0; bi < N_BACKENDS; bi++) {
            struct be *b = g.cand[bi][0];
            if (!b || !b->ops->sample)
                continue;
            ran++;
            float *dx = dev_from(b, x, sizeof(float) * MR * V);
            int32_t *dp = dev_from(b, blob, (size_t)used * 4);
            int32_t *dout = dev_from(b, NULL, sizeof got);
            b->ops->sample(b, dout, dx, MR, V, dp, NULL);
            host_from(b, got, dout, sizeof got);
            host_from(b, got_x, dx, sizeof(float) * MR * V);
            for (int r = 0; r < MR; r++) {
                CHECK_MSG(got[r] == want[r], "%s n %d row %d: id %d, reference %d",
                          g_backends[bi], V, r, got[r], want[r]);
                CHECK_MSG(memcmp(got_x + (size_t)r * V, want_x + (size_t)r * V,
                                 sizeof(float) * (size_t)V) == 0,
                          "%s n %d row %d: processed logits differ", g_backends[bi], V, r);
            }
            b->ops->free(b, dx), b->ops->free(b, dp), b->ops->free(b, dout);
        }
        free(x), free(want_x), free(got_x), free(blob);
    }
    CHECK(ran > 0);
}

static void test_get_rows(void)
{
    for (int ti = 0; ti < N_WTYPES; ti++) {
        int dt = g_wtypes[ti], k = 512, rows = 20;
        rng_seed(400 + (uint64_t)dt);
        size_t wb;
        void *w = make_weights(dt, rows, k, &wb);
        int32_t ids[4] = {3, 0, 19, 3};
        float *want = malloc(sizeof(float) * 4 * k), *got = malloc(sizeof(float) * 4 * k);
        for (int i = 0; i < 4; i++)
            quant_dequant_row(dt, (char *)w + dtype_row_bytes(dt, k) * (size_t)ids[i], want + i * k, k);
        for (int bi = 0; bi < N_BACKENDS; bi++) {
            struct be *b = g.cand[bi][1] ? g.cand[bi][1] : g.cand[bi][0];
            if (!b)
                continue;
            struct be_tensor t = {.dtype = dt, .ne = {k, rows, 1, 1}, .nbytes = wb};
            t.data = dev_from(b, w, wb);
            void *orig = t.data;
            CHECK(b->ops->weight_prepare(b, &t, NULL) == 0);
            if (t.data != orig && is_cpu_be(b))
                b->ops->free(b, orig);
            int32_t *di = dev_from(b, ids, sizeof ids);
            float *dout = dev_from(b, NULL, sizeof(float) * 4 * k);
            b->ops->get_rows(b, dout, &t, di, 4);
            host_from(b, got, dout, sizeof(float) * 4 * k);
            CHECK_MSG(memcmp(got, want, sizeof(float) * 4 * k) == 0, "%s get_rows %s",
                      g_backends[bi], dtype_name(dt));
            b->ops->free(b, t.data), b->ops->free(b, di), b->ops->free(b, dout);
        }
        free(w), free(want), free(got);
    }
}

/* ---- attention ---- */

struct attn_case {
    int n_tok, n_head, n_kv, hd, window, kv_dtype, bs, max_blocks, n_seq;
    float softcap;
    /* token layout: 0 = sequences interleaved, positions falling by 3 (see attn_build);
     * 1 = each sequence one run of consecutive rising positions ending at its last filled
     * position (a prefill chunk); 2 = like 1, but sequences 1.. have one token each (a
     * prefill chunk mixed with decode tokens) */
    int prefill;
};

/* Naive double-precision attention straight from the definition in backend.h. */
static void attn_naive(const struct be_attn *a, const float *q, double *out)
{
    int kvd = a->n_kv_head * a->head_dim, group = a->n_head / a->n_kv_head;
    for (int t = 0; t < a->n_tok; t++)
        for (int h = 0; h < a->n_head; h++) {
            int g2 = h / group, pos = a->pos[t];
            double *o = out + ((int64_t)t * a->n_head + h) * a->head_dim;
            double mx = -INFINITY, l = 0;
            double *s = malloc(sizeof(double) * (size_t)(pos + 1));
            for (int p = 0; p <= pos; p++) {
                s[p] = -INFINITY;
                if (a->window > 0 && pos - p >= a->window)
                    continue;
                int64_t row = (int64_t)a->block_tables[a->seq[t] * a->max_blocks + p / a->block_size] *
                                  a->block_size + p % a->block_size;
                double d = 0;
                for (int i = 0; i < a->head_dim; i++) {
                    int64_t idx = row * kvd + g2 * a->head_dim + i;
                    double kv = a->kv_dtype == DT_F16 ? half_f16_to_f32(((const uint16_t *)a->k_cache)[idx])
                                                      : ((const float *)a->k_cache)[idx];
                    d += (double)q[((int64_t)t * a->n_head + h) * a->head_dim + i] * kv;
                }
                d *= a->scale;
                if (a->softcap > 0)
                    d = a->softcap * tanh(d / a->softcap);
                s[p] = d;
                mx = fmax(mx, d);
            }
            for (int i = 0; i < a->head_dim; i++)
                o[i] = 0;
            for (int p = 0; p <= pos; p++) {
                if (s[p] == -INFINITY)
                    continue;
                double e = exp(s[p] - mx);
                l += e;
                int64_t row = (int64_t)a->block_tables[a->seq[t] * a->max_blocks + p / a->block_size] *
                                  a->block_size + p % a->block_size;
                for (int i = 0; i < a->head_dim; i++) {
                    int64_t idx = row * kvd + g2 * a->head_dim + i;
                    double vv = a->kv_dtype == DT_F16 ? half_f16_to_f32(((const uint16_t *)a->v_cache)[idx])
                                                      : ((const float *)a->v_cache)[idx];
                    o[i] += e * vv;
                }
            }
            for (int i = 0; i < a->head_dim; i++)
                o[i] /= l;
            free(s);
        }
}

/* Builds a paged layout: n_seq sequences with shuffled blocks; this step's tokens are the
 * last few positions of each sequence (mixed prefill/decode). K/V are stored with kv_store
 * of the reference backend. Returns host caches via *kc / *vc. */
struct attn_setup {
    struct be_attn a;
    float *q;
    int32_t *pos, *seq, *bt;
    void *kc, *vc;
    size_t cache_bytes;
};

static void attn_build(const struct attn_case *c, struct attn_setup *s)
{
    int kvd = c->n_kv * c->hd, n_blocks = c->n_seq * c->max_blocks;
    size_t es = c->kv_dtype == DT_F16 ? 2 : 4;
    s->cache_bytes = (size_t)n_blocks * c->bs * kvd * es;
    s->kc = calloc(1, s->cache_bytes);
    s->vc = calloc(1, s->cache_bytes);
    s->bt = malloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++)
        s->bt[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) { /* shuffle: blocks are not contiguous */
        int j = (int)(rng_u64() % (uint64_t)(i + 1)), tmp = s->bt[i];
        s->bt[i] = s->bt[j], s->bt[j] = tmp;
    }
    int len = c->max_blocks * c->bs - 3; /* filled positions per sequence */
    float *k = malloc(sizeof(float) * (size_t)kvd), *v = malloc(sizeof(float) * (size_t)kvd);
    for (int sq = 0; sq < c->n_seq; sq++)
        for (int p = 0; p < len; p++) {
            fill_f(k, kvd, 1.0f), fill_f(v, kvd, 1.0f);
            int32_t slot = s->bt[sq * c->max_blocks + p / c->bs] * c->bs + p % c->bs;
            g.ref->ops->kv_store(g.ref, s->kc, s->vc, c->kv_dtype, k, v, &slot, 1, kvd);
        }
    free(k), free(v);
    s->pos = malloc(sizeof(int32_t) * (size_t)c->n_tok);
    s->seq = malloc(sizeof(int32_t) * (size_t)c->n_tok);
    for (int t = 0; t < c->n_tok; t++) {
        s->seq[t] = t % c->n_seq;
        s->pos[t] = len - 1 - (t / c->n_seq) * 3; /* distinct positions, some near the end */
    }
    for (int sq = 0, t = 0; c->prefill && sq < c->n_seq; sq++) {
        int cnt = c->prefill == 2 ? (sq ? 1 : c->n_tok - (c->n_seq - 1))
                                  : c->n_tok / c->n_seq + (sq < c->n_tok % c->n_seq);
        for (int i = 0; i < cnt; i++, t++)
            s->seq[t] = sq, s->pos[t] = len - cnt + i;
    }
    s->q = malloc(sizeof(float) * (size_t)c->n_tok * c->n_head * c->hd);
    fill_f(s->q, (int64_t)c->n_tok * c->n_head * c->hd, 1.0f);
    s->a = (struct be_attn){
        .n_tok = c->n_tok, .n_head = c->n_head, .n_kv_head = c->n_kv, .head_dim = c->hd,
        .scale = 1.0f / sqrtf((float)c->hd), .softcap = c->softcap, .window = c->window,
        .pos = s->pos, .seq = s->seq, .block_tables = s->bt, .max_blocks = c->max_blocks,
        .block_size = c->bs, .kv_dtype = c->kv_dtype, .k_cache = s->kc, .v_cache = s->vc,
    };
}

static void attn_free(struct attn_setup *s)
{
    free(s->q), free(s->pos), free(s->seq), free(s->bt), free(s->kc), free(s->vc);
}

/* Runs attention on b for tokens [t0, t0+nt) of the setup. */
static void run_attn(struct be *b, const struct attn_setup *s, int t0, int nt, float *out)
{
    const struct be_attn *a = &s->a;
    int qn = a->n_head * a->head_dim;
    struct be_attn d = *a;
    d.n_tok = nt;
    d.pos = dev_from(b, a->pos + t0, sizeof(int32_t) * (size_t)nt);
    d.seq = dev_from(b, a->seq + t0, sizeof(int32_t) * (size_t)nt);
    int n_seq = 0;
    for (int t = 0; t < a->n_tok; t++)
        n_seq = a->seq[t] + 1 > n_seq ? a->seq[t] + 1 : n_seq;
    d.block_tables = dev_from(b, a->block_tables, sizeof(int32_t) * (size_t)n_seq * a->max_blocks);
    d.k_cache = dev_from(b, a->k_cache, s->cache_bytes);
    d.v_cache = dev_from(b, a->v_cache, s->cache_bytes);
    float *dq = dev_from(b, s->q + (int64_t)t0 * qn, sizeof(float) * (size_t)nt * qn);
    float *dout = dev_from(b, NULL, sizeof(float) * (size_t)nt * qn);
    b->ops->attention(b, dout, dq, &d);
    host_from(b, out, dout, sizeof(float) * (size_t)nt * qn);
    b->ops->free(b, (void *)d.pos), b->ops->free(b, (void *)d.seq);
    b->ops->free(b, (void *)d.block_tables), b->ops->free(b, (void *)d.k_cache);
    b->ops->free(b, (void *)d.v_cache), b->ops->free(b, dq), b->ops->free(b, dout);
}

/* cases may leave out trailing fields (prefill = 0) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const struct attn_case g_attn_cases[] = {
    /* n_tok n_head n_kv hd window kv bs max_blocks n_seq softcap */
    {6, 8, 2, 64, 0, DT_F32, 16, 5, 2, 0.0f},
    {5, 4, 4, 32, 20, DT_F32, 8, 6, 1, 0.0f},
    {7, 8, 2, 128, 17, DT_F16, 16, 4, 3, 30.0f},
    {4, 6, 1, 80, 0, DT_F16, 4, 20, 2, 50.0f},
    {3, 16, 8, 256, 40, DT_F32, 16, 4, 1, 0.0f},
    {5, 6, 2, 40, 0, DT_F16, 16, 3, 2, 0.0f}, /* head_dim with an 8-element tail */
    {3, 4, 2, 20, 9, DT_F32, 2, 12, 1, 20.0f},
    /* one sequence, no window / window beyond every position: multi-token runs */
    {12, 8, 2, 64, 0, DT_F16, 16, 5, 1, 0.0f},
    {10, 4, 2, 32, 500, DT_F32, 8, 6, 1, 10.0f},
    /* a prefill-sized step (the CUDA backend's unsplit path) */
    {80, 8, 2, 64, 0, DT_F16, 16, 16, 1, 0.0f},
    /* steps of more than 64 tokens (CUDA: the tensor-core path, cuda_attn_tc.cu) */
    {128, 32, 8, 128, 0, DT_F16, 16, 12, 1, 0.0f, 1},  /* Llama-3.1-8B heads, a chunk */
    {130, 32, 8, 128, 0, DT_F16, 16, 10, 3, 0.0f, 2},  /* chunk + 2 decode tokens */
    {200, 32, 8, 64, 0, DT_F16, 16, 8, 2, 0.0f, 1},    /* Llama-3.2-1B heads, 2 chunks */
    {96, 8, 1, 64, 0, DT_F16, 16, 19, 1, 0.0f, 0},     /* group 8, scattered positions */
    {100, 4, 4, 256, 40, DT_F32, 16, 22, 1, 0.0f, 0},  /* hd 256, window, f32 cache */
    {300, 6, 2, 80, 0, DT_F16, 8, 40, 3, 30.0f, 0},    /* hd 80, group 3, softcap, 3 seqs */
    {150, 8, 2, 96, 64, DT_F16, 16, 12, 3, 0.0f, 1},   /* hd 96, window, 3 chunks */
    {260, 16, 2, 256, 100, DT_F16, 16, 20, 1, 50.0f, 1}, /* Gemma-like: window + softcap */
    {130, 16, 16, 128, 0, DT_F32, 16, 9, 1, 0.0f, 1},  /* group 1, f32 cache */
    {70, 8, 2, 128, 0, DT_F16, 4, 40, 2, 0.0f, 1},     /* block size 4 */
    /* steps of at most 64 tokens (CUDA: the decode path, cuda_attn_dec.cu; splits of
     * whole 64-position rounds, at most 32 a token unless CINFER_ATTN_DEC_SPLITS says) */
    {1, 32, 8, 128, 0, DT_F16, 16, 24, 1, 0.0f, 0},     /* Llama-3.1-8B decode, ctx 381 */
    {8, 32, 8, 128, 0, DT_F16, 16, 25, 8, 0.0f, 0},     /* 8 sequences decoding */
    {64, 32, 8, 64, 0, DT_F16, 16, 26, 32, 0.0f, 0},    /* Llama-3.2-1B, 64 tokens, 32 seqs */
    {16, 32, 8, 128, 0, DT_F16, 16, 64, 2, 0.0f, 0},    /* ctx 1021: 16 splits */
    {2, 8, 2, 128, 0, DT_F16, 16, 140, 1, 0.0f, 0},     /* ctx 2237: 2 rounds a split */
    {3, 8, 8, 64, 1000, DT_F16, 16, 160, 1, 0.0f, 0},   /* group 1, long window */
    {5, 16, 2, 128, 0, DT_F32, 16, 40, 2, 0.0f, 0},     /* group 8 (2 blocks a kv head), f32 */
    {6, 8, 8, 64, 100, DT_F32, 16, 30, 3, 0.0f, 0},     /* group 1, window, f32 */
    {6, 8, 2, 128, 50, DT_F32, 16, 12, 2, 0.0f, 0},     /* window across a round edge */
    {4, 16, 8, 256, 300, DT_F16, 16, 40, 2, 50.0f, 0},  /* Gemma-like: hd 256, window, softcap */
    {3, 8, 4, 256, 0, DT_F16, 16, 10, 1, 30.0f, 0},     /* hd 256, group 2, softcap */
    {40, 32, 8, 128, 0, DT_F16, 16, 30, 1, 0.0f, 1},    /* a 40-token chunk */
    {33, 24, 4, 128, 37, DT_F16, 8, 20, 3, 0.0f, 2},    /* group 6, window, chunk + decodes */
    {2, 4, 1, 64, 0, DT_F16, 16, 2, 1, 0.0f, 0},        /* context under one round */
    {5, 8, 2, 64, 0, DT_F16, 24, 12, 1, 0.0f, 0},       /* block size not a power of two */
};
#pragma GCC diagnostic pop

/* Tolerance of backend bi against the scalar reference. The CUDA tensor-core prefill path
 * (steps of more than 64 tokens, head_dim a multiple of 16 up to 256) rounds q * scale, K,
 * V and the softmax weights to fp16 (fp32 accumulation): 2e-3 abs for these O(1) inputs
 * (measured on the H200: at most 2.2e-4 over these cases, every tiling). Every other path:
 * 2e-5 (a different dot order and, in SIMD, the same expf). */
static double attn_tol(int bi, const struct attn_case *c)
{
    int tc = strcmp(g_backends[bi], "cuda") == 0 && c->n_tok > 64 && c->hd % 16 == 0 &&
             c->hd <= 256;
    return tc ? 2e-3 : 2e-5;
}

/* Scalar reference vs naive double softmax (1e-4 abs; outputs are O(1)); candidates vs
 * reference (attn_tol); batch invariance of each token's output (alone vs in the batch, bit
 * for bit; within attn_tol where a GPU step of more than 64 tokens takes another path). */
static void test_attention(void)
{
    for (size_t ci = 0; ci < sizeof g_attn_cases / sizeof g_attn_cases[0]; ci++) {
        const struct attn_case *c = &g_attn_cases[ci];
        rng_seed(500 + ci);
        struct attn_setup s;
        attn_build(c, &s);
        int qn = c->n_head * c->hd, total = c->n_tok * qn;
        double *want = malloc(sizeof(double) * (size_t)total);
        float *ref = malloc(sizeof(float) * (size_t)total), *got = malloc(sizeof(float) * (size_t)total);
        float *got1 = malloc(sizeof(float) * (size_t)total); /* the 1-thread result */
        attn_naive(&s.a, s.q, want);
        run_attn(g.ref, &s, 0, c->n_tok, ref);
        double err = 0;
        for (int i = 0; i < total; i++)
            err = fmax(err, fabs(ref[i] - want[i]));
        CHECK_MSG(err <= 1e-4, "case %zu: scalar attention off by %g from double", ci, err);
        for (int bi = 0; bi < N_BACKENDS; bi++)
            for (int th = 0; th < 2; th++) {
                struct be *b = g.cand[bi][th];
                if (!b)
                    continue;
                run_attn(b, &s, 0, c->n_tok, got);
                double e2 = 0;
                for (int i = 0; i < total; i++)
                    e2 = fmax(e2, fabs(got[i] - ref[i]));
                CHECK_MSG(e2 <= attn_tol(bi, c), "case %zu %s (%d thr): off by %g from reference",
                          ci, g_backends[bi], th ? 4 : 1, e2);
                if (!is_cpu(bi) && th == 0)
                    fprintf(stderr, "attention case %zu %s: max abs err %.3g (tol %g)\n", ci,
                            g_backends[bi], e2, attn_tol(bi, c));
                if (th == 0)
                    memcpy(got1, got, sizeof(float) * (size_t)total);
                else
                    CHECK_MSG(memcmp(got1, got, sizeof(float) * (size_t)total) == 0,
                              "case %zu %s: 4 threads differ from 1", ci, g_backends[bi]);
                int bad = 0,
                    exact = is_cpu(bi) || c->n_tok <= 64 || c->n_tok <= dev_exact(b, DT_F32);
                for (int t = 0; t < c->n_tok; t += c->n_tok > 16 ? 9 : 2) {
                    float *one = malloc(sizeof(float) * (size_t)qn);
                    run_attn(b, &s, t, 1, one);
                    if (exact)
                        bad += memcmp(one, got + (int64_t)t * qn, sizeof(float) * (size_t)qn) != 0;
                    else
                        for (int i = 0; i < qn; i++)
                            bad += !(fabs(one[i] - got[(int64_t)t * qn + i]) <= attn_tol(bi, c));
                    free(one);
                }
                CHECK_MSG(bad == 0, "case %zu %s: attention depends on the batch", ci, g_backends[bi]);
            }
        free(want), free(ref), free(got), free(got1);
        attn_free(&s);
    }
}

/* kv_store of n tokens of kv_dim values into shuffled slots of a cache of n_slots rows;
 * F16 must equal the scalar round-to-nearest-even conversion bit for bit. */
static void kv_store_case(int n, int kvd, int n_slots)
{
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)n_slots);
    for (int i = 0; i < n_slots; i++)
        slots[i] = i;
    for (int i = n_slots - 1; i > 0; i--) {
        int j = (int)(rng_u64() % (uint64_t)(i + 1)), tmp = slots[i];
        slots[i] = slots[j], slots[j] = tmp;
    }
    size_t nv = (size_t)n * kvd;
    float *k = malloc(sizeof(float) * nv), *v = malloc(sizeof(float) * nv);
    fill_f(k, (int64_t)nv, 3.0f), fill_f(v, (int64_t)nv, 3.0f);
    for (int f16 = 0; f16 < 2; f16++) {
        size_t es = f16 ? 2 : 4, bytes = es * (size_t)n_slots * kvd;
        for (int bi = 0; bi < N_BACKENDS; bi++)
            for (int th = 0; th < 2; th++) {
                struct be *b = g.cand[bi][th];
                if (!b)
                    continue;
                uint8_t *kc = calloc(1, bytes), *vc = calloc(1, bytes);
                void *dk = dev_from(b, kc, bytes), *dv = dev_from(b, vc, bytes);
                float *dkk = dev_from(b, k, sizeof(float) * nv);
                float *dvv = dev_from(b, v, sizeof(float) * nv);
                int32_t *ds = dev_from(b, slots, sizeof(int32_t) * (size_t)n);
                b->ops->kv_store(b, dk, dv, f16 ? DT_F16 : DT_F32, dkk, dvv, ds, n, kvd);
                host_from(b, kc, dk, bytes), host_from(b, vc, dv, bytes);
                int bad = 0;
                for (int t = 0; t < n; t++)
                    for (int i = 0; i < kvd; i++) {
                        size_t idx = (size_t)slots[t] * kvd + i;
                        float ek = k[(size_t)t * kvd + i], ev = v[(size_t)t * kvd + i];
                        if (f16)
                            bad += ((uint16_t *)kc)[idx] != half_f32_to_f16(ek) ||
                                   ((uint16_t *)vc)[idx] != half_f32_to_f16(ev);
                        else
                            bad += ((float *)kc)[idx] != ek || ((float *)vc)[idx] != ev;
                    }
                CHECK_MSG(bad == 0, "%s kv_store %s n=%d: %d wrong", g_backends[bi],
                          f16 ? "F16" : "F32", n, bad);
                b->ops->free(b, dk), b->ops->free(b, dv), b->ops->free(b, dkk);
                b->ops->free(b, dvv), b->ops->free(b, ds);
                free(kc), free(vc);
            }
    }
    free(k), free(v), free(slots);
}

static void test_kv_store(void)
{
    rng_seed(600);
    kv_store_case(5, 48, 16);     /* a decode-sized step, run on the caller */
    kv_store_case(300, 260, 512); /* a prefill-sized step, split over the pool */
}

/* ---- norms, rope, element-wise ---- */

static void rmsnorm_case(int dim)
{
    int rows = 5;
    rng_seed(700 + (uint64_t)dim);
    float *x = malloc(sizeof(float) * (size_t)rows * dim), *w = malloc(sizeof(float) * (size_t)dim);
    float *ref = malloc(sizeof(float) * (size_t)rows * dim), *got = malloc(sizeof(float) * (size_t)rows * dim);
    fill_f(x, rows * dim, 4.0f), fill_f(w, dim, 1.0f);
    float *dx = dev_from(g.ref, x, sizeof(float) * (size_t)rows * dim);
    float *dw = dev_from(g.ref, w, sizeof(float) * (size_t)dim);
    g.ref->ops->rmsnorm(g.ref, dx, dx, dw, rows, dim, 1e-5f); /* in place */
    host_from(g.ref, ref, dx, sizeof(float) * (size_t)rows * dim);
    g.ref->ops->free(g.ref, dx), g.ref->ops->free(g.ref, dw);
    double err = 0;
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++)
            ss += (double)x[r * dim + i] * x[r * dim + i];
        double s = 1.0 / sqrt(ss / dim + 1e-5);
        for (int i = 0; i < dim; i++) {
            double e = x[r * dim + i] * s * w[i];
            err = fmax(err, fabs(ref[r * dim + i] - e) / (fabs(e) + 1e-3));
        }
    }
    CHECK_MSG(err < 1e-5, "scalar rmsnorm rel err %g", err);
    for (int bi = 0; bi < N_BACKENDS; bi++)
        for (int th = 0; th < 2; th++) {
            struct be *b = g.cand[bi][th];
            if (!b)
                continue;
            float *bx = dev_from(b, x, sizeof(float) * (size_t)rows * dim);
            float *bw = dev_from(b, w, sizeof(float) * (size_t)dim);
            float *by = dev_from(b, NULL, sizeof(float) * (size_t)rows * dim);
            b->ops->rmsnorm(b, by, bx, bw, rows, dim, 1e-5f);
            host_from(b, got, by, sizeof(float) * (size_t)rows * dim);
            double e2 = 0;
            for (int i = 0; i < rows * dim; i++)
                e2 = fmax(e2, fabs(got[i] - ref[i]) / (fabs(ref[i]) + 1e-3));
            /* CPU levels share the natural-order float sum: exact; other backends sum in
             * another order: within 1e-5 of double, the bound the reference itself meets */
            if (is_cpu(bi)) {
                CHECK_MSG(e2 == 0.0, "%s rmsnorm rel err %g vs reference", g_backends[bi], e2);
            } else {
                e2 = 0;
                for (int r = 0; r < rows; r++) {
                    double ss = 0;
                    for (int i = 0; i < dim; i++)
                        ss += (double)x[r * dim + i] * x[r * dim + i];
                    double sc = 1.0 / sqrt(ss / dim + 1e-5);
                    for (int i = 0; i < dim; i++) {
                        double ev = x[r * dim + i] * sc * w[i];
                        e2 = fmax(e2, fabs(got[r * dim + i] - ev) / (fabs(ev) + 1e-3));
                    }
                }
                CHECK_MSG(e2 < 1e-5, "%s rmsnorm rel err %g vs double", g_backends[bi], e2);
            }
            /* one row alone gives the same bits as inside the batch */
            float *one = malloc(sizeof(float) * (size_t)dim);
            b->ops->rmsnorm(b, by, bx + 3 * dim, bw, 1, dim, 1e-5f);
            host_from(b, one, by, sizeof(float) * (size_t)dim);
            CHECK_MSG(memcmp(one, got + 3 * dim, sizeof(float) * (size_t)dim) == 0,
                      "%s rmsnorm row depends on the batch", g_backends[bi]);
            free(one);
            b->ops->free(b, bx), b->ops->free(b, bw), b->ops->free(b, by);
        }
    free(x), free(w), free(ref), free(got);
}

static void test_rmsnorm(void)
{
    rmsnorm_case(2048 + 16 + 3); /* tails of every vector width */
    rmsnorm_case(4096);          /* the device's float4 paths: 1, 2, 4 vectors a thread */
    rmsnorm_case(2048);
    rmsnorm_case(14336);
}

/* Rope is checked bit for bit against the PyTorch float32 formula written out here. */
static void test_rope(void)
{
    int n_tok = 4, n_head = 3, hd = 64;
    int32_t pos[4] = {0, 1, 77, 4095};
    float inv[32];
    for (int mode = 0; mode < 2; mode++)
        for (int rot = 64; rot >= 32; rot -= 32) {
            for (int i = 0; i < rot / 2; i++)
                inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)rot);
            rng_seed(800 + mode);
            size_t nb = sizeof(float) * (size_t)n_tok * n_head * hd;
            float *x = malloc(nb), *want = malloc(nb), *got = malloc(nb);
            fill_f(x, n_tok * n_head * hd, 2.0f);
            memcpy(want, x, nb);
            float msc = mode ? 1.25f : 1.0f;
            for (int t = 0; t < n_tok; t++)
                for (int h = 0; h < n_head; h++)
                    for (int i = 0; i < rot / 2; i++) {
                        float ang = (float)pos[t] * inv[i];
                        float c = cosf(ang) * msc, s = sinf(ang) * msc;
                        float *v = want + (t * n_head + h) * hd;
                        int a = mode ? i : 2 * i, b2 = mode ? i + rot / 2 : 2 * i + 1;
                        float x0 = v[a], x1 = v[b2];
                        v[a] = x0 * c + (-x1) * s; /* x*cos + rotate_half(x)*sin */
                        v[b2] = x1 * c + x0 * s;
                    }
            for (int bi = 0; bi < N_BACKENDS; bi++) {
                struct be *b = g.cand[bi][1] ? g.cand[bi][1] : g.cand[bi][0];
                if (!b)
                    continue;
                float *dx = dev_from(b, x, nb), *di = dev_from(b, inv, sizeof inv);
                int32_t *dp = dev_from(b, pos, sizeof pos);
                b->ops->rope(b, dx, dp, n_tok, n_head, hd, rot, mode, di, msc);
                host_from(b, got, dx, nb);
                double e = 0;
                for (int i = 0; i < n_tok * n_head * hd; i++)
                    e = fmax(e, fabs(got[i] - want[i]));
                CHECK_MSG(e <= (strncmp(g_backends[bi], "cpu", 3) == 0 ? 0.0 : 1e-5),
                          "%s rope mode %d rot %d: max err %g", g_backends[bi], mode, rot, e);
                b->ops->free(b, dx), b->ops->free(b, di), b->ops->free(b, dp);
            }
            free(x), free(want), free(got);
        }
}

/* rope_kv_store (optional) equals rope(q), rope(k), kv_store(k, v) on the same backend, bit
 * for bit: q, k and both caches. */
static void rope_kv_case(struct be *b, const char *who, int n_tok, int n_head, int n_kv, int hd,
                         int rot, int mode, int kv_dtype)
{
    int kvd = n_kv * hd, n_slots = 3 * n_tok, es = kv_dtype == DT_F16 ? 2 : 4;
    size_t qn = (size_t)n_tok * n_head * hd, kn = (size_t)n_tok * kvd, cb = (size_t)n_slots * kvd * es;
    float *q = malloc(qn * 4), *k = malloc(kn * 4), *v = malloc(kn * 4), *inv = malloc((size_t)rot / 2 * 4);
    int32_t *pos = malloc((size_t)n_tok * 4), *slots = malloc((size_t)n_tok * 4);
    fill_f(q, (int64_t)qn, 2.0f), fill_f(k, (int64_t)kn, 2.0f), fill_f(v, (int64_t)kn, 2.0f);
    for (int i = 0; i < rot / 2; i++)
        inv[i] = powf(10000.0f, -2.0f * i / rot);
    for (int t = 0; t < n_tok; t++)
        pos[t] = 7 + 13 * t, slots[t] = (11 * t + 2) % n_slots; /* distinct: 11 is prime to n_slots */
    float *out[2][2];
    uint8_t *caches[2][2];
    for (int f = 0; f < 2; f++) {
        float *dq = dev_from(b, q, qn * 4), *dk = dev_from(b, k, kn * 4), *dv = dev_from(b, v, kn * 4);
        float *di = dev_from(b, inv, (size_t)rot / 2 * 4);
        int32_t *dp = dev_from(b, pos, (size_t)n_tok * 4), *ds = dev_from(b, slots, (size_t)n_tok * 4);
        uint8_t *zero = calloc(1, cb);
        void *kc = dev_from(b, zero, cb), *vc = dev_from(b, zero, cb);
        if (f) {
            struct be_rope_kv r = {.q = dq, .k = dk, .v = dv, .pos = dp, .slots = ds, .n_tok = n_tok,
                                   .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd,
                                   .rot_dim = rot, .mode = mode, .inv_freq = di, .mscale = 1.0f,
                                   .k_cache = kc, .v_cache = vc, .kv_dtype = kv_dtype};
            b->ops->rope_kv_store(b, &r);
        } else {
            b->ops->rope(b, dq, dp, n_tok, n_head, hd, rot, mode, di, 1.0f);
            b->ops->rope(b, dk, dp, n_tok, n_kv, hd, rot, mode, di, 1.0f);
            b->ops->kv_store(b, kc, vc, kv_dtype, dk, dv, ds, n_tok, kvd);
        }
        out[f][0] = malloc(qn * 4), out[f][1] = malloc(kn * 4);
        caches[f][0] = malloc(cb), caches[f][1] = malloc(cb);
        host_from(b, out[f][0], dq, qn * 4), host_from(b, out[f][1], dk, kn * 4);
        host_from(b, caches[f][0], kc, cb), host_from(b, caches[f][1], vc, cb);
        b->ops->free(b, dq), b->ops->free(b, dk), b->ops->free(b, dv), b->ops->free(b, di);
        b->ops->free(b, dp), b->ops->free(b, ds), b->ops->free(b, kc), b->ops->free(b, vc);
        free(zero);
    }
    const char *what[4] = {"q", "k", "K cache", "V cache"};
    size_t sz[4] = {qn * 4, kn * 4, cb, cb};
    const uint8_t *pa[4] = {(uint8_t *)out[0][0], (uint8_t *)out[0][1], caches[0][0], caches[0][1]};
    const uint8_t *pb[4] = {(uint8_t *)out[1][0], (uint8_t *)out[1][1], caches[1][0], caches[1][1]};
    for (int i = 0; i < 4; i++) {
        size_t d = 0;
        while (d < sz[i] && pa[i][d] == pb[i][d])
            d++;
        CHECK_MSG(d == sz[i], "%s rope_kv_store (hd %d rot %d mode %d kv %s): %s differs from "
                  "rope + kv_store at byte %zu of %zu (unfused %02x%02x, fused %02x%02x)", who, hd,
                  rot, mode, dtype_name(kv_dtype), what[i], d, sz[i], d < sz[i] ? pa[i][d | 1] : 0,
                  d < sz[i] ? pa[i][d & ~(size_t)1] : 0, d < sz[i] ? pb[i][d | 1] : 0,
                  d < sz[i] ? pb[i][d & ~(size_t)1] : 0);
    }
    for (int f = 0; f < 2; f++)
        free(out[f][0]), free(out[f][1]), free(caches[f][0]), free(caches[f][1]);
    free(q), free(k), free(v), free(inv), free(pos), free(slots);
}

static void test_rope_kv_store(void)
{
    int ran = 0;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        struct be *b = g.cand[bi][0];
        if (!b || !b->ops->rope_kv_store)
            continue;
        ran = 1;
        rng_seed(900);
        rope_kv_case(b, g_backends[bi], 5, 8, 2, 64, 64, BE_ROPE_NORM, DT_F16);
        rope_kv_case(b, g_backends[bi], 3, 4, 4, 128, 32, BE_ROPE_NEOX, DT_F32);
        rope_kv_case(b, g_backends[bi], 70, 32, 8, 128, 128, BE_ROPE_NEOX, DT_F16);
    }
    if (!ran)
        fprintf(stderr, "SKIP rope_kv_store: no backend here has it\n");
}

/* matmul_fused with rope (q/k/v projection + rope + K/V store in one op) against the same
 * projection without it followed by rope_kv_store: q, k, v and both caches bit-identical.
 * n > 16 rows takes the CUDA backend's unfused fallback. */
static void matmul_rope_case(struct be *b, const char *who, int n, int n_head, int n_kv, int hd,
                             int rot, int mode, int kv_dtype, int dt, int k, int with_norm)
{
    int kvd = n_kv * hd, n_slots = 97, es = kv_dtype == DT_F16 ? 2 : 4; /* prime, > n */
    const int m[3] = {n_head * hd, kvd, kvd};
    size_t cb = (size_t)n_slots * kvd * es, xb = sizeof(float) * (size_t)n * k;
    float *x = malloc(xb), *gn = malloc(sizeof(float) * (size_t)k), *inv = malloc((size_t)rot / 2 * 4);
    int32_t *pos = malloc((size_t)n * 4), *slots = malloc((size_t)n * 4);
    fill_f(x, (int64_t)n * k, 3.0f), fill_f(gn, k, 1.0f);
    for (int i = 0; i < rot / 2; i++)
        inv[i] = powf(10000.0f, -2.0f * i / rot);
    for (int t = 0; t < n; t++)
        pos[t] = 5 + 29 * t, slots[t] = (7 * t + 3) % n_slots; /* distinct: n <= 32 < 97 */
    size_t wb[3];
    void *w[3];
    struct be_tensor t[3];
    for (int i = 0; i < 3; i++) {
        w[i] = make_weights(dt, m[i], k, &wb[i]);
        t[i] = (struct be_tensor){.dtype = dt, .ne = {k, m[i], 1, 1}, .nbytes = wb[i]};
        t[i].data = dev_from(b, w[i], wb[i]);
    }
    uint8_t *res[2][5];
    size_t sz[5] = {sizeof(float) * (size_t)n * m[0], sizeof(float) * (size_t)n * m[1],
                    sizeof(float) * (size_t)n * m[2], cb, cb};
    for (int f = 0; f < 2; f++) {
        float *dx = dev_from(b, x, xb), *dg = dev_from(b, gn, sizeof(float) * (size_t)k);
        float *di = dev_from(b, inv, (size_t)rot / 2 * 4);
        int32_t *dp = dev_from(b, pos, (size_t)n * 4), *ds = dev_from(b, slots, (size_t)n * 4);
        uint8_t *zero = calloc(1, cb);
        void *kc = dev_from(b, zero, cb), *vc = dev_from(b, zero, cb);
        float *dy[3];
        for (int i = 0; i < 3; i++)
            dy[i] = dev_from(b, NULL, sz[i]);
        struct be_rope_kv r = {.q = dy[0], .k = dy[1], .v = dy[2], .pos = dp, .slots = ds,
                               .n_tok = n, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd,
                               .rot_dim = rot, .mode = mode, .inv_freq = di, .mscale = 1.0f,
                               .k_cache = kc, .v_cache = vc, .kv_dtype = kv_dtype};
        struct be_mm mm = {.mode = BE_MM_PLAIN, .n = n, .x = dx, .n_w = 3,
                           .norm = with_norm ? dg : NULL, .eps = 1e-5f, .rope = f ? &r : NULL};
        for (int i = 0; i < 3; i++)
            mm.w[i] = &t[i], mm.y[i] = dy[i];
        b->ops->matmul_fused(b, &mm);
        if (!f)
            b->ops->rope_kv_store(b, &r);
        void *src[5] = {dy[0], dy[1], dy[2], kc, vc};
        for (int i = 0; i < 5; i++) {
            res[f][i] = malloc(sz[i]);
            host_from(b, res[f][i], src[i], sz[i]);
        }
        for (int i = 0; i < 3; i++)
            b->ops->free(b, dy[i]);
        b->ops->free(b, dx), b->ops->free(b, dg), b->ops->free(b, di), b->ops->free(b, dp);
        b->ops->free(b, ds), b->ops->free(b, kc), b->ops->free(b, vc);
        free(zero);
    }
    static const char *const what[5] = {"q", "k", "v", "K cache", "V cache"};
    for (int i = 0; i < 5; i++) {
        size_t d = 0;
        while (d < sz[i] && res[0][i][d] == res[1][i][d])
            d++;
        CHECK_MSG(d == sz[i], "%s matmul_fused + rope (n %d hd %d rot %d mode %d %s %s norm %d): "
                  "%s differs from the unfused pair at byte %zu of %zu", who, n, hd, rot, mode,
                  dtype_name(dt), dtype_name(kv_dtype), with_norm, what[i], d, sz[i]);
    }
    for (int i = 0; i < 3; i++)
        b->ops->free(b, t[i].data), free(w[i]);
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 5; i++)
            free(res[f][i]);
    free(x), free(gn), free(inv), free(pos), free(slots);
}

static void test_matmul_rope(void)
{
    int ran = 0;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        struct be *b = g.cand[bi][0];
        if (!b || !b->ops->matmul_fused || !b->ops->rope_kv_store)
            continue;
        ran = 1;
        rng_seed(950);
        const char *who = g_backends[bi];
        matmul_rope_case(b, who, 1, 4, 2, 64, 64, BE_ROPE_NEOX, DT_F16, DT_BF16, 256, 1);
        matmul_rope_case(b, who, 5, 4, 2, 128, 64, BE_ROPE_NORM, DT_F32, DT_BF16, 288, 0);
        matmul_rope_case(b, who, 16, 8, 2, 32, 32, BE_ROPE_NEOX, DT_F16, DT_F16, 512, 1);
        matmul_rope_case(b, who, 3, 2, 1, 256, 256, BE_ROPE_NEOX, DT_F16, DT_BF16, 2048, 1);
        matmul_rope_case(b, who, 20, 4, 4, 64, 64, BE_ROPE_NORM, DT_F16, DT_BF16, 256, 1);
        matmul_rope_case(b, who, 2, 4, 2, 48, 16, BE_ROPE_NEOX, DT_F16, DT_F32, 64, 0);
    }
    if (!ran)
        fprintf(stderr, "SKIP matmul_fused + rope: no backend here has both\n");
}

static void test_elementwise(void)
{
    int64_t n = 100003;
    rng_seed(900);
    size_t nb = sizeof(float) * (size_t)n;
    float *a = malloc(nb), *x = malloc(nb), *got = malloc(nb);
    fill_f(a, n, 6.0f), fill_f(x, n, 2.0f);
    for (int bi = 0; bi < N_BACKENDS; bi++)
        for (int th = 0; th < 2; th++) {
            struct be *b = g.cand[bi][th];
            if (!b)
                continue;
            float *da = dev_from(b, a, nb), *dx = dev_from(b, x, nb), *dy = dev_from(b, NULL, nb);
            double e;
            for (int act = 0; act < 2; act++) {
                b->ops->act_mul(b, dy, da, dx, n, act);
                host_from(b, got, dy, nb);
                e = 0;
                for (int64_t i = 0; i < n; i++) {
                    double g0 = a[i];
                    double f = act == BE_ACT_SILU
                                   ? g0 / (1 + exp(-g0))
                                   : 0.5 * g0 * (1 + tanh(sqrt(2 / M_PI) * (g0 + 0.044715 * g0 * g0 * g0)));
                    double want = f * x[i];
                    /* 1 + tanh(.) cancels for negative gate values: allow float eps of |g x| */
                    e = fmax(e, fabs(got[i] - want) / (fabs(want) + 0.5 * fabs(g0 * x[i]) + 1e-6));
                }
                CHECK_MSG(e < 2e-6, "%s act_mul %d rel err %g", g_backends[bi], act, e);
            }
            b->ops->add(b, dy, da, dx, n);
            host_from(b, got, dy, nb);
            int bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += got[i] != a[i] + x[i];
            CHECK_MSG(bad == 0, "%s add", g_backends[bi]);
            b->ops->scale(b, dy, dx, 0.37f, n);
            host_from(b, got, dy, nb);
            bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += got[i] != x[i] * 0.37f;
            CHECK_MSG(bad == 0, "%s scale", g_backends[bi]);
            if (b->ops->softcap) {
                b->ops->softcap(b, dy, da, 3.0f, n);
                host_from(b, got, dy, nb);
                e = 0;
                for (int64_t i = 0; i < n; i++)
                    e = fmax(e, fabs(got[i] - 3.0 * tanh(a[i] / 3.0)));
                CHECK_MSG(e < 1e-6, "%s softcap err %g", g_backends[bi], e);
            }
            /* add_row: (rows, dim) += bias */
            int rows = 7, dim = 1000;
            b->ops->upload(b, dy, x, sizeof(float) * (size_t)rows * dim, NULL);
            b->ops->add_row(b, dy, da, rows, dim);
            host_from(b, got, dy, sizeof(float) * (size_t)rows * dim);
            bad = 0;
            for (int r = 0; r < rows; r++)
                for (int i = 0; i < dim; i++)
                    bad += got[r * dim + i] != x[r * dim + i] + a[i];
            CHECK_MSG(bad == 0, "%s add_row", g_backends[bi]);
            b->ops->free(b, da), b->ops->free(b, dx), b->ops->free(b, dy);
        }
    free(a), free(x), free(got);
}

/* A 12-op chain. Run as one list on fresh inputs uploaded into the same buffers, three
 * times (a device backend records the list, captures it as a graph the second time and
 * replays it the third), it must equal bit for bit the same chain run one op at a time
 * (a sync after each op, so nothing is recorded), and the scalar reference within 1e-4. */
static void op_chain(struct be *b, float *dy, const float *dx, const float *dw, int rows, int dim,
                     int step_sync)
{
    int n = rows * dim;
    b->ops->scale(b, dy, dx, 0.5f, n);
    for (int k = 0; k < 5; k++) {
        b->ops->add(b, dy, dy, dx, n);
        if (step_sync)
            b->ops->sync(b, NULL);
        b->ops->rmsnorm(b, dy, dy, dw, rows, dim, 1e-5f);
        if (step_sync)
            b->ops->sync(b, NULL);
    }
    b->ops->add_row(b, dy, dw, rows, dim);
}

static void test_op_chain(void)
{
    int rows = 3, dim = 1000, n = rows * dim;
    size_t nb = sizeof(float) * (size_t)n, wb = sizeof(float) * (size_t)dim;
    float *x = malloc(nb), *w = malloc(wb), *want = malloc(nb), *got = malloc(nb),
          *one = malloc(nb);
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        struct be *b = g.cand[bi][0];
        if (!b || is_cpu(bi))
            continue;
        float *dx = dev_from(b, NULL, nb), *dy = dev_from(b, NULL, nb), *dw = dev_from(b, NULL, wb);
        for (int run = 0; run < 3; run++) {
            rng_seed(1000 + (uint64_t)run);
            fill_f(x, n, 2.0f), fill_f(w, dim, 1.0f);
            b->ops->upload(b, dx, x, nb, NULL);
            b->ops->upload(b, dw, w, wb, NULL);
            op_chain(b, dy, dx, dw, rows, dim, 0);
            host_from(b, got, dy, nb);
            op_chain(b, dy, dx, dw, rows, dim, 1);
            host_from(b, one, dy, nb);
            CHECK_MSG(memcmp(got, one, nb) == 0, "%s op chain run %d: list != op by op",
                      g_backends[bi], run);
            struct be *r = g.ref;
            float *rx = dev_from(r, x, nb), *ry = dev_from(r, NULL, nb), *rw = dev_from(r, w, wb);
            op_chain(r, ry, rx, rw, rows, dim, 0);
            host_from(r, want, ry, nb);
            r->ops->free(r, rx), r->ops->free(r, ry), r->ops->free(r, rw);
            double e = 0;
            for (int i = 0; i < n; i++)
                e = fmax(e, fabs(got[i] - want[i]) / (fabs(want[i]) + 1e-2));
            CHECK_MSG(e < 1e-4, "%s op chain run %d: rel err %g", g_backends[bi], run, e);
        }
        b->ops->free(b, dx), b->ops->free(b, dy), b->ops->free(b, dw);
    }
    free(x), free(w), free(want), free(got), free(one);
}

/* fetch_start / fetch_wait (optional): a fetch sees the work queued before it, returns
 * without waiting, and its wait ignores work queued after it; the two slots are
 * independent; a bad slot or size is refused. */
static void test_fetch(void)
{
    enum { N = 4096 };
    float *x = malloc(N * sizeof(float)), *got = malloc(N * sizeof(float));
    fill_f(x, N, 1.0f);
    int ran = 0;
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        struct be *b = g.cand[bi][0];
        if (!b || !b->ops->fetch_start || !b->ops->fetch_wait)
            continue;
        ran = 1;
        struct cerr e = {0};
        float *dx = dev_from(b, x, N * sizeof(float)), *dy = dev_from(b, NULL, N * sizeof(float));
        for (int rep = 0; rep < 3; rep++) {
            b->ops->scale(b, dy, dx, 2.0f, N);
            CHECK_EQ_INT(b->ops->fetch_start(b, 0, dy, N * sizeof(float), &e), 0);
            b->ops->scale(b, dy, dx, 3.0f, N); /* after the fetch: not in it */
            CHECK_EQ_INT(b->ops->fetch_start(b, 1, dy + 100, 64 * sizeof(float), &e), 0);
            b->ops->scale(b, dy, dx, 5.0f, N);
            CHECK_EQ_INT(b->ops->fetch_wait(b, 0, got, N * sizeof(float), &e), 0);
            int bad = 0;
            for (int i = 0; i < N; i++)
                bad += got[i] != 2.0f * x[i];
            CHECK_MSG(bad == 0, "%s fetch slot 0: %d values differ", g_backends[bi], bad);
            CHECK_EQ_INT(b->ops->fetch_wait(b, 1, got, 64 * sizeof(float), &e), 0);
            bad = 0;
            for (int i = 0; i < 64; i++)
                bad += got[i] != 3.0f * x[100 + i];
            CHECK_MSG(bad == 0, "%s fetch slot 1: %d values differ", g_backends[bi], bad);
        }
        CHECK_EQ_INT(b->ops->fetch_start(b, 2, dy, 16, &e), CERR_INVALID);
        CHECK_EQ_INT(b->ops->fetch_start(b, 0, dy, BE_FETCH_MAX + 4, &e), CERR_INVALID);
        CHECK_EQ_INT(b->ops->fetch_wait(b, -1, got, 16, &e), CERR_INVALID);
        host_from(b, got, dy, N * sizeof(float)); /* the stream still works */
        CHECK(got[7] == 5.0f * x[7]);
        b->ops->free(b, dx), b->ops->free(b, dy);
    }
    if (!ran)
        fprintf(stderr, "SKIP fetch: no backend here has it\n");
    free(x), free(got);
}

/* A device backend that cannot open (no GPU, no driver, no CUDA in this build) fails with
 * an error code and a sentence naming the cause; it never crashes. */
static void test_unavailable_backends(void)
{
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        if (is_cpu(bi) || g.cand[bi][0])
            continue;
        struct be_config cfg = {0};
        struct cerr e = {0};
        struct be *b = be_new(g_backends[bi], &cfg, &e);
        CHECK(b == NULL);
        be_free(b);
        CHECK_MSG(e.code != 0 && (strncmp(e.msg, "cuda: ", 6) == 0 ||
                                  strstr(e.msg, "no CUDA backend") != NULL),
                  "%s: unclear error '%s'", g_backends[bi], e.msg);
    }
}

int main(void)
{
    /* every repacked CPU kernel (Q6_K is not repacked by default), unless the caller chose */
    setenv("CINFER_CPU_REPACK", "all", 0);
    g.ref = open_be("cpu:scalar", 1);
    if (!g.ref) {
        fprintf(stderr, "cannot open the scalar CPU backend\n");
        return 1;
    }
    for (int bi = 0; bi < N_BACKENDS; bi++) {
        g.cand[bi][0] = open_be(g_backends[bi], 1);
        g.cand[bi][1] = g.cand[bi][0] ? open_be(g_backends[bi], 4) : NULL;
        fprintf(stderr, "backend %-11s %s\n", g_backends[bi],
                g.cand[bi][0] ? "tested (1 and 4 threads)" : "not available here, skipped");
    }
    RUN(test_matmul_known_answer);
    RUN(test_matmul_vs_ref);
    RUN(test_matmul_batch_invariance);
    RUN(test_matmul_fused);
    RUN(test_matmul_chain);
    RUN(test_argmax);
    RUN(test_topcand);
    RUN(test_sample);
    RUN(test_sample_distribution);
    RUN(test_sample_mask);
    RUN(test_get_rows);
    RUN(test_attention);
    RUN(test_kv_store);
    RUN(test_rmsnorm);
    RUN(test_rope);
    RUN(test_rope_kv_store);
    RUN(test_matmul_rope);
    RUN(test_elementwise);
    RUN(test_op_chain);
    RUN(test_fetch);
    RUN(test_unavailable_backends);
    for (int bi = 0; bi < N_BACKENDS; bi++)
        for (int th = 0; th < 2; th++)
            be_free(g.cand[bi][th]);
    be_free(g.ref);
    return harness_done();
}
