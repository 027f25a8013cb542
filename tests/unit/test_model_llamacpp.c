/* test_model_llamacpp.c — real GGUF models against llama.cpp on the same file (opt-in).
 *
 * Runs when CINFER_TEST_LLAMACPP=1 and the models are in ./models (scripts/fetch_models.sh);
 * otherwise it exits 77 (ctest: skipped). For each reference in tests/data/llamacpp/:
 *   - our tokenizer gives llama.cpp's ids for the text (prefix of length n_tokens);
 *   - teacher-forced over those ids (>= 512 positions), at >= 99% of positions our argmax
 *     is llama.cpp's top-1 or a near-tie of it: one of llama.cpp's top-5 whose logit (in
 *     llama.cpp's scores) is within 0.25 of its top-1. Raw top-1 agreement is reported
 *     and must be >= 93%.
 *     Why not raw 99%: llama.cpp does not agree with itself that well. Its token-by-token
 *     run (n_batch 1) matches its one-batch run at only 97.3% (Qwen2.5-Coder 0.5B) and
 *     94.9% (Gemma 3 270M) of positions, and exact float32 math (transformers on the
 *     dequantized weights, scripts/hf_ref.py) matches it at 94.7-97.8%: int8
 *     re-quantization of activations turns last-bit differences into ~0.1-0.3 logit noise
 *     (scripts/llamacpp_selfagree.py; tests/data/llamacpp/README.md). Its own flips reach
 *     margins of 0.32, so positions with a margin >= 0.35 must agree at >= 99% as well.
 *   - our logits for llama.cpp's top-5 ids are printed as max |delta| (informative: the
 *     two engines quantize activations differently).
 * Models: MODELS_DIR (default ./models). CINFER_LLAMACPP_ONLY=name restricts to one file.
 */
#include "harness.h"

#include <jansson.h>

#include "backend/backend.h"
#include "engine/gen.h"
#include "engine/sampler.h"
#include "format/gguf.h"
#include "model/model.h"
#include "tokenizer/tok.h"
#include "util/fs.h"

static struct be *g_be;

static const char *g_refs[] = {"smollm2-135m-instruct-Q4_1", "gemma3-270m-Q4_K_M",
                               "qwen2.5-coder-0.5b-instruct-Q4_K_M",
                               "qwen2.5-coder-1.5b-instruct-Q4_K_M"};

static void check_ref(const char *name)
{
    const char *only = getenv("CINFER_LLAMACPP_ONLY");
    if (only && strcmp(only, name) != 0)
        return;
    char refp[512], modelp[512], textp[512];
    const char *mdir = getenv("MODELS_DIR") ? getenv("MODELS_DIR") : repo_path("models");
    snprintf(refp, sizeof refp, "%s", repo_path("tests/data/llamacpp/"));
    strncat(refp, name, sizeof refp - strlen(refp) - 8);
    strcat(refp, ".json");
    snprintf(modelp, sizeof modelp, "%s/%s.gguf", mdir, name);
    if (!fs_exists(modelp)) {
        printf("  %s: model file missing (%s); run scripts/fetch_models.sh\n", name, modelp);
        CHECK_MSG(0, "%s is missing", modelp);
        return;
    }
    json_error_t je;
    json_t *ref = json_load_file(refp, 0, &je);
    CHECK_MSG(ref != NULL, "%s: %s", refp, je.text);
    if (!ref)
        return;
    snprintf(textp, sizeof textp, "%s", repo_path("tests/data/text/"));
    strncat(textp, json_string_value(json_object_get(ref, "text_file")),
            sizeof textp - strlen(textp) - 1);
    struct cerr e = {0};
    struct model *m = NULL;
    struct tok *tk = NULL;
    struct gen *g = NULL;
    int32_t *mine = NULL;
    float *logits = NULL;
    char *text = NULL;
    size_t tlen = 0;
    int n = (int)json_integer_value(json_object_get(ref, "n_tokens"));
    json_t *ids_j = json_object_get(ref, "ids"), *top1 = json_object_get(ref, "top1"),
           *top5 = json_object_get(ref, "top5");
    CHECK(n >= 512 && (int)json_array_size(ids_j) == n && (int)json_array_size(top1) == n);
    if (model_load(&m, modelp, g_be, &e) || tok_load(&tk, modelp, &e) ||
        fs_read_all(textp, &text, &tlen, &e)) {
        CHECK_MSG(0, "%s: %s", name, e.msg);
        goto out;
    }
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(ids_j, (size_t)i));
    /* tokenizer: the same ids for the text (llama.cpp adds BOS iff add_bos) */
    int nm = 0;
    CHECK_EQ_INT(tok_encode(tk, text, tlen, TOK_ADD_SPECIAL, &mine, &nm, &e), 0);
    int tok_same = nm >= n;
    for (int i = 0; tok_same && i < n; i++)
        tok_same = mine[i] == ids[i];
    CHECK_MSG(tok_same, "%s: our tokenization of %s differs from llama.cpp's", name, textp);
    /* teacher-forced agreement */
    int V = m->hp.n_vocab;
    logits = malloc((size_t)n * V * sizeof(float));
    if (!logits || gen_new(&g, m, n, 256, DT_F32, &e) || gen_feed(g, ids, n, logits, &e)) {
        CHECK_MSG(0, "%s: %s", name, e.msg);
        free(ids);
        goto out;
    }
    int agree = 0, n_clear = 0, agree_clear = 0, agree_tie = 0;
    double dmax = 0;
    json_t *gaps = json_object_get(ref, "top1_gap");
    FILE *dump = getenv("CINFER_LLAMACPP_DUMP") ? fopen(getenv("CINFER_LLAMACPP_DUMP"), "w") : NULL;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * V;
        if (dump) { /* position, our argmax and its logit, our logits of llama.cpp's top-5 */
            int32_t a = sampler_argmax(row, V);
            fprintf(dump, "%d %d %.4f", i, a, row[a]);
            json_t *t5d = json_array_get(top5, (size_t)i);
            for (size_t k = 0; k < json_array_size(t5d); k++) {
                int id = (int)json_integer_value(json_array_get(json_array_get(t5d, k), 0));
                fprintf(dump, " %.4f", id >= 0 && id < V ? row[id] : 0.0f);
            }
            fputc('\n', dump);
        }
        int same =
            sampler_argmax(row, V) == (int32_t)json_integer_value(json_array_get(top1, (size_t)i));
        agree += same;
        json_t *t5r = json_array_get(top5, (size_t)i);
        double top_logit = json_number_value(json_array_get(json_array_get(t5r, 0), 1));
        int32_t mine_top = sampler_argmax(row, V);
        int tie = same;
        for (size_t k = 1; !tie && k < json_array_size(t5r); k++) {
            json_t *pair = json_array_get(t5r, k);
            tie = json_integer_value(json_array_get(pair, 0)) == mine_top &&
                  json_number_value(json_array_get(pair, 1)) >= top_logit - 0.25;
        }
        agree_tie += tie;
        if (json_number_value(json_array_get(gaps, (size_t)i)) >= 0.35) {
            n_clear++;
            agree_clear += same;
        }
        json_t *t5 = json_array_get(top5, (size_t)i);
        for (size_t k = 0; k < json_array_size(t5); k++) {
            json_t *pair = json_array_get(t5, k);
            int id = (int)json_integer_value(json_array_get(pair, 0));
            double d = fabs(row[id] - json_number_value(json_array_get(pair, 1)));
            if (id >= 0 && id < V && d > dmax)
                dmax = d;
        }
    }
    if (dump)
        fclose(dump);
    double frac = (double)agree / n, frac_clear = n_clear ? (double)agree_clear / n_clear : 0;
    double frac_tie = (double)agree_tie / n;
    printf("  %-36s top-1 or near-tie %.2f%%, raw top-1 %d/%d = %.2f%%, margin >= 0.35 %d/%d = "
           "%.2f%%, max |dlogit| on llama.cpp's top-5 %.3f, tokenizer %s\n",
           name, 100 * frac_tie, agree, n, 100 * frac, agree_clear, n_clear, 100 * frac_clear,
           dmax, tok_same ? "identical" : "DIFFERENT");
    CHECK_MSG(frac_tie >= 0.99, "%s: top-1 (or near-tie) agreement %.4f < 0.99", name, frac_tie);
    CHECK_MSG(frac_clear >= 0.99, "%s: top-1 agreement %.4f < 0.99 where llama.cpp's margin "
              "is >= 0.35", name, frac_clear);
    CHECK_MSG(frac >= 0.93, "%s: top-1 agreement %.4f < 0.93 over all positions", name, frac);
    free(ids);
out:
    free(text);
    free(mine);
    free(logits);
    gen_free(g);
    tok_free(tk);
    model_free(m);
    json_decref(ref);
}

static void test_real_models(void)
{
    for (size_t i = 0; i < sizeof g_refs / sizeof g_refs[0]; i++)
        check_ref(g_refs[i]);
}

int main(void)
{
    if (!getenv("CINFER_TEST_LLAMACPP") || strcmp(getenv("CINFER_TEST_LLAMACPP"), "1") != 0) {
        return harness_skip("test_model_llamacpp is opt-in: set CINFER_TEST_LLAMACPP=1 (needs ./models)");
    }
    struct cerr e = {0};
    struct be_config bc = {0};
    g_be = be_new("cpu", &bc, &e);
    if (!g_be) {
        fprintf(stderr, "backend: %s\n", e.msg);
        return 1;
    }
    RUN(test_real_models);
    be_free(g_be);
    return harness_done();
}
