/* cli_kvq.c — --kv-quant / --kv-rotate for run and bench (cli_kvq.h). */
#include "server/cli_kvq.h"

#include <stdio.h>
#include <string.h>

#include "backend/dtype.h"
#include "kv/kvq_scheme.h"

void cli_kvq_init(struct cli_kvq *q)
{
    memset(q, 0, sizeof *q);
    q->rotate = -1;
    snprintf(q->name, sizeof q->name, "off");
}

int cli_kvq_flag(const char *cmd, const char *a, const char *v, struct cli_kvq *q)
{
    struct cerr e = {0};
    if (!strcmp(a, "--kv-quant")) {
        struct kvq_scheme s = {.rotate = -1};
        if (!v || kvq_scheme_parse(v, &s, &e)) {
            fprintf(stderr, "cinfer %s: %s\n", cmd,
                    v ? e.msg : "--kv-quant expects off|8|4|turbo[:k<b>v<b>]|config[:PATH]");
            return -1;
        }
        q->quant = v;
        return 2;
    }
    if (!strcmp(a, "--kv-rotate")) {
        if (!v || kvq_rotate_parse(v, &q->rotate, &e)) {
            fprintf(stderr, "cinfer %s: %s\n", cmd, v ? e.msg : "--kv-rotate expects on or off");
            return -1;
        }
        return 2;
    }
    return 0;
}

int cli_kvq_resolve(const char *cmd, struct cli_kvq *q, const struct model *m, const char *path,
                    int base, int *kv_dtype, const int **ldt)
{
    struct kvq_scheme s = {.rotate = q->rotate};
    struct kvq_layers_info info;
    struct cerr e = {0};
    *kv_dtype = base;
    *ldt = NULL;
    if (kvq_scheme_parse(q->quant ? q->quant : "off", &s, &e) ||
        kvq_scheme_layers(&s, &m->hp, path, base, q->ldt, kv_dtype, &info, &e)) {
        fprintf(stderr, "cinfer %s: %s\n", cmd, e.msg);
        return -1;
    }
    kvq_scheme_name(&s, q->name, sizeof q->name);
    if (!info.n_quant) {
        *kv_dtype = base;
        return 0;
    }
    if (info.swa_plain)
        fprintf(stderr, "cinfer warn: --kv-quant %s keeps the %d sliding-window layers at %s\n",
                q->quant, info.swa_plain, base == DT_F32 ? "f32" : "f16");
    for (int l = 0; l < m->hp.n_layer; l++)
        if (q->ldt[l] != *kv_dtype) {
            *ldt = q->ldt;
            break;
        }
    return 0;
}
