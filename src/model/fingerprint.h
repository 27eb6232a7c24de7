/* fingerprint.h - the KV fingerprint of a model (model/fingerprint.c), for kv/kvblock.h. */
#ifndef NX_MODEL_FINGERPRINT_H
#define NX_MODEL_FINGERPRINT_H

#include "kv/kvblock.h"

struct nx_model;
/* The model's fingerprint (computes and caches the weight hash on first use). */
void kv_fingerprint_of(const struct nx_model *m, struct kv_fingerprint *fp);

#endif
