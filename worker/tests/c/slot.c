/*
 * The C ABI's slots (tests/workers.rs builds and runs it):
 *   slot DIR   (DIR: a data directory with a running server)
 * Creates slot c_slot, commits "one", rolls back "gone", commits "two";
 * a slot reader returns exactly one and two (committed transactional
 * messages, `end` past each COMMIT); after confirming "one", a new slot
 * reader starts at "two"; a reader not on a slot refuses
 * walshm_reader_confirm; the slot is dropped. Prints "FAIL ..." for each
 * failed check, "ALL OK" and exit 0 when every check passed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "walshm.h"
#include "check.h"

static int tx(walshm_worker *w, const char *text, int commit)
{
    uint64_t lsn;
    if (walshm_begin(w) != 0 || walshm_emit_tx(w, "c", text, strlen(text), &lsn) != 0)
        return -1;
    return commit ? walshm_commit(w, &lsn) : walshm_abort(w);
}

/* The next message's payload into buf (NUL-terminated) and its end. */
static int next(walshm_reader *r, char *buf, size_t len, uint64_t *end)
{
    walshm_record rec;
    int rc = walshm_reader_next(r, &rec, 5000);
    if (rc != 1)
        return rc;
    size_t n = rec.payload_len < len - 1 ? rec.payload_len : len - 1;
    memcpy(buf, rec.payload, n);
    buf[n] = '\0';
    *end = rec.end;
    if (rec.kind != WALSHM_RECORD_MESSAGE_TX || rec.end <= rec.lsn || strcmp(rec.prefix, "c") != 0)
        return -2;
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    char err[256] = "";
    walshm_worker *w = walshm_attach(argv[1], err, sizeof err);
    if (w == NULL) {
        printf("FAIL attach: %s\n", err);
        return 1;
    }
    uint64_t at = 0, end = 0;
    char buf[64];
    CHECK(walshm_slot_create(w, "c_slot", &at) == 0 && at != 0, "slot_create");
    CHECK(walshm_slot_create(w, "c_slot", NULL) == -1 && strstr(walshm_error(w), "42710"), "duplicate slot");
    CHECK(walshm_slot_create(w, "Bad Name", NULL) == -1, "invalid slot name");
    CHECK(tx(w, "one", 1) == 0 && tx(w, "gone", 0) == 0 && tx(w, "two", 1) == 0, "transactions");

    walshm_reader *r = walshm_reader_open_slot(w, "c_slot");
    CHECK(r != NULL, "open_slot");
    if (r != NULL) {
        CHECK(next(r, buf, sizeof buf, &end) == 1 && strcmp(buf, "one") == 0, "first message is one");
        CHECK(walshm_reader_confirm(r, end) == 0, "confirm one");
        CHECK(next(r, buf, sizeof buf, &end) == 1 && strcmp(buf, "two") == 0, "second message is two");
        walshm_record rec;
        CHECK(walshm_reader_next(r, &rec, 200) == 0, "nothing after two");
        CHECK(walshm_reader_close(r) == 0, "close");
    }
    r = walshm_reader_open_slot(w, "c_slot");
    CHECK(r != NULL, "reopen");
    if (r != NULL) {
        CHECK(next(r, buf, sizeof buf, &end) == 1 && strcmp(buf, "two") == 0, "resumes at two");
        CHECK(walshm_reader_close(r) == 0, "close again");
    }
    walshm_reader *plain = walshm_reader_open(w, 0);
    CHECK(plain != NULL && walshm_reader_confirm(plain, 1) == -1, "confirm on a plain reader refused");
    if (plain != NULL)
        walshm_reader_close(plain);
    CHECK(walshm_reader_open_slot(w, "no_such") == NULL && strstr(walshm_error(w), "42704"), "unknown slot");
    CHECK(walshm_slot_drop(w, "c_slot") == 0, "drop");
    CHECK(walshm_slot_drop(w, "c_slot") == -1, "drop twice");
    walshm_detach(w);
    return checks_done();
}
