/* cmd_info.c — `cinfer info MODEL`: what a model file holds, without loading weights.
 *
 * For a GGUF file (or a split set, *-00001-of-0000N.gguf): version, architecture, name,
 * file type, the `<arch>.*` hyperparameters,
 * tokenizer, chat template, tensor count and a per-dtype histogram (--kv: every metadata
 * key; --tensors: every tensor). For a HF dir or .safetensors file: config.json's
 * model_type, architectures and key hparams, tokenizer files, tensors by dtype. Only
 * headers are read (mmap), so it is instant even on large files.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/dtype.h"
#include "format/gguf.h"
#include "format/hfconfig.h"
#include "format/safetensors.h"
#include "server/commands.h"
#include "util/fs.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cinfer info [--kv] [--tensors] MODEL\n"
            "\n"
            "Shows what a model holds, reading only its headers.\n"
            "MODEL is a .gguf file, a .safetensors file, or a Hugging Face model directory\n"
            "(config.json + model.safetensors or model.safetensors.index.json + shards).\n"
            "\n"
            "options:\n"
            "  --kv        list every GGUF metadata key (arrays as type[n] + first values)\n"
            "  --tensors   list every tensor: name, dtype, shape, offset, bytes\n"
            "              (GGUF shapes are ggml order, innermost first; safetensors shapes\n"
            "              are the file's order, outermost first)\n"
            "  -h, --help  this text\n"
            "\n"
            "Exit status 0 on success, 1 when the model cannot be read (reason on stderr).\n");
}

static void print_size(FILE *f, uint64_t b)
{
    if (b >= (1ull << 30))
        fprintf(f, "%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20))
        fprintf(f, "%.1f MiB", (double)b / (1ull << 20));
    else if (b >= 1024)
        fprintf(f, "%.1f KiB", (double)b / 1024);
    else
        fprintf(f, "%" PRIu64 " B", b);
}

/* Prints s (len bytes) quoted with control characters escaped, cut at max bytes. */
static void print_str(const char *s, uint64_t len, uint64_t max)
{
    putchar('"');
    for (uint64_t i = 0; i < len && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
    if (len > max)
        printf("... (%" PRIu64 " bytes)", len);
}

static const char *ftype_name(int64_t ft)
{
    static const char *names[] = {
        [0] = "F32", [1] = "F16 (mostly)", [2] = "Q4_0", [3] = "Q4_1", [7] = "Q8_0",
        [8] = "Q5_0", [9] = "Q5_1", [10] = "Q2_K", [11] = "Q3_K_S", [12] = "Q3_K_M",
        [13] = "Q3_K_L", [14] = "Q4_K_S", [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M",
        [18] = "Q6_K", [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S", [22] = "IQ3_XS",
        [23] = "IQ3_XXS", [24] = "IQ1_S", [25] = "IQ4_NL", [26] = "IQ3_S", [27] = "IQ3_M",
        [28] = "IQ2_S", [29] = "IQ2_M", [30] = "IQ4_XS", [31] = "IQ1_M", [32] = "BF16",
        [36] = "TQ1_0", [37] = "TQ2_0", [38] = "MXFP4_MOE",
    };
    if (ft >= 0 && ft < (int64_t)(sizeof names / sizeof names[0]) && names[ft])
        return names[ft];
    return "?";
}

/* ---- GGUF -------------------------------------------------------------------------- */

/* Prints a scalar or string value (strings cut at max bytes). */
static void print_value(const struct gguf_kv *kv, uint64_t max)
{
    switch (kv->type) {
    case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64:
        printf("%" PRIu64, kv->v.u64);
        break;
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
        printf("%" PRId64, kv->v.i64);
        break;
    case GGUF_FLOAT32: case GGUF_FLOAT64:
        printf("%g", kv->v.f64);
        break;
    case GGUF_BOOL:
        printf("%s", kv->v.b ? "true" : "false");
        break;
    case GGUF_STRING:
        print_str(kv->v.str.ptr, kv->v.str.len, max);
        break;
    case GGUF_ARRAY: {
        printf("%s[%" PRIu64 "]", gguf_type_name(kv->arr_type), kv->arr_n);
        uint64_t show = kv->arr_n < 5 ? kv->arr_n : 5;
        if (kv->arr_type == GGUF_ARRAY) {
            printf(" (nested)");
            break;
        }
        printf(" [");
        for (uint64_t i = 0; i < show; i++) {
            if (i)
                printf(", ");
            if (kv->arr_type == GGUF_STRING) {
                struct gguf_str s = gguf_arr_str(kv, i);
                print_str(s.ptr, s.len, 40);
            } else {
                printf("%g", gguf_arr_num(kv, i));
            }
        }
        printf("%s]", kv->arr_n > show ? ", ..." : "");
        break;
    }
    default:
        printf("?");
    }
}

static void gguf_print_kv(const struct gguf *g)
{
    printf("\nmetadata (%" PRIu64 " keys):\n", g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        printf("  %-48.*s %-7s ", (int)kv->key.len, kv->key.ptr,
               kv->type == GGUF_ARRAY ? "array" : gguf_type_name(kv->type));
        print_value(kv, 120);
        putchar('\n');
    }
}

/* The split whose mapping holds t. */
static const struct gguf *split_of(const struct gguf_model *m, const struct gguf_tensor *t)
{
    for (int i = 0; i < m->n_splits; i++) {
        const struct gguf *g = m->splits[i];
        if (t->data >= g->base && t->data < g->base + g->size)
            return g;
    }
    return m->splits[0];
}

static void gguf_print_tensors(const struct gguf_model *m)
{
    printf("\ntensors (%" PRIu64 "):\n", m->n_tensors);
    printf("  %-40s %-6s %-26s %12s %12s\n", "name", "dtype", "shape (ggml order)", "offset", "bytes");
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const struct gguf_tensor *t = m->tensors[i];
        char shape[96];
        int n = snprintf(shape, sizeof shape, "[");
        for (int d = 0; d < (t->n_dims ? t->n_dims : 1); d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        printf("  %-40.*s %-6s %-26s %12" PRIu64 " %12zu\n", (int)t->name.len, t->name.ptr,
               dtype_name(t->dtype), shape, (uint64_t)(t->data - split_of(m, t)->base), t->nbytes);
    }
}

struct hist {
    const char *name;
    int count;
    uint64_t bytes;
};

static void hist_add(struct hist *h, int *n, int cap, const char *name, uint64_t bytes)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(h[i].name, name) == 0) {
            h[i].count++;
            h[i].bytes += bytes;
            return;
        }
    if (*n < cap)
        h[(*n)++] = (struct hist){name, 1, bytes};
}

static void hist_print(const struct hist *h, int n)
{
    for (int i = 0; i < n; i++) {
        printf("  %-8s %6d tensors  ", h[i].name, h[i].count);
        print_size(stdout, h[i].bytes);
        putchar('\n');
    }
}

static void gguf_summary(const struct gguf_model *m)
{
    const struct gguf *g = gguf_model_meta(m);
    struct cerr e = {0};
    struct gguf_str arch = {"", 0}, s;
    gguf_get_str(g, "general.architecture", &arch, &e);
    printf("format:         GGUF v%u, %" PRIu64 " metadata keys, %" PRIu64
           " tensors, alignment %zu\n",
           g->version, g->n_kv, m->n_tensors, g->alignment);
    printf("architecture:   %.*s\n", (int)arch.len, arch.ptr);
    if (gguf_get_str(g, "general.name", &s, &e) == 0)
        printf("name:           %.*s\n", (int)s.len, s.ptr);
    if (gguf_get_str(g, "general.size_label", &s, &e) == 0)
        printf("size label:     %.*s\n", (int)s.len, s.ptr);
    int64_t v;
    if (gguf_get_int(g, "general.file_type", &v, &e) == 0)
        printf("file type:      %s (general.file_type = %" PRId64 ")\n", ftype_name(v), v);

    /* hyperparameters: every scalar key under "<arch>." */
    printf("hparams:\n");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        if (arch.len == 0 || kv->key.len <= arch.len + 1 ||
            memcmp(kv->key.ptr, arch.ptr, arch.len) != 0 || kv->key.ptr[arch.len] != '.')
            continue;
        printf("  %-40.*s ", (int)(kv->key.len - arch.len - 1), kv->key.ptr + arch.len + 1);
        print_value(kv, 60);
        putchar('\n');
    }

    const struct gguf_kv *tok = NULL, *merges = NULL;
    struct gguf_str tm = {"", 0}, pre = {"", 0};
    gguf_get_str(g, "tokenizer.ggml.model", &tm, &e);
    gguf_get_str(g, "tokenizer.ggml.pre", &pre, &e);
    gguf_get_arr(g, "tokenizer.ggml.tokens", &tok, &e);
    gguf_get_arr(g, "tokenizer.ggml.merges", &merges, &e);
    if (tm.len)
        printf("tokenizer:      %.*s", (int)tm.len, tm.ptr);
    else
        printf("tokenizer:      (none)");
    if (pre.len)
        printf(" (pre-tokenizer %.*s)", (int)pre.len, pre.ptr);
    if (tok)
        printf(", %" PRIu64 " tokens", tok->arr_n);
    if (merges)
        printf(", %" PRIu64 " merges", merges->arr_n);
    if (gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v, &e) == 0)
        printf(", bos %" PRId64, v);
    if (gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v, &e) == 0)
        printf(", eos %" PRId64, v);
    putchar('\n');
    if (gguf_get_str(g, "tokenizer.chat_template", &s, &e) == 0)
        printf("chat template:  yes (%" PRIu64 " bytes)\n", s.len);
    else
        printf("chat template:  no\n");

    struct hist h[DT_COUNT];
    int nh = 0;
    uint64_t total = 0, fsize = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        hist_add(h, &nh, DT_COUNT, dtype_name(m->tensors[i]->dtype), m->tensors[i]->nbytes);
        total += m->tensors[i]->nbytes;
    }
    for (int i = 0; i < m->n_splits; i++)
        fsize += m->splits[i]->size;
    printf("tensors:        %" PRIu64 ", ", m->n_tensors);
    print_size(stdout, total);
    printf(" of weights\n");
    hist_print(h, nh);
    if (m->n_splits > 1)
        printf("splits:         %d files\n", m->n_splits);
    printf("file size:      ");
    print_size(stdout, fsize);
    printf(" (%" PRIu64 " bytes)\n", fsize);
}

static int info_gguf(const char *path, int show_kv, int show_tensors)
{
    struct gguf_model *m = NULL;
    struct cerr e = {0};
    if (gguf_model_open(&m, path, &e)) {
        fprintf(stderr, "cinfer info: %s\n", e.msg);
        return 1;
    }
    printf("file:           %s\n", path);
    gguf_summary(m);
    if (show_kv)
        gguf_print_kv(gguf_model_meta(m));
    if (show_tensors)
        gguf_print_tensors(m);
    gguf_model_close(m);
    return 0;
}

/* ---- HF dir / safetensors -------------------------------------------------------------- */

static void cfg_line(const struct hfcfg *c, const char *key)
{
    int64_t i;
    double d;
    int b;
    const char *s;
    struct cerr e = {0};
    if (hfcfg_int(c, key, &i, &e) == 0)
        printf("  %-32s %" PRId64 "\n", key, i);
    else if (hfcfg_float(c, key, &d, &e) == 0)
        printf("  %-32s %g\n", key, d);
    else if (hfcfg_bool(c, key, &b, &e) == 0)
        printf("  %-32s %s\n", key, b ? "true" : "false");
    else if (hfcfg_str(c, key, &s, &e) == 0)
        printf("  %-32s %s\n", key, s);
}

static void hf_config(const char *dir)
{
    char p[1024];
    struct hfcfg *c = NULL;
    struct cerr e = {0};
    if (fs_join(p, sizeof p, dir, "config.json") || !fs_exists(p)) {
        printf("config.json:    (none)\n");
        return;
    }
    if (hfcfg_load(&c, p, &e)) {
        printf("config.json:    unreadable: %s\n", e.msg);
        return;
    }
    const char *s = NULL;
    const char *arch[8];
    int n = 0;
    if (hfcfg_str(c, "model_type", &s, &e) == 0)
        printf("model_type:     %s\n", s);
    if (hfcfg_str_list(c, "architectures", arch, 8, &n, &e) == 0) {
        printf("architectures: ");
        for (int i = 0; i < n; i++)
            printf(" %s", arch[i]);
        putchar('\n');
    }
    static const char *keys[] = {
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
        "rope_theta", "rms_norm_eps", "layer_norm_eps", "sliding_window",
        "tie_word_embeddings", "torch_dtype", "num_local_experts", "num_experts",
        "num_experts_per_tok", "rope_scaling.rope_type", "rope_scaling.factor",
        "quantization_config.quant_method",
    };
    const char *prefix[] = {"", "text_config."};
    printf("hparams:\n");
    for (int pi = 0; pi < 2; pi++)
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            char k[128];
            snprintf(k, sizeof k, "%s%s", prefix[pi], keys[i]);
            cfg_line(c, k);
        }
    hfcfg_free(c);
}

static void hf_tokenizer(const char *dir)
{
    char p[1024];
    int has_tj = fs_join(p, sizeof p, dir, "tokenizer.json") == 0 && fs_exists(p);
    int has_sp = fs_join(p, sizeof p, dir, "tokenizer.model") == 0 && fs_exists(p);
    printf("tokenizer:      %s%s%s\n", has_tj ? "tokenizer.json" : "",
           has_tj && has_sp ? " + " : "", has_sp ? "tokenizer.model" : (has_tj ? "" : "(none)"));
    struct hfcfg *c = NULL;
    struct cerr e = {0};
    const char *tmpl = NULL;
    int found = 0;
    if (fs_join(p, sizeof p, dir, "tokenizer_config.json") == 0 && fs_exists(p) &&
        hfcfg_load(&c, p, &e) == 0) {
        if (hfcfg_str(c, "chat_template", &tmpl, &e) == 0) {
            printf("chat template:  yes (%zu bytes, tokenizer_config.json)\n", strlen(tmpl));
            found = 1;
        }
        hfcfg_free(c);
    }
    if (!found && fs_join(p, sizeof p, dir, "chat_template.jinja") == 0 && fs_exists(p)) {
        printf("chat template:  yes (chat_template.jinja)\n");
        found = 1;
    }
    if (!found)
        printf("chat template:  no\n");
}

static int info_st(const char *path, int show_tensors)
{
    struct st_model *m = NULL;
    struct cerr e = {0};
    if (st_open(&m, path, &e)) {
        size_t l = strlen(path);
        if (!fs_is_dir(path) && (l < 12 || strcmp(path + l - 12, ".safetensors") != 0))
            fprintf(stderr, "cinfer info: %s: neither a GGUF file nor safetensors (%s)\n", path,
                    e.msg);
        else
            fprintf(stderr, "cinfer info: %s\n", e.msg);
        return 1;
    }
    printf("file:           %s\n", path);
    printf("format:         safetensors\n");
    if (fs_is_dir(path)) {
        hf_config(path);
        hf_tokenizer(path);
    }
    struct hist h[32];
    int nh = 0;
    uint64_t total = 0;
    for (int i = 0; i < st_count(m); i++) {
        const struct st_tensor *t = st_get(m, i);
        hist_add(h, &nh, 32, t->st_dtype, t->nbytes);
        total += t->nbytes;
    }
    printf("tensors:        %d, ", st_count(m));
    print_size(stdout, total);
    printf(" of weights\n");
    hist_print(h, nh);
    if (show_tensors) {
        printf("\ntensors (%d):\n", st_count(m));
        for (int i = 0; i < st_count(m); i++) {
            const struct st_tensor *t = st_get(m, i);
            printf("  %-48s %-8s [", t->name, t->st_dtype);
            for (int d = t->n_dims - 1; d >= 0; d--)
                printf("%" PRId64 "%s", t->ne[d], d ? ", " : "");
            printf("] %zu bytes\n", t->nbytes);
        }
    }
    st_close(m);
    return 0;
}

/* 1 when path is a file starting with the GGUF magic. */
static int is_gguf(const char *path)
{
    if (fs_is_dir(path))
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char m[4] = {0};
    size_t n = fread(m, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(m, "GGUF", 4) == 0;
}

int cmd_info(int argc, char **argv)
{
    int show_kv = 0, show_tensors = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--kv") == 0) {
            show_kv = 1;
        } else if (strcmp(argv[i], "--tensors") == 0) {
            show_tensors = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "cinfer info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 1;
        } else if (path) {
            fprintf(stderr, "cinfer info: more than one MODEL given ('%s', '%s')\n", path, argv[i]);
            return 1;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return 1;
    }
    if (!fs_exists(path)) {
        fprintf(stderr, "cinfer info: %s: no such file or directory\n", path);
        return 1;
    }
    if (is_gguf(path))
        return info_gguf(path, show_kv, show_tensors);
    if (show_kv)
        fprintf(stderr, "cinfer info: --kv applies to GGUF files only\n");
    return info_st(path, show_tensors);
}
