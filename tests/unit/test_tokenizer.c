/* test_tokenizer.c — tokenizer parity with the fixture vectors (tests/data/fixtures).
 *
 * For every tokenizer in tests/data/fixtures: encode each expected_tokenize*.json string and
 * each llama.cpp .inp string, compare ids exactly, decode the ids and compare the text.
 * Reference vectors come from HF tokenizers / sentencepiece / transformers (see the
 * fixtures' SOURCES.md); nothing here is hard-coded beyond a few spot checks.
 */
#include <jansson.h>
#include <pthread.h>
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
    static const char *names[] = {"gpt-2", "llama-spm", "phi-3", "bert-bge"};
    for (size_t i = 0; i < 4; i++) {
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

/* Invalid UTF-8 is repaired exactly like Python's bytes.decode("utf-8", "replace") before
 * tokenizing (that string is what a Python caller hands the reference): each maximal
 * invalid subpart becomes one U+FFFD. The repaired strings below are Python's outputs. */
static void test_invalid_utf8(void)
{
    static const struct {
        const char *raw, *py;
    } v[] = {
        {"a\xe4\xb8" "b", "a\xef\xbf\xbd" "b"},
        {"\xf0\x9f\x98", "\xef\xbf\xbd"},
        {"\xed\xa0\x80x", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx"},
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe0\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe4\xb8\xe4\xb8\xad", "\xef\xbf\xbd\xe4\xb8\xad"},
    };
    const char *paths[] = {"qwen3-tokenizer/tokenizer.json.gz", "llama2-tokenizer/tokenizer.model",
                           "stories260K/stories260K.gguf"};
    for (size_t k = 0; k < 3; k++) {
        struct tok *t = load(fixture_path(paths[k]));
        if (!t)
            continue;
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
            int32_t *a = NULL, *b = NULL;
            int na = 0, nb = 0;
            struct cerr e;
            CHECK(tok_encode(t, v[i].raw, strlen(v[i].raw), 0, &a, &na, &e) == 0);
            CHECK(tok_encode(t, v[i].py, strlen(v[i].py), 0, &b, &nb, &e) == 0);
            CHECK_MSG(na == nb && a && b && memcmp(a, b, sizeof(int32_t) * (size_t)na) == 0,
                      "%s case %zu", paths[k], i);
            free(a);
            free(b);
        }
        tok_free(t);
    }
}

static void test_api_edges(void)
{
    struct tok *t = load(fixture_path("qwen3-tokenizer/tokenizer.json.gz"));
    if (!t)
        return;
    struct cerr e = {0};
    int32_t *ids = NULL;
    int n = -1;
    CHECK(tok_encode(t, "", 0, TOK_ADD_SPECIAL, &ids, &n, &e) == 0);
    CHECK_EQ_INT(n, 0);
    free(ids);
    CHECK(tok_encode(t, "a\0b", 3, 0, &ids, &n, &e) == 0); /* NUL is an ordinary byte */
    CHECK_EQ_INT(n, 3);
    free(ids);
    char *text = NULL;
    size_t len = 0;
    int32_t badid[] = {1, 999999};
    CHECK_EQ_INT(tok_decode(t, badid, 2, 0, &text, &len, &e), CERR_INVALID);
    CHECK(text == NULL);
    int32_t neg[] = {-1};
    CHECK_EQ_INT(tok_decode(t, neg, 1, 0, &text, &len, &e), CERR_INVALID);
    /* skip special */
    int32_t chat[] = {151644, 872, 198, 9707, 151645};
    CHECK(tok_decode(t, chat, 5, TOK_SKIP_SPECIAL, &text, &len, &e) == 0);
    CHECK_STR(text, "user\nHello");
    free(text);
    CHECK(tok_decode(t, chat, 5, 0, &text, &len, &e) == 0);
    CHECK_STR(text, "<|im_start|>user\nHello<|im_end|>");
    free(text);
    CHECK(tok_piece(t, -1) == NULL);
    CHECK(tok_piece(t, tok_vocab_size(t)) == NULL);
    CHECK_STR(tok_piece(t, 9707), "Hello");
    CHECK_EQ_INT(tok_find(t, "Hello"), 9707);
    CHECK_EQ_INT(tok_find(t, "no-such-piece-xyz"), -1);
    CHECK(tok_is_special(t, 151644));
    CHECK(!tok_is_special(t, 9707));
    /* streaming: byte-level piece of half a character is held back; tiny buffer is CERR_LIMIT
     * and consumes nothing */
    int32_t *emo = NULL;
    int ne = 0;
    CHECK(tok_encode(t, "\xf0\x9f\x98\x81!", 5, 0, &emo, &ne, &e) == 0);
    struct tok_stream *s = tok_stream_new(t, 0);
    char out[64];
    size_t ol = 0, total = 0;
    char acc[64];
    for (int i = 0; i < ne; i++) {
        int rc = tok_stream_push(s, emo[i], out, 1, &ol);
        if (rc == CERR_LIMIT)
            rc = tok_stream_push(s, emo[i], out, sizeof out, &ol);
        CHECK(rc == 0);
        CHECK(ol == 0 || ol >= 4 || out[0] == '!'); /* never a partial emoji */
        memcpy(acc + total, out, ol);
        total += ol;
    }
    CHECK(tok_stream_flush(s, out, sizeof out, &ol) == 0);
    memcpy(acc + total, out, ol);
    total += ol;
    CHECK(total == 5 && memcmp(acc, "\xf0\x9f\x98\x81!", 5) == 0);
    CHECK_EQ_INT(tok_stream_push(s, -5, out, sizeof out, &ol), CERR_INVALID);
    tok_stream_free(s);
    free(emo);
    tok_free(t);
    /* a bad file is an error, never a crash */
    struct tok *x = NULL;
    CHECK(tok_load(&x, fixture_path("nope/none.json"), &e) != 0);
    const char *uni = "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}";
    CHECK_EQ_INT(tok_load_json_mem(&x, uni, strlen(uni), NULL, 0, &e), CERR_UNSUPPORTED);
    CHECK(tok_load_spm_mem(&x, (const uint8_t *)"\x0a\xff\xff", 3, &e) != 0);
    CHECK(x == NULL);
}

/* SentencePiece leading space in streaming: the first piece's space is stripped, later ones
 * kept, exactly as the full decode. */
static void test_stream_spm(void)
{
    struct tok *t = load(fixture_path("llama2-tokenizer/tokenizer.model"));
    if (!t)
        return;
    int32_t ids[] = {1, 15043, 3186, 29871, 13, 29871, 30197, 232, 188, 163, 2};
    struct tok_stream *s = tok_stream_new(t, TOK_SKIP_SPECIAL);
    char out[64], acc[256];
    size_t ol, total = 0;
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        CHECK(tok_stream_push(s, ids[i], out, sizeof out, &ol) == 0);
        memcpy(acc + total, out, ol);
        total += ol;
    }
    CHECK(tok_stream_flush(s, out, sizeof out, &ol) == 0);
    memcpy(acc + total, out, ol);
    total += ol;
    acc[total] = 0;
    char *full = NULL;
    size_t fl = 0;
    struct cerr e;
    CHECK(tok_decode(t, ids, (int)(sizeof ids / sizeof ids[0]), TOK_SKIP_SPECIAL, &full, &fl, &e) == 0);
    CHECK_STR(acc, full);
    CHECK(full && strncmp(full, "Hello world", 11) == 0);
    free(full);
    /* primed with the prompt, the first generated piece keeps its leading space */
    int32_t prompt[] = {1, 15043};
    CHECK(tok_stream_prime(s, prompt, 2) == 0);
    CHECK(tok_stream_push(s, 3186, out, sizeof out, &ol) == 0);
    CHECK(ol == 6 && memcmp(out, " world", 6) == 0);
    CHECK(tok_stream_flush(s, out, sizeof out, &ol) == 0);
    CHECK_EQ_INT(ol, 0);
    CHECK(tok_stream_push(s, 3186, out, sizeof out, &ol) == 0); /* fresh after flush */
    CHECK(ol == 5 && memcmp(out, "world", 5) == 0);
    int32_t bad[] = {-3};
    CHECK_EQ_INT(tok_stream_prime(s, bad, 1), CERR_INVALID);
    tok_stream_free(s);
    tok_free(t);
}

/* One tokenizer, four threads encoding at once: same ids as a single thread. */
struct thr {
    struct tok *t;
    int ok;
};
static void *thr_main(void *arg)
{
    struct thr *a = arg;
    const char *txt = "Concurrency test: 我想在apple工作 😶‍🌫️ <|im_start|>user\n 12345 done.";
    int32_t *ref = NULL;
    int nref = 0;
    struct cerr e;
    a->ok = tok_encode(a->t, txt, strlen(txt), TOK_PARSE_SPECIAL, &ref, &nref, &e) == 0;
    for (int k = 0; k < 200 && a->ok; k++) {
        int32_t *ids = NULL;
        int n = 0;
        a->ok = tok_encode(a->t, txt, strlen(txt), TOK_PARSE_SPECIAL, &ids, &n, &e) == 0 &&
                n == nref && memcmp(ids, ref, sizeof(int32_t) * (size_t)n) == 0;
        free(ids);
    }
    free(ref);
    return NULL;
}

static void test_threads(void)
{
    struct tok *t = load(fixture_path("qwen3-tokenizer/tokenizer.json.gz"));
    if (!t)
        return;
    pthread_t th[4];
    struct thr a[4];
    for (int i = 0; i < 4; i++) {
        a[i].t = t;
        pthread_create(&th[i], NULL, thr_main, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(a[i].ok);
    }
    tok_free(t);
}

int main(void)
{
    RUN(test_invalid_utf8);
    RUN(test_api_edges);
    RUN(test_stream_spm);
    RUN(test_threads);
    RUN(test_qwen3);
    RUN(test_llama3);
    RUN(test_spm_model);
    RUN(test_gguf_vocabs);
    return harness_done();
}
