/* test_model_parity.c — reference parity per architecture.
 *
 * tests/data/parity/<arch>/ holds a small random-weight model written by
 * scripts/gen_parity.py with Hugging Face transformers (float32): the HF directory
 * (config.json + model.safetensors) and the same weights as a GGUF (llama.cpp
 * conventions), plus golden.json with transformers' logits for every prompt position and
 * its 32-token greedy continuation. Both files must reproduce them:
 *   - logits: max |delta| <= 1e-4 x max(1, max |logit|)   (the stated tolerance)
 *   - greedy ids: identical for all 32 tokens
 * Variants cover GQA, tied and untied embeddings, qkv biases, q/k norm, llama3 rope
 * scaling, and gemma3's sliding window shorter than the sequence.
 */
#include "harness.h"

#include <jansson.h>

#include "backend/backend.h"
#include "engine/gen.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "util/base64.h"

static struct be *g_be;

static const char *g_archs[] = {"llama", "llama3rope", "qwen2", "qwen3", "gemma3"};

static int32_t *json_ids(json_t *arr, int *n)
{
    *n = (int)json_array_size(arr);
    int32_t *ids = malloc((size_t)(*n ? *n : 1) * sizeof *ids);
    for (int i = 0; i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return ids;
}

/* Decodes golden.json's base64 float32 logits; returns NULL on a malformed file. */
static float *golden_logits(json_t *g, int *rows, int *cols)
{
    json_t *pl = json_object_get(g, "prompt_logits");
    json_t *shape = json_object_get(pl, "shape");
    const char *data = json_string_value(json_object_get(pl, "data"));
    if (!data || json_array_size(shape) != 2)
        return NULL;
    *rows = (int)json_integer_value(json_array_get(shape, 0));
    *cols = (int)json_integer_value(json_array_get(shape, 1));
    size_t n = (size_t)*rows * *cols;
    float *f = malloc(n * 4 + 4);
    long got = base64_decode(data, strlen(data), (uint8_t *)f, n * 4 + 4);
    if (got != (long)(n * 4)) {
        free(f);
        return NULL;
    }
    return f; /* little-endian float32 = host order on x86-64 */
}

static void check_model(const char *arch, const char *file)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s", repo_path("tests/data/parity/"));
    strncat(dir, arch, sizeof dir - strlen(dir) - 1);
    snprintf(path, sizeof path, "%s/golden.json", dir);
    json_error_t je;
    json_t *g = json_load_file(path, 0, &je);
    CHECK_MSG(g != NULL, "%s: %s", path, je.text);
    if (!g)
        return;
    char mpath[700];
    if (file)
        snprintf(mpath, sizeof mpath, "%s/%s", dir, file);
    else
        snprintf(mpath, sizeof mpath, "%s", dir);
    struct cerr e = {0};
    struct model *m = NULL;
    int rc = model_load(&m, mpath, g_be, &e);
    CHECK_MSG(rc == 0, "%s: %s", mpath, e.msg);
    int np = 0, ng = 0, rows = 0, cols = 0;
    int32_t *prompt = json_ids(json_object_get(g, "prompt_ids"), &np);
    int32_t *want = json_ids(json_object_get(g, "greedy_ids"), &ng);
    float *ref = golden_logits(g, &rows, &cols);
    CHECK_MSG(ref && rows == np, "%s: malformed prompt_logits", path);
    struct gen *gn = NULL;
    if (rc == 0 && ref && rows == np) {
        CHECK_EQ_INT(cols, m->hp.n_vocab);
        CHECK_EQ_INT(gen_new(&gn, m, np + ng + 1, 64, DT_F32, &e), 0);
    }
    if (gn && cols == m->hp.n_vocab) {
        float *got = malloc((size_t)np * cols * 4);
        CHECK_EQ_INT(gen_feed(gn, prompt, np, got, &e), 0);
        double scale = 1, d = 0;
        for (size_t i = 0; i < (size_t)np * cols; i++) {
            if (fabs(ref[i]) > scale)
                scale = fabs(ref[i]);
            if (fabs(got[i] - ref[i]) > d)
                d = fabs(got[i] - ref[i]);
        }
        CHECK_MSG(d <= 1e-4 * scale, "%s (%s): max |dlogit| %.3g > %.3g", arch,
                  file ? file : "safetensors", d, 1e-4 * scale);
        printf("  %-10s %-12s max |dlogit| %.2e (logit scale %.2f)\n", arch,
               file ? file : "safetensors", d, scale);
        free(got);
        int bad = -1;
        for (int i = 0; i < ng; i++) {
            int32_t id = sampler_argmax(gn->logits, cols);
            if (id != want[i]) {
                bad = i;
                break;
            }
            if (i + 1 < ng && gen_feed(gn, &id, 1, NULL, &e)) {
                bad = i;
                break;
            }
        }
        CHECK_MSG(bad < 0, "%s (%s): greedy ids diverge at token %d", arch,
                  file ? file : "safetensors", bad);
    }
    gen_free(gn);
    model_free(m);
    free(ref);
    free(prompt);
    free(want);
    json_decref(g);
}

static void test_safetensors(void)
{
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        check_model(g_archs[i], NULL);
}

static void test_gguf(void)
{
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        check_model(g_archs[i], "model.gguf");
}

static void test_gguf_split(void)
{
    /* the qwen2 model as a 3-file gguf-split set (scripts/make_split_fixture.py); any split
     * names the set */
    check_model("qwen2", "../../split/qwen2-00002-of-00003.gguf");
}

static void test_gemma3_layer_types(void)
{
    /* the gemma3 fixture mixes sliding and global layers, with a window below the length */
    struct cerr e = {0};
    struct model *m = NULL;
    CHECK_EQ_INT(model_load(&m, repo_path("tests/data/parity/gemma3"), g_be, &e), 0);
    if (!m)
        return;
    int n_swa = 0;
    for (int i = 0; i < m->hp.n_layer; i++)
        n_swa += m->hp.layer_swa[i];
    CHECK(n_swa > 0 && n_swa < m->hp.n_layer);
    CHECK(m->hp.sliding_window > 0 && m->hp.sliding_window < 32);
    model_free(m);
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
    RUN(test_safetensors);
    RUN(test_gguf);
    RUN(test_gguf_split);
    RUN(test_gemma3_layer_types);
    be_free(g_be);
    return harness_done();
}
