/* test_template_corpus.c — replays the template fuzz corpus in the normal test build.
 *
 * Every file of fuzz/corpus/fuzz_template/ (the real templates, the feature snippets and
 * the inputs that once crashed the fuzzer) is parsed and, when accepted, rendered against
 * a tool-call conversation with small bounds. Under the ASan+UBSan build this catches a
 * regression of any past fuzz finding without needing clang/libFuzzer. Errors are fine;
 * the test fails only on a crash (the sanitizer aborts) or an inconsistent result.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "template/tmpl.h"
#include "util/fs.h"

static const char g_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00fc\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"call12345\","
    " \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"ok\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static void test_replay_corpus(void)
{
    const char *dir = repo_path("fuzz/corpus/fuzz_template");
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    json_t *ctx = json_loads(g_ctx, 0, NULL);
    CHECK(ctx != NULL);
    int files = 0, parsed = 0, rendered = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        char *src = NULL;
        size_t n = 0;
        struct cerr e = {0};
        if (fs_read_all(path, &src, &n, &e) != 0)
            continue;
        files++;
        struct tmpl *t = NULL;
        if (tmpl_parse(&t, src, n, &e) == 0) {
            parsed++;
            struct tmpl_opts o = {.now_unix = 1721952000, .max_steps = 100000, .max_bytes = 8 << 20};
            char *out = NULL;
            size_t len = 0;
            int rc = tmpl_render(t, ctx, &o, &out, &len, &e);
            if (rc == 0) {
                rendered++;
                CHECK(out != NULL && strlen(out) <= len);
            } else {
                CHECK(out == NULL && e.msg[0] != 0);
            }
            free(out);
            tmpl_free(t);
        } else {
            CHECK(t == NULL && e.msg[0] != 0);
        }
        free(src);
    }
    closedir(d);
    json_decref(ctx);
    fprintf(stderr, "corpus: %d files, %d parsed, %d rendered\n", files, parsed, rendered);
    CHECK(files >= 50);
    CHECK(rendered >= 19);
}

int main(void)
{
    RUN(test_replay_corpus);
    return harness_done();
}
