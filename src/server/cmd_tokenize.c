/* cmd_tokenize.c — `cinfer tokenize` and `cinfer detokenize`: the tokenizer on the CLI.
 *
 * tokenize prints the ids of a text as one JSON array line; detokenize prints the text of
 * a list of ids exactly (no newline added, like `cinfer render`). MODEL is anything
 * tok_load() accepts: a .gguf, tokenizer.json(.gz), tokenizer.model or a HF model folder.
 * Errors go to stderr: exit 1 for a load/encode/decode failure, 2 for a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/commands.h"
#include "tokenizer/tok.h"
#include "util/fs.h"

static void usage_tok(FILE *f)
{
    fprintf(f,
            "usage: cinfer tokenize MODEL (--text TEXT | --file FILE) [options]\n"
            "\n"
            "Prints the token ids of TEXT (or of FILE's bytes; '-' = stdin) as a JSON array.\n"
            "MODEL is a .gguf file, a tokenizer.json (or .json.gz), a SentencePiece\n"
            "tokenizer.model, or a Hugging Face model directory.\n"
            "\n"
            "options:\n"
            "  --special        special-token strings in the text (e.g. <|im_start|>) become\n"
            "                   their ids; without it they are tokenized as plain text\n"
            "  --add-special    add BOS/EOS as the model's post-processor / add_bos says\n"
            "  --pieces         print [[id, \"piece\"], ...] instead of bare ids\n"
            "  -h, --help       this text\n"
            "\n"
            "Text that is not valid UTF-8 is repaired first (each invalid sequence becomes\n"
            "U+FFFD), as Python's bytes.decode(\"utf-8\", \"replace\") does.\n");
}

static void usage_detok(FILE *f)
{
    fprintf(f,
            "usage: cinfer detokenize MODEL --ids 1,2,3 [options]\n"
            "\n"
            "Prints the text of the ids exactly (no newline is added). --ids accepts\n"
            "comma- or space-separated integers, optionally inside [ ].\n"
            "\n"
            "options:\n"
            "  --skip-special   drop special tokens (BOS, EOS, <|im_end|>, ...)\n"
            "  -h, --help       this text\n");
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static int load_model(const char *path, struct tok **t)
{
    struct cerr e = {0};
    if (tok_load(t, path, &e) != 0) {
        fprintf(stderr, "cinfer: cannot load a tokenizer from %s: %s\n", path, e.msg);
        return 1;
    }
    return 0;
}

static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n - 1, stdin);
        n += r;
        if (r == 0)
            break;
        if (cap - n < 2) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap *= 2;
        }
    }
    if (b)
        b[n] = 0;
    *len = n;
    return b;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL;
    int flags = 0, pieces = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_tok(stdout);
            return 0;
        } else if (!strcmp(a, "--text") && i + 1 < argc)
            text = argv[++i];
        else if (!strcmp(a, "--file") && i + 1 < argc)
            file = argv[++i];
        else if (!strcmp(a, "--special"))
            flags |= TOK_PARSE_SPECIAL;
        else if (!strcmp(a, "--add-special"))
            flags |= TOK_ADD_SPECIAL;
        else if (!strcmp(a, "--pieces"))
            pieces = 1;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "cinfer tokenize: unknown or incomplete option '%s'\n\n", a);
            usage_tok(stderr);
            return 2;
        } else if (!model)
            model = a;
        else {
            fprintf(stderr, "cinfer tokenize: unexpected argument '%s'\n\n", a);
            usage_tok(stderr);
            return 2;
        }
    }
    if (!model || (!text == !file)) {
        fprintf(stderr, "cinfer tokenize: need MODEL and exactly one of --text / --file\n\n");
        usage_tok(stderr);
        return 2;
    }
    char *buf = NULL;
    size_t len = 0;
    if (file) {
        struct cerr e = {0};
        if (!strcmp(file, "-"))
            buf = read_stdin(&len);
        else if (fs_read_all(file, &buf, &len, &e) != 0) {
            fprintf(stderr, "cinfer tokenize: %s\n", e.msg);
            return 1;
        }
        if (!buf) {
            fprintf(stderr, "cinfer tokenize: cannot read stdin\n");
            return 1;
        }
    } else
        len = strlen(text);
    struct tok *t = NULL;
    if (load_model(model, &t)) {
        free(buf);
        return 1;
    }
    int32_t *ids = NULL;
    int n = 0;
    struct cerr e = {0};
    int rc = tok_encode(t, buf ? buf : text, len, flags, &ids, &n, &e);
    if (rc) {
        fprintf(stderr, "cinfer tokenize: %s\n", e.msg);
    } else {
        fputc('[', stdout);
        for (int i = 0; i < n; i++) {
            if (i)
                fputs(", ", stdout);
            if (pieces) {
                printf("[%d, ", ids[i]);
                json_str(stdout, tok_piece(t, ids[i]));
                fputc(']', stdout);
            } else
                printf("%d", ids[i]);
        }
        fputs("]\n", stdout);
    }
    free(ids);
    free(buf);
    tok_free(t);
    return rc ? 1 : 0;
}

/* Parses "1,2,3", "1 2 3" or "[1, 2, 3]". Returns the count or -1. */
static int parse_ids(const char *s, int32_t **out)
{
    size_t cap = 16;
    int n = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return -1;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '[' || *p == ']' || *p == '\n' || *p == '\t')
            p++;
        if (!*p)
            break;
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x > INT32_MAX) {
            free(v);
            return -1;
        }
        if ((size_t)n == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[n++] = (int32_t)x;
        p = end;
    }
    *out = v;
    return n;
}

int cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL, *ids_s = NULL;
    int flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_detok(stdout);
            return 0;
        } else if (!strcmp(a, "--ids") && i + 1 < argc)
            ids_s = argv[++i];
        else if (!strcmp(a, "--skip-special"))
            flags |= TOK_SKIP_SPECIAL;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "cinfer detokenize: unknown or incomplete option '%s'\n\n", a);
            usage_detok(stderr);
            return 2;
        } else if (!model)
            model = a;
        else {
            fprintf(stderr, "cinfer detokenize: unexpected argument '%s'\n\n", a);
            usage_detok(stderr);
            return 2;
        }
    }
    if (!model || !ids_s) {
        fprintf(stderr, "cinfer detokenize: need MODEL and --ids\n\n");
        usage_detok(stderr);
        return 2;
    }
    int32_t *ids = NULL;
    int n = parse_ids(ids_s, &ids);
    if (n < 0) {
        fprintf(stderr, "cinfer detokenize: --ids must be non-negative integers: '%s'\n", ids_s);
        return 2;
    }
    struct tok *t = NULL;
    if (load_model(model, &t)) {
        free(ids);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    struct cerr e = {0};
    int rc = tok_decode(t, ids, n, flags, &text, &len, &e);
    if (rc)
        fprintf(stderr, "cinfer detokenize: %s\n", e.msg);
    else
        fwrite(text, 1, len, stdout);
    free(text);
    free(ids);
    tok_free(t);
    return rc ? 1 : 0;
}
