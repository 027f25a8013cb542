/* tmpl.h — the chat-template engine: the Jinja2 subset real Hugging Face templates use.
 *
 * A template is parsed once (tmpl_parse) into an immutable tree, then rendered any number
 * of times, from any number of threads at once (tmpl_render keeps all its state on the
 * caller's stack and in a per-call arena). Rendering follows Python jinja2 as transformers'
 * apply_chat_template configures it (sandboxed, trim_blocks, lstrip_blocks, loopcontrols,
 * tojson(ensure_ascii=False), raise_exception, strftime_now), byte for byte.
 * Hostile templates are bounded: parse nesting, call depth, steps, output and memory.
 */
#ifndef CINFER_TEMPLATE_TMPL_H
#define CINFER_TEMPLATE_TMPL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct tmpl; /* a parsed template, immutable, thread-safe to render */

/* Parses src[0..len) (need not be NUL-terminated). On success *out owns the tree (free
 * with tmpl_free). A syntax error returns CERR_FORMAT with "line N: what" in e. */
int tmpl_parse(struct tmpl **out, const char *src, size_t len, struct cerr *e);
void tmpl_free(struct tmpl *t);

struct tmpl_opts {
    int64_t now_unix; /* the time strftime_now sees (UTC); 0 = the real clock */
    int max_steps;    /* bound on evaluation steps; 0 = default (10 million) */
    size_t max_bytes; /* bound on render memory and output; 0 = default (128 MiB) */
};

/* Renders t with the variables of ctx (a JSON object: messages, tools,
 * add_generation_prompt, bos_token, eos_token and any kwargs such as enable_thinking).
 * o may be NULL. On success *out is a malloc'd NUL-terminated string of *len bytes
 * (caller frees). On failure returns CERR_FORMAT (template error: the raise_exception
 * text verbatim, or "line N: ..." for unknown filters, type errors, undefined access) or
 * CERR_LIMIT (a bound was hit), with *out = NULL. Thread-safe for a shared t. */
int tmpl_render(const struct tmpl *t, const json_t *ctx, const struct tmpl_opts *o, char **out,
                size_t *len, struct cerr *e);

/* Finds the chat template of a model: a GGUF file (tokenizer.chat_template, or
 * tokenizer.chat_template.NAME), a .jinja file, a tokenizer_config.json (chat_template as
 * a string or a list of {name, template}: "default" unless name is given), or a Hugging
 * Face directory (chat_template.jinja, else tokenizer_config.json). name NULL = default.
 * On success *src is malloc'd and NUL-terminated (caller frees). */
int tmpl_source_load(const char *model_path, const char *name, char **src, struct cerr *e);

/* The text of a model's BOS and EOS tokens, as the template sees them (bos_token,
 * eos_token): from a GGUF's tokenizer.ggml.{bos,eos}_token_id + tokens, or from
 * tokenizer_config.json (a string or {"content": ...}) in a HF directory. *bos / *eos are
 * malloc'd, or NULL when the model defines none (a .jinja file defines none). */
int tmpl_special_tokens(const char *model_path, char **bos, char **eos, struct cerr *e);

#endif
