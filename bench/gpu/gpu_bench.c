/* gpu_bench.c — cinfer's GPU benchmark and parity driver (built when the CUDA backend is).
 *
 * perf mode prints one JSON object: batch-1 decode tok/s (N tokens after a P-token prompt,
 * steps queued as the engine's decode bursts queue them; the plain loop's figure and the
 * check that both give the same ids beside it, and the device time of one step alone),
 * prefill tok/s of a long prompt in a fresh context (best of 2), aggregate decode tok/s
 * with B concurrent sequences (each prefilled with P tokens, then S queued steps of B
 * tokens), weight bytes per token and the peak device memory. It drives model_forward
 * with its own KV pool and step batches (the engine's scheduler is not needed). logits
 * mode feeds --ids, then greedy-decodes N tokens and prints the ids and every logit row as
 * JSON (for bench/gpu/parity.py). Prompt ids of perf mode are deterministic pseudo-random.
 *
 * usage: cinfer_gpu_bench MODEL perf [--backend cuda] [--kv f16|f32] [--prefill 4096]
 *                                     [--batches 8,32,64]
 *        cinfer_gpu_bench MODEL mixed [--batches B] [--prefill P]   (B decode rows beside a
 *                                     prompt chunk of min(P, 512) rows, n_lead on and off)
 *        cinfer_gpu_bench MODEL logits --ids 1,2,3 [-n 64] [--backend cuda]
 *        cinfer_gpu_bench - mm      (projection micro-benchmark, no model)
 *        cinfer_gpu_bench - topcand (sampling candidates: split vs one block, no model)
 *        cinfer_gpu_bench - sample (the op sample beside argmax, no model)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#ifdef CINFER_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif
#include "engine/sampler.h"
#include "kv/kv_pool.h"
#include "model/model.h"
#include "util/clock.h"

enum { BS = 16, PROMPT = 128, DECODE = 256, AGG_STEPS = 64, MAX_B = 64 };

struct ctx {
    struct model *m;
    struct kv_pool *kv;
    struct model_ws *ws;
    struct kv_seq seqs[MAX_B];
    int n_past[MAX_B];
    int max_tok, max_blocks;
    int32_t *tok, *pos, *seq, *slots, *out, *tables;
    float *logits;
    int32_t am[MAX_B]; /* argmax ids of the last step's output rows (when use_am) */
    int use_am;        /* perf mode: the backend's argmax, as the engine does for greedy rows */
};

static void fill_ids(int32_t *ids, int n, int vocab, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    int lo = vocab / 4, span = vocab / 4 > 0 ? vocab / 4 : 1;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        ids[i] = lo + (int32_t)(x % (uint32_t)span);
    }
}

/* One step: sequence s of sel[i] gets n_each tokens ids[i*n_each..]; logits for the last
 * token of each (all tokens when all_out). queued: model_forward_queue instead (argmax rows;
 * ids NULL = the previous queued step's output rows). */
static int step_q(struct ctx *c, const int *sel, int nsel, const int32_t *ids, int n_each,
                  int all_out, int queued, struct cerr *e)
{
    int n = 0, mb = 0, rc;
    for (int i = 0; i < nsel; i++) {
        int s = sel[i];
        if ((rc = kv_seq_reserve(c->kv, &c->seqs[s], c->n_past[s] + n_each, e)))
            return rc;
        mb = c->seqs[s].n_blocks > mb ? c->seqs[s].n_blocks : mb;
    }
    int n_out = 0;
    for (int i = 0; i < nsel; i++) {
        int s = sel[i];
        for (int j = 0; j < n_each; j++, n++) {
            c->tok[n] = ids ? ids[i * n_each + j] : 0;
            c->pos[n] = c->n_past[s] + j;
            c->seq[n] = i;
            c->slots[n] = kv_seq_slot(c->kv, &c->seqs[s], c->n_past[s] + j);
            if (all_out || j == n_each - 1)
                c->out[n_out++] = n;
        }
        memset(c->tables + (size_t)i * mb, 0, (size_t)mb * 4);
        memcpy(c->tables + (size_t)i * mb, c->seqs[s].blocks, (size_t)c->seqs[s].n_blocks * 4);
        c->n_past[s] += n_each;
    }
    struct model_kv_view view = kv_pool_view(c->kv);
    struct model_batch b = {.n_tok = n, .tokens = ids ? c->tok : NULL, .pos = c->pos,
                            .seq = c->seq, .slots = c->slots, .n_seq = nsel, .max_blocks = mb,
                            .block_tables = c->tables, .n_out = n_out, .out_idx = c->out,
                            .argmax = c->use_am && !all_out ? c->am : NULL};
    if (queued)
        return model_forward_queue(c->m, c->ws, &view, &b, e);
    return model_forward(c->m, c->ws, &view, &b, c->logits, e);
}

static int step(struct ctx *c, const int *sel, int nsel, const int32_t *ids, int n_each,
                int all_out, struct cerr *e)
{
    return step_q(c, sel, nsel, ids, n_each, all_out, 0, e);
}

static void reset(struct ctx *c, int s)
{
    kv_seq_release(c->kv, &c->seqs[s]);
    c->n_past[s] = 0;
}

static size_t peak_dev(struct be *be)
{
#ifdef CINFER_HAVE_CUDA
    if (!strcmp(be->ops->name, "cuda")) {
        size_t peak = 0;
        int64_t rep = 0, cap = 0;
        be_cuda_mem_used(be, &peak);
        be_cuda_graph_counts(be, &rep, &cap);
        fprintf(stderr, "gpu_bench: %lld graph replays, %lld captures\n", (long long)rep,
                (long long)cap);
        return peak;
    }
#endif
    (void)be;
    return 0;
}

/* Greedy id of output row i of the last step. */
static int32_t pick(const struct ctx *c, int i)
{
    return c->use_am ? c->am[i] : sampler_argmax(c->logits + (size_t)i * c->m->hp.n_vocab,
                                                 c->m->hp.n_vocab);
}

static int perf(struct ctx *c, struct be *be, int n_prefill, const int *batches, int n_batches,
                double load_s, struct cerr *e)
{
    int V = c->m->hp.n_vocab, rc, s0 = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_prefill > MAX_B * PROMPT ? n_prefill : MAX_B * PROMPT));
    if (!ids)
        return cerr_set(e, CERR_NOMEM, "out of memory");
    /* batch-1 decode: PROMPT tokens, then DECODE greedy steps */
    fill_ids(ids, PROMPT, V, 1);
    if ((rc = step(c, &s0, 1, ids, PROMPT, 0, e)))
        goto out;
    int32_t t = pick(c, 0), t_first = t, got_sync[DECODE], got_q[DECODE];
    double t0 = clock_now_s();
    for (int i = 0; i < DECODE; i++) {
        if ((rc = step(c, &s0, 1, &t, 1, 0, e)))
            goto out;
        t = got_sync[i] = pick(c, 0);
    }
    double dec = DECODE / (clock_now_s() - t0);
    /* the device time of one decode step alone: one more step, then its graph segments
     * replayed back to back (no host work between steps); -1 where that is not available */
    double gpu_step_us = -1;
#ifdef CINFER_HAVE_CUDA
    if (!strcmp(be->ops->name, "cuda")) {
        /* a step that starts a KV block has a new shape (run plainly the first time): the
         * second of two steps is a replay */
        int64_t r0 = 0, r1 = 0, cap = 0;
        for (int i = 0; i < 2; i++) {
            be_cuda_graph_counts(be, &r0, &cap);
            if ((rc = step(c, &s0, 1, &t, 1, 0, e)))
                goto out;
            t = pick(c, 0);
            be_cuda_graph_counts(be, &r1, &cap);
        }
        double us = 0;
        int pr = r1 > r0 ? be_cuda_replay_last(be, (int)(r1 - r0), 64, &us) : -9;
        if (pr == 0)
            gpu_step_us = us;
        else
            fprintf(stderr, "gpu_bench: no replay of a decode step (%lld graphs, rc %d)\n",
                    (long long)(r1 - r0), pr);
    }
#endif
    reset(c, 0);
    /* the same decode overlapped (model_forward_queue): step i + 1 is queued, its token the
     * device argmax of step i, before step i's id is read back; the ids must not change */
    double dec_q = -1;
    int same_q = -1;
    if (c->use_am) {
        if ((rc = step(c, &s0, 1, ids, PROMPT, 0, e)))
            goto out;
        t0 = clock_now_s();
        if ((rc = step_q(c, &s0, 1, &t_first, 1, 0, 1, e)))
            goto out;
        for (int i = 1; i <= DECODE; i++) {
            if (i < DECODE && (rc = step_q(c, &s0, 1, NULL, 1, 0, 1, e)))
                goto out;
            if ((rc = model_forward_wait(c->m, c->ws, &got_q[i - 1], e)))
                goto out;
        }
        dec_q = DECODE / (clock_now_s() - t0);
        same_q = !memcmp(got_q, got_sync, sizeof got_q);
        reset(c, 0);
    }
    /* prefill of a long prompt, best of 2 */
    double pre = 0;
    fill_ids(ids, n_prefill, V, 2);
    for (int r = 0; r < 2; r++) {
        t0 = clock_now_s();
        if ((rc = step(c, &s0, 1, ids, n_prefill, 0, e)))
            goto out;
        double v = n_prefill / (clock_now_s() - t0);
        pre = v > pre ? v : pre;
        reset(c, 0);
    }
    /* the headline is what the engine does (decode bursts: queued steps) when the backend
     * computes argmax; a queued run whose ids differ from the plain one's is a bug: said
     * loudly, and the plain number stands */
    if (same_q == 0)
        fprintf(stderr, "gpu_bench: ERROR: queued decode ids differ from the plain loop's\n");
    printf("{\"decode_b1_tok_s\": %.2f, \"decode_b1_sync_tok_s\": %.2f, "
           "\"decode_queued\": %d, \"decode_queued_same_ids\": %d, \"decode_step_us\": %.1f, "
           "\"decode_gpu_step_us\": %.1f, \"decode_tokens\": %d, \"prompt_tokens\": %d, "
           "\"prefill_tokens\": %d, \"prefill_tok_s\": %.1f, \"load_s\": %.2f, "
           "\"weight_bytes\": %zu, \"agg\": {",
           same_q == 1 ? dec_q : dec, dec, same_q == 1, same_q, 1e6 / (same_q == 1 ? dec_q : dec),
           gpu_step_us, DECODE, PROMPT, n_prefill, pre, load_s, model_weight_bytes(c->m));
    for (int bi = 0; bi < n_batches; bi++) {
        int B = batches[bi], sel[MAX_B];
        for (int i = 0; i < B; i++) {
            sel[i] = i;
            fill_ids(ids + i * PROMPT, PROMPT, V, 10 + (uint32_t)i);
            if ((rc = step(c, &sel[i], 1, ids + i * PROMPT, PROMPT, 0, e)))
                goto out;
        }
        for (int i = 0; i < B; i++)
            ids[i] = pick(c, 0); /* any ids will do from here */
        t0 = clock_now_s();
        /* queued like the engine's bursts (each step's tokens the previous step's device
         * argmax) when the backend has argmax, else one plain step at a time */
        for (int k = 0; k < AGG_STEPS; k++) {
            if (c->use_am) {
                if ((rc = step_q(c, sel, B, k ? NULL : ids, 1, 0, 1, e)))
                    goto out;
                if (k && (rc = model_forward_wait(c->m, c->ws, c->am, e)))
                    goto out;
                continue;
            }
            if ((rc = step(c, sel, B, ids, 1, 0, e)))
                goto out;
            for (int i = 0; i < B; i++)
                ids[i] = pick(c, i);
        }
        if (c->use_am && (rc = model_forward_wait(c->m, c->ws, c->am, e)))
            goto out;
        double agg = (double)B * AGG_STEPS / (clock_now_s() - t0);
        printf("%s\"%d\": %.1f", bi ? ", " : "", B, agg);
        for (int i = 0; i < B; i++)
            reset(c, i);
    }
    printf("}, \"agg_steps\": %d, \"peak_device_bytes\": %zu}\n", AGG_STEPS, peak_dev(be));
out:
    free(ids);
    return rc;
}

/* One step of B decode rows (sequences 0..B-1, token dec[i] at their n_past) and a P-token
 * prompt chunk of sequence B (ids pr, from its n_past); outputs: the B decode rows, then the
 * prompt's last row; n_lead as given (0: one group). Positions do not advance (a step can be
 * repeated: it writes the same K/V again). Logits to c->logits unless argmax. */
static int mixed_step(struct ctx *c, int B, const int32_t *dec, int P, const int32_t *pr,
                      int n_lead, int argmax, struct cerr *e)
{
    int n = 0, mb = 1, rc;
    for (int s = 0; s <= B; s++) {
        if ((rc = kv_seq_reserve(c->kv, &c->seqs[s], c->n_past[s] + (s < B ? 1 : P), e)))
            return rc;
        mb = c->seqs[s].n_blocks > mb ? c->seqs[s].n_blocks : mb;
    }
    for (int s = 0; s <= B; s++) {
        for (int j = 0; j < (s < B ? 1 : P); j++, n++) {
            c->tok[n] = s < B ? dec[s] : pr[j];
            c->pos[n] = c->n_past[s] + j;
            c->seq[n] = s;
            c->slots[n] = kv_seq_slot(c->kv, &c->seqs[s], c->pos[n]);
        }
        c->out[s] = n - 1;
        memset(c->tables + (size_t)s * mb, 0, (size_t)mb * 4);
        memcpy(c->tables + (size_t)s * mb, c->seqs[s].blocks, (size_t)c->seqs[s].n_blocks * 4);
    }
    struct model_kv_view view = kv_pool_view(c->kv);
    struct model_batch b = {.n_tok = n, .tokens = c->tok, .pos = c->pos, .seq = c->seq,
                            .slots = c->slots, .n_seq = B + 1, .max_blocks = mb,
                            .block_tables = c->tables, .n_out = B + 1, .out_idx = c->out,
                            .n_lead = n_lead, .argmax = argmax ? c->am : NULL};
    return model_forward(c->m, c->ws, &view, &b, c->logits, e);
}

/* mixed mode: what running a step's decode rows apart from its prompt chunk (n_lead) costs
 * and buys. B sequences are prefilled, then steps of B decode rows + a P-token prompt chunk
 * run with n_lead = B and with n_lead = 0 (timed, best of 5), and a step of the B decode
 * rows alone; "exact": the decode rows' logits equal the decode-only step's, bit for bit. */
static int mixed_mode(struct ctx *c, int B, int P, struct cerr *e)
{
    int V = c->m->hp.n_vocab, rc = 0;
    if (B < 1 || B >= MAX_B || B + P > c->max_tok || B + 1 > MAX_B)
        return cerr_set(e, CERR_INVALID, "mixed: %d decode rows + %d prompt rows do not fit", B, P);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(PROMPT > P ? PROMPT : P)), dec[MAX_B];
    float *ref = malloc(sizeof(float) * (size_t)B * V);
    if (!ids || !ref) {
        free(ids), free(ref);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    for (int s = 0; s < B; s++) {
        fill_ids(ids, PROMPT, V, 40 + (uint32_t)s);
        if ((rc = step(c, &s, 1, ids, PROMPT, 0, e)))
            goto out;
        dec[s] = ids[s % PROMPT];
    }
    fill_ids(ids, P, V, 99);
    /* the decode rows alone (a step of B rows, one output each): the reference logits */
    int sel[MAX_B];
    for (int s = 0; s < B; s++)
        sel[s] = s;
    double best[3] = {1e9, 1e9, 1e9};
    const int am = c->use_am;
    for (int r = 0; r < 6; r++) {
        c->use_am = r < 5 ? am : 0; /* timed with the argmax; the last one keeps the logits */
        double t0 = clock_now_s();
        if ((rc = step(c, sel, B, dec, 1, 0, e)))
            goto out;
        double dt = clock_now_s() - t0;
        if (r < 5)
            best[2] = dt < best[2] ? dt : best[2];
        for (int s = 0; s < B; s++)
            c->n_past[s]--; /* the same position again next time */
    }
    c->use_am = am;
    memcpy(ref, c->logits, sizeof(float) * (size_t)B * V);
    int exact[2];
    for (int v = 0; v < 2; v++) { /* v 0: n_lead = B (split where it changes bits), 1: none */
        if ((rc = mixed_step(c, B, dec, P, ids, v ? 0 : B, 0, e)))
            goto out;
        exact[v] = !memcmp(c->logits, ref, sizeof(float) * (size_t)B * V);
        for (int r = 0; r < 5; r++) {
            double t0 = clock_now_s();
            if ((rc = mixed_step(c, B, dec, P, ids, v ? 0 : B, c->use_am, e)))
                goto out;
            double dt = clock_now_s() - t0;
            best[v] = dt < best[v] ? dt : best[v];
        }
    }
    printf("{\"mixed\": {\"decode_rows\": %d, \"prompt_rows\": %d, \"lead_ms\": %.3f, "
           "\"one_group_ms\": %.3f, \"decode_only_ms\": %.3f, \"lead_exact\": %s, "
           "\"one_group_exact\": %s, \"lead_steps\": %ld}}\n",
           B, P, best[0] * 1e3, best[1] * 1e3, best[2] * 1e3, exact[0] ? "true" : "false",
           exact[1] ? "true" : "false", model_lead_steps(c->ws));
out:
    for (int s = 0; s <= B; s++)
        reset(c, s);
    free(ids), free(ref);
    return rc;
}

static int logits_mode(struct ctx *c, const char *idstr, int n_gen, struct cerr *e)
{
    int V = c->m->hp.n_vocab, n = 0, rc, s0 = 0;
    int32_t ids[1024];
    for (const char *p = idstr; *p && n < 1024;) {
        ids[n++] = (int32_t)strtol(p, (char **)&p, 10);
        if (*p == ',')
            p++;
    }
    if (n == 0 || n > c->max_tok)
        return cerr_set(e, CERR_INVALID, "--ids needs 1..%d ids", c->max_tok);
    if ((rc = step(c, &s0, 1, ids, n, 1, e)))
        return rc;
    printf("{\"prompt_logits\": [");
    for (int i = 0; i < n; i++) {
        printf("%s[", i ? "," : "");
        for (int v = 0; v < V; v++)
            printf("%s%.7g", v ? "," : "", c->logits[(size_t)i * V + v]);
        printf("]");
    }
    int32_t t = sampler_argmax(c->logits + (size_t)(n - 1) * V, V);
    printf("], \"ids\": [");
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)n_gen);
    float *steps = malloc(sizeof(float) * (size_t)n_gen * V);
    if (!gen || !steps) {
        free(gen), free(steps);
        return cerr_set(e, CERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_gen; i++) {
        gen[i] = t;
        if ((rc = step(c, &s0, 1, &t, 1, 0, e))) {
            free(gen), free(steps);
            return rc;
        }
        memcpy(steps + (size_t)i * V, c->logits, sizeof(float) * (size_t)V);
        t = sampler_argmax(c->logits, V);
    }
    for (int i = 0; i < n_gen; i++)
        printf("%s%d", i ? "," : "", gen[i]);
    printf("], \"step_logits\": [");
    for (int i = 0; i < n_gen; i++) {
        printf("%s[", i ? "," : "");
        for (int v = 0; v < V; v++)
            printf("%s%.7g", v ? "," : "", steps[(size_t)i * V + v]);
        printf("]");
    }
    printf("]}\n");
    free(gen), free(steps);
    return 0;
}

/* ---- mm mode: projections of the l1b/l8b shapes on random BF16 weights, per step size ----
 * For each shape and n: device time per call (graphs off, 20 calls after a warm-up) and the
 * weight bytes per second, on the default path (skinny kernel for small n) and on cuBLAS
 * (CINFER_CUDA_SKINNY_MAX=0); fused ops go through matmul_fused. */
struct mm_shape {
    const char *name;
    int mode, n_w, m[3], k;
};

static double mm_time(struct be *b, const struct mm_shape *sh, struct be_tensor *w, float *x,
                      float **y, int n)
{
    struct be_mm f = {.mode = sh->mode, .act = BE_ACT_SILU, .n = n, .x = x, .n_w = sh->n_w};
    for (int i = 0; i < sh->n_w; i++)
        f.w[i] = &w[i], f.y[i] = y[i];
    struct cerr e = {0};
    for (int r = 0; r < 3; r++)
        b->ops->matmul_fused(b, &f);
    b->ops->sync(b, &e);
    enum { REPS = 20 };
    double t0 = clock_now_s();
    for (int r = 0; r < REPS; r++)
        b->ops->matmul_fused(b, &f);
    if (b->ops->sync(b, &e)) {
        fprintf(stderr, "gpu_bench mm: %s\n", e.msg);
        return -1;
    }
    return (clock_now_s() - t0) / REPS;
}

/* topcand: device time of the sampling-candidates op (graphs on: 64 calls, two replayed
 * segments) on rows of n = 128256 random logits (cap 4096, span 20, a few hundred values
 * within the span), with the split path (the default) and with the one-block kernel
 * (CINFER_CUDA_TOPCAND_SPLIT=0); the two must give the same max, argmax, count and
 * candidates, and sums within 1e-5 relative. */
static int tc_bench(const char *backend)
{
    enum { N = 128256, CAP = 4096, REPS = 64, MAXR = 64 };
    const float span = 20.0f;
    static const int rows_list[] = {1, 8, 64};
    struct be *bs[2];
    struct be_config bc = {0};
    struct cerr e = {0};
    bs[0] = be_new(backend, &bc, &e);
    setenv("CINFER_CUDA_TOPCAND_SPLIT", "0", 1);
    bs[1] = bs[0] ? be_new(backend, &bc, &e) : NULL;
    unsetenv("CINFER_CUDA_TOPCAND_SPLIT");
    if (!bs[0] || !bs[1] || !bs[0]->ops->topcand) {
        fprintf(stderr, "gpu_bench topcand: %s\n", e.msg[0] ? e.msg : "no topcand");
        be_free(bs[0]), be_free(bs[1]);
        return 1;
    }
    const size_t stride = be_topcand_stride(CAP);
    float *hx = malloc(sizeof(float) * MAXR * (size_t)N);
    char *got[2] = {malloc(MAXR * stride), malloc(MAXR * stride)};
    uint32_t r = 777;
    for (size_t i = 0; i < (size_t)MAXR * N; i++) {
        r = r * 1664525u + 1013904223u;
        float u = (float)(r >> 8) / 16777216.0f;
        hx[i] = (r & 255) == 0 ? -15.0f * u : -40.0f + 10.0f * u; /* ~500 a row in the span */
    }
    int rc = 0;
    printf("{\"topcand\": [");
    for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
        const int R = rows_list[ri];
        double us[2] = {0, 0};
        for (int v = 0; v < 2 && !rc; v++) {
            struct be *b = bs[v];
            float *dx = b->ops->alloc(b, sizeof(float) * (size_t)R * N);
            void *dout = b->ops->alloc(b, (size_t)R * stride);
            if (!dx || !dout || b->ops->upload(b, dx, hx, sizeof(float) * (size_t)R * N, &e)) {
                rc = 1;
                break;
            }
            for (int w = 0; w < 3; w++) /* plain, captured, replayed */
                for (int k = 0; k < REPS; k++)
                    b->ops->topcand(b, dout, dx, R, N, span, CAP);
            b->ops->sync(b, &e);
            double t0 = clock_now_s();
            for (int k = 0; k < REPS; k++)
                b->ops->topcand(b, dout, dx, R, N, span, CAP);
            if (b->ops->sync(b, &e) || b->ops->download(b, got[v], dout, (size_t)R * stride, &e))
                rc = 1;
            us[v] = (clock_now_s() - t0) / REPS * 1e6;
            b->ops->free(b, dx), b->ops->free(b, dout);
        }
        if (rc)
            break;
        int same = 1;
        double sum_rel = 0;
        for (int i = 0; i < R; i++) {
            const struct be_topcand_hdr *a = (const void *)(got[0] + (size_t)i * stride);
            const struct be_topcand_hdr *b = (const void *)(got[1] + (size_t)i * stride);
            same &= memcmp(&a->mx, &b->mx, 4) == 0 && a->argmax == b->argmax && a->nc == b->nc &&
                    (a->nc <= 0 || !memcmp(a + 1, b + 1, (size_t)a->nc * sizeof(struct be_topcand_ent)));
            double d = fabs((double)a->sum - b->sum) / (b->sum > 0 ? b->sum : 1);
            sum_rel = d > sum_rel ? d : sum_rel;
        }
        const struct be_topcand_hdr *h0 = (const void *)got[0];
        printf("%s{\"rows\": %d, \"split_us\": %.1f, \"one_block_us\": %.1f, \"same\": %s, "
               "\"max_sum_rel_diff\": %.2e, \"nc_row0\": %d}", ri ? ", " : "", R, us[0], us[1],
               same ? "true" : "false", sum_rel, h0->nc);
        if (!same || sum_rel > 1e-5)
            rc = 1;
    }
    printf("]}\n");
    if (rc)
        fprintf(stderr, "gpu_bench topcand: %s\n", e.msg[0] ? e.msg : "split and one-block differ");
    free(hx), free(got[0]), free(got[1]);
    be_free(bs[0]), be_free(bs[1]);
    return rc;
}

/* sample: device time of the op sample next to the op argmax on rows of n = 128256 random
 * logits (graphs on, 64 calls): argmax; sample at T = 0.7 (no processors: the default
 * request); greedy with 256 logit_bias ids and a repetition penalty over 20 ids. */
static int sp_bench(const char *backend)
{
    enum { N = 128256, REPS = 64, MAXR = 64, AUX = 512 + 20 };
    static const int rows_list[] = {1, 8, 64};
    struct be_config bc = {0};
    struct cerr e = {0};
    struct be *b = be_new(backend, &bc, &e);
    if (!b || !b->ops->sample || !b->ops->argmax) {
        fprintf(stderr, "gpu_bench sample: %s\n", e.msg[0] ? e.msg : "no sample op");
        be_free(b);
        return 1;
    }
    float *hx = malloc(sizeof(float) * MAXR * (size_t)N);
    uint32_t r = 4242;
    for (size_t i = 0; i < (size_t)MAXR * N; i++) {
        r = r * 1664525u + 1013904223u;
        hx[i] = (float)(r >> 8) / 16777216.0f * 8.0f;
    }
    const size_t words = (size_t)MAXR * (BE_SAMPLE_ROW_WORDS + AUX);
    int32_t *blob[2] = {calloc(words, 4), calloc(words, 4)};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < MAXR; i++) {
            struct be_sample_row p = {.rep_w = -1, .pres_w = -1, .freq_w = -1};
            p.u_lo = 0x9e3779b9u * (uint32_t)(i + 1), p.u_hi = (uint32_t)i * 977u & 0x1fffffu;
            if (k == 0) {
                p.inv_t = 1.0f / 0.7f;
            } else {
                int off = MAXR * BE_SAMPLE_ROW_WORDS + i * AUX;
                p.n_bias = 256, p.bias_off = off, p.n_hist = 20, p.hist_off = off + 512;
                p.rep_w = 20, p.rep = 1.1f;
                for (int j = 0; j < 256; j++) {
                    float v = (float)(j % 7) - 3.0f;
                    blob[k][off + 2 * j] = (j * 499 + i) % N;
                    memcpy(&blob[k][off + 2 * j + 1], &v, 4);
                }
                for (int j = 0; j < 20; j++)
                    blob[k][off + 512 + j] = (j * 6007) % N;
            }
            memcpy(blob[k] + (size_t)i * BE_SAMPLE_ROW_WORDS, &p, sizeof p);
        }
    int rc = 0;
    printf("{\"sample\": [");
    for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0] && !rc; ri++) {
        const int R = rows_list[ri];
        double us[3] = {0, 0, 0};
        float *dx = b->ops->alloc(b, sizeof(float) * (size_t)R * N);
        int32_t *dout = b->ops->alloc(b, 4 * MAXR), *dp[2];
        dp[0] = b->ops->alloc(b, words * 4), dp[1] = b->ops->alloc(b, words * 4);
        if (!dx || !dout || !dp[0] || !dp[1] ||
            b->ops->upload(b, dx, hx, sizeof(float) * (size_t)R * N, &e) ||
            b->ops->upload(b, dp[0], blob[0], words * 4, &e) ||
            b->ops->upload(b, dp[1], blob[1], words * 4, &e)) {
            rc = 1;
            break;
        }
        for (int v = 0; v < 3; v++) {
            for (int w = 0; w < 4; w++) { /* plain, captured, replayed; then timed */
                if (w == 3 && b->ops->sync(b, &e))
                    rc = 1;
                double t0 = clock_now_s();
                for (int k = 0; k < REPS; k++) {
                    if (v == 0)
                        b->ops->argmax(b, dout, dx, R, N);
                    else
                        b->ops->sample(b, dout, dx, R, N, dp[v - 1], NULL);
                }
                if (b->ops->sync(b, &e))
                    rc = 1;
                us[v] = (clock_now_s() - t0) / REPS * 1e6;
            }
        }
        printf("%s{\"rows\": %d, \"argmax_us\": %.1f, \"sample_t07_us\": %.1f, "
               "\"sample_bias256_rep_us\": %.1f}", ri ? ", " : "", R, us[0], us[1], us[2]);
        b->ops->free(b, dx), b->ops->free(b, dout), b->ops->free(b, dp[0]),
            b->ops->free(b, dp[1]);
    }
    printf("]}\n");
    if (rc)
        fprintf(stderr, "gpu_bench sample: %s\n", e.msg);
    free(hx), free(blob[0]), free(blob[1]);
    be_free(b);
    return rc;
}

static int mm_bench(const char *which, const char *backend)
{
    static const struct mm_shape shapes[] = {
        {"l8b.qkv", BE_MM_PLAIN, 3, {4096, 1024, 1024}, 4096},
        {"l8b.o+res", BE_MM_ADD, 1, {4096}, 4096},
        {"l8b.gate_up", BE_MM_GLU, 2, {14336, 14336}, 4096},
        {"l8b.down+res", BE_MM_ADD, 1, {4096}, 14336},
        {"l8b.lm_head", BE_MM_PLAIN, 1, {128256}, 4096},
        {"l1b.qkv", BE_MM_PLAIN, 3, {2048, 512, 512}, 2048},
        {"l1b.o+res", BE_MM_ADD, 1, {2048}, 2048},
        {"l1b.gate_up", BE_MM_GLU, 2, {8192, 8192}, 2048},
        {"l1b.down+res", BE_MM_ADD, 1, {2048}, 8192},
        {"l1b.lm_head", BE_MM_PLAIN, 1, {128256}, 2048},
    };
    static const int ns[] = {1, 2, 4, 8, 16, 32, 64};
    (void)which;
    struct be *bs[2];
    struct be_config bc = {.graphs = -1};
    struct cerr e = {0};
    bs[0] = be_new(backend, &bc, &e);
    setenv("CINFER_CUDA_SKINNY_MAX", "0", 1);
    bs[1] = bs[0] ? be_new(backend, &bc, &e) : NULL;
    unsetenv("CINFER_CUDA_SKINNY_MAX");
    if (!bs[0] || !bs[1] || !bs[0]->ops->matmul_fused) {
        fprintf(stderr, "gpu_bench mm: %s\n", e.msg[0] ? e.msg : "no matmul_fused");
        be_free(bs[0]), be_free(bs[1]);
        return 1;
    }
    /* one random host block, uploaded over every weight */
    enum { HB = 16 << 20 };
    uint16_t *hb = malloc(HB * 2);
    float *hx = malloc(sizeof(float) * 64 * 14336);
    uint32_t r = 12345;
    for (int i = 0; i < HB; i++) {
        r = r * 1664525u + 1013904223u;
        float v = ((float)(r >> 8) / 16777216.0f - 0.5f) * 0.1f;
        uint32_t u;
        memcpy(&u, &v, 4);
        hb[i] = (uint16_t)(u >> 16);
    }
    for (int i = 0; i < 64 * 14336; i++) {
        r = r * 1664525u + 1013904223u;
        hx[i] = (float)(r >> 8) / 16777216.0f - 0.5f;
    }
    printf("{\"mm\": [\n");
    int first = 1;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct mm_shape *sh = &shapes[si];
        for (int v = 0; v < 2; v++) {
            struct be *b = bs[v];
            struct be_tensor w[3];
            float *y[3], *x = b->ops->alloc(b, sizeof(float) * 64 * (size_t)sh->k);
            double bytes = 0;
            b->ops->upload(b, x, hx, sizeof(float) * 64 * (size_t)sh->k, &e);
            for (int i = 0; i < sh->n_w; i++) {
                size_t nb = (size_t)sh->m[i] * sh->k * 2;
                w[i] = (struct be_tensor){.dtype = DT_BF16, .ne = {sh->k, sh->m[i], 1, 1},
                                          .nbytes = nb};
                w[i].data = b->ops->alloc(b, nb);
                for (size_t o = 0; o < nb; o += (size_t)HB * 2)
                    b->ops->upload(b, (char *)w[i].data + o, hb,
                                   nb - o < (size_t)HB * 2 ? nb - o : (size_t)HB * 2, &e);
                y[i] = b->ops->alloc(b, sizeof(float) * 64 * (size_t)sh->m[i]);
                bytes += (double)nb;
            }
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                double t = mm_time(b, sh, w, x, y, ns[ni]);
                printf("%s {\"shape\": \"%s\", \"path\": \"%s\", \"n\": %d, \"us\": %.2f, "
                       "\"weight_gb_s\": %.1f}",
                       first ? "" : ",\n", sh->name, v ? "cublas" : "default", ns[ni], t * 1e6,
                       t > 0 ? bytes / t / 1e9 : 0.0);
                first = 0;
            }
            for (int i = 0; i < sh->n_w; i++)
                b->ops->free(b, w[i].data), b->ops->free(b, y[i]);
            b->ops->free(b, x);
        }
    }
    printf("\n]}\n");
    free(hb), free(hx);
    be_free(bs[0]), be_free(bs[1]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL perf|logits [options] (see the file header)\n", argv[0]);
        return 2;
    }
    const char *path = argv[1], *mode = argv[2], *backend = "cuda", *idstr = NULL;
    int kv_dtype = DT_F16, n_prefill = 4096, n_gen = 64, batches[8] = {8, 32, 64}, n_batches = 3;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "%s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--kv"))
            kv_dtype = !strcmp(v, "f32") ? DT_F32 : DT_F16;
        else if (!strcmp(a, "--prefill"))
            n_prefill = atoi(v);
        else if (!strcmp(a, "--ids"))
            idstr = v;
        else if (!strcmp(a, "-n"))
            n_gen = atoi(v);
        else if (!strcmp(a, "--batches")) {
            n_batches = 0;
            for (const char *p = v; *p && n_batches < 8;) {
                int b = (int)strtol(p, (char **)&p, 10);
                batches[n_batches++] = b < 1 ? 1 : b > MAX_B ? MAX_B : b;
                if (*p == ',')
                    p++;
            }
        } else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (n_prefill < PROMPT)
        n_prefill = PROMPT;
    if (!strcmp(mode, "mm"))
        return mm_bench(path, backend);
    if (!strcmp(mode, "topcand"))
        return tc_bench(backend);
    if (!strcmp(mode, "sample"))
        return sp_bench(backend);
    struct cerr e = {0};
    struct be_config bc = {0};
    struct ctx c;
    memset(&c, 0, sizeof c);
    int rc = 1;
    double t0 = clock_now_s();
    struct be *be = be_new(backend, &bc, &e);
    if (!be || model_load(&c.m, path, be, &e)) {
        fprintf(stderr, "gpu_bench: %s\n", e.msg);
        goto done;
    }
    double load_s = clock_now_s() - t0;
    c.max_tok = n_prefill > MAX_B * PROMPT / 8 ? n_prefill : MAX_B * PROMPT / 8;
    int ctx_pos = n_prefill > PROMPT + DECODE ? n_prefill : PROMPT + DECODE;
    c.max_blocks = (ctx_pos + BS - 1) / BS + 1;
    int n_blocks = c.max_blocks + MAX_B * ((PROMPT + AGG_STEPS + BS - 1) / BS + 1);
    const struct model_hparams *hp = &c.m->hp;
    if (kv_pool_new(&c.kv, be, hp->n_layer, hp->n_kv_head * hp->head_dim, BS, n_blocks, kv_dtype, -1,
                    &e) ||
        model_ws_new(&c.ws, c.m, c.max_tok, strcmp(mode, "logits") ? MAX_B : c.max_tok, MAX_B,
                     c.max_blocks, &e))
        goto fail;
    size_t T = (size_t)c.max_tok;
    c.tok = malloc(T * 4), c.pos = malloc(T * 4), c.seq = malloc(T * 4), c.slots = malloc(T * 4);
    c.out = malloc(T * 4);
    c.tables = calloc((size_t)MAX_B * c.max_blocks, 4);
    c.logits = malloc(T * (size_t)hp->n_vocab * sizeof(float));
    for (int i = 0; i < MAX_B; i++)
        kv_seq_init(&c.seqs[i]);
    if (!c.tok || !c.pos || !c.seq || !c.slots || !c.out || !c.tables || !c.logits) {
        cerr_set(&e, CERR_NOMEM, "out of memory");
        goto fail;
    }
    /* perf: argmax on the device as the engine does; logits mode needs every logit */
    c.use_am = (!strcmp(mode, "perf") || !strcmp(mode, "mixed")) && model_can_argmax(c.m) &&
               !getenv("CINFER_HOST_ARGMAX");
    if (!strcmp(mode, "perf"))
        rc = perf(&c, be, n_prefill, batches, n_batches, load_s, &e);
    else if (!strcmp(mode, "logits") && idstr)
        rc = logits_mode(&c, idstr, n_gen, &e);
    else if (!strcmp(mode, "mixed"))
        rc = mixed_mode(&c, batches[0], n_prefill < 512 ? n_prefill : 512, &e);
    else
        rc = cerr_set(&e, CERR_INVALID, "mode must be perf, mixed or logits --ids ...");
    if (!rc)
        goto done;
fail:
    fprintf(stderr, "gpu_bench: %s\n", e.msg);
    rc = 1;
done:
    for (int i = 0; c.kv && i < MAX_B; i++)
        kv_seq_release(c.kv, &c.seqs[i]);
    kv_pool_free(c.kv);
    model_ws_free(c.ws);
    model_free(c.m);
    be_free(be);
    free(c.tok), free(c.pos), free(c.seq), free(c.slots), free(c.out), free(c.tables);
    free(c.logits);
    return rc ? 1 : 0;
}
