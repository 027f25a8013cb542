/* fuzz_model_names.c — libFuzzer target for the model-name parsers: `cinfer pull`'s
 * ORG/REPO[:FILE|:QUANT] (hub_parse_spec) and `cinfer serve NAME` resolution against a
 * fixed list of cached models (store_resolve).
 *
 * Input: the bytes up to the first NUL (or all) are the name. Checked: an accepted spec has
 * exactly one '/' in its repo, no ':' there, and repo + ':' + sel rebuilds the input; a
 * resolution returns a valid index or a negative code with a message. Seeds:
 * fuzz/corpus/fuzz_model_names/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/hub_pull.h"
#include "server/model_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok)
{
    if (!ok)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    char repo[256], sel[512];
    struct cerr e = {0};
    if (hub_parse_spec(s, repo, sizeof repo, sel, sizeof sel, &e) == 0) {
        const char *sl = strchr(repo, '/');
        require(sl && !strchr(sl + 1, '/') && !strchr(repo, ':'));
        size_t rn = strlen(repo);
        require(!strncmp(s, repo, rn));
        require(s[rn] == 0 ? sel[0] == 0 : (s[rn] == ':' && (strlen(s + rn + 1) >= sizeof sel ||
                                                             !strcmp(s + rn + 1, sel))));
    } else
        require(e.msg[0] != 0);
    struct store_model v[3] = {
        {.repo = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
         .file = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", .bytes = 10},
        {.repo = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
         .file = "qwen2.5-coder-0.5b-instruct-q8_0.gguf", .bytes = 20},
        {.repo = "", .file = "stories260K.gguf", .bytes = 1},
    };
    struct store_list l = {.v = v, .n = 3, .cap = 3};
    int i = store_resolve(&l, s, &e);
    require(i < 3 && (i >= 0 || e.msg[0]));
    free(s);
    return 0;
}
