/* bench_http.c — requests/s of the HTTP layer on a trivial route, and SSE events/s.
 *
 * The server runs in-process (its loop on one thread); C client threads speak HTTP/1.1
 * keep-alive over loopback sockets, one request in flight per connection, for a fixed time.
 * A second phase streams events posted from another thread (http_post) at a fixed rate to
 * one SSE client and reports the post-to-arrival latency. Not a test: numbers only.
 *   usage: bench_http [seconds per phase] [client connections] [SSE events per second]
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http/http.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void h_ping(struct http_req *r, void *ud)
{
    http_reply(r, 200, "application/json", "{\"ok\":true}", 11);
}

static int g_port;
static double g_secs;
static atomic_long g_done;

static int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One keep-alive connection: send, read one full response (fixed Content-Length), repeat. */
static void *client(void *arg)
{
    int fd = connect_port(g_port);
    if (fd < 0)
        return NULL;
    static const char req[] = "GET /ping HTTP/1.1\r\nHost: b\r\n\r\n";
    char buf[4096];
    double end = now_s() + g_secs;
    long n = 0;
    while (now_s() < end) {
        if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1))
            break;
        size_t have = 0;
        for (;;) {
            ssize_t k = recv(fd, buf + have, sizeof buf - 1 - have, 0);
            if (k <= 0)
                goto out;
            have += (size_t)k;
            buf[have] = 0;
            char *e = strstr(buf, "\r\n\r\n");
            if (e && (size_t)(e + 4 - buf) + 11 <= have)
                break;
        }
        n++;
    }
out:
    atomic_fetch_add(&g_done, n);
    close(fd);
    return NULL;
}

/* ---- SSE phase ----
 * A producer thread posts one event every 1/rate s carrying its post time; the loop writes
 * it to the stream; the client notes the delay from post to arrival. */

struct sse {
    struct http_server *s;
    struct http_req *r;
    double rate;
    atomic_int ready;
    atomic_int stop;
    atomic_long posted;
};

struct sse_ev {
    struct sse *st;
    double t_post;
};

static void post_event(void *ud)
{
    struct sse_ev *ev = ud;
    char b[128];
    int n = snprintf(b, sizeof b,
                     "data: {\"t\":%.9f,\"choices\":[{\"delta\":{\"content\":\" tok\"}}]}\n\n",
                     ev->t_post);
    if (ev->st->r)
        http_stream_write(ev->st->r, b, (size_t)n);
    free(ev);
}

static void post_end(void *ud)
{
    struct sse *st = ud;
    if (st->r)
        http_stream_end(st->r);
    st->r = NULL;
}

static void h_sse(struct http_req *r, void *ud)
{
    struct sse *st = ud;
    st->r = r;
    http_stream_begin(r, 200, NULL);
    atomic_store(&st->ready, 1);
}

static void *producer(void *arg)
{
    struct sse *st = arg;
    while (!atomic_load(&st->ready))
        usleep(1000);
    double t0 = now_s();
    long k = 0;
    while (!atomic_load(&st->stop)) {
        double due = t0 + (double)k / st->rate, t = now_s();
        if (t < due) {
            struct timespec ts = {0, (long)((due - t) * 1e9)};
            nanosleep(&ts, NULL);
            continue;
        }
        struct sse_ev *ev = malloc(sizeof *ev);
        ev->st = st;
        ev->t_post = now_s();
        if (http_post(st->s, post_event, ev) != 0) {
            free(ev);
            break;
        }
        k++;
        atomic_fetch_add(&st->posted, 1);
    }
    http_post(st->s, post_end, st);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *loop_main(void *arg)
{
    http_server_run(arg);
    return NULL;
}

int main(int argc, char **argv)
{
    g_secs = argc > 1 ? atof(argv[1]) : 3.0;
    int nconn = argc > 2 ? atoi(argv[2]) : 4;
    double rate = argc > 3 ? atof(argv[3]) : 2000;
    struct http_config c = {.host = "127.0.0.1", .port = 0, .max_conns = 1024};
    struct http_server *s;
    struct cerr e;
    if (http_server_new(&s, &c, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    struct sse st = {.s = s};
    http_route(s, "GET", "/ping", 0, h_ping, NULL);
    http_route(s, "GET", "/sse", 0, h_sse, &st);
    g_port = http_server_port(s);
    pthread_t loop;
    pthread_create(&loop, NULL, loop_main, s);

    pthread_t *th = calloc((size_t)nconn, sizeof *th);
    double t0 = now_s();
    for (int i = 0; i < nconn; i++)
        pthread_create(&th[i], NULL, client, NULL);
    for (int i = 0; i < nconn; i++)
        pthread_join(th[i], NULL);
    double dt = now_s() - t0;
    long n = atomic_load(&g_done);
    printf("{\"phase\":\"ping\",\"connections\":%d,\"seconds\":%.2f,\"requests\":%ld,"
           "\"req_per_s\":%.0f}\n", nconn, dt, n, (double)n / dt);

    /* SSE: events posted from another thread at a fixed rate, latency to the client */
    st.rate = rate;
    int fd = connect_port(g_port);
    static const char req[] = "GET /sse HTTP/1.1\r\nHost: b\r\n\r\n";
    send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
    pthread_t prod;
    pthread_create(&prod, NULL, producer, &st);
    static char buf[1 << 16];
    size_t cap = 1 << 20, nlat = 0;
    double *lat = malloc(cap * sizeof *lat);
    double end = now_s() + g_secs;
    t0 = now_s();
    while (now_s() < end) {
        ssize_t k = recv(fd, buf, sizeof buf - 1, 0);
        if (k <= 0)
            break;
        double t = now_s();
        buf[k] = 0;
        /* events never split across reads in practice at these sizes; a split one is skipped */
        static const char key[] = "data: {\"t\":";
        for (char *p = buf; (p = strstr(p, key)) != NULL; p += sizeof key - 1) {
            double tp = strtod(p + sizeof key - 1, NULL);
            if (tp > 0 && nlat < cap)
                lat[nlat++] = t - tp;
        }
    }
    dt = now_s() - t0;
    atomic_store(&st.stop, 1);
    pthread_join(prod, NULL);
    close(fd);
    qsort(lat, nlat, sizeof *lat, cmp_d);
    printf("{\"phase\":\"sse\",\"rate_per_s\":%.0f,\"seconds\":%.2f,\"posted\":%ld,"
           "\"received\":%zu,\"latency_ms_p50\":%.3f,\"latency_ms_p99\":%.3f,"
           "\"latency_ms_max\":%.3f}\n",
           rate, dt, atomic_load(&st.posted), nlat, nlat ? lat[nlat / 2] * 1e3 : -1.0,
           nlat ? lat[(size_t)((double)nlat * 0.99)] * 1e3 : -1.0,
           nlat ? lat[nlat - 1] * 1e3 : -1.0);
    free(lat);
    http_server_stop(s);
    pthread_join(loop, NULL);
    http_server_free(s);
    free(th);
    return 0;
}
