//! The broker's metadata file (`meta/metadata.fb`, FlatBuffers then a CRC-32C) read back at
//! start by the broker's `Metadata::load`, here its decoding step `Metadata::decode` (what
//! follows the CRC check), with the FlatBuffers verifier on.
//!
//! What must hold: no panic; memory within a bound proportional to the input (FlatBuffers
//! tables may share their parts, so a small file can name the same large vector many times);
//! metadata that decodes encodes to a file that decodes to the same metadata.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spindle_fuzz::broker::metadata::Metadata;
use spindle_fuzz::{budget, within_memory};

fuzz_target!(|data: &[u8]| {
    let Ok(metadata) = within_memory(budget(data.len(), 64, 64 << 10), || Metadata::decode(data))
    else {
        return;
    };
    let encoded = metadata.encode();
    let again = Metadata::decode(&encoded).expect("encoded metadata decodes");
    assert_eq!(again, metadata, "metadata survives encode and decode");
});
