//! Unit tests of the replication grammar and messages: the commands
//! pg_basebackup, pg_receivewal, pg_recvlogical and psycopg2 send, slot
//! options and their conflicts, syntax errors, LSN text, standby status
//! decoding and message framing.

#[test]
fn intervals_print_as_postgresql_does() {
    use super::format_interval;
    assert_eq!(format_interval(1_234), "00:00:00.001234");
    assert_eq!(format_interval(1_500_000), "00:00:01.5");
    assert_eq!(format_interval(3_723_000_000), "01:02:03");
    assert_eq!(format_interval(90_000_000_000), "1 day 01:00:00");
}

use super::*;

#[test]
fn base_backup_options_as_pg_basebackup_15_sends_them() {
    let c = parse_command(
        "BASE_BACKUP ( LABEL 'pg_basebackup base backup',  PROGRESS,  CHECKPOINT 'fast',  WAIT 0,  MANIFEST 'yes',  TARGET 'client')",
    )
    .unwrap();
    let Command::BaseBackup(o) = c else {
        panic!("{c:?}")
    };
    assert_eq!(o.label, "pg_basebackup base backup");
    assert!(o.progress && o.fast_checkpoint && !o.wait && o.manifest && !o.include_wal);
    assert_eq!(o.manifest_checksums, ManifestChecksum::Crc32c);
    let Command::BaseBackup(o) =
        parse_command("BASE_BACKUP (WAL, MAX_RATE 64, MANIFEST_CHECKSUMS 'SHA256')").unwrap()
    else {
        panic!()
    };
    assert!(o.include_wal && o.wait);
    assert_eq!(o.max_rate_kb, Some(64));
    assert_eq!(o.manifest_checksums, ManifestChecksum::Sha256);
    assert_eq!(
        parse_command("BASE_BACKUP LABEL 'x' FAST WAL NOWAIT").unwrap(),
        Command::BaseBackup(BaseBackupOptions {
            label: "x".into(),
            fast_checkpoint: true,
            include_wal: true,
            wait: false,
            ..BaseBackupOptions::default()
        })
    );
    for (bad, code) in [
        ("BASE_BACKUP (BOGUS)", "42601"),
        ("BASE_BACKUP (WAL, WAL)", "42601"),
        ("BASE_BACKUP (CHECKPOINT 'slow')", "22023"),
        ("BASE_BACKUP (MAX_RATE 1)", "22023"),
        ("BASE_BACKUP (MANIFEST 'maybe')", "22023"),
        ("BASE_BACKUP (TARGET 'server')", "0A000"),
        ("BASE_BACKUP (COMPRESSION 'gzip')", "0A000"),
    ] {
        assert_eq!(parse_command(bad).unwrap_err().code, code, "{bad}");
    }
}

#[test]
fn commands_pg_receivewal_sends() {
    assert_eq!(
        parse_command("IDENTIFY_SYSTEM").unwrap(),
        Command::IdentifySystem
    );
    assert_eq!(
        parse_command("SHOW wal_segment_size").unwrap(),
        Command::Show("wal_segment_size".into())
    );
    assert_eq!(
        parse_command("READ_REPLICATION_SLOT \"s1\"").unwrap(),
        Command::ReadReplicationSlot("s1".into())
    );
    assert_eq!(
        parse_command("START_REPLICATION SLOT \"s1\" 0/3000000 TIMELINE 1").unwrap(),
        Command::StartReplication {
            slot: Some("s1".into()),
            start: 0x300_0000,
            timeline: Some(1)
        }
    );
    assert_eq!(
        parse_command("start_replication physical 1A/FF000000;").unwrap(),
        Command::StartReplication {
            slot: None,
            start: (0x1a << 32) | 0xff00_0000,
            timeline: None
        }
    );
    assert_eq!(parse_command("  ").unwrap(), Command::Empty);
}

#[test]
fn slot_commands_in_both_syntaxes() {
    let reserve = |r| Command::CreatePhysicalSlot {
        name: "s".into(),
        temporary: false,
        reserve_wal: r,
    };
    for (sql, reserve_wal) in [
        ("CREATE_REPLICATION_SLOT \"s\" PHYSICAL RESERVE_WAL", true),
        ("CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL)", true),
        (
            "CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL false)",
            false,
        ),
        ("CREATE_REPLICATION_SLOT s PHYSICAL", false),
    ] {
        assert_eq!(parse_command(sql).unwrap(), reserve(reserve_wal), "{sql}");
    }
    assert_eq!(
        parse_command("DROP_REPLICATION_SLOT \"S\" WAIT").unwrap(),
        Command::DropSlot {
            name: "S".into(),
            wait: true
        }
    );
}

#[test]
fn logical_commands_pg_recvlogical_and_psycopg2_send() {
    let logical = |temporary, plugin: &str, two_phase| Command::CreateLogicalSlot {
        name: "s".into(),
        temporary,
        plugin: plugin.into(),
        two_phase,
    };
    assert_eq!(
        parse_command(
            "CREATE_REPLICATION_SLOT \"s\" LOGICAL \"test_decoding\" (SNAPSHOT 'nothing')"
        )
        .unwrap(),
        logical(false, "test_decoding", false)
    );
    assert_eq!(
        parse_command("CREATE_REPLICATION_SLOT \"s\" TEMPORARY LOGICAL \"pgoutput\"").unwrap(),
        logical(true, "pgoutput", false)
    );
    assert_eq!(
        parse_command("CREATE_REPLICATION_SLOT s LOGICAL pgoutput NOEXPORT_SNAPSHOT TWO_PHASE")
            .unwrap(),
        logical(false, "pgoutput", true)
    );
    let code = |text: &str| parse_command(text).unwrap_err().code;
    assert_eq!(
        code("CREATE_REPLICATION_SLOT s LOGICAL p (RESERVE_WAL)"),
        "42601"
    );
    assert_eq!(
        code("CREATE_REPLICATION_SLOT s PHYSICAL (SNAPSHOT 'use')"),
        "42601"
    );
    assert_eq!(
        code("CREATE_REPLICATION_SLOT s LOGICAL p (SNAPSHOT 'x')"),
        "22023"
    );
    assert_eq!(
        code("CREATE_REPLICATION_SLOT s LOGICAL p (SNAPSHOT 'use', SNAPSHOT 'use')"),
        "42601"
    );
    assert_eq!(
        parse_command(
            "START_REPLICATION SLOT \"s\" LOGICAL 0/1A (\"include-xids\" '0', \"publication_names\" 'Pub', skip)"
        )
        .unwrap(),
        Command::StartLogical {
            slot: "s".into(),
            start: 0x1a,
            options: vec![
                ("include-xids".into(), Some("0".into())),
                ("publication_names".into(), Some("Pub".into())),
                ("skip".into(), None),
            ],
        }
    );
    assert_eq!(
        parse_command("START_REPLICATION SLOT s LOGICAL 0/0").unwrap(),
        Command::StartLogical {
            slot: "s".into(),
            start: 0,
            options: vec![],
        }
    );
    assert_eq!(code("START_REPLICATION LOGICAL 0/0"), "42601");
    assert_eq!(code("START_REPLICATION SLOT s LOGICAL 0/0 (a 'b'"), "42601");
}

#[test]
fn sql_is_told_apart_from_replication_commands() {
    assert!(is_replication_command("IDENTIFY_SYSTEM"));
    assert!(is_replication_command(
        "  start_replication SLOT s LOGICAL 0/0"
    ));
    assert!(is_replication_command(""));
    assert!(is_replication_command(" ; "));
    assert!(!is_replication_command(
        "SELECT pg_catalog.set_config('search_path', '', false);"
    ));
    assert!(!is_replication_command("CREATE PUBLICATION p"));
    assert!(!is_replication_command("showx"));
}

/// Parsing `cmd` fails with this SQLSTATE and message.
#[track_caller]
fn assert_refused(cmd: &str, code: &str, message: &str) {
    let e = parse_command(cmd).unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (code, message), "{cmd}");
}

#[test]
fn timeline_zero_is_invalid_as_postgresql_says() {
    for cmd in [
        "TIMELINE_HISTORY 0",
        "START_REPLICATION 0/1000000 TIMELINE 0",
    ] {
        assert_refused(cmd, "42601", "invalid timeline 0");
    }
    assert_eq!(
        parse_command("TIMELINE_HISTORY 2").unwrap(),
        Command::TimelineHistory(2)
    );
}

#[test]
fn redundant_or_logical_only_slot_options_conflict() {
    for cmd in [
        "CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL, RESERVE_WAL)",
        "CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL false, reserve_wal 'true')",
        "CREATE_REPLICATION_SLOT s PHYSICAL RESERVE_WAL RESERVE_WAL",
        "CREATE_REPLICATION_SLOT s PHYSICAL (SNAPSHOT 'export')",
        "CREATE_REPLICATION_SLOT s PHYSICAL (TWO_PHASE)",
        "CREATE_REPLICATION_SLOT s PHYSICAL EXPORT_SNAPSHOT",
    ] {
        assert_refused(cmd, "42601", "conflicting or redundant options");
    }
    assert_refused(
        "CREATE_REPLICATION_SLOT s PHYSICAL (WAIT)",
        "XX000",
        "unrecognized option: wait",
    );
    let e = parse_command("CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL maybe)").unwrap_err();
    assert_eq!(e.code, "42601");
}

#[test]
fn unknown_or_malformed_commands_are_syntax_errors() {
    for bad in [
        "SELECT 1",
        "START_REPLICATION",
        "START_REPLICATION 0/ZZ",
        "START_REPLICATION 0/1 TIMELINE x",
        "IDENTIFY_SYSTEM extra",
        "TIMELINE_HISTORY 99999999999",
        "CREATE_REPLICATION_SLOT \"unterminated",
        "DROP_REPLICATION_SLOT",
        "\u{1}",
    ] {
        assert_eq!(parse_command(bad).unwrap_err().code, "42601", "{bad}");
    }
}

#[test]
fn lsn_text_round_trips() {
    for lsn in [0u64, 0x1_0000_0000, 0xDEAD_BEEF_0000_0001] {
        assert_eq!(parse_lsn(&format_lsn(lsn)), Some(lsn));
    }
    assert_eq!(parse_lsn("1/"), None);
    assert_eq!(parse_lsn("123456789/0"), None);
}

#[test]
fn standby_status_decodes_and_rejects_malformed() {
    let mut m = vec![b'r'];
    for v in [10u64, 9, 0, 77] {
        m.extend_from_slice(&v.to_be_bytes());
    }
    m.push(1);
    assert_eq!(
        parse_stream_message(&m).unwrap(),
        StreamMessage::Status(StandbyStatus {
            write: 10,
            flush: 9,
            apply: 0,
            send_time: 77,
            reply_requested: true
        })
    );
    assert_eq!(parse_stream_message(&m[..20]).unwrap_err().code, "08P01");
    assert_eq!(parse_stream_message(b"zzz").unwrap_err().code, "08P01");
    assert_eq!(parse_stream_message(b"").unwrap_err().code, "08P01");
}

#[test]
fn framing_takes_whole_messages_only() {
    let mut buf = vec![b'Q', 0, 0, 0, 6, b'x'];
    assert_eq!(take_message(&mut buf).unwrap(), None);
    buf.push(0);
    buf.push(b'X');
    assert_eq!(take_message(&mut buf).unwrap(), Some((b'Q', vec![b'x', 0])));
    assert_eq!(buf, vec![b'X']);
    let mut bad = vec![b'Q', 0xff, 0, 0, 0];
    assert_eq!(take_message(&mut bad).unwrap_err().code, "08P01");
    assert_eq!(query_text(b"IDENTIFY_SYSTEM\0").unwrap(), "IDENTIFY_SYSTEM");
}
