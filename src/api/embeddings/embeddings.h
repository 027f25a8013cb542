/* embeddings.h — the OpenAI embeddings API (POST /v1/embeddings) without HTTP or tensors.
 *
 * emb_parse validates a request body the way OpenAI does (input: a string, an array of
 * strings, an array of token ids, or an array of token-id arrays, at most 2048 inputs,
 * none empty; encoding_format "float" or "base64"; dimensions a positive integer; model and
 * user strings) and keeps the inputs. emb_tokenize turns them into token sequences for the
 * served model: text through its tokenizer with its special tokens ([CLS] ... [SEP]), token
 * arrays wrapped in the same special tokens, each checked against the model's input limit
 * and all together against EMB_MAX_TOKENS.
 * emb_response writes the response (object "list", one "embedding" entry per input in
 * order, usage) with each vector cut to `dims` and renormalized when asked. Every refusal
 * is an api_error (400, the field named in param). Pure; any thread; one request each.
 */
#ifndef CINFER_API_EMBEDDINGS_EMBEDDINGS_H
#define CINFER_API_EMBEDDINGS_EMBEDDINGS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/oai_req.h"

#define EMB_MAX_INPUTS 2048
#define EMB_MAX_TOKENS 300000 /* summed over a request's inputs, as OpenAI's limit */

struct tok;

struct emb_req {
    json_t *body;      /* owned */
    const char *model; /* NULL when not given; points into body */
    int n_in;
    int tokens_given;  /* the inputs are token arrays */
    json_t *inputs;    /* borrowed from body: the array (or the one string / id array) */
    int base64;        /* encoding_format "base64" */
    int dimensions;    /* 0 = not given */
    /* after emb_tokenize: n_in sequences (owned) and their total length */
    int32_t **ids;
    int *lens;
    long n_tokens;
};

/* Parses body[0..len). 0, or -1 with err (400) filled; r is always safe to deinit. */
int emb_parse(struct emb_req *r, const char *body, size_t len, struct api_error *err);

/* The special tokens the served model wraps an input in: pre[0..n_pre) before it and
 * suf[0..n_suf) after it (e.g. [CLS] / [SEP]), from its tokenizer (emb_specials). */
struct emb_specials {
    int32_t pre[4], suf[4];
    int n_pre, n_suf;
};
/* Finds them by encoding a probe text with and without the tokenizer's special tokens. 0,
 * or -1 when the tokenizer's output does not contain the plain encoding. */
int emb_specials(const struct tok *tk, struct emb_specials *sp);

/* Tokenizes r's inputs into r->ids / r->lens: text with tk (TOK_ADD_SPECIAL), token arrays
 * (ids in [0, n_vocab)) wrapped in sp. An input longer than max_len tokens is refused
 * naming the limit. 0, or -1 with err filled (500 when out of memory). */
int emb_tokenize(struct emb_req *r, const struct tok *tk, const struct emb_specials *sp,
                 int n_vocab, int max_len, struct api_error *err);

void emb_req_deinit(struct emb_req *r);

/* The response body (malloc'd, NULL when out of memory) for vecs (n_in, n_embd): each
 * vector cut to its first dims values (dims <= n_embd), then scaled to unit length when
 * renorm is set; "float" as JSON numbers (the shortest text that reads back as the same
 * float32), "base64" as the base64 of the little-endian float32 bytes. */
char *emb_response(const struct emb_req *r, const float *vecs, int n_embd, int dims,
                   int renorm, const char *model_id);

#endif
