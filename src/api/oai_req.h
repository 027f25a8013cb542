/* oai_req.h — parse and validate an OpenAI chat-completions or completions request body.
 *
 * Turns the JSON body into a struct oai_req: the messages normalised for the chat template
 * (developer → system, text parts flattened, tool-call arguments parsed to objects), the
 * limits, stop strings and every sampler knob with the precedence request > the defaults
 * the caller passes (server flags > generation_config > built-in). Every rejection is an
 * api_error with the HTTP status and the exact message the reference server uses
 * (server-inventory §3.6, §16.1). Pure: no engine, no HTTP. Any thread; one request each.
 */
#ifndef CINFER_API_OAI_REQ_H
#define CINFER_API_OAI_REQ_H

#include <jansson.h>

#include "engine/sampler.h"

struct api_error {
    int status;          /* HTTP status: 400, 404, 413, 429, 500, 503 */
    const char *type;    /* OpenAI error type, e.g. "invalid_request_error" */
    const char *param;   /* the offending field or NULL */
    const char *code;    /* machine code or NULL */
    char message[512];
};

/* Fills err and returns -1, so callers can `return api_fail(err, 400, "x", "...")`. */
int api_fail(struct api_error *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Appends `what name` to the warning text w (cap bytes, may be NULL): "ignored: server tool
 * web_search, field container" — the value of a Warning header that says what a request
 * sent and cinfer accepted without honouring. */
void api_warn(char *w, size_t cap, const char *what, const char *name);

enum oai_kind { OAI_CHAT = 0, OAI_COMPLETION = 1 };

/* One prompt of a completions request: text (into the body, may hold NULs) or token ids. */
struct oai_prompt {
    const char *text;
    size_t len;
    int32_t *ids; /* owned, or NULL for text */
    int n_ids;
};

/* The most choices one request may ask for (n x prompts). */
#define OAI_MAX_CHOICES 128

struct oai_req {
    int kind;
    int stream;
    json_t *body;          /* the parsed body (owned) */
    json_t *messages;      /* chat: normalised copy for the template (owned) */
    const char *prompt;    /* completions: points into body (may hold NULs: prompt_len) */
    size_t prompt_len;
    int32_t *prompt_ids;   /* completions: a prompt given as token ids (owned), else NULL */
    int n_prompt_ids;
    int n_prompts;         /* completions: prompts given (a prompt array: more than 1) */
    struct oai_prompt *prompts; /* (n_prompts) completions: each prompt (owned); prompt /
                                   prompt_ids above are the first one's */
    int n;                 /* choices per prompt (n), 1..128 */
    int best_of;           /* completions: samples per prompt (>= n); the n with the highest
                              mean token logprob are returned. Chat: n */
    int echo;              /* completions: the prompt is repeated before the text */
    int legacy_logprobs;   /* completions: logprobs given as an integer (the legacy block
                              {tokens, token_logprobs, top_logprobs, text_offset}) */
    int include_usage;     /* stream_options.include_usage: a last chunk with choices [] */
    int single_call;       /* parallel_tool_calls: false — at most one tool call */
    int max_tokens;        /* 0 = not given */
    struct sampler_params sp; /* defaults overlaid with the request's fields */
    struct sampler_bias *bias; /* sp.logit_bias points here (owned) */
    int logprobs;          /* logprobs: true */
    int top_logprobs;      /* -1 unset, else 0..11 */
    char **stops;          /* owned; n_stops entries */
    int n_stops;
    int n_call_stops;      /* the last of stops: the call end tags of single_call, which
                              apply only outside the reasoning block */
    json_t *tools;         /* borrowed from body, NULL when absent or tool_choice "none" */
    json_t *none_tools;    /* tool_choice "none" with tools: those tools (borrowed), else NULL */
    int tool_choice;       /* 0 auto, 1 "required" (some call), 2 a named function */
    const char *tool_name; /* tool_choice 2: the function (points into body) */
    json_t *template_kwargs; /* borrowed: chat_template_kwargs object or NULL */
    int thinking;          /* enable_thinking from the request: -1 unset, 0, 1 */
    int continue_final;    /* continue_final_message: the last (assistant) message is the
                              start of the reply (Anthropic prefill) */
    int seed_given;
};

/* Parses body[0..len) of the given kind. defaults: the server's resolved sampler defaults
 * (seed is replaced by a fresh one unless the request gives "seed"). n_vocab bounds
 * logit_bias ids. On error returns -1 with err filled (r is then deinitialised). */
int oai_parse(struct oai_req *r, int kind, const char *body, size_t len,
              const struct sampler_params *defaults, int n_vocab, struct api_error *err);
void oai_req_deinit(struct oai_req *r);
/* Adds a logit_bias entry that bans id (no-op for id < 0). 0, or -1 out of memory. */
int oai_req_ban(struct oai_req *r, int32_t id);

#endif
