/* lora_bench.c — decode speed with LoRA adapters (bench/lora/README.md).
 *
 * Loads MODEL, builds random rank-R adapters on all seven projections in memory (through
 * the PEFT loader, so they are exactly what a mounted adapter is), and times batched greedy
 * decode steps (model_forward with backend argmax, as the engine runs them):
 *   none_b1 / one_b1   1 row without / with an adapter,
 *   none_b8 / one_b8   8 rows without / all with the same adapter,
 *   mixed_b8           8 rows with 8 distinct adapters (one group each).
 * The configurations alternate within each repetition, so a ratio compares runs seconds
 * apart; the reported ratios are the medians of the per-repetition ratios:
 *   overhead_b1 = 1 - one_b1 / none_b1, overhead_b8 = 1 - one_b8 / none_b8,
 *   mixed_vs_single_at_8 = mixed_b8 / one_b8.
 * Usage: cinfer_lora_bench MODEL [-t THREADS] [--backend cpu|cuda] [-n STEPS] [--reps N]
 *        [--rank R] [--clock wall|cpu] [--dtype f32|f16|bf16]      (prints one JSON object)
 * --dtype: the adapters' stored element type (as an adapter file holds it; default f32).
 * --dump PREFIX: first the logits of 3 fixed steps per configuration to PREFIX_<conf>.f32
 * (none_b8, paths_b8, one_b1, one_b8, mixed_b8), for comparing kernel variants.
 * --clock cpu times the process's CPU time instead of wall time: on a machine shared with
 * other loads (where wall times of one configuration vary 2-3x between repetitions) the
 * CPU time of a one-thread run (-t 1) measures the work itself.
 */
#include <math.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "kv/kv_pool.h"
#include "model/lora.h"
#include "model/model.h"
#include "util/clock.h"
#include "util/half.h"

#define NA 8  /* distinct adapters */
#define NR 8  /* rows of a batched step */
#define P0 16 /* prompt positions before the timed steps */

static int g_cpu_clock; /* --clock cpu: the process's CPU time instead of wall time */

static double now(void)
{
    if (!g_cpu_clock)
        return clock_now_s();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t g_rng = 88172645463325252ull;
static float frand(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static const char *const g_names[LORA_NT] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

/* A random rank-r PEFT adapter on every projection of m, as safetensors bytes. */
static int g_dt16; /* --dtype: 0 f32, 1 f16, 2 bf16 (what the adapter file stores) */

static uint8_t *random_adapter(const struct model *m, int r, size_t *len)
{
    size_t cap = 1 << 20, o = 0, data = 0;
    char *hdr = malloc(cap);
    o += (size_t)snprintf(hdr, cap, "{");
    for (int il = 0; il < m->hp.n_layer; il++)
        for (int t = 0; t < LORA_NT; t++) {
            const struct model_layer *l = &m->layers[il];
            const struct be_tensor *w[LORA_NT] = {&l->wq,     &l->wk,   &l->wv,    &l->wo,
                                                  &l->w_gate, &l->w_up, &l->w_down};
            long in = (long)w[t]->ne[0], out = (long)w[t]->ne[1];
            for (int ab = 0; ab < 2; ab++) {
                long rows = ab ? out : r, cols = ab ? r : in;
                size_t sz = (size_t)rows * cols * (g_dt16 ? 2 : 4);
                o += (size_t)snprintf(hdr + o, cap - o,
                                      "%s\"base_model.model.model.layers.%d.%s.lora_%c.weight\":"
                                      "{\"dtype\":\"%s\",\"shape\":[%ld,%ld],\"data_offsets\":"
                                      "[%zu,%zu]}",
                                      o > 1 ? "," : "", il, g_names[t], ab ? 'B' : 'A',
                                      g_dt16 == 1   ? "F16"
                                      : g_dt16 == 2 ? "BF16"
                                                    : "F32",
                                      rows, cols, data, data + sz);
                data += sz;
            }
        }
    o += (size_t)snprintf(hdr + o, cap - o, "}");
    *len = 8 + o + data;
    uint8_t *b = malloc(*len);
    uint64_t hl = o;
    memcpy(b, &hl, 8);
    memcpy(b + 8, hdr, o);
    float *f = (float *)(void *)(b + 8 + o); /* 8 + o may be unaligned: write bytes */
    (void)f;
    for (size_t i = 8 + o; i + (g_dt16 ? 2 : 4) <= *len; i += g_dt16 ? 2 : 4) {
        float v = 0.02f * frand();
        uint16_t h = g_dt16 == 1 ? half_f32_to_f16(v) : half_f32_to_bf16(v);
        if (g_dt16)
            memcpy(b + i, &h, 2);
        else
            memcpy(b + i, &v, 4);
    }
    free(hdr);
    return b;
}

struct run {
    const struct model *m;
    struct model_ws *ws;
    struct kv_pool *kv;
    struct kv_seq seq[NR];
    int32_t tok[NR], pos[NR], sq[NR], slot[NR], out[NR], am[NR], tab[NR * 8];
};

/* Times `steps` decode steps of `rows` rows with sets[row] (NULL: none); tokens/s. */
static double timed(struct run *R, int rows, const struct lora_set *const *sets, unsigned paths,
                    int steps)
{
    struct cerr e = {0};
    double t0 = now();
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < rows; i++) {
            R->pos[i] = P0 + s;
            R->sq[i] = i;
            R->slot[i] = kv_seq_slot(R->kv, &R->seq[i], P0 + s);
            R->out[i] = i;
        }
        struct model_kv_view view = kv_pool_view(R->kv);
        struct model_batch b = {.n_tok = rows,
                                .tokens = R->tok,
                                .pos = R->pos,
                                .seq = R->sq,
                                .slots = R->slot,
                                .n_seq = rows,
                                .max_blocks = 8,
                                .block_tables = R->tab,
                                .n_out = rows,
                                .out_idx = R->out,
                                .argmax = R->am,
                                .lora = sets,
                                .lora_paths = paths};
        if (model_forward(R->m, R->ws, &view, &b, NULL, &e)) {
            fprintf(stderr, "lora_bench: %s\n", e.msg);
            exit(1);
        }
        memcpy(R->tok, R->am, (size_t)rows * 4);
    }
    return rows * steps / (now() - t0);
}

/* --dump PREFIX: 3 steps of `rows` rows at positions 0..2 with fixed tokens (no greedy
 * feedback, nothing read from before position 0), the last step's logits (rows, n_vocab)
 * written raw (f32) to PREFIX_<name>.f32: the same numbers from two kernel variants (two
 * processes) can be compared (bench/lora/device_lora.sh). */
static void dump(struct run *R, const char *prefix, const char *name, int rows,
                 const struct lora_set *const *sets, unsigned paths)
{
    struct cerr e = {0};
    const int nv = R->m->hp.n_vocab;
    float *lg = malloc((size_t)rows * nv * sizeof *lg);
    for (int s = 0; s < 3 && lg; s++) {
        for (int i = 0; i < rows; i++) {
            R->tok[i] = 100 + 7 * i + 13 * s;
            R->pos[i] = s;
            R->sq[i] = i;
            R->slot[i] = kv_seq_slot(R->kv, &R->seq[i], s);
            R->out[i] = i;
        }
        struct model_kv_view view = kv_pool_view(R->kv);
        struct model_batch b = {.n_tok = rows, .tokens = R->tok, .pos = R->pos, .seq = R->sq,
                                .slots = R->slot, .n_seq = rows, .max_blocks = 8,
                                .block_tables = R->tab, .n_out = rows, .out_idx = R->out,
                                .lora = sets, .lora_paths = paths};
        if (model_forward(R->m, R->ws, &view, &b, lg, &e)) {
            fprintf(stderr, "lora_bench: %s\n", e.msg);
            exit(1);
        }
    }
    char fn[1024];
    snprintf(fn, sizeof fn, "%s_%s.f32", prefix, name);
    FILE *f = lg ? fopen(fn, "wb") : NULL;
    if (!f || fwrite(lg, sizeof *lg, (size_t)rows * nv, f) != (size_t)rows * nv || fclose(f)) {
        fprintf(stderr, "lora_bench: cannot write %s\n", fn);
        exit(1);
    }
    free(lg);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *backend = "cpu", *only = NULL, *dump_to = NULL;
    int threads = 0, steps = 16, reps = 5, rank = 16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-t") && v)
            threads = atoi(v), i++;
        else if (!strcmp(a, "-n") && v)
            steps = atoi(v), i++;
        else if (!strcmp(a, "--reps") && v)
            reps = atoi(v), i++;
        else if (!strcmp(a, "--rank") && v)
            rank = atoi(v), i++;
        else if (!strcmp(a, "--backend") && v)
            backend = v, i++;
        else if (!strcmp(a, "--dtype") && v)
            g_dt16 = !strcmp(v, "f16") ? 1 : !strcmp(v, "bf16") ? 2 : 0, i++;
        else if (!strcmp(a, "--only") && v)
            only = v, i++;
        else if (!strcmp(a, "--dump") && v)
            dump_to = v, i++;
        else if (!strcmp(a, "--clock") && v)
            g_cpu_clock = !strcmp(v, "cpu"), i++;
        else if (a[0] != '-' && !path)
            path = a;
        else {
            fprintf(stderr, "usage: cinfer_lora_bench MODEL [-t N] [--backend cpu|cuda] [-n STEPS] "
                            "[--reps N] [--rank R] [--clock wall|cpu] [--dtype f32|f16|bf16]\n"
                            "  [--only none_b1|one_b1|one_b8|mixed_b8] (just those steps, for a "
                            "profiler) [--dump PREFIX] (logits of fixed steps first)\n");
            return 2;
        }
    }
    if (!path || steps < 1 || reps < 1 || reps > 64 || rank < 1 || rank > LORA_MAX_RANK)
        return fprintf(stderr, "lora_bench: MODEL missing or a bad number\n"), 2;
    struct cerr e = {0};
    struct be_config bc = {.n_threads = threads};
    struct be *be = be_new(backend, &bc, &e);
    struct model *m = NULL;
    if (!be || model_load(&m, path, be, &e))
        return fprintf(stderr, "lora_bench: %s\n", e.msg), 1;
    struct lora_adapter *ad[NA];
    for (int i = 0; i < NA; i++) {
        size_t len;
        uint8_t *st = random_adapter(m, rank, &len);
        char cfg[128];
        int n = snprintf(cfg, sizeof cfg, "{\"r\":%d,\"lora_alpha\":%d}", rank, 2 * rank);
        if (lora_load_peft_mem(&ad[i], m, cfg, (size_t)n, st, len, &e))
            return fprintf(stderr, "lora_bench: adapter: %s\n", e.msg), 1;
        free(st);
    }
    struct run R = {.m = m};
    if (kv_pool_new(&R.kv, be, m->hp.n_layer, m->hp.n_kv_head * m->hp.head_dim, 16, NR * 8, DT_F16,
                    -1, &e) ||
        model_ws_new(&R.ws, m, NR * P0, NR, NR, 8, &e))
        return fprintf(stderr, "lora_bench: %s\n", e.msg), 1;
    for (int i = 0; i < NR; i++) {
        kv_seq_init(&R.seq[i]);
        if (kv_seq_reserve(R.kv, &R.seq[i], P0 + steps + 1, &e))
            return fprintf(stderr, "lora_bench: %s\n", e.msg), 1;
        for (int k = 0; k < 8; k++)
            R.tab[i * 8 + k] = k < R.seq[i].n_blocks ? R.seq[i].blocks[k] : 0;
        R.tok[i] = 100 + 7 * i;
    }
    struct lora_set one = {1, {ad[0]}, {1}}, each[NA];
    const struct lora_set *s_none[NR] = {0}, *s_one[NR], *s_mixed[NR];
    for (int i = 0; i < NR; i++) {
        each[i] = (struct lora_set){1, {ad[i % NA]}, {1}};
        s_one[i] = &one;
        s_mixed[i] = &each[i];
    }
    const unsigned all = (1u << LORA_NT) - 1;
    if (dump_to) { /* before any timing: the logits of fixed steps per configuration */
        dump(&R, dump_to, "none_b8", NR, NULL, 0);
        dump(&R, dump_to, "paths_b8", NR, NULL, all);
        dump(&R, dump_to, "one_b1", 1, s_one, all);
        dump(&R, dump_to, "one_b8", NR, s_one, all);
        dump(&R, dump_to, "mixed_b8", NR, s_mixed, all);
    }
    if (only) { /* one configuration's steps and nothing else (e.g. under ncu): 2 warm-up
                 * steps (graph capture), then `steps` */
        int b8 = strstr(only, "b8") != NULL;
        const struct lora_set *const *sets = !strncmp(only, "none", 4)  ? NULL
                                             : !strncmp(only, "mixed", 5) ? s_mixed
                                                                          : s_one;
        timed(&R, b8 ? NR : 1, sets, sets ? all : 0, 2);
        double ts = timed(&R, b8 ? NR : 1, sets, sets ? all : 0, steps);
        printf("{\"only\": \"%s\", \"tok_s\": %.3f}\n", only, ts);
        return 0;
    }
    timed(&R, NR, s_mixed, all, 2); /* warm-up */
    double none1[64], one1[64], none8[64], one8[64], mix8[64], ob1[64], ob8[64], mx[64];
    double path1[64], op1[64]; /* the adapter path with no adapter: what unfusing costs */
    for (int r = 0; r < reps; r++) {
        none1[r] = timed(&R, 1, NULL, 0, steps);
        one1[r] = timed(&R, 1, s_one, all, steps);
        none8[r] = timed(&R, NR, NULL, 0, steps);
        one8[r] = timed(&R, NR, s_one, all, steps);
        mix8[r] = timed(&R, NR, s_mixed, all, steps);
        path1[r] = timed(&R, 1, NULL, all, steps);
        op1[r] = 1 - path1[r] / none1[r];
        ob1[r] = 1 - one1[r] / none1[r];
        ob8[r] = 1 - one8[r] / none8[r];
        mx[r] = mix8[r] / one8[r];
        fprintf(stderr,
                "rep %d: tok/s none_b1 %.2f one_b1 %.2f none_b8 %.2f one_b8 %.2f "
                "mixed_b8 %.2f paths_b1 %.2f\n",
                r, none1[r], one1[r], none8[r], one8[r], mix8[r], path1[r]);
    }
    (void)s_none;
    size_t abytes = ad[0]->bytes;
    /* --dtype is the files' type; the loader keeps f32 files as CINFER_LORA_DTYPE says (f16
     * by default): "store_dtype" */
    int sd = ad[0]->p[0].dtype;
    printf("{\"backend\": \"%s\", \"clock\": \"%s\", \"adapter_dtype\": \"%s\", "
           "\"store_dtype\": \"%s\", "
           "\"model\": \"%s\", \"rank\": %d, "
           "\"steps\": %d, \"reps\": %d, "
           "\"adapter_bytes\": %zu, \"weight_bytes\": %zu, "
           "\"tok_s_median\": {\"none_b1\": %.3f, \"one_b1\": %.3f, \"none_b8\": %.3f, "
           "\"one_b8\": %.3f, \"mixed_b8\": %.3f, \"paths_b1\": %.3f}, "
           "\"overhead_paths_b1\": %.4f, ",
           be->ops->name, g_cpu_clock ? "cpu" : "wall",
           g_dt16 == 1   ? "f16"
           : g_dt16 == 2 ? "bf16"
                         : "f32",
           sd == DT_F16    ? "f16"
           : sd == DT_BF16 ? "bf16"
                           : "f32",
           path, rank, steps, reps, abytes, model_weight_bytes(m), median(none1, reps),
           median(one1, reps), median(none8, reps), median(one8, reps), median(mix8, reps),
           median(path1, reps), median(op1, reps));
    printf("\"overhead_b1\": %.4f, \"overhead_b8\": %.4f, \"mixed_vs_single_at_8\": %.4f}\n",
           median(ob1, reps), median(ob8, reps), median(mx, reps));
    for (int i = 0; i < NR; i++)
        kv_seq_release(R.kv, &R.seq[i]);
    for (int i = 0; i < NA; i++)
        lora_unref(ad[i]);
    model_ws_free(R.ws);
    kv_pool_free(R.kv);
    model_free(m);
    be_free(be);
    return 0;
}
