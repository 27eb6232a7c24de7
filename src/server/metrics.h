/*
 * metrics.h - the server's counters and latency histograms, rendered as Prometheus text.
 *
 * DESIGN: one process-wide set of atomic counters (the server runs once per process); every
 * thread may record, /metrics reads a snapshot. Histograms use fixed bucket bounds in seconds.
 */
#ifndef NX_SERVER_METRICS_H
#define NX_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum srv_endpoint {
    SRV_EP_CHAT = 0, SRV_EP_COMPLETIONS, SRV_EP_EMBEDDINGS, SRV_EP_MODELS, SRV_EP_HEALTH,
    SRV_EP_METRICS, SRV_EP_OTHER, SRV_EP_COUNT
};

void srv_metrics_reset(void);
/* A finished HTTP request with its status code. */
void srv_metrics_request(enum srv_endpoint ep, int status);
void srv_metrics_ttft(double seconds);
void srv_metrics_step(double seconds);
void srv_metrics_tokens(int64_t prompt, int64_t cached, int64_t generated);
/* Prometheus text exposition of every metric plus the engine gauges passed in (owned by the
   caller; NULL on out of memory). */
struct srv_engine_stats;
char *srv_metrics_render(const struct srv_engine_stats *es);

#endif
