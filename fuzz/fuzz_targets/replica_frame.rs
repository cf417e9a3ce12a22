//! Every frame between peer shards on a replication connection as it comes off a socket (the
//! bytes after the length prefix): `controller::replica_wire::decode` (size limit, the header's
//! length, FlatBuffers verification, then an Append's batch sizes against the bytes that follow).
//!
//! What must hold:
//! - a frame decodes or is refused with a typed `DecodeError`; nothing panics;
//! - memory stays within a bound proportional to the frame (an Append's batches are slices of
//!   it, and its batch count is bounded by the verified header);
//! - a decoded frame re-encodes to bytes that decode to the same frame, and encoding again
//!   gives the same bytes.
#![no_main]

use bytes::Bytes;
use controller::replica_wire::{self, LENGTH_BYTES, Limits};
use libfuzzer_sys::fuzz_target;
use spindle_fuzz::{budget, within_memory};

/// Small, so that inputs reach them; the broker's are 64 MiB and 4096 batches.
const LIMITS: Limits = Limits {
    frame_bytes_max: 8 << 10,
    batches_max: 256,
};

/// The encoded frame's bytes after its length prefix.
fn wire(frame: replica_wire::Frame) -> Vec<u8> {
    let encoded = replica_wire::encode(frame).expect("a decoded frame encodes");
    let mut out = encoded.header[LENGTH_BYTES..].to_vec();
    for batch in &encoded.batches {
        out.extend_from_slice(batch);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    let memory = budget(data.len(), 64, 64 << 10);
    let Ok(frame) = within_memory(memory, || replica_wire::decode(input, LIMITS)) else {
        return;
    };
    let once = wire(frame.clone());
    let again = replica_wire::decode(Bytes::from(once.clone()), LIMITS)
        .expect("a re-encoded frame decodes");
    assert_eq!(again, frame, "the frame survives encode and decode");
    assert_eq!(wire(again), once, "encoding is deterministic");
});
