/* test_emb_req.c — the embeddings API module (src/api/embeddings): request parsing and its
 * refusals (status, param, message), tokenization with the tiny BERT's WordPiece tokenizer
 * (special tokens found by probing, token arrays wrapped like text), the response writer
 * (shortest float text that reads back as the same float32, base64 of the LE bytes, dims cut
 * + renormalization, usage).
 */
#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "api/embeddings/embeddings.h"
#include "tokenizer/tok.h"
#include "util/base64.h"

static struct tok *g_tk;

static int parse(const char *body, struct emb_req *r, struct api_error *err)
{
    memset(err, 0, sizeof *err);
    return emb_parse(r, body, strlen(body), err);
}

static void refused(const char *body, const char *param, const char *msg_part)
{
    struct emb_req r;
    struct api_error err;
    int rc = parse(body, &r, &err);
    CHECK_MSG(rc == -1 && err.status == 400, "%s: accepted", body);
    CHECK_MSG((param == NULL && err.param == NULL) ||
                  (param && err.param && !strcmp(err.param, param)),
              "%s: param %s", body, err.param ? err.param : "(null)");
    CHECK_MSG(strstr(err.message, msg_part) != NULL, "%s: message '%s'", body, err.message);
    emb_req_deinit(&r);
}

static void test_parse_refusals(void)
{
    refused("{", NULL, "invalid JSON body");
    refused("[1]", NULL, "invalid JSON body");
    refused("{}", "input", "input is required");
    refused("{\"input\":\"\"}", "input", "empty string");
    refused("{\"input\":[]}", "input", "empty array");
    refused("{\"input\":[\"a\",\"\"]}", "input", "input[1] must not be an empty string");
    refused("{\"input\":[\"a\",1]}", "input", "input[1] must be a string");
    refused("{\"input\":[[1],\"a\"]}", "input", "input[1] must be an array of token ids");
    refused("{\"input\":[[1],[]]}", "input", "input[1] must not be an empty array");
    refused("{\"input\":[[1,\"x\"]]}", "input", "must be a string, an array of strings");
    refused("{\"input\":3}", "input", "must be a string, an array of strings");
    refused("{\"input\":\"a\",\"encoding_format\":\"int8\"}", "encoding_format", "'float' or 'base64'");
    refused("{\"input\":\"a\",\"dimensions\":0}", "dimensions", "at least 1");
    refused("{\"input\":\"a\",\"dimensions\":1.5}", "dimensions", "integer");
    refused("{\"input\":\"a\",\"model\":3}", "model", "model must be a string");
    refused("{\"input\":\"a\",\"user\":[]}", "user", "user must be a string");
    /* 2049 inputs */
    char *big = malloc(2049 * 4 + 32);
    strcpy(big, "{\"input\":[");
    for (int i = 0; i < 2049; i++)
        strcat(big, i ? ",\"a\"" : "\"a\"");
    strcat(big, "]}");
    refused(big, "input", "at most 2048");
    free(big);
}

static void test_parse_shapes_and_tokenize(void)
{
    struct emb_specials sp;
    CHECK(emb_specials(g_tk, &sp) == 0);
    CHECK(sp.n_pre == 1 && sp.n_suf == 1);
    CHECK_EQ_INT(sp.pre[0], tok_find(g_tk, "[CLS]"));
    CHECK_EQ_INT(sp.suf[0], tok_find(g_tk, "[SEP]"));
    struct emb_req r;
    struct api_error err;
    /* a string */
    CHECK(parse("{\"input\":\"hello\",\"model\":\"m\",\"encoding_format\":\"base64\","
                "\"dimensions\":8,\"user\":\"u\"}", &r, &err) == 0);
    CHECK(r.n_in == 1 && r.base64 && r.dimensions == 8 && !strcmp(r.model, "m"));
    CHECK(emb_tokenize(&r, g_tk, &sp, 100, 64, &err) == 0);
    CHECK_EQ_INT(r.lens[0], 3);
    CHECK_EQ_INT((int)r.n_tokens, 3);
    int32_t hello = r.ids[0][1];
    emb_req_deinit(&r);
    /* token ids: wrapped in [CLS] ... [SEP] like text */
    char b[128];
    snprintf(b, sizeof b, "{\"input\":[%d,%d]}", hello, hello);
    CHECK(parse(b, &r, &err) == 0 && r.tokens_given && r.n_in == 1);
    CHECK(emb_tokenize(&r, g_tk, &sp, 100, 64, &err) == 0);
    CHECK(r.lens[0] == 4 && r.ids[0][0] == sp.pre[0] && r.ids[0][1] == hello &&
          r.ids[0][3] == sp.suf[0]);
    emb_req_deinit(&r);
    /* arrays of arrays; an id out of range; over the limit */
    CHECK(parse("{\"input\":[[5],[6,7]]}", &r, &err) == 0 && r.n_in == 2 && r.tokens_given);
    CHECK(emb_tokenize(&r, g_tk, &sp, 100, 64, &err) == 0);
    CHECK(r.lens[1] == 4 && r.n_tokens == 7);
    emb_req_deinit(&r);
    CHECK(parse("{\"input\":[[5],[6,100]]}", &r, &err) == 0);
    CHECK(emb_tokenize(&r, g_tk, &sp, 100, 64, &err) == -1 && err.status == 400 &&
          strstr(err.message, "input[1][1] = 100"));
    emb_req_deinit(&r);
    CHECK(parse("{\"input\":[\"a\",\"hello hello hello\"]}", &r, &err) == 0);
    CHECK(emb_tokenize(&r, g_tk, &sp, 100, 4, &err) == -1 &&
          strstr(err.message, "input[1] is 5 tokens long") && strstr(err.message, "at most 4"));
    emb_req_deinit(&r);
    /* more than 300000 tokens in all: refused (1500 inputs of 202 tokens) */
    {
        size_t cap = 1500 * 1210 + 64;
        char *big = malloc(cap), *p = big;
        p += sprintf(p, "{\"input\":[");
        for (int i = 0; i < 1500; i++) {
            *p++ = i ? ',' : ' ';
            *p++ = '"';
            for (int k = 0; k < 200; k++)
                p += sprintf(p, "hello ");
            *p++ = '"';
        }
        strcpy(p, "]}");
        CHECK(parse(big, &r, &err) == 0 && r.n_in == 1500);
        CHECK(emb_tokenize(&r, g_tk, &sp, 100, 256, &err) == -1 &&
              strstr(err.message, "more than 300000 tokens"));
        emb_req_deinit(&r);
        free(big);
    }
    /* a NUL inside the text is data, not the end */
    CHECK(parse("{\"input\":\"hello\\u0000hello\"}", &r, &err) == 0);
    CHECK(emb_tokenize(&r, g_tk, &sp, 100, 64, &err) == 0 && r.lens[0] > 3); /* NUL dropped by the normalizer */
    emb_req_deinit(&r);
}

static void test_response(void)
{
    struct emb_req r;
    struct api_error err;
    CHECK(parse("{\"input\":[\"a\",\"b\"]}", &r, &err) == 0);
    r.n_tokens = 6;
    float v[8] = {0.1f, -0.2f, 1.0f / 3.0f, 0.0f, 3.0f, 4.0f, 0.0f, 1e-7f};
    char *s = emb_response(&r, v, 4, 4, 0, "mo\"del");
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    CHECK_MSG(j != NULL, "not JSON: %s", s);
    CHECK(!strcmp(json_string_value(json_object_get(j, "object")), "list"));
    CHECK(!strcmp(json_string_value(json_object_get(j, "model")), "mo\"del"));
    CHECK_EQ_INT((int)json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 6);
    json_t *e0 = json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding");
    CHECK(json_array_size(e0) == 4);
    for (int i = 0; i < 4; i++) /* each number reads back as the same float32 */
        CHECK((float)json_number_value(json_array_get(e0, (size_t)i)) == v[i]);
    CHECK(strstr(s, "[0.1,-0.2,0.33333334,0.0]") != NULL);
    json_decref(j);
    free(s);
    /* dims 2 + renormalize; base64 */
    r.base64 = 1;
    s = emb_response(&r, v, 4, 2, 1, "m");
    j = json_loads(s, 0, &je);
    const char *b64 = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "data"), 1), "embedding"));
    uint8_t raw[8];
    CHECK(b64 && base64_decode(b64, strlen(b64), raw, sizeof raw) == 8);
    float got[2];
    memcpy(got, raw, 8);
    CHECK_NEAR(got[0], 0.6, 1e-6);
    CHECK_NEAR(got[1], 0.8, 1e-6);
    json_decref(j);
    free(s);
    emb_req_deinit(&r);
}

int main(void)
{
    struct cerr e = {0};
    if (tok_load(&g_tk, repo_path("tests/data/embeddings/tinybert"), &e)) {
        fprintf(stderr, "tok_load: %s\n", e.msg);
        return 1;
    }
    RUN(test_parse_refusals);
    RUN(test_parse_shapes_and_tokenize);
    RUN(test_response);
    tok_free(g_tk);
    return harness_done();
}
