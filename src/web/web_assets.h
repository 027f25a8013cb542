/* web_assets.h — the table of the browser page's files, generated at build time by
 * tools/web_embed.c from src/web/app/ and Debian's JavaScript packages (see
 * cmake/web_assets.cmake). Internal to src/web. Every file is stored gzip-compressed; the
 * table is constant process-lifetime data.
 */
#ifndef CINFER_WEB_WEB_ASSETS_H
#define CINFER_WEB_WEB_ASSETS_H

#include <stddef.h>

struct web_asset {
    const char *path;        /* URL path, e.g. "/index.html", "/assets/app.1a2b3c4d.js" */
    const char *ctype;       /* Content-Type */
    const char *etag;        /* strong ETag, quotes included */
    const unsigned char *gz; /* the gzip stream of the file */
    size_t gz_len, raw_len;
    int immutable; /* a content-hashed name: cache for a year, never revalidate */
};

extern const struct web_asset web_assets[];
extern const int web_n_assets;
extern const unsigned long web_assets_gz_bytes;

#endif
