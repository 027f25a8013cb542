/* test_tokenizer.c — tokenizer parity with the shared fixture vectors.
 *
 * For every tokenizer in ../shared/fixtures: encode each expected_tokenize*.json string and
 * each llama.cpp .inp string, compare ids exactly, decode the ids and compare the text.
 * Reference vectors come from HF tokenizers / sentencepiece / transformers (see the
 * fixtures' SOURCES.md); nothing here is hard-coded beyond a few spot checks.
 */
#include <jansson.h>
#include <stdint.h>

#include "harness.h"
#include "format/gguf.h"
#include "tokenizer/tok.h"
#include "util/fs.h"

static struct tok *load(const char *path)
{
    struct tok *t = NULL;
    struct cerr e = {0};
    int rc = tok_load(&t, path, &e);
    CHECK_MSG(rc == 0, "load %s: %s", path, e.msg);
    return t;
}

static int ids_equal(const int32_t *a, int na, json_t *b)
{
    if (!json_is_array(b) || (size_t)na != json_array_size(b))
        return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != (int32_t)json_integer_value(json_array_get(b, (size_t)i)))
            return 0;
    return 1;
}

static void print_ids(const char *what, const int32_t *a, int n)
{
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", a[i]);
    fprintf(stderr, "\n");
}

/* Checks one string: ids (with flags) and optionally the decoded text. Returns 1 if ok. */
static int check_one(struct tok *t, const char *text, size_t len, int flags, json_t *want,
                     const char *want_text)
{
    int32_t *ids = NULL;
    int n = 0;
    struct cerr e = {0};
    int ok = 1;
    int rc = tok_encode(t, text, len, flags, &ids, &n, &e);
    if (rc) {
        fprintf(stderr, "encode failed: %s\n", e.msg);
        return 0;
    }
    if (want && !ids_equal(ids, n, want)) {
        fprintf(stderr, "ids differ for \"%.60s\"\n", text);
        print_ids("got ", ids, n);
        char *s = json_dumps(want, JSON_COMPACT);
        fprintf(stderr, "  want: %.300s\n", s);
        free(s);
        ok = 0;
    }
    if (want_text) {
        char *out = NULL;
        size_t ol = 0;
        rc = tok_decode(t, ids, n, 0, &out, &ol, &e);
        if (rc || strcmp(out, want_text) != 0) {
            fprintf(stderr, "decode differs for \"%.60s\": got \"%.60s\"\n", want_text,
                    out ? out : e.msg);
            ok = 0;
        }
        /* the streaming detokenizer must produce the same text */
        struct tok_stream *st = tok_stream_new(t, 0);
        char buf[4096], *acc = calloc(1, ol + 8192);
        size_t al = 0, bl = 0;
        for (int i = 0; i < n && acc; i++) {
            if (tok_stream_push(st, ids[i], buf, sizeof buf, &bl) == 0 && al + bl < ol + 8000) {
                memcpy(acc + al, buf, bl);
                al += bl;
            }
        }
        if (acc && tok_stream_flush(st, buf, sizeof buf, &bl) == 0 && al + bl < ol + 8000) {
            memcpy(acc + al, buf, bl);
            al += bl;
        }
        if (!acc || !out || al != ol || memcmp(acc, out, ol) != 0) {
            fprintf(stderr, "stream decode differs for \"%.60s\": \"%.60s\"\n", want_text,
                    acc ? acc : "");
            ok = 0;
        }
        free(acc);
        tok_stream_free(st);
        free(out);
    }
    free(ids);
    return ok;
}

/* expected_tokenize.json: {"cases": [{"text", "ids", "decoded", "ids_add_special_tokens"}],
 * "chat_prompts": [{"text", "ids"}]} */
static void check_expected(struct tok *t, const char *path, int with_bos_key)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK_MSG(root != NULL, "%s: %s", path, je.text);
    if (!root || !t)
        return;
    json_t *cases = json_object_get(root, "cases"), *c;
    size_t i;
    int bad = 0, total = 0;
    json_array_foreach(cases, i, c)
    {
        json_t *jt = json_object_get(c, "text");
        if (!jt)
            jt = json_object_get(c, "prompt");
        const char *text = json_string_value(jt);
        size_t len = json_string_length(jt);
        json_t *ids = json_object_get(c, "ids");
        const char *dec = json_string_value(json_object_get(c, "decoded"));
        total++;
        if (ids && !check_one(t, text, len, 0, ids, dec))
            bad++;
        json_t *ws = json_object_get(c, with_bos_key ? "prompt_ids_with_bos" : "ids_add_special_tokens");
        if (ws && !check_one(t, text, len, TOK_ADD_SPECIAL, ws, NULL))
            bad++;
    }
    json_t *chats = json_object_get(root, "chat_prompts");
    json_array_foreach(chats, i, c)
    {
        json_t *jt = json_object_get(c, "text");
        total++;
        if (!check_one(t, json_string_value(jt), json_string_length(jt), TOK_PARSE_SPECIAL,
                       json_object_get(c, "ids"), json_string_value(jt)))
            bad++;
    }
    CHECK_MSG(bad == 0, "%s: %d of %d cases differ", path, bad, total);
    CHECK(total > 0);
    json_decref(root);
}

/* llama.cpp vectors: .inp strings joined by "\n__ggml_vocab_test__\n", .out lines of ids. */
static void check_inp_out(struct tok *t, const char *inp_path, const char *out_path)
{
    char *inp = NULL, *outs = NULL;
    size_t il = 0, ol = 0;
    struct cerr e = {0};
    CHECK_MSG(fs_read_all(inp_path, &inp, &il, &e) == 0, "%s", e.msg);
    CHECK_MSG(fs_read_all(out_path, &outs, &ol, &e) == 0, "%s", e.msg);
    if (!inp || !outs || !t) {
        free(inp);
        free(outs);
        return;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = inp, *line = outs;
    int bad = 0, total = 0;
    for (;;) {
        char *q = strstr(p, sep);
        if (!q)
            break;
        *q = 0;
        char *nl = strchr(line, '\n');
        if (!nl)
            break;
        *nl = 0;
        json_t *want = json_array();
        for (char *tok = strtok(line, " "); tok; tok = strtok(NULL, " "))
            json_array_append_new(want, json_integer(atoi(tok)));
        total++;
        if (!check_one(t, p, strlen(p), 0, want, NULL))
            bad++;
        json_decref(want);
        p = q + sizeof sep - 1;
        line = nl + 1;
    }
    CHECK_MSG(bad == 0, "%s: %d of %d strings differ", inp_path, bad, total);
    CHECK_MSG(total >= 40, "%s: only %d strings", inp_path, total);
    free(inp);
    free(outs);
}

static void test_qwen3(void)
{
    struct tok *t = load(fixture_path("qwen3-tokenizer/tokenizer.json.gz"));
    if (!t)
        return;
    check_expected(t, fixture_path("qwen3-tokenizer/expected_tokenize.json"), 0);
    check_inp_out(t, fixture_path("llamacpp-vocab/ggml-vocab-qwen2.gguf.inp"),
                  fixture_path("llamacpp-vocab/ggml-vocab-qwen2.gguf.out"));
    CHECK_EQ_INT(tok_find(t, "<|im_end|>"), 151645);
    CHECK(tok_is_eog(t, 151645));
    CHECK(tok_is_eog(t, 151643));
    CHECK(!tok_is_eog(t, 872));
    CHECK_EQ_INT(tok_eos(t), 151645);
    tok_free(t);
}

static void test_llama3(void)
{
    struct tok *t = load(fixture_path("llama3-tokenizer/tokenizer.json.gz"));
    if (!t)
        return;
    check_expected(t, fixture_path("llama3-tokenizer/expected_tokenize.json"), 0);
    check_inp_out(t, fixture_path("llamacpp-vocab/ggml-vocab-llama-bpe.gguf.inp"),
                  fixture_path("llamacpp-vocab/ggml-vocab-llama-bpe.gguf.out"));
    CHECK_EQ_INT(tok_bos(t), 128000);
    CHECK(tok_is_eog(t, tok_find(t, "<|eot_id|>")));
    tok_free(t);
}

static void test_spm_model(void)
{
    struct tok *t = load(fixture_path("llama2-tokenizer/tokenizer.model"));
    if (t) {
        check_expected(t, fixture_path("llama2-tokenizer/expected_tokenize.json"), 0);
        check_inp_out(t, fixture_path("llamacpp-vocab/ggml-vocab-llama-spm.gguf.inp"),
                      fixture_path("llamacpp-vocab/ggml-vocab-llama-spm.gguf.out"));
        CHECK_EQ_INT(tok_bos(t), 1);
        CHECK_EQ_INT(tok_eos(t), 2);
        tok_free(t);
    }
    t = load(fixture_path("mistral-7b-tokenizer/tokenizer.model"));
    if (t) {
        check_expected(t, fixture_path("mistral-7b-tokenizer/expected_tokenize.json"), 0);
        tok_free(t);
    }
}

static void test_gguf_vocabs(void)
{
    static const char *names[] = {"gpt-2", "llama-spm", "phi-3"};
    for (size_t i = 0; i < 3; i++) {
        char p[200], inp[256], out[256];
        snprintf(p, sizeof p, "llamacpp-vocab/ggml-vocab-%s.gguf", names[i]);
        snprintf(inp, sizeof inp, "%s.inp", p);
        snprintf(out, sizeof out, "%s.out", p);
        struct tok *t = load(fixture_path(p));
        if (!t)
            continue;
        check_inp_out(t, fixture_path(inp), fixture_path(out));
        tok_free(t);
    }
    struct tok *t = load(fixture_path("stories260K/stories260K.gguf"));
    if (t) {
        check_expected(t, fixture_path("stories260K/expected_tokenize_tok512.json"), 1);
        CHECK_EQ_INT(tok_vocab_size(t), 512);
        tok_free(t);
    }
}

int main(void)
{
    RUN(test_qwen3);
    RUN(test_llama3);
    RUN(test_spm_model);
    RUN(test_gguf_vocabs);
    return harness_done();
}
