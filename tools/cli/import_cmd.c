/* import_cmd.c - `nexus import`: flags, then import_nxw (model/nxw_import.c). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/nxw_import.h"
#include "import_cmd.h"

static void import_usage(FILE *o) {
    fprintf(o, "usage: nexus import -w WEIGHTS.nxw --like TEMPLATE.gguf -o OUT.gguf "
               "[--set KEY=TYPE:VALUE ...]\n"
               "  Writes OUT with TEMPLATE's metadata (tokenizer included; --set replaces or adds\n"
               "  a key, TYPE u32 i32 f32 bool str) and tensor layout, and the F32 weights of\n"
               "  WEIGHTS (NXW1, from scripts/train/nxmodel.py). Names and shapes must match.\n");
}

int import_main(int argc, char **argv) {
    const char *weights = NULL, *like = NULL, *out = NULL;
    enum { MAX_SETS = 32 };
    struct import_set sets[MAX_SETS];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            import_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "import: unknown option or missing value: %s\n", a);
            import_usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-w") || !strcmp(a, "--weights")) {
            weights = v;
        } else if (!strcmp(a, "--like")) {
            like = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = v;
        } else if (!strcmp(a, "--set") && n_sets < MAX_SETS) {
            sets[n_sets++].spec = v;
        } else {
            fprintf(stderr, "import: unknown option (or more than %d --set): %s\n", MAX_SETS, a);
            import_usage(stderr);
            return 2;
        }
    }
    if (!weights || !like || !out) {
        fprintf(stderr, "import: -w, --like and -o are required\n");
        import_usage(stderr);
        return 2;
    }
    struct nx_err err;
    if (import_nxw(weights, like, out, sets, n_sets, &err) != NX_STATUS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "import: wrote %s\n", out);
    return 0;
}
