/* fuzz_emb_req.c — libFuzzer target for the embeddings request parser and response writer.
 *
 * The input is a request body. emb_parse validates it; an accepted request is tokenized
 * with a small WordPiece tokenizer (BertNormalizer, [CLS]/[SEP] template; vocabulary of 10
 * ids, so token arrays hit the range check) under a 16-token limit, and a response is
 * written for synthetic vectors in both encodings, cut to the requested dimensions when
 * they fit. Errors are expected; crashes, leaks and undefined behaviour are bugs.
 * Seeds: fuzz/corpus/fuzz_emb_req/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/embeddings/embeddings.h"
#include "tokenizer/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char g_tok_json[] =
    "{\"version\":\"1.0\",\"added_tokens\":["
    "{\"id\":0,\"content\":\"[PAD]\",\"special\":true,\"single_word\":false,\"lstrip\":false,"
    "\"rstrip\":false,\"normalized\":false},"
    "{\"id\":1,\"content\":\"[UNK]\",\"special\":true,\"single_word\":false,\"lstrip\":false,"
    "\"rstrip\":false,\"normalized\":false},"
    "{\"id\":2,\"content\":\"[CLS]\",\"special\":true,\"single_word\":false,\"lstrip\":false,"
    "\"rstrip\":false,\"normalized\":false},"
    "{\"id\":3,\"content\":\"[SEP]\",\"special\":true,\"single_word\":false,\"lstrip\":false,"
    "\"rstrip\":false,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,"
    "\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true},"
    "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\","
    "\"single\":[{\"SpecialToken\":{\"id\":\"[CLS]\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}}],"
    "\"pair\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],"
    "\"special_tokens\":{\"[CLS]\":{\"id\":\"[CLS]\",\"ids\":[2],\"tokens\":[\"[CLS]\"]},"
    "\"[SEP]\":{\"id\":\"[SEP]\",\"ids\":[3],\"tokens\":[\"[SEP]\"]}}},"
    "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
    "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\","
    "\"max_input_chars_per_word\":100,\"vocab\":{\"[PAD]\":0,\"[UNK]\":1,\"[CLS]\":2,\"[SEP]\":3,"
    "\"a\":4,\"b\":5,\"##a\":6,\"##b\":7,\"hello\":8,\"world\":9}}}";

static struct tok *g_tk;
static struct emb_specials g_sp;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_tk) {
        if (tok_load_json_mem(&g_tk, g_tok_json, sizeof g_tok_json - 1, NULL, 0, NULL) ||
            emb_specials(g_tk, &g_sp))
            abort(); /* the target's own tokenizer must load */
    }
    struct emb_req r;
    struct api_error err;
    if (emb_parse(&r, (const char *)data, size, &err) == 0 &&
        emb_tokenize(&r, g_tk, &g_sp, 10, 16, &err) == 0) {
        enum { D = 8 };
        float *v = malloc((size_t)r.n_in * D * sizeof *v);
        for (int i = 0; v && i < r.n_in * D; i++)
            v[i] = (float)(i % 7) * 0.25f - 0.5f;
        int dims = r.dimensions && r.dimensions < D ? r.dimensions : D;
        if (v) {
            free(emb_response(&r, v, D, dims, dims < D, "fuzz"));
            r.base64 = !r.base64;
            free(emb_response(&r, v, D, dims, dims < D, "fuzz\"\n"));
        }
        free(v);
    }
    emb_req_deinit(&r);
    return 0;
}
