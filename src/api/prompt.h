/* prompt.h — build the token ids of a request: chat template rendering + tokenization.
 *
 * Chat: the normalised messages (oai_req) go through the model's HF chat template with
 * add_generation_prompt, tools, bos/eos token strings, the request's chat_template_kwargs
 * and enable_thinking resolved by precedence (request kwargs > reasoning_effort > server
 * --thinking > the template's own default). The text is tokenized with special tokens
 * parsed and no BOS added (the template writes it); a doubled BOS is dropped.
 * Completions: the raw prompt with the tokenizer's own BOS rule. Any thread.
 */
#ifndef CINFER_API_PROMPT_H
#define CINFER_API_PROMPT_H

#include <stdint.h>

#include "api/oai_req.h"
#include "template/tmpl.h"
#include "tokenizer/tok.h"

struct api_model {
    const char *id;          /* the model id echoed in responses */
    const struct tok *tk;
    const struct tmpl *tmpl; /* NULL: the model has no chat template */
    const char *bos_token, *eos_token; /* template variables; may be NULL */
    const char *think_open, *think_close; /* NULL: no think tags */
    int default_thinking;    /* server --thinking: -1 unset, 0, 1 */
    int tc_template_family;  /* enum tc_family the chat template teaches (forced calls) */
    int keep_tools_on_none;  /* tool_choice "none": render the tools anyway (no parsing; the
                                call markup's opening token is banned: api_prompt.ban) */
    int n_ctx;
};

struct api_prompt {
    int32_t *ids;            /* malloc'd */
    int n;
    int start_in_reasoning;  /* the rendered prompt leaves a think block open */
    const char *think_open, *think_close; /* chat: the model's think tags (api_model's), or
                                             NULL */
    int thinking;            /* resolved enable_thinking: -1 unset, 0, 1 */
    char *forced;            /* tool_choice required/named: the call's opening markup appended
                                to the prompt, which the output parser must see first
                                (malloc'd, or NULL) */
    int n_replayed;          /* ids spliced in from the exact generated history (genhist.h) */
    int32_t ban;             /* an id the sampler must never pick (tool_choice "none" with the
                                tools kept: the token that opens a call), or -1 */
};

/* The opening markup that forces a tool call in the given template family (named: that
 * function, else the model picks one), or NULL when the family has none. malloc'd. */
char *api_forced_call_prefix(int family, const char *name);

/* Renders and tokenizes a chat request. On failure: 400 "prompt build failed: <why>". */
int api_chat_prompt(const struct api_model *m, const struct oai_req *r, struct api_prompt *out,
                    struct api_error *err);
/* Tokenizes a raw completion prompt of len bytes (BOS as the tokenizer adds it). */
int api_completion_prompt(const struct api_model *m, const char *prompt, size_t len,
                          struct api_prompt *out, struct api_error *err);
/* Renders a chat request to text only (for tests and count_tokens). *text malloc'd, its
 * length in *text_len when text_len is not NULL (the text may hold NUL bytes: a message
 * with a \u0000 escape). */
int api_chat_render(const struct api_model *m, const json_t *messages, const json_t *tools,
                    const json_t *kwargs, int thinking, char **text, size_t *text_len,
                    struct api_error *err);
/* The ids a chat request of these messages would get (render with the generation prompt,
 * then the same tokenization as api_chat_prompt: exact generated history spliced, a doubled
 * BOS dropped), without tool_choice forcing or continue_final_message. *ids malloc'd. */
int api_chat_ids(const struct api_model *m, const json_t *messages, const json_t *tools,
                 const json_t *kwargs, int thinking, int32_t **ids, int *n,
                 struct api_error *err);

#endif
