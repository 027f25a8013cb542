/* test_kvq_cuda.c — quantized KV blocks on the CUDA backend (src/backend/cuda/cuda_kvq.cu)
 * against the CPU reference (backend/kvq.c and the CPU attention kernel), for every format:
 * - the store: rows quantized by the GPU's kv_store are byte for byte kvq_store_row's;
 * - attention over the same quantized blocks (the CPU's bytes uploaded) agrees with the CPU
 *   kernel within 1e-4 of the output's scale: decode steps (split mode with the merge), a
 *   few tokens of one sequence in a step, and a prefill step of more than 64 tokens (the
 *   tiled mode), GQA 2:1, 3:1 and 6:1, head_dim 64 / 128 / 256 and 80 (groups of 16, no
 *   rotation), a sliding window, a softcap.
 * - rope_kv_store on a quantized cache (CUDA: one launch, cuda_kvq.cu) gives the bits of
 *   rope(q), rope(k) and kv_store(k, v);
 * - the decode path (cuda_kvq_dec.cu, steps of <= 64 tokens): a token 4000 positions in
 *   (many rounds per split) within tolerance, and its output bit for bit the same alone
 *   (context capacity 4096) and in a step of three tokens with a capacity of 5120.
 * - CINFER_KVQ_MERGE=fused, CINFER_KVQ_STORE=attn and both (cuda_kvq_dec.cu), each against
 *   the default decode path: decode steps of one and four sequences (rope_kv_store, then
 *   attention with one_per_seq), every scheme family, head_dim 64 / 128, positions on and
 *   off a round and split boundary: the output bit for bit and every cache byte the same,
 *   four times in a row (run, captured into a graph, replayed: the merge counters reset),
 *   and the fused launches counted (the store also leaves q unroped: the fold happened).
 * - CINFER_KVQ_DEC=tc (the keys' scores on the tensor cores, 8-bit keys): the cases above
 *   against the CPU within tolerance, and the fused cases alone and with both fused
 *   switches against the default path within 1e-4 of its scale (caches byte for byte), the
 *   tc launches counted.
 * - k_kvq_mm (both products on the tensor cores; the default for 8-bit K and V): the cases
 *   above against the CPU within tolerance, its launches counted (at head_dim 128 on sm_90+
 *   with bulk copies, counted too); CINFER_KVQ_BULK=0 (its cp.async copies) against the CPU,
 *   none with bulk copies; CINFER_KVQ_SPLITS=2 (up to 32 rounds a split: the bulk copies'
 *   barriers through many phases) against the CPU, bulk launches counted on sm_90+;
 *   CINFER_KVQ_DEC=sd (k_kvq_sd for every case) against the CPU,
 *   none on k_kvq_mm. k8v4 (4-bit Lloyd-Max values) on k_kvq_mm too: head_dim 128 with an
 *   even KV head count (bulk copies of its 72-byte V records, counted on sm_90+), an odd one
 *   (cp.async pieces, no bulk launch) and head_dim 64, against the CPU, launches counted. The fused-switch comparisons below
 *   run with CINFER_KVQ_DEC=sd (their reference is k_kvq_sd).
 * - CINFER_KVQ_STAGES=3 / 4 (deeper cp.async pipelines), alone and with both fused switches,
 *   against the default path bit for bit, at the default 32 splits and at
 *   CINFER_KVQ_SPLITS=2 (against a 2-split reference: up to 32 rounds a split, the buffer
 *   ring wraps); CINFER_KVQ_SOFT=lean (the lean softmax; with 2 and 4 stages) within 1e-4 of
 *   the default's scale (some output's bits differ: it ran), and with 4 stages the cases
 *   above against the CPU, the long context's alone == in a step included.
 * - CINFER_KVQ_SOFT=one (one warp a head's softmax), with 2 and 4 stages, against the default
 *   path bit for bit (every case of the lean test: 0 differing), at 32 splits and at
 *   CINFER_KVQ_SPLITS=2, its launches counted; and the cases above against the CPU.
 * On CUDA every case runs three times: with the default kernels (the decode path for steps of
 * up to 64 tokens), with CINFER_KVQ_ATTN=general (the general kernel for every step), and
 * with CINFER_KVQ_NT=128 (the decode path's 128-thread layout); a CINFER_KVQ_ATTN set by the
 * caller runs that choice only.
 * Skipped (status 77) where the CUDA backend cannot open (no GPU, or a build without it):
 * the device run is bench/kv_quant/device_kvq.sh. CINFER_TEST_BACKEND names another backend
 * to compare with the CPU. */
#include "harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/dtype.h"
#include "backend/kvq.h"
#ifdef CINFER_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

static struct be *g_cpu, *g_dev;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}
static float gauss(void)
{
    double u = urand() + 1e-12, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void *dev_from(const void *host, size_t n)
{
    struct cerr e = {0};
    void *p = g_dev->ops->alloc(g_dev, n);
    CHECK_MSG(p != NULL, "device alloc of %zu bytes failed", n);
    if (p && host && g_dev->ops->upload(g_dev, p, host, n, &e))
        CHECK_MSG(0, "upload failed: %s", e.msg);
    return p;
}

static void host_from(void *host, const void *dev, size_t n)
{
    struct cerr e = {0};
    int rc = g_dev->ops->download(g_dev, host, dev, n, &e);
    if (!rc)
        rc = g_dev->ops->sync(g_dev, &e);
    CHECK_MSG(rc == 0, "download or sync failed: %s", e.msg);
}

struct scheme {
    int kf, vf, rk, rv;
};

struct geom {
    int hd, nkv, nh;
    float softcap;
    int window;
};

enum { BS = 16, NSEQ = 3, MAXB = 48 /* 768 positions a sequence */ };

/* One scheme at one geometry: store on both, compare bytes; attention on both over the
 * CPU's bytes, compare outputs. */
static void run_case(const struct geom *gm, const struct scheme *sc)
{
    struct cerr e = {0};
    int code;
    if (kvq_code(sc->kf, sc->vf, sc->rk, sc->rv, gm->hd, &code, &e)) {
        CHECK_MSG(0, "kvq_code: %s", e.msg);
        return;
    }
    const int hd = gm->hd, kvd = hd * gm->nkv, lens[NSEQ] = {700, 150, 37};
    const int nb = NSEQ * MAXB;
    const size_t rk = kvq_row_bytes(code, 0, kvd), rv = kvq_row_bytes(code, 1, kvd);
    int32_t *tables = malloc(sizeof(int32_t) * nb);
    for (int i = 0; i < nb; i++)
        tables[i] = i;
    for (int i = nb - 1; i > 0; i--) { /* scattered blocks */
        int j = (int)(urand() * (i + 1)), t = tables[i];
        tables[i] = tables[j], tables[j] = t;
    }
    int ntot = 0;
    for (int s = 0; s < NSEQ; s++)
        ntot += lens[s];
    float *K = malloc(sizeof(float) * (size_t)ntot * kvd), *V = malloc(sizeof(float) * (size_t)ntot * kvd);
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)ntot);
    for (int s = 0, r = 0; s < NSEQ; s++)
        for (int p = 0; p < lens[s]; p++, r++) {
            slots[r] = tables[s * MAXB + p / BS] * BS + p % BS;
            for (int i = 0; i < kvd; i++) {
                /* an outlier channel, a per-head offset, mixed magnitudes */
                K[(size_t)r * kvd + i] = gauss() * (i % 7 == 0 ? 3.0f : 1.0f) +
                                         (i % hd == 3 ? 4.0f : 0.0f);
                V[(size_t)r * kvd + i] = gauss() + 0.5f * (float)(i / hd);
            }
        }
    size_t ckb = (size_t)nb * BS * rk, cvb = (size_t)nb * BS * rv;
    char *kc = calloc(1, ckb), *vc = calloc(1, cvb);
    g_cpu->ops->kv_store(g_cpu, kc, vc, code, K, V, slots, ntot, kvd);

    /* the GPU's store, byte for byte */
    void *dkc = dev_from(NULL, ckb), *dvc = dev_from(NULL, cvb);
    float *dK = dev_from(K, sizeof(float) * (size_t)ntot * kvd);
    float *dV = dev_from(V, sizeof(float) * (size_t)ntot * kvd);
    int32_t *dslots = dev_from(slots, sizeof(int32_t) * (size_t)ntot);
    if (!dkc || !dvc || !dK || !dV || !dslots)
        return;
    g_dev->ops->kv_store(g_dev, dkc, dvc, code, dK, dV, dslots, ntot, kvd);
    char *gk = malloc(ckb), *gv = malloc(cvb);
    host_from(gk, dkc, ckb);
    host_from(gv, dvc, cvb);
    long bad_k = 0, bad_v = 0;
    for (int r = 0; r < ntot; r++) {
        for (size_t i = 0; i < rk; i++)
            bad_k += gk[(size_t)slots[r] * rk + i] != kc[(size_t)slots[r] * rk + i];
        for (size_t i = 0; i < rv; i++)
            bad_v += gv[(size_t)slots[r] * rv + i] != vc[(size_t)slots[r] * rv + i];
    }
    CHECK_MSG(bad_k == 0 && bad_v == 0,
              "hd %d k %s v %s: the device store differs from kvq_store_row in %ld K / %ld V bytes",
              hd, kvq_fmt_name(sc->kf), kvq_fmt_name(sc->vf), bad_k, bad_v);

    /* attention over the CPU's bytes */
    if (g_dev->ops->upload(g_dev, dkc, kc, ckb, &e) || g_dev->ops->upload(g_dev, dvc, vc, cvb, &e))
        CHECK_MSG(0, "upload: %s", e.msg);
    int32_t *dtab = dev_from(tables, sizeof(int32_t) * nb);
    struct {
        const char *name;
        int n;
        int32_t pos[256], seq[256];
    } steps[3];
    /* decode: the last position of every sequence, plus an earlier one of seq 0 */
    steps[0].name = "decode";
    steps[0].n = 0;
    for (int s = 0; s < NSEQ; s++)
        steps[0].pos[steps[0].n] = lens[s] - 1, steps[0].seq[steps[0].n++] = s;
    steps[0].pos[steps[0].n] = 301, steps[0].seq[steps[0].n++] = 0;
    /* a short run of one sequence and a token of another */
    steps[1].name = "verify";
    steps[1].n = 0;
    for (int p = lens[0] - 6; p < lens[0]; p++)
        steps[1].pos[steps[1].n] = p, steps[1].seq[steps[1].n++] = 0;
    steps[1].pos[steps[1].n] = lens[2] - 1, steps[1].seq[steps[1].n++] = 2;
    /* prefill: all of seq 1, then the last 40 of seq 0 */
    steps[2].name = "prefill";
    steps[2].n = 0;
    for (int p = 0; p < lens[1]; p++)
        steps[2].pos[steps[2].n] = p, steps[2].seq[steps[2].n++] = 1;
    for (int p = lens[0] - 40; p < lens[0]; p++)
        steps[2].pos[steps[2].n] = p, steps[2].seq[steps[2].n++] = 0;
    for (int si = 0; si < 3; si++) {
        const int n = steps[si].n, qn = gm->nh * hd;
        float *q = malloc(sizeof(float) * (size_t)n * qn), *oc = malloc(sizeof(float) * (size_t)n * qn),
              *od = malloc(sizeof(float) * (size_t)n * qn);
        for (int i = 0; i < n * qn; i++)
            q[i] = gauss();
        struct be_attn a = {.n_tok = n, .n_head = gm->nh, .n_kv_head = gm->nkv, .head_dim = hd,
                            .scale = 1.0f / sqrtf((float)hd), .softcap = gm->softcap,
                            .window = gm->window, .pos = steps[si].pos, .seq = steps[si].seq,
                            .block_tables = tables, .max_blocks = MAXB, .block_size = BS,
                            .kv_dtype = code, .k_cache = kc, .v_cache = vc};
        g_cpu->ops->attention(g_cpu, oc, q, &a);
        struct be_attn d = a;
        d.pos = dev_from(steps[si].pos, sizeof(int32_t) * (size_t)n);
        d.seq = dev_from(steps[si].seq, sizeof(int32_t) * (size_t)n);
        d.block_tables = dtab, d.k_cache = dkc, d.v_cache = dvc;
        float *dq = dev_from(q, sizeof(float) * (size_t)n * qn), *dout = dev_from(NULL, sizeof(float) * (size_t)n * qn);
        g_dev->ops->attention(g_dev, dout, dq, &d);
        host_from(od, dout, sizeof(float) * (size_t)n * qn);
        double err = 0, scale = 0;
        for (int i = 0; i < n * qn; i++) {
            err = fmax(err, fabs((double)od[i] - oc[i]));
            scale = fmax(scale, fabs((double)oc[i]));
        }
        printf("hd %3d kv %d:%d k %-4s v %-4s rot %d%d window %d softcap %g %-7s: max err %.2g "
               "(scale %.3g)\n",
               hd, gm->nh, gm->nkv, kvq_fmt_name(sc->kf), kvq_fmt_name(sc->vf), kvq_rot_of(code, 0),
               kvq_rot_of(code, 1), gm->window, gm->softcap, steps[si].name, err, scale);
        CHECK_MSG(err <= 1e-4 * fmax(scale, 1.0) && scale > 0.0,
                  "hd %d k %s v %s %s: device attention off by %g (scale %g)", hd,
                  kvq_fmt_name(sc->kf), kvq_fmt_name(sc->vf), steps[si].name, err, scale);
        g_dev->ops->free(g_dev, (void *)d.pos), g_dev->ops->free(g_dev, (void *)d.seq);
        g_dev->ops->free(g_dev, dq), g_dev->ops->free(g_dev, dout);
        free(q), free(oc), free(od);
    }
    g_dev->ops->free(g_dev, dtab), g_dev->ops->free(g_dev, dkc), g_dev->ops->free(g_dev, dvc);
    g_dev->ops->free(g_dev, dK), g_dev->ops->free(g_dev, dV), g_dev->ops->free(g_dev, dslots);
    free(gk), free(gv), free(kc), free(vc), free(K), free(V), free(slots), free(tables);
}

static const struct scheme SCHEMES[] = {
    {KVF_A8, KVF_A8, 1, 0},  /* --kv-quant 8 (keys rotated) */
    {KVF_A4, KVF_A4, 1, 1},  /* --kv-quant 4 */
    {KVF_A8, KVF_L4, 1, 1},  /* turbo:k8v4 */
    {KVF_A8, KVF_L3, 1, 1},  /* turbo (k8v3) */
    {KVF_A2, KVF_L2, 0, 1},  /* the narrowest codes, unrotated keys */
    {KVF_A5, KVF_L5, 1, 1},  /* 5-bit codes straddle bytes */
    {KVF_F16, KVF_L8, 0, 1}, /* a plain side beside a quantized one */
    {KVF_F32, KVF_F32, 1, 1}, /* plain but rotated: exact in both */
};

static void test_formats_hd128(void)
{
    const struct geom g = {128, 2, 12, 0.0f, 0}; /* Qwen2.5-1.5B's shape: 6 heads per KV head */
    for (size_t i = 0; i < sizeof SCHEMES / sizeof *SCHEMES; i++)
        run_case(&g, &SCHEMES[i]);
}

static void test_other_geometries(void)
{
    const struct geom gs[] = {
        {64, 4, 8, 0.0f, 0},    /* l1b-like head_dim, GQA 2:1 */
        {64, 3, 9, 0.0f, 0},    /* SmolLM2-135M's shape: 3 heads a KV head (groups of 1) */
        {256, 1, 4, 30.0f, 0},  /* the widest heads, a softcap */
        {128, 2, 4, 0.0f, 100}, /* a sliding window */
        {128, 3, 6, 0.0f, 0},   /* an odd KV head count: k8v4's V records as cp.async pieces */
    };
    const struct scheme some[] = {{KVF_A8, KVF_A8, 1, 0}, {KVF_A8, KVF_L3, 1, 1}, {KVF_A4, KVF_A4, 1, 1},
                                  {KVF_A8, KVF_L4, 1, 1}};
    for (size_t i = 0; i < sizeof gs / sizeof *gs; i++)
        for (size_t j = 0; j < sizeof some / sizeof *some; j++)
            run_case(&gs[i], &some[j]);
    /* head_dim 80: groups of 16, no rotation (not a power of two) */
    const struct geom g80 = {80, 2, 4, 0.0f, 0};
    const struct scheme s80[] = {{KVF_A8, KVF_A8, 0, 0}, {KVF_A4, KVF_A2, 0, 0}};
    for (size_t j = 0; j < sizeof s80 / sizeof *s80; j++)
        run_case(&g80, &s80[j]);
}

/* A long context and the decode path's invariance: token (0, 3999) alone with a capacity of
 * 4096 positions, then in a step of three tokens (another sequence first) with a capacity
 * of 5120: the same bits both times, and the CPU's result within tolerance. */
static void run_long(const struct scheme *sc)
{
    struct cerr e = {0};
    int code;
    if (kvq_code(sc->kf, sc->vf, sc->rk, sc->rv, 128, &code, &e)) {
        CHECK_MSG(0, "kvq_code: %s", e.msg);
        return;
    }
    enum { NS = 2, MB0 = 256, MB1 = 320 };
    const int hd = 128, nkv = 2, nh = 8, kvd = hd * nkv, qn = nh * hd, lens[NS] = {4000, 300};
    const int nb = NS * MB0;
    const size_t rk = kvq_row_bytes(code, 0, kvd), rv = kvq_row_bytes(code, 1, kvd);
    int32_t *t0 = malloc(sizeof(int32_t) * nb), *t1 = calloc((size_t)NS * MB1, sizeof(int32_t));
    for (int i = 0; i < nb; i++)
        t0[i] = i;
    for (int i = nb - 1; i > 0; i--) {
        int j = (int)(urand() * (i + 1)), t = t0[i];
        t0[i] = t0[j], t0[j] = t;
    }
    for (int s = 0; s < NS; s++) /* the same blocks, a wider table */
        memcpy(t1 + s * MB1, t0 + s * MB0, sizeof(int32_t) * MB0);
    const int ntot = lens[0] + lens[1];
    float *K = malloc(sizeof(float) * (size_t)ntot * kvd), *V = malloc(sizeof(float) * (size_t)ntot * kvd);
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)ntot);
    for (int s = 0, r = 0; s < NS; s++)
        for (int p = 0; p < lens[s]; p++, r++) {
            slots[r] = t0[s * MB0 + p / BS] * BS + p % BS;
            for (int i = 0; i < kvd; i++) {
                K[(size_t)r * kvd + i] = gauss() * (i % 7 == 0 ? 3.0f : 1.0f) + (i % hd == 3 ? 4.0f : 0.0f);
                V[(size_t)r * kvd + i] = gauss() + 0.5f * (float)(i / hd);
            }
        }
    const size_t ckb = (size_t)nb * BS * rk, cvb = (size_t)nb * BS * rv;
    char *kc = calloc(1, ckb), *vc = calloc(1, cvb);
    g_cpu->ops->kv_store(g_cpu, kc, vc, code, K, V, slots, ntot, kvd);
    void *dkc = dev_from(kc, ckb), *dvc = dev_from(vc, cvb);
    int32_t *dt0 = dev_from(t0, sizeof(int32_t) * nb), *dt1 = dev_from(t1, sizeof(int32_t) * NS * MB1);
    float *q = malloc(sizeof(float) * 3 * qn);
    for (int i = 0; i < 3 * qn; i++)
        q[i] = gauss();
    /* step A: token (0, 3999) alone; step B: (1, 299), (0, 3999), (0, 2047) */
    const int32_t pa[1] = {lens[0] - 1}, sa[1] = {0};
    const int32_t pb[3] = {lens[1] - 1, lens[0] - 1, 2047}, sb[3] = {1, 0, 0};
    float *qa = malloc(sizeof(float) * qn), *qb = malloc(sizeof(float) * 3 * qn);
    memcpy(qa, q, sizeof(float) * qn);
    memcpy(qb, q + qn, sizeof(float) * qn);
    memcpy(qb + qn, q, sizeof(float) * qn);
    memcpy(qb + 2 * qn, q + 2 * qn, sizeof(float) * qn);
    float *oa = malloc(sizeof(float) * qn), *ob = malloc(sizeof(float) * 3 * qn);
    float *ca = malloc(sizeof(float) * qn), *cbo = malloc(sizeof(float) * 3 * qn);
    struct be_attn a = {.n_tok = 1, .n_head = nh, .n_kv_head = nkv, .head_dim = hd,
                        .scale = 1.0f / sqrtf((float)hd), .pos = pa, .seq = sa,
                        .block_tables = t0, .max_blocks = MB0, .block_size = BS,
                        .kv_dtype = code, .k_cache = kc, .v_cache = vc};
    g_cpu->ops->attention(g_cpu, ca, qa, &a);
    struct be_attn b = a;
    b.n_tok = 3, b.pos = pb, b.seq = sb, b.block_tables = t1, b.max_blocks = MB1;
    g_cpu->ops->attention(g_cpu, cbo, qb, &b);
    struct be_attn da = a, db = b;
    da.pos = dev_from(pa, sizeof pa), da.seq = dev_from(sa, sizeof sa), da.block_tables = dt0;
    db.pos = dev_from(pb, sizeof pb), db.seq = dev_from(sb, sizeof sb), db.block_tables = dt1;
    da.k_cache = db.k_cache = dkc, da.v_cache = db.v_cache = dvc;
    float *dqa = dev_from(qa, sizeof(float) * qn), *dqb = dev_from(qb, sizeof(float) * 3 * qn);
    float *doa = dev_from(NULL, sizeof(float) * qn), *dob = dev_from(NULL, sizeof(float) * 3 * qn);
    g_dev->ops->attention(g_dev, doa, dqa, &da);
    g_dev->ops->attention(g_dev, dob, dqb, &db);
    host_from(oa, doa, sizeof(float) * qn);
    host_from(ob, dob, sizeof(float) * 3 * qn);
    double err = 0, scale = 0;
    for (int i = 0; i < qn; i++) {
        err = fmax(err, fabs((double)oa[i] - ca[i]));
        scale = fmax(scale, fabs((double)ca[i]));
    }
    for (int i = 0; i < 3 * qn; i++) {
        err = fmax(err, fabs((double)ob[i] - cbo[i]));
        scale = fmax(scale, fabs((double)cbo[i]));
    }
    const int same = !memcmp(oa, ob + qn, sizeof(float) * qn);
    printf("hd 128 kv 8:2 k %-4s v %-4s long (pos 3999, capacities 4096 / 5120): max err %.2g "
           "(scale %.3g), alone == in a step: %s\n",
           kvq_fmt_name(sc->kf), kvq_fmt_name(sc->vf), err, scale, same ? "yes" : "NO");
    CHECK_MSG(err <= 1e-4 * fmax(scale, 1.0) && scale > 0.0,
              "k %s v %s long: device attention off by %g (scale %g)", kvq_fmt_name(sc->kf),
              kvq_fmt_name(sc->vf), err, scale);
    CHECK_MSG(same, "k %s v %s: token (0, 3999) differs alone and in a step with another capacity",
              kvq_fmt_name(sc->kf), kvq_fmt_name(sc->vf));
    g_dev->ops->free(g_dev, (void *)da.pos), g_dev->ops->free(g_dev, (void *)da.seq);
    g_dev->ops->free(g_dev, (void *)db.pos), g_dev->ops->free(g_dev, (void *)db.seq);
    g_dev->ops->free(g_dev, dqa), g_dev->ops->free(g_dev, dqb), g_dev->ops->free(g_dev, doa);
    g_dev->ops->free(g_dev, dob), g_dev->ops->free(g_dev, dt0), g_dev->ops->free(g_dev, dt1);
    g_dev->ops->free(g_dev, dkc), g_dev->ops->free(g_dev, dvc);
    free(t0), free(t1), free(K), free(V), free(slots), free(kc), free(vc), free(q), free(qa);
    free(qb), free(oa), free(ob), free(ca), free(cbo);
}

static void test_long_invariant(void)
{
    const struct scheme some[] = {{KVF_A8, KVF_A8, 1, 0}, {KVF_A4, KVF_A4, 1, 1},
                                  {KVF_A8, KVF_L4, 1, 1}, {KVF_A8, KVF_L3, 1, 1}};
    for (size_t j = 0; j < sizeof some / sizeof *some; j++)
        run_long(&some[j]);
}

/* The backend's rope_kv_store on a quantized cache (CUDA: one launch) gives the bits of
 * rope(q), rope(k) and kv_store(k, v): q, k and every cache byte compared. */
static void run_rope_store(const struct scheme *sc, int rot_dim, int mode)
{
    struct cerr e = {0};
    int code;
    const int hd = 128, nkv = 2, nh = 8, kvd = hd * nkv, n = 5, nslot = 64;
    if (kvq_code(sc->kf, sc->vf, sc->rk, sc->rv, hd, &code, &e)) {
        CHECK_MSG(0, "kvq_code: %s", e.msg);
        return;
    }
    const size_t rk = kvq_row_bytes(code, 0, kvd), rv = kvq_row_bytes(code, 1, kvd);
    const int32_t pos[5] = {0, 7, 100, 1000, 3}, slots[5] = {3, 17, 40, 2, 60};
    float *q = malloc(sizeof(float) * n * nh * hd), *k = malloc(sizeof(float) * n * kvd),
          *v = malloc(sizeof(float) * n * kvd), *inv = malloc(sizeof(float) * (size_t)rot_dim / 2);
    for (int i = 0; i < n * nh * hd; i++)
        q[i] = gauss();
    for (int i = 0; i < n * kvd; i++)
        k[i] = gauss() + (i % hd == 5 ? 3.0f : 0.0f), v[i] = gauss();
    for (int i = 0; i < rot_dim / 2; i++)
        inv[i] = (float)pow(10000.0, -2.0 * i / rot_dim);
    float *dq[2], *dk[2];
    void *kc[2], *vc[2];
    float *dv = dev_from(v, sizeof(float) * n * kvd), *dinv = dev_from(inv, sizeof(float) * (size_t)rot_dim / 2);
    int32_t *dpos = dev_from(pos, sizeof pos), *dslots = dev_from(slots, sizeof slots);
    char *zk = calloc(1, nslot * rk), *zv = calloc(1, nslot * rv);
    for (int p = 0; p < 2; p++) {
        dq[p] = dev_from(q, sizeof(float) * n * nh * hd), dk[p] = dev_from(k, sizeof(float) * n * kvd);
        kc[p] = dev_from(zk, nslot * rk), vc[p] = dev_from(zv, nslot * rv);
    }
    /* 0: the fused op; 1: its three parts */
    struct be_rope_kv r = {.q = dq[0], .k = dk[0], .v = dv, .pos = dpos, .slots = dslots,
                           .n_tok = n, .n_head = nh, .n_kv_head = nkv, .head_dim = hd,
                           .rot_dim = rot_dim, .mode = mode, .inv_freq = dinv, .mscale = 1.0f,
                           .k_cache = kc[0], .v_cache = vc[0], .kv_dtype = code};
    g_dev->ops->rope_kv_store(g_dev, &r);
    g_dev->ops->rope(g_dev, dq[1], dpos, n, nh, hd, rot_dim, mode, dinv, 1.0f);
    g_dev->ops->rope(g_dev, dk[1], dpos, n, nkv, hd, rot_dim, mode, dinv, 1.0f);
    g_dev->ops->kv_store(g_dev, kc[1], vc[1], code, dk[1], dv, dslots, n, kvd);
    float *hq[2], *hk[2];
    char *hkc[2], *hvc[2];
    for (int p = 0; p < 2; p++) {
        hq[p] = malloc(sizeof(float) * n * nh * hd), hk[p] = malloc(sizeof(float) * n * kvd);
        hkc[p] = malloc(nslot * rk), hvc[p] = malloc(nslot * rv);
        host_from(hq[p], dq[p], sizeof(float) * n * nh * hd);
        host_from(hk[p], dk[p], sizeof(float) * n * kvd);
        host_from(hkc[p], kc[p], nslot * rk);
        host_from(hvc[p], vc[p], nslot * rv);
    }
    const int same_q = !memcmp(hq[0], hq[1], sizeof(float) * n * nh * hd);
    const int same_k = !memcmp(hk[0], hk[1], sizeof(float) * n * kvd);
    const int same_c = !memcmp(hkc[0], hkc[1], nslot * rk) && !memcmp(hvc[0], hvc[1], nslot * rv);
    const int moved = memcmp(hq[1], q, sizeof(float) * n * nh * hd) != 0; /* rope did something */
    printf("rope_kv_store k %-4s v %-4s rot_dim %d mode %d: q %s, k %s, cache %s\n",
           kvq_fmt_name(sc->kf), kvq_fmt_name(sc->vf), rot_dim, mode, same_q ? "same" : "DIFFERS",
           same_k ? "same" : "DIFFERS", same_c ? "same" : "DIFFERS");
    CHECK_MSG(same_q && same_k && same_c && moved,
              "k %s v %s: rope_kv_store differs from rope + rope + kv_store (q %d k %d cache %d)",
              kvq_fmt_name(sc->kf), kvq_fmt_name(sc->vf), same_q, same_k, same_c);
    for (int p = 0; p < 2; p++) {
        g_dev->ops->free(g_dev, dq[p]), g_dev->ops->free(g_dev, dk[p]);
        g_dev->ops->free(g_dev, kc[p]), g_dev->ops->free(g_dev, vc[p]);
        free(hq[p]), free(hk[p]), free(hkc[p]), free(hvc[p]);
    }
    g_dev->ops->free(g_dev, dv), g_dev->ops->free(g_dev, dinv);
    g_dev->ops->free(g_dev, dpos), g_dev->ops->free(g_dev, dslots);
    free(q), free(k), free(v), free(inv), free(zk), free(zv);
}

static void test_rope_store(void)
{
    if (!g_dev->ops->rope_kv_store) {
        printf("rope_kv_store: not an op of this backend (nothing to compare)\n");
        return;
    }
    const struct scheme some[] = {{KVF_A8, KVF_A8, 1, 0}, {KVF_A4, KVF_A4, 1, 1},
                                  {KVF_A8, KVF_L3, 1, 1}, {KVF_F16, KVF_L8, 0, 1}};
    for (size_t j = 0; j < sizeof some / sizeof *some; j++)
        run_rope_store(&some[j], 128, 0);
    run_rope_store(&some[2], 64, 1); /* partial rotation, NEOX pairs */
}

/* ---- CINFER_KVQ_MERGE=fused / CINFER_KVQ_STORE=attn against the default decode path ---- */

/* FZ_REPS: a scratch buffer that grows in the first run drops the cached graphs, so that
 * run's list runs plainly twice, is captured the third time and replayed the fourth */
enum { FZ_NS = 4, FZ_MB = 260 /* 4160 positions a sequence */, FZ_REPS = 4, FZ_MAXC = 64 };

struct fz_res {
    uint64_t out_h, kc_h, vc_h;  /* FNV-1a of the output and of both whole caches */
    float out[FZ_NS * 16 * 128]; /* the output itself (n * nh * hd) */
    int ok;
};
static struct fz_res g_fz[FZ_MAXC];
static int g_fz_n;

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* One decode step of nseq sequences (token t: sequence t at position pos[t], positions
 * 0 .. pos[t] - 1 already in the cache): rope_kv_store, then attention, FZ_REPS times with q
 * re-uploaded. Fills *res (first repetition) and checks the repetitions agree; *q_unroped:
 * q was left as uploaded (the store ran inside the attention). */
static void fz_case(int ci, const struct scheme *sc, int hd, int nseq, const int32_t *pos,
                    struct fz_res *res, int *q_unroped)
{
    struct cerr e = {0};
    int code;
    res->ok = 0;
    *q_unroped = 0;
    if (kvq_code(sc->kf, sc->vf, sc->rk, sc->rv, hd, &code, &e)) {
        CHECK_MSG(0, "kvq_code: %s", e.msg);
        return;
    }
    g_rng = 0x9E3779B97F4A7C15ull + 7919ull * (uint64_t)ci; /* the same data in every run */
    const int nkv = 2, nh = hd == 128 ? 16 : 4; /* 8 heads a KV head (two head groups of 4) or 2 */
    const int kvd = nkv * hd, qn = nh * hd, nb = nseq * FZ_MB;
    const int rot_dim = hd == 128 ? hd : 32, mode = hd == 128 ? BE_ROPE_NORM : BE_ROPE_NEOX;
    const size_t rk = kvq_row_bytes(code, 0, kvd), rv = kvq_row_bytes(code, 1, kvd);
    int32_t *tables = malloc(sizeof(int32_t) * nb);
    for (int i = 0; i < nb; i++)
        tables[i] = i;
    for (int i = nb - 1; i > 0; i--) {
        int j = (int)(urand() * (i + 1)), x = tables[i];
        tables[i] = tables[j], tables[j] = x;
    }
    int ntot = 0;
    for (int s = 0; s < nseq; s++)
        ntot += pos[s];
    float *K = malloc(sizeof(float) * ((size_t)ntot + 1) * kvd);
    float *V = malloc(sizeof(float) * ((size_t)ntot + 1) * kvd);
    int32_t *slots = malloc(sizeof(int32_t) * ((size_t)ntot + 1));
    for (int s = 0, r = 0; s < nseq; s++)
        for (int p = 0; p < pos[s]; p++, r++) {
            slots[r] = tables[s * FZ_MB + p / BS] * BS + p % BS;
            for (int i = 0; i < kvd; i++) {
                K[(size_t)r * kvd + i] =
                    gauss() * (i % 7 == 0 ? 3.0f : 1.0f) + (i % hd == 3 ? 4.0f : 0.0f);
                V[(size_t)r * kvd + i] = gauss() + 0.5f * (float)(i / hd);
            }
        }
    const size_t ckb = (size_t)nb * BS * rk, cvb = (size_t)nb * BS * rv;
    char *kc = calloc(1, ckb), *vc = calloc(1, cvb);
    if (ntot > 0)
        g_cpu->ops->kv_store(g_cpu, kc, vc, code, K, V, slots, ntot, kvd);
    /* the step: q, k, v of the new tokens (unroped), their slots */
    float *q = malloc(sizeof(float) * (size_t)nseq * qn),
          *kn = malloc(sizeof(float) * (size_t)nseq * kvd);
    float *vn = malloc(sizeof(float) * (size_t)nseq * kvd),
          *inv = malloc(sizeof(float) * (size_t)rot_dim / 2);
    int32_t nslot[FZ_NS], nseqs[FZ_NS];
    for (int i = 0; i < nseq * qn; i++)
        q[i] = gauss();
    for (int i = 0; i < nseq * kvd; i++)
        kn[i] = gauss() + (i % hd == 5 ? 3.0f : 0.0f), vn[i] = gauss();
    for (int i = 0; i < rot_dim / 2; i++)
        inv[i] = (float)pow(10000.0, -2.0 * i / rot_dim);
    for (int s = 0; s < nseq; s++)
        nslot[s] = tables[s * FZ_MB + pos[s] / BS] * BS + pos[s] % BS, nseqs[s] = s;
    void *dkc = dev_from(kc, ckb), *dvc = dev_from(vc, cvb);
    int32_t *dtab = dev_from(tables, sizeof(int32_t) * nb);
    int32_t *dpos = dev_from(pos, sizeof(int32_t) * nseq),
            *dseq = dev_from(nseqs, sizeof(int32_t) * nseq);
    int32_t *dsl = dev_from(nslot, sizeof(int32_t) * nseq);
    float *dq = dev_from(NULL, sizeof(float) * (size_t)nseq * qn),
          *dk = dev_from(NULL, sizeof(float) * (size_t)nseq * kvd);
    float *dv = dev_from(vn, sizeof(float) * (size_t)nseq * kvd),
          *dinv = dev_from(inv, sizeof(float) * (size_t)rot_dim / 2);
    float *dout = dev_from(NULL, sizeof(float) * (size_t)nseq * qn);
    float *out = malloc(sizeof(float) * (size_t)nseq * qn),
          *qa = malloc(sizeof(float) * (size_t)nseq * qn);
    float *nan = malloc(sizeof(float) * (size_t)nseq * qn);
    for (int i = 0; i < nseq * qn; i++)
        nan[i] = NAN; /* a row nobody writes stays NaN and fails the checks */
    if (!dkc || !dvc || !dtab || !dpos || !dseq || !dsl || !dq || !dk || !dv || !dinv || !dout)
        return;
    int same = 1, finite = 1;
    for (int rep = 0; rep < FZ_REPS; rep++) {
        if (g_dev->ops->upload(g_dev, dq, q, sizeof(float) * (size_t)nseq * qn, &e) ||
            g_dev->ops->upload(g_dev, dk, kn, sizeof(float) * (size_t)nseq * kvd, &e) ||
            g_dev->ops->upload(g_dev, dout, nan, sizeof(float) * (size_t)nseq * qn, &e))
            CHECK_MSG(0, "upload: %s", e.msg);
        struct be_rope_kv r = {.q = dq,
                               .k = dk,
                               .v = dv,
                               .pos = dpos,
                               .slots = dsl,
                               .n_tok = nseq,
                               .n_head = nh,
                               .n_kv_head = nkv,
                               .head_dim = hd,
                               .rot_dim = rot_dim,
                               .mode = mode,
                               .inv_freq = dinv,
                               .mscale = 1.0f,
                               .k_cache = dkc,
                               .v_cache = dvc,
                               .kv_dtype = code};
        struct be_attn a = {.n_tok = nseq,
                            .n_head = nh,
                            .n_kv_head = nkv,
                            .head_dim = hd,
                            .scale = 1.0f / sqrtf((float)hd),
                            .pos = dpos,
                            .seq = dseq,
                            .block_tables = dtab,
                            .max_blocks = FZ_MB,
                            .block_size = BS,
                            .kv_dtype = code,
                            .k_cache = dkc,
                            .v_cache = dvc,
                            .one_per_seq = 1};
        g_dev->ops->rope_kv_store(g_dev, &r);
        g_dev->ops->attention(g_dev, dout, dq, &a);
        host_from(out, dout, sizeof(float) * (size_t)nseq * qn);
        if (rep == 0) {
            host_from(qa, dq, sizeof(float) * (size_t)nseq * qn);
            *q_unroped = !memcmp(qa, q, sizeof(float) * (size_t)nseq * qn);
            host_from(kc, dkc, ckb);
            host_from(vc, dvc, cvb);
            res->out_h = fnv(out, sizeof(float) * (size_t)nseq * qn);
            res->kc_h = fnv(kc, ckb), res->vc_h = fnv(vc, cvb);
            memcpy(res->out, out, sizeof(float) * (size_t)nseq * qn);
            for (int i = 0; i < nseq * qn; i++)
                finite = finite && isfinite(out[i]);
        } else {
            same = same && fnv(out, sizeof(float) * (size_t)nseq * qn) == res->out_h;
        }
    }
    CHECK_MSG(same && finite, "case %d (hd %d k %s v %s, %d sequences, pos %d): %s", ci, hd,
              kvq_fmt_name(sc->kf), kvq_fmt_name(sc->vf), nseq, pos[0],
              !finite ? "an output is not finite (unwritten?)"
                      : "a repetition (graph capture / replay) differs");
    res->ok = same && finite;
    g_dev->ops->free(g_dev, dkc), g_dev->ops->free(g_dev, dvc), g_dev->ops->free(g_dev, dtab);
    g_dev->ops->free(g_dev, dpos), g_dev->ops->free(g_dev, dseq), g_dev->ops->free(g_dev, dsl);
    g_dev->ops->free(g_dev, dq), g_dev->ops->free(g_dev, dk), g_dev->ops->free(g_dev, dv);
    g_dev->ops->free(g_dev, dinv), g_dev->ops->free(g_dev, dout);
    free(tables), free(K), free(V), free(slots), free(kc), free(vc), free(q), free(kn), free(vn);
    free(inv), free(out), free(qa), free(nan);
}

/* Every case on the backend as created; rec: this variant records (the reference of the
 * variants after it), else it compares with the last recorded. merge / store: the variant's
 * switches (what it must have run); tc: CINFER_KVQ_DEC=tc is on (some launch used the tensor
 * cores), lean: CINFER_KVQ_SOFT=lean is on (some output's bits differ: the lean softmax ran);
 * with either, the output is within 1e-4 of the reference's scale, not its bits (every cache
 * byte still the same). one: CINFER_KVQ_SOFT=one is on (some launch ran it; bit for bit).
 * CINFER_KVQ_STAGES changes no bit. */
static void fz_all(int variant, int rec, int merge, int store, int tc, int lean, int one)
{
    static const struct scheme fs[] = {
        {KVF_A8, KVF_A8, 1, 0},  /* 8 */
        {KVF_A4, KVF_A4, 1, 1},  /* 4 */
        {KVF_A8, KVF_L4, 1, 1},  /* k8v4 */
        {KVF_A8, KVF_L3, 1, 1},  /* k8v3 (turbo) */
        {KVF_A5, KVF_L5, 1, 1},  /* the any-width decoder */
        {KVF_F16, KVF_L8, 0, 1}, /* a plain side */
        {KVF_A8, KVF_F16, 1, 0}, /* 8-bit keys, plain values (tc: the any-width value decoder) */
    };
    /* one sequence: many rounds a split; the new position first of its round and alone in
     * the last split (2048 = 32 rounds + 1); two rounds, two splits; one round, one split;
     * position 0. Four sequences: mixed lengths in one step. */
    static const int32_t p1[5] = {4000, 2048, 64, 63, 0}, p4[FZ_NS] = {2048, 700, 64, 3999};
    int ci = 0, bad = 0, unroped_ok = 1, nbits = 0;
    const int approx = tc || lean;
    int64_t m0 = 0, s0 = 0, m1 = 0, s1 = 0, t0 = 0, t1 = 0, o0 = 0, o1 = 0;
    double worst = 0.0;
#ifdef CINFER_HAVE_CUDA
    if (!strcmp(g_dev->ops->name, "cuda"))
        be_cuda_kvq_fused(g_dev, &m0, &s0), t0 = be_cuda_kvq_tc(g_dev), o0 = be_cuda_kvq_one(g_dev);
#endif
    for (size_t si = 0; si < sizeof fs / sizeof *fs; si++)
        for (int hd = 64; hd <= 128; hd += 64)
            for (int k = 0; k < 6; k++) {
                if (hd == 64 && k != 1 && k != 5) /* head_dim 64: 2048 alone and four sequences */
                    continue;
                const int nseq = k == 5 ? FZ_NS : 1;
                const int32_t *pos = k == 5 ? p4 : p1 + k;
                struct fz_res r;
                int unroped = 0;
                if (ci >= FZ_MAXC)
                    break;
                fz_case(ci, &fs[si], hd, nseq, pos, rec ? &g_fz[ci] : &r, &unroped);
                if (pos[0] != 0) /* (at position 0 the rope is the identity) */
                    unroped_ok = unroped_ok && unroped == store;
                if (!rec) {
                    int close = r.out_h == g_fz[ci].out_h;
                    nbits += !close;
                    if (approx && !close) { /* within 1e-4 of the default output's scale */
                        double err = 0.0, scale = 0.0;
                        for (int i = 0; i < nseq * (hd == 128 ? 16 : 4) * hd; i++) {
                            err = fmax(err, fabs((double)r.out[i] - g_fz[ci].out[i]));
                            scale = fmax(scale, fabs((double)g_fz[ci].out[i]));
                        }
                        close = err <= 1e-4 * fmax(scale, 1.0);
                        worst = fmax(worst, err / fmax(scale, 1.0));
                    }
                    const int eq = r.ok && g_fz[ci].ok && close && r.kc_h == g_fz[ci].kc_h &&
                                   r.vc_h == g_fz[ci].vc_h;
                    if (!eq) {
                        int nd = 0;
                        for (int i = 0; i < nseq * (hd == 128 ? 16 : 4) * hd; i++)
                            nd += memcmp(&r.out[i], &g_fz[ci].out[i], sizeof(float)) != 0;
                        fprintf(stderr,
                                "case %d (hd %d k %s v %s, %d seq, pos %d): output %s (%d "
                                "values differ), K cache %s, V cache %s\n",
                                ci, hd, kvq_fmt_name(fs[si].kf), kvq_fmt_name(fs[si].vf), nseq,
                                pos[0], close ? "same" : "DIFFERS", nd,
                                r.kc_h == g_fz[ci].kc_h ? "same" : "DIFFERS",
                                r.vc_h == g_fz[ci].vc_h ? "same" : "DIFFERS");
                        bad++;
                    }
                }
                ci++;
            }
    g_fz_n = ci;
#ifdef CINFER_HAVE_CUDA
    if (!strcmp(g_dev->ops->name, "cuda"))
        be_cuda_kvq_fused(g_dev, &m1, &s1), t1 = be_cuda_kvq_tc(g_dev), o1 = be_cuda_kvq_one(g_dev);
#endif
    const char *stg = getenv("CINFER_KVQ_STAGES"), *spl = getenv("CINFER_KVQ_SPLITS");
    printf("fused decode variant %d (merge %d, store %d, tc %d, lean %d, one %d, stages %s, "
           "splits %s): %d cases%s, %d differ from the reference%s (%d not bit for bit); fused "
           "merges %lld, fused stores %lld, tc launches %lld, one-warp softmax launches %lld "
           "(worst %.2g of the scale), q left unroped as expected: %s\n",
           variant, merge, store, tc, lean, one, stg ? stg : "2", spl ? spl : "32", ci,
           rec ? " (recorded: the reference)" : "", bad,
           approx ? " (tolerance 1e-4 of the scale)" : "", nbits, (long long)(m1 - m0),
           (long long)(s1 - s0), (long long)(t1 - t0), (long long)(o1 - o0), worst,
           unroped_ok ? "yes" : "NO");
    CHECK_MSG(tc ? t1 - t0 > 0 : t1 - t0 == 0, "variant %d: %lld tc launches with tc %d", variant,
              (long long)(t1 - t0), tc);
    CHECK_MSG(one ? o1 - o0 > 0 : o1 - o0 == 0,
              "variant %d: %lld one-warp softmax launches with one %d", variant,
              (long long)(o1 - o0), one);
    CHECK_MSG(bad == 0, "variant %d: %d cases differ from the default decode path", variant, bad);
    CHECK_MSG(!lean || nbits > 0,
              "variant %d: lean, yet every output has the reference's bits (did it run?)", variant);
    CHECK_MSG(unroped_ok, "variant %d: the store %s inside the attention", variant,
              store ? "did not run" : "ran");
    /* every case's step has more than one split somewhere except pos 63 / 0 alone */
    CHECK_MSG(!merge || m1 - m0 > 0, "variant %d: no launch merged its own splits", variant);
    CHECK_MSG(!store || s1 - s0 >= ci, "variant %d: %lld stores inside the attention for %d cases",
              variant, (long long)(s1 - s0), ci);
    CHECK_MSG(merge || m1 - m0 == 0, "variant %d: fused merges without the switch", variant);
}

static void test_fused_default(void)
{
    fz_all(0, 1, 0, 0, 0, 0, 0);
}
static void test_fused_merge(void)
{
    fz_all(1, 0, 1, 0, 0, 0, 0);
}
static void test_fused_store(void)
{
    fz_all(2, 0, 0, 1, 0, 0, 0);
}
static void test_fused_both(void)
{
    fz_all(3, 0, 1, 1, 0, 0, 0);
}
static void test_fused_tc(void)
{
    fz_all(4, 0, 0, 0, 1, 0, 0);
}
static void test_fused_tc_both(void)
{
    fz_all(5, 0, 1, 1, 1, 0, 0);
}
/* CINFER_KVQ_STAGES=3 / 4 (set by main), alone and with both fused switches: bit for bit */
static void test_fused_stages(void)
{
    fz_all(6, 0, 0, 0, 0, 0, 0);
}
static void test_fused_stages_both(void)
{
    fz_all(7, 0, 1, 1, 0, 0, 0);
}
/* CINFER_KVQ_SOFT=lean (with the STAGES main sets): within tolerance */
static void test_fused_lean(void)
{
    fz_all(8, 0, 0, 0, 0, 1, 0);
}
/* CINFER_KVQ_SPLITS=2 (many rounds a split: the deeper rings wrap): the reference, then
 * test_fused_stages / test_fused_stages_both against it */
static void test_fused_splits2(void)
{
    fz_all(9, 1, 0, 0, 0, 0, 0);
}
/* CINFER_KVQ_SOFT=one (with the STAGES main sets): bit for bit, at 32 splits against
 * test_fused_default's reference, at 2 against test_fused_splits2's */
static void test_fused_one(void)
{
    fz_all(10, 0, 0, 0, 0, 0, 1);
}
static void test_fused_one_splits2(void)
{
    fz_all(11, 0, 0, 0, 0, 0, 1);
}

static void env_switch(const char *name, const char *val)
{
    if (val)
        setenv(name, val, 1);
    else
        unsetenv(name);
}

/* A new backend with the switches (read at creation; NULL: unset): CINFER_KVQ_MERGE, _STORE,
 * _DEC, _STAGES, _SOFT, _SPLITS; 0 when it opened. */
static int fz_reopen_env(const char *bn, struct be_config *bc, const char *merge, const char *store,
                         const char *dec, const char *stages, const char *soft, const char *splits)
{
    struct cerr e = {0};
    be_free(g_dev);
    env_switch("CINFER_KVQ_DEC", dec ? dec : "sd"); /* (the reference: k_kvq_sd) */
    env_switch("CINFER_KVQ_MERGE", merge);
    env_switch("CINFER_KVQ_STORE", store);
    env_switch("CINFER_KVQ_STAGES", stages);
    env_switch("CINFER_KVQ_SOFT", soft ? soft : "warp"); /* (the reference: every warp's) */
    env_switch("CINFER_KVQ_SPLITS", splits);
    g_dev = be_new(bn, bc, &e);
    CHECK_MSG(g_dev != NULL, "%s", e.msg);
    return g_dev ? 0 : -1;
}

static int fz_reopen_dec(const char *bn, struct be_config *bc, const char *merge, const char *store,
                         const char *dec)
{
    return fz_reopen_env(bn, bc, merge, store, dec, NULL, NULL, NULL);
}

static int fz_reopen(const char *bn, struct be_config *bc, const char *merge, const char *store)
{
    return fz_reopen_dec(bn, bc, merge, store, NULL);
}

/* g_dev's compute capability major (0 without CUDA). */
static int cc_major(void)
{
    int major = 0;
#ifdef CINFER_HAVE_CUDA
    char d[256];
    be_cuda_describe(g_dev, d, sizeof d);
    const char *cc = strstr(d, "(cc ");
    if (cc)
        major = atoi(cc + 4);
#endif
    return major;
}

/* k8v4 on k_kvq_mm (its 4-bit Lloyd-Max values on the tensor cores; the default on CUDA):
 * head_dim 128 with 2 KV heads (bulk copies on sm_90+), 3 KV heads (cp.async pieces: a bulk
 * copy of the last head's 72-byte record would pass its row), head_dim 64, each against the
 * CPU within tolerance (run_case), each one k_kvq_mm launch a decode step at least. */
#ifdef CINFER_HAVE_CUDA
static void test_k8v4_mma(void)
{
    const struct scheme k8v4 = {KVF_A8, KVF_L4, 1, 1};
    const struct geom gs[] = {{128, 2, 12, 0.0f, 0}, {128, 3, 6, 0.0f, 0}, {64, 4, 8, 0.0f, 0}};
    const int bulk_ok[] = {1, 0, 0};
    for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) {
        const int64_t m0 = be_cuda_kvq_mma(g_dev), b0 = be_cuda_kvq_bulk(g_dev);
        run_case(&gs[i], &k8v4);
        const int64_t m = be_cuda_kvq_mma(g_dev) - m0, b = be_cuda_kvq_bulk(g_dev) - b0;
        printf("k8v4 hd %d kv %d:%d: %lld launches on k_kvq_mm, %lld with bulk copies\n", gs[i].hd,
               gs[i].nh, gs[i].nkv, (long long)m, (long long)b);
        CHECK_MSG(m > 0, "k8v4 hd %d kv %d: no launch on k_kvq_mm", gs[i].hd, gs[i].nkv);
        if (bulk_ok[i] && cc_major() >= 9)
            CHECK_MSG(b > 0, "k8v4 hd %d kv %d: no launch with bulk copies", gs[i].hd, gs[i].nkv);
        if (!bulk_ok[i])
            CHECK_MSG(b == 0, "k8v4 hd %d kv %d: %lld launches with bulk copies", gs[i].hd,
                      gs[i].nkv, (long long)b);
    }
}
#endif

/* Which launch counter dev_suite reads. */
enum { CNT_NONE, CNT_TC, CNT_ONE, CNT_MMA, CNT_BULK };

/* Launches so far of the decode variant `which` counts (0 without CUDA or CNT_NONE). */
static int64_t variant_launches(int which)
{
#ifdef CINFER_HAVE_CUDA
    if (which == CNT_TC)
        return be_cuda_kvq_tc(g_dev);
    if (which == CNT_ONE)
        return be_cuda_kvq_one(g_dev);
    if (which == CNT_MMA)
        return be_cuda_kvq_mma(g_dev);
    if (which == CNT_BULK)
        return be_cuda_kvq_bulk(g_dev);
#endif
    (void)which;
    return 0;
}

/* g_dev anew (the CINFER_KVQ_* variables are read when a backend is made), announced with
 * label, then the CPU-comparison suite on it; *launches (non-NULL): how many launches of
 * the variant `which` counts ran during the suite. -1 when the backend cannot be made (a
 * failed check). */
static int dev_suite(const char *bn, struct be_config *bc, const char *label, int which,
                     int64_t *launches)
{
    struct cerr e = {0};
    be_free(g_dev);
    g_dev = be_new(bn, bc, &e);
    CHECK_MSG(g_dev != NULL, "%s", e.msg);
    if (!g_dev)
        return -1;
    printf("-- %s\n", label);
    const int64_t c0 = variant_launches(which);
    RUN(test_formats_hd128);
    RUN(test_other_geometries);
    RUN(test_long_invariant);
    if (launches)
        *launches = variant_launches(which) - c0;
    return 0;
}

int main(void)
{
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 2};
    const char *bn = getenv("CINFER_TEST_BACKEND");
    bn = bn && *bn ? bn : "cuda";
    /* on CUDA, both choices: the default kernels, then the general kernel for every step,
     * unless CINFER_KVQ_ATTN names one */
    int both = !strcmp(bn, "cuda") && !getenv("CINFER_KVQ_ATTN");
    g_dev = be_new(bn, &bc, &e);
    if (!g_dev) {
        char why[800];
        snprintf(why, sizeof why, "no %s backend here (%s)", bn, e.msg);
        return harness_skip(why);
    }
    g_cpu = be_new("cpu", &bc, &e);
    if (!g_cpu) {
        fprintf(stderr, "cpu backend: %s\n", e.msg);
        return 1;
    }
    RUN(test_formats_hd128);
    RUN(test_other_geometries);
    RUN(test_long_invariant);
    RUN(test_rope_store);
#ifdef CINFER_HAVE_CUDA
    if (!strcmp(bn, "cuda") && !getenv("CINFER_KVQ_DEC") && !getenv("CINFER_KVQ_ATTN")) {
        /* 8-bit K and V ran on k_kvq_mm by default */
        printf("default: %lld decode launches on k_kvq_mm\n", (long long)be_cuda_kvq_mma(g_dev));
        CHECK_MSG(be_cuda_kvq_mma(g_dev) > 0, "the default decode path never ran k_kvq_mm");
        /* head_dim 128 with bulk copies on compute capability 9.0 and newer */
        printf("default: %lld of them with bulk copies (cc %d)\n", (long long)be_cuda_kvq_bulk(g_dev),
               cc_major());
        if (cc_major() >= 9)
            CHECK_MSG(be_cuda_kvq_bulk(g_dev) > 0, "the default never ran k_kvq_mm's bulk copies");
        RUN(test_k8v4_mma);
    }
#endif
    if (both && !getenv("CINFER_KVQ_MERGE") && !getenv("CINFER_KVQ_STORE") &&
        !getenv("CINFER_KVQ_STAGES") && !getenv("CINFER_KVQ_SOFT") &&
        !getenv("CINFER_KVQ_SPLITS")) {
        /* the fused decode switches against the default path (graphs capture short lists
         * here, so the repetitions replay a graph) */
        setenv("CINFER_CUDA_GRAPH_MIN", "1", 1);
        if (fz_reopen(bn, &bc, NULL, NULL) == 0) {
            printf("-- the fused decode switches (CINFER_KVQ_MERGE / CINFER_KVQ_STORE)\n");
            RUN(test_fused_default);
        }
        if (fz_reopen(bn, &bc, "fused", NULL) == 0)
            RUN(test_fused_merge);
        if (fz_reopen(bn, &bc, NULL, "attn") == 0)
            RUN(test_fused_store);
        if (fz_reopen(bn, &bc, "fused", "attn") == 0)
            RUN(test_fused_both);
        if (fz_reopen_dec(bn, &bc, NULL, NULL, "tc") == 0)
            RUN(test_fused_tc);
        if (fz_reopen_dec(bn, &bc, "fused", "attn", "tc") == 0)
            RUN(test_fused_tc_both);
        /* the deeper cp.async pipelines (bit for bit) and the lean softmax (within tolerance);
         * at the default 32 splits a split has at most 2 rounds here (the first and last
         * rounds' group accounting), at 2 splits up to 32 (the rings wrap) */
        static const char *const stg[2] = {"3", "4"};
        for (int i = 0; i < 2; i++) {
            if (fz_reopen_env(bn, &bc, NULL, NULL, NULL, stg[i], NULL, NULL) == 0)
                RUN(test_fused_stages);
            if (fz_reopen_env(bn, &bc, "fused", "attn", NULL, stg[i], NULL, NULL) == 0)
                RUN(test_fused_stages_both);
        }
        if (fz_reopen_env(bn, &bc, NULL, NULL, NULL, NULL, "lean", NULL) == 0)
            RUN(test_fused_lean);
        if (fz_reopen_env(bn, &bc, NULL, NULL, NULL, "4", "lean", NULL) == 0)
            RUN(test_fused_lean);
        /* one warp a head's softmax: bit for bit, with 2 and 4 stages */
        if (fz_reopen_env(bn, &bc, NULL, NULL, NULL, NULL, "one", NULL) == 0)
            RUN(test_fused_one);
        if (fz_reopen_env(bn, &bc, NULL, NULL, NULL, "4", "one", NULL) == 0)
            RUN(test_fused_one);
        if (fz_reopen_env(bn, &bc, NULL, NULL, NULL, NULL, NULL, "2") == 0)
            RUN(test_fused_splits2);
        for (int i = 0; i < 2; i++) {
            if (fz_reopen_env(bn, &bc, NULL, NULL, NULL, stg[i], NULL, "2") == 0)
                RUN(test_fused_stages);
            if (fz_reopen_env(bn, &bc, "fused", "attn", NULL, stg[i], NULL, "2") == 0)
                RUN(test_fused_stages_both);
        }
        if (fz_reopen_env(bn, &bc, NULL, NULL, NULL, NULL, "one", "2") == 0)
            RUN(test_fused_one_splits2);
        if (fz_reopen_env(bn, &bc, NULL, NULL, NULL, "4", "one", "2") == 0)
            RUN(test_fused_one_splits2);
        unsetenv("CINFER_CUDA_GRAPH_MIN");
        if (fz_reopen(bn, &bc, NULL, NULL) != 0)
            return harness_done();
    }
    if (both) {
        /* again with the general kernel (CINFER_KVQ_ATTN is read at backend creation) */
        setenv("CINFER_KVQ_ATTN", "general", 1);
        if (dev_suite(bn, &bc, "CINFER_KVQ_ATTN=general", CNT_NONE, NULL))
            return harness_done();
        unsetenv("CINFER_KVQ_ATTN");
        /* and the decode path's other block layout (8 teams of a head: CINFER_KVQ_NT=128) */
        setenv("CINFER_KVQ_NT", "128", 1);
        if (dev_suite(bn, &bc, "CINFER_KVQ_NT=128", CNT_NONE, NULL))
            return harness_done();
        unsetenv("CINFER_KVQ_NT");
        /* and the keys' scores on the tensor cores (CINFER_KVQ_DEC=tc: 8-bit keys, head_dim
         * 64 / 128; the other cases run the default decode kernel) against the CPU */
        setenv("CINFER_KVQ_DEC", "tc", 1);
        int64_t n = 0;
        if (dev_suite(bn, &bc, "CINFER_KVQ_DEC=tc", CNT_TC, &n))
            return harness_done();
        printf("CINFER_KVQ_DEC=tc: %lld decode launches on the tensor cores\n", (long long)n);
        CHECK_MSG(n > 0, "CINFER_KVQ_DEC=tc: no decode launch used the tensor cores");
        /* and k_kvq_sd for every case (CINFER_KVQ_DEC=sd: none on k_kvq_mm) against the CPU */
        setenv("CINFER_KVQ_DEC", "sd", 1);
        if (dev_suite(bn, &bc, "CINFER_KVQ_DEC=sd", CNT_MMA, &n))
            return harness_done();
        CHECK_MSG(n == 0, "CINFER_KVQ_DEC=sd: %lld launches on k_kvq_mm", (long long)n);
        unsetenv("CINFER_KVQ_DEC");
        /* and k_kvq_mm's cp.async copies at head_dim 128 too (CINFER_KVQ_BULK=0: no launch
         * with bulk copies) against the CPU */
        setenv("CINFER_KVQ_BULK", "0", 1);
        if (dev_suite(bn, &bc, "CINFER_KVQ_BULK=0", CNT_BULK, &n))
            return harness_done();
        CHECK_MSG(n == 0, "CINFER_KVQ_BULK=0: %lld launches with bulk copies", (long long)n);
        unsetenv("CINFER_KVQ_BULK");
        /* and k_kvq_mm's bulk copies at 2 splits (up to 32 rounds a split: every round buffer's
         * barrier goes through many phases; at the default 48 splits a split here has at most
         * 2 rounds) against the CPU */
        setenv("CINFER_KVQ_SPLITS", "2", 1);
        if (dev_suite(bn, &bc, "CINFER_KVQ_SPLITS=2", CNT_BULK, &n))
            return harness_done();
        printf("CINFER_KVQ_SPLITS=2: %lld launches with bulk copies\n", (long long)n);
        if (cc_major() >= 9)
            CHECK_MSG(n > 0, "CINFER_KVQ_SPLITS=2: no launch with bulk copies");
        unsetenv("CINFER_KVQ_SPLITS");
        /* and the lean softmax with the deepest pipeline (CINFER_KVQ_SOFT=lean,
         * CINFER_KVQ_STAGES=4; head_dim 256's buffers fall back to fewer) against the CPU */
        setenv("CINFER_KVQ_SOFT", "lean", 1);
        setenv("CINFER_KVQ_STAGES", "4", 1);
        if (dev_suite(bn, &bc, "CINFER_KVQ_SOFT=lean CINFER_KVQ_STAGES=4", CNT_NONE, NULL))
            return harness_done();
        unsetenv("CINFER_KVQ_STAGES");
        /* and one warp a head's softmax (CINFER_KVQ_SOFT=one: head_dim 256, one head a
         * group, a window, a softcap) against the CPU */
        setenv("CINFER_KVQ_SOFT", "one", 1);
        if (dev_suite(bn, &bc, "CINFER_KVQ_SOFT=one", CNT_ONE, &n))
            return harness_done();
        printf("CINFER_KVQ_SOFT=one: %lld decode launches with one warp a head's softmax\n",
               (long long)n);
        CHECK_MSG(n > 0, "CINFER_KVQ_SOFT=one: no decode launch ran it");
        unsetenv("CINFER_KVQ_SOFT");
    }
    be_free(g_dev);
    be_free(g_cpu);
    return harness_done();
}
