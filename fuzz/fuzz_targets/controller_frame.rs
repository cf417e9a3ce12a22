//! The controller quorum's node-to-node frames as they come off a socket:
//! `controller::wire::decode` (size limit, FlatBuffers verification, the envelope's cluster,
//! sender and receiver, the Raft message), for node 2 of cluster "spindle" with voters 0, 1, 2.
//!
//! What must hold:
//! - a frame decodes or is refused with a typed `FrameError`; nothing panics;
//! - memory stays within a bound proportional to the frame;
//! - a decoded frame is from a voter other than this node, and its message is one that travels;
//! - it re-encodes (`controller::wire::encode`, as the sender would have written it) to a frame
//!   that decodes to the same sender and message, and encodes again to the same bytes.
#![no_main]

use controller::wire::{self, Decoded};
use libfuzzer_sys::fuzz_target;
use model::NodeId;
use spindle_fuzz::{budget, within_memory};

/// What the seeds (`corpus/controller_frame`) were written for.
const CLUSTER: &str = "spindle";
const ME: NodeId = NodeId(2);
/// Raft ids of nodes 0, 1 and 2 (raft id = node id + 1).
const VOTERS: [u64; 3] = [1, 2, 3];
/// Small, so that inputs reach it; the broker's is its request size limit.
const FRAME_BYTES_MAX: usize = 8 << 10;

fuzz_target!(|data: &[u8]| {
    let memory = budget(data.len(), 64, 64 << 10);
    let Ok(decoded) = within_memory(memory, || {
        wire::decode(data, CLUSTER, ME, &VOTERS, FRAME_BYTES_MAX)
    }) else {
        return;
    };
    assert!(data.len() <= FRAME_BYTES_MAX);
    assert_ne!(decoded.from, ME, "a frame from this node itself");
    assert!(VOTERS.contains(&decoded.message.from), "{decoded:?}");

    let once = reencode(&decoded);
    let again =
        wire::decode(&once, CLUSTER, ME, &VOTERS, usize::MAX).expect("a re-encoded frame decodes");
    assert_eq!(again.from, decoded.from);
    assert_eq!(
        again.message, decoded.message,
        "the message survives encode and decode"
    );
    assert_eq!(reencode(&again), once, "encoding is deterministic");
});

fn reencode(decoded: &Decoded) -> Vec<u8> {
    wire::encode(CLUSTER, decoded.from, ME, &decoded.message).expect("a decoded message encodes")
}
