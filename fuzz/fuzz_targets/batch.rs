//! A producer's record set, as `storage::Log::append` takes it: validated batch by batch
//! (`storage::batch::validate_produced`), then given offsets (`assign_offsets`), stamped for
//! LogAppendTime topics (`stamp_log_append_time`), and searched by timestamp
//! (`first_record_at_or_after`), whatever the attributes (codec bits) and record counts say.
//!
//! What must hold:
//! - validation accepts exactly the batches whose length, magic, CRC-32C and counts hold, as an
//!   independent reading of the bytes (CRC from the `crc32c` crate) says, and the header it
//!   returns is what the bytes say;
//! - after offsets are assigned and after stamping, the batch is still valid, with exactly the
//!   fields changed that should change, and its records untouched;
//! - a timestamp search answers an offset inside the batch, or a typed error;
//! - nothing allocates.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_fuzz::{fix_crc, within_memory};
use storage::batch::{self, BatchHeader, Compression, HEADER_BYTES};

fuzz_target!(|data: &[u8]| {
    // Eight bytes of parameters (the limit, the base offset, the epoch), then the record set.
    let Some((params, records)) = data.split_first_chunk::<8>() else {
        return;
    };
    // The top bit: put the right CRC into each batch first, so that mutations of the attributes,
    // counts and records get past the CRC check and exercise what follows.
    let fix_crcs = params[0] & 0x80 != 0;
    let max_bytes = match u16::from_be_bytes([params[0] & 0x7f, params[1]]) {
        0 => usize::MAX,
        n => usize::from(n),
    };
    let mut records = records.to_vec();
    let mut next_offset = i64::from(u32::from_be_bytes([
        params[2], params[3], params[4], params[5],
    ]));
    let leader_epoch = i32::from(i16::from_be_bytes([params[6], params[7]]));
    let mut at = 0;
    while at < records.len() {
        if fix_crcs {
            fix_crc(&mut records[at..]);
        }
        let rest = &records[at..];
        let validated = within_memory(0, || batch::validate_produced(rest, max_bytes));
        let expected = oracle(rest, max_bytes);
        let header = match (validated, expected) {
            (Ok(header), Ok(size)) => {
                assert_eq!(header.size_bytes(), size);
                header
            }
            (Err(_), Err(_)) => return,
            (got, want) => panic!("validation said {got:?}, the bytes say {want:?}"),
        };
        assert_eq!(
            header,
            BatchHeader::parse(rest).expect("a valid batch parses")
        );
        let mut bytes = rest[..header.size_bytes()].to_vec();
        check_batch(&mut bytes, header, next_offset, leader_epoch);
        next_offset += i64::from(header.record_count);
        at += header.size_bytes();
    }
});

fn check_batch(bytes: &mut [u8], header: BatchHeader, base_offset: i64, leader_epoch: i32) {
    let original = bytes.to_vec();
    within_memory(0, || {
        batch::assign_offsets(bytes, base_offset, leader_epoch)
    });
    let assigned = batch::validate_produced(bytes, usize::MAX).expect("assigned batch stays valid");
    assert_eq!(
        assigned,
        BatchHeader {
            base_offset,
            partition_leader_epoch: leader_epoch,
            ..header
        }
    );
    assert_eq!(bytes[12..16], leader_epoch.to_be_bytes());
    assert_eq!(
        bytes[16..],
        original[16..],
        "only the offset and epoch change"
    );

    for target_ms in [
        i64::MIN,
        assigned.base_timestamp,
        assigned.max_timestamp,
        assigned.base_timestamp.saturating_add(1),
        i64::MAX,
    ] {
        match within_memory(0, || batch::first_record_at_or_after(bytes, target_ms)) {
            Ok((found, _)) => assert!(
                (assigned.base_offset..=assigned.last_offset()).contains(&found),
                "offset {found} for {target_ms} outside the batch {}..={}",
                assigned.base_offset,
                assigned.last_offset()
            ),
            Err(_) => assert_eq!(
                assigned.compression(),
                Compression::None,
                "only uncompressed batches are read record by record"
            ),
        }
    }

    let now_ms = assigned.base_timestamp ^ 0x5a5a;
    let stamped = within_memory(0, || batch::stamp_log_append_time(bytes, &assigned, now_ms));
    let reread = batch::validate_produced(bytes, usize::MAX).expect("stamped batch stays valid");
    assert_eq!(stamped, reread);
    assert!(reread.is_log_append_time());
    assert_eq!(reread.max_timestamp, now_ms);
    assert_eq!(reread.attributes & !0x08, assigned.attributes & !0x08);
    assert_eq!(
        bytes[HEADER_BYTES..],
        original[HEADER_BYTES..],
        "records untouched"
    );
}

/// An independent reading of a v2 batch at the start of `buf`: its size if `validate_produced`
/// must accept it.
fn oracle(buf: &[u8], max_bytes: usize) -> Result<usize, &'static str> {
    let i32_at = |at: usize| i32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
    if buf.len() < 61 {
        return Err("shorter than a header");
    }
    let batch_length = i32_at(8);
    if batch_length < 49 {
        return Err("length shorter than the header");
    }
    if buf[16] != 2 {
        return Err("magic");
    }
    let size = 12 + batch_length as usize;
    if size > max_bytes {
        return Err("over the limit");
    }
    if size > buf.len() {
        return Err("truncated");
    }
    let crc = u32::from_be_bytes([buf[17], buf[18], buf[19], buf[20]]);
    if crc32c::crc32c(&buf[21..size]) != crc {
        return Err("crc");
    }
    let last_offset_delta = i32_at(23);
    let record_count = i32_at(57);
    if record_count < 1 || i64::from(last_offset_delta) != i64::from(record_count) - 1 {
        return Err("counts");
    }
    Ok(size)
}
