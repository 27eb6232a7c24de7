/* log.h - library logging through the user callback (nx_log_set); stderr by default. */
#ifndef NX_LOG_H
#define NX_LOG_H
#include "nexus.h"
void nx_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define NX_LOGE(...) nx_log(NX_LOG_ERROR, __VA_ARGS__)
#define NX_LOGW(...) nx_log(NX_LOG_WARN, __VA_ARGS__)
#define NX_LOGI(...) nx_log(NX_LOG_INFO, __VA_ARGS__)
#define NX_LOGD(...) nx_log(NX_LOG_DEBUG, __VA_ARGS__)
#endif
