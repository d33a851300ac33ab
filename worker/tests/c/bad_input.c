/*
 * The C ABI under bad input (tests/workers.rs builds and runs it):
 *   bad_input DIR   (DIR: a data directory with a running server)
 * Every check prints "FAIL ..." and the program exits 1 on the first
 * failure; "ALL OK" and exit 0 when every bad call got a clear error and
 * nothing crashed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "walshm.h"
#include "check.h"

static int has_message(const char *m) { return m != NULL && m[0] != '\0'; }

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    char err[256];
    uint64_t lsn = 0;

    /* No server there. */
    memset(err, 0, sizeof err);
    CHECK(walshm_attach("/nonexistent/walshm-data", err, sizeof err) == NULL, "attach to a missing dir");
    CHECK(has_message(err), "message for a missing dir");
    /* Not supervised and no directory. */
    memset(err, 0, sizeof err);
    CHECK(walshm_attach(NULL, err, sizeof err) == NULL, "attach(NULL) unsupervised");
    CHECK(has_message(err), "message for attach(NULL)");
    /* A NULL or tiny error buffer is fine. */
    CHECK(walshm_attach("/nonexistent", NULL, 0) == NULL, "attach with NULL errbuf");
    char tiny[1] = {'x'};
    CHECK(walshm_attach("/nonexistent", tiny, 1) == NULL && tiny[0] == '\0', "attach with a 1-byte errbuf");

    /* NULL handles. */
    CHECK(walshm_emit(NULL, "p", "x", 1, &lsn) == -1, "emit(NULL)");
    CHECK(walshm_begin(NULL) == -1, "begin(NULL)");
    CHECK(walshm_commit(NULL, &lsn) == -1, "commit(NULL)");
    CHECK(walshm_abort(NULL) == -1, "abort(NULL)");
    CHECK(walshm_flush(NULL, 0) == -1, "flush(NULL)");
    CHECK(walshm_detach(NULL) == -1, "detach(NULL)");
    CHECK(has_message(walshm_error(NULL)), "error(NULL)");
    CHECK(walshm_shutdown_requested(NULL) == -1, "shutdown_requested(NULL)");

    /* Invalid handles: not from the library. */
    uint64_t junk[16] = {0};
    walshm_worker *bogus = (walshm_worker *)junk;
    CHECK(walshm_emit(bogus, "p", "x", 1, &lsn) == -1, "emit(bogus)");
    CHECK(walshm_detach(bogus) == -1, "detach(bogus)");
    CHECK(has_message(walshm_error(bogus)), "error(bogus)");
    walshm_reader *bogus_r = (walshm_reader *)junk;
    walshm_record rec;
    CHECK(walshm_reader_next(bogus_r, &rec, 0) == -1, "reader_next(bogus)");
    CHECK(walshm_reader_close(bogus_r) == -1, "reader_close(bogus)");
    CHECK(walshm_reader_next(NULL, &rec, 0) == -1, "reader_next(NULL)");
    CHECK(has_message(walshm_reader_error(NULL)), "reader_error(NULL)");

    walshm_worker *w = walshm_attach(argv[1], err, sizeof err);
    if (w == NULL) {
        printf("FAIL attach %s: %s\n", argv[1], err);
        return 1;
    }
    /* A worker handle is not a reader handle, and the other way round. */
    CHECK(walshm_reader_next((walshm_reader *)w, &rec, 0) == -1, "worker as reader");

    /* Bad arguments on a good handle. */
    CHECK(walshm_emit(w, NULL, "x", 1, &lsn) == -1 && has_message(walshm_error(w)), "NULL prefix");
    CHECK(walshm_emit(w, "p", NULL, 5, &lsn) == -1 && has_message(walshm_error(w)), "NULL data with a length");
    CHECK(walshm_emit(w, "p", "x", (size_t)WALSHM_MAX_PAYLOAD + 1, &lsn) == -1 && has_message(walshm_error(w)),
          "payload over the limit");
    CHECK(walshm_emit(w, "\xff\xfe", "x", 1, &lsn) == -1 && has_message(walshm_error(w)), "prefix not UTF-8");
    CHECK(walshm_emit_tx(w, "p", "x", 1, &lsn) == -1 && has_message(walshm_error(w)), "emit_tx without begin");
    CHECK(walshm_commit(w, &lsn) == -1 && has_message(walshm_error(w)), "commit without begin");
    CHECK(walshm_abort(w) == -1 && has_message(walshm_error(w)), "abort without begin");
    walshm_reader *r = walshm_reader_open(w, 0);
    CHECK(r != NULL, "reader_open");
    CHECK(walshm_reader_next(r, NULL, 0) == -1 && has_message(walshm_reader_error(r)), "reader_next with NULL out");
    CHECK(walshm_reader_next(r, &rec, 0) == 1 && rec.lsn != 0, "reader_next reads a record");
    CHECK(walshm_reader_close(r) == 0, "reader_close");
    CHECK(walshm_reader_close(r) == -1, "reader_close twice");

    /* Good calls still work after the bad ones (NULL out-pointers are fine). */
    CHECK(walshm_emit(w, "p", NULL, 0, NULL) == 0, "empty emit");
    CHECK(walshm_begin(w) == 0, "begin");
    CHECK(walshm_begin(w) == -1 && has_message(walshm_error(w)), "begin twice");
    CHECK(walshm_emit_tx(w, "p", "x", 1, &lsn) == 0 && lsn != 0, "emit_tx");
    uint64_t commit = 0;
    CHECK(walshm_commit(w, &commit) == 0 && commit > lsn, "commit");
    CHECK(walshm_error(w) != NULL && walshm_error(w)[0] == '\0', "no error after success");
    CHECK(walshm_shutdown_requested(w) == 0, "no shutdown requested");

    /* An inserted-mode reader gets a message that nobody flushed. */
    uint64_t unflushed = 0;
    CHECK(walshm_emit(w, "ins", "y", 1, &unflushed) == 0, "emit for the inserted reader");
    walshm_reader *ri = walshm_reader_open_inserted(w, unflushed);
    CHECK(ri != NULL, "reader_open_inserted");
    CHECK(walshm_reader_next(ri, &rec, 2000) == 1 && rec.lsn == unflushed && rec.kind == WALSHM_RECORD_MESSAGE,
          "inserted reader reads the message");
    CHECK(walshm_reader_close(ri) == 0, "inserted reader close");
    CHECK(walshm_reader_open_inserted(NULL, 0) == NULL, "reader_open_inserted on NULL");

    CHECK(walshm_detach(w) == 0, "detach");
    /* Freed handle: an error, not a use after free. */
    CHECK(walshm_detach(w) == -1, "detach twice");
    CHECK(walshm_emit(w, "p", "x", 1, &lsn) == -1, "emit after detach");
    CHECK(has_message(walshm_error(w)), "error after detach");

    return checks_done();
}
