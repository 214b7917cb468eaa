/* SPDX-License-Identifier: MIT */
/* runner.c: the one Check runner; the suite list comes from the tests/test_<unit>.c names. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUITE(name) Suite *name##_suite(void);
#include "suites.h"
#undef SUITE

int main(int argc, char **argv)
{
    /* Optional: run only the suites named on the command line. */
    SRunner *sr = NULL;
#define SUITE(name)                                                                          \
    do {                                                                                     \
        int want = argc < 2;                                                                 \
        for (int a = 1; a < argc; a++)                                                       \
            if (strcmp(argv[a], #name) == 0)                                                 \
                want = 1;                                                                    \
        if (want) {                                                                          \
            if (!sr)                                                                         \
                sr = srunner_create(name##_suite());                                         \
            else                                                                             \
                srunner_add_suite(sr, name##_suite());                                       \
        }                                                                                    \
    } while (0);
#include "suites.h"
#undef SUITE
    if (!sr) {
        fprintf(stderr, "runner: no suite matches\n");
        return 2;
    }
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
