/*
 * A handle after fork, and a reader after its worker was replaced
 * (tests/workers.rs builds and runs it):
 *   fork_child DIR   (DIR: a data directory with a running server)
 * 1. attach, commit, fork; the child's commit is refused with a message
 *    that says it is a forked child, its detach returns 0 and releases only
 *    its own copies; the parent then commits again and detaches cleanly.
 * 2. a reader opened on a worker that was detached, with another worker
 *    attached since (malloc usually hands out the same address), is
 *    refused instead of reading the first worker's unmapped segment.
 * Prints "FAIL ..." for each failed check and "ALL OK" at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "walshm.h"
#include "check.h"

static int commit_one(walshm_worker *w, const char *payload)
{
    uint64_t lsn = 0;
    if (walshm_begin(w) != 0)
        return -1;
    if (walshm_emit_tx(w, "fork", payload, strlen(payload), &lsn) != 0)
        return -1;
    return walshm_commit(w, &lsn);
}

/* The child's part: every call refused, detach releases only its copies. */
static int child(walshm_worker *w)
{
    int bad = 0;
    if (commit_one(w, "from the child") == 0) {
        printf("FAIL the forked child could commit on its parent's handle\n");
        bad = 1;
    } else if (strstr(walshm_error(w), "forked child") == NULL) {
        printf("FAIL the child's error does not say why: %s\n", walshm_error(w));
        bad = 1;
    }
    if (walshm_detach(w) != 0) {
        printf("FAIL detach in the forked child returned -1\n");
        bad = 1;
    }
    fflush(stdout);
    return bad;
}

static void fork_case(const char *dir)
{
    char err[256] = {0};
    walshm_worker *w = walshm_attach(dir, err, sizeof err);
    CHECK(w != NULL, "attach");
    if (w == NULL) {
        printf("attach: %s\n", err);
        return;
    }
    CHECK(commit_one(w, "parent before fork") == 0, "parent commit before fork");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        _exit(child(w));
    CHECK(pid > 0, "fork");
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's checks");
    int rc = commit_one(w, "parent after the child detached");
    CHECK(rc == 0, "parent commit after the child's detach");
    if (rc != 0)
        printf("parent: %s\n", walshm_error(w));
    CHECK(walshm_detach(w) == 0, "parent detach");
}

static void reader_case(const char *dir)
{
    char err[256] = {0};
    walshm_worker *w1 = walshm_attach(dir, err, sizeof err);
    CHECK(w1 != NULL, "attach w1");
    if (w1 == NULL)
        return;
    walshm_reader *r = walshm_reader_open(w1, 0);
    CHECK(r != NULL, "reader on w1");
    CHECK(walshm_detach(w1) == 0, "detach w1 (reader left open)");
    walshm_worker *w2 = walshm_attach(dir, err, sizeof err);
    CHECK(w2 != NULL, "attach w2");
    printf("w2 %s w1's address\n", (void *)w2 == (void *)w1 ? "reuses" : "does not reuse");
    if (r != NULL) {
        walshm_record rec;
        CHECK(walshm_reader_next(r, &rec, 0) == -1, "a reader of a detached worker is refused");
        CHECK(strstr(walshm_reader_error(r), "detached") != NULL, "the reader's error says why");
        CHECK(walshm_reader_close(r) == 0, "close the reader");
    }
    if (w2 != NULL)
        CHECK(walshm_detach(w2) == 0, "detach w2");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    fork_case(argv[1]);
    reader_case(argv[1]);
    return checks_done();
}
