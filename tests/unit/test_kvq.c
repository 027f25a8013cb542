/* test_kvq.c — the quantized KV formats (backend/kvq.h): every format's error within its
 * stated bound, the Hadamard rotation, row layout sizes and the scheme codes. */
#include "harness.h"

#include <stdint.h>

#include "backend/backend.h"
#include "backend/dtype.h"
#include "backend/kvq.h"
#include "engine/gen.h"
#include "model/kv_center.h"
#include "model/model.h"

static uint64_t g_rng = 0x1234567;
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

/* Fills a group with one of several shapes: Gaussian, uniform with an offset, an outlier,
 * constant, tiny, mixed magnitudes. */
static void fill(float *x, int g, int kind)
{
    for (int i = 0; i < g; i++) {
        switch (kind % 6) {
        case 0: x[i] = gauss(); break;
        case 1: x[i] = 3.0f + (float)urand(); break;
        case 2: x[i] = i == 3 ? 40.0f : 0.1f * gauss(); break;
        case 3: x[i] = -2.5f; break;
        case 4: x[i] = 1e-6f * gauss(); break;
        default: x[i] = (float)((urand() - 0.5) * 1000.0); break;
        }
    }
}

static void test_fwht(void)
{
    /* the unnormalized transform of e_0 is all ones; H H = n I */
    float x[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    kvq_fwht(x, 8);
    for (int i = 0; i < 8; i++)
        CHECK(x[i] == 1.0f);
    float y[8] = {1, 2, 3, 4, 5, 6, 7, 8}, z[8];
    memcpy(z, y, sizeof y);
    kvq_fwht(z, 8);
    CHECK(z[0] == 36.0f && z[1] == -4.0f && z[2] == -8.0f && z[4] == -16.0f);
    kvq_fwht(z, 8);
    for (int i = 0; i < 8; i++)
        CHECK(z[i] == 8.0f * y[i]);
    /* rotate is orthonormal and unrotate inverts it */
    for (int n = 8; n <= 256; n *= 2) {
        float a[256], b[256];
        double na = 0, nb = 0, err = 0;
        for (int i = 0; i < n; i++)
            a[i] = b[i] = gauss(), na += (double)a[i] * a[i];
        kvq_rotate(b, n);
        for (int i = 0; i < n; i++)
            nb += (double)b[i] * b[i];
        CHECK_NEAR(nb / na, 1.0, 1e-5);
        kvq_unrotate(b, n);
        for (int i = 0; i < n; i++)
            err = fmax(err, fabs(b[i] - a[i]));
        CHECK_MSG(err < 1e-5, "n %d err %g", n, err);
    }
}

/* Affine: |x - x'| <= d/2 (1 + 2^-10) + 2^-10 (|min| + |max|) + 2^-24 2^b, d = (max-min)/(2^b-1). */
static void test_affine(void)
{
    int bits[] = {2, 4, 5, 8};
    for (int bi = 0; bi < 4; bi++) {
        int b = bits[bi], fmt = kvq_fmt_affine(b);
        CHECK(fmt >= 0);
        for (int g = 8; g <= 32; g *= 2) {
            CHECK_EQ_INT(kvq_group_bytes(fmt, g), 4 + g * b / 8);
            int bad = 0;
            double worst = 0;
            for (int it = 0; it < 600; it++) {
                float x[32], y[32];
                uint8_t buf[64];
                fill(x, g, it);
                kvq_quant_group(fmt, g, x, buf);
                kvq_dequant_group(fmt, g, buf, y);
                float mn = x[0], mx = x[0];
                for (int i = 0; i < g; i++)
                    mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]);
                double d = ((double)mx - mn) / ((1 << b) - 1);
                double bound = d / 2 * (1 + 1.0 / 1024) + (fabs(mn) + fabs(mx)) / 1024 +
                               ldexp(1.0, b - 24);
                for (int i = 0; i < g; i++) {
                    double e = fabs((double)x[i] - y[i]);
                    worst = fmax(worst, bound > 0 ? e / bound : 0);
                    bad += e > bound;
                }
            }
            CHECK_MSG(bad == 0, "a%d g%d: %d elements over the bound (worst %.3f of it)", b, g,
                      bad, worst);
        }
    }
}

/* Lloyd-Max on Gaussian coordinates: MSE / variance <= 1.2 D_b (D_b the codebook's own
 * distortion; the group's RMS stands in for sigma). */
static void test_lloyd(void)
{
    int bits[] = {2, 3, 4, 5, 8};
    for (int bi = 0; bi < 5; bi++) {
        int b = bits[bi], fmt = kvq_fmt_lm(b);
        double D;
        const float *c = kvq_lm_codebook(b, &D);
        CHECK(fmt >= 0 && c && D > 0);
        for (int i = 1; i < (1 << b); i++)
            CHECK(c[i] > c[i - 1]);
        for (int i = 0; i < (1 << b) / 2; i++)
            CHECK(c[i] == -c[(1 << b) - 1 - i]);
        double se = 0, var = 0;
        for (int it = 0; it < 4000; it++) {
            float x[32], y[32];
            uint8_t buf[64];
            float sig = (float)(0.01 + 10 * urand());
            for (int i = 0; i < 32; i++)
                x[i] = sig * gauss();
            kvq_quant_group(fmt, 32, x, buf);
            kvq_dequant_group(fmt, 32, buf, y);
            for (int i = 0; i < 32; i++) {
                se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]) / ((double)sig * sig);
                var += 1.0;
            }
        }
        double r = se / var;
        CHECK_MSG(r <= 1.2 * D, "lm%d: mse %.4g > 1.2 * %.4g", b, r, D);
        printf("lm%d: mse/var %.4g (codebook D %.4g)\n", b, r, D);
        /* a zero group stays zero */
        float z[32] = {0}, y[32];
        uint8_t buf[64];
        kvq_quant_group(fmt, 32, z, buf);
        kvq_dequant_group(fmt, 32, buf, y);
        for (int i = 0; i < 32; i++)
            CHECK(y[i] == 0.0f);
    }
}

static void test_codes(void)
{
    int code;
    struct cerr e = {0};
    /* plain */
    CHECK(kvq_code(KVF_F16, KVF_F16, 0, 0, 128, &code, &e) == 0 && code == DT_F16);
    /* k8v3 at head_dim 128: 2.56x of f16 */
    CHECK(kvq_code(KVF_A8, KVF_L3, 0, 1, 128, &code, &e) == 0 && kvq_is(code));
    CHECK_EQ_INT(kvq_group_of(code), 32);
    CHECK_EQ_INT(kvq_head_dim_of(code), 128);
    CHECK_EQ_INT(kvq_rot_of(code, 0), 0);
    CHECK_EQ_INT(kvq_rot_of(code, 1), 1);
    size_t f16 = kvq_token_bytes(DT_F16, 256), q = kvq_token_bytes(code, 256);
    CHECK_EQ_INT(f16, 1024);
    CHECK_EQ_INT(q, 400);
    /* uniform 8 and 4 */
    CHECK(kvq_code(KVF_A8, KVF_A8, 0, 0, 128, &code, &e) == 0);
    CHECK_EQ_INT(kvq_row_bytes(code, 0, 128), 4 * 36);
    CHECK(kvq_code(KVF_A4, KVF_A4, 1, 1, 64, &code, &e) == 0);
    CHECK_EQ_INT(kvq_row_bytes(code, 1, 64), 2 * 20);
    /* small heads get small groups; rotation needs a power of two */
    CHECK(kvq_code(KVF_A8, KVF_A8, 0, 0, 8, &code, &e) == 0 && kvq_group_of(code) == 8);
    CHECK(kvq_code(KVF_A8, KVF_A8, 0, 0, 80, &code, &e) == 0 && kvq_group_of(code) == 16);
    CHECK(kvq_code(KVF_A8, KVF_A8, 1, 1, 80, &code, &e) == CERR_INVALID);
    CHECK(strstr(e.msg, "power-of-two") != NULL);
    CHECK(kvq_code(KVF_A8, KVF_L3, 0, 0, 12, &code, &e) == CERR_INVALID);
    /* distinct schemes get distinct codes */
    int a, b2;
    kvq_code(KVF_A8, KVF_L3, 0, 0, 128, &a, &e);
    kvq_code(KVF_A8, KVF_L4, 0, 0, 128, &b2, &e);
    CHECK(a != b2);
}

/* Rows: store then load (and unrotate) returns each head within its per-group bound (the
 * rotation is orthonormal, so the L2 error carries over); on keys with an outlier channel
 * the rotated 4-bit row is closer than the unrotated one. */
static void test_rows(void)
{
    struct cerr e = {0};
    int hd = 64, nh = 4, kvd = hd * nh;
    int plain, rot;
    CHECK(kvq_code(KVF_A4, KVF_A4, 0, 0, hd, &plain, &e) == 0);
    CHECK(kvq_code(KVF_A4, KVF_A4, 1, 1, hd, &rot, &e) == 0);
    double e_plain = 0, e_rot = 0;
    for (int it = 0; it < 200; it++) {
        float x[256], y[64];
        uint8_t buf[4096];
        for (int i = 0; i < kvd; i++)
            x[i] = (i % hd == 5 ? 30.0f : 0.0f) + gauss();
        for (int s = 0; s < 2; s++) {
            int code = s ? rot : plain;
            CHECK(kvq_row_bytes(code, 0, kvd) <= sizeof buf);
            kvq_store_row(code, 0, buf, x, kvd);
            for (int h = 0; h < nh; h++) {
                kvq_load_head(code, 0, buf, h, y);
                if (s)
                    kvq_unrotate(y, hd);
                double se = 0;
                for (int i = 0; i < hd; i++)
                    se += ((double)x[h * hd + i] - y[i]) * ((double)x[h * hd + i] - y[i]);
                *(s ? &e_rot : &e_plain) += se;
            }
        }
    }
    printf("a4 rows with an outlier channel: sq. error unrotated %.4g, rotated %.4g\n", e_plain,
           e_rot);
    CHECK(e_rot < 0.5 * e_plain);
    /* every V format round-trips a row through store/load */
    int fmts[] = {KVF_F16, KVF_F32, KVF_A2, KVF_A4, KVF_A5, KVF_A8, KVF_L2, KVF_L3, KVF_L4, KVF_L5, KVF_L8};
    for (int f = 0; f < 11; f++) {
        int code;
        CHECK(kvq_code(KVF_A8, fmts[f], 0, 0, hd, &code, &e) == 0);
        float x[256], y[64];
        uint8_t buf[4096];
        for (int i = 0; i < kvd; i++)
            x[i] = gauss();
        kvq_store_row(code, 1, buf, x, kvd);
        double se = 0, ss = 0;
        for (int h = 0; h < nh; h++) {
            kvq_load_head(code, 1, buf, h, y);
            if (kvq_rot_of(code, 1))
                kvq_unrotate(y, hd);
            for (int i = 0; i < hd; i++)
                se += ((double)x[h * hd + i] - y[i]) * ((double)x[h * hd + i] - y[i]),
                    ss += (double)x[h * hd + i] * x[h * hd + i];
        }
        /* the row loader's fast paths give kvq_dequant_group's values bit for bit */
        for (int h = 0; h < nh; h++) {
            float yg[64];
            int g = kvq_group_of(code);
            size_t gb = kvq_group_bytes(kvq_fmt_of(code, 1), g);
            kvq_load_head(code, 1, buf, h, y);
            for (int i = 0; i < hd; i += g)
                kvq_dequant_group(kvq_fmt_of(code, 1), g, buf + (size_t)(h * hd + i) / g * gb, yg + i);
            CHECK(!memcmp(y, yg, sizeof(float) * (size_t)hd));
        }
        int b = kvq_fmt_bits(fmts[f]);
        /* relative squared error well under the format's step: 4^-b up to constants */
        double lim = b >= 16 ? 1e-6 : 2.0 * pow(4.0, -b) * 4;
        CHECK_MSG(se / ss <= lim, "%s: rel sq err %.3g > %.3g", kvq_fmt_name(fmts[f]), se / ss,
                  lim);
    }
}

/* Paged attention over quantized KV (the CPU backend's kv_store + attention) against two
 * double-precision references: (a) softmax attention over the dequantized rows (what the
 * kernel must compute: relative error <= 1e-4 of the output's scale), (b) over the original
 * f32 rows (the scheme's own error: within a per-scheme tolerance). Three sequences in
 * scattered blocks, prefill and decode tokens in one call, GQA 2:1. */
static void test_attention_conformance(void)
{
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 2};
    struct be *be = be_new("cpu", &bc, &e);
    CHECK(be != NULL);
    if (!be)
        return;
    enum { HD = 64, NKV = 2, NH = 4, BS = 16, NB = 24, MAXB = 8 };
    const int kvd = HD * NKV, lens[3] = {40, 75, 6};
    int32_t tables[3 * MAXB];
    for (int i = 0; i < 3 * MAXB; i++)
        tables[i] = (i * 7 + 3) % NB; /* distinct: 24 blocks, 24 entries */
    static float K[3][128][HD * NKV], V[3][128][HD * NKV];
    for (int s = 0; s < 3; s++)
        for (int p = 0; p < lens[s]; p++)
            for (int i = 0; i < kvd; i++) {
                K[s][p][i] = gauss() + (i % HD == 3 ? 4.0f : 0.0f); /* an outlier channel */
                V[s][p][i] = gauss();
            }
    struct {
        int kf, vf, rk, rv;
        double tol;
    } sc[] = {
        {KVF_A8, KVF_A8, 0, 0, 0.02}, {KVF_A4, KVF_A4, 1, 1, 0.25}, {KVF_A8, KVF_L4, 0, 1, 0.15},
        {KVF_A8, KVF_L3, 0, 1, 0.25}, {KVF_A4, KVF_L2, 1, 1, 0.6},  {KVF_F16, KVF_L8, 0, 1, 0.02},
    };
    for (int si = 0; si < 6; si++) {
        int code;
        CHECK(kvq_code(sc[si].kf, sc[si].vf, sc[si].rk, sc[si].rv, HD, &code, &e) == 0);
        size_t rk = kvq_row_bytes(code, 0, kvd), rv = kvq_row_bytes(code, 1, kvd);
        char *kc = be->ops->alloc(be, (size_t)NB * BS * rk),
             *vc = be->ops->alloc(be, (size_t)NB * BS * rv);
        /* store all positions, a sequence at a time */
        for (int s = 0; s < 3; s++) {
            int32_t slots[128];
            for (int p = 0; p < lens[s]; p++)
                slots[p] = tables[s * MAXB + p / BS] * BS + p % BS;
            be->ops->kv_store(be, kc, vc, code, &K[s][0][0], &V[s][0][0], slots, lens[s], kvd);
        }
        /* query: the last 5 positions of seq 0, the last of seq 1, all 6 of seq 2 */
        int32_t pos[12], seq[12];
        int nt = 0;
        for (int p = lens[0] - 5; p < lens[0]; p++)
            pos[nt] = p, seq[nt++] = 0;
        pos[nt] = lens[1] - 1, seq[nt++] = 1;
        for (int p = 0; p < lens[2]; p++)
            pos[nt] = p, seq[nt++] = 2;
        static float q[12 * NH * HD], out[12 * NH * HD];
        for (int i = 0; i < nt * NH * HD; i++)
            q[i] = gauss();
        struct be_attn a = {.n_tok = nt, .n_head = NH, .n_kv_head = NKV, .head_dim = HD,
                            .scale = 0.125f, .pos = pos, .seq = seq, .block_tables = tables,
                            .max_blocks = MAXB, .block_size = BS, .kv_dtype = code,
                            .k_cache = kc, .v_cache = vc};
        be->ops->attention(be, out, q, &a);
        double err_a = 0, err_b = 0, scale = 0;
        for (int t = 0; t < nt; t++)
            for (int h = 0; h < NH; h++) {
                int g = h / (NH / NKV), s = seq[t];
                double ref[2][HD] = {{0}}, mx[2] = {-1e30, -1e30}, sum[2] = {0, 0};
                static double sco[2][128];
                static float kd[128][HD], vd[128][HD];
                for (int p = 0; p <= pos[t]; p++) {
                    size_t row = (size_t)tables[s * MAXB + p / BS] * BS + p % BS;
                    kvq_load_head(code, 0, kc + row * rk, g, kd[p]);
                    kvq_load_head(code, 1, vc + row * rv, g, vd[p]);
                    if (kvq_rot_of(code, 0))
                        kvq_unrotate(kd[p], HD);
                    if (kvq_rot_of(code, 1))
                        kvq_unrotate(vd[p], HD);
                    for (int w = 0; w < 2; w++) {
                        const float *kk = w ? &K[s][p][g * HD] : kd[p];
                        double d = 0;
                        for (int i = 0; i < HD; i++)
                            d += (double)q[(t * NH + h) * HD + i] * kk[i];
                        sco[w][p] = d * 0.125;
                        mx[w] = fmax(mx[w], sco[w][p]);
                    }
                }
                for (int w = 0; w < 2; w++)
                    for (int p = 0; p <= pos[t]; p++) {
                        double pr = exp(sco[w][p] - mx[w]);
                        sum[w] += pr;
                        const float *vv = w ? &V[s][p][g * HD] : vd[p];
                        for (int i = 0; i < HD; i++)
                            ref[w][i] += pr * vv[i];
                    }
                for (int i = 0; i < HD; i++) {
                    double o = out[(t * NH + h) * HD + i];
                    err_a = fmax(err_a, fabs(o - ref[0][i] / sum[0]));
                    err_b = fmax(err_b, fabs(o - ref[1][i] / sum[1]));
                    scale = fmax(scale, fabs(ref[1][i] / sum[1]));
                }
            }
        printf("attention k %s v %s: vs dequantized %.2g, vs f32 %.3g (output scale %.3g)\n",
               kvq_fmt_name(sc[si].kf), kvq_fmt_name(sc[si].vf), err_a, err_b, scale);
        CHECK_MSG(err_a <= 1e-4 * fmax(scale, 1.0), "scheme %d: kernel vs dequantized %g", si,
                  err_a);
        CHECK_MSG(err_b <= sc[si].tol * scale, "scheme %d: vs f32 %g > %g", si, err_b,
                  sc[si].tol * scale);
        be->ops->free(be, kc);
        be->ops->free(be, vc);
    }
    be_free(be);
}

/* On a model with key biases (the qwen2 parity fixture), a scheme that stores K and V
 * exactly (f32) but rotated, through the quantized path with its key centring, gives the
 * logits of the plain f32 cache: the rotation and the centring are exact transformations. */
static void test_exact_path_on_qwen2(void)
{
    const char *src = getenv("CINFER_SRC");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/parity/qwen2/model.gguf", src ? src : ".");
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 2};
    struct be *be = be_new("cpu", &bc, &e);
    struct model *m = NULL;
    if (!be || model_load(&m, path, be, &e)) {
        fprintf(stderr, "%s: %s\n", path, e.msg);
        CHECK(0);
        be_free(be);
        return;
    }
    int centred = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        float *c = model_kv_center_new(m, l);
        centred += c != NULL;
        if (c)
            be->ops->free(be, c);
    }
    printf("qwen2 fixture: head_dim %d, %d of %d layers have a key centre\n", m->hp.head_dim,
           centred, m->hp.n_layer);
    CHECK(centred > 0);
    int code;
    CHECK(kvq_code(KVF_F32, KVF_F32, 1, 1, m->hp.head_dim, &code, &e) == 0 && kvq_is(code));
    int32_t ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = (int32_t)((i * 131 + 7) % m->hp.n_vocab);
    int V = m->hp.n_vocab;
    float *la = malloc((size_t)40 * V * 4), *lb = malloc((size_t)40 * V * 4);
    struct gen *ga = NULL, *gb = NULL;
    CHECK(gen_new(&ga, m, 64, 16, DT_F32, &e) == 0);
    CHECK(gen_new(&gb, m, 64, 16, code, &e) == 0);
    if (ga && gb) {
        CHECK(gen_feed(ga, ids, 40, la, &e) == 0);
        CHECK(gen_feed(gb, ids, 40, lb, &e) == 0);
        double err = 0, sc = 0;
        for (size_t i = 0; i < (size_t)40 * V; i++) {
            err = fmax(err, fabs((double)la[i] - lb[i]));
            sc = fmax(sc, fabs((double)la[i]));
        }
        printf("qwen2 fixture: rotated+centred exact path vs f32: max |dlogit| %.3g (scale %.3g)\n",
               err, sc);
        CHECK(err <= 1e-4 * fmax(sc, 1.0));
    }
    gen_free(ga);
    gen_free(gb);
    free(la);
    free(lb);
    model_free(m);
    be_free(be);
}

int main(void)
{
    RUN(test_fwht);
    RUN(test_affine);
    RUN(test_lloyd);
    RUN(test_codes);
    RUN(test_rows);
    RUN(test_attention_conformance);
    RUN(test_exact_path_on_qwen2);
    return harness_done();
}
