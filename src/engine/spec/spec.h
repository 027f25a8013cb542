/* spec.h — speculative decoding: draft proposers and the policy that sizes drafts.
 *
 * The engine (engine.c, sched.c) asks, each step, for draft tokens for its decode rows; the
 * target model then scores the row's last token and its k drafts in one forward (k + 1
 * logits rows) and the engine keeps the drafts that the row's own sampler reproduces
 * (spec_engine.c). This module knows nothing of the engine's queues: it proposes tokens and
 * learns from how many were accepted.
 *
 * Kinds:
 * - ngram: prompt lookup. The trailing k-gram of the request's tokens (k from ngram_max down
 *   to ngram_min) is searched in the request's own earlier tokens, longest first, first
 *   occurrence wins; the tokens after it are the draft (up to n_draft).
 * - suffix: the longest trailing match (up to SPEC_SUFFIX_MAX_MATCH tokens) over the request
 *   and the server's recent finished outputs; every occurrence of that match votes for the
 *   next token, the draft follows the most frequent continuation and stops when the
 *   estimated probability of the whole draft (the product of the vote shares) falls low —
 *   a suffix-tree walk (SuffixDecoding) done over the occurrence list.
 * - two-model: a smaller model with the same vocabulary drafts greedily from its own KV pool
 *   (its own prefix-cache namespace), kept in step with each request (spec_draft.c).
 *
 * Draft length: every draft token carries the probability that it is accepted, estimated per
 * request (and per match length) from measured acceptance; spec_policy keeps a token only
 * while its expected yield pays for the extra row it adds to the step at the step's current
 * size (a linear step-cost model, --spec cost), so a single row drafts eagerly, a full batch
 * only confident drafts, and prose with nothing to copy drafts almost never.
 *
 * Lifetimes: struct spec per engine (engine thread only after creation), struct spec_req per
 * request.
 */
#ifndef CINFER_ENGINE_SPEC_SPEC_H
#define CINFER_ENGINE_SPEC_SPEC_H

#include <stdint.h>

#include "engine/sampler.h"
#include "kv/kv_pool.h"
#include "model/model.h"
#include "util/err.h"

enum spec_kind { SPEC_NONE = 0, SPEC_NGRAM, SPEC_SUFFIX, SPEC_TWO_MODEL };

#define SPEC_MAX_DRAFT 32        /* --num-draft-tokens upper bound */
#define SPEC_SUFFIX_MAX_MATCH 24 /* longest context the suffix proposer matches */
#define SPEC_BUCKETS 4           /* acceptance estimates per match-length bucket */

struct spec_config {
    int kind;                  /* enum spec_kind; SPEC_NONE = off */
    int n_draft;               /* most draft tokens per row and step (0 = the kind's default) */
    int ngram_min, ngram_max;  /* ngram: trailing k-gram sizes tried (default 1 and 3) */
    const struct model *draft; /* two-model: the draft model (borrowed; outlives the engine) */
    float step_cost;           /* cost of one more token in a step, relative to a one-token
                                * step (0 = measured, see spec_step_cost) */
    float step_cost_default;   /* before enough steps were measured (0: 0.25) */
    float draft_cost;          /* two-model: a draft forward's cost relative to a target decode
                                * (0 = measured, see spec_draft_cost) */
    float draft_cost_default;  /* before it was measured (the ratio of their weight bytes) */
    int adaptive;              /* 1 (default via spec_config_default) = size drafts by the
                                * policy; 0 = always draft the most (tests, A/B) */
    float draft_temp_scale;    /* two-model, sampled rows: the draft samples at the request's
                                * temperature times this (0 = 1; tests flatten q with it) */
    int kv_dtype, block_size;  /* two-model: the draft pool's KV layout */
    int draft_blocks;          /* two-model: its pool size in blocks */
    int max_seqs, n_ctx;       /* two-model: sequences and context it must hold */
    int burst_cost;            /* the policy compares drafting with a decode burst where the
                                * step would burst (spec_set_burst_base; CINFER_SPEC_BURST_COST,
                                * default 1) */
    int lookup;                /* two-model: a row whose trailing k-gram (ngram_max down to
                                * ngram_min) appears earlier in its tokens drafts the tokens
                                * after it (prompt lookup, no draft-model forward) when that
                                * yields more per step time than the model's drafts at the
                                * measured acceptances and costs (--draft-lookup; default 1;
                                * not for rows that sample from the draft) */
    int lookup_draft;          /* two-model: most tokens a lookup drafts (default 10) */
    int bucket;                /* verify steps are padded to spec_bucket_size tokens (the
                                * engine's CINFER_SPEC_BUCKET; default on where steps are
                                * queued: a GPU): the policy prices a draft at the padded size */
};

/* The size a decode-only step of n tokens that holds drafts is padded to when
 * spec_config.bucket is on: the next power of two, at least 2 (few shapes of verify step, so
 * a device replays each as a recorded graph). */
int spec_bucket_size(int n);

/* Fills c for kind: n_draft 10 for ngram and suffix, 3 for two-model; ngram 1..3;
 * adaptive on; step_cost 0 (the backend's default). */
void spec_config_default(struct spec_config *c, int kind);
/* "none", "ngram", "suffix", "two-model". */
const char *spec_kind_name(int kind);
/* Parses a --draft-kind value. Returns the kind, or -1 with the message a user sees in e
 * (the reference's model-specific kinds are named and refused). */
int spec_kind_parse(const char *s, struct cerr *e);
/* Checks the flag combination: ngram/suffix with a draft model, two-model without one, a
 * draft model whose vocabulary differs from the target's (tok_same: 1 when the two
 * tokenizers map every id to the same piece, as the caller found). Returns 0 or
 * CERR_INVALID with a message naming the flags. */
int spec_config_check(const struct spec_config *c, const struct model *target, int tok_same,
                      struct cerr *e);

struct spec;
struct spec_req;

/* Counters for /stats and /metrics. */
struct spec_stats {
    int kind, n_draft;
    long drafted, accepted, rounds; /* draft tokens scored / kept; verify rows run */
    long draft_calls;               /* two-model: draft-model forwards */
    long suffix_tokens;             /* suffix: tokens in the finished-output corpus */
    long lookup_drafted, lookup_accepted; /* two-model: of drafted / accepted, the prompt
                                           * lookup's (spec_config.lookup) */
    float step_cost;                /* the policy's step-cost slope now */
    float draft_cost;               /* two-model: a draft forward / a target decode step */
    float step_ms, draft_ms;        /* measured: a one-token target step (the fitted line at
                                     * n = 1), a one-token draft forward (0 = not yet) */
};

int spec_new(struct spec **out, const struct spec_config *c, int n_vocab, struct cerr *e);
void spec_free(struct spec *s);
const struct spec_config *spec_config_of(const struct spec *s);
void spec_get_stats(const struct spec *s, struct spec_stats *out);
/* The step-cost slope the policy uses: spec_config.step_cost when given (or
 * CINFER_SPEC_STEP_COST), else measured — per step size a low quantile of the recent times
 * (down fast, up slowly: robust to steps the OS stalled), a weighted least-squares line
 * t = a + b n through the sizes seen, slope b over the one-token step (measured, else a + b),
 * clamped to [0.05, 1] — once steps of different sizes have been seen, else the backend's
 * default. */
float spec_step_cost(const struct spec *s);
/* Two-model: a draft forward's cost relative to a one-token target step: spec_config's
 * draft_cost when given (or CINFER_SPEC_DRAFT_COST), else measured — a low quantile of the
 * one-row one-token draft forwards' times (robust as the step times are) over the target's
 * one-token step — once both are known, else draft_cost_default. */
float spec_draft_cost(const struct spec *s);
/* A decode-only step of n_tok tokens took `seconds` (feeds the measured step cost and the
 * step-time curve the policy reads: per size a low quantile of its recent times; a size not
 * seen for 512 decode steps is forgotten, so a machine whose load changed is re-measured). */
void spec_step_time(struct spec *s, int n_tok, double seconds);
/* A step of a decode burst with n_tok rows took `seconds` from the end of the step before
 * (queued behind it: the device's time, no host gap). */
void spec_burst_time(struct spec *s, int n_tok, double seconds);
/* The host spent `seconds` between the end of a step it waited for and the next step's
 * start (sampling, verifying, streaming, planning: what a burst hides). */
void spec_gap_time(struct spec *s, double seconds);
/* Whether the step about to be planned would run in a decode burst without drafts (every
 * row a plain decode row the backend can decide). Then, once burst steps and gaps were
 * measured (spec_config.burst_cost), the policy holds drafts to that: a step with drafts
 * costs T(n_tok + D) plus the host's gap, a step without them a burst step's time. */
void spec_set_burst_base(struct spec *s, int on);
/* What one more token costs in a step of n tokens, relative to a one-token step, read on
 * the measured curve (the linear model's slope before it is known); clamped to [0.01, 4]. */
float spec_step_marginal(const struct spec *s, int n);

/* Per-request state; sp: the request's sampling parameters (NULL = greedy). NULL from
 * spec_req_new means out of memory. A two-model request whose sampler draws from the whole
 * processed distribution (T > 0, no top_p / top_k / min_p / XTC) has its drafts sampled
 * from the draft model's distribution q and verified by full rejection sampling
 * (spec_reject); every other row drafts greedily (a one-point proposal, verified by the
 * row's own sampler). */
struct spec_req *spec_req_new(struct spec *s, const struct sampler_params *sp);
/* 1 when draft j of q's last proposal was sampled from q (verify it with spec_reject). */
int spec_req_sampled(const struct spec_req *q, int j);
/* Full speculative rejection sampling (Leviathan et al. 2023, Chen et al. 2023) of draft j
 * of q's last proposal, the token at position pos: lg holds the target's processed logits
 * there (the request's sampler ran on the row: bias, penalties, grammar mask applied), so
 * that the target's distribution is p = softmax(lg / T). Accepts the draft d with
 * probability min(1, p(d) / q(d)) (*accepted = 1, returns d), else returns a draw from
 * norm(max(0, p - q)). The output token is distributed as p, whatever q. The uniforms come
 * from the request's seed and pos (streams of their own). *lse: log-sum-exp of lg (T = 1),
 * for the emitted token's logprob. */
int32_t spec_reject(const struct spec_req *q, int j, const float *lg, int n_vocab, int pos,
                    int *accepted, double *lse);
/* Releases the request's state (and its draft-model KV). */
void spec_req_free(struct spec *s, struct spec_req *q);

/* Proposes draft tokens to follow tokens[0..n) into out (at most --num-draft-tokens and at
 * most max: the tokens the request may still generate after the next one), and the
 * probability that each prefix out[0..j] is accepted into p[j] (non-increasing). Returns the
 * count (0: nothing to propose). For two-model this runs the draft model — for a request
 * whose draft lags behind what it generated (the draft sat out), only when drafting over the
 * max tokens left is expected to pay for computing those tokens. */
int spec_propose(struct spec *s, struct spec_req *q, const int32_t *tokens, int n, int max,
                 int32_t *out, float *p);
/* The verify result of the last proposal: drafted tokens scored, accepted of them; n_valid =
 * tokens of the request now final (the draft model's KV is rolled back to it). drafted = 0:
 * the row ran without drafts. q = NULL (the request ended): the server-wide counts only. */
void spec_observe(struct spec *s, struct spec_req *q, int drafted, int accepted, int n_valid);
/* A request ended: its tokens (prompt n_prompt, then generated up to n) feed the suffix
 * corpus. */
void spec_req_done(struct spec *s, struct spec_req *q, const int32_t *tokens, int n_prompt, int n);

/* spec_propose for the decode rows i < n of a step that holds n_tok tokens: request q[i],
 * its tokens t[i][0..nt[i]), max[i] as spec_propose's; the drafts into out[i], their prefix
 * probabilities into p[i], the counts into m[i]. Two-model drafts the rows together (one
 * draft forward a draft position over the rows that draft; which rows and how deep: the
 * plan that maximises the step's expected tokens per second, the draft's forwards counted;
 * at most SPEC_DRAFT_ROWS (64) rows draft, the rest get m[i] = 0). */
void spec_propose_rows(struct spec *s, int n, struct spec_req *const *q, const int32_t *const *t,
                       const int *nt, const int *max, int32_t *const *out, float *const *p, int *m,
                       int n_tok);

/* Whether to ask for drafts at all this step, with n_decode decode rows in a step of n_tok
 * tokens: always for the model-free kinds (the policy sizes them); two-model while no prompt
 * is being computed in the step (its plan, spec_propose_rows, decides the rest). */
int spec_step_wants(const struct spec *s, int n_decode, int n_tok);

/* The policy: rows' candidate drafts (row i offers m[i] tokens whose prefix acceptance
 * probabilities are p[i][0..m[i]), non-increasing) on top of a step that already has n_tok
 * tokens; writes the kept count of each row into k[i] (a prefix of its offer; budget caps
 * the kept total). Taking draft tokens in order of probability, it keeps the count D that
 * maximises the expected tokens per second of the step, value(D) / T(n_tok + D): every fed
 * token is worth 1 and each kept draft its p; T is the measured step-time curve
 * (spec_step_at), so a token is kept only while its p pays for what a token costs at this
 * step's size (with spec_config.bucket, T is read at the size the step is padded to). Nothing to gain: no drafts (a plain step). Not adaptive: as many as budget
 * allows. Remembers n_rows (the probe interval scales with it). */
void spec_policy(struct spec *s, int n_rows, const int *m, const float *const *p, int n_tok,
                 int budget, int *k);

#endif
