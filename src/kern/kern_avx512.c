/* kern_avx512.c - placeholder (being written): reuses the AVX2 set. */
#include "kern/kern_impl.h"

const struct kern_table kern_table_avx512 = {
    .name = "avx512",
    .quantize_act = kern_avx2_quantize_act,
    .matmul = kern_avx2_matmul,
    .dot_kv = kern_avx2_dot_kv,
    .axpy_kv = kern_avx2_axpy_kv,
    .store_kv = kern_avx2_store_kv,
};
