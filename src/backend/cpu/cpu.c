/* cpu.c — the CPU backend object: vtable, memory, ISA selection, scratch.
 *
 * Memory is host memory (aligned_alloc); upload/download are memcpy; weights stay where the
 * loader put them (usually the mmap'd file). The kernel table is filled once here from the
 * chosen ISA level; ops live in matmul.c, attn.c and ops.c.
 */
#include "backend/cpu/cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/be_sample.h"
#include "backend/cpu/cpu_int.h"
#include "util/log.h"

static const char *const g_isa_names[] = {"scalar", "avx2", "avx512"};

static int isa_best(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!avx2)
        return CPU_ISA_SCALAR;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni"))
        return CPU_ISA_AVX512;
    return CPU_ISA_AVX2;
#else
    return CPU_ISA_SCALAR;
#endif
}

static int isa_from_name(const char *s)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(s, g_isa_names[i]) == 0)
            return i;
    return -1;
}

int be_cpu_isa_supported(const char *name)
{
    int want = name ? isa_from_name(name) : -1;
    return want >= 0 && want <= isa_best();
}

static int isa_choose(void)
{
    int best = isa_best();
    const char *env = getenv("CINFER_CPU_ISA");
    if (!env || !*env)
        return best;
    int want = isa_from_name(env);
    if (want < 0) {
        log_warn("cpu: CINFER_CPU_ISA=%s is not scalar|avx2|avx512; using %s", env,
                 g_isa_names[best]);
        return best;
    }
    if (want > best) {
        log_warn("cpu: this CPU cannot run %s kernels; using %s", env, g_isa_names[best]);
        return best;
    }
    return want;
}

const char *be_cpu_isa(const struct be *b) { return g_isa_names[((const struct cpu_be *)b)->isa]; }
int be_cpu_threads(const struct be *b) { return ((const struct cpu_be *)b)->n_threads; }

size_t be_cpu_repacked_bytes(const struct be *b, size_t *src_bytes)
{
    const struct cpu_be *cb = (const struct cpu_be *)b;
    if (src_bytes)
        *src_bytes = cb->rp_src_bytes;
    return cb->rp_bytes;
}

static int isa_has_vbmi(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vbmi");
#else
    return 0;
#endif
}

static int isa_has_gfni(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("gfni");
#else
    return 0;
#endif
}

static int buf_reserve(void **buf, size_t *have, size_t n, const char *what)
{
    if (n <= *have)
        return 0;
    size_t cap = (n + 4095) & ~(size_t)4095;
    void *p = aligned_alloc(64, cap);
    if (!p) {
        log_error("cpu: out of memory for a %zu-byte %s buffer", cap, what);
        return -1;
    }
    free(*buf);
    *buf = p;
    *have = cap;
    return 0;
}

int cpu_qbuf_reserve(struct cpu_be *cb, size_t n)
{
    return buf_reserve(&cb->qbuf, &cb->qbuf_cap, n, "activation");
}

int cpu_abuf_reserve(struct cpu_be *cb, size_t n)
{
    return buf_reserve(&cb->abuf, &cb->abuf_cap, n, "attention");
}

/* ---- memory ---- */

static void *cpu_alloc(struct be *b, size_t bytes)
{
    (void)b;
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n < bytes)
        return NULL;
    return aligned_alloc(64, n ? n : 64);
}

/* Index of repacked copy p in cb->rp, or -1. */
static int rp_find(const struct cpu_be *cb, const void *p)
{
    for (int i = 0; i < cb->n_rp; i++)
        if (cb->rp[i] == p)
            return i;
    return -1;
}

static void cpu_free(struct be *b, void *p)
{
    struct cpu_be *cb = cpu_be(b);
    int i = p ? rp_find(cb, p) : -1;
    if (i >= 0) { /* a repacked copy handed out by weight_prepare */
        cb->rp_bytes -= cb->rp[i]->bytes;
        cb->rp_src_bytes -= dtype_row_bytes(cb->rp[i]->dtype, cb->rp[i]->k) * (size_t)cb->rp[i]->rows;
        cb->rp[i] = cb->rp[--cb->n_rp];
    }
    free(p);
}

/* 1 when [a, z) lies in one read-only private mapping of a file (/proc/self/maps). */
static int ro_file_mapping(uintptr_t a, uintptr_t z)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[512];
    int ok = 0;
    while (!ok && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off, ino;
        char perm[8];
        unsigned dmaj, dmin;
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perm, &off, &dmaj, &dmin, &ino) == 7 &&
            lo <= a && z <= hi)
            ok = ino != 0 && perm[0] == 'r' && perm[1] == '-' && perm[3] == 'p';
    }
    fclose(f);
    return ok;
}

/* Drops this process's pages of [p, p + n) when they are a read-only private file mapping
 * (the mmap'd model): MADV_DONTNEED only unmaps clean file pages there (a later access
 * re-reads the file; nothing is written). Anything else (heap memory) is left alone. */
static void release_file_pages(const void *p, size_t n)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0)
        return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    uintptr_t z = ((uintptr_t)p + n) & ~((uintptr_t)pg - 1);
    if (z > a && ro_file_mapping(a, z))
        (void)madvise((void *)a, z - a, MADV_DONTNEED);
}

enum { RP_CHUNK = 64 /* groups per pool task */ };
struct rp_task {
    struct rp_hdr *h;
    const void *src;
    int64_t ng;
};

static void rp_chunk(void *arg, int64_t i)
{
    const struct rp_task *t = arg;
    int64_t g1 = (i + 1) * RP_CHUNK;
    rp_fill(t->h, t->src, i * RP_CHUNK, g1 < t->ng ? g1 : t->ng);
}

/* Replaces t->data by a repacked copy (repack.h) when this kernel level has kernels for
 * t's layout. The source is only read; then its pages are released when it is the mmap'd
 * file (release_file_pages). A failure leaves t as it was: the file layout always works. */
static void weight_repack(struct cpu_be *cb, struct be_tensor *t)
{
    if (!cb->repack || !cb->k.mm_rp[t->dtype] || rp_of(t) || !(cb->repack_types >> t->dtype & 1))
        return;
    if (cb->n_rp == cb->cap_rp) {
        int cap = cb->cap_rp ? 2 * cb->cap_rp : 64;
        struct rp_hdr **n = realloc(cb->rp, sizeof *n * (size_t)cap);
        if (!n)
            return;
        cb->rp = n, cb->cap_rp = cap;
    }
    struct rp_hdr *h = rp_alloc(t->dtype, t->ne[0], t->ne[1]);
    if (h) {
        struct rp_task rt = {h, t->data, (t->ne[1] + RP_ROWS - 1) / RP_ROWS};
        cpu_pool_run(cb->pool, rp_chunk, &rt, (rt.ng + RP_CHUNK - 1) / RP_CHUNK);
    } else {
        log_warn("cpu: no memory to repack %s; it keeps the file layout", t->name ? t->name : "a weight");
        return;
    }
    size_t src = dtype_row_bytes(t->dtype, t->ne[0]) * (size_t)t->ne[1];
    release_file_pages(t->data, src);
    cb->rp[cb->n_rp++] = h;
    cb->rp_bytes += h->bytes;
    cb->rp_src_bytes += src;
    t->data = h;
    t->nbytes = h->bytes;
}

static int cpu_copy(struct be *b, void *dst, const void *src, size_t n, struct cerr *e)
{
    (void)b, (void)e;
    if (n)
        memmove(dst, src, n);
    return 0;
}

static int cpu_weight_prepare(struct be *b, struct be_tensor *t, struct cerr *e)
{
    if (rp_of(t))
        return 0; /* already prepared */
    const char *nm = t->name ? t->name : "tensor";
    if (!dtype_is_weight_type(t->dtype))
        return cerr_set(e, CERR_UNSUPPORTED, "%s: dtype %s is not supported for weights", nm,
                        dtype_name(t->dtype));
    if (t->ne[0] <= 0 || t->ne[1] <= 0 || t->ne[0] > INT32_MAX || t->ne[1] > INT32_MAX)
        return cerr_set(e, CERR_FORMAT, "%s: bad shape [%lld, %lld]", nm, (long long)t->ne[0],
                        (long long)t->ne[1]);
    size_t rb = dtype_row_bytes(t->dtype, t->ne[0]);
    if (rb == 0)
        return cerr_set(e, CERR_FORMAT, "%s: row length %lld is not a multiple of the %s block",
                        nm, (long long)t->ne[0], dtype_name(t->dtype));
    if (!t->data || t->nbytes < rb * (size_t)t->ne[1])
        return cerr_set(e, CERR_FORMAT, "%s: %zu bytes of data, need %zu", nm, t->nbytes,
                        rb * (size_t)t->ne[1]);
    weight_repack(cpu_be(b), t);
    return 0;
}

static int cpu_sync(struct be *b, struct cerr *e)
{
    (void)b, (void)e;
    return 0;
}

/* The op sample: the reference itself (host memory is the backend's memory). */
static void cpu_sample(struct be *b, int32_t *out, float *x, int rows, int n, const void *params,
                       const int32_t *prev)
{
    (void)b;
    be_sample_ref(out, x, rows, n, params, prev);
}

/* The argmax rule of backend.h: lowest index on ties, NaN never wins. */
static void cpu_argmax(struct be *b, int32_t *out, const float *x, int rows, int n)
{
    (void)b;
    for (int r = 0; r < rows; r++) {
        const float *v = x + (size_t)r * n;
        int best = -1;
        for (int i = 0; i < n; i++)
            if (v[i] == v[i] && (best < 0 || v[i] > v[best]))
                best = i;
        out[r] = best < 0 ? 0 : best;
    }
}

/* a ranks before b: larger logit, then lower id (-0 == +0; no NaN among candidates) */
static int tc_before(const struct be_topcand_ent *a, const struct be_topcand_ent *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void tc_sift(struct be_topcand_ent *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && tc_before(&h[m], &h[l]))
            m = l;
        if (r < n && tc_before(&h[m], &h[r]))
            m = r;
        if (m == i)
            return;
        struct be_topcand_ent t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Heapsort into rank order (a heap whose root ranks last, popped to the end): in place, no
 * allocation. The order is total, so the result does not depend on the input order. */
static void tc_sort(struct be_topcand_ent *c, int n)
{
    for (int i = n / 2 - 1; i >= 0; i--)
        tc_sift(c, n, i);
    for (int end = n - 1; end > 0; end--) {
        struct be_topcand_ent t = c[0];
        c[0] = c[end];
        c[end] = t;
        tc_sift(c, end, 0);
    }
}

/* The smallest k with x >= cut[k], for mx >= x >= cut[BE_TOPCAND_BINS]: a guess from the
 * distance (inv = BE_TOPCAND_BINS / span), then exact comparisons with the bounds. */
static int tc_bin(float x, float mx, float inv, const float *cut)
{
    int k = (int)((mx - x) * inv);
    k = k < 0 ? 0 : k > BE_TOPCAND_BINS ? BE_TOPCAND_BINS : k;
    while (k > 0 && x >= cut[k - 1])
        k--;
    while (k < BE_TOPCAND_BINS && x < cut[k])
        k++;
    return k;
}

/* sum over x (n) of e^(x_i - mx), NaN adding nothing: e^ by the ISA's exp_shift on a copy
 * in cb->qbuf (NaN -> -inf), summed in double over 16 lanes in index order, a fixed order
 * that depends only on n. Falls back to expf one by one when the scratch cannot grow. */
#define TC_LANES 16
static double tc_sum(struct cpu_be *cb, const float *x, int n, float mx)
{
    double acc[TC_LANES] = {0}, sum = 0;
    if (cpu_qbuf_reserve(cb, (size_t)n * sizeof(float)) != 0) {
        for (int i = 0; i < n; i++)
            if (x[i] == x[i])
                sum += (double)expf(x[i] - mx);
        return sum;
    }
    float *w = cb->qbuf;
    for (int i = 0; i < n; i++)
        w[i] = x[i] == x[i] ? x[i] : -INFINITY;
    cb->k.exp_shift(w, mx, n);
    int i = 0;
    for (; i + TC_LANES <= n; i += TC_LANES)
        for (int j = 0; j < TC_LANES; j++)
            acc[j] += (double)w[i + j];
    for (; i < n; i++)
        acc[0] += (double)w[i];
    for (int j = 0; j < TC_LANES; j++)
        sum += acc[j];
    return sum;
}

/* The reference topcand (backend.h); the sum's e^ comes from the ISA level's kernel. */
static void cpu_topcand(struct be *b, void *out, const float *x, int rows, int n, float span,
                        int cap)
{
    size_t stride = be_topcand_stride(cap);
    for (int r = 0; r < rows; r++) {
        const float *v = x + (size_t)r * n;
        struct be_topcand_hdr *h = (struct be_topcand_hdr *)((char *)out + (size_t)r * stride);
        struct be_topcand_ent *c = (struct be_topcand_ent *)(h + 1);
        int best = -1;
        for (int i = 0; i < n; i++)
            if (v[i] == v[i] && (best < 0 || v[i] > v[best]))
                best = i;
        float mx = best < 0 ? -INFINITY : v[best];
        h->mx = mx;
        h->argmax = best < 0 ? 0 : best;
        h->sum = 0;
        h->nc = -1;
        if (!isfinite(mx))
            continue;
        h->sum = (float)tc_sum(cpu_be(b), v, n, mx);
        /* hist[k]: values whose smallest bound at or below them is cut(k) */
        int hist[BE_TOPCAND_BINS + 1] = {0}, k_end = -1, nc = 0;
        float cuts[BE_TOPCAND_BINS + 1], inv = span > 0 ? (float)BE_TOPCAND_BINS / span : 0;
        for (int k = 0; k <= BE_TOPCAND_BINS; k++)
            cuts[k] = be_topcand_cut(mx, span, k);
        for (int i = 0; i < n; i++)
            if (v[i] >= cuts[BE_TOPCAND_BINS]) /* NaN: never a candidate */
                hist[tc_bin(v[i], mx, inv, cuts)]++;
        for (int k = 0; k <= BE_TOPCAND_BINS && nc + hist[k] <= cap; k++)
            nc += hist[k], k_end = k;
        if (k_end < 0)
            continue;
        float cut = cuts[k_end];
        nc = 0;
        for (int i = 0; i < n && nc < cap; i++) /* (the count above says they fit) */
            if (v[i] >= cut)
                c[nc].logit = v[i], c[nc++].id = i;
        tc_sort(c, nc);
        h->nc = nc;
    }
}

static void cpu_destroy(struct be *b)
{
    struct cpu_be *cb = cpu_be(b);
    cpu_pool_free(cb->pool);
    free(cb->qbuf);
    free(cb->abuf);
    for (int i = 0; i < cb->n_rp; i++)
        free(cb->rp[i]);
    free(cb->rp);
    free(cb);
}

static const struct be_ops g_cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .weight_prepare = cpu_weight_prepare,
    .sync = cpu_sync,
    .get_rows = cpu_get_rows,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .act_mul = cpu_act_mul,
    .add = cpu_add,
    .add_row = cpu_add_row,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .argmax = cpu_argmax,
    .topcand = cpu_topcand,
    .sample = cpu_sample,
    .lora = cpu_lora,
};

struct be *be_cpu_new(const struct be_config *cfg, struct cerr *e)
{
    int n = cfg ? cfg->n_threads : 0;
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)(c > 256 ? 256 : c) : 1;
    }
    struct cpu_be *cb = calloc(1, sizeof *cb);
    if (!cb) {
        cerr_set(e, CERR_NOMEM, "out of memory creating the CPU backend");
        return NULL;
    }
    cb->base.ops = &g_cpu_ops;
    cb->pool = cpu_pool_new(n, e);
    if (!cb->pool) {
        free(cb);
        return NULL;
    }
    cb->n_threads = cpu_pool_size(cb->pool);
    cb->isa = isa_choose();
    cpu_kernels_scalar(&cb->k);
    if (cb->isa >= CPU_ISA_AVX2) {
        cpu_kernels_avx2(&cb->k);
        cpu_kernels_rp2(&cb->k);
    }
    if (cb->isa >= CPU_ISA_AVX512)
        cpu_kernels_avx512(&cb->k);
    if (cb->isa >= CPU_ISA_AVX512 && isa_has_vbmi())
        cpu_kernels_rp512(&cb->k, isa_has_gfni());
    /* CINFER_CPU_ATTN_SPLIT=0: attention never splits a step's segments over the threads
     * (for comparison; the bits are the same either way) */
    const char *asp = getenv("CINFER_CPU_ATTN_SPLIT");
    cb->attn_split = !(asp && !strcmp(asp, "0"));
    /* CINFER_CPU_REPACK: unset, 1 or all = every type with repacked kernels (Q4_K, Q5_K,
     * Q6_K, Q8_0, Q5_0, Q4_0, Q4_1), 0 = none, or a comma-separated list of dtype names (e.g.
     * q4_k,q8_0). */
    const char *rp = getenv("CINFER_CPU_REPACK");
    cb->repack = !(rp && !strcmp(rp, "0"));
    cb->repack_types = ~0u;
    if (rp && *rp && strcmp(rp, "0") && strcmp(rp, "1") && strcmp(rp, "all")) {
        cb->repack_types = 0;
        for (int dt = 0; dt < DT_COUNT && dt < 32; dt++) {
            const char *nm = dtype_name(dt);
            size_t nl = strlen(nm);
            for (const char *p = rp; *p;) {
                const char *comma = strchr(p, ',');
                size_t len = comma ? (size_t)(comma - p) : strlen(p);
                if (len == nl && !strncasecmp(p, nm, nl))
                    cb->repack_types |= 1u << dt;
                p += len + (comma != NULL);
            }
        }
    }
    log_debug("cpu backend: %d threads, %s kernels, repack %s", cb->n_threads,
              g_isa_names[cb->isa], cb->repack ? "on" : "off");
    return &cb->base;
}
