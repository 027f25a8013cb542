/* cli_kvq.h — `--kv-quant` and `--kv-rotate` for `cinfer run` and `cinfer bench`: the serve
 * flags' values (kv/kvq_scheme.h), resolved to one KV dtype per layer of the loaded model,
 * without the server's tiers, levers and environment mirrors (docs/kv-quant.md). Pure parsing
 * and a file read (kv_config.json); any thread.
 */
#ifndef CINFER_SERVER_CLI_KVQ_H
#define CINFER_SERVER_CLI_KVQ_H

#include "model/model.h"

struct cli_kvq {
    const char *quant; /* --kv-quant value, NULL = off */
    int rotate;        /* --kv-rotate: -1 = the scheme's default, 0, 1 */
    int ldt[MODEL_MAX_LAYERS]; /* resolved: each layer's KV dtype */
    char name[64];     /* resolved: the scheme's name ("off", "8", "turbo:k8v3", ...) */
};

/* Zeroes q (off, rotation by default). */
void cli_kvq_init(struct cli_kvq *q);
/* If argv flag a (value v: the next argument or NULL) is --kv-quant or --kv-rotate, records
 * it and returns 2 (arguments used); -1 on a missing or bad value (message on stderr naming
 * the flag, prefixed "cinfer CMD: "); 0 when a is neither. */
int cli_kvq_flag(const char *cmd, const char *a, const char *v, struct cli_kvq *q);
/* Resolves q for model m loaded from path with plain KV dtype base (DT_F16 / DT_F32):
 * *kv_dtype = the pool's dtype (a scheme code, or base when off), *ldt = the per-layer
 * dtypes (q->ldt) or NULL when every layer has *kv_dtype. 0, or -1 with a message naming the
 * flag or the file. */
int cli_kvq_resolve(const char *cmd, struct cli_kvq *q, const struct model *m, const char *path,
                    int base, int *kv_dtype, const int **ldt);

#endif
