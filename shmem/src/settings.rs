//! Run-time settings: every switch, with PostgreSQL's names where one exists.
//!
//! `Settings` is `#[repr(C)]` plain data copied into the shared-memory header
//! at creation, so that every process runs with the same choices. Settings
//! are given as `--set NAME=VALUE` or in `DIR/walshm.conf` (`name = value`
//! lines, `#` comments). An unknown name or a bad value is an error that
//! lists what is valid.
//!
//! One table, one row per setting (as PostgreSQL's guc_tables.c): the
//! [`declare_settings!`] invocation below declares each setting once — its
//! field (name, type, default) and its [`Setting`] row (name, [`Kind`] with
//! unit and range, help, [`Context`], seed). The struct, `Default`,
//! [`SETTINGS`] and the row's accessors are generated from it; the parser
//! ([`Settings::set`]), `--help`, `SHOW` ([`Settings::show`]), the
//! configuration file ([`Settings::describe`]) and every error message read
//! the table and nothing else. The machinery (units, kinds, a row's parsing
//! and display) is in `kinds`, as PostgreSQL's guc.c beside guc_tables.c.
//!
//! Contexts: every row but `synchronous_commit` is `Context::Postmaster`
//! (fixed at start; a session's SET of it gets 55P02; a reload reports it
//! as needing a restart). A `Context::Session` row takes a reloaded value
//! (SIGHUP, [`Settings::reload_from`]) for the sessions forked afterwards;
//! a new one also needs its SET handled in the protocol crate.
//!
//! Invariants: every row's accessors name that row's field (the macro writes
//! both from one line); the default of every row shows as a value the row's
//! own parser accepts and that reads back unchanged (tested below); a
//! `secret` row's value is never echoed in an error or answered by SHOW.
//!
//! Units: a number is stored in one [`Unit`] and shown (and read when bare)
//! in another of the same family. Memory takes kB/MB/GB, time us/ms/s/min/h;
//! a value must be a whole number of the stored unit (so wal_buffers is a
//! multiple of 8kB) and lie in the row's range.

mod kinds;

use crate::variants::{
    CommitReply, GroupCommit, InsertLockSpread, InsertLockWait, Insertion, LockLayout,
    RecoveryTargetAction, Reservation, VarAccess, WaitQueue, WalSyncMethod, XidClear,
};
use crate::walsnd::SyncCommit;
use kinds::{Access, Field};
pub use kinds::{Context, Family, Kind, Setting, SettingError, Text, Unit, Value};

/// Capacity of the `password` field (a SCRAM verifier and its NUL).
const PASSWORD_BYTES: usize = 192;

/// Capacity of `recovery_target_name`: PostgreSQL's MAXFNAMELEN, the size
/// of a restore point's name (NUL included) in its WAL record; shmem does
/// not depend on walformat, `backend::recovery_target` asserts the two
/// agree.
pub const RESTORE_POINT_NAME_BYTES: usize = 64;

macro_rules! declare_settings {
    ($(
        $(#[$doc:meta])*
        $field:ident: $ty:ty = $default:expr =>
            $name:literal, $kind:expr, $help:expr $(, $option:ident($($arg:expr),*))*;
    )*) => {
        /// Every setting in force for one run.
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Settings {
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings { $($field: $default,)* }
            }
        }

        /// Every setting, in declaration order (help, config file, errors).
        pub static SETTINGS: &[Setting] = &[$(
            Setting::new($name, $kind, $help, Access {
                get: {
                    fn get(s: &Settings) -> Value<'_> {
                        Field::value(&s.$field)
                    }
                    get
                },
                put: {
                    fn put(s: &mut Settings, v: Value<'_>) -> bool {
                        match <$ty as Field>::from_value(v) {
                            Some(x) => {
                                s.$field = x;
                                true
                            }
                            None => false,
                        }
                    }
                    put
                },
            })$(.$option($($arg),*))*,
        )*];
    };
}

declare_settings! {
    /// Client backends allowed at once (proc slots = this + auxiliaries).
    max_connections: u32 = 100 =>
        "max_connections", Kind::count(1, 4096), "backends allowed at once";
    /// WAL buffer pages of 8 KiB.
    wal_buffers: u32 = 2048 =>
        "wal_buffers", Kind::int(Unit::PAGES, Unit::PAGES, 4, (1 << 30) / 8192),
        "WAL buffer size in shared memory";
    /// Walwriter sleep between rounds, milliseconds.
    wal_writer_delay_ms: u32 = 200 =>
        "wal_writer_delay", Kind::int(Unit::MS, Unit::MS, 1, 10_000),
        "walwriter sleep between flushes";
    /// Number of WAL insertion locks (PostgreSQL's NUM_XLOGINSERT_LOCKS).
    wal_insert_locks: u32 = 8 =>
        "wal_insert_locks", Kind::count(1, 128), "number of WAL insertion locks";
    /// Call fdatasync on WAL.
    fsync: bool = true =>
        "fsync", Kind::Bool, "fdatasync WAL (off: measure the insert path alone)";
    /// What commits wait for: their WAL flush, and with
    /// synchronous_standby_names the standbys' write, flush or apply.
    synchronous_commit: SyncCommit = SyncCommit::On =>
        "synchronous_commit",
        Kind::Text { valid: SyncCommit::VALID, check: sync_commit_value },
        "what commits wait for (off: nothing; local: the local flush; remote_write/on/remote_apply: also the standbys)",
        context(Context::Session);
    /// The walwriter initializes WAL buffer pages ahead of insertion.
    wal_preinit: bool = true =>
        "wal_preinit", Kind::Bool, "walwriter pre-initializes WAL pages", seed("003");
    /// LWLock wait queue.
    lwlock_queue: WaitQueue = WaitQueue::Modern =>
        "lwlock_queue", Kind::Enum(WaitQueue::NAMES), "LWLock wait queue", seed("002");
    /// How insertingAt is read and written.
    inserting_at: VarAccess = VarAccess::Atomic =>
        "inserting_at", Kind::Enum(VarAccess::NAMES), "insertingAt access", seed("000");
    /// WAL insertion lock layout.
    insert_lock_layout: LockLayout = LockLayout::Padded =>
        "insert_lock_layout", Kind::Enum(LockLayout::NAMES), "insertion lock layout",
        seed("001");
    /// WAL insertion scheme.
    wal_insertion: Insertion = Insertion::Parallel =>
        "wal_insertion", Kind::Enum(Insertion::NAMES), "insertion scheme", seed("003");
    /// How insert space is reserved (beyond the seeds).
    wal_reservation: Reservation = Reservation::Spinlock =>
        "wal_reservation", Kind::Enum(Reservation::NAMES), "insert space reservation";
    /// XID clear at transaction end.
    xid_clear: XidClear = XidClear::Group =>
        "xid_clear", Kind::Enum(XidClear::NAMES), "XID clear at commit", seed("004");
    /// Seconds between online checkpoints.
    checkpoint_timeout_s: u32 = 300 =>
        "checkpoint_timeout", Kind::int(Unit::S, Unit::S, 1, 86_400),
        "time between checkpoints";
    /// WAL (MB) written before a checkpoint is requested.
    max_wal_size_mb: u32 = 1024 =>
        "max_wal_size", Kind::int(Unit::MB, Unit::MB, 2, 1_000_000),
        "WAL written between checkpoints";
    /// WAL (MB) kept before the last checkpoint's redo point.
    wal_keep_size_mb: u32 = 0 =>
        "wal_keep_size", Kind::int(Unit::MB, Unit::MB, 0, 1_000_000),
        "WAL kept before the last checkpoint";
    /// TCP port, also the number in the Unix socket's name.
    port: u32 = 5432 =>
        "port", Kind::count(1, 65535), "TCP port and Unix socket number";
    /// Directory of the Unix socket (empty: the data directory).
    unix_socket_directories: Text<256> = Text::empty() =>
        "unix_socket_directories",
        Kind::Text { valid: "a directory ('' = the data directory)", check: any_text },
        "where the Unix socket .s.PGSQL.PORT is created";
    /// TCP addresses to listen on (empty: none; loopback only).
    listen_addresses: Text<64> = Text::empty() =>
        "listen_addresses",
        Kind::Text { valid: "'' (none), 'localhost' or '127.0.0.1'", check: loopback_only },
        "TCP listening (loopback only)";
    /// SCRAM-SHA-256 password for TCP connections (empty: TCP refused).
    password: Text<PASSWORD_BYTES> = Text::empty() =>
        "password",
        Kind::Text {
            valid: "SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey> ('' = TCP logins refused)",
            check: scram_verifier_only,
        },
        "SCRAM verifier for TCP logins (plain text: init/start --pwfile FILE or WALSHM_PASSWORD)",
        secret();
    /// SCRAM-SHA-256 verifier of the replication role: a replication
    /// connection over TCP authenticates with it, never with `password`
    /// (empty: TCP replication refused with 42501). The Unix socket
    /// admits only the server's own OS user, which may always replicate.
    replication_password: Text<PASSWORD_BYTES> = Text::empty() =>
        "replication_password",
        Kind::Text {
            valid: "SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey> ('' = no replication over TCP)",
            check: scram_verifier_only,
        },
        "SCRAM verifier replication connections over TCP log in with instead of password ('' = none may; plain text: init/start --replication-pwfile FILE or WALSHM_REPLICATION_PASSWORD)",
        secret();
    /// Microseconds a connection backend polls its socket without
    /// sleeping before it blocks on the next client message; only while
    /// sessions take at most half the CPUs (0: never poll).
    client_poll_us: u32 = 100 =>
        "client_poll", Kind::int(Unit::US, Unit::US, 0, 10_000),
        "how long a backend polls for the next client message before it sleeps (0 = off), while sessions use at most half the CPUs";
    /// Seconds a client has for the whole start-up and authentication
    /// exchange (PostgreSQL's authentication_timeout).
    authentication_timeout_s: u32 = 60 =>
        "authentication_timeout", Kind::int(Unit::S, Unit::S, 1, 600),
        "time a client has to complete start-up and authentication";
    /// Bytes one session may hold for a single value or a single reply
    /// message; beyond it the statement fails with 53200.
    session_memory_limit: u64 = 256 << 20 =>
        "session_memory_limit", Kind::int(Unit::BYTES, Unit::KB, 1 << 20, 1 << 30),
        "largest value or reply message one session may build (53200 beyond)";
    // ---- archiving ----
    /// Run the archiver: completed segments are handed to `archive_command`
    /// and kept in pg_wal until it succeeds.
    archive_mode: bool = false =>
        "archive_mode", Kind::Bool, "archive completed WAL segments with archive_command";
    /// Shell command that archives one segment (%p: its path relative to
    /// the data directory, %f: its file name, %%: a percent sign).
    archive_command: Text<1024> = Text::empty() =>
        "archive_command",
        Kind::Text { valid: "a shell command (%p path, %f file name)", check: any_text },
        "command that archives a completed WAL segment (exit 0 = archived)";
    /// Shell command that fetches one archived file during archive
    /// recovery (%f: the file wanted, %p: where to put it).
    restore_command: Text<1024> = Text::empty() =>
        "restore_command",
        Kind::Text { valid: "a shell command (%f file name, %p destination)", check: any_text },
        "command that fetches an archived WAL segment during restore (exit 0 = fetched)";
    // ---- point-in-time recovery (read only with recovery.signal; at most
    // one target; each value is checked by backend::recovery_target) ----
    /// Stop archive recovery at the record at or after this LSN ('' = none).
    recovery_target_lsn: Text<32> = Text::empty() =>
        "recovery_target_lsn",
        Kind::Text { valid: "'' or a WAL location such as 0/3000060", check: any_text },
        "archive recovery stops at the record at or after this WAL location";
    /// Stop archive recovery at the first commit or abort after this time.
    recovery_target_time: Text<64> = Text::empty() =>
        "recovery_target_time",
        Kind::Text { valid: "'' or a timestamp such as 2026-01-31 12:00:00.5+00", check: any_text },
        "archive recovery stops at the first commit or abort after this time";
    /// Stop archive recovery at the commit or abort of this transaction.
    recovery_target_xid: Text<24> = Text::empty() =>
        "recovery_target_xid",
        Kind::Text { valid: "'' or a transaction ID (txid_current() form)", check: any_text },
        "archive recovery stops at the commit or abort of this transaction";
    /// Stop archive recovery after the restore point of this name.
    recovery_target_name: Text<RESTORE_POINT_NAME_BYTES> = Text::empty() =>
        "recovery_target_name",
        Kind::Text { valid: "'' or a restore point name (at most 63 bytes)", check: any_text },
        "archive recovery stops after the restore point of this name (pg_create_restore_point)";
    /// Whether the target record itself is replayed (lsn, time, xid).
    recovery_target_inclusive: bool = true =>
        "recovery_target_inclusive", Kind::Bool,
        "stop just after the recovery target (on) or just before it (off)";
    /// What archive recovery does at its target.
    recovery_target_action: RecoveryTargetAction = RecoveryTargetAction::Pause =>
        "recovery_target_action", Kind::Enum(RecoveryTargetAction::NAMES),
        "at the recovery target: promote (new timeline), shutdown, or pause (walshm has no hot standby: acts as shutdown, as PostgreSQL with hot_standby = off)";
    // ---- standby ----
    /// How a standby (`standby.signal`) connects to its primary: libpq's
    /// keyword=value form (host, port, user, password, passfile,
    /// application_name), as `pg_basebackup -R` writes it.
    primary_conninfo: Text<1024> = Text::empty() =>
        "primary_conninfo",
        Kind::Text { valid: "a connection string (host=... port=... ...)", check: any_text },
        "connection string a standby's walreceiver uses to reach its primary";
    /// The physical slot on the primary a standby streams from ('' = none).
    primary_slot_name: Text<64> = Text::empty() =>
        "primary_slot_name",
        Kind::Text { valid: "'' or a slot name (lower-case letters, digits, _)", check: slot_name_syntax },
        "replication slot on the primary the walreceiver streams from";
    /// A name for this server: a standby's walreceiver reports it as its
    /// application_name when primary_conninfo names none.
    cluster_name: Text<64> = Text::empty() =>
        "cluster_name",
        Kind::Text { valid: "a name", check: any_text },
        "name of this server (a standby's default application_name)";
    /// The walreceiver reports its positions at least this often.
    wal_receiver_status_interval_s: u32 = 10 =>
        "wal_receiver_status_interval", Kind::int(Unit::S, Unit::S, 0, 2_147_483),
        "longest time between two walreceiver status reports (0 = only when asked)";
    /// A walreceiver that heard nothing from its primary for this long
    /// ends the connection (0: never); it asks for a reply after half.
    wal_receiver_timeout_ms: u32 = 60_000 =>
        "wal_receiver_timeout", Kind::int(Unit::MS, Unit::MS, 0, 2_147_483_647),
        "end a replication connection whose primary is silent for this long (0 = never)";
    /// A walreceiver that could not connect, or lost its primary, tries
    /// again after this long.
    wal_retrieve_retry_interval_ms: u32 = 5_000 =>
        "wal_retrieve_retry_interval", Kind::int(Unit::MS, Unit::MS, 1, 2_147_483_647),
        "time a standby waits before it connects to its primary again";
    // ---- attached workers ----
    /// Proc slots for worker processes that attach to the segment
    /// (supervised and external), PostgreSQL's max_worker_processes.
    max_worker_processes: u32 = 8 =>
        "max_worker_processes", Kind::count(0, 1024),
        "worker processes that may attach to shared memory at once";
    /// Milliseconds before a supervised worker that detached and exited 1
    /// is started again (PostgreSQL's bgw_restart_time).
    worker_restart_delay_ms: u32 = 5000 =>
        "worker_restart_delay", Kind::int(Unit::MS, Unit::S, 0, 3_600_000),
        "wait before restarting a supervised worker that exited 1";
    // ---- replication ----
    /// Walsenders (replication connections) allowed at once.
    max_wal_senders: u32 = 10 =>
        "max_wal_senders", Kind::count(0, crate::walsnd::MAX_WAL_SENDERS as u64),
        "replication connections (walsenders) allowed at once";
    /// Replication slots the server can hold.
    max_replication_slots: u32 = 10 =>
        "max_replication_slots", Kind::count(0, crate::walsnd::MAX_SLOTS as u64),
        "replication slots the server can hold";
    /// A walsender ends a connection whose receiver said nothing for this
    /// long (0: never); it asks for a reply after half of it.
    wal_sender_timeout_ms: u32 = 60_000 =>
        "wal_sender_timeout", Kind::int(Unit::MS, Unit::MS, 0, 3_600_000),
        "end a replication connection silent for this long (0 = never)";
    /// Standbys whose reports release synchronous commits.
    synchronous_standby_names: Text<256> = Text::empty() =>
        "synchronous_standby_names",
        Kind::Text {
            valid: "'' or a list: name, ... | FIRST n (name, ...) | ANY n (name, ...), '*' = any",
            check: standby_names_syntax,
        },
        "standbys (application_name) that synchronous commits wait for";
    /// WAL a slot may hold back beyond the checkpoint's needs: -1 = no
    /// limit, else a size (MB when bare).
    max_slot_wal_keep_size: Text<24> = Text::empty() =>
        "max_slot_wal_keep_size",
        Kind::Text { valid: "-1 (no limit) or a size such as 1024MB or 2GB", check: keep_size_syntax },
        "WAL replication slots may keep (-1 = unlimited; beyond it a slot is lost)";
    // ---- statistics ----
    /// Time WAL writes and syncs for pg_stat_wal (PostgreSQL's setting).
    track_wal_io_timing: bool = false =>
        "track_wal_io_timing", Kind::Bool, "time WAL writes and syncs (pg_stat_wal)";
    // ---- the direct insert path ----
    /// Insertion locks backends spread over: `all` of `wal_insert_locks`
    /// (PostgreSQL's) or `adaptive` (default: `all` while the walwriter
    /// keeps up, one fewer than CPUs while it falls behind;
    /// backend/src/xlog/pace.rs).
    wal_insert_lock_spread: InsertLockSpread = InsertLockSpread::Adaptive =>
        "wal_insert_lock_spread", Kind::Enum(InsertLockSpread::NAMES),
        "insertion locks in use: all or adaptive (all while the walwriter keeps up, one fewer than CPUs while it falls behind, leaving one to the walwriter)";
    /// What a backend does when its insertion lock is busy: `queue`
    /// (PostgreSQL's: sleep on it) or `adaptive` (default: `queue` until
    /// this backend's recent acquisitions waited often, then take any free
    /// one first, yield and re-scan before sleeping; see
    /// backend/src/xlog/insert_locks.rs).
    wal_insert_lock_wait: InsertLockWait = InsertLockWait::Adaptive =>
        "wal_insert_lock_wait", Kind::Enum(InsertLockWait::NAMES),
        "busy insertion lock: queue (sleep on it) or adaptive (queue; while waits are frequent, take any free one first, yield and re-scan)";
    // ---- durable commits ----
    /// Who writes and syncs the WAL a synchronous commit waits for.
    /// `hybrid` is the default: in same-run A/Bs (2 cores, shared) it used
    /// 6-20 % less server CPU per commit at 16-256 clients, with a quarter
    /// fewer context switches, tps 1.0-1.24x, and tied at 1 and 4 clients
    /// (within the noise); `leader` is PostgreSQL's XLogFlush (see
    /// backend/src/xlog/group_commit.rs).
    group_commit: GroupCommit = GroupCommit::Hybrid =>
        "group_commit", Kind::Enum(GroupCommit::NAMES),
        "who flushes for a durable commit: hybrid (itself when WALWriteLock is free, else the next releaser covers it or hands it the flush), leader (PostgreSQL's) or flusher (always the walwriter)";
    // ---- group commit (commit_delay / commit_siblings) ----
    /// Microseconds a flush leader sleeps before its fdatasync so that
    /// more commits join it (PostgreSQL's commit_delay; 0 = off).
    commit_delay_us: u32 = 0 =>
        "commit_delay", Kind::int(Unit::US, Unit::US, 0, 100_000),
        "sleep before a group flush so more commits join it (0 = off), if commit_siblings others are in a transaction";
    /// Other transactions that must be active for `commit_delay` to apply
    /// (PostgreSQL's commit_siblings).
    commit_siblings: u32 = 5 =>
        "commit_siblings", Kind::count(0, 1000),
        "concurrent open transactions required before commit_delay applies";
    // ---- synchronous replication, one sleep per commit ----
    /// A commit that waits for standbys only requests its local flush and
    /// sleeps once, in the sync-rep queue (the walsender sends only
    /// flushed WAL); off: PostgreSQL's order, flush then wait again.
    /// Measured (replication-bench, 64 clients, 2 cores, shared, 3 same-run
    /// pairs): server context switches per commit 6.3 against 8.9, CPU per
    /// commit 115 against 136 us (medians; tps ratios too noisy to call).
    sync_rep_one_sleep: bool = true =>
        "sync_rep_one_sleep", Kind::Bool,
        "a commit waiting for standbys requests its local flush and sleeps once, in the sync-rep queue (off: PostgreSQL's flush, then wait)";
    // ---- wal_sync_method ----
    /// How WAL is made durable, with PostgreSQL's names and meaning on
    /// Linux (see `backend::walfile`): `fdatasync` (default) or `fsync`
    /// after writing; `open_datasync` / `open_sync` open each segment with
    /// O_DSYNC / O_SYNC, so every write is durable when it returns and no
    /// sync call is made (pg_stat_wal's `wal_sync` and the `fdatasyncs`
    /// counters stay 0, commits per fdatasync is null; count `wal_write`).
    /// Ignored with `fsync = off`. Measured (pgbench -M prepared durable
    /// autocommit, 2 cores, shared, 6 same-run pairs, open_datasync /
    /// fdatasync medians): 1 client tps 1.11x, server CPU/commit 0.92x;
    /// 16 clients 1.00x / 0.98x; 64 clients 0.96x / 1.02x; commits per
    /// durable write equal (7.2 at 16, 21 at 64). No clear win at every
    /// client count, so fdatasync stays the default (PostgreSQL's).
    wal_sync_method: WalSyncMethod = WalSyncMethod::Fdatasync =>
        "wal_sync_method", Kind::Enum(WalSyncMethod::NAMES),
        "how WAL is made durable: fdatasync (default) or fsync after writing, open_datasync (O_DSYNC) or open_sync (O_SYNC) writes";
    // ---- flow control of asynchronous streaming ----
    /// walshm's own (PostgreSQL has no flow control): while a receiver
    /// streams, a backend about to insert WAL waits while the insert
    /// position is more than this far ahead of the least write position
    /// the streaming receivers reported (`throttle`). 0 (default): off.
    max_replication_lag_mb: u32 = 0 =>
        "max_replication_lag", Kind::int(Unit::MB, Unit::MB, 0, 1_000_000),
        "walshm only: inserting backends wait while WAL is this far ahead of the slowest streaming receiver's reported write (0 = off, PostgreSQL's behaviour)";
    // ---- commit replies ----
    /// Who sends a durable commit's reply: `backend` (waits for its flush,
    /// then replies) or `flusher` (hands the reply to the walwriter, which
    /// sends it after the covering fdatasync; see backend/src/reply.rs).
    commit_reply: CommitReply = CommitReply::Backend =>
        "commit_reply", Kind::Enum(CommitReply::NAMES),
        "who sends a durable commit's reply: backend (after waiting for the flush) or flusher (the walwriter, after its fdatasync)";
    // ---- admission to the insertion API ----
    /// At most this many processes per CPU (of the process's affinity
    /// mask) insert through the insertion API at a time without sleeping
    /// in between (built-in workloads and the worker library); the others
    /// wait in FIFO order, asleep, and each holder keeps its token for
    /// `insert_concurrency_turn` (`shmem::admission`, `backend::admission`).
    /// 0 = no limit.
    insert_concurrency_per_cpu: u32 = 4 =>
        "insert_concurrency_per_cpu", Kind::count(0, 64),
        "processes per CPU inserting through the insertion API at a time, the rest waiting their turn in FIFO order (0 = no limit)";
    /// How long a process keeps its admission token while others wait.
    insert_concurrency_turn_us: u32 = 8_000 =>
        "insert_concurrency_turn", Kind::int(Unit::US, Unit::MS, 100, 1_000_000),
        "how long an inserting process keeps its turn while others wait (insert_concurrency_per_cpu)";
}

/// `synchronous_standby_names` must parse (see `walsnd::standby_names`).
fn standby_names_syntax(row: &Setting, value: &str) -> Result<(), SettingError> {
    crate::walsnd::standby_names::parse(value)
        .map(|_| ())
        .map_err(|e| SettingError(format!("{}: {e}", row.invalid(value).0)))
}

/// `synchronous_commit` must be one of PostgreSQL's values.
fn sync_commit_value(row: &Setting, value: &str) -> Result<(), SettingError> {
    match SyncCommit::parse(value) {
        Some(_) => Ok(()),
        None => Err(row.invalid(value)),
    }
}

fn keep_size_syntax(row: &Setting, value: &str) -> Result<(), SettingError> {
    match parse_keep_size_mb(value) {
        Some(_) => Ok(()),
        None => Err(row.invalid(value)),
    }
}

/// `max_slot_wal_keep_size` in MB: None if malformed, Some(None) for no
/// limit ('' or -1), Some(Some(mb)) otherwise.
pub fn parse_keep_size_mb(value: &str) -> Option<Option<u64>> {
    let v = value.trim();
    if v.is_empty() || v == "-1" {
        return Some(None);
    }
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..split].parse().ok()?;
    let mb = match v[split..].trim() {
        "" | "MB" => n,
        "GB" => n.checked_mul(1024)?,
        "TB" => n.checked_mul(1024 * 1024)?,
        _ => return None,
    };
    Some(Some(mb))
}

// ---- text checks ----

fn any_text(_: &Setting, _: &str) -> Result<(), SettingError> {
    Ok(())
}

/// A replication slot's name, as PostgreSQL's ReplicationSlotValidateName
/// allows it (or '' for none).
fn slot_name_syntax(row: &Setting, value: &str) -> Result<(), SettingError> {
    let ok = value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(row.invalid(value))
    }
}

/// TCP listening is loopback only: '' (none), 'localhost' or '127.0.0.1'.
fn loopback_only(row: &Setting, value: &str) -> Result<(), SettingError> {
    match value {
        "" | "localhost" | "127.0.0.1" => Ok(()),
        _ => Err(row.invalid(value)),
    }
}

/// The `password` and `replication_password` settings hold only a SCRAM
/// verifier (its full syntax is checked by the protocol crate when the
/// server starts). A plain password is refused without echoing it: on a
/// command line it would be readable in /proc/PID/cmdline by every local
/// user.
fn scram_verifier_only(row: &Setting, value: &str) -> Result<(), SettingError> {
    let verifier_like = value.is_empty()
        || (value.starts_with("SCRAM-SHA-256$") && !value.contains(char::is_whitespace));
    let (flag, env) = match row.name {
        "replication_password" => ("--replication-pwfile", "WALSHM_REPLICATION_PASSWORD"),
        _ => ("--pwfile", "WALSHM_PASSWORD"),
    };
    if !verifier_like {
        return Err(SettingError(format!(
            "{} must be a SCRAM-SHA-256 verifier (SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>), never a plain password: give the plain password with {flag} FILE (mode 0600) or the {env} environment variable",
            row.name
        )));
    }
    if value.len() >= PASSWORD_BYTES || value.contains('\0') {
        return Err(SettingError(format!(
            "{}: verifier too long (at most {} bytes)",
            row.name,
            PASSWORD_BYTES - 1
        )));
    }
    Ok(())
}

/// The row named `name` (any case, surrounding blanks ignored).
pub fn lookup(name: &str) -> Result<&'static Setting, SettingError> {
    let name = name.trim().to_ascii_lowercase();
    SETTINGS.iter().find(|s| s.name == name).ok_or_else(|| {
        let valid: Vec<_> = SETTINGS.iter().map(|s| s.name).collect();
        SettingError(format!(
            "unrecognized setting \"{name}\" (valid: {})",
            valid.join(", ")
        ))
    })
}

// ---- the whole set ----

impl Settings {
    /// Applies one `NAME=VALUE` (quotes around the value are dropped).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), SettingError> {
        self.set_unquoted(name, value.trim().trim_matches('\'').trim_matches('"'))
    }

    /// Sets `name` to `value` exactly as given (a configuration file's
    /// quoted value after its quotes were undone: it may itself end in a
    /// quote, as a connection string's `host='/dir'` does).
    pub fn set_unquoted(&mut self, name: &str, value: &str) -> Result<(), SettingError> {
        let row = lookup(name)?;
        let parsed = row.parse(value)?;
        if row.store(self, parsed) {
            Ok(())
        } else {
            Err(row.invalid(value))
        }
    }

    /// Applies "NAME=VALUE".
    pub fn set_assignment(&mut self, assignment: &str) -> Result<(), SettingError> {
        let (name, value) = assignment
            .split_once('=')
            .ok_or_else(|| SettingError(format!("expected NAME=VALUE, got \"{assignment}\"")))?;
        self.set(name, value)
    }

    /// Applies a configuration file's text; errors name the line.
    pub fn apply_config_text(&mut self, text: &str, origin: &str) -> Result<(), SettingError> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            self.set_assignment(line)
                .map_err(|e| SettingError(format!("{origin}:{}: {e}", i + 1)))?;
        }
        Ok(())
    }

    /// Every setting as (name, value) in configuration-file form (what
    /// `init` writes, what `set` reads back).
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        SETTINGS
            .iter()
            .map(|row| (row.name, row.config_value(self)))
            .collect()
    }

    /// SHOW NAME: the value in force, or None for an unknown or secret
    /// setting.
    pub fn show(&self, name: &str) -> Option<String> {
        let row = lookup(name).ok()?;
        (!row.secret).then(|| row.display(self))
    }

    /// A reload (SIGHUP): takes from `new` the value of every row whose
    /// context allows a change while the server runs (`Context::Session`,
    /// PostgreSQL's user-settable rows, whose server value is each new
    /// session's default); the other rows keep their values and those
    /// that differ are reported.
    pub fn reload_from(&mut self, new: &Settings) -> ReloadOutcome {
        let mut outcome = ReloadOutcome::default();
        for row in SETTINGS {
            let (old_shown, new_shown) = (row.display(self), row.display(new));
            if old_shown == new_shown {
                continue;
            }
            match row.context {
                Context::Session => {
                    row.copy(new, self);
                    let shown = if row.secret {
                        "(secret)".into()
                    } else {
                        new_shown
                    };
                    outcome.changed.push((row.name, shown));
                }
                Context::Postmaster => outcome.needs_restart.push(row.name),
            }
        }
        outcome
    }

    /// This set with the rows a reload may change taken from `reloaded`
    /// (what a session forked after a reload runs with).
    pub fn with_reloadable_from(&self, reloaded: &Settings) -> Settings {
        let mut s = *self;
        for row in SETTINGS.iter().filter(|r| r.context == Context::Session) {
            row.copy(reloaded, &mut s);
        }
        s
    }
}

/// What [`Settings::reload_from`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// Rows that took a new value, with the value as SHOW prints it.
    pub changed: Vec<(&'static str, String)>,
    /// Rows whose new value waits for a restart.
    pub needs_restart: Vec<&'static str>,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reload_changes_session_rows_only() {
        let mut running = Settings::default();
        let mut file = Settings::default();
        file.set("synchronous_commit", "off").unwrap();
        file.set("wal_buffers", "64").unwrap();
        let outcome = running.reload_from(&file);
        assert_eq!(
            outcome.changed,
            vec![("synchronous_commit", "off".to_string())]
        );
        assert_eq!(outcome.needs_restart, vec!["wal_buffers"]);
        assert_eq!(running.show("synchronous_commit").as_deref(), Some("off"));
        assert_eq!(running.wal_buffers, Settings::default().wal_buffers);
        let forked = Settings::default().with_reloadable_from(&file);
        assert_eq!(forked.show("synchronous_commit").as_deref(), Some("off"));
        assert_eq!(forked.wal_buffers, Settings::default().wal_buffers);
        assert_eq!(
            running.reload_from(&running.clone()),
            ReloadOutcome::default()
        );
    }

    #[test]
    fn every_described_setting_round_trips() {
        let s = Settings {
            fsync: false,
            lwlock_queue: WaitQueue::Legacy,
            wal_buffers: 64,
            port: 6543,
            password: Text::new(
                "SCRAM-SHA-256$4096:c2FsdHNhbHRzYWx0c2FsdA==$qGvNmFBTzLyyEhsDt0wYnVzJYvxQbiAW1N3SOqS6xAo=:V2dNqBZKhBBiIsG0Q5DdfzkLm8AeFAcPbRjEmQEIHtw=",
            )
            .unwrap(),
            listen_addresses: Text::new("localhost").unwrap(),
            client_poll_us: 250,
            authentication_timeout_s: 5,
            session_memory_limit: 3 << 20,
            ..Default::default()
        };
        let mut t = Settings::default();
        for (n, v) in s.describe() {
            t.set(n, &v).unwrap();
        }
        assert_eq!(s, t);
        assert_eq!(s.describe().len(), SETTINGS.len());
    }

    #[test]
    fn every_row_reads_back_its_default_and_is_declared_once() {
        let defaults = Settings::default();
        for (i, row) in SETTINGS.iter().enumerate() {
            let mut s = Settings::default();
            let shown = row.config_value(&defaults);
            s.set(row.name, &shown)
                .unwrap_or_else(|e| panic!("{}: default {shown:?}: {e}", row.name));
            assert_eq!(s, defaults, "{}", row.name);
            assert!(
                SETTINGS[..i].iter().all(|r| r.name != row.name),
                "{} declared twice",
                row.name
            );
        }
    }

    #[test]
    fn each_row_writes_its_own_field() {
        // A changed value of one row changes that row's display only.
        let mut s = Settings::default();
        s.set("wal_insert_locks", "3").unwrap();
        s.set("xid_clear", "exclusive").unwrap();
        let base = Settings::default();
        let changed: Vec<_> = SETTINGS
            .iter()
            .filter(|r| r.display(&s) != r.display(&base))
            .map(|r| r.name)
            .collect();
        assert_eq!(changed, ["wal_insert_locks", "xid_clear"]);
        assert_eq!(s.wal_insert_locks, 3);
        assert_eq!(s.xid_clear, XidClear::Exclusive);
    }

    #[test]
    fn units_and_errors() {
        let mut s = Settings::default();
        s.set("wal_buffers", "16MB").unwrap();
        assert_eq!(s.wal_buffers, 2048);
        assert!(
            s.set("wal_buffers", "12kB").is_err(),
            "not a multiple of 8kB"
        );
        assert!(s.set("wal_buffers", "3").is_err());
        s.set("wal_writer_delay", "1s").unwrap();
        assert_eq!(s.wal_writer_delay_ms, 1000);
        s.set("client_poll", "2ms").unwrap();
        assert_eq!(s.client_poll_us, 2000);
        s.set("client_poll", "0").unwrap();
        assert_eq!(s.client_poll_us, 0);
        assert!(s.set("client_poll", "11ms").is_err());
        assert!(s.set("client_poll", "5s").is_err());
        s.set("authentication_timeout", "2min").unwrap();
        assert_eq!(s.authentication_timeout_s, 120);
        assert!(s.set("authentication_timeout", "0").is_err());
        assert!(s.set("authentication_timeout", "11min").is_err());
        assert!(
            s.set("checkpoint_timeout", "1500ms").is_err(),
            "not whole s"
        );
        s.set("checkpoint_timeout", "1h").unwrap();
        assert_eq!(s.checkpoint_timeout_s, 3600);
        s.set("max_wal_size", "2GB").unwrap();
        assert_eq!(s.max_wal_size_mb, 2048);
        assert!(s.set("max_wal_size", "2s").is_err(), "a time for a size");
        s.set("session_memory_limit", "64MB").unwrap();
        assert_eq!(s.session_memory_limit, 64 << 20);
        s.set("session_memory_limit", "2048").unwrap();
        assert_eq!(s.session_memory_limit, 2 << 20, "bare number is kB");
        assert!(s.set("session_memory_limit", "512kB").is_err());
        assert!(s.set("session_memory_limit", "2GB").is_err());
        assert!(s.set("port", "99999999999999999999999").is_err());
        let e = s.set("nope", "1").unwrap_err().0;
        assert!(
            e.contains("unrecognized setting") && e.contains("wal_buffers"),
            "{e}"
        );
        let e = s.set("lwlock_queue", "fast").unwrap_err().0;
        assert!(e.contains("modern|legacy"), "{e}");
        let e = s.set("wal_insert_locks", "0").unwrap_err().0;
        assert!(
            e.contains("invalid value for setting") && e.contains("1..=128"),
            "{e}"
        );
        assert!(s.set("wal_insert_locks", "129").is_err());
        assert!(s.set("listen_addresses", "0.0.0.0").is_err());
        assert!(s.set_assignment("fsync").is_err());
        let e = s
            .apply_config_text("# c\nfsync = off\nbogus = 1\n", "walshm.conf")
            .unwrap_err()
            .0;
        assert!(e.starts_with("walshm.conf:3:"), "{e}");
        assert!(!s.fsync);
    }

    #[test]
    fn help_names_units_seeds_and_ranges() {
        let row = |n| lookup(n).unwrap();
        assert_eq!(row("wal_insert_locks").valid(), "1..=128");
        assert_eq!(row("fsync").valid(), "on|off");
        assert_eq!(
            row("wal_buffers").valid(),
            "pages (8kB), or with kB/MB/GB; 32kB..=1GB"
        );
        assert_eq!(
            row("wal_writer_delay").valid(),
            "ms, or with ms/s/min/h; 1ms..=10s"
        );
        assert!(row("xid_clear").what().ends_with("(seed 004)"));
        assert!(row("synchronous_commit").what().contains("SET"));
    }

    #[test]
    fn show_answers_every_setting_but_the_password() {
        let s = Settings::default();
        assert_eq!(s.show("wal_writer_delay").as_deref(), Some("200ms"));
        assert_eq!(s.show("WAL_BUFFERS").as_deref(), Some("2048"));
        assert_eq!(s.show("session_memory_limit").as_deref(), Some("262144kB"));
        assert_eq!(s.show("listen_addresses").as_deref(), Some(""));
        assert_eq!(s.show("password"), None);
        assert_eq!(s.show("nope"), None);
    }

    #[test]
    fn password_takes_only_a_verifier() {
        let mut s = Settings::default();
        let e = s.set("password", "hunter2").unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "the error echoes the password: {e}");
        assert!(
            e.contains("--pwfile") && e.contains("WALSHM_PASSWORD"),
            "{e}"
        );
        let long = format!("SCRAM-SHA-256${}", "x".repeat(200));
        let e = s.set("password", &long).unwrap_err().to_string();
        assert!(!e.contains("xxxx") && e.contains("too long"), "{e}");
        assert!(s
            .set_assignment("password=SCRAM-SHA-256$4096:c2FsdA==$a:b")
            .is_ok());
        assert!(s.set("password", "").is_ok());
        let e = s
            .set("replication_password", "hunter2")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "the error echoes the password: {e}");
        assert!(
            e.contains("--replication-pwfile") && e.contains("WALSHM_REPLICATION_PASSWORD"),
            "{e}"
        );
        assert_eq!(s.show("replication_password"), None);
    }
}
