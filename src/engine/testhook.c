/* testhook.c — see testhook.h. */
#include "engine/testhook.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static long g_at_step; /* 0 = off */
static char g_once_path[512];
static long g_delay_ms; /* CINFER_TEST_STEP_DELAY_MS */

static void read_env(void)
{
    const char *d = getenv("CINFER_TEST_STEP_DELAY_MS");
    if (d && *d) {
        long ms = strtol(d, NULL, 10);
        g_delay_ms = ms > 0 && ms <= 10000 ? ms : 0;
    }
    const char *v = getenv("CINFER_TEST_ABORT_AT_STEP");
    if (!v || !*v)
        return;
    char *end;
    long n = strtol(v, &end, 10);
    if (n < 1 || (*end && *end != ':'))
        return;
    if (*end == ':')
        snprintf(g_once_path, sizeof g_once_path, "%s", end + 1);
    g_at_step = n;
}

void eng_test_step_hook(long steps)
{
    pthread_once(&g_once, read_env);
    if (g_delay_ms)
        usleep((useconds_t)g_delay_ms * 1000);
    if (!g_at_step || steps != g_at_step)
        return;
    if (g_once_path[0]) {
        int fd = open(g_once_path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0)
            return; /* already fired once */
        close(fd);
    }
    fprintf(stderr, "engine: CINFER_TEST_ABORT_AT_STEP=%ld reached: aborting (test hook)\n",
            g_at_step);
    abort();
}
