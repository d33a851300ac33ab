/*
 * Example C worker for walshm.
 *
 *   producer_c DIR|- COUNT [--tx] [--ack] [--prefix P]
 *
 * "-" attaches to the server that started this process (postmaster start
 * --worker 'NAME=producer_c - ...'). Writes COUNT messages (0: until the
 * server asks it to stop), non-transactional by default; --tx: one
 * committed transaction per message, and with --ack an "ack LSN" line per
 * durable commit. Exit 0 after a clean detach (also on a shutdown
 * request), 1 on an error.
 *
 * Build: cc -I worker/include producer.c -L target/release -lwalshm
 *        -Wl,-rpath,$PWD/target/release -o producer_c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "walshm.h"

static int fail(walshm_worker *w, const char *what)
{
    fprintf(stderr, "producer_c: %s: %s\n", what, walshm_error(w));
    walshm_detach(w);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DIR|- COUNT [--tx] [--ack] [--prefix P]\n", argv[0]);
        return 2;
    }
    const char *dir = strcmp(argv[1], "-") == 0 ? NULL : argv[1];
    long count = atol(argv[2]);
    int tx = 0, ack = 0;
    const char *prefix = "producer_c";
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--tx") == 0)
            tx = 1;
        else if (strcmp(argv[i], "--ack") == 0)
            ack = 1;
        else if (strcmp(argv[i], "--prefix") == 0 && i + 1 < argc)
            prefix = argv[++i];
        else {
            fprintf(stderr, "producer_c: unknown argument %s\n", argv[i]);
            return 2;
        }
    }

    char err[512];
    walshm_worker *w = walshm_attach(dir, err, sizeof err);
    if (w == NULL) {
        fprintf(stderr, "producer_c: attach: %s\n", err);
        return 1;
    }
    for (long seq = 0; count == 0 || seq < count; seq++) {
        if (walshm_shutdown_requested(w) == 1)
            break;
        char payload[64];
        int len = snprintf(payload, sizeof payload, "c seq=%ld", seq);
        uint64_t lsn;
        if (!tx) {
            if (walshm_emit(w, prefix, payload, (size_t)len, &lsn) != 0)
                return fail(w, "emit");
            continue;
        }
        if (walshm_begin(w) != 0)
            return fail(w, "begin");
        if (walshm_emit_tx(w, prefix, payload, (size_t)len, &lsn) != 0)
            return fail(w, "emit_tx");
        if (walshm_commit(w, &lsn) != 0) {
            if (walshm_shutdown_requested(w) == 1)
                break;
            return fail(w, "commit");
        }
        if (ack) {
            char line[64];
            int n = snprintf(line, sizeof line, "ack %X/%08X\n", (unsigned)(lsn >> 32), (unsigned)lsn);
            /* One write per line: stdout is shared with the server. */
            if (write(1, line, (size_t)n) != n)
                break;
        }
    }
    uint64_t flushed = 0;
    if (walshm_insert_lsn(w, &flushed) == 0)
        walshm_flush(w, flushed);
    if (walshm_detach(w) != 0) {
        fprintf(stderr, "producer_c: detach failed\n");
        return 1;
    }
    return 0;
}
