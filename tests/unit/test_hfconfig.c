/* test_hfconfig.c — HF JSON config reader: dotted paths, null = absent, integral reals,
 * int/str lists, wrong-type and syntax errors naming the file, huge integer literals, and
 * the real tokenizer_config.json fixtures (Qwen3, Llama 3).
 */
#include <stdint.h>
#include <string.h>

#include "format/hfconfig.h"
#include "harness.h"

static const char *k_cfg =
    "{\"model_type\": \"qwen3\", \"hidden_size\": 1024, \"rms_norm_eps\": 1e-06,"
    " \"tie_word_embeddings\": true, \"sliding_window\": null, \"max_position_embeddings\": 40960.0,"
    " \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, \"inner\": {\"x\": 7}},"
    " \"text_config\": {\"hidden_size\": 2560, \"num_hidden_layers\": 34},"
    " \"eos_token_id\": [151645, 151643], \"bos_token_id\": 151643,"
    " \"layer_types\": [\"sliding_attention\", \"full_attention\"],"
    " \"architectures\": \"Qwen3ForCausalLM\", \"bad_list\": [1, \"x\"], \"frac\": 2.5,"
    " \"dotted.key\": 5, \"huge\": 123456789012345678901234567890}";

static struct hfcfg *parse(const char *s, struct cerr *e)
{
    struct hfcfg *c = NULL;
    int rc = hfcfg_parse(&c, s, strlen(s), "config.json", e);
    CHECK_MSG(rc == 0, "%s", e->msg);
    return c;
}

static void test_scalars(void)
{
    struct cerr e = {0};
    struct hfcfg *c = parse(k_cfg, &e);
    if (!c)
        return;
    int64_t v = 0;
    double d = 0;
    int b = 0;
    const char *s = NULL;
    CHECK_EQ_INT(hfcfg_int(c, "hidden_size", &v, &e), 0);
    CHECK_EQ_INT(v, 1024);
    CHECK_EQ_INT(hfcfg_int(c, "max_position_embeddings", &v, &e), 0); /* integral real */
    CHECK_EQ_INT(v, 40960);
    CHECK_EQ_INT(hfcfg_int(c, "frac", &v, &e), CERR_FORMAT);
    CHECK(strstr(e.msg, "frac") && strstr(e.msg, "config.json"));
    CHECK_EQ_INT(hfcfg_float(c, "rms_norm_eps", &d, &e), 0);
    CHECK_NEAR(d, 1e-6, 1e-15);
    CHECK_EQ_INT(hfcfg_float(c, "hidden_size", &d, &e), 0);
    CHECK_NEAR(d, 1024, 0);
    CHECK_EQ_INT(hfcfg_bool(c, "tie_word_embeddings", &b, &e), 0);
    CHECK_EQ_INT(b, 1);
    CHECK_EQ_INT(hfcfg_bool(c, "hidden_size", &b, &e), CERR_FORMAT);
    CHECK_EQ_INT(hfcfg_str(c, "model_type", &s, &e), 0);
    CHECK_STR(s, "qwen3");
    CHECK_EQ_INT(hfcfg_str(c, "hidden_size", &s, &e), CERR_FORMAT);
    CHECK(strstr(e.msg, "hidden_size") != NULL);
    /* absent and null */
    CHECK_EQ_INT(hfcfg_int(c, "nope", &v, &e), 1);
    CHECK_EQ_INT(hfcfg_int(c, "sliding_window", &v, &e), 1);
    CHECK_EQ_INT(hfcfg_str(c, "rope_scaling.nope", &s, &e), 1);
    CHECK_EQ_INT(hfcfg_int(c, "hidden_size.x", &v, &e), 1); /* walking into a scalar */
    /* dotted paths */
    CHECK_EQ_INT(hfcfg_str(c, "rope_scaling.rope_type", &s, &e), 0);
    CHECK_STR(s, "yarn");
    CHECK_EQ_INT(hfcfg_float(c, "rope_scaling.factor", &d, &e), 0);
    CHECK_NEAR(d, 4, 0);
    CHECK_EQ_INT(hfcfg_int(c, "rope_scaling.inner.x", &v, &e), 0);
    CHECK_EQ_INT(v, 7);
    CHECK_EQ_INT(hfcfg_int(c, "text_config.hidden_size", &v, &e), 0);
    CHECK_EQ_INT(v, 2560);
    CHECK_EQ_INT(hfcfg_int(c, "dotted.key", &v, &e), 0);
    CHECK_EQ_INT(v, 5);
    CHECK_EQ_INT(hfcfg_float(c, "huge", &d, &e), 0);
    CHECK_NEAR(d / 1.2345678901234568e29, 1, 1e-12);
    CHECK_EQ_INT(hfcfg_int(c, "huge", &v, &e), CERR_FORMAT);
    /* other integers stay JSON integers after the big-integer re-parse */
    CHECK_EQ_INT(hfcfg_int(c, "bos_token_id", &v, &e), 0);
    CHECK_EQ_INT(v, 151643);
    CHECK(hfcfg_json(c) != NULL);
    CHECK_STR(hfcfg_path(c), "config.json");
    hfcfg_free(c);
}

static void test_lists(void)
{
    struct cerr e = {0};
    struct hfcfg *c = parse(k_cfg, &e);
    if (!c)
        return;
    int64_t ids[4];
    const char *strs[4];
    int n = -1;
    CHECK_EQ_INT(hfcfg_int_list(c, "eos_token_id", ids, 4, &n, &e), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 151645);
    CHECK_EQ_INT(ids[1], 151643);
    CHECK_EQ_INT(hfcfg_int_list(c, "bos_token_id", ids, 4, &n, &e), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(ids[0], 151643);
    CHECK_EQ_INT(hfcfg_int_list(c, "eos_token_id", ids, 1, &n, &e), CERR_LIMIT);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(hfcfg_int_list(c, "bad_list", ids, 4, &n, &e), CERR_FORMAT);
    CHECK(strstr(e.msg, "\"bad_list\"[1]") != NULL);
    CHECK_EQ_INT(hfcfg_int_list(c, "model_type", ids, 4, &n, &e), CERR_FORMAT);
    CHECK_EQ_INT(hfcfg_int_list(c, "sliding_window", ids, 4, &n, &e), 1);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(hfcfg_str_list(c, "layer_types", strs, 4, &n, &e), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_STR(strs[1], "full_attention");
    CHECK_EQ_INT(hfcfg_str_list(c, "architectures", strs, 4, &n, &e), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_STR(strs[0], "Qwen3ForCausalLM");
    CHECK_EQ_INT(hfcfg_str_list(c, "eos_token_id", strs, 4, &n, &e), CERR_FORMAT);
    CHECK_EQ_INT(hfcfg_str_list(c, "layer_types", strs, 1, &n, &e), CERR_LIMIT);
    hfcfg_free(c);
}

static void test_errors(void)
{
    static const char *bad[] = {"", "{", "[1,2]", "42", "{\"a\": }", "{\"a\": 1,}",
                                "{\"a\": \"\\u12\"}", "nul"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct hfcfg *c = NULL;
        struct cerr e = {0};
        int rc = hfcfg_parse(&c, bad[i], strlen(bad[i]), "config.json", &e);
        CHECK_MSG(rc == CERR_FORMAT, "case %zu rc=%d", i, rc);
        CHECK(c == NULL);
        CHECK(strstr(e.msg, "config.json") != NULL);
        hfcfg_free(c);
    }
    struct hfcfg *c = NULL;
    struct cerr e = {0};
    CHECK_EQ_INT(hfcfg_parse(&c, "{\"a\":\n  x}", 10, "cfg.json", &e), CERR_FORMAT);
    CHECK(strstr(e.msg, "line 2") != NULL);
    CHECK_EQ_INT(hfcfg_load(&c, "/nonexistent/config.json", &e), CERR_IO);
    CHECK(strstr(e.msg, "/nonexistent/config.json") != NULL);
    /* a UTF-8 byte-order mark is skipped */
    const char *bom = "\xef\xbb\xbf{\"a\": 1}";
    CHECK_EQ_INT(hfcfg_parse(&c, bom, strlen(bom), "bom.json", &e), 0);
    hfcfg_free(c);
    /* a string containing what looks like a huge integer is left alone */
    const char *s = "{\"s\": \"12345678901234567890123\", \"n\": 12345678901234567890123}";
    CHECK_EQ_INT(hfcfg_parse(&c, s, strlen(s), "x.json", &e), 0);
    if (c) {
        const char *v = NULL;
        CHECK_EQ_INT(hfcfg_str(c, "s", &v, &e), 0);
        CHECK_STR(v, "12345678901234567890123");
        hfcfg_free(c);
    }
}

static void test_real_files(void)
{
    struct hfcfg *c = NULL;
    struct cerr e = {0};
    int rc = hfcfg_load(&c, fixture_path("qwen3-tokenizer/tokenizer_config.json"), &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (c) {
        const char *s = NULL;
        int b = -1;
        int64_t v = 0;
        CHECK_EQ_INT(hfcfg_str(c, "eos_token", &s, &e), 0);
        CHECK_STR(s, "<|im_end|>");
        CHECK_EQ_INT(hfcfg_str(c, "bos_token", &s, &e), 1); /* null */
        CHECK_EQ_INT(hfcfg_bool(c, "add_bos_token", &b, &e), 0);
        CHECK_EQ_INT(b, 0);
        CHECK_EQ_INT(hfcfg_int(c, "model_max_length", &v, &e), 0);
        CHECK_EQ_INT(v, 131072);
        CHECK_EQ_INT(hfcfg_str(c, "chat_template", &s, &e), 0);
        CHECK(s && strstr(s, "<|im_start|>") != NULL);
        CHECK_EQ_INT(hfcfg_str(c, "added_tokens_decoder.151645.content", &s, &e), 0);
        CHECK_STR(s, "<|im_end|>");
        hfcfg_free(c);
    }
    rc = hfcfg_load(&c, fixture_path("llama3-tokenizer/tokenizer_config.json"), &e);
    CHECK_MSG(rc == 0, "%s", e.msg); /* model_max_length is a 31-digit integer */
    if (c) {
        const char *s = NULL;
        double d = 0;
        CHECK_EQ_INT(hfcfg_str(c, "bos_token", &s, &e), 0);
        CHECK_STR(s, "<|begin_of_text|>");
        CHECK_EQ_INT(hfcfg_float(c, "model_max_length", &d, &e), 0);
        CHECK(d > 9e29);
        hfcfg_free(c);
    }
}

int main(void)
{
    RUN(test_scalars);
    RUN(test_lists);
    RUN(test_errors);
    RUN(test_real_files);
    return harness_done();
}
