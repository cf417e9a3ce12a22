//! The consumer offsets log read back from disk, as the group coordinator replays it when it
//! opens: record batches decoded by `net::client::batch::decode_batches` (any codec, any
//! counts), then each record's FlatBuffers key and value (`RecordKey`, `OffsetValue`) verified
//! and read by the broker's `group::records`.
//!
//! Every batch is given its right CRC first: the log serves only batches that pass it.
//!
//! What must hold: no panic; memory within a bound proportional to the input (the batch decoder
//! reserves room from the record counts and header counts it reads, and decompresses); a record
//! that decodes is written back by the coordinator's own path and replays to the same record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_fuzz::{broker, budget, within_memory};

fuzz_target!(|data: &[u8]| {
    // What the log serves passes its CRC: give every batch the right one, so that mutations
    // reach the decoders rather than the CRC check.
    let mut log = data.to_vec();
    let mut at = 0;
    while let Some(size) = spindle_fuzz::fix_crc(&mut log[at..]) {
        at += size;
    }
    let log = bytes::Bytes::from(log);
    within_memory(budget(data.len(), 512, 1 << 20), || {
        broker::group::check_offsets_log(&log);
    });
});
