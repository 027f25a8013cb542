/* harness.h — the tiny unit-test harness.
 *
 * A test program calls CHECK(...) / CHECK_EQ_INT(...) inside test functions, runs them with
 * RUN(fn), and returns harness_done(), which prints the closing line
 * "N passed, N failed" and returns the exit status (0 only when nothing failed).
 * fixture_path() resolves a file under the test fixtures (env CINFER_FIXTURES; default
 * tests/data/fixtures, relative to the repository root where ctest runs the tests).
 */
#ifndef CINFER_TESTS_HARNESS_H
#define CINFER_TESTS_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int h_passed, h_failed, h_cur_failed;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);         \
            h_cur_failed++;                                                                  \
        }                                                                                    \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                 \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            h_cur_failed++;                                                                  \
        }                                                                                    \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                   \
    do {                                                                                     \
        long long h_a = (long long)(a), h_b = (long long)(b);                                \
        if (h_a != h_b) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK_EQ_INT failed: %s = %lld, %s = %lld\n", __FILE__,  \
                    __LINE__, #a, h_a, #b, h_b);                                             \
            h_cur_failed++;                                                                  \
        }                                                                                    \
    } while (0)

#define CHECK_STR(a, b)                                                                      \
    do {                                                                                     \
        const char *h_a = (a), *h_b = (b);                                                   \
        if (!h_a || !h_b || strcmp(h_a, h_b) != 0) {                                         \
            fprintf(stderr, "%s:%d: CHECK_STR failed:\n  %s = \"%s\"\n  %s = \"%s\"\n",      \
                    __FILE__, __LINE__, #a, h_a ? h_a : "(null)", #b, h_b ? h_b : "(null)"); \
            h_cur_failed++;                                                                  \
        }                                                                                    \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                \
    do {                                                                                     \
        double h_a = (double)(a), h_b = (double)(b);                                         \
        if (!(fabs(h_a - h_b) <= (tol))) {                                                   \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g (tol %g)\n",     \
                    __FILE__, __LINE__, #a, h_a, #b, h_b, (double)(tol));                    \
            h_cur_failed++;                                                                  \
        }                                                                                    \
    } while (0)

/* CINFER_TEST_ONLY=substring runs only the tests whose name contains it (for a sanitizer
 * or a repeat loop on one test). */
static inline int h_selected(const char *name)
{
    const char *only = getenv("CINFER_TEST_ONLY");
    return !only || !*only || strstr(name, only) != NULL;
}

#define RUN(fn)                                                                              \
    do {                                                                                     \
        if (!h_selected(#fn))                                                                \
            break;                                                                           \
        h_cur_failed = 0;                                                                    \
        fn();                                                                                \
        if (h_cur_failed) {                                                                  \
            h_failed++;                                                                      \
            fprintf(stderr, "FAIL %s\n", #fn);                                               \
        } else {                                                                             \
            h_passed++;                                                                      \
        }                                                                                    \
    } while (0)

/* The exit status that ctest reports as "skipped" (SKIP_RETURN_CODE of every entry). */
#define HARNESS_SKIP 77

/* For a test that cannot check anything here: says why and returns HARNESS_SKIP (return it
 * from main), so the entry is reported skipped, never passed. */
static inline int harness_skip(const char *why)
{
    printf("SKIPPED: %s\n", why);
    return HARNESS_SKIP;
}

static inline int harness_done(void)
{
    printf("%d passed, %d failed\n", h_passed, h_failed);
    return h_failed ? 1 : 0;
}

/* Writes "<fixtures>/<rel>" into a static buffer and returns it. */
static inline const char *fixture_path(const char *rel)
{
    static char buf[4][1024];
    static int k;
    const char *root = getenv("CINFER_FIXTURES");
    if (!root)
        root = "tests/data/fixtures";
    char *b = buf[k++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", root, rel);
    return b;
}

/* "<repo>/<rel>" for files committed in this repository (env CINFER_SRC, else "."). */
static inline const char *repo_path(const char *rel)
{
    static char buf[4][1024];
    static int k;
    const char *root = getenv("CINFER_SRC");
    if (!root)
        root = ".";
    char *b = buf[k++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", root, rel);
    return b;
}

#endif
