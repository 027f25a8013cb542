/* test_genhist.c — exact generated history (api/genhist.h): a remembered generation's text
 * in a prompt is encoded as its sampled ids (even a non-canonical spelling), the rest as
 * tok_encode would; short texts, stop-ended and special-token generations are not kept;
 * the store stays within its caps; a tokenizer whose segments would not spell the text
 * falls back to the plain encoding. */
#include "harness.h"

#include "api/genhist.h"

static struct tok *g_tk;  /* byte-level BPE (tiny_bpe_json) */
static struct tok *g_spm; /* SentencePiece with a dummy prefix (stories260K) */

/* A tiny byte-level BPE tokenizer.json (GPT-2's byte-to-unicode map, 256 byte tokens and
 * three merges: "Ġt", "he", "Ġthe"), built here so the test needs no fixture file. */
static char *tiny_bpe_json(void)
{
    int cs[256], n = 0;
    for (int b = 0; b < 256; b++)
        cs[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174) ? b : 256 + n++;
    size_t cap = 16384, len = 0;
    char *j = malloc(cap);
    len += (size_t)snprintf(j + len, cap - len,
                            "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,"
                            "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                            "\"trim_offsets\":true,\"use_regex\":true},\"post_processor\":null,"
                            "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                            "\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        int c = cs[b];
        char u[4];
        int k = 0;
        if (c < 0x80)
            u[k++] = (char)c;
        else {
            u[k++] = (char)(0xc0 | (c >> 6));
            u[k++] = (char)(0x80 | (c & 0x3f));
        }
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : NULL;
        len += (size_t)snprintf(j + len, cap - len, "%s\"%s%.*s\":%d", b ? "," : "",
                                esc ? esc : "", esc ? 0 : k, u, b);
    }
    len += (size_t)snprintf(j + len, cap - len,
                            ",\"\u0120t\":256,\"he\":257,\"\u0120the\":258},"
                            "\"merges\":[\"\u0120 t\",\"h e\",\"\u0120t he\"]}}");
    return j;
}

static int32_t *enc(const char *s, int *n)
{
    int32_t *ids = NULL;
    CHECK(tok_encode(g_tk, s, strlen(s), 0, &ids, n, NULL) == 0);
    return ids;
}

static void test_splice(void)
{
    genhist_clear();
    const char *gen = " the little dog ran to the park.";
    /* a non-canonical spelling: every byte its own token, as a model might sample it */
    int32_t odd[64];
    int n_odd = 0;
    for (const char *c = gen; *c; c++) {
        int k = 0;
        int32_t *one = NULL;
        CHECK(tok_encode(g_tk, c, 1, 0, &one, &k, NULL) == 0);
        for (int i = 0; i < k && n_odd < 64; i++)
            odd[n_odd++] = one[i];
        free(one);
    }
    int n_can = 0;
    int32_t *can = enc(gen, &n_can);
    CHECK(n_odd > n_can); /* it really differs from the canonical encoding */
    CHECK(genhist_put(gen, strlen(gen), odd, n_odd, NULL, 0) == 0);

    const char *pre = "User: tell me\nBot:", *post = "\nUser: more";
    char prompt[256];
    snprintf(prompt, sizeof prompt, "%s%s%s", pre, gen, post);
    int32_t *ids = NULL;
    int n = 0, rep = 0;
    CHECK(genhist_encode(g_tk, prompt, strlen(prompt), 0, &ids, &n, &rep, NULL) == 0);
    int n_pre = 0, n_post = 0;
    int32_t *a = enc(pre, &n_pre), *b = enc(post, &n_post);
    CHECK_EQ_INT(rep, n_odd);
    CHECK_EQ_INT(n, n_pre + n_odd + n_post);
    CHECK(n == n_pre + n_odd + n_post && !memcmp(ids, a, (size_t)n_pre * 4) &&
          !memcmp(ids + n_pre, odd, (size_t)n_odd * 4) &&
          !memcmp(ids + n_pre + n_odd, b, (size_t)n_post * 4));
    /* decoding gives the prompt back */
    char *txt = NULL;
    size_t tl = 0;
    CHECK(tok_decode(g_tk, ids, n, 0, &txt, &tl, NULL) == 0);
    CHECK(txt && strstr(txt, gen) != NULL);
    free(txt);
    free(ids);
    free(a);
    free(b);
    free(can);

    /* no remembered text: exactly tok_encode */
    genhist_clear();
    int n1 = 0, n2 = 0;
    int32_t *x = enc(prompt, &n1), *y = NULL;
    CHECK(genhist_encode(g_tk, prompt, strlen(prompt), 0, &y, &n2, &rep, NULL) == 0);
    CHECK(n1 == n2 && !memcmp(x, y, (size_t)n1 * 4) && rep == 0);
    free(x);
    free(y);
}

/* An anchored span is spliced only right after the prompt end it was generated after: the
 * same words inside a system prompt or a user message keep their plain encoding (a
 * generation cut short to a piece of a tool list was spliced into the tool list itself). */
static void test_anchor(void)
{
    genhist_clear();
    const char *gen = " the little dog ran to the park.";
    int32_t odd[64];
    int n_odd = 0;
    for (const char *c = gen; *c; c++) {
        int k = 0;
        int32_t *one = NULL;
        CHECK(tok_encode(g_tk, c, 1, 0, &one, &k, NULL) == 0);
        for (int i = 0; i < k && n_odd < 64; i++)
            odd[n_odd++] = one[i];
        free(one);
    }
    CHECK(genhist_put(gen, strlen(gen), odd, n_odd, "\nBot:", 5) == 0);
    /* after its anchor: spliced */
    const char *p1 = "User: tell me\nBot: the little dog ran to the park.\nUser: more";
    int32_t *ids = NULL;
    int n = 0, rep = 0;
    CHECK(genhist_encode(g_tk, p1, strlen(p1), 0, &ids, &n, &rep, NULL) == 0);
    CHECK_EQ_INT(rep, n_odd);
    free(ids);
    /* the same words after other text (a system prompt, a user message): plain */
    const char *p2 = "System: the little dog ran to the park.\nBot: hi";
    int n1 = 0;
    int32_t *plain = enc(p2, &n1);
    CHECK(genhist_encode(g_tk, p2, strlen(p2), 0, &ids, &n, &rep, NULL) == 0);
    CHECK(rep == 0 && n == n1 && !memcmp(ids, plain, (size_t)n * 4));
    free(ids);
    free(plain);
    /* both in one prompt: only the anchored occurrence */
    const char *p3 = "System: the little dog ran to the park.\nBot: the little dog ran to the park.";
    CHECK(genhist_encode(g_tk, p3, strlen(p3), 0, &ids, &n, &rep, NULL) == 0);
    CHECK_EQ_INT(rep, n_odd);
    free(ids);
    genhist_clear();
}

/* SentencePiece adds a dummy prefix to each segment: a splice would not spell the text, so
 * the plain encoding is used (never a wrong prompt). */
static void test_spm_falls_back(void)
{
    genhist_clear();
    const char *gen = " the little dog ran to the park.";
    int32_t odd[64];
    int n_odd = 0;
    for (const char *c = gen; *c && n_odd < 60; c++) {
        int k = 0;
        int32_t *one = NULL;
        CHECK(tok_encode(g_spm, c, 1, 0, &one, &k, NULL) == 0);
        for (int i = 0; i < k && n_odd < 64; i++)
            odd[n_odd++] = one[i];
        free(one);
    }
    CHECK(genhist_put(gen, strlen(gen), odd, n_odd, NULL, 0) == 0);
    const char *prompt = "User: tell me\nBot: the little dog ran to the park.\nUser: more";
    int32_t *x = NULL, *y = NULL;
    int n1 = 0, n2 = 0, rep = -1;
    CHECK(tok_encode(g_spm, prompt, strlen(prompt), 0, &x, &n1, NULL) == 0);
    CHECK(genhist_encode(g_spm, prompt, strlen(prompt), 0, &y, &n2, &rep, NULL) == 0);
    CHECK(n1 == n2 && !memcmp(x, y, (size_t)n1 * 4) && rep == 0);
    free(x);
    free(y);
    genhist_clear();
}

static void test_acc_rules(void)
{
    genhist_clear();
    size_t ents, bytes;
    /* too short */
    int32_t one = 5;
    CHECK(genhist_put("short", 5, &one, 1, NULL, 0) == -1);
    /* kept at EOS with the EOS id dropped */
    struct genhist_acc a = {0};
    genhist_acc_token(&a, 100, " the little dog", 15);
    genhist_acc_token(&a, 101, " ran home.", 10);
    genhist_acc_token(&a, 2, "", 0);
    genhist_acc_end(&a, g_spm, "", 0, 1, 1);
    genhist_stats(&ents, &bytes);
    CHECK_EQ_INT(ents, 1);
    CHECK_EQ_INT(bytes, 25 + 2 * 4);
    /* a stop string ended it: not kept */
    genhist_acc_token(&a, 100, " and then the cat sat", 21);
    genhist_acc_end(&a, g_spm, "", 0, 0, 0);
    genhist_stats(&ents, &bytes);
    CHECK_EQ_INT(ents, 1);
    /* a special id inside: not kept */
    genhist_acc_token(&a, 100, " and then the cat sat", 21);
    genhist_acc_token(&a, 1, "", 0); /* BOS */
    genhist_acc_token(&a, 101, " down.", 6);
    genhist_acc_end(&a, g_spm, "", 0, 1, 0);
    genhist_stats(&ents, &bytes);
    CHECK_EQ_INT(ents, 1);
    /* the caps: entries */
    for (int i = 0; i < GENHIST_MAX_ENTRIES + 10; i++) {
        char t[64];
        snprintf(t, sizeof t, "generation number %d of many", i);
        genhist_put(t, strlen(t), &one, 1, NULL, 0);
    }
    genhist_stats(&ents, &bytes);
    CHECK_EQ_INT(ents, GENHIST_MAX_ENTRIES);
    genhist_clear();
    genhist_stats(&ents, &bytes);
    CHECK(ents == 0 && bytes == 0);
}

int main(void)
{
    const char *fx = getenv("CINFER_FIXTURES");
    char path[1024];
    snprintf(path, sizeof path, "%s/stories260K/stories260K.gguf", fx ? fx : "../shared/fixtures");
    struct cerr e = {0};
    char *js = tiny_bpe_json();
    int bad = tok_load(&g_spm, path, &e) || tok_load_json_mem(&g_tk, js, strlen(js), NULL, 0, &e);
    free(js);
    if (bad) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return 1;
    }
    RUN(test_splice);
    RUN(test_anchor);
    RUN(test_spm_falls_back);
    RUN(test_acc_rules);
    tok_free(g_tk);
    tok_free(g_spm);
    return harness_done();
}
