/* test_tokenizer_ref.c — tokenizer parity with reference outputs over a mixed corpus.
 *
 * Always: the committed samples tests/data/tokenizer/NAME.sample.json.gz (written by
 * scripts/tok_reference.py from HF tokenizers / sentencepiece / transformers' GGUF loader).
 * When CINFER_TOK_REF_DIR is set (tests/cli/test_tokenize_ref.sh does it where the pip
 * packages are present): every NAME.ref.json.gz there, i.e. the whole >= 1 MB corpus per
 * tokenizer. Each chunk compares ids with specials as text, ids with specials parsed, ids
 * with BOS/EOS added, the decoded text, and the streaming detokenizer's text.
 * Tokenizers whose file is absent (the real GGUF models under models/) are skipped.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <zlib.h>

#include "harness.h"
#include "tokenizer/tok.h"
#include "util/fs.h"

static int g_chunks, g_skipped_files;

static char *gz_read(const char *path, size_t *len)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b)
            break;
        if (cap - n < (1 << 16)) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
        int r = gzread(f, b + n, (unsigned)(cap - n - 1));
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    gzclose(f);
    if (b)
        b[n] = 0;
    *len = n;
    return b;
}

static const char *resolve(const char *p)
{
    static char buf[1024];
    if (strncmp(p, "fixtures:", 9) == 0)
        return fixture_path(p + 9);
    if (strncmp(p, "repo:", 5) == 0)
        return repo_path(p + 5);
    if (strncmp(p, "models:", 7) == 0) {
        const char *m = getenv("CINFER_MODELS");
        if (m)
            snprintf(buf, sizeof buf, "%s/%s", m, p + 7);
        else
            snprintf(buf, sizeof buf, "%s", repo_path("models"));
        if (!m) {
            size_t l = strlen(buf);
            snprintf(buf + l, sizeof buf - l, "/%s", p + 7);
        }
        return buf;
    }
    return p;
}

static int cmp_ids(const int32_t *a, int n, json_t *b, int *at)
{
    size_t bn = json_array_size(b);
    for (int i = 0; i < n && (size_t)i < bn; i++)
        if (a[i] != (int32_t)json_integer_value(json_array_get(b, (size_t)i))) {
            *at = i;
            return 0;
        }
    *at = n < (int)bn ? n : (int)bn;
    return (size_t)n == bn;
}

static void show(const char *name, const char *what, const char *text, const int32_t *ids, int n,
                 json_t *want, int at)
{
    fprintf(stderr, "%s: %s differ at id %d for chunk \"%.50s...\"\n", name, what, at, text);
    fprintf(stderr, "  got :");
    for (int i = at > 3 ? at - 3 : 0; i < n && i < at + 6; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n  want:");
    for (size_t i = at > 3 ? (size_t)at - 3 : 0; i < json_array_size(want) && i < (size_t)at + 6; i++)
        fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, i)));
    fprintf(stderr, "\n");
}

/* Stream-decodes ids and compares with the full decode. */
static int stream_ok(struct tok *t, const int32_t *ids, int n, const char *full, size_t fl)
{
    struct tok_stream *s = tok_stream_new(t, 0);
    char *acc = malloc(fl + 65536), buf[8192];
    size_t al = 0, bl;
    int ok = s && acc;
    for (int i = 0; ok && i < n; i++) {
        if (tok_stream_push(s, ids[i], buf, sizeof buf, &bl) != 0 || al + bl > fl + 60000)
            ok = 0;
        else {
            memcpy(acc + al, buf, bl);
            al += bl;
        }
    }
    if (ok && tok_stream_flush(s, buf, sizeof buf, &bl) == 0 && al + bl <= fl + 60000) {
        memcpy(acc + al, buf, bl);
        al += bl;
    } else
        ok = 0;
    ok = ok && al == fl && memcmp(acc, full, fl) == 0;
    free(acc);
    tok_stream_free(s);
    return ok;
}

static void check_file(const char *path)
{
    size_t len = 0;
    char *js = gz_read(path, &len);
    CHECK_MSG(js != NULL, "cannot read %s", path);
    if (!js)
        return;
    json_error_t je;
    json_t *doc = json_loadb(js, len, JSON_ALLOW_NUL, &je);
    free(js);
    CHECK_MSG(doc != NULL, "%s: %s", path, je.text);
    if (!doc)
        return;
    const char *name = json_string_value(json_object_get(doc, "name"));
    const char *tp = resolve(json_string_value(json_object_get(doc, "path")));
    if (!fs_exists(tp)) {
        fprintf(stderr, "skip %s: %s not present\n", name, tp);
        g_skipped_files++;
        json_decref(doc);
        return;
    }
    struct tok *t = NULL;
    struct cerr e = {0};
    int rc = tok_load(&t, tp, &e);
    CHECK_MSG(rc == 0, "%s: %s", tp, e.msg);
    if (rc) {
        json_decref(doc);
        return;
    }
    static const struct {
        const char *key;
        int flags;
    } modes[] = {{"plain", 0},
                 {"special", TOK_PARSE_SPECIAL},
                 {"add", TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL}};
    json_t *chunks = json_object_get(doc, "chunks"), *c;
    size_t i;
    int bad[5] = {0}, shown = 0, n_chunks = 0;
    size_t bytes = 0;
    json_array_foreach(chunks, i, c)
    {
        json_t *jt = json_object_get(c, "text");
        const char *text = json_string_value(jt);
        size_t tl = json_string_length(jt);
        bytes += tl;
        n_chunks++;
        int32_t *dec_ids = NULL;
        int dec_n = 0;
        const char *dec_key = json_object_get(c, "special") ? "special" : "plain";
        for (int m = 0; m < 3; m++) {
            json_t *want = json_object_get(c, modes[m].key);
            if (!want)
                continue;
            int32_t *ids = NULL;
            int n = 0, at = 0;
            rc = tok_encode(t, text, tl, modes[m].flags, &ids, &n, &e);
            if (rc || !cmp_ids(ids, n, want, &at)) {
                bad[m]++;
                if (shown++ < 4)
                    show(name, modes[m].key, text, ids, n, want, at);
            }
            if (!strcmp(modes[m].key, dec_key)) {
                dec_ids = ids;
                dec_n = n;
            } else
                free(ids);
        }
        const char *want_dec = json_string_value(json_object_get(c, "decoded"));
        size_t want_dl = json_string_length(json_object_get(c, "decoded"));
        if (want_dec && dec_ids) {
            char *out = NULL;
            size_t ol = 0;
            rc = tok_decode(t, dec_ids, dec_n, 0, &out, &ol, &e);
            if (rc || ol != want_dl || memcmp(out, want_dec, ol) != 0) {
                bad[3]++;
                if (shown++ < 4)
                    fprintf(stderr, "%s: decode differs: got \"%.80s\" want \"%.80s\"\n", name,
                            out ? out : e.msg, want_dec);
            } else if (!stream_ok(t, dec_ids, dec_n, out, ol)) {
                bad[4]++;
                if (shown++ < 4)
                    fprintf(stderr, "%s: stream decode differs for \"%.60s\"\n", name, out);
            }
            free(out);
        }
        free(dec_ids);
    }
    fprintf(stderr, "%-20s %5d chunks %8zu bytes: mismatches plain %d special %d add %d decode %d stream %d\n",
            name, n_chunks, bytes, bad[0], bad[1], bad[2], bad[3], bad[4]);
    CHECK_MSG(bad[0] + bad[1] + bad[2] + bad[3] + bad[4] == 0, "%s: reference mismatches", name);
    g_chunks += n_chunks;
    tok_free(t);
    json_decref(doc);
}

static void check_dir(const char *dir_in, const char *suffix)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", dir_in); /* repo_path() buffers rotate */
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    struct dirent *de;
    char names[64][256];
    int n = 0;
    while ((de = readdir(d)) && n < 64) {
        size_t l = strlen(de->d_name), sl = strlen(suffix);
        if (l > sl && strcmp(de->d_name + l - sl, suffix) == 0)
            snprintf(names[n++], sizeof names[0], "%s", de->d_name);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        char p[2048];
        if (strlen(dir) + strlen(names[i]) + 2 > sizeof p)
            continue;
        snprintf(p, sizeof p, "%.1500s/%.256s", dir, names[i]);
        check_file(p);
    }
}

static void test_samples(void)
{
    g_chunks = 0;
    check_dir(repo_path("tests/data/tokenizer"), ".sample.json.gz");
    CHECK_MSG(g_chunks > 100, "only %d sample chunks checked", g_chunks);
}

static void test_full_reference(void)
{
    const char *dir = getenv("CINFER_TOK_REF_DIR");
    if (!dir) {
        fprintf(stderr, "CINFER_TOK_REF_DIR not set: full-corpus comparison skipped\n");
        return;
    }
    g_chunks = 0;
    check_dir(dir, ".ref.json.gz");
    CHECK_MSG(g_chunks > 1000, "only %d corpus chunks checked", g_chunks);
}

int main(void)
{
    RUN(test_samples);
    RUN(test_full_reference);
    return harness_done();
}
