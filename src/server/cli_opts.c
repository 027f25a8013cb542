/* cli_opts.c — the flags and defaults shared by run, serve and bench (see cli_opts.h). */
#include "server/cli_opts.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/dtype.h"
#include "format/hfconfig.h"

int cli_kv_flag(const char *cmd, const char *a, const char *v, int *kv_dtype)
{
    if (!strcmp(a, "--kv-f32") || !strcmp(a, "--kv-f16")) {
        *kv_dtype = !strcmp(a, "--kv-f32") ? DT_F32 : DT_F16;
        return 1;
    }
    if (strcmp(a, "--kv-dtype") && strcmp(a, "--kv"))
        return 0;
    if (v && (!strcmp(v, "f16") || !strcmp(v, "f32"))) {
        *kv_dtype = !strcmp(v, "f32") ? DT_F32 : DT_F16;
        return 2;
    }
    fprintf(stderr, "cinfer %s: %s expects f16|f32, got '%s'\n", cmd, a, v ? v : "");
    return -1;
}

int cli_backend_ok(const char *name)
{
    return name && (!strcmp(name, "auto") || !strcmp(name, "cpu") || !strcmp(name, "cuda"));
}

int cli_gen_config_read(const char *model, struct cli_gen_config *gc)
{
    memset(gc, 0, sizeof *gc);
    struct stat st;
    if (!model || stat(model, &st) || !S_ISDIR(st.st_mode))
        return 0;
    char p[4096];
    snprintf(p, sizeof p, "%s/generation_config.json", model);
    struct hfcfg *c = NULL;
    if (stat(p, &st) || hfcfg_load(&c, p, NULL))
        return 0;
    double d;
    int64_t k;
    if (!hfcfg_float(c, "temperature", &d, NULL))
        gc->temperature = (float)d, gc->has_temperature = 1;
    if (!hfcfg_float(c, "top_p", &d, NULL))
        gc->top_p = (float)d, gc->has_top_p = 1;
    if (!hfcfg_int(c, "top_k", &k, NULL))
        gc->top_k = (int)k, gc->has_top_k = 1;
    if (!hfcfg_float(c, "repetition_penalty", &d, NULL))
        gc->repetition_penalty = (float)d, gc->has_repetition_penalty = 1;
    int64_t ids[8];
    int n = 0;
    if (hfcfg_int_list(c, "eos_token_id", ids, 8, &n, NULL) &&
        !hfcfg_int(c, "eos_token_id", ids, NULL))
        n = 1;
    for (int i = 0; i < n && i < 8; i++)
        gc->eos[gc->n_eos++] = (int32_t)ids[i];
    hfcfg_free(c);
    return 1;
}
