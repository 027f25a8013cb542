/* sampler.h — turns a row of logits into a token id (and its logprobs).
 *
 * Per-request state: the parameters, a copy of logit_bias, the XTC-exempt ids, the token
 * history the penalties look at (one count map per penalty window) and scratch sized for the
 * vocabulary at creation. Order per step (DESIGN.md §5, inventory §4.2): logit_bias ->
 * repetition -> presence -> frequency -> log-softmax (logprobs captured here) -> when T > 0:
 * top_p -> min_p -> XTC -> top_k -> x1/T -> draw; T = 0 is argmax (ties: lowest id).
 * One sampler belongs to one request and is used by one thread at a time.
 */
#ifndef CINFER_ENGINE_SAMPLER_H
#define CINFER_ENGINE_SAMPLER_H

#include <stdint.h>

#include "backend/backend.h"
#include "backend/be_sample.h"
#include "util/err.h"

#define SAMPLER_MAX_TOP_LOGPROBS 11

struct sampler_bias {
    int32_t id;
    float bias; /* added to the logit; -INFINITY bans the token */
};

struct sampler_params {
    float temperature;                    /* 0 = greedy (argmax, lowest id on ties) */
    float top_p;                          /* 1 = off (0 is also off, as the reference) */
    int top_k;                            /* 0 = off; >= n_vocab is off too */
    float min_p;                          /* 0 = off */
    float xtc_probability, xtc_threshold; /* probability 0 = off */
    float repetition_penalty;             /* 1 or 0 = off */
    int repetition_context_size;          /* window in tokens; 0 = whole history */
    float presence_penalty;               /* 0 = off */
    int presence_context_size;
    float frequency_penalty; /* 0 = off */
    int frequency_context_size;
    const struct sampler_bias *logit_bias; /* n_logit_bias entries; copied by sampler_new */
    int n_logit_bias;
    uint64_t seed;
    int top_logprobs; /* -1 = no logprobs, 0 = the sampled token only, 1..11 = k alternatives */
};

/* Fills p with the built-in defaults: temperature 0.7, every filter and penalty off, the
 * three windows 20, no logit_bias, seed 0, top_logprobs -1. */
void sampler_params_default(struct sampler_params *p);

/* Checks every range; on a bad one returns CERR_INVALID with the message a user sees
 * (the reference's text where it has one, e.g. "`min_p` has to be a float in the [0, 1]
 * interval, but is 1.5"). Ranges: temperature [0, 5], top_p [0, 1], top_k >= 0,
 * min_p [0, 1], xtc_threshold [0, 0.5] (when xtc_probability is not 0), xtc_probability
 * [0, 1], repetition_penalty >= 0,
 * presence/frequency_penalty [-2, 2], context sizes >= 0, top_logprobs [-1, 11],
 * logit_bias ids in [0, n_vocab) with non-NaN biases. Returns 0 when all are valid. */
int sampler_params_check(const struct sampler_params *p, int n_vocab, struct cerr *e);

struct sampler;

/* Creates a sampler for a vocabulary of n_vocab ids (runs sampler_params_check first).
 * Copies p and its logit_bias. Returns 0 and *out, or a negative CERR_* (*out = NULL). */
int sampler_new(struct sampler **out, const struct sampler_params *p, int n_vocab, struct cerr *e);
/* Frees s and everything it owns; NULL is a no-op. */
void sampler_free(struct sampler *s);

/* Sets the ids XTC never removes (EOS ids and ids whose piece contains "\n"); copied,
 * replaces an earlier set. Ids outside the vocabulary are ignored. Returns 0 or CERR_NOMEM. */
int sampler_set_xtc_exempt(struct sampler *s, const int32_t *ids, int n);

/* History for the penalties: the prompt (prime, once), then each generated token (accept).
 * Only the last max(window) tokens matter; a window of 0 counts the whole history. Ids
 * outside the vocabulary are ignored. Amortised O(1) per token; memory: up to twice the largest
 * finite window in ids, plus a count map per window (a whole-history one grows with the
 * distinct ids seen). Return 0 or CERR_NOMEM (the history then stops before the failing id). */
int sampler_prime(struct sampler *s, const int32_t *ids, int n);
int sampler_accept(struct sampler *s, int32_t id);

struct sampler_logprob {
    int32_t id;    /* the sampled token */
    float logprob; /* its log-probability */
    int n_top;     /* = top_logprobs (0 when only the sampled token was asked for) */
    int32_t top_id[SAMPLER_MAX_TOP_LOGPROBS]; /* top candidates, descending; ties: lower id */
    float top_lp[SAMPLER_MAX_TOP_LOGPROBS];
};

/* ---- grammar (constrained decoding) ----
 * A sampler with a grammar matcher masks every id the grammar cannot take next (logit set
 * to -inf) after logit_bias and the penalties, before the log-softmax: logprobs describe
 * the masked distribution (DESIGN.md §5). sampler_accept advances the matcher. Such a
 * sampler is never plain greedy (not even while a lazy grammar waits: a decode burst would
 * run past the trigger) and, once masking, never samples from candidates (it needs the
 * row); the backend's op sample may decide it with the grammar's bitset
 * (sampler_device_row with gram_ok, sampler_device_mask). */
struct gram_matcher;
/* Attaches m (the sampler takes ownership; NULL detaches). Returns 0 or CERR_NOMEM (m is
 * then freed). */
int sampler_set_grammar(struct sampler *s, struct gram_matcher *m);
/* Attaches m lazily: no mask until the generated text contains trigger (a tool call's
 * opening); the matcher then takes the text from the trigger on (through the end of the
 * token that completed it) and masks from the next step. A token whose text the grammar
 * refuses there drops the grammar (the row goes on unconstrained). Ownership as above. */
int sampler_set_grammar_lazy(struct sampler *s, struct gram_matcher *m, const char *trigger,
                             int after);
/* after = 1: the matcher takes only the text after the trigger (a reasoning block's end:
 * the constraint starts when the reasoning is over). */
/* Attaches m with an optional reasoning block the model opens itself: masking from the
 * first token, with the ids that start `open` allowed besides; a first token that starts
 * `open` makes the block free until `close`, and m then takes what follows close (see
 * gram_row_new). Ownership as above. */
int sampler_set_grammar_reasoning(struct sampler *s, struct gram_matcher *m, const char *open,
                                  const char *close);
/* The attached matcher or NULL. */
struct gram_matcher *sampler_grammar(const struct sampler *s);
/* The error that ends the request when the row's grammar passed its matcher's work bound
 * (gram_row_over: its masks no longer apply), else NULL; a static string. */
const char *sampler_grammar_error(const struct sampler *s);

/* Samples one token from logits (n_vocab floats). MODIFIES logits in place: on return they
 * hold the processed logits (after logit_bias and the penalties; truncation, XTC and
 * temperature do not touch them). When lp is non-NULL and top_logprobs >= 0, fills lp with
 * the log-softmax of those processed logits (captured before truncation and temperature).
 * The draw uses one uniform derived from (seed, step) and XTC another from its own
 * sub-stream, where step counts the calls to sampler_sample on this sampler: the same seed
 * and logits give the same ids whatever came before. Greedy consumes no randomness.
 * Does NOT push the token into the history (call sampler_accept). No allocation. */
int32_t sampler_sample(struct sampler *s, float *logits, struct sampler_logprob *lp);

/* 1 when sampler_sample on s is the plain argmax of the raw logits (temperature 0, no
 * logit_bias, no penalties), so the argmax may come from elsewhere (the backend); the
 * caller then calls sampler_skip instead of sampler_sample (logprobs need the logits). */
int sampler_is_plain_greedy(const struct sampler *s);
/* Accounts one step without sampling (keeps the step counter as sampler_sample would). */
void sampler_skip(struct sampler *s);
/* CINFER_GRAMMAR_JUMP=1 (jump-forward): 1 and *id when the row's grammar allows exactly one
 * id next (sampling could pick nothing else); the caller appends it as if sampled (after
 * sampler_skip, so seeded draws stay aligned). 0 otherwise, or when the lever is off. */
int sampler_grammar_forced(struct sampler *s, int32_t *id);

/* ---- sampling from candidates (the backend op topcand) instead of the whole row ----
 * A row's candidates are a complete prefix of its ranking: every id whose logit is at or
 * above some bound no lower than max - SAMPLER_CAND_SPAN. The filters top_p / min_p /
 * top_k (and XTC with one of them) walk the ranking from the top and stop early, so unless
 * they run out of candidates the host need not see the other ~128k logits. */

/* The span the candidates must cover (the sampler ranks this far before the rest). */
#define SAMPLER_CAND_SPAN 20.0f
/* sampler_sample_cands could not decide from the candidates: call sampler_sample. */
#define SAMPLER_NEED_FULL (-1)

struct sampler_cands {
    float mx;        /* the row's largest logit (NaN ignored) */
    double sum;      /* sum over the row of e^(logit - mx) */
    int32_t argmax;  /* the sampler_argmax of the row */
    int nc;          /* candidates in c: every id with logit >= some bound >= mx -
                      * SAMPLER_CAND_SPAN (a complete prefix of the ranking); -1 = none */
    const struct be_topcand_ent *c; /* (nc) descending logit, ties by lower id */
};

/* 1 when sampler_sample_cands may answer for s, from its parameters alone: no logit_bias,
 * no penalty, and T = 0, or T > 0 with top_p, min_p or top_k on (XTC alone, or no filter,
 * draws over the whole vocabulary). */
int sampler_wants_cands(const struct sampler *s);

/* Samples one token as sampler_sample would on the row that c describes, when the
 * candidates suffice: the same id (and logprobs, from lse = mx + log(sum) and the first
 * top_logprobs candidates) as sampler_sample on the full row gives whenever that computes
 * the same mx and sum (the engine passes the backend's, whose sum may differ in the last
 * bits). Returns the id and advances the step, or SAMPLER_NEED_FULL without changing s
 * when sampler_wants_cands(s) is 0, there are no candidates (unless T = 0 without
 * logprobs), a filter reached past them, T > 0 with no filter, fewer than top_logprobs
 * candidates, or logprobs of a row whose max is not finite. No allocation. */
int32_t sampler_sample_cands(struct sampler *s, const struct sampler_cands *c,
                             struct sampler_logprob *lp);

/* Fills lp for chosen id of logits row lg (n ids) whose log-sum-exp is lse: its logprob and
 * the k best ids (k clamped to [0, SAMPLER_MAX_TOP_LOGPROBS] and n; descending, ties: lower
 * id; NaNs skipped), each as lg - lse. Shared by the sampler and prompt logprobs. */
void sampler_logprob_fill(const float *lg, int n, double lse, int32_t id, int k,
                          struct sampler_logprob *lp);

/* Builds in *out the candidate set of a full row with the mx and sum sampler_sample
 * computes: the ids within SAMPLER_CAND_SPAN of the max, ranked into buf, cut to the first
 * cap and then before the ids tied with the first one left out (nc = -1 when nothing is
 * left). A host stand-in for the backend op, for tests. logits are not modified; uses s's
 * scratch. */
void sampler_cands_build(struct sampler *s, const float *logits, int cap,
                         struct be_topcand_ent *buf, struct sampler_cands *out);

/* ---- sampling on the device: the backend op sample (backend/be_sample.h) ----
 * Rows whose id the op can decide: greedy (with or without logit_bias and penalties), and
 * temperature-only sampling (no top_p, min_p or top_k; XTC only at steps where its coin does
 * not fire), without logprobs (the caller's check). The op draws the same id as
 * sampler_sample for the same logits and seed (the temperature-only draw is the op's exact
 * integer draw on both sides). */

/* Fills *row, and aux words at aux[0 ..) (at word aux_off of the op's params blob), so that
 * the op sample decides the id sampler_sample would at step (this sampler's step counter)
 * + ahead: hist[0 .. n_hist) is the token history primed and accepted so far (the request's
 * prompt and generated tokens), continued on the device by the row's previous output when
 * ahead is 1 (a queued step). Returns the aux words used (>= 0), or -1 when the op cannot
 * decide this row at that step: a truncation filter, XTC firing, a grammar, or more logit_bias or
 * history than aux_cap words. After the op decided it, call sampler_skip and then
 * sampler_accept with the id (as for a plain greedy row). */
int sampler_device_row(const struct sampler *s, int ahead, const int32_t *hist, int n_hist,
                       struct be_sample_row *row, int32_t *aux, int aux_cap, int aux_off,
                       int gram_ok);
/* gram_ok = 1: a row whose grammar masks (sampler_device_masked) may be decided at ahead 0
 * (its next mask depends on the id decided now, so never at ahead 1); row->mask_off is left
 * 0 and the caller must point it at the row's bitset, written by sampler_device_mask
 * before the op runs, or skip the row. gram_ok = 0: such a row returns -1, as a lazy
 * grammar still waiting for its trigger always does. */
/* 1 when s has a grammar that masks its next step (the op needs the row's bitset). */
int sampler_device_masked(const struct sampler *s);
/* Writes the row's grammar bitset for the op sample ((n_vocab + 31) / 32 words at dst:
 * the mask sampler_sample would apply, all ones where it would apply none). Waits for the
 * grammar's worker. The sampling thread, between sampler_device_row and the op. */
void sampler_device_mask(struct sampler *s, uint32_t *dst);

/* Index of the largest value (lowest index on ties; NaN never wins). */
int32_t sampler_argmax(const float *logits, int n);

/* The uniform in [0, 1) the sampler uses at (seed, step) on stream (0 = the draw, 1 = XTC):
 * splitmix64 finalisers over seed, step and stream (see sampler.c); exported for tests. */
double sampler_uniform(uint64_t seed, uint64_t step, int stream);
/* Its 53-bit integer: sampler_uniform = sampler_uniform_bits / 2^53. */
uint64_t sampler_uniform_bits(uint64_t seed, uint64_t step, int stream);

/* A seed for a request that gave none: the wall clock XOR a per-process Weyl counter, so two
 * requests in the same millisecond differ. Thread-safe. */
uint64_t sampler_seed_auto(void);

#endif
