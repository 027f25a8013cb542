/* test_reasoning.c — the think-tag splitter (api/reasoning.h).
 *
 * Every case is fed whole, split at every byte boundary, byte by byte and in random
 * chunkings; after merging adjacent segments of one kind, all feedings must give the same
 * segments, and those must equal the expected split. Also: disabled passthrough, a prompt
 * that opened the block, flush of partial tags, one block per turn, reasoning_prompt_open
 * (also on generation prompts rendered from the real templates in the test fixtures).
 */
#include "harness.h"

#include <stdint.h>

#include "api/reasoning.h"
#include "template/tmpl.h"

struct seg_log {
    int kind[16]; /* merged segments (adjacent same kind joined), in order */
    char seg[16][4096];
    int n;
};

static void on_emit(int kind, const char *t, size_t n, void *ud)
{
    struct seg_log *L = ud;
    if (L->n > 0 && L->kind[L->n - 1] == kind) {
        size_t cur = strlen(L->seg[L->n - 1]);
        if (cur + n < sizeof L->seg[0])
            memcpy(L->seg[L->n - 1] + cur, t, n), L->seg[L->n - 1][cur + n] = 0;
        return;
    }
    if (L->n >= 16 || n >= sizeof L->seg[0])
        return;
    L->kind[L->n] = kind;
    memcpy(L->seg[L->n], t, n);
    L->seg[L->n][n] = 0;
    L->n++;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* Feeds `in` cut at the given offsets (cuts[0..nc), ascending) and logs the segments. */
static void feed(const char *open, const char *close, int inside, const char *in,
                 const size_t *cuts, int nc, struct seg_log *L)
{
    struct rsn_splitter *s;
    memset(L, 0, sizeof *L);
    if (rsn_new(&s, open, close, inside, NULL) != 0) {
        CHECK(0);
        return;
    }
    size_t n = strlen(in), prev = 0;
    for (int i = 0; i <= nc; i++) {
        size_t at = i < nc ? cuts[i] : n;
        CHECK_EQ_INT(rsn_push(s, in + prev, at - prev, on_emit, L), 0);
        prev = at;
    }
    rsn_flush(s, on_emit, L);
    rsn_free(s);
}

static int same_log(const struct seg_log *a, const struct seg_log *b)
{
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (a->kind[i] != b->kind[i] || strcmp(a->seg[i], b->seg[i]) != 0)
            return 0;
    return 1;
}

/* expected: alternating "R:" / "C:" prefixed strings, NULL-terminated. */
static void check_case(const char *open, const char *close, int inside, const char *in,
                       const char *const *expected)
{
    struct seg_log whole, other;
    feed(open, close, inside, in, NULL, 0, &whole);
    int ne = 0;
    while (expected[ne])
        ne++;
    CHECK_EQ_INT(whole.n, ne);
    for (int i = 0; i < ne && i < whole.n; i++) {
        int k = expected[i][0] == 'R' ? RSN_REASONING : RSN_CONTENT;
        CHECK_EQ_INT(whole.kind[i], k);
        CHECK_STR(whole.seg[i], expected[i] + 2);
    }
    size_t n = strlen(in);
    int bad = 0;
    for (size_t k = 0; k <= n; k++) { /* one cut at every byte boundary */
        feed(open, close, inside, in, &k, 1, &other);
        if (!same_log(&whole, &other) && bad++ < 3)
            fprintf(stderr, "  split at %zu differs for \"%s\"\n", k, in);
    }
    size_t cuts[4096];
    int nc = 0;
    for (size_t k = 1; k < n && nc < 4096; k++)
        cuts[nc++] = k;
    feed(open, close, inside, in, cuts, nc, &other); /* byte by byte */
    if (!same_log(&whole, &other) && bad++ < 3)
        fprintf(stderr, "  byte-by-byte differs for \"%s\"\n", in);
    for (int r = 0; r < 200; r++) { /* random chunkings */
        nc = 0;
        for (size_t k = 1 + rnd() % 4; k < n && nc < 4096; k += 1 + rnd() % 6)
            cuts[nc++] = k;
        feed(open, close, inside, in, cuts, nc, &other);
        if (!same_log(&whole, &other) && bad++ < 3)
            fprintf(stderr, "  random chunking %d differs for \"%s\"\n", r, in);
    }
    CHECK_EQ_INT(bad, 0);
}

#define T "<think>", "</think>"

static void test_qwen3_shape(void)
{
    const char *e[] = {"R:Let me think.\nStep 2.", "C:Hello!", NULL};
    check_case(T, 0, "<think>\nLet me think.\nStep 2.\n</think>\n\nHello!", e);
    const char *e2[] = {"C:Hi.\n", NULL}; /* empty think block (thinking off) leaks nothing */
    check_case(T, 0, "<think>\n\n</think>\n\nHi.\n", e2);
}

static void test_content_before_think(void)
{
    const char *e[] = {"C:Sure. ", "R:plan <b>x</b> < > </thin", "C:Done", NULL};
    check_case(T, 0, "Sure. <think>plan <b>x</b> < > </thin </think>Done", e);
}

static void test_start_inside(void)
{
    /* DeepSeek-R1 distill: the prompt ends with "<think>\n", output starts in reasoning */
    const char *e[] = {"R:Okay, the user asks 2+2.", "C:**4**", NULL};
    check_case(T, 1, "Okay, the user asks 2+2.\n</think>\n\n**4**", e);
    const char *e2[] = {"R:a <think> b", "C:c", NULL}; /* nested open is text */
    check_case(T, 1, "\n a <think> b</think>c", e2);
}

static void test_disabled(void)
{
    const char *e[] = {"C:<think>x</think>\n y", NULL};
    check_case(NULL, NULL, 0, "<think>x</think>\n y", e);
    check_case("", NULL, 1, "<think>x</think>\n y", e);
}

static void test_flush_partials(void)
{
    const char *e1[] = {"C:Hello <thi", NULL};
    check_case(T, 0, "Hello <thi", e1);
    const char *e2[] = {"R:abc\n</thi", NULL};
    check_case(T, 0, "<think>abc\n</thi", e2);
    const char *e3[] = {"R:truncated mid-thought", NULL};
    check_case(T, 0, "<think>\ntruncated mid-thought \n\n", e3);
    const char *e4[] = {"C:<", NULL};
    check_case(T, 0, "<", e4);
    const char *e5[] = {NULL};
    check_case(T, 0, "<think>", e5);
    check_case(T, 0, "", e5);
}

static void test_one_block(void)
{
    /* after the block, tags are text (a model explaining think tags) */
    const char *e[] = {"R:r", "C:use <think> and </think> tags", NULL};
    check_case(T, 0, "<think>r</think> use <think> and </think> tags", e);
    /* a close tag before any open is content */
    const char *e2[] = {"C:a</think>b", NULL};
    check_case(T, 0, "a</think>b", e2);
}

static void test_other_tags(void)
{
    const char *e[] = {"R:x", "C:y", NULL};
    check_case("<|begin_of_thought|>", "<|end_of_thought|>", 0,
               "<|begin_of_thought|>x<|end_of_thought|>y", e);
    const char *e2[] = {"C:<<<", "R:<<", "C:ok", NULL}; /* self-overlapping prefixes */
    check_case("<<x", ">>x", 0, "<<<<<x<<>>x ok", e2);
}

static void test_utf8(void)
{
    const char *e[] = {"R:Grüße 👋", "C:日本語", NULL};
    check_case(T, 0, "<think>Grüße 👋</think>日本語", e);
}

static void test_api(void)
{
    struct rsn_splitter *s = NULL;
    struct cerr e = {0};
    CHECK_EQ_INT(rsn_new(&s, "<think>", NULL, 0, &e), CERR_INVALID);
    CHECK(s == NULL);
    CHECK(strlen(e.msg) > 0);
    CHECK_EQ_INT(rsn_new(&s, "<think>", "</think>", 0, &e), 0);
    struct seg_log L = {0};
    CHECK_EQ_INT(rsn_inside(s), 0);
    rsn_push(s, "<think>ab", 9, on_emit, &L);
    CHECK_EQ_INT(rsn_inside(s), 1);
    rsn_push(s, "</think>c", 9, on_emit, &L);
    CHECK_EQ_INT(rsn_inside(s), 0);
    rsn_flush(s, on_emit, &L);
    CHECK_EQ_INT(L.n, 2);
    rsn_reset(s);
    memset(&L, 0, sizeof L);
    rsn_push(s, "<think>z", 8, on_emit, &L);
    rsn_flush(s, on_emit, &L);
    CHECK_EQ_INT(L.n, 1);
    CHECK_STR(L.seg[0], "z");
    rsn_push(s, "x", 1, NULL, NULL); /* NULL emit is allowed */
    rsn_free(s);
    rsn_free(NULL);
}

static void test_prompt_open(void)
{
    CHECK_EQ_INT(reasoning_prompt_open("<｜User｜>hi<｜Assistant｜><think>\n", "<think>"), 1);
    CHECK_EQ_INT(reasoning_prompt_open("<|im_start|>assistant\n<think>\n\n</think>\n\n",
                                       "<think>"), 0);
    CHECK_EQ_INT(reasoning_prompt_open("<|im_start|>user\nwhat is <think>?<|im_end|>\n"
                                       "<|im_start|>assistant\n", "<think>"), 0);
    CHECK_EQ_INT(reasoning_prompt_open("<think>", "<think>"), 1);
    CHECK_EQ_INT(reasoning_prompt_open("think>", "<think>"), 0);
    CHECK_EQ_INT(reasoning_prompt_open("", "<think>"), 0);
    CHECK_EQ_INT(reasoning_prompt_open(NULL, "<think>"), 0);
    CHECK_EQ_INT(reasoning_prompt_open("<think>", ""), 0);
}

/* Renders a real template's generation prompt for one user turn. */
static char *render_prompt(const char *file, int thinking)
{
    char rel[256];
    snprintf(rel, sizeof rel, "chat-templates/%s", file);
    FILE *f = fopen(fixture_path(rel), "rb");
    CHECK_MSG(f != NULL, "missing fixture %s", rel);
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *src = malloc((size_t)n + 1);
    size_t got = fread(src, 1, (size_t)n, f);
    fclose(f);
    src[got] = 0;
    struct tmpl *t = NULL;
    struct cerr e = {0};
    char *out = NULL;
    size_t len = 0;
    json_t *ctx = json_pack("{s:[{s:s, s:s}], s:b, s:s, s:s, s:b}", "messages", "role", "user",
                            "content", "Hi", "add_generation_prompt", 1, "bos_token", "<s>",
                            "eos_token", "</s>", "enable_thinking", thinking);
    if (tmpl_parse(&t, src, got, &e) == 0)
        tmpl_render(t, ctx, NULL, &out, &len, &e);
    CHECK_MSG(out != NULL, "%s: %s", file, e.msg);
    json_decref(ctx);
    tmpl_free(t);
    free(src);
    return out;
}

static void check_open(const char *file, int thinking, int want)
{
    char *p = render_prompt(file, thinking);
    if (!p)
        return;
    CHECK_MSG(reasoning_prompt_open(p, "<think>") == want, "%s (thinking %d)", file, thinking);
    free(p);
}

static void test_prompt_open_real_templates(void)
{
    /* R1 distills end the generation prompt with "<think>\n" (closed again when off) */
    check_open("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", 1, 1);
    check_open("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", 0, 0);
    /* Qwen3 and SmolLM3 let the model open the block; off renders an empty closed one */
    check_open("Qwen-Qwen3-0.6B.jinja", 1, 0);
    check_open("Qwen-Qwen3-0.6B.jinja", 0, 0);
    check_open("HuggingFaceTB-SmolLM3-3B.jinja", 1, 0);
    check_open("HuggingFaceTB-SmolLM3-3B.jinja", 0, 0);
    /* and the R1 output that follows such a prompt splits right */
    const char *e[] = {"R:Okay, the user greets me.", "C:Hello! How can I help?", NULL};
    check_case(T, 1, "Okay, the user greets me.\n</think>\n\nHello! How can I help?", e);
}

int main(void)
{
    RUN(test_qwen3_shape);
    RUN(test_content_before_think);
    RUN(test_start_inside);
    RUN(test_disabled);
    RUN(test_flush_partials);
    RUN(test_one_block);
    RUN(test_other_tags);
    RUN(test_utf8);
    RUN(test_api);
    RUN(test_prompt_open);
    RUN(test_prompt_open_real_templates);
    return harness_done();
}
