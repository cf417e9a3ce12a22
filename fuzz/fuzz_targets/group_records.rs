//! The consumer offsets log read back from disk, as the group coordinator replays it when it
//! opens: record batches decoded by `net::client::batch::decode_batches` (any codec, any
//! counts), then each record's FlatBuffers key and value (`RecordKey`, `OffsetValue`) verified
//! and read by the broker's `group::records`.
//!
//! Every batch is given its right CRC first: the log serves only batches that pass it.
//!
//! What must hold: no panic; memory within a bound proportional to the input and the
//! decompression limit (the decoder checks every record and header count against the bytes
//! before `kafka-protocol` reserves room by it, and decompresses within the limit); a record
//! that decodes is written back by the coordinator's own path and replays to the same record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_fuzz::{broker, budget, within_memory};

/// What the compressed batches of an input may decompress to, per input byte.
const DECOMPRESSED_BYTES_PER_BYTE: usize = 16;

/// Memory per byte of records (as read or decompressed): a record takes seven bytes at least
/// and a header two, and each becomes `kafka-protocol`'s structs (a record of about 200 bytes,
/// a header an index-map entry), then the consumer's (a `ConsumedRecord`, a `String` and
/// value per header).
const MEMORY_BYTES_PER_BYTE: usize = 128;

fuzz_target!(|data: &[u8]| {
    // What the log serves passes its CRC: give every batch the right one, so that mutations
    // reach the decoders rather than the CRC check.
    let mut log = data.to_vec();
    let mut at = 0;
    while let Some(size) = spindle_fuzz::fix_crc(&mut log[at..]) {
        at += size;
    }
    let log = bytes::Bytes::from(log);
    // The coordinator holds a compressed batch to what one replay read holds; here the limit
    // grows with the input, so that inputs reach it.
    let decompressed_bytes_max = budget(data.len(), DECOMPRESSED_BYTES_PER_BYTE, 64 << 10);
    let memory = budget(
        data.len() + decompressed_bytes_max,
        MEMORY_BYTES_PER_BYTE,
        1 << 20,
    );
    within_memory(memory, || {
        broker::group::check_offsets_log(&log, decompressed_bytes_max);
    });
});
