//! Named constants of the PostgreSQL 15 WAL format.

/// `XLOG_PAGE_MAGIC` of PostgreSQL 15 (first two bytes of every WAL page).
pub const XLOG_PAGE_MAGIC: u16 = 0xD110;
/// WAL page size (`XLOG_BLCKSZ`), fixed at PostgreSQL's default.
pub const XLOG_BLCKSZ: usize = 8192;
/// Heap page size (`BLCKSZ`), needed to decode full-page-image headers.
pub const BLCKSZ: usize = 8192;
/// Alignment of records (`MAXIMUM_ALIGNOF` on 64-bit platforms).
pub const MAXIMUM_ALIGNOF: u64 = 8;

/// Size of `XLogPageHeaderData`, MAXALIGNed (20 bytes of fields + 4 padding).
pub const SIZE_OF_XLOG_SHORT_PHD: usize = 24;
/// Size of `XLogLongPageHeaderData`, MAXALIGNed.
pub const SIZE_OF_XLOG_LONG_PHD: usize = 40;
/// Size of `XLogRecord` (the fixed record header).
pub const SIZE_OF_XLOG_RECORD: usize = 24;
/// Offset of `xl_crc` inside `XLogRecord`: the header CRC covers bytes before it.
pub const XL_CRC_OFFSET: usize = 20;

/// Largest `xl_tot_len` this crate writes or accepts: 1020 MiB, which is
/// PostgreSQL's `XLogRecordMaxSize` (PostgreSQL 16 made it explicit; PostgreSQL
/// 15's reader rejects anything above `MaxAllocSize`, 1 GiB - 1, anyway).
pub const MAX_RECORD_LEN: usize = 1020 * 1024 * 1024;

/// `xlp_info` flag: the page begins with the continuation of a record.
pub const XLP_FIRST_IS_CONTRECORD: u16 = 0x0001;
/// `xlp_info` flag: this page has the long header (first page of a segment).
pub const XLP_LONG_HEADER: u16 = 0x0002;
/// `xlp_info` flag: records on this page have removable backup blocks (set by
/// PostgreSQL 15 whenever no online backup is running; the fixture has it).
pub const XLP_BKP_REMOVABLE: u16 = 0x0004;
/// `xlp_info` flag: the continuation record at the page start was overwritten.
pub const XLP_FIRST_IS_OVERWRITE_CONTRECORD: u16 = 0x0008;
/// All valid `xlp_info` bits.
pub const XLP_ALL_FLAGS: u16 = 0x000F;

/// Low four bits of `xl_info` are reserved for the WAL machinery.
pub const XLR_INFO_MASK: u8 = 0x0F;
/// High four bits of `xl_info` belong to the resource manager.
pub const XLR_RMGR_INFO_MASK: u8 = 0xF0;

/// Block id announcing main data of at most 255 bytes (1-byte length follows).
pub const XLR_BLOCK_ID_DATA_SHORT: u8 = 255;
/// Block id announcing main data of more than 255 bytes (4-byte length follows).
pub const XLR_BLOCK_ID_DATA_LONG: u8 = 254;
/// Block id announcing a 2-byte replication origin id.
pub const XLR_BLOCK_ID_ORIGIN: u8 = 253;
/// Block id announcing a 4-byte top-level transaction id.
pub const XLR_BLOCK_ID_TOPLEVEL_XID: u8 = 252;
/// Highest block-reference id.
pub const XLR_MAX_BLOCK_ID: u8 = 32;

/// `fork_flags` bits of a block reference header.
pub const BKPBLOCK_FORK_MASK: u8 = 0x0F;
/// Block reference carries a full-page image.
pub const BKPBLOCK_HAS_IMAGE: u8 = 0x10;
/// Block reference carries rmgr data.
pub const BKPBLOCK_HAS_DATA: u8 = 0x20;
/// Block reference will be re-initialised on redo.
pub const BKPBLOCK_WILL_INIT: u8 = 0x40;
/// Block reference omits its `RelFileNode` (same as previous block).
pub const BKPBLOCK_SAME_REL: u8 = 0x80;
/// `bimg_info`: the page image has a hole.
pub const BKPIMAGE_HAS_HOLE: u8 = 0x01;
/// `bimg_info`: the image must be applied on redo.
pub const BKPIMAGE_APPLY: u8 = 0x02;
/// `bimg_info`: image compressed with pglz.
pub const BKPIMAGE_COMPRESS_PGLZ: u8 = 0x04;
/// `bimg_info`: image compressed with lz4.
pub const BKPIMAGE_COMPRESS_LZ4: u8 = 0x08;
/// `bimg_info`: image compressed with zstd.
pub const BKPIMAGE_COMPRESS_ZSTD: u8 = 0x10;
/// Size of a `RelFileNode` (spcNode, dbNode, relNode).
pub const SIZE_OF_REL_FILE_NODE: usize = 12;

/// Resource manager ids (`rmgrlist.h`).
pub const RM_XLOG_ID: u8 = 0;
/// Transaction resource manager.
pub const RM_XACT_ID: u8 = 1;
/// Logical decoding messages resource manager.
pub const RM_LOGICALMSG_ID: u8 = 21;
/// Highest built-in resource manager id in PostgreSQL 15.
pub const RM_MAX_BUILTIN_ID: u8 = 21;
/// Lowest custom resource manager id.
pub const RM_MIN_CUSTOM_ID: u8 = 128;

/// Built-in resource manager names as `pg_waldump` prints them, by id.
pub const RMGR_NAMES: [&str; 22] = [
    "XLOG",
    "Transaction",
    "Storage",
    "CLOG",
    "Database",
    "Tablespace",
    "MultiXact",
    "RelMap",
    "Standby",
    "Heap2",
    "Heap",
    "Btree",
    "Hash",
    "Gin",
    "Gist",
    "Sequence",
    "SPGist",
    "BRIN",
    "CommitTs",
    "ReplicationOrigin",
    "Generic",
    "LogicalMessage",
];

/// XLOG rmgr info: shutdown checkpoint.
pub const XLOG_CHECKPOINT_SHUTDOWN: u8 = 0x00;
/// XLOG rmgr info: online checkpoint.
pub const XLOG_CHECKPOINT_ONLINE: u8 = 0x10;
/// XLOG rmgr info: no-op.
pub const XLOG_NOOP: u8 = 0x20;
/// XLOG rmgr info: next OID.
pub const XLOG_NEXTOID: u8 = 0x30;
/// XLOG rmgr info: segment switch.
pub const XLOG_SWITCH: u8 = 0x40;
/// XLOG rmgr info: end of backup.
pub const XLOG_BACKUP_END: u8 = 0x50;
/// XLOG rmgr info: parameter change.
pub const XLOG_PARAMETER_CHANGE: u8 = 0x60;
/// XLOG rmgr info: restore point.
pub const XLOG_RESTORE_POINT: u8 = 0x70;
/// XLOG rmgr info: full_page_writes change.
pub const XLOG_FPW_CHANGE: u8 = 0x80;
/// XLOG rmgr info: end of recovery.
pub const XLOG_END_OF_RECOVERY: u8 = 0x90;
/// XLOG rmgr info: full-page image for hint bits.
pub const XLOG_FPI_FOR_HINT: u8 = 0xA0;
/// XLOG rmgr info: full-page image.
pub const XLOG_FPI: u8 = 0xB0;
/// XLOG rmgr info: overwritten continuation record.
pub const XLOG_OVERWRITE_CONTRECORD: u8 = 0xD0;

/// Transaction rmgr info: commit.
pub const XLOG_XACT_COMMIT: u8 = 0x00;
/// Transaction rmgr info: prepare.
pub const XLOG_XACT_PREPARE: u8 = 0x10;
/// Transaction rmgr info: abort.
pub const XLOG_XACT_ABORT: u8 = 0x20;
/// Transaction rmgr info: commit prepared.
pub const XLOG_XACT_COMMIT_PREPARED: u8 = 0x30;
/// Transaction rmgr info: abort prepared.
pub const XLOG_XACT_ABORT_PREPARED: u8 = 0x40;
/// Transaction rmgr info: subtransaction assignment.
pub const XLOG_XACT_ASSIGNMENT: u8 = 0x50;
/// Transaction rmgr info: invalidations.
pub const XLOG_XACT_INVALIDATIONS: u8 = 0x60;
/// Mask selecting the transaction operation from `xl_info`.
pub const XLOG_XACT_OPMASK: u8 = 0x70;
/// Transaction `xl_info` flag: an `xinfo` word follows `xact_time`.
pub const XLOG_XACT_HAS_INFO: u8 = 0x80;

/// LogicalMessage rmgr info: a logical decoding message.
pub const XLOG_LOGICAL_MESSAGE: u8 = 0x00;
