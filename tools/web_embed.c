/* web_embed.c — build-time generator of the browser page's embedded assets (src/web).
 *
 * Usage: web_embed OUT.c SPEC...   where each SPEC is FLAGS:URLPATH=FILE
 *   FLAGS  '-' plain, 'h' hashed name (URLPATH /assets/app.js is served as
 *          /assets/app.<8 hex>.js with an immutable cache header), 't' template: every
 *          hashed URLPATH appearing in the file is rewritten to its hashed name.
 * Writes OUT.c: one gzip stream (deflate level 9, no timestamp) per file and a table of
 * struct web_asset (src/web/web_assets.h) with the path, content type, strong ETag and
 * sizes. The output depends only on the inputs (reproducible builds). Fails (exit 1, a
 * sentence on stderr) on an unreadable file or an unknown extension. A host tool: it runs
 * at build time only and is not part of the cinfer binary.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct item {
    char flags, path[256], hpath[256], etag[24];
    const char *file;
    unsigned char *data, *gz;
    size_t len, gz_len;
};

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int read_file(const char *f, unsigned char **out, size_t *len)
{
    FILE *fp = fopen(f, "rb");
    if (!fp)
        return -1;
    size_t cap = 1 << 16, n = 0;
    unsigned char *b = malloc(cap);
    size_t k;
    while (b && (k = fread(b + n, 1, cap - n, fp)) > 0) {
        n += k;
        if (n == cap) {
            unsigned char *nb = realloc(b, cap *= 2);
            if (!nb)
                free(b);
            b = nb;
        }
    }
    fclose(fp);
    if (!b)
        return -1;
    *out = b;
    *len = n;
    return 0;
}

static const char *ctype_of(const char *path)
{
    static const char *const map[][2] = {{".html", "text/html; charset=utf-8"},
                                         {".js", "text/javascript; charset=utf-8"},
                                         {".css", "text/css; charset=utf-8"},
                                         {".woff2", "font/woff2"},
                                         {".svg", "image/svg+xml"},
                                         {".png", "image/png"},
                                         {".json", "application/json"},
                                         {".txt", "text/plain; charset=utf-8"}};
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(dot, map[i][0]))
            return map[i][1];
    return NULL;
}

static int gzip_it(struct item *it)
{
    z_stream z = {0};
    if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    size_t cap = deflateBound(&z, it->len) + 64;
    it->gz = malloc(cap);
    if (!it->gz)
        return -1;
    z.next_in = it->data;
    z.avail_in = (uInt)it->len;
    z.next_out = it->gz;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    it->gz_len = cap - z.avail_out;
    deflateEnd(&z);
    return rc == Z_STREAM_END ? 0 : -1;
}

/* Replaces every occurrence of from with to in it->data. */
static int rewrite(struct item *it, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    for (size_t i = 0; i + fl <= it->len;) {
        if (memcmp(it->data + i, from, fl)) {
            i++;
            continue;
        }
        unsigned char *nb = malloc(it->len - fl + tl);
        if (!nb)
            return -1;
        memcpy(nb, it->data, i);
        memcpy(nb + i, to, tl);
        memcpy(nb + i + tl, it->data + i + fl, it->len - i - fl);
        free(it->data);
        it->data = nb;
        it->len = it->len - fl + tl;
        i += tl;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: web_embed OUT.c FLAGS:URLPATH=FILE...\n");
        return 1;
    }
    int n = argc - 2;
    struct item *items = calloc((size_t)n, sizeof *items);
    if (!items)
        return 1;
    for (int i = 0; i < n; i++) {
        struct item *it = &items[i];
        const char *s = argv[i + 2], *eq = strchr(s, '=');
        if (strlen(s) < 3 || s[1] != ':' || !eq || (size_t)(eq - s - 2) >= sizeof it->path) {
            fprintf(stderr, "web_embed: bad spec '%s' (want FLAGS:URLPATH=FILE)\n", s);
            return 1;
        }
        it->flags = s[0];
        memcpy(it->path, s + 2, (size_t)(eq - s - 2));
        it->file = eq + 1;
        if (!ctype_of(it->path)) {
            fprintf(stderr, "web_embed: no content type known for '%s'\n", it->path);
            return 1;
        }
        if (read_file(it->file, &it->data, &it->len)) {
            fprintf(stderr, "web_embed: cannot read '%s'\n", it->file);
            return 1;
        }
        snprintf(it->hpath, sizeof it->hpath, "%s", it->path);
    }
    /* hashed names first, then templates (which name them), then ETags and gzip */
    for (int i = 0; i < n; i++) {
        struct item *it = &items[i];
        if (it->flags != 'h')
            continue;
        const char *dot = strrchr(it->path, '.');
        snprintf(it->hpath, sizeof it->hpath, "%.*s.%08x%s", (int)(dot - it->path), it->path,
                 (unsigned)(fnv1a(it->data, it->len) & 0xffffffffu), dot);
    }
    for (int i = 0; i < n; i++) {
        if (items[i].flags != 't')
            continue;
        for (int j = 0; j < n; j++)
            if (items[j].flags == 'h' && rewrite(&items[i], items[j].path, items[j].hpath))
                return 1;
    }
    FILE *o = fopen(argv[1], "w");
    if (!o) {
        fprintf(stderr, "web_embed: cannot write '%s'\n", argv[1]);
        return 1;
    }
    fprintf(o, "/* generated by tools/web_embed.c — do not edit */\n"
               "#include \"web/web_assets.h\"\n\n");
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        struct item *it = &items[i];
        snprintf(it->etag, sizeof it->etag, "%016llx",
                 (unsigned long long)fnv1a(it->data, it->len));
        if (gzip_it(it)) {
            fprintf(stderr, "web_embed: gzip of '%s' failed\n", it->file);
            return 1;
        }
        total += it->gz_len;
        fprintf(o, "static const unsigned char gz%d[%zu] = {", i, it->gz_len);
        for (size_t k = 0; k < it->gz_len; k++)
            fprintf(o, "%s%u,", k % 24 ? "" : "\n", it->gz[k]);
        fprintf(o, "\n};\n");
    }
    fprintf(o, "\nconst struct web_asset web_assets[] = {\n");
    for (int i = 0; i < n; i++) {
        struct item *it = &items[i];
        fprintf(o, "    {\"%s\", \"%s\", \"\\\"%s\\\"\", gz%d, %zu, %zu, %d},\n", it->hpath,
                ctype_of(it->path), it->etag, i, it->gz_len, it->len, it->flags == 'h');
    }
    fprintf(o,
            "};\nconst int web_n_assets = %d;\nconst unsigned long web_assets_gz_bytes = %zuul;\n",
            n, total);
    if (fclose(o)) {
        fprintf(stderr, "web_embed: write of '%s' failed\n", argv[1]);
        return 1;
    }
    return 0;
}
