/* structured.h — the request fields that constrain an output, compiled to one grammar.
 *
 * OpenAI chat/completions: response_format {type text | json_object | json_schema
 * {name, schema, strict}}, vLLM's guided_json / guided_regex / guided_choice /
 * guided_grammar and structured_outputs {json, regex, choice, grammar}; Responses:
 * text.format {type json_schema, schema}; Anthropic: output_format {type json_schema,
 * schema}. Forced tool calls (tool_choice required / a named function, Hermes-style
 * templates): the call's name is one of the tools and its arguments follow the tool's
 * parameters schema. A schema cinfer cannot enforce is a 400 naming the field and the
 * keyword (param = the field). Compiled grammars are cached by their source (32 entries,
 * any thread). CINFER_GRAMMAR=0: nothing is compiled into masks — `degraded` is set and
 * `instruction` says in words what the output must be (the caller adds it to the prompt
 * and a Warning header). Runs on the HTTP thread.
 */
#ifndef CINFER_API_STRUCTURED_STRUCTURED_H
#define CINFER_API_STRUCTURED_STRUCTURED_H

#include <jansson.h>

#include "api/oai_req.h"
#include "engine/grammar/gram.h"

struct api_structured {
    struct gram *grammar; /* a reference (owned), or NULL: no constraint or degraded */
    char *prime;          /* bytes the matcher takes before the first token (the forced
                             tool-call opening the prompt already holds), malloc'd or NULL */
    char *trigger;        /* tool_choice auto with strict tools: the grammar waits for this
                             text (the call's opening), malloc'd or NULL */
    int trigger_after;    /* the grammar starts after the trigger (a reasoning block's end) */
    char *open;           /* with trigger (the block's end): the output may open a reasoning
                             block with this first, else the grammar applies from the first
                             token (engine_req.grammar_open), malloc'd or NULL */
    char *instruction;    /* degraded: the constraint in words, malloc'd */
    int degraded;         /* a constraint was asked for but CINFER_GRAMMAR=0 */
};

/* The Warning header value for a degraded request. */
#define API_STRUCTURED_WARNING "299 cinfer \"structured output not enforced (CINFER_GRAMMAR=0)\""

/* OpenAI chat / completions body. 0 (out filled, maybe empty) or -1 with err (400). */
int api_structured_oai(const json_t *body, struct api_structured *out, struct api_error *err);
/* Responses body: text.format. */
int api_structured_responses(const json_t *body, struct api_structured *out, struct api_error *err);
/* Anthropic Messages body: output_format. */
int api_structured_anthropic(const json_t *body, struct api_structured *out, struct api_error *err);
/* A forced tool call (tool_choice 1 required / 2 named `name`) in template family `family`
 * whose prompt ends in `forced` (api_prompt.forced): a grammar for the whole call, primed
 * with `forced`. tool_choice 0 (auto) with tools marked "strict": true: a grammar over
 * those tools that waits for the call's opening (out->trigger). Families without a JSON
 * call format (or, for auto, without an opening marker) leave out empty. Only when out
 * holds no grammar yet. */
int api_structured_tools(int family, const json_t *tools, int tool_choice, const char *name,
                         const char *forced, struct api_structured *out, struct api_error *err);
/* A reasoning model whose prompt leaves a think block open: the constraint starts when the
 * block ends (the trigger is think_close; the grammar takes what follows it). A prompt
 * that leaves no block open, with think_open given and thinking not off (0): the model
 * may open the block itself as its first output (out->open = think_open), else the
 * constraint applies from the first token. No-op without a grammar, with a tool-call
 * grammar (a prime or a trigger), or without think_close. */
int api_structured_after_reasoning(struct api_structured *s, int start_in_reasoning,
                                   int thinking, const char *think_open,
                                   const char *think_close, struct api_error *err);
/* Chat: puts s->instruction into a system message of messages (degraded requests). */
int api_structured_instruct(json_t *messages, const struct api_structured *s);
void api_structured_deinit(struct api_structured *s);

/* 1 unless CINFER_GRAMMAR=0. */
int api_structured_enabled(void);

#endif
