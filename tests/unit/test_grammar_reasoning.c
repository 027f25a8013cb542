/* test_grammar_reasoning.c — an optional reasoning block the model opens itself before a
 * constrained answer (sampler_set_grammar_reasoning, gram_row_new with an opening): a row
 * whose first output is the think-open marker writes free text until think-close and then
 * the grammar's text; a row that starts otherwise is constrained from its first token; an
 * opening split over tokens; the API side (api_structured_after_reasoning) respecting
 * thinking off. Tiny vocabulary, greedy sampling. */
#include "harness.h"

#include <math.h>
#include <stdint.h>

#include "api/structured/structured.h"
#include "engine/grammar/gram.h"
#include "engine/grammar/gram_row.h"
#include "engine/sampler.h"

/* ids */
enum { T_OPEN, T_HMM, T_CLOSE, T_LB, T_RB, T_X, T_LT, T_THINKGT, T_NL, T_ALL, T_END, NV };
static const char *BYTES[NV] = {"<think>", "hmm", "</think>", "{", "}", "x", "<", "think>",
                                "\n", "<think>ok</think>{", ""};

static struct gram_vocab *vocab(void)
{
    int len[NV];
    for (int i = 0; i < NV; i++)
        len[i] = i == T_END ? -1 : (int)strlen(BYTES[i]);
    int32_t eos = T_END;
    struct gram_vocab *v = NULL;
    struct cerr e = {0};
    CHECK(gram_vocab_new(&v, NV, BYTES, len, &eos, 1, &e) == 0);
    return v;
}

static struct gram *answer_grammar(void)
{
    const char *s = "root ::= \"{\" \"x\"* \"}\"";
    struct gram *g = NULL;
    struct cerr e = {0};
    CHECK(gram_from_ebnf(&g, s, strlen(s), &e) == 0);
    return g;
}

/* Runs greedy steps: at step k the logits favour prefer[k] (10), then every other id by a
 * fixed order; returns the ids picked in got. */
static void run(struct sampler *s, const int32_t *prefer, int n, int32_t *got)
{
    for (int k = 0; k < n; k++) {
        float lg[NV];
        for (int i = 0; i < NV; i++)
            lg[i] = (float)(NV - i) * 0.1f; /* low id wins among the rest */
        lg[T_HMM] = 5;    /* free text looks best after the preferred one */
        lg[T_RB] = 4;     /* then "}", which the grammar refuses at its start */
        lg[T_END] = 3;
        lg[prefer[k]] = 10;
        got[k] = sampler_sample(s, lg, NULL);
        sampler_accept(s, got[k]);
    }
}

static struct sampler *row(struct gram *g, struct gram_vocab *v)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0;
    struct sampler *s = NULL;
    struct gram_matcher *m = NULL;
    struct cerr e = {0};
    CHECK(sampler_new(&s, &p, NV, &e) == 0);
    CHECK(gram_matcher_new(&m, g, v, &e) == 0);
    CHECK(sampler_set_grammar_reasoning(s, m, "<think>", "</think>") == 0);
    CHECK(!sampler_is_plain_greedy(s));
    int32_t prompt[] = {T_HMM, T_OPEN, T_CLOSE}; /* the prompt is not output */
    sampler_prime(s, prompt, 3);
    return s;
}

static void expect(const char *what, const int32_t *got, const int32_t *want, int n)
{
    for (int k = 0; k < n; k++)
        CHECK_MSG(got[k] == want[k], "%s step %d: got %d (%s) want %d (%s)", what, k, got[k],
                  BYTES[got[k]], want[k], BYTES[want[k]]);
}

/* The first token opens the block: free text (even what the grammar refuses) until the
 * close, then the grammar. */
static void test_opens(void)
{
    struct gram_vocab *v = vocab();
    struct gram *g = answer_grammar();
    struct sampler *s = row(g, v);
    int32_t prefer[] = {T_OPEN, T_RB, T_HMM, T_CLOSE, T_HMM, T_X, T_HMM, T_OPEN};
    int32_t want[] = {T_OPEN, T_RB, T_HMM, T_CLOSE, T_LB, T_X, T_RB, T_END};
    int32_t got[8];
    run(s, prefer, 8, got);
    expect("opens", got, want, 8);
    sampler_free(s);
    gram_unref(g);
    gram_vocab_free(v);
}

/* The first token is not the opening: constrained from it, and no opening later. */
static void test_no_block(void)
{
    struct gram_vocab *v = vocab();
    struct gram *g = answer_grammar();
    struct sampler *s = row(g, v);
    /* "hmm" (free text) is masked at the start: the grammar's "{" beats the opening */
    int32_t prefer[] = {T_OPEN, T_LT};
    int32_t want[] = {T_LB, T_RB, T_END};
    float l0[NV];
    for (int i = 0; i < NV; i++)
        l0[i] = 0;
    l0[T_HMM] = 9;
    l0[T_RB] = 8;
    l0[T_LB] = 2;
    l0[T_OPEN] = 1;
    int32_t got[3];
    got[0] = sampler_sample(s, l0, NULL);
    sampler_accept(s, got[0]);
    run(s, prefer, 2, got + 1); /* "<think>" and "<" refused after the first token */
    expect("no block", got, want, 3);
    sampler_free(s);
    gram_unref(g);
    gram_vocab_free(v);
}

/* The opening over two tokens: after "<" only "think>" may follow; a token holding the
 * opening, the whole block, its end and the answer's start. */
static void test_split_and_whole(void)
{
    struct gram_vocab *v = vocab();
    struct gram *g = answer_grammar();
    struct sampler *s = row(g, v);
    int32_t prefer[] = {T_LT, T_LB, T_RB, T_CLOSE, T_RB};
    int32_t want[] = {T_LT, T_THINKGT, T_RB, T_CLOSE, T_LB};
    int32_t got[5];
    run(s, prefer, 5, got);
    expect("split", got, want, 5);
    sampler_free(s);

    s = row(g, v);
    int32_t prefer2[] = {T_ALL, T_HMM, T_HMM};
    int32_t want2[] = {T_ALL, T_RB, T_END}; /* the grammar has taken "{" already */
    run(s, prefer2, 3, got);
    expect("whole", got, want2, 3);
    sampler_free(s);
    gram_unref(g);
    gram_vocab_free(v);
}

/* The row's bitset at the first step: the grammar's ids and the opening's. */
static void test_first_mask(void)
{
    struct gram_vocab *v = vocab();
    struct gram *g = answer_grammar();
    struct gram_matcher *m = NULL;
    struct cerr e = {0};
    CHECK(gram_matcher_new(&m, g, v, &e) == 0);
    struct gram_row *r = NULL;
    CHECK(gram_row_new(&r, m, NV, "</think>", 1, "<think>") == 0);
    CHECK(gram_row_on(r));
    const uint32_t *bits = gram_row_bits(r);
    CHECK(bits != NULL);
    uint32_t want = 1u << T_OPEN | 1u << T_LB | 1u << T_LT | 1u << T_ALL;
    CHECK_MSG(bits && bits[0] == want, "first mask %#x want %#x", bits ? bits[0] : 0, want);
    int32_t id;
    CHECK(!gram_row_forced(r, &id));
    gram_row_accept(r, T_LT);
    bits = gram_row_bits(r);
    CHECK(bits && bits[0] == 1u << T_THINKGT);
    gram_row_accept(r, T_THINKGT);
    CHECK(!gram_row_on(r)); /* inside the block: free */
    gram_row_accept(r, T_CLOSE);
    CHECK(gram_row_on(r));
    bits = gram_row_bits(r);
    CHECK(bits && bits[0] == 1u << T_LB);
    gram_row_free(r);
    gram_unref(g);
    gram_vocab_free(v);
}

/* The API: a prompt with no open block gets the optional opening unless thinking is off. */
static void test_api(void)
{
    struct api_error err = {0};
    for (int thinking = -1; thinking <= 1; thinking++)
        for (int open_prompt = 0; open_prompt < 2; open_prompt++) {
            struct api_structured st = {0};
            st.grammar = answer_grammar();
            CHECK(api_structured_after_reasoning(&st, open_prompt, thinking, "<think>", "</think>",
                                                 &err) == 0);
            int want_trigger = open_prompt || thinking != 0;
            int want_open = !open_prompt && thinking != 0;
            CHECK_MSG(!!st.trigger == want_trigger && !!st.open == want_open,
                      "thinking %d open prompt %d: trigger %s open %s", thinking, open_prompt,
                      st.trigger ? st.trigger : "-", st.open ? st.open : "-");
            CHECK(!st.trigger || (!strcmp(st.trigger, "</think>") && st.trigger_after == 1));
            api_structured_deinit(&st);
        }
    struct api_structured st = {0}; /* no think markers: nothing */
    st.grammar = answer_grammar();
    CHECK(api_structured_after_reasoning(&st, 0, 1, NULL, NULL, &err) == 0);
    CHECK(!st.trigger && !st.open);
    api_structured_deinit(&st);
}

int main(void)
{
    RUN(test_opens);
    RUN(test_no_block);
    RUN(test_split_and_whole);
    RUN(test_first_mask);
    RUN(test_api);
    return harness_done();
}
