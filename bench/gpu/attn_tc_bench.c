/* attn_tc_bench.c — times the CUDA attention op on prefill shapes (not a test, not built by
 * CMake). For each shape it runs the general kernel (CINFER_ATTN_TC=0) and the tensor-core
 * path in each tiling (CINFER_ATTN_TC=1 default, 2, 3), each on a fresh backend with graphs
 * off, and prints ms per call (= per layer), TFLOP/s (causal FLOPs: 4 * sum over tokens of
 * the positions seen * head_dim * n_head) and the largest difference from the general
 * kernel's output. Data: uniform random q in [-2, 2], K/V in [-1, 1] (fp16 cache), shuffled
 * blocks of 16.
 *
 * build (repo root; L=/usr/lib/x86_64-linux-gnu, C=/usr/local/cuda/lib, the libraries of
 * cinfer_gpu_bench's link line):
 *   gcc -O2 -std=c17 -D_GNU_SOURCE -Isrc bench/gpu/attn_tc_bench.c build-attntc/libcinfer_core.a
 *     $L/libjansson.so $L/libpcre2-8.so $L/libutf8proc.so $L/libevent_pthreads.so
 *     $L/libevent.so $L/libz.so $L/libcrypto.so -lm $C/libcudart_static.a -ldl
 *     $C/libcublas.so $C/libculibos.a $C/libcublasLt.so -lstdc++ -lrt -lpthread -o attn_tc_bench
 * usage: attn_tc_bench [reps]   (H200, reps 10: l8b 4096 prefill 0.653 ms/call, 210.6 TFLOP/s
 * on tensor cores vs 27.5 ms, 5.0 TFLOP/s for the general kernel)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "util/clock.h"
#include "util/half.h"

struct shape {
    const char *name;
    int n_tok, ctx0, n_head, n_kv, hd, window;
    float softcap;
};

static const struct shape g_shapes[] = {
    {"l8b prefill 4096", 4096, 0, 32, 8, 128, 0, 0.0f},
    {"l1b prefill 4096", 4096, 0, 32, 8, 64, 0, 0.0f},
    {"l8b chunk 512 after 3584", 512, 3584, 32, 8, 128, 0, 0.0f},
    {"gemma-like hd256 4096 window 1024 softcap 50", 4096, 0, 16, 8, 256, 1024, 50.0f},
};

static uint64_t g_rng = 12345;
static uint32_t rnd_u32(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 32);
}
static float rnd(void) { return (float)((rnd_u32() >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

/* Runs one shape on a backend made with CINFER_ATTN_TC=cfg; fills out (host) and returns
 * ms per call, or -1. */
static double run_shape(const struct shape *s, const char *cfg, int reps, float *out_h,
                        const float *q_h, const uint16_t *kc_h, const uint16_t *vc_h,
                        const int32_t *bt_h, int n_blocks)
{
    setenv("CINFER_ATTN_TC", cfg, 1);
    struct be_config bc = {.graphs = -1};
    struct cerr e = {0};
    struct be *b = be_new("cuda", &bc, &e);
    if (!b) {
        fprintf(stderr, "cuda backend: %s\n", e.msg);
        return -1;
    }
    const struct be_ops *o = b->ops;
    size_t qn = (size_t)s->n_tok * s->n_head * s->hd;
    size_t cn = (size_t)n_blocks * 16 * s->n_kv * s->hd;
    int32_t *pos_h = malloc(sizeof(int32_t) * (size_t)s->n_tok);
    int32_t *seq_h = calloc((size_t)s->n_tok, sizeof(int32_t));
    for (int t = 0; t < s->n_tok; t++)
        pos_h[t] = s->ctx0 + t;
    float *q = o->alloc(b, qn * 4), *out = o->alloc(b, qn * 4);
    void *kc = o->alloc(b, cn * 2), *vc = o->alloc(b, cn * 2);
    int32_t *pos = o->alloc(b, 4 * (size_t)s->n_tok), *seq = o->alloc(b, 4 * (size_t)s->n_tok);
    int32_t *bt = o->alloc(b, 4 * (size_t)n_blocks);
    double ms = -1;
    if (q && out && kc && vc && pos && seq && bt) {
        o->upload(b, q, q_h, qn * 4, NULL);
        o->upload(b, kc, kc_h, cn * 2, NULL);
        o->upload(b, vc, vc_h, cn * 2, NULL);
        o->upload(b, pos, pos_h, 4 * (size_t)s->n_tok, NULL);
        o->upload(b, seq, seq_h, 4 * (size_t)s->n_tok, NULL);
        o->upload(b, bt, bt_h, 4 * (size_t)n_blocks, NULL);
        struct be_attn a = {
            .n_tok = s->n_tok, .n_head = s->n_head, .n_kv_head = s->n_kv, .head_dim = s->hd,
            .scale = 1.0f / sqrtf((float)s->hd), .softcap = s->softcap, .window = s->window,
            .pos = pos, .seq = seq, .block_tables = bt, .max_blocks = n_blocks,
            .block_size = 16, .kv_dtype = DT_F16, .k_cache = kc, .v_cache = vc,
        };
        o->attention(b, out, q, &a); /* warm-up */
        if (o->sync(b, &e) == 0) {
            double t0 = clock_now_s();
            for (int i = 0; i < reps; i++)
                o->attention(b, out, q, &a);
            if (o->sync(b, &e) == 0) {
                ms = (clock_now_s() - t0) * 1e3 / reps;
                o->download(b, out_h, out, qn * 4, NULL);
                if (o->sync(b, &e))
                    ms = -1;
            }
        }
        if (ms < 0)
            fprintf(stderr, "attention failed: %s\n", e.msg);
    }
    o->free(b, q), o->free(b, out), o->free(b, kc), o->free(b, vc);
    o->free(b, pos), o->free(b, seq), o->free(b, bt);
    free(pos_h), free(seq_h);
    be_free(b);
    return ms;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    if (reps < 1)
        reps = 1;
    static const char *const cfgs[] = {"0", "1", "2", "3"};
    for (size_t si = 0; si < sizeof g_shapes / sizeof g_shapes[0]; si++) {
        const struct shape *s = &g_shapes[si];
        int ctx = s->ctx0 + s->n_tok, n_blocks = (ctx + 15) / 16;
        size_t qn = (size_t)s->n_tok * s->n_head * s->hd;
        size_t cn = (size_t)n_blocks * 16 * s->n_kv * s->hd;
        float *q_h = malloc(qn * 4), *ref = malloc(qn * 4), *got = malloc(qn * 4);
        uint16_t *kc_h = malloc(cn * 2), *vc_h = malloc(cn * 2);
        int32_t *bt_h = malloc(4 * (size_t)n_blocks);
        for (size_t i = 0; i < qn; i++)
            q_h[i] = 2.0f * rnd();
        for (size_t i = 0; i < cn; i++)
            kc_h[i] = half_f32_to_f16(rnd()), vc_h[i] = half_f32_to_f16(rnd());
        for (int i = 0; i < n_blocks; i++)
            bt_h[i] = i;
        for (int i = n_blocks - 1; i > 0; i--) {
            int j = (int)(rnd_u32() % (uint32_t)(i + 1));
            int tmp = bt_h[i];
            bt_h[i] = bt_h[j], bt_h[j] = tmp;
        }
        double seen = 0; /* sum over tokens of positions attended */
        for (int t = 0; t < s->n_tok; t++) {
            int p = s->ctx0 + t, lo = s->window > 0 && p - s->window + 1 > 0 ? p - s->window + 1 : 0;
            seen += p + 1 - lo;
        }
        double flop = 4.0 * seen * s->hd * s->n_head;
        printf("%s: n_tok %d, ctx %d, heads %d/%d, hd %d, %.1f GFLOP per call\n", s->name,
               s->n_tok, ctx, s->n_head, s->n_kv, s->hd, flop * 1e-9);
        for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
            int r = ci == 0 ? (reps + 3) / 4 : reps; /* the general kernel is slow */
            double ms = run_shape(s, cfgs[ci], r, ci == 0 ? ref : got, q_h, kc_h, vc_h, bt_h,
                                  n_blocks);
            if (ms < 0) {
                printf("  CINFER_ATTN_TC=%s: failed\n", cfgs[ci]);
                continue;
            }
            double diff = 0, mag = 0;
            if (ci > 0)
                for (size_t i = 0; i < qn; i++) {
                    double d = fabs((double)got[i] - ref[i]);
                    diff = d > diff || d != d ? d : diff;
                    mag = fabs(ref[i]) > mag ? fabs(ref[i]) : mag;
                }
            printf("  CINFER_ATTN_TC=%s (%s): %8.3f ms/call  %7.1f TFLOP/s", cfgs[ci],
                   ci == 0 ? "general" : "tensor cores", ms, flop / (ms * 1e-3) * 1e-12);
            if (ci > 0)
                printf("  max |diff| vs general %.3g (max |out| %.3g)", diff, mag);
            printf("\n");
            fflush(stdout);
        }
        free(q_h), free(ref), free(got), free(kc_h), free(vc_h), free(bt_h);
    }
    return 0;
}
