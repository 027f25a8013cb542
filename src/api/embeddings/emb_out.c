/* emb_out.c — the embeddings response body (embeddings.h).
 *
 * Written as text directly (a 32 x 384 response is 12k numbers): each float as the
 * shortest %g text that strtof reads back as the same float32, or the base64 of the
 * little-endian float32 bytes (what the OpenAI SDKs decode with numpy.frombuffer(dtype=
 * float32)).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/embeddings/embeddings.h"
#include "util/base64.h"
#include "util/sbuf.h"

static int put_float(struct sbuf *b, float f)
{
    char s[32];
    if (!isfinite(f))
        return sbuf_puts(b, "0.0"); /* cannot happen for finite weights; JSON has no NaN */
    for (int p = 6; p <= 9; p++) {
        snprintf(s, sizeof s, "%.*g", p, (double)f);
        if (strtof(s, NULL) == f)
            break;
    }
    if (!strpbrk(s, ".eE")) /* keep it a JSON real, as jansson writes 1.0 */
        strcat(s, ".0");
    return sbuf_puts(b, s);
}

static int put_json_string(struct sbuf *b, const char *s)
{
    int rc = sbuf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p && !rc; p++) {
        if (*p == '"' || *p == '\\')
            rc = sbuf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            rc = sbuf_printf(b, "\\u%04x", *p);
        else
            rc = sbuf_append(b, (const char *)p, 1);
    }
    return rc ? rc : sbuf_puts(b, "\"");
}

char *emb_response(const struct emb_req *r, const float *vecs, int n_embd, int dims,
                   int renorm, const char *model_id)
{
    struct sbuf b = {0};
    float *v = malloc((size_t)dims * sizeof *v);
    char *b64 = r->base64 ? malloc(base64_encoded_len((size_t)dims * 4)) : NULL;
    int rc = !v || (r->base64 && !b64);
    rc = rc || sbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < r->n_in && !rc; i++) {
        memcpy(v, vecs + (size_t)i * n_embd, (size_t)dims * sizeof *v);
        if (renorm) {
            double ss = 0;
            for (int k = 0; k < dims; k++)
                ss += (double)v[k] * v[k];
            float inv = ss > 0 ? (float)(1.0 / sqrt(ss)) : 0.0f;
            for (int k = 0; k < dims; k++)
                v[k] *= inv;
        }
        rc = sbuf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":",
                         i ? "," : "", i);
        if (r->base64) {
            uint8_t *raw = (uint8_t *)v; /* little-endian hosts only (x86-64, aarch64) */
            base64_encode(raw, (size_t)dims * 4, b64);
            rc = rc || sbuf_printf(&b, "\"%s\"}", b64);
        } else {
            rc = rc || sbuf_puts(&b, "[");
            for (int k = 0; k < dims && !rc; k++)
                rc = (k && sbuf_puts(&b, ",")) || put_float(&b, v[k]);
            rc = rc || sbuf_puts(&b, "]}");
        }
    }
    rc = rc || sbuf_puts(&b, "],\"model\":") || put_json_string(&b, model_id) ||
         sbuf_printf(&b, ",\"usage\":{\"prompt_tokens\":%ld,\"total_tokens\":%ld}}",
                     r->n_tokens, r->n_tokens);
    free(v);
    free(b64);
    if (rc) {
        sbuf_free(&b);
        return NULL;
    }
    return b.p ? b.p : strdup("");
}
