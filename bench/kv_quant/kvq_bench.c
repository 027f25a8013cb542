/* kvq_bench.c — the KV quantization benchmark (bench/kv_quant/README.md; not a test).
 *
 * For a model and a set of schemes, side by side in one process:
 * - quality: texts are cut into windows of W tokens; each window is fed in prefill chunks
 *   to an f16-KV session and to one session per scheme, every position's logits kept for
 *   the chunk only; per position: the next token's NLL under each (perplexity) and the KL
 *   divergence KL(p_f16 || p_scheme) of the next-token distributions;
 * - speed: decode tok/s at context N: the KV of positions [0, N) is filled with synthetic
 *   rows through the backend's kv_store (the attention cost does not depend on their
 *   values), then single-token decode steps are timed, schemes interleaved per repetition;
 * - bytes per KV token and the compression vs f16.
 * Prints one JSON object.
 *
 * usage: cinfer_kvq_bench MODEL [-t THREADS] [--score-threads N (default THREADS)] [--backend cpu|cuda] [--schemes 8,4,turbo:k8v4,turbo] [--text LABEL=FILE]...
 *          [--start N (skip each text's first N tokens)]
 *          [--rotate on|off] [--tokens N] [--window W] [--chunk C] [--decode-ctx 4096,16384] [--steps S] [--reps R]
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/kvq.h"
#include "engine/gen.h"
#include "kv/kvq_scheme.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/fs.h"

#define MAXS 64
#define MAXT 8

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct scheme {
    char name[64];
    int code;
    size_t bpt;
    double nll[MAXT], kl[MAXT];
    long n[MAXT];
    double dec_s[8];
    int ldt[512];  /* each layer's KV dtype */
    int per_layer; /* layers differ (config, or plain sliding-window layers) */
};

/* ---- scoring: per row, in parallel over the chunk's rows ----
 * The f16 row x0 becomes p0 = softmax(x0) in place, with nll = -log p0[tgt] and
 * a = sum p0 log p0; a scheme's row x gives nll = lse(x) - x[tgt] and
 * KL(p0 || p) = a - sum p0 (x - lse(x)). Per-row results land in arrays and are summed in
 * row order (the same totals whatever the thread count). */
struct score_job {
    float *x;          /* chunk rows (V floats each); the f16 rows become p0 */
    const float *p0;   /* NULL when scoring the f16 rows */
    const int32_t *tgt;
    double *nll, *kl, *a; /* per row; a: the f16 rows' sum p0 log p0 (written / read) */
    int V, r0, r1;
};

static double row_lse(const float *x, int V)
{
    float mx = x[0];
    for (int i = 1; i < V; i++)
        mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < V; i++)
        s += exp((double)x[i] - mx);
    return mx + log(s);
}

static void *score_rows(void *arg)
{
    struct score_job *j = arg;
    for (int r = j->r0; r < j->r1; r++) {
        float *x = j->x + (size_t)r * j->V;
        double lse = row_lse(x, j->V);
        j->nll[r] = lse - x[j->tgt[r]];
        if (!j->p0) {
            double a = 0;
            for (int i = 0; i < j->V; i++) {
                double lp = x[i] - lse, p = exp(lp);
                a += p * lp;
                x[i] = (float)p;
            }
            j->a[r] = a;
            continue;
        }
        const float *p0 = j->p0 + (size_t)r * j->V;
        double c = 0, ps = 0;
        for (int i = 0; i < j->V; i++)
            c += (double)p0[i] * x[i], ps += p0[i];
        j->kl[r] = j->a[r] - (c - lse * ps);
    }
    return NULL;
}

/* Scores rows [0, n) with up to nth threads. */
static void score_chunk(struct score_job base, int n, int nth)
{
    pthread_t th[64];
    struct score_job jb[64];
    if (nth > 64)
        nth = 64;
    if (nth > n)
        nth = n > 0 ? n : 1;
    for (int t = 0; t < nth; t++) {
        jb[t] = base;
        jb[t].r0 = n * t / nth, jb[t].r1 = n * (t + 1) / nth;
        if (t && pthread_create(&th[t], NULL, score_rows, &jb[t]))
            score_rows(&jb[t]), th[t] = 0;
    }
    score_rows(&jb[0]);
    for (int t = 1; t < nth; t++)
        if (th[t])
            pthread_join(th[t], NULL);
}

/* What the report needs besides the schemes. */
struct run_info {
    const char *model, *backend;
    int threads, tokens, window, nt;
    const char *const *labels;
};

/* Prints the JSON object (one line) of the results so far to f. */
static void report(FILE *f, const struct run_info *R, const struct scheme *S, int ns, const int *dc, int nd)
{
    fprintf(f, "{\"model\": \"%s\", \"backend\": \"%s\", \"threads\": %d, \"tokens_per_text\": %d, \"window\": %d, \"texts\": [",
            R->model, R->backend, R->threads, R->tokens, R->window);
    for (int ti = 0; ti < R->nt; ti++)
        fprintf(f, "%s\"%s\"", ti ? ", " : "", R->labels[ti]);
    fprintf(f, "], \"schemes\": {");
    for (int s = 0; s < ns; s++) {
        fprintf(f, "%s\"%s\": {\"bytes_per_token\": %zu, \"compression\": %.4f", s ? ", " : "", S[s].name,
                S[s].bpt, (double)S[0].bpt / S[s].bpt);
        for (int ti = 0; ti < R->nt; ti++) {
            const char *lb = R->labels[ti];
            double ppl = exp(S[s].nll[ti] / (S[s].n[ti] ? S[s].n[ti] : 1));
            double ppl0 = exp(S[0].nll[ti] / (S[0].n[ti] ? S[0].n[ti] : 1));
            fprintf(f, ", \"ppl_%s\": %.6f, \"ppl_delta_frac_%s\": %.6f, \"kl_mean_%s\": %.6g, \"n_%s\": %ld",
                    lb, ppl, lb, ppl / ppl0 - 1, lb, s ? S[s].kl[ti] / (S[s].n[ti] ? S[s].n[ti] : 1) : 0.0, lb,
                    S[s].n[ti]);
        }
        for (int di = 0; di < nd; di++)
            fprintf(f, ", \"decode_tok_s_%d\": %.4f, \"decode_ratio_%d\": %.4f", dc[di], 1.0 / S[s].dec_s[di],
                    dc[di], S[0].dec_s[di] / S[s].dec_s[di]);
        fprintf(f, "}");
    }
    fprintf(f, "}}\n");
    fflush(f);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *schemes = "8,4,turbo:k8v4,turbo", *dctx = "4096,16384";
    const char *backend = "cpu";
    const char *labels[MAXT], *files[MAXT];
    int rotate = -1;
    int start = 0, score_threads = 0, nt = 0, threads = 2, tokens = 4096, window = 2048, chunk = 256, steps = 8, reps = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-t") && v) threads = atoi(v), i++;
        else if (!strcmp(a, "--schemes") && v) schemes = v, i++;
        else if (!strcmp(a, "--backend") && v) backend = v, i++;
        else if (!strcmp(a, "--rotate") && v) rotate = !strcmp(v, "on"), i++;
        else if (!strcmp(a, "--score-threads") && v) score_threads = atoi(v), i++;
        else if (!strcmp(a, "--start") && v) start = atoi(v), i++;
        else if (!strcmp(a, "--tokens") && v) tokens = atoi(v), i++;
        else if (!strcmp(a, "--window") && v) window = atoi(v), i++;
        else if (!strcmp(a, "--chunk") && v) chunk = atoi(v), i++;
        else if (!strcmp(a, "--decode-ctx") && v) dctx = v, i++;
        else if (!strcmp(a, "--steps") && v) steps = atoi(v), i++;
        else if (!strcmp(a, "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(a, "--text") && v && nt < MAXT && strchr(v, '=')) {
            char *d = strdup(v), *eq = strchr(d, '=');
            *eq = 0;
            labels[nt] = d, files[nt++] = eq + 1, i++;
        } else if (a[0] != '-' && !model) model = a;
        else {
            fprintf(stderr, "kvq_bench: bad argument '%s'\n", a);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "usage: cinfer_kvq_bench MODEL [options] (see the source)\n");
        return 2;
    }
    struct cerr e = {0};
    struct be_config bc = {.n_threads = threads};
    struct be *be = be_new(backend, &bc, &e);
    struct model *m = NULL;
    struct tok *tk = NULL;
    if (!be || model_load(&m, model, be, &e) || tok_load(&tk, model, &e)) {
        fprintf(stderr, "kvq_bench: %s\n", e.msg);
        return 1;
    }
    if (score_threads <= 0)
        score_threads = threads;
    struct run_info R = {model, backend, threads, tokens, window, nt, labels};
    int V = m->hp.n_vocab, kvd = m->hp.n_kv_head * m->hp.head_dim;
    /* schemes: [0] = f16 reference */
    static struct scheme S[MAXS];
    int ns = 1;
    snprintf(S[0].name, sizeof S[0].name, "f16");
    S[0].code = DT_F16;
    char *sl = strdup(schemes);
    for (char *tok = strtok(sl, ","); tok && ns < MAXS; tok = strtok(NULL, ",")) {
        struct kvq_scheme q = {.rotate = rotate};
        struct kvq_layers_info info;
        if (kvq_scheme_parse(tok, &q, &e) ||
            kvq_scheme_layers(&q, &m->hp, model, DT_F16, S[ns].ldt, &S[ns].code, &info, &e)) {
            fprintf(stderr, "kvq_bench: %s\n", e.msg);
            return 1;
        }
        for (int l = 0; l < m->hp.n_layer; l++)
            S[ns].per_layer |= S[ns].ldt[l] != S[ns].code;
        snprintf(S[ns].name, sizeof S[ns].name, "%s", tok);
        ns++;
    }
    for (int s = 0; s < ns; s++) {
        S[s].bpt = 0;
        for (int l = 0; l < m->hp.n_layer; l++)
            S[s].bpt += kvq_token_bytes(S[s].per_layer ? S[s].ldt[l] : S[s].code, kvd);
    }

    /* ---- quality ---- */
    float *lr = malloc((size_t)chunk * V * sizeof(float)), *lq = malloc((size_t)chunk * V * sizeof(float));
    double *rnll = calloc((size_t)chunk, sizeof(double)), *rkl = calloc((size_t)chunk, sizeof(double)),
           *ra = calloc((size_t)chunk, sizeof(double));
    double t_q0 = now_s();
    for (int ti = 0; ti < nt; ti++) {
        size_t len = 0;
        char *text = NULL;
        if (fs_read_all(files[ti], &text, &len, &e)) {
            fprintf(stderr, "kvq_bench: %s\n", e.msg);
            return 1;
        }
        int32_t *ids = NULL;
        int n = 0;
        if (tok_encode(tk, text, len, 0, &ids, &n, &e)) {
            fprintf(stderr, "kvq_bench: %s\n", e.msg);
            return 1;
        }
        if (start > 0) { /* score from token `start` on (a run split in parts) */
            int sk = start < n ? start : n;
            memmove(ids, ids + sk, (size_t)(n - sk) * sizeof *ids);
            n -= sk;
        }
        if (n > tokens + 1)
            n = tokens + 1;
        fprintf(stderr, "text %s: %d tokens scored\n", labels[ti], n - 1);
        struct gen *g[MAXS];
        for (int s = 0; s < ns; s++)
            if (gen_new_layers(&g[s], m, window, chunk, S[s].code, S[s].per_layer ? S[s].ldt : NULL, &e)) {
                fprintf(stderr, "kvq_bench: %s\n", e.msg);
                return 1;
            }
        for (int w0 = 0; w0 + 1 < n; w0 += window) {
            int wl = n - 1 - w0 < window ? n - 1 - w0 : window; /* positions scored */
            for (int s = 0; s < ns; s++)
                gen_reset(g[s]);
            for (int c0 = 0; c0 < wl; c0 += chunk) {
                int cl = wl - c0 < chunk ? wl - c0 : chunk;
                for (int s = 0; s < ns; s++) {
                    float *L = s ? lq : lr;
                    if (gen_feed(g[s], ids + w0 + c0, cl, L, &e)) {
                        fprintf(stderr, "kvq_bench: %s\n", e.msg);
                        return 1;
                    }
                    struct score_job jb = {.x = L, .p0 = s ? lr : NULL, .tgt = ids + w0 + c0 + 1,
                                           .nll = rnll, .kl = rkl, .a = ra, .V = V};
                    score_chunk(jb, cl, score_threads);
                    for (int r = 0; r < cl; r++) {
                        S[s].nll[ti] += rnll[r];
                        S[s].kl[ti] += s ? rkl[r] : 0.0;
                        S[s].n[ti]++;
                    }
                }
            }
            fprintf(stderr, "  window at %d: %d positions (%.0f s so far)\npartial: ", w0, wl, now_s() - t_q0);
            report(stderr, &R, S, ns, NULL, 0); /* the results so far, should the run be cut off */
        }
        for (int s = 0; s < ns; s++)
            gen_free(g[s]);
        free(ids);
        free(text);
    }

    /* ---- decode speed at context N ---- */
    int nd = 0, dc[8];
    char *dl = strdup(dctx);
    for (char *tok = strtok(dl, ","); tok && nd < 8; tok = strtok(NULL, ","))
        dc[nd++] = atoi(tok);
    for (int di = 0; di < nd; di++) {
        int N = dc[di];
        for (int s = 0; s < ns; s++)
            S[s].dec_s[di] = 1e30;
        for (int rep = 0; rep < reps; rep++)
            for (int s = 0; s < ns; s++) {
                struct gen *g;
                if (gen_new_layers(&g, m, N + steps + 1, 1, S[s].code, S[s].per_layer ? S[s].ldt : NULL, &e) ||
                    kv_seq_reserve(g->kv, &g->seq, N, &e)) {
                    fprintf(stderr, "kvq_bench: %s\n", e.msg);
                    return 1;
                }
                /* synthetic K/V rows for positions [0, N), every layer */
                int B = 256;
                float *k = malloc((size_t)B * kvd * sizeof(float)), *v = malloc((size_t)B * kvd * sizeof(float));
                int32_t *slots = malloc((size_t)B * sizeof(int32_t));
                unsigned r = 12345;
                for (int i = 0; i < B * kvd; i++) {
                    r = r * 1103515245u + 12345u;
                    k[i] = ((int)(r >> 16 & 0x7fff) - 16384) / 8192.0f;
                    v[i] = ((int)(r >> 8 & 0x7fff) - 16384) / 8192.0f;
                }
                /* the backend's own buffers (device memory on a GPU backend) */
                float *dk = be->ops->alloc(be, (size_t)B * kvd * sizeof(float)),
                      *dv = be->ops->alloc(be, (size_t)B * kvd * sizeof(float));
                int32_t *ds = be->ops->alloc(be, (size_t)B * sizeof(int32_t));
                if (!dk || !dv || !ds || be->ops->upload(be, dk, k, (size_t)B * kvd * sizeof(float), &e) ||
                    be->ops->upload(be, dv, v, (size_t)B * kvd * sizeof(float), &e)) {
                    fprintf(stderr, "kvq_bench: backend buffers: %s\n", e.msg);
                    return 1;
                }
                for (int p0 = 0; p0 < N; p0 += B) {
                    int c = N - p0 < B ? N - p0 : B;
                    for (int i = 0; i < c; i++)
                        slots[i] = kv_seq_slot(g->kv, &g->seq, p0 + i);
                    if (be->ops->upload(be, ds, slots, (size_t)c * sizeof(int32_t), &e) ||
                        be->ops->sync(be, &e)) {
                        fprintf(stderr, "kvq_bench: %s\n", e.msg);
                        return 1;
                    }
                    for (int l = 0; l < g->kv->n_layer; l++)
                        be->ops->kv_store(be, g->kv->k[l], g->kv->v[l], g->kv->ldt ? g->kv->ldt[l] : S[s].code,
                                          dk, dv, ds, c, kvd);
                }
                if (be->ops->sync(be, &e)) {
                    fprintf(stderr, "kvq_bench: %s\n", e.msg);
                    return 1;
                }
                be->ops->free(be, dk), be->ops->free(be, dv), be->ops->free(be, ds);
                free(k), free(v), free(slots);
                g->n_past = N;
                int32_t id = V > 1000 ? 1000 : V / 2;
                if (gen_feed(g, &id, 1, NULL, &e)) { /* warm */
                    fprintf(stderr, "kvq_bench: %s\n", e.msg);
                    return 1;
                }
                double t0 = now_s();
                for (int st = 0; st < steps; st++)
                    if (gen_feed(g, &id, 1, NULL, &e)) {
                        fprintf(stderr, "kvq_bench: %s\n", e.msg);
                        return 1;
                    }
                double dt = (now_s() - t0) / steps;
                if (dt < S[s].dec_s[di])
                    S[s].dec_s[di] = dt; /* best of reps: the least disturbed by the neighbours */
                gen_free(g);
                fprintf(stderr, "decode ctx %d %s rep %d: %.3f s/token\n", N, S[s].name, rep, dt);
            }
    }

    /* ---- report ---- */
    report(stdout, &R, S, ns, dc, nd);
    tok_free(tk);
    model_free(m);
    be_free(be);
    return 0;
}
