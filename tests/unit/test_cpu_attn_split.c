/* test_cpu_attn_split.c — the CPU attention's two schedules (backend/cpu/attn.c) give the
 * same bits: a token's context is cut into fixed 256-position segments anchored at its
 * window start and folded in order, whether the segments run inside one work item (steps
 * with many items) or on separate threads with a merge pass (a long-context decode, a
 * short chunk). Checked at every kernel level this CPU has, with F32, F16 and quantized
 * (kvq: affine and Lloyd-Max, rotated and not) caches, with and without a sliding window:
 *
 *  - a mixed step (a 20-token prefill run crossing a segment edge, decode tokens of three
 *    sequences at 1100 / 600 / 257 positions) at 1 thread vs each token alone and the decode
 *    tokens together at 1, 2 and 3 threads (those take the split schedule), and at 2 threads
 *    with CINFER_CPU_ATTN_SPLIT=0 (never split): bit-identical;
 *  - every output against a double-precision softmax over the rows as the kernel reads them
 *    (dequantized, in the rotated domain unrotated back): within 5e-6 of the output scale
 *    (seen: at most 2.6e-7; a segment weighted 1.001 too much gives 6e-5), so the merge of
 *    segment states is right, not only consistent.
 */
#include "harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/kvq.h"
#include "util/half.h"

enum { HD = 64, NKV = 2, NH = 8, BS = 16, MAXB = 72, NSEQ = 3, NTOK = 25 };
static const int g_len[NSEQ] = {1100, 600, 257}; /* filled positions per sequence */

static uint64_t g_rng = 99;
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

/* split: 0 = CINFER_CPU_ATTN_SPLIT=0 (never the split schedule) */
static struct be *open_cpu(const char *isa, int threads, int split)
{
    if (!be_cpu_isa_supported(isa))
        return NULL;
    setenv("CINFER_CPU_ISA", isa, 1);
    if (!split)
        setenv("CINFER_CPU_ATTN_SPLIT", "0", 1);
    struct be_config cfg = {.n_threads = threads};
    struct cerr e = {0};
    struct be *b = be_new("cpu", &cfg, &e);
    unsetenv("CINFER_CPU_ISA");
    unsetenv("CINFER_CPU_ATTN_SPLIT");
    CHECK_MSG(b != NULL, "cpu:%s: %s", isa, e.msg);
    return b;
}

struct setup {
    int dt;
    size_t rk, rv;
    char *kc, *vc;
    int32_t tables[NSEQ * MAXB];
    int32_t pos[NTOK], seq[NTOK];
    float *q;
};

/* K/V of every sequence stored through the backend's kv_store in shuffled blocks; this
 * step's tokens: sequence 0 positions 240..259 (a chunk over the edge at 256), then the
 * last position of each sequence (decode tokens), then sequence 0's position 1023 and 1024
 * (both sides of a segment edge). */
static void build(struct be *b, int dt, struct setup *s)
{
    int kvd = HD * NKV, nb = NSEQ * MAXB;
    s->dt = dt;
    s->rk = kvq_row_bytes(dt, 0, kvd), s->rv = kvq_row_bytes(dt, 1, kvd);
    s->kc = calloc((size_t)nb * BS, s->rk);
    s->vc = calloc((size_t)nb * BS, s->rv);
    for (int i = 0; i < nb; i++)
        s->tables[i] = i;
    for (int i = nb - 1; i > 0; i--) {
        int j = (int)(urand() * (i + 1)), t = s->tables[i];
        s->tables[i] = s->tables[j], s->tables[j] = t;
    }
    float *k = malloc(sizeof(float) * kvd), *v = malloc(sizeof(float) * kvd);
    for (int sq = 0; sq < NSEQ; sq++)
        for (int p = 0; p < g_len[sq]; p++) {
            for (int i = 0; i < kvd; i++) {
                /* a drift over positions, so segments have different maxima */
                k[i] = gauss() + (i % HD == 5 ? 3.0f * sinf((float)p / 97.0f) : 0.0f);
                v[i] = gauss();
            }
            int32_t slot = s->tables[sq * MAXB + p / BS] * BS + p % BS;
            b->ops->kv_store(b, s->kc, s->vc, dt, k, v, &slot, 1, kvd);
        }
    free(k), free(v);
    int n = 0;
    for (int p = 240; p < 260; p++)
        s->pos[n] = p, s->seq[n++] = 0;
    for (int sq = 0; sq < NSEQ; sq++)
        s->pos[n] = g_len[sq] - 1, s->seq[n++] = sq;
    s->pos[n] = 1023, s->seq[n++] = 0;
    CHECK(n == NTOK - 1);
    s->pos[n] = 1024, s->seq[n++] = 0;
    s->q = malloc(sizeof(float) * NTOK * NH * HD);
    for (int i = 0; i < NTOK * NH * HD; i++)
        s->q[i] = gauss() * 0.5f;
}

/* Attention of the tokens idx[0..n) of the setup on b into out (n, NH * HD). */
static void run(struct be *b, const struct setup *s, int window, const int *idx, int n, float *out)
{
    int32_t pos[NTOK], seq[NTOK];
    float *q = malloc(sizeof(float) * (size_t)n * NH * HD);
    for (int i = 0; i < n; i++) {
        pos[i] = s->pos[idx[i]], seq[i] = s->seq[idx[i]];
        memcpy(q + (size_t)i * NH * HD, s->q + (size_t)idx[i] * NH * HD, sizeof(float) * NH * HD);
    }
    struct be_attn a = {.n_tok = n, .n_head = NH, .n_kv_head = NKV, .head_dim = HD,
                        .scale = 0.125f, .window = window, .pos = pos, .seq = seq,
                        .block_tables = s->tables, .max_blocks = MAXB, .block_size = BS,
                        .kv_dtype = s->dt, .k_cache = s->kc, .v_cache = s->vc};
    b->ops->attention(b, out, q, &a);
    free(q);
}

/* Largest |out - reference| over all tokens, relative to max(1, output scale). */
static double ref_err(const struct setup *s, int window, const float *out)
{
    int kvd = HD * NKV;
    double worst = 0, scale = 1;
    float *kd = malloc(sizeof(float) * 1100 * HD), *vd = malloc(sizeof(float) * 1100 * HD);
    double *sco = malloc(sizeof(double) * 1100);
    for (int t = 0; t < NTOK; t++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV), sq = s->seq[t], pos = s->pos[t];
            int lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
            double mx = -1e300, sum = 0, o[HD] = {0};
            for (int p = lo; p <= pos; p++) {
                size_t row = (size_t)s->tables[sq * MAXB + p / BS] * BS + p % BS;
                float *kp = kd + (size_t)p * HD, *vp = vd + (size_t)p * HD;
                if (kvq_is(s->dt)) {
                    kvq_load_head(s->dt, 0, s->kc + row * s->rk, g, kp);
                    kvq_load_head(s->dt, 1, s->vc + row * s->rv, g, vp);
                    if (kvq_rot_of(s->dt, 0))
                        kvq_unrotate(kp, HD);
                    if (kvq_rot_of(s->dt, 1))
                        kvq_unrotate(vp, HD);
                } else
                    for (int i = 0; i < HD; i++) {
                        size_t ix = row * kvd + (size_t)g * HD + i;
                        kp[i] = s->dt == DT_F16 ? half_f16_to_f32(((uint16_t *)s->kc)[ix])
                                                : ((float *)s->kc)[ix];
                        vp[i] = s->dt == DT_F16 ? half_f16_to_f32(((uint16_t *)s->vc)[ix])
                                                : ((float *)s->vc)[ix];
                    }
                double d = 0;
                for (int i = 0; i < HD; i++)
                    d += (double)s->q[((size_t)t * NH + h) * HD + i] * kp[i];
                sco[p] = d * 0.125;
                mx = fmax(mx, sco[p]);
            }
            for (int p = lo; p <= pos; p++) {
                double e = exp(sco[p] - mx);
                sum += e;
                for (int i = 0; i < HD; i++)
                    o[i] += e * vd[(size_t)p * HD + i];
            }
            for (int i = 0; i < HD; i++) {
                double want = o[i] / sum;
                scale = fmax(scale, fabs(want));
                worst = fmax(worst, fabs(out[((size_t)t * NH + h) * HD + i] - want));
            }
        }
    free(kd), free(vd), free(sco);
    return worst / scale;
}

static void check_level(const char *isa)
{
    struct be *bs[4] = {open_cpu(isa, 1, 1), open_cpu(isa, 2, 1), open_cpu(isa, 3, 1),
                        open_cpu(isa, 2, 0)};
    if (!bs[0] || !bs[1] || !bs[2] || !bs[3]) {
        printf("  cpu:%s not on this CPU\n", isa);
        goto out;
    }
    struct cerr e = {0};
    /* f32, f16, then kvq schemes: affine 8/4 bits unrotated, 4-bit rotated K with 3-bit
     * Lloyd-Max V, f16 K with 8-bit Lloyd-Max V */
    int codes[6] = {DT_F32, DT_F16, 0, 0, 0, 0};
    CHECK(kvq_code(KVF_A8, KVF_A8, 0, 0, HD, &codes[2], &e) == 0);
    CHECK(kvq_code(KVF_A4, KVF_A4, 0, 0, HD, &codes[3], &e) == 0);
    CHECK(kvq_code(KVF_A4, KVF_L3, 1, 1, HD, &codes[4], &e) == 0);
    CHECK(kvq_code(KVF_F16, KVF_L8, 0, 1, HD, &codes[5], &e) == 0);
    static const int windows[2] = {0, 700};
    int all[NTOK], dec[NSEQ];
    for (int i = 0; i < NTOK; i++)
        all[i] = i;
    for (int i = 0; i < NSEQ; i++)
        dec[i] = 20 + i;
    size_t qn = (size_t)NH * HD;
    float *want = malloc(sizeof(float) * NTOK * qn), *got = malloc(sizeof(float) * NTOK * qn);
    for (int ci = 0; ci < 6; ci++)
        for (int wi = 0; wi < 2; wi++) {
            struct setup s;
            g_rng = 1000 + (uint64_t)ci;
            build(bs[0], codes[ci], &s);
            int w = windows[wi];
            char what[96];
            snprintf(what, sizeof what, "cpu:%s kv %s window %d", isa,
                     ci == 0 ? "f32" : ci == 1 ? "f16" : "kvq", w);
            run(bs[0], &s, w, all, NTOK, want);
            double err = ref_err(&s, w, want);
            if (getenv("CINFER_TEST_VERBOSE"))
                printf("  %s (scheme %d): %.3g of the output scale from double\n", what, ci, err);
            CHECK_MSG(err <= 5e-6, "%s (scheme %d): off by %.3g of the output scale from double",
                      what, ci, err);
            static const char *const lab[4] = {"1 thread", "2 threads", "3 threads",
                                               "2 threads, split off"};
            for (int th = 0; th < 4; th++) {
                int bad = -1;
                for (int t = 0; t < NTOK && bad < 0; t++) {
                    run(bs[th], &s, w, &t, 1, got);
                    if (memcmp(got, want + (size_t)t * qn, sizeof(float) * qn))
                        bad = t;
                }
                CHECK_MSG(bad < 0, "%s (scheme %d), %s: token %d alone differs from the batch", what,
                          ci, lab[th], bad);
                run(bs[th], &s, w, dec, NSEQ, got);
                CHECK_MSG(!memcmp(got, want + (size_t)20 * qn, sizeof(float) * NSEQ * qn),
                          "%s (scheme %d), %s: the decode tokens together differ", what, ci,
                          lab[th]);
                run(bs[th], &s, w, all, NTOK, got);
                CHECK_MSG(!memcmp(got, want, sizeof(float) * NTOK * qn),
                          "%s (scheme %d), %s: the batch differs from 1 thread", what, ci,
                          lab[th]);
            }
            free(s.kc), free(s.vc), free(s.q);
        }
    free(want), free(got);
out:
    for (int i = 0; i < 4; i++)
        be_free(bs[i]);
}

static void test_schedules_agree(void)
{
    check_level("scalar");
    check_level("avx2");
    check_level("avx512");
}

int main(void)
{
    RUN(test_schedules_agree);
    return harness_done();
}
