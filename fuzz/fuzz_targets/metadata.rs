//! The controller's metadata as it is read back from disk: the snapshot in `meta/metadata.fb`
//! after its CRC (`model::snapshot::decode`, what `broker::metadata::load` calls) and the
//! records of metadata changes (`model::record::decode`), FlatBuffers verified.
//!
//! What must hold: no panic; memory within a bound proportional to the input (FlatBuffers
//! tables may share their parts, so a small file can name one large vector many times); what
//! decodes encodes to bytes that decode to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use model::{NodeId, record, snapshot};
use spindle_fuzz::{budget, within_memory};

fuzz_target!(|data: &[u8]| {
    let memory = budget(data.len(), 64, 64 << 10);
    // Each decoder checks its own file identifier first (SPMD, SPMR).
    if let Ok(metadata) = within_memory(memory, || snapshot::decode(data, NodeId(0))) {
        let again = snapshot::decode(&snapshot::encode(&metadata), NodeId(0))
            .expect("an encoded snapshot decodes");
        assert_eq!(again, metadata, "a snapshot survives encode and decode");
    }
    if let Ok(command) = within_memory(memory, || record::decode(data)) {
        let again = record::decode(&record::encode(&command)).expect("an encoded record decodes");
        assert_eq!(
            again, command,
            "a metadata record survives encode and decode"
        );
    }
});
