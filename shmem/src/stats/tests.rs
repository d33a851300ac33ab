//! Unit tests of the statistics: activity texts clipped at a character
//! boundary, mechanism totals summed over slots, pg_stat_activity rows of
//! entered slots, and the WAL counters' reset baseline.

use super::*;
use crate::segment::Shmem;
use crate::settings::Settings;

fn seg() -> Shmem {
    Shmem::create(&Settings::default(), 4, 1).unwrap()
}

#[test]
fn text_is_clipped_at_a_char_boundary_and_reads_back() {
    let t = ActivityText::new();
    t.set(TextField::ApplicationName, "psql");
    t.set(TextField::ClientAddr, "127.0.0.1");
    let long = "é".repeat(QUERY_BYTES);
    t.set(TextField::Query, &long);
    let q = t.get(TextField::Query);
    assert!(
        q.len() < QUERY_BYTES && q.len() >= QUERY_BYTES - 2,
        "{}",
        q.len()
    );
    assert!(q.chars().all(|c| c == 'é'));
    assert_eq!(t.get(TextField::ApplicationName), "psql");
    assert_eq!(t.get(TextField::ClientAddr), "127.0.0.1");
    t.set(TextField::Query, "SELECT 1");
    assert_eq!(t.get(TextField::Query), "SELECT 1");
}

#[test]
fn totals_sum_slots_and_differences_do_not_underflow() {
    let a = MechanismCounters::new();
    let b = MechanismCounters::new();
    bump(&a.tranche(1).acquisitions, 3);
    bump(&b.tranche(100).acquisitions, 4);
    bump(&b.tranche(100).waitlist_lock_acquisitions, 5);
    bump(&a.flat.waitlist_entries_scanned, 10);
    bump(&a.flat.waitlist_dequeues, 4);
    let mut t = MechanismTotals::default();
    a.add_to(&mut t);
    b.add_to(&mut t);
    assert_eq!(t.lwlock[1].acquisitions, 3);
    assert_eq!(t.lwlock[NUM_TRANCHES - 1].acquisitions, 4);
    assert_eq!(t.all_tranches().acquisitions, 7);
    let named: std::collections::HashMap<_, _> = t.named().into_iter().collect();
    assert_eq!(named["waitlist_lock_acquisitions"], 5);
    assert_eq!(named["waitlist_entries_scanned"], 10);
    assert_eq!(named["procarray_lock_acquisitions"], 0);
    let ratios: std::collections::HashMap<_, _> = t.ratios().into_iter().collect();
    assert_eq!(ratios["waitlist_entries_scanned_per_dequeue"], Some(2.5));
    assert_eq!(ratios["commits_per_fdatasync"], None);
    let d = t.minus(&MechanismTotals::default());
    assert_eq!(d, t);
    assert_eq!(
        MechanismTotals::default().minus(&t),
        MechanismTotals::default()
    );
}

#[test]
fn activity_shows_entered_slots_with_their_wait_and_text() {
    let s = seg();
    let shm = &s;
    assert!(activity(shm).is_empty(), "no live slot yet");
    shm.procs()[1].pid.store(4242, Ordering::Relaxed);
    let entry = enter_proc(shm, 1, BackendType::ClientBackend);
    let w = activity_writer(shm, 1);
    w.set_query("SELECT 1");
    w.set_application_name("psql");
    w.set_state(ActivityState::Active);
    let prev = waitevent::report(waitevent::CLIENT_READ);
    let rows = activity(shm);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!((r.procno, r.pid), (1, 4242));
    assert_eq!(r.backend_type_name, "client backend");
    assert_eq!(r.state, Some("active"));
    assert_eq!(
        (r.wait_event_type, r.wait_event),
        (Some("Client"), Some("ClientRead"))
    );
    assert_eq!(
        (r.query.as_str(), r.application_name.as_str()),
        ("SELECT 1", "psql")
    );
    assert!(r.backend_start_us.is_some() && r.xact_start_us.is_none());
    let mut samples = WaitSamples::default();
    sample_wait_events(shm, &mut samples);
    waitevent::restore(prev);
    sample_wait_events(shm, &mut samples);
    assert_eq!(samples.samples, 2);
    assert_eq!(
        samples.shares(),
        vec![("Client:ClientRead".to_string(), 0.5)]
    );
    // The thread-local slot follows the latest entry; restore ours.
    let next = enter_proc(shm, 1, BackendType::ClientBackend);
    drop(entry);
    assert_eq!(activity(shm).len(), 1, "a later owner keeps the slot");
    drop(next);
    assert!(
        activity(shm).is_empty(),
        "nobody shown after its owner left"
    );
    assert_eq!(
        waitevent::report(waitevent::WAL_SYNC),
        waitevent::WaitEvent::NONE
    );
}

#[test]
fn wal_stats_reset_restarts_from_zero_and_dates_the_reset() {
    let s = seg();
    let shm = &s;
    shm.procs()[0].pid.store(1, Ordering::Relaxed);
    let _e = enter_proc(shm, 0, BackendType::Worker);
    let c = &shm.proc_stats(0).counters.flat;
    bump(&c.wal_records, 7);
    bump(&c.wal_bytes, 700);
    let w = wal_stats(shm);
    assert_eq!((w.wal_records, w.wal_bytes), (7, 700));
    assert!(w.stats_reset_us > 0, "dated by the first process");
    std::thread::sleep(std::time::Duration::from_millis(2));
    reset_wal_stats(shm);
    let r = wal_stats(shm);
    assert_eq!((r.wal_records, r.wal_bytes), (0, 0));
    assert!(r.stats_reset_us > w.stats_reset_us);
    bump(&c.wal_records, 2);
    assert_eq!(wal_stats(shm).wal_records, 2);
    assert_eq!(
        mechanism_totals(shm).flat.wal_records,
        9,
        "raw sums untouched"
    );
}
