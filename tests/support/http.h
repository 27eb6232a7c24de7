/*
 * http.h - a minimal HTTP/1.0 client for the server tests: one connection per request to
 * 127.0.0.1, the whole response read until the server closes it (20 s receive timeout).
 */
#ifndef NX_TEST_HTTP_H
#define NX_TEST_HTTP_H

#include <stddef.h>

struct resp {
    int status; /* 0: no response (connection refused or closed without one) */
    char *head; /* whole response (owned; free with resp_free) */
    char *body; /* into head */
};

/* A connected socket, or -1. */
int http_dial(int port);
void http_send_all(int fd, const char *s, size_t n);
struct resp read_resp(int fd);
void resp_free(struct resp *r);
/* One request: method, path, extra headers ("" or lines ending in \r\n), body (NULL: none). */
struct resp req(int port, const char *method, const char *path, const char *hdrs, const char *body);
struct resp post(int port, const char *path, const char *body);

#endif
