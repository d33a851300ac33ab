//! Reading across a timeline switch (`WalReader::open_across`): segments
//! before the switch come from the parent's files, the switch segment and
//! later ones from the child's, whose switch segment holds the parent's
//! prefix; the parent's own continuation past the switch point is another
//! history, read only when asked for timeline 1.

use walformat::{logical_message, Geometry, SegmentWriter, StdWalFiles, WalReader};

const SYSID: u64 = 7_000_000_000_000_000_001;

/// Payloads of every record read from `start` with `history`.
fn read_all(dir: &std::path::Path, geo: Geometry, history: Vec<(u32, u64)>) -> Vec<Vec<u8>> {
    let mut r = WalReader::open_across(
        &StdWalFiles,
        dir,
        geo,
        history,
        Some(SYSID),
        geo.seg_start(1),
    )
    .expect("open");
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().expect("valid WAL") {
        out.push(rec.as_logical_message().expect("a message").2.to_vec());
    }
    out
}

#[test]
fn reader_follows_the_history_across_a_switch_point() {
    let geo = Geometry::new(1 << 20).unwrap();
    let dir = std::env::temp_dir().join(format!("walformat-tli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Timeline 1: 450 messages of 5 kB, segments 1 to 3; the switch point
    // is after message 300, in segment 2.
    let mut t1 = SegmentWriter::new(geo, 1, SYSID, geo.seg_start(1), 0);
    let msg = |tag: u8, i: u32| {
        let mut p = vec![tag; 5000];
        p[..4].copy_from_slice(&i.to_le_bytes());
        p
    };
    let mut at_switch = None;
    for i in 0..450 {
        t1.append(&mut logical_message(0, false, "t", &msg(1, i)));
        if i == 299 {
            at_switch = Some((t1.end_pos(), t1.prev()));
        }
    }
    let (switch, last) = at_switch.unwrap();
    t1.write_to_dir(&dir).unwrap();
    // Timeline 2 branches at `switch` with 50 messages of its own.
    let mut t2 = SegmentWriter::new(geo, 2, SYSID, switch, last);
    for i in 0..50 {
        t2.append(&mut logical_message(0, false, "t", &msg(2, i)));
    }
    let switch_seg = geo.seg_no(switch);
    for segno in t2.segment_numbers() {
        let mut image = t2.segment(segno).unwrap().to_vec();
        if segno == switch_seg {
            let upto = geo.seg_offset(switch) as usize;
            image[..upto].copy_from_slice(&t1.segment(segno).unwrap()[..upto]);
        }
        std::fs::write(dir.join(geo.file_name(2, segno)), image).unwrap();
    }

    let one = read_all(&dir, geo, vec![(1, 0)]);
    assert_eq!(one.len(), 450, "timeline 1 alone");
    assert_eq!(geo.seg_no(switch), 2);
    let two = read_all(&dir, geo, vec![(1, 0), (2, switch)]);
    assert_eq!(two.len(), 350, "timeline 2 with its history");
    assert!(
        two[..300].iter().all(|p| p[4] == 1),
        "the parent's WAL before the switch"
    );
    assert!(
        two[300..].iter().all(|p| p[4] == 2),
        "the child's WAL after it"
    );
    assert_eq!(&two[..300], &one[..300]);
    std::fs::remove_dir_all(&dir).unwrap();
}
