/* tok.h — text <-> token ids, with the semantics of Hugging Face `tokenizers`.
 *
 * One struct tok holds a vocabulary plus the pipeline that tokenizer.json describes:
 * added tokens -> normalizer -> pre-tokenizer -> model (BPE, byte-level or SentencePiece
 * style with byte fallback) -> post-processor, and a decoder chain for the way back.
 * Loaded from tokenizer.json (+ tokenizer_config.json), a SentencePiece tokenizer.model,
 * or the tokenizer.ggml.* keys of a GGUF file. Immutable after load: encode/decode may
 * run concurrently from any thread. Input that is not valid UTF-8 is first repaired the
 * way Python's bytes.decode("utf-8", "replace") does (each maximal invalid subpart
 * becomes U+FFFD), which is what a Python caller of the reference would pass.
 */
#ifndef CINFER_TOKENIZER_TOK_H
#define CINFER_TOKENIZER_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct gguf;
struct tok; /* immutable after load; thread-safe for concurrent encode/decode */

enum {
    TOK_ADD_SPECIAL = 1 << 0,   /* encode: add BOS/EOS per the post-processor / add_bos */
    TOK_PARSE_SPECIAL = 1 << 1, /* encode: special-token strings in the text become ids */
    TOK_SKIP_SPECIAL = 1 << 2,  /* decode: drop special (control) tokens */
    TOK_RAW_BYTES = 1 << 3,     /* decode: keep the bytes as decoded, even when they are not
                                   valid UTF-8 (one token of a split character) */
};

/* Loads a tokenizer from path: a .gguf file, a tokenizer.json (optionally .json.gz, with
 * tokenizer_config.json beside it), a SentencePiece tokenizer.model, or a Hugging Face
 * model directory. On success *out is owned by the caller (tok_free). */
int tok_load(struct tok **out, const char *path, struct cerr *e);
/* Builds a tokenizer from the tokenizer.ggml.* keys of an opened GGUF; *out does not
 * reference g after return. */
int tok_load_gguf(struct tok **out, const struct gguf *g, struct cerr *e);
/* From tokenizer.json text (and optional tokenizer_config.json text, may be NULL). */
int tok_load_json_mem(struct tok **out, const char *json, size_t len, const char *config,
                      size_t config_len, struct cerr *e);
/* From the bytes of a SentencePiece .model protobuf. */
int tok_load_spm_mem(struct tok **out, const uint8_t *data, size_t len, struct cerr *e);
void tok_free(struct tok *t);

int tok_vocab_size(const struct tok *t);

/* Encodes text[0..len) into *ids (malloc'd, caller frees; NULL when *n == 0 is allowed
 * only as a non-NULL empty allocation — always free it). Returns 0 or a CERR_* code. */
int tok_encode(const struct tok *t, const char *text, size_t len, int flags, int32_t **ids,
               int *n, struct cerr *e);
/* Decodes ids into *text (malloc'd, NUL-terminated, caller frees), valid UTF-8.
 * Out-of-range ids are an error (CERR_INVALID). flags: TOK_SKIP_SPECIAL, TOK_RAW_BYTES (then
 * the text may hold invalid UTF-8: the raw bytes of a partial character). */
int tok_decode(const struct tok *t, const int32_t *ids, int n, int flags, char **text,
               size_t *len, struct cerr *e);

/* Writes the UTF-8 encoding of code point cp (< 0x110000) to out (4 bytes of room); returns
 * its length. */
int tok_utf8_put(uint32_t cp, char *out);

/* Raw vocabulary string of id as stored in the file (NULL when out of range). */
const char *tok_piece(const struct tok *t, int32_t id);
/* The bytes id adds to the text (byte-level pieces decoded, SentencePiece U+2581 as a space,
 * <0xXX> as its byte) into buf[0..cap); returns the count, or -1 for a special, unused or
 * unknown token or one longer than cap (bytes.c). */
int tok_token_bytes(const struct tok *t, int32_t id, char *buf, int cap);
int32_t tok_bos(const struct tok *t); /* -1 if none */
int32_t tok_eos(const struct tok *t); /* -1 if none */
int32_t tok_eot(const struct tok *t); /* -1 if none */
int32_t tok_pad(const struct tok *t); /* -1 if none */
/* 1 when id ends generation: eos, eot, <|im_end|>, <end_of_turn>, <|eot_id|>, ... */
int tok_is_eog(const struct tok *t, int32_t id);
/* 1 when id is a special/control token (skipped by TOK_SKIP_SPECIAL). */
int tok_is_special(const struct tok *t, int32_t id);
/* Id of an exact vocabulary or added-token string, or -1. */
int32_t tok_find(const struct tok *t, const char *piece);
/* Whether TOK_ADD_SPECIAL adds a BOS / an EOS for this model. */
int tok_adds_bos(const struct tok *t);
int tok_adds_eos(const struct tok *t);

/* Incremental detokenizer: one per output stream (not shared between threads). Push ids
 * one at a time; each call appends to out only text that is complete UTF-8 and final
 * (byte-fallback pieces are held until their character completes; the SentencePiece
 * leading space is handled as the full decode does). The concatenation of all pushes and
 * the final flush equals tok_decode() of all ids, except after a byte-fallback run that
 * turns out invalid once part of it was printed (text already sent is not taken back). */
struct tok_stream;
struct tok_stream *tok_stream_new(const struct tok *t, int flags);
void tok_stream_free(struct tok_stream *s);
/* Returns 0, CERR_INVALID for a bad id, or CERR_LIMIT when cap is too small (nothing is
 * consumed then; retry with a bigger buffer). out is not NUL-terminated. */
int tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t cap, size_t *out_len);
/* Sets context ids (e.g. the prompt's last few tokens) that are never emitted, so the first
 * pushed id decodes as it would after them (SentencePiece keeps its leading space then).
 * Replaces any pending state. 0 or CERR_INVALID / CERR_NOMEM. */
int tok_stream_prime(struct tok_stream *s, const int32_t *ids, int n);
/* Emits whatever is pending (incomplete bytes become U+FFFD as the full decode would) and
 * ends the text: the next push starts a new one. */
int tok_stream_flush(struct tok_stream *s, char *out, size_t cap, size_t *out_len);

#endif
