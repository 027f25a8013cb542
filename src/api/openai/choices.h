/* choices.h — an OpenAI response with several choices (n > 1, a completions prompt array).
 *
 * Each choice is a struct oai_out of its own (its text, tool calls, logprobs, echo), made
 * one of the group with oai_out_group: its chunks carry its index and the group's id. The
 * group feeds each choice its engine events and writes what belongs to the whole response:
 * streaming, after the last choice's DONE, the usage chunk (stream_options.include_usage)
 * and `data: [DONE]`; non-streaming, after the last choice, one body with every choice in
 * index order and the summed usage (a prompt counted once however many choices it has, as
 * OpenAI counts it). Choice c of prompt p with n choices a prompt is index p * n + c; with
 * best_of, the n best of a prompt's best_of samples, best first.
 * Pure: no engine, no HTTP. One group per request, the HTTP loop thread.
 */
#ifndef CINFER_API_OPENAI_CHOICES_H
#define CINFER_API_OPENAI_CHOICES_H

#include "api/oai_out.h"

struct oai_choices;

/* A group for n_total generations, n_per_prompt of each prompt, of which n_keep a prompt
 * are returned (best_of: n_per_prompt > n_keep, not streamed; the ones with the highest mean
 * token logprob, as OpenAI ranks them); takes ownership of outs (a malloc'd array) and its
 * n_total encoders (freed with the group, also on failure). Returns 0 or CERR_NOMEM. */
int oai_choices_new(struct oai_choices **out, struct oai_out **outs, int n_total,
                    int n_per_prompt, int n_keep, int kind, int stream, int include_usage,
                    const char *model_id, const char *lane);
void oai_choices_free(struct oai_choices *c);
/* Streaming: every choice's first chunk (role, or the echoed prompt). */
int oai_choices_begin(struct oai_choices *c, struct sbuf *out);
/* Choice i's event. Frames (or at the last DONE the body) go to out. An ERROR of a choice
 * writes its error frame (streaming); the caller ends the response. 0 or CERR_NOMEM. */
int oai_choices_event(struct oai_choices *c, int i, const struct engine_event *ev,
                      struct sbuf *out);

#endif
