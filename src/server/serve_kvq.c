/* serve_kvq.c — the KV quantization flags and the fidelity tiers/levers of `cinfer serve`
 * (docs/kv-quant.md): --kv-quant, --kv-rotate, --l1/--l2 (--l3 refused), --fused-sdpa,
 * --compiled-activations, --force-wire and their CINFER_* mirrors; resolving the scheme to
 * per-layer KV dtypes for the engine, the ready-card line and /stats.kv_quant.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backend/kvq.h"
#include "kv/kvq_scheme.h"
#include "server/serve.h"

struct serve_kvq {
    struct kvq_scheme s;
    struct kvq_layers_info info;
    int ldt[MODEL_MAX_LAYERS];
    int tier;       /* 0 none, 1, 2 */
    int fused_sdpa; /* effective */
    int compiled_act;
    int force_wire;
    size_t wired_bytes;
    int has_swa;
};

static int onoff(const char *flag, const char *v, int *out)
{
    if (v && (!strcmp(v, "on") || !strcmp(v, "off"))) {
        *out = !strcmp(v, "on");
        return 0;
    }
    fprintf(stderr, "cinfer serve: %s expects on or off, got '%s'\n", flag, v ? v : "");
    return -1;
}

int serve_kvq_flag(struct serve_opts *o, const char *a, const char *v, int *used)
{
    *used = 1;
    struct cerr e = {0};
    if (!strcmp(a, "--kv-quant")) {
        struct kvq_scheme s = {.rotate = -1};
        if (kvq_scheme_parse(v, &s, &e)) {
            fprintf(stderr, "cinfer serve: %s\n", e.msg);
            return -1;
        }
        o->kv_quant = v;
        return 1;
    }
    if (!strcmp(a, "--kv-rotate")) {
        int r;
        if (kvq_rotate_parse(v, &r, &e)) {
            fprintf(stderr, "cinfer serve: %s\n", e.msg);
            return -1;
        }
        o->kv_rotate = r ? 1 : 0;
        return 1;
    }
    if (!strcmp(a, "--fused-sdpa") || !strcmp(a, "--compiled-activations")) {
        int on;
        if (onoff(a, v, &on))
            return -1;
        *(a[2] == 'f' ? &o->fused_sdpa : &o->compiled_act) = on;
        return 1;
    }
    *used = 0;
    if (!strcmp(a, "--l1") || !strcmp(a, "--l2")) {
        o->tier = a[3] - '0';
        return 1;
    }
    if (!strcmp(a, "--l3")) {
        fprintf(stderr, "cinfer serve: --l3 is not a tier (the reference removed it too): use "
                        "--l1 (reference numerics) or --l2 (the --kv-quant config preset), and "
                        "the per-lever flags; see docs/kv-quant.md\n");
        return -1;
    }
    if (!strcmp(a, "--force-wire")) {
        o->force_wire = 1;
        return 1;
    }
    return 0;
}

/* CINFER_* mirrors: a flag given on the command line wins. */
static int env_mirrors(struct serve_opts *o)
{
    const char *v;
    struct cerr e = {0};
    if (!o->kv_quant && (v = getenv("CINFER_KV_QUANT")) && *v) {
        struct kvq_scheme s = {.rotate = -1};
        if (kvq_scheme_parse(v, &s, &e)) {
            fprintf(stderr, "cinfer serve: CINFER_KV_QUANT: %s\n", e.msg);
            return -1;
        }
        o->kv_quant = v;
    }
    if (o->kv_rotate < 0 && (v = getenv("CINFER_KV_ROTATE")) && *v) {
        int r;
        if (kvq_rotate_parse(v, &r, &e)) {
            fprintf(stderr, "cinfer serve: CINFER_KV_ROTATE: %s\n", e.msg);
            return -1;
        }
        o->kv_rotate = r;
    }
    if (o->fused_sdpa < 0 && (v = getenv("CINFER_FUSED_SDPA")) && *v &&
        onoff("CINFER_FUSED_SDPA", v, &o->fused_sdpa))
        return -1;
    if (o->compiled_act < 0 && (v = getenv("CINFER_COMPILED_ACTIVATIONS")) && *v &&
        onoff("CINFER_COMPILED_ACTIVATIONS", v, &o->compiled_act))
        return -1;
    if (!o->force_wire && (v = getenv("CINFER_FORCE_WIRE")) && *v == '1')
        o->force_wire = 1;
    if (!o->tier && (v = getenv("CINFER_TIER")) && *v) {
        if (strcmp(v, "l1") && strcmp(v, "l2")) {
            fprintf(stderr, "cinfer serve: CINFER_TIER expects l1 or l2, got '%s'\n", v);
            return -1;
        }
        o->tier = v[1] - '0';
    }
    return 0;
}

/* --force-wire: lock the weights (and what is mapped so far) in RAM. */
static int force_wire(struct serve *sv, struct serve_kvq *q)
{
    size_t w = model_weight_bytes(sv->m);
    struct rlimit rl;
    if (mlockall(MCL_CURRENT) == 0) {
        q->wired_bytes = w;
        return 0;
    }
    int err = errno;
    char lim[64] = "unknown";
    if (!getrlimit(RLIMIT_MEMLOCK, &rl))
        snprintf(lim, sizeof lim, rl.rlim_cur == RLIM_INFINITY ? "unlimited" : "%.1f MB",
                 rl.rlim_cur == RLIM_INFINITY ? 0.0 : rl.rlim_cur / 1e6);
    fprintf(stderr,
            "cinfer serve: --force-wire: cannot lock the %.2f GB of weights in RAM (%s); the "
            "memlock limit is %s — raise it (ulimit -l unlimited, or LimitMEMLOCK=infinity "
            "for a systemd unit, or run with CAP_IPC_LOCK) or drop --force-wire\n",
            w / 1e9, strerror(err), lim);
    return -1;
}

int serve_kvq_setup(struct serve *sv, struct engine_config *ec)
{
    struct serve_opts *o = &sv->o;
    if (env_mirrors(o))
        return -1;
    struct serve_kvq *q = calloc(1, sizeof *q);
    if (!q)
        return -1;
    sv->kvq = q;
    q->tier = o->tier;
    const char *v = o->kv_quant ? o->kv_quant : o->tier == 2 ? "config" : "off";
    struct cerr e = {0};
    q->s.rotate = o->kv_rotate;
    if (kvq_scheme_parse(v, &q->s, &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        return -1;
    }
    const struct model_hparams *hp = &sv->m->hp;
    if (hp->n_layer > MODEL_MAX_LAYERS)
        return -1;
    for (int l = 0; hp->sliding_window > 0 && l < hp->n_layer; l++)
        q->has_swa |= hp->layer_swa[l] != 0;
    int code;
    if (kvq_scheme_layers(&q->s, hp, o->model, ec->kv_dtype, q->ldt, &code, &q->info, &e)) {
        fprintf(stderr, "cinfer serve: %s\n", e.msg);
        return -1;
    }
    if (q->info.n_quant && strcmp(sv->m->be->ops->name, "cpu") &&
        strcmp(sv->m->be->ops->name, "cuda")) {
        fprintf(stderr,
                "cinfer serve: --kv-quant %s: the %s backend does not read quantized KV "
                "blocks yet; use --backend cpu or --kv-quant off\n",
                v, sv->m->be->ops->name);
        return -1;
    }
    if (q->info.swa_plain)
        fprintf(stderr, "cinfer warn: --kv-quant %s keeps the %d sliding-window layers at f16\n", v,
                q->info.swa_plain);
    if (q->info.n_quant) {
        ec->kv_dtype = code;
        ec->kv_layer_dtype = q->ldt;
    }
    /* levers: the CPU kernels always dequantize inside attention and always run the gated
     * activation as one op; the other routes are not built (refused, not silently ignored) */
    q->fused_sdpa = o->fused_sdpa < 0 ? 1 : o->fused_sdpa;
    q->compiled_act = o->compiled_act < 0 ? 1 : o->compiled_act;
    if (!q->fused_sdpa) {
        fprintf(stderr, "cinfer serve: --fused-sdpa off: the dequantize-then-attend route is not "
                        "built on this backend (its attention always dequantizes inside the "
                        "kernel); see docs/kv-quant.md\n");
        return -1;
    }
    if (!q->compiled_act) {
        fprintf(stderr, "cinfer serve: --compiled-activations off: the spelled-out activation "
                        "route is not built on this backend (act_mul is one op); see "
                        "docs/kv-quant.md\n");
        return -1;
    }
    /* l1 on a device backend: decode rows run apart from prompt chunks, so their bits are
     * those of a one-row step (model_batch.n_lead) */
    if (q->tier == 1 && strcmp(sv->m->be->ops->name, "cpu") && !getenv("CINFER_LEAD_SPLIT"))
        setenv("CINFER_LEAD_SPLIT", "1", 1);
    q->force_wire = o->force_wire;
    if (q->force_wire && force_wire(sv, q))
        return -1;
    return 0;
}

/* What attends over a group of layers: "quantized (fused dequant)", "f16", "mixed". */
static const char *group_route(const struct serve *sv, const struct serve_kvq *q, int swa,
                               char *buf, size_t cap)
{
    const struct model_hparams *hp = &sv->m->hp;
    int nq = 0, np = 0, f32 = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        int is_swa = hp->sliding_window > 0 && hp->layer_swa[l];
        if (is_swa != swa)
            continue;
        if (kvq_is(q->ldt[l]))
            nq++;
        else
            np++, f32 |= q->ldt[l] == DT_F32;
    }
    if (!nq && !np)
        snprintf(buf, cap, "none");
    else if (!nq)
        snprintf(buf, cap, "%s", f32 ? "f32" : "f16");
    else
        snprintf(buf, cap, "%s%s", np ? "mixed: " : "", "quantized, dequantized in the kernel");
    return buf;
}

const char *serve_kvq_pool_label(struct serve *sv, const char *plain, char *buf, size_t n)
{
    struct serve_kvq *q = sv->kvq;
    if (!q || !q->info.n_quant)
        return plain;
    char name[64];
    kvq_scheme_name(&q->s, name, sizeof name);
    const char *bit = strspn(name, "0123456789") == strlen(name) ? "-bit" : ""; /* "8", "4" */
    if (q->info.n_plain)
        snprintf(buf, n, "%s%s (%d layers %s)", name, bit, q->info.n_plain, plain);
    else
        snprintf(buf, n, "%s%s", name, bit);
    return buf;
}

void serve_kvq_card(struct serve *sv)
{
    struct serve_kvq *q = sv->kvq;
    if (!q)
        return;
    char name[64];
    kvq_scheme_name(&q->s, name, sizeof name);
    if (!q->info.n_quant && !q->tier && !q->force_wire)
        return;
    printf("  KV quant  %s", name);
    if (q->info.n_quant)
        printf(" · K %d-bit%s V %d-bit%s · %d of %d layers · %.1f KB/token (f16 %.1f)",
               q->info.kbits, q->info.rotate_k ? " rotated," : ",", q->info.vbits,
               q->info.rotate_v ? " rotated" : "", q->info.n_quant,
               q->info.n_quant + q->info.n_plain, q->info.bytes_per_token / 1024.0,
               (double)sv->m->hp.n_layer * 4 * sv->m->hp.n_kv_head * sv->m->hp.head_dim / 1024.0);
    if (q->tier)
        printf(" · tier l%d", q->tier);
    if (q->force_wire)
        printf(" · weights wired (%.2f GB)", q->wired_bytes / 1e9);
    printf("\n");
}

void serve_kvq_stats_json(struct serve *sv, json_t *j)
{
    struct serve_kvq *q = sv->kvq;
    if (!q)
        return;
    char name[64], g[64], s[64];
    kvq_scheme_name(&q->s, name, sizeof name);
    json_t *layers = json_pack("{s:i, s:i, s:i}", "quantized", q->info.n_quant, "plain",
                               q->info.n_plain, "sliding_window_plain", q->info.swa_plain);
    if (q->s.mode == KVQ_CONFIG)
        json_object_set_new(layers, "config", json_string(q->info.source));
    int gsz = 0;
    json_t *per = json_array();
    for (int l = 0; l < sv->m->hp.n_layer; l++) {
        int d = q->ldt[l];
        char b[32];
        if (kvq_is(d) && !gsz)
            gsz = kvq_group_of(d);
        if (kvq_is(d))
            snprintf(b, sizeof b, "k%s%sv%s%s", kvq_fmt_name(kvq_fmt_of(d, 0)),
                     kvq_rot_of(d, 0) ? "r" : "", kvq_fmt_name(kvq_fmt_of(d, 1)),
                     kvq_rot_of(d, 1) ? "r" : "");
        else
            snprintf(b, sizeof b, "%s", d == DT_F32 ? "f32" : "f16");
        json_array_append_new(per, json_string(b));
    }
    json_object_set_new(layers, "per_layer", per);
    json_t *kq = json_pack("{s:s, s:{s:i, s:i}, s:{s:b, s:b}, s:o, s:{s:s, s:s}, s:I, s:i}", "mode",
                           name, "bits", "k", q->info.kbits, "v", q->info.vbits, "rotate", "k",
                           q->info.rotate_k, "v", q->info.rotate_v, "layers", layers, "attention",
                           "global", group_route(sv, q, 0, g, sizeof g), "sliding_window",
                           group_route(sv, q, 1, s, sizeof s), "bytes_per_token",
                           (json_int_t)q->info.bytes_per_token, "group_size", gsz);
    json_object_set_new(j, "kv_quant", kq);
    json_object_set_new(j, "route",
                        json_pack("{s:s, s:b, s:b, s:b, s:I}", "tier",
                                  q->tier == 1   ? "l1"
                                  : q->tier == 2 ? "l2"
                                                 : "default",
                                  "fused_sdpa", q->fused_sdpa, "compiled_activations",
                                  q->compiled_act, "force_wire", q->force_wire, "wired_bytes",
                                  (json_int_t)q->wired_bytes));
}

void serve_kvq_free(struct serve *sv)
{
    free(sv->kvq);
    sv->kvq = NULL;
}
