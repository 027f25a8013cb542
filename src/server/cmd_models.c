/* cmd_models.c — models by name: `cinfer pull REPO[:FILE|:QUANT]` (hub_pull.h), `cinfer ls`
 * (the hub cache's and the local store's models with size, architecture, quantization and
 * whether they fit here) and `cinfer rm NAME` (model_store.h). "Fits here" is the rule bare
 * `cinfer` uses to pick a model: at most 0.6x of the default memory budget (75% of RAM).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"
#include "format/gguf.h"
#include "server/commands.h"
#include "server/hub_pull.h"
#include "server/model_store.h"

long long models_fit_bytes(void)
{
    const char *b = getenv("CINFER_FIT_BYTES"); /* tests: a fixed machine size */
    if (b && *b)
        return atoll(b);
    return (long long)((double)plan_ram_bytes() * 0.75 * 0.6);
}

int cmd_pull(int argc, char **argv)
{
    const char *spec = NULL;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: cinfer pull ORG/REPO[:FILE|:QUANT] [--quiet]\n\n"
                   "Downloads a model from the Hugging Face Hub into its cache (the layout\n"
                   "huggingface_hub uses: $HF_HUB_CACHE, else $HF_HOME/hub, else\n"
                   "~/.cache/huggingface/hub). FILE names one file of the repo; QUANT picks the\n"
                   "GGUF whose name contains it (Q4_K_M, Q8_0, ...); nothing picks the only GGUF,\n"
                   "else Q4_K_M, else the safetensors model. Downloads resume; LFS files are\n"
                   "checked against their sha256. HF_ENDPOINT and HF_TOKEN are honoured.\n");
            return 0;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q"))
            quiet = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "cinfer pull: unknown option '%s'\n", argv[i]);
            return 1;
        } else if (!spec)
            spec = argv[i];
        else {
            fprintf(stderr, "cinfer pull: unexpected argument '%s'\n", argv[i]);
            return 1;
        }
    }
    if (!spec) {
        fprintf(stderr, "usage: cinfer pull ORG/REPO[:FILE|:QUANT]\n");
        return 1;
    }
    struct pull_opts o = {.progress = !quiet};
    struct cerr e = {0};
    char path[2048];
    if (hub_pull(spec, &o, path, sizeof path, &e)) {
        fprintf(stderr, "cinfer pull: %s\n", e.msg);
        return 1;
    }
    printf("%s\n", path);
    return 0;
}

/* "qwen2 Q4_K_M"-style facts of a GGUF (empty when unreadable). */
static void gguf_facts(const char *path, char *arch, size_t acap, char *quant, size_t qcap)
{
    arch[0] = quant[0] = 0;
    struct gguf *g = NULL;
    if (gguf_open(&g, path, NULL))
        return;
    struct gguf_str s;
    if (!gguf_get_str(g, "general.architecture", &s, NULL))
        snprintf(arch, acap, "%.*s", (int)s.len, s.ptr);
    /* the dtype of the token embedding or of the first big matrix names the quant */
    const struct gguf_tensor *t = gguf_find_tensor(g, "blk.0.ffn_down.weight");
    if (!t)
        t = gguf_find_tensor(g, "token_embd.weight");
    if (t)
        snprintf(quant, qcap, "%s", gguf_type_name(t->dtype));
    gguf_close(g);
}

int cmd_ls(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: cinfer ls\n\nLists the models in the Hugging Face cache and in\n"
               "~/.cache/cinfer/models: name (what `cinfer serve NAME` takes), size,\n"
               "architecture, quantization, and whether it fits here (at most 0.6x of 75%%\n"
               "of RAM, the rule bare `cinfer` uses to pick one).\n");
        return 0;
    }
    struct store_list l;
    struct cerr e = {0};
    if (store_scan(&l, &e)) {
        fprintf(stderr, "cinfer ls: %s\n", e.msg);
        return 1;
    }
    long long fit = models_fit_bytes();
    printf("%-60s %10s  %-12s %-8s %s\n", "NAME", "SIZE", "ARCH", "QUANT", "FITS");
    for (int i = 0; i < l.n; i++) {
        const struct store_model *m = &l.v[i];
        char lab[800], arch[64] = "hf-dir", quant[32] = "";
        store_label(m, lab, sizeof lab);
        if (m->file[0])
            gguf_facts(m->path, arch, sizeof arch, quant, sizeof quant);
        printf("%-60s %8.2f GB  %-12s %-8s %s\n", lab, m->bytes / 1e9, arch[0] ? arch : "?",
               quant[0] ? quant : "-", m->bytes <= fit ? "yes" : "no");
    }
    if (!l.n) {
        char hub[1024];
        store_hub_dir(hub, sizeof hub);
        printf("(no models in %s or ~/.cache/cinfer/models; `cinfer pull ORG/REPO` fetches "
               "one)\n",
               hub);
    }
    store_list_free(&l);
    return 0;
}

int cmd_rm(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: cinfer rm NAME   (a name `cinfer ls` shows, or a unique part "
                        "of one)\n");
        return argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? 0 : 1;
    }
    struct store_list l;
    struct cerr e = {0};
    if (store_scan(&l, &e)) {
        fprintf(stderr, "cinfer rm: %s\n", e.msg);
        return 1;
    }
    int i = store_resolve(&l, argv[1], &e);
    int rc = i < 0 ? i : store_remove(&l.v[i], &e);
    if (rc)
        fprintf(stderr, "cinfer rm: %s\n", e.msg);
    else {
        char lab[800];
        store_label(&l.v[i], lab, sizeof lab);
        printf("removed %s\n", lab);
    }
    store_list_free(&l);
    return rc ? 1 : 0;
}
