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
    CHECK_EQ_INT(queue_one(g, &id, &e), 0);   /* ids 1.. are computed on the backend */
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
    json_decref(root);
    model_free(g_m);
    be_free(g_be);
    return harness_done();
}
