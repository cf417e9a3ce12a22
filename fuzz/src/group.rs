//! The broker's `group` module, with only the parts that read the offsets log (see
//! `broker.rs`).

pub use net::kafka_protocol::ResponseError;

#[path = "../../broker/src/group/call.rs"]
pub mod call;
#[path = "../../broker/src/group/offsets.rs"]
mod offsets;
#[path = "../../broker/src/group/records.rs"]
mod records;

pub use fuzzing::check_offsets_log;

/// Inside the broker's `group` module, where the records' `pub(super)` items are visible.
mod fuzzing {
    use super::records::{Record, record_set};

    /// Replays an offsets log's bytes as the coordinator does on opening (`replay`): batches
    /// decoded by `net::client::batch::decode_batches` (compressed ones to at most
    /// `decompressed_bytes_max` in all), then each record's key and value.
    /// A record that decodes must be written back by the coordinator's own path (`encode`,
    /// `record_set`) as a batch that replays to the same record.
    pub fn check_offsets_log(log: &bytes::Bytes, decompressed_bytes_max: usize) {
        let Ok(consumed) = net::client::batch::decode_batches(log, decompressed_bytes_max) else {
            return;
        };
        for record in consumed {
            let Ok(Some(decoded)) = Record::decode(record.key.as_deref(), record.value.as_deref())
            else {
                continue;
            };
            let set = record_set(&[decoded.encode()], 0, usize::MAX)
                .expect("a decoded record is written back");
            let replayed = net::client::batch::decode_batches(&set.freeze(), 0)
                .expect("the coordinator's batch decodes");
            assert_eq!(replayed.len(), 1);
            let again = Record::decode(replayed[0].key.as_deref(), replayed[0].value.as_deref())
                .expect("a written record decodes")
                .expect("a written record is of a known kind");
            assert_eq!(again, decoded);
        }
    }
}
