/* hfconfig.h — reader for Hugging Face JSON object files (config.json,
 * generation_config.json, tokenizer_config.json).
 *
 * The file is parsed once with jansson; values are looked up by dotted path
 * ("rope_scaling.rope_type", "text_config.hidden_size"). Read-only after load: safe to
 * share between threads. Strings returned stay valid until hfcfg_free().
 */
#ifndef CINFER_FORMAT_HFCONFIG_H
#define CINFER_FORMAT_HFCONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct hfcfg; /* a parsed JSON object file */

/* Reads and parses json_path; the root must be a JSON object. On success *out is owned
 * by the caller (hfcfg_free). Errors name the file (and line/column for JSON syntax). */
int hfcfg_load(struct hfcfg **out, const char *json_path, struct cerr *e);
/* Same over text[0..len); label names the source in error messages. */
int hfcfg_parse(struct hfcfg **out, const char *text, size_t len, const char *label,
                struct cerr *e);
void hfcfg_free(struct hfcfg *c);

/* Lookups. key is a dotted path. Return 0 found, 1 absent (also when the value is JSON
 * null), CERR_FORMAT when the value has the wrong type (message names key + file). */
int hfcfg_int(const struct hfcfg *c, const char *key, int64_t *out, struct cerr *e);   /* JSON integer, or a real with integral value */
int hfcfg_float(const struct hfcfg *c, const char *key, double *out, struct cerr *e); /* integer or real */
int hfcfg_bool(const struct hfcfg *c, const char *key, int *out, struct cerr *e);
int hfcfg_str(const struct hfcfg *c, const char *key, const char **out, struct cerr *e); /* valid until hfcfg_free */
/* An int or a list of ints (e.g. eos_token_id): fills up to cap entries, sets *n to the
 * number filled. A list longer than cap returns CERR_LIMIT (first cap entries filled). */
int hfcfg_int_list(const struct hfcfg *c, const char *key, int64_t *out, int cap, int *n,
                   struct cerr *e);
/* A string or a list of strings (e.g. layer_types): fills up to cap, sets *n; a longer
 * list returns CERR_LIMIT. */
int hfcfg_str_list(const struct hfcfg *c, const char *key, const char **out, int cap, int *n,
                   struct cerr *e);
/* The json_t* root object, for callers that need more; owned by c. */
const void *hfcfg_json(const struct hfcfg *c);
/* The label/path the config was loaded from. */
const char *hfcfg_path(const struct hfcfg *c);

#endif
