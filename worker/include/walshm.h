/*
 * walshm.h — attach a process to a running walshm server and write, commit
 * and read WAL through its shared memory.
 *
 * Library: target/release/libwalshm.so (cargo build --release).
 * Build:   cc -I worker/include prog.c -L target/release -lwalshm
 *          -Wl,-rpath,$PWD/target/release
 *
 * The first block is the fixed contract (DESIGN.md, "Worker API"); the
 * second block lists additions beyond it.
 *
 * Every function checks its pointer arguments: a NULL, a pointer that is
 * not a live handle of this library (never returned, or already freed),
 * or a handle used by two threads at once, gives -1 (or NULL), never a
 * crash. A handle is meant for one thread at a time. Failures leave a
 * NUL-terminated message, read with walshm_error (valid until the next
 * call on the handle).
 *
 * Errors a program should handle:
 *  - "server restarted ...": the server had a crash restart (or shut
 *    down) since walshm_attach; nothing of the call reached the WAL.
 *    walshm_detach, then walshm_attach again.
 *  - "server is shutting down ...": a supervised worker (postmaster start
 *    --worker) got SIGTERM; walshm_detach and exit(0).
 * A handle belongs to the process that attached it. In a fork()ed child
 * every call on it fails ("... is a forked child ..."), and walshm_detach
 * there frees only the child's copy (the parent's attachment goes on);
 * a child that needs the server calls walshm_attach itself.
 * Payloads are limited to 64 MiB (WALSHM_MAX_PAYLOAD), prefixes to 64 KiB
 * (WALSHM_MAX_PREFIX).
 */
#ifndef WALSHM_H
#define WALSHM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct walshm_worker walshm_worker;
/* data_dir NULL: the server that started this process (postmaster start --worker).
   Returns NULL on failure, with a NUL-terminated message in errbuf. */
walshm_worker *walshm_attach(const char *data_dir, char *errbuf, size_t errlen);
/* All below: 0 on success, -1 on error (message: walshm_error). LSNs as 64-bit integers. */
int walshm_emit(walshm_worker *w, const char *prefix, const void *data, size_t len, uint64_t *lsn);    /* non-transactional message */
int walshm_begin(walshm_worker *w);
int walshm_emit_tx(walshm_worker *w, const char *prefix, const void *data, size_t len, uint64_t *lsn); /* transactional message */
int walshm_commit(walshm_worker *w, uint64_t *commit_lsn);  /* start of the COMMIT record; durable as synchronous_commit says */
int walshm_abort(walshm_worker *w);
int walshm_flush(walshm_worker *w, uint64_t lsn);
const char *walshm_error(const walshm_worker *w);
int walshm_detach(walshm_worker *w);                        /* releases everything; frees w */

/* ---- Additions beyond the fixed contract ------------------------------ */

#define WALSHM_MAX_PAYLOAD (64u << 20)
#define WALSHM_MAX_PREFIX (64u << 10)

/* Notes on the contract functions:
   - lsn / commit_lsn may be NULL (not wanted);
   - walshm_commit of a transaction that wrote nothing writes no record and
     stores 0;
   - walshm_detach aborts an open transaction and frees w even when it
     returns -1. */

/* 1 when the server asked this supervised worker to stop (SIGTERM; the
   library installs a flag-setting handler only if SIGTERM was left at its
   default), 0 otherwise, -1 for a bad handle. Then detach and exit(0). */
int walshm_shutdown_requested(const walshm_worker *w);
/* Current end of reserved WAL and of flushed WAL. */
int walshm_insert_lsn(walshm_worker *w, uint64_t *lsn);
int walshm_flush_lsn(walshm_worker *w, uint64_t *lsn);

/* Reader: decoded records from an LSN (0: the oldest segment present). */
typedef struct walshm_reader walshm_reader;

#define WALSHM_RECORD_OTHER 0      /* checkpoint, switch, ... */
#define WALSHM_RECORD_MESSAGE 1    /* non-transactional logical message */
#define WALSHM_RECORD_MESSAGE_TX 2 /* transactional logical message */
#define WALSHM_RECORD_COMMIT 3
#define WALSHM_RECORD_ABORT 4

typedef struct walshm_record {
    uint64_t lsn;          /* start of the record */
    uint64_t end;          /* where the next record starts */
    uint32_t xid;          /* 0 for non-transactional records */
    int kind;              /* WALSHM_RECORD_* */
    const char *prefix;    /* NUL-terminated ("" unless a message) */
    const uint8_t *payload;
    size_t payload_len;    /* prefix and payload valid until the next call on the reader */
} walshm_record;

/* A reader bounded by the server's flush position (only durable records);
   NULL on error (message: walshm_error(w)). Close it before detaching w. */
walshm_reader *walshm_reader_open(walshm_worker *w, uint64_t from);
/* A reader of records as soon as they are completely inserted, before they
   are durable (a crash may take them back: after a server restart its
   walshm_reader_next fails with "server restarted"); NULL on error
   (message: walshm_error(w)). Close it before detaching w. */
walshm_reader *walshm_reader_open_inserted(walshm_worker *w, uint64_t from);
/* A reader of a data directory's WAL files, no server needed. */
walshm_reader *walshm_reader_open_dir(const char *data_dir, uint64_t from, char *errbuf, size_t errlen);
/* Next record into *out, waiting up to timeout_ms for one (tail mode; 0:
   do not wait). 1: a record, 0: none yet, -1: error (walshm_reader_error);
   after a server restart, -1 with "server restarted". */
int walshm_reader_next(walshm_reader *r, walshm_record *out, uint32_t timeout_ms);

/* Slots: durable consumer positions in the server's replication slot
   table (shown in pg_replication_slots, plugin "walshm"). A slot holds the
   WAL its reader still needs (up to max_slot_wal_keep_size) across
   restarts and crashes. 0 ok, -1 error (walshm_error(w)). */
int walshm_slot_create(walshm_worker *w, const char *name, uint64_t *lsn);
int walshm_slot_drop(walshm_worker *w, const char *name);
/* A reader of the slot's committed transactional messages (kind
   WALSHM_RECORD_MESSAGE_TX, `end` = the end of the transaction's COMMIT),
   from the transactions the slot's consumer has not confirmed; flushed WAL
   only. Takes the slot for this process until closed; NULL on error
   (walshm_error(w)). */
walshm_reader *walshm_reader_open_slot(walshm_worker *w, const char *name);
/* The consumer has everything committed before lsn (a record's end): the
   slot moves there (saved at the next checkpoint; after a crash what was
   confirmed since is delivered again). -1 for a reader not on a slot. */
int walshm_reader_confirm(walshm_reader *r, uint64_t lsn);
const char *walshm_reader_error(const walshm_reader *r);
int walshm_reader_close(walshm_reader *r);

#ifdef __cplusplus
}
#endif

#endif /* WALSHM_H */
