/* gpu_bench.c — cinfer's GPU benchmark and parity driver (built when the CUDA backend is).
 *
 * perf mode prints one JSON object: batch-1 decode tok/s (N tokens after a P-token
 * prompt), prefill tok/s of a long prompt in a fresh context (best of 2), aggregate decode
 * tok/s with B concurrent sequences (each prefilled with P tokens, then S steps of B
 * tokens), weight bytes per token and the peak device memory. It drives model_forward with
 * its own KV pool and step batches (the engine's scheduler is not needed). logits mode
 * feeds --ids, then greedy-decodes N tokens and prints the ids and every logit row as JSON
 * (for bench/gpu/parity.py). Prompt ids of perf mode are deterministic pseudo-random ids.
 *
 * usage: cinfer_gpu_bench MODEL perf [--backend cuda] [--kv f16|f32] [--prefill 4096]
 *                                     [--batches 8,32,64]
 *        cinfer_gpu_bench MODEL logits --ids 1,2,3 [-n 64] [--backend cuda]
 */
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
 * token of each (all tokens when all_out). */
static int step(struct ctx *c, const int *sel, int nsel, const int32_t *ids, int n_each,
                int all_out, struct cerr *e)
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
            c->tok[n] = ids[i * n_each + j];
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
    struct model_batch b = {.n_tok = n, .tokens = c->tok, .pos = c->pos, .seq = c->seq,
                            .slots = c->slots, .n_seq = nsel, .max_blocks = mb,
                            .block_tables = c->tables, .n_out = n_out, .out_idx = c->out};
    return model_forward(c->m, c->ws, &view, &b, c->logits, e);
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
    int32_t t = sampler_argmax(c->logits, V);
    double t0 = clock_now_s();
    for (int i = 0; i < DECODE; i++) {
        if ((rc = step(c, &s0, 1, &t, 1, 0, e)))
            goto out;
        t = sampler_argmax(c->logits, V);
    }
    double dec = DECODE / (clock_now_s() - t0);
    reset(c, 0);
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
    printf("{\"decode_b1_tok_s\": %.2f, \"decode_tokens\": %d, \"prompt_tokens\": %d, "
           "\"prefill_tokens\": %d, \"prefill_tok_s\": %.1f, \"load_s\": %.2f, "
           "\"weight_bytes\": %zu, \"agg\": {",
           dec, DECODE, PROMPT, n_prefill, pre, load_s, model_weight_bytes(c->m));
    for (int bi = 0; bi < n_batches; bi++) {
        int B = batches[bi], sel[MAX_B];
        for (int i = 0; i < B; i++) {
            sel[i] = i;
            fill_ids(ids + i * PROMPT, PROMPT, V, 10 + (uint32_t)i);
            if ((rc = step(c, &sel[i], 1, ids + i * PROMPT, PROMPT, 0, e)))
                goto out;
        }
        for (int i = 0; i < B; i++)
            ids[i] = sampler_argmax(c->logits, V); /* any ids will do from here */
        t0 = clock_now_s();
        for (int k = 0; k < AGG_STEPS; k++) {
            if ((rc = step(c, sel, B, ids, 1, 0, e)))
                goto out;
            for (int i = 0; i < B; i++)
                ids[i] = sampler_argmax(c->logits + (size_t)i * V, V);
        }
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
    if (!strcmp(mode, "perf"))
        rc = perf(&c, be, n_prefill, batches, n_batches, load_s, &e);
    else if (!strcmp(mode, "logits") && idstr)
        rc = logits_mode(&c, idstr, n_gen, &e);
    else
        rc = cerr_set(&e, CERR_INVALID, "mode must be perf or logits --ids ...");
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
