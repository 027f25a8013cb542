/* iso_sock.c — one blocking HTTP/1.0 exchange with an engine child on its unix socket: the
 * supervisor's readiness probe (GET /health), the drain call (POST /admin/drain) and the
 * pool's /metrics. See iso_int.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/isolate/iso_int.h"
#include "util/sbuf.h"

int iso_sock_exchange(const char *sock, const char *request, int timeout_ms, size_t max,
                      char **body)
{
    if (body)
        *body = NULL;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    size_t qn = strlen(request);
    struct sbuf b = {0};
    char buf[16384];
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
             send(fd, request, qn, MSG_NOSIGNAL) == (ssize_t)qn;
    while (ok && b.len < max) {
        size_t want = max - b.len < sizeof buf ? max - b.len : sizeof buf;
        ssize_t k = recv(fd, buf, want, 0);
        if (k <= 0)
            break;
        ok = !sbuf_append(&b, buf, (size_t)k);
    }
    close(fd);
    int status = 0;
    if (ok && b.p && b.len >= 12 && !strncmp(b.p, "HTTP/1.", 7) && b.p[8] == ' ' &&
        sscanf(b.p + 9, "%3d", &status) != 1)
        status = 0;
    const char *sep = status == 200 ? strstr(b.p, "\r\n\r\n") : NULL;
    if (body && sep)
        *body = strdup(sep + 4);
    sbuf_free(&b);
    return status;
}
