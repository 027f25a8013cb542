/* serve_probe.c — the pre-flight port probe: before any weights load, ask the port for
 * GET /v1/models (1.5 s budget). If an OpenAI-compatible server (another cinfer, llama.cpp,
 * vLLM, ...) answers with a model list, `cinfer serve` refuses to start a second copy.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/serve.h"
#include "util/clock.h"

static int wait_fd(int fd, short ev, double deadline)
{
    double left = deadline - clock_now_s();
    if (left <= 0)
        return -1;
    struct pollfd p = {.fd = fd, .events = ev};
    int rc = poll(&p, 1, (int)(left * 1000) + 1);
    return rc == 1 ? 0 : -1;
}

int serve_probe(const char *host, int port, char *what, size_t cap)
{
    if (port <= 0)
        return 0;
    const char *h = !strcmp(host, "0.0.0.0") || !strcmp(host, "::") ? "127.0.0.1" : host;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(h, ps, &hints, &ai) || !ai)
        return 0;
    double deadline = clock_now_s() + 1.5;
    int fd = socket(ai->ai_family, SOCK_STREAM, 0), found = 0;
    if (fd < 0) {
        freeaddrinfo(ai);
        return 0;
    }
    fcntl(fd, F_SETFL, O_NONBLOCK);
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    if (rc && errno != EINPROGRESS)
        goto out;
    if (wait_fd(fd, POLLOUT, deadline))
        goto out;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) || soerr)
        goto out;
    char req[256];
    int n = snprintf(req, sizeof req,
                     "GET /v1/models HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", h,
                     port);
    if (write(fd, req, (size_t)n) != n)
        goto out;
    char buf[65536];
    size_t len = 0;
    while (len + 1 < sizeof buf && wait_fd(fd, POLLIN, deadline) == 0) {
        ssize_t k = read(fd, buf + len, sizeof buf - 1 - len);
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    buf[len] = 0;
    char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) || !strstr(buf, " 200 ") || !body)
        goto out;
    /* tolerate chunked bodies: find the JSON object */
    char *brace = strchr(body, '{');
    json_t *j = brace ? json_loads(brace, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    json_t *data = json_object_get(j, "data");
    if (json_is_array(data)) {
        found = 1;
        size_t i, w = 0;
        json_t *m;
        what[0] = 0;
        json_array_foreach(data, i, m)
        {
            const char *id = json_string_value(json_object_get(m, "id"));
            if (id && w + strlen(id) + 3 < cap)
                w += (size_t)snprintf(what + w, cap - w, "%s%s", w ? ", " : "", id);
        }
    }
    json_decref(j);
out:
    close(fd);
    return found;
}
