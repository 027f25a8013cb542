/* test_model_stories.c — stories260K (real Llama-architecture GGUF, F32) against the
 * llama2.c reference vectors: logits within 1e-4 after BOS and after the last prompt token,
 * and the full greedy continuation identical, for all 6 prompts. Also checks that prefill
 * chunking does not change a single logit bit (batch invariance) and that bad ids fail
 * cleanly. */
#include "harness.h"

#include <jansson.h>

#include "backend/backend.h"
#include "engine/gen.h"
#include "engine/sampler.h"
#include "kv/kv_pool.h"
#include "model/model.h"

static struct be *g_be;
static struct model *g_m;
static json_t *g_cases;

static int32_t *json_ids(json_t *arr, int *n)
{
    *n = (int)json_array_size(arr);
    int32_t *ids = malloc((size_t)(*n ? *n : 1) * sizeof *ids);
    for (int i = 0; i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return ids;
}

static double max_diff(const float *a, json_t *ref, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++) {
        double x = fabs(a[i] - json_number_value(json_array_get(ref, (size_t)i)));
        if (x > d)
            d = x;
    }
    return d;
}

static void test_load(void)
{
    CHECK_EQ_INT(g_m->hp.arch, ARCH_LLAMA);
    CHECK_EQ_INT(g_m->hp.n_layer, 5);
    CHECK_EQ_INT(g_m->hp.n_embd, 64);
    CHECK_EQ_INT(g_m->hp.n_head, 8);
    CHECK_EQ_INT(g_m->hp.n_kv_head, 4);
    CHECK_EQ_INT(g_m->hp.n_vocab, 512);
    /* the GGUF stores the (tied) classifier as its own output.weight tensor */
    CHECK_EQ_INT(g_m->output.ne[1], 512);
    CHECK_EQ_INT(g_m->output.dtype, DT_F32);
}

static void run_case(json_t *c, int chunk)
{
    struct cerr e = {0};
    int np, ng;
    int32_t *prompt = json_ids(json_object_get(c, "prompt_ids_with_bos"), &np);
    int32_t *want = json_ids(json_object_get(c, "greedy_generated_ids"), &ng);
    int max_pos = (int)json_integer_value(json_object_get(c, "max_positions"));
    struct gen *g = NULL;
    int V = g_m->hp.n_vocab;
    CHECK_EQ_INT(gen_new(&g, g_m, 512, chunk, DT_F32, &e), 0);
    if (!g)
        goto out;
    float *all = malloc((size_t)np * V * sizeof(float));
    CHECK_EQ_INT(gen_feed(g, prompt, np, all, &e), 0);
    double d0 = max_diff(all, json_object_get(c, "logits_pos0_after_bos"), V);
    double d1 = max_diff(all + (size_t)(np - 1) * V, json_object_get(c, "logits_last_prompt_pos"), V);
    CHECK_MSG(d0 <= 1e-4, "'%s': logits after BOS differ by %g",
              json_string_value(json_object_get(c, "prompt")), d0);
    CHECK_MSG(d1 <= 1e-4, "'%s': logits at the last prompt position differ by %g",
              json_string_value(json_object_get(c, "prompt")), d1);
    free(all);
    int bad_at = -1;
    for (int i = 0; i < ng; i++) {
        int32_t id = sampler_argmax(g->logits, V);
        if (id != want[i]) {
            bad_at = i;
            break;
        }
        if (gen_feed(g, &id, 1, NULL, &e) != 0) {
            bad_at = i;
            break;
        }
    }
    CHECK_MSG(bad_at < 0, "'%s' (chunk %d): greedy ids diverge at generated token %d",
              json_string_value(json_object_get(c, "prompt")), chunk, bad_at);
    if (bad_at < 0 && np + ng - 1 < max_pos) /* the reference stopped at BOS */
        CHECK_EQ_INT(sampler_argmax(g->logits, V), 1);
    gen_free(g);
out:
    free(prompt);
    free(want);
}

static void test_greedy_all_prompts(void)
{
    for (size_t i = 0; i < json_array_size(g_cases); i++)
        run_case(json_array_get(g_cases, i), 512);
}

static void test_greedy_chunked(void)
{
    /* chunk sizes 1 and 3 must give the same ids (and logits, checked above per case) */
    run_case(json_array_get(g_cases, 0), 1);
    run_case(json_array_get(g_cases, 2), 3);
}

static void test_chunking_bit_identical(void)
{
    json_t *c = json_array_get(g_cases, 2);
    int np;
    int32_t *prompt = json_ids(json_object_get(c, "prompt_ids_with_bos"), &np);
    int V = g_m->hp.n_vocab;
    float *a = malloc((size_t)np * V * 4), *b = malloc((size_t)np * V * 4);
    struct gen *g1 = NULL, *g2 = NULL;
    struct cerr e;
    CHECK_EQ_INT(gen_new(&g1, g_m, 64, 64, DT_F32, &e), 0);
    CHECK_EQ_INT(gen_new(&g2, g_m, 64, 1, DT_F32, &e), 0);
    if (g1 && g2) {
        CHECK_EQ_INT(gen_feed(g1, prompt, np, a, &e), 0);
        CHECK_EQ_INT(gen_feed(g2, prompt, np, b, &e), 0);
        CHECK(memcmp(a, b, (size_t)np * V * 4) == 0);
    }
    gen_free(g1);
    gen_free(g2);
    free(a);
    free(b);
    free(prompt);
}

static void test_bad_input(void)
{
    struct gen *g = NULL;
    struct cerr e = {0};
    CHECK_EQ_INT(gen_new(&g, g_m, 8, 8, DT_F32, &e), 0);
    if (!g)
        return;
    int32_t bad = 512;
    CHECK(gen_feed(g, &bad, 1, NULL, &e) < 0);
    CHECK(strstr(e.msg, "outside the vocabulary") != NULL);
    int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK(gen_feed(g, ids, 9, NULL, &e) == CERR_LIMIT);
    gen_free(g);
    struct model *m = NULL;
    CHECK(model_load(&m, fixture_path("stories260K/SOURCES.md"), g_be, &e) < 0);
    CHECK(m == NULL);
    CHECK(model_load(&m, "/nonexistent/model.gguf", g_be, &e) < 0);
    CHECK(strstr(e.msg, "/nonexistent/model.gguf") != NULL);
}

/* Queues one decode step of g's sequence (tok NULL: the previous queued step's output). */
static int queue_one(struct gen *g, const int32_t *tok, struct cerr *e)
{
    int rc = kv_seq_reserve(g->kv, &g->seq, g->n_past + 1, e);
    if (rc)
        return rc;
    g->pos[0] = g->n_past;
    g->slots[0] = kv_seq_slot(g->kv, &g->seq, g->n_past);
    struct model_kv_view view = kv_pool_view(g->kv);
    struct model_batch b = {.n_tok = 1, .tokens = tok, .pos = g->pos, .seq = g->seqv,
                            .slots = g->slots, .n_seq = 1, .max_blocks = g->seq.n_blocks,
                            .block_tables = g->seq.blocks, .n_out = 1, .out_idx = g->idx};
    if (!(rc = model_forward_queue(g->m, g->ws, &view, &b, e)))
        g->n_past++;
    return rc;
}

/* Overlapped greedy steps (model_forward_queue / _wait, two in flight, each continuation
 * taking the previous step's argmax as its token) give the reference greedy ids; misuse is
 * refused with CERR_INVALID and leaves the queue usable. */
static void test_queued_steps(void)
{
    json_t *c = json_array_get(g_cases, 1);
    int np, ng;
    int32_t *prompt = json_ids(json_object_get(c, "prompt_ids_with_bos"), &np);
    int32_t *want = json_ids(json_object_get(c, "greedy_generated_ids"), &ng);
    struct gen *g = NULL;
    struct cerr e = {0};
    int32_t id = -1, got[64];
    CHECK_EQ_INT(gen_new(&g, g_m, 512, 64, DT_F32, &e), 0);
    if (!g)
        goto out;
    CHECK_EQ_INT(model_forward_wait(g_m, g->ws, got, &e), CERR_INVALID); /* nothing queued */
    CHECK_EQ_INT(queue_one(g, NULL, &e), CERR_INVALID); /* no previous queued step */
    CHECK_EQ_INT(gen_feed(g, prompt, np, NULL, &e), 0);
    int n = ng < 64 ? ng : 64, k = 0;
    id = sampler_argmax(g->logits, g_m->hp.n_vocab);
    CHECK_EQ_INT(id, want[0]);
    CHECK_EQ_INT(queue_one(g, &id, &e), 0); /* ids 1.. are computed on the backend */
    for (int i = 2; i < n; i++) {
        CHECK_EQ_INT(queue_one(g, NULL, &e), 0);
        if (i == 2) { /* two in flight: a third is refused and changes nothing */
            int past = g->n_past;
            CHECK_EQ_INT(queue_one(g, NULL, &e), CERR_INVALID);
            CHECK(strstr(e.msg, "already queued") != NULL);
            g->n_past = past;
        }
        CHECK_EQ_INT(model_queued(g->ws), 2);
        CHECK_EQ_INT(model_forward_wait(g_m, g->ws, &got[k++], &e), 0);
    }
    while (model_queued(g->ws))
        CHECK_EQ_INT(model_forward_wait(g_m, g->ws, &got[k++], &e), 0);
    CHECK_EQ_INT(k, n - 1);
    for (int i = 0; i < k; i++)
        CHECK_MSG(got[i] == want[i + 1], "queued step %d: id %d, want %d", i, got[i], want[i + 1]);
    /* a plain step ends continuations; tokens given again work */
    id = got[k - 1];
    CHECK_EQ_INT(gen_feed(g, &id, 1, NULL, &e), 0);
    CHECK_EQ_INT(queue_one(g, NULL, &e), CERR_INVALID);
    CHECK_EQ_INT(queue_one(g, &id, &e), 0);
    CHECK_EQ_INT(model_forward_wait(g_m, g->ws, got, &e), 0);
    gen_free(g);
out:
    free(prompt);
    free(want);
}

/* Two sequences in one pool and a step runner for the n_lead test. */
struct two {
    struct kv_pool *kv;
    struct kv_seq sq[2];
    int past[2];
    struct model_ws *ws;
};

/* One step: sequence s[i] gets cnt[i] tokens of ids[i]; one output row each (its last
 * token); n_lead as given. logits: (n_sel, V). */
static int two_step(struct two *t, int n_sel, const int *s, const int32_t *const *ids,
                    const int *cnt, int n_lead, float *logits, struct cerr *e)
{
    int32_t tok[64], pos[64], seq[64], slots[64], out[2], tables[2 * 16] = {0};
    int n = 0, mb = 1;
    for (int i = 0; i < n_sel; i++) {
        int rc = kv_seq_reserve(t->kv, &t->sq[s[i]], t->past[s[i]] + cnt[i], e);
        if (rc)
            return rc;
        mb = t->sq[s[i]].n_blocks > mb ? t->sq[s[i]].n_blocks : mb;
    }
    for (int i = 0; i < n_sel; i++) {
        for (int j = 0; j < cnt[i]; j++, n++) {
            tok[n] = ids[i][j];
            pos[n] = t->past[s[i]] + j;
            seq[n] = i;
            slots[n] = kv_seq_slot(t->kv, &t->sq[s[i]], pos[n]);
        }
        out[i] = n - 1;
        memcpy(tables + i * mb, t->sq[s[i]].blocks, (size_t)t->sq[s[i]].n_blocks * 4);
    }
    struct model_kv_view view = kv_pool_view(t->kv);
    struct model_batch b = {.n_tok = n, .tokens = tok, .pos = pos, .seq = seq, .slots = slots,
                            .n_seq = n_sel, .max_blocks = mb, .block_tables = tables,
                            .n_out = n_sel, .out_idx = out, .n_lead = n_lead};
    int rc = model_forward(g_m, t->ws, &view, &b, logits, e);
    if (!rc)
        for (int i = 0; i < n_sel; i++)
            t->past[s[i]] += cnt[i];
    return rc;
}

static int two_new(struct two *t, struct cerr *e)
{
    memset(t, 0, sizeof *t);
    kv_seq_init(&t->sq[0]);
    kv_seq_init(&t->sq[1]);
    int rc = kv_pool_new(&t->kv, g_be, g_m->hp.n_layer, g_m->hp.n_kv_head * g_m->hp.head_dim,
                         16, 16, DT_F32, -1, e);
    setenv("CINFER_LEAD_SPLIT", "1", 1); /* the CPU would not split: make it, to check it */
    rc = rc ? rc : model_ws_new(&t->ws, g_m, 64, 2, 2, 16, e);
    unsetenv("CINFER_LEAD_SPLIT");
    return rc;
}

static void two_free(struct two *t)
{
    for (int i = 0; i < 2; i++)
        if (t->kv)
            kv_seq_release(t->kv, &t->sq[i]);
    kv_pool_free(t->kv);
    model_ws_free(t->ws);
}

/* model_batch.n_lead: a decode row of sequence A beside a prompt chunk of sequence B, run
 * as two groups, gives each row the logits of its own step (bit for bit here, where every
 * op is batch invariant: so the groups' row offsets are right); n_lead 0 gives the same;
 * a bad n_lead or a sequence on both sides is refused. */
static void test_lead_groups(void)
{
    const int V = g_m->hp.n_vocab;
    static const int32_t pa[5] = {1, 403, 407, 261, 378};
    static const int32_t pb[7] = {1, 365, 191, 263, 167, 367, 307};
    int32_t da = 420;
    static float ref[2][512], got[2][512];
    struct cerr e = {0};
    struct two t;
    const int s0 = 0, s1 = 1, c5 = 5, c7 = 7, c1 = 1;
    const int32_t *ia = pa, *ib = pb, *id = &da;
    /* reference: A's prompt, A's decode alone; B's prompt alone */
    CHECK_EQ_INT(two_new(&t, &e), 0);
    CHECK_EQ_INT(two_step(&t, 1, &s0, &ia, &c5, 0, ref[0], &e), 0);
    CHECK_EQ_INT(two_step(&t, 1, &s0, &id, &c1, 0, ref[0], &e), 0);
    CHECK_EQ_INT(two_step(&t, 1, &s1, &ib, &c7, 0, ref[1], &e), 0);
    two_free(&t);
    for (int lead = 0; lead < 2; lead++) {
        CHECK_EQ_INT(two_new(&t, &e), 0);
        CHECK_EQ_INT(two_step(&t, 1, &s0, &ia, &c5, 0, got[0], &e), 0);
        const int sel[2] = {0, 1}, cnt[2] = {1, 7};
        const int32_t *ids[2] = {&da, pb};
        CHECK_EQ_INT(two_step(&t, 2, sel, ids, cnt, lead, &got[0][0], &e), 0);
        CHECK_EQ_INT(model_lead_steps(t.ws), lead); /* the split ran (forced) or did not */
        CHECK_MSG(!memcmp(got[0], ref[0], (size_t)V * 4), "n_lead %d: the decode row differs",
                  lead);
        CHECK_MSG(!memcmp(got[1], ref[1], (size_t)V * 4), "n_lead %d: the prompt row differs",
                  lead);
        /* misuse: refused, nothing runs */
        const int cnt2[2] = {1, 1};
        CHECK_EQ_INT(two_step(&t, 2, sel, ids, cnt2, 3, &got[0][0], &e), CERR_INVALID);
        CHECK_EQ_INT(two_step(&t, 2, sel, ids, cnt2, -1, &got[0][0], &e), CERR_INVALID);
        two_free(&t);
    }
    /* one sequence, 3 tokens, n_lead 2: the sequence is on both sides */
    CHECK_EQ_INT(two_new(&t, &e), 0);
    const int c3 = 3;
    CHECK_EQ_INT(two_step(&t, 1, &s0, &ia, &c3, 2, &got[0][0], &e), CERR_INVALID);
    CHECK(strstr(e.msg, "both sides") != NULL);
    two_free(&t);
}

int main(void)
{
    struct cerr e = {0};
    struct be_config bc = {.n_threads = 2};
    g_be = be_new("cpu", &bc, &e);
    if (!g_be) {
        fprintf(stderr, "backend: %s\n", e.msg);
        return 1;
    }
    if (model_load(&g_m, fixture_path("stories260K/stories260K.gguf"), g_be, &e)) {
        fprintf(stderr, "load: %s\n", e.msg);
        return 1;
    }
    json_error_t je;
    json_t *root = json_load_file(fixture_path("stories260K/expected_greedy.json"), 0, &je);
    if (!root) {
        fprintf(stderr, "expected_greedy.json: %s\n", je.text);
        return 1;
    }
    g_cases = json_object_get(root, "cases");
    RUN(test_load);
    RUN(test_greedy_all_prompts);
    RUN(test_greedy_chunked);
    RUN(test_chunking_bit_identical);
    RUN(test_bad_input);
    RUN(test_queued_steps);
    RUN(test_lead_groups);
    json_decref(root);
    model_free(g_m);
    be_free(g_be);
    return harness_done();
}
