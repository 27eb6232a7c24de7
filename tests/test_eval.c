/* test_eval.c - `nexus eval` end to end on stories260K with a tiny configuration: the dense
 * policy agrees with itself exactly, an evicting policy does not, and the JSON has the fields. */
#include <jansson.h>
#include <unistd.h>

#include "../tools/cli/eval.h"
#include "test.h"

TEST(eval_small_run_writes_json) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", test_shared());
    nx_model *m = NULL;
    char err[256];
    ASSERT_OK(nx_model_load(path, NULL, &m, err, sizeof err));
    char out[] = "/tmp/nx_test_eval_XXXXXX";
    int fd = mkstemp(out);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    struct eval_params ep = {.policies = "full,nexus", .densities = "0.2", .regimes = "stream",
                             .streams = 2, .stream_len = 256, .recall_blocks = 1,
                             .threads = 2, .seed = 3, .json_path = out};
    ASSERT_EQ(eval_run(m, &ep), 0);
    json_error_t je;
    json_t *root = json_load_file(out, 0, &je);
    unlink(out);
    ASSERT_TRUE(root != NULL);
    ASSERT_EQ(json_array_size(root), 2);
    json_t *full = json_array_get(root, 0), *nex = json_array_get(root, 1);
    ASSERT_STR_EQ(json_string_value(json_object_get(full, "policy")), "full");
    ASSERT_NEAR(json_number_value(json_object_get(full, "kl")), 0, 0);
    ASSERT_NEAR(json_number_value(json_object_get(full, "top1")), 1, 0);
    double kl = json_number_value(json_object_get(nex, "kl"));
    ASSERT_TRUE(kl > 0 && kl < 5);
    ASSERT_TRUE(json_number_value(json_object_get(nex, "ppl")) > 1);
    ASSERT_TRUE(json_object_get(nex, "recall") != NULL);
    ASSERT_STR_EQ(json_string_value(json_object_get(nex, "regime")), "stream");
    json_decref(root);
    ep.densities = "1.5";
    ASSERT_EQ(eval_run(m, &ep), 1);
    nx_model_free(m);
}

TEST_MAIN
