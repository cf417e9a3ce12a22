//! Every frame on the cluster listener as it comes off a socket: `controller::envelope::decode`
//! (size limit and FlatBuffers verification, then each metadata record inside decoded by
//! `model::record`): handshakes, Raft frames (their insides are `controller_frame`'s), heartbeats
//! with registrations, forwarded proposals and their replies, pushed metadata.
//!
//! What must hold:
//! - a frame decodes or is refused with a typed `FrameError`; nothing panics;
//! - memory stays within a bound proportional to the frame;
//! - a decoded frame re-encodes (`envelope::encode`, as its sender would have written it) to a
//!   frame that decodes to the same sender and frame, and encodes again to the same bytes.
#![no_main]

use controller::envelope;
use libfuzzer_sys::fuzz_target;
use spindle_fuzz::{budget, within_memory};

/// Small, so that inputs reach it; the broker's is 64 MiB.
const FRAME_BYTES_MAX: usize = 8 << 10;

fuzz_target!(|data: &[u8]| {
    let memory = budget(data.len(), 64, 64 << 10);
    let Ok((from, frame)) = within_memory(memory, || envelope::decode(data, FRAME_BYTES_MAX))
    else {
        return;
    };
    let once = envelope::encode(from, &frame);
    let (again_from, again) =
        envelope::decode(&once, usize::MAX).expect("a re-encoded frame decodes");
    assert_eq!(again_from, from);
    assert_eq!(again, frame, "the frame survives encode and decode");
    assert_eq!(
        envelope::encode(from, &again),
        once,
        "encoding is deterministic"
    );
});
