/* http.c - the tests' HTTP/1.0 client for the server on loopback (see http.h). */
#include "http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int http_dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

void http_send_all(int fd, const char *s, size_t n) {
    while (n > 0) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

void resp_free(struct resp *r) { free(r->head); }

struct resp read_resp(int fd) {
    struct resp r = {0};
    size_t cap = 1 << 16, n = 0;
    r.head = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) r.head = realloc(r.head, cap *= 2);
        ssize_t k = recv(fd, r.head + n, cap - n - 1, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    r.head[n] = 0;
    sscanf(r.head, "HTTP/%*s %d", &r.status);
    char *b = strstr(r.head, "\r\n\r\n");
    r.body = b ? b + 4 : r.head + n;
    return r;
}

struct resp req(int port, const char *method, const char *path, const char *hdrs,
                const char *body) {
    int fd = http_dial(port);
    struct resp r = {0};
    if (fd < 0) return r;
    char head[1024];
    int n =
        snprintf(head, sizeof head, "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%s", method, path, hdrs);
    if (body)
        n += snprintf(head + n, sizeof head - (size_t)n,
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n", strlen(body));
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    http_send_all(fd, head, (size_t)n);
    if (body) http_send_all(fd, body, strlen(body));
    r = read_resp(fd);
    close(fd);
    return r;
}

struct resp post(int port, const char *path, const char *body) {
    return req(port, "POST", path, "", body);
}
