/*
 * The checks the C test programs share (included by bad_input.c, slot.c
 * and fork_child.c, which tests/workers.rs builds and runs):
 * CHECK(cond, what) prints "FAIL what (line N)" and counts a failure
 * instead of stopping, so one run reports every broken check; the output
 * is flushed at once, so that a process that forks afterwards does not
 * print it twice. checks_done() ends main: exit 1 after any failure, else
 * "ALL OK" and exit 0, which is what the Rust side looks for.
 */
#ifndef WALSHM_TEST_CHECK_H
#define WALSHM_TEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, what)                                      \
    do {                                                       \
        if (!(cond)) {                                         \
            printf("FAIL %s (line %d)\n", what, __LINE__);     \
            fflush(stdout);                                    \
            failures++;                                        \
        }                                                      \
    } while (0)

static int checks_done(void)
{
    if (failures != 0)
        return 1;
    printf("ALL OK\n");
    return 0;
}

#endif
