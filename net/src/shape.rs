//! A walk over a request body that checks its shape before `kafka-protocol` decodes it.
//!
//! Why: `kafka-protocol` 0.18 sizes every array with `Vec::with_capacity(count)` straight from the
//! count on the wire. A twenty-byte request announcing two billion topics asks the allocator for
//! hundreds of gigabytes, and a failed allocation aborts the process: one bad client would stop
//! the broker. The walk follows each request's layout (the fields of each version, taken from
//! Kafka's message definitions), checks every length against the bytes left, and so lets only
//! bodies through whose arrays fit in the frame: at least one byte per element, so no array can
//! ask for more elements than the frame has bytes.
//!
//! Tagged fields carry their own size and are skipped whole, except the few `kafka-protocol`
//! knows (Fetch's): it reads those from their content, whatever their size says, so the walk
//! reads their content too and refuses one that does not fill its size exactly (else the walk
//! and the decoder would part ways, and the counts checked would not be the ones decoded). The
//! tests check every layout against `kafka-protocol`'s own encoder and decoder, for every
//! version we accept.

use kafka_protocol::messages::ApiKey;

use crate::wire::{self, LengthPrefix, WireError};

/// One field of a request, present in versions `min..=max`: positional, or tagged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    min: i16,
    max: i16,
    kind: Kind,
    /// The tag of a tagged field `kafka-protocol` decodes (rather than keeping its bytes).
    tag: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// A fixed-width value (int8..int64, bool, uuid) of this many bytes.
    Fixed(usize),
    /// A string, nullable or not.
    Str,
    /// Bytes, nullable or not.
    Bytes,
    /// An array of strings.
    Strs,
    /// An array of fixed-width values of this many bytes.
    Fixeds(usize),
    /// An array of structs (each with a tagged-field section in flexible versions).
    Structs(&'static [Field]),
    /// One struct (with a tagged-field section).
    Struct(&'static [Field]),
}

/// A request body's layout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// The first flexible version (`i16::MAX`: none).
    flexible_min: i16,
    fields: &'static [Field],
}

const ALL: i16 = i16::MAX;
const NONE: i16 = i16::MAX;

const fn field(min: i16, max: i16, kind: Kind) -> Field {
    Field {
        min,
        max,
        kind,
        tag: None,
    }
}

/// A tagged field `kafka-protocol` decodes, from version `min` on.
const fn tagged(tag: u32, min: i16, kind: Kind) -> Field {
    Field {
        min,
        max: ALL,
        kind,
        tag: Some(tag),
    }
}

const fn all(kind: Kind) -> Field {
    field(0, ALL, kind)
}

const fn from(min: i16, kind: Kind) -> Field {
    field(min, ALL, kind)
}

const I8: Kind = Kind::Fixed(1);
const BOOL: Kind = Kind::Fixed(1);
const I16: Kind = Kind::Fixed(2);
const I32: Kind = Kind::Fixed(4);
const I64: Kind = Kind::Fixed(8);
const UUID: Kind = Kind::Fixed(16);
const STR: Kind = Kind::Str;
const I32S: Kind = Kind::Fixeds(4);

const FETCH: Layout = Layout {
    flexible_min: 12,
    fields: &[
        field(0, 14, I32), // replica id (a tagged ReplicaState from 15)
        all(I32),          // max wait ms
        all(I32),          // min bytes
        from(3, I32),      // max bytes
        from(4, I8),       // isolation level
        from(7, I32),      // session id
        from(7, I32),      // session epoch
        all(Kind::Structs(&[
            field(0, 12, STR), // topic
            from(13, UUID),    // topic id
            all(Kind::Structs(&[
                all(I32),            // partition
                from(9, I32),        // current leader epoch
                all(I64),            // fetch offset
                from(12, I32),       // last fetched epoch
                from(5, I64),        // log start offset
                all(I32),            // partition max bytes
                tagged(0, 17, UUID), // replica directory id
                tagged(1, 18, I64),  // high watermark
            ])),
        ])),
        from(
            7,
            Kind::Structs(&[
                field(7, 12, STR), // forgotten topic
                from(13, UUID),    // forgotten topic id
                from(7, I32S),     // partitions
            ]),
        ),
        from(11, STR),                                      // rack id
        tagged(0, 12, STR),                                 // cluster id
        tagged(1, 15, Kind::Struct(&[all(I32), all(I64)])), // replica state: id, epoch
    ],
};

const LIST_OFFSETS: Layout = Layout {
    flexible_min: 6,
    fields: &[
        all(I32),    // replica id
        from(2, I8), // isolation level
        all(Kind::Structs(&[
            all(STR),
            all(Kind::Structs(&[
                all(I32),     // partition index
                from(4, I32), // current leader epoch
                all(I64),     // timestamp
            ])),
        ])),
        from(10, I32), // timeout ms
    ],
};

const METADATA: Layout = Layout {
    flexible_min: 9,
    fields: &[
        all(Kind::Structs(&[from(10, UUID), all(STR)])),
        from(4, BOOL),      // allow auto topic creation
        field(8, 10, BOOL), // include cluster authorized operations
        from(8, BOOL),      // include topic authorized operations
    ],
};

const OFFSET_COMMIT: Layout = Layout {
    flexible_min: 8,
    fields: &[
        all(STR),         // group id
        from(1, I32),     // generation id or member epoch
        from(1, STR),     // member id
        from(7, STR),     // group instance id
        field(2, 4, I64), // retention time ms
        all(Kind::Structs(&[
            all(STR),
            all(Kind::Structs(&[
                all(I32),         // partition index
                all(I64),         // committed offset
                from(6, I32),     // committed leader epoch
                field(1, 1, I64), // commit timestamp
                all(STR),         // committed metadata
            ])),
        ])),
    ],
};

const OFFSET_FETCH_TOPICS: Kind = Kind::Structs(&[all(STR), all(I32S)]);

const OFFSET_FETCH: Layout = Layout {
    flexible_min: 6,
    fields: &[
        field(0, 7, STR),                 // group id
        field(0, 7, OFFSET_FETCH_TOPICS), // topics
        from(
            8,
            Kind::Structs(&[
                all(STR),     // group id
                from(9, STR), // member id
                from(9, I32), // member epoch
                all(OFFSET_FETCH_TOPICS),
            ]),
        ),
        from(7, BOOL), // require stable
    ],
};

const FIND_COORDINATOR: Layout = Layout {
    flexible_min: 3,
    fields: &[
        field(0, 3, STR),    // key
        from(1, I8),         // key type
        from(4, Kind::Strs), // coordinator keys
    ],
};

const JOIN_GROUP: Layout = Layout {
    flexible_min: 6,
    fields: &[
        all(STR),     // group id
        all(I32),     // session timeout ms
        from(1, I32), // rebalance timeout ms
        all(STR),     // member id
        from(5, STR), // group instance id
        all(STR),     // protocol type
        all(Kind::Structs(&[all(STR), all(Kind::Bytes)])),
        from(8, STR), // reason
    ],
};

const SYNC_GROUP: Layout = Layout {
    flexible_min: 4,
    fields: &[
        all(STR),     // group id
        all(I32),     // generation id
        all(STR),     // member id
        from(3, STR), // group instance id
        from(5, STR), // protocol type
        from(5, STR), // protocol name
        all(Kind::Structs(&[all(STR), all(Kind::Bytes)])),
    ],
};

const HEARTBEAT: Layout = Layout {
    flexible_min: 4,
    fields: &[all(STR), all(I32), all(STR), from(3, STR)],
};

const LEAVE_GROUP: Layout = Layout {
    flexible_min: 4,
    fields: &[
        all(STR),         // group id
        field(0, 2, STR), // member id
        from(3, Kind::Structs(&[all(STR), all(STR), from(5, STR)])),
    ],
};

const LIST_GROUPS: Layout = Layout {
    flexible_min: 3,
    fields: &[from(4, Kind::Strs), from(5, Kind::Strs)],
};

const DESCRIBE_GROUPS: Layout = Layout {
    flexible_min: 5,
    fields: &[all(Kind::Strs), from(3, BOOL)],
};

const DELETE_GROUPS: Layout = Layout {
    flexible_min: 2,
    fields: &[all(Kind::Strs)],
};

const API_VERSIONS: Layout = Layout {
    flexible_min: 3,
    fields: &[from(3, STR), from(3, STR)],
};

const CREATE_TOPICS: Layout = Layout {
    flexible_min: 5,
    fields: &[
        all(Kind::Structs(&[
            all(STR),                                   // name
            all(I32),                                   // num partitions
            all(I16),                                   // replication factor
            all(Kind::Structs(&[all(I32), all(I32S)])), // assignments
            all(Kind::Structs(&[all(STR), all(STR)])),  // configs
        ])),
        all(I32),      // timeout ms
        from(1, BOOL), // validate only
    ],
};

const DELETE_TOPICS: Layout = Layout {
    flexible_min: 4,
    fields: &[
        from(6, Kind::Structs(&[all(STR), all(UUID)])),
        field(0, 5, Kind::Strs),
        all(I32), // timeout ms
    ],
};

const CREATE_PARTITIONS: Layout = Layout {
    flexible_min: 2,
    fields: &[
        all(Kind::Structs(&[
            all(STR),                         // name
            all(I32),                         // count
            all(Kind::Structs(&[all(I32S)])), // assignments
        ])),
        all(I32),  // timeout ms
        all(BOOL), // validate only
    ],
};

const DESCRIBE_CONFIGS: Layout = Layout {
    flexible_min: 4,
    fields: &[
        all(Kind::Structs(&[all(I8), all(STR), all(Kind::Strs)])),
        from(1, BOOL), // include synonyms
        from(3, BOOL), // include documentation
    ],
};

/// An ACL binding or filter: resource type, name, pattern type, principal, host, operation,
/// permission type.
const ACL: &[Field] = &[
    all(I8),
    all(STR),
    all(I8),
    all(STR),
    all(STR),
    all(I8),
    all(I8),
];

const DESCRIBE_ACLS: Layout = Layout {
    flexible_min: 2,
    fields: ACL,
};

const CREATE_ACLS: Layout = Layout {
    flexible_min: 2,
    fields: &[all(Kind::Structs(ACL))],
};

const DELETE_ACLS: Layout = CREATE_ACLS;

const ALTER_CONFIGS: Layout = Layout {
    flexible_min: 2,
    fields: &[
        all(Kind::Structs(&[
            all(I8),                                   // resource type
            all(STR),                                  // resource name
            all(Kind::Structs(&[all(STR), all(STR)])), // configs: name, value
        ])),
        all(BOOL), // validate only
    ],
};

const INCREMENTAL_ALTER_CONFIGS: Layout = Layout {
    flexible_min: 1,
    fields: &[
        all(Kind::Structs(&[
            all(I8),                                            // resource type
            all(STR),                                           // resource name
            all(Kind::Structs(&[all(STR), all(I8), all(STR)])), // configs
        ])),
        all(BOOL), // validate only
    ],
};

const DESCRIBE_CLUSTER: Layout = Layout {
    flexible_min: 0,
    fields: &[all(BOOL), from(1, I8), from(2, BOOL)],
};

const DELETE_RECORDS: Layout = Layout {
    flexible_min: 2,
    fields: &[
        all(Kind::Structs(&[
            all(STR),                                  // topic
            all(Kind::Structs(&[all(I32), all(I64)])), // partition index, offset
        ])),
        all(I32), // timeout ms
    ],
};

const INIT_PRODUCER_ID: Layout = Layout {
    flexible_min: 2,
    fields: &[all(STR), all(I32), from(3, I64), from(3, I16)],
};

const OFFSET_DELETE: Layout = Layout {
    flexible_min: NONE,
    fields: &[
        all(STR),
        all(Kind::Structs(&[all(STR), all(Kind::Structs(&[all(I32)]))])),
    ],
};

const DESCRIBE_QUORUM: Layout = Layout {
    flexible_min: 0,
    fields: &[all(Kind::Structs(&[
        all(STR),                        // topic
        all(Kind::Structs(&[all(I32)])), // partition index
    ]))],
};

const ELECT_LEADERS: Layout = Layout {
    flexible_min: 2,
    fields: &[
        from(1, I8),                                // election type
        all(Kind::Structs(&[all(STR), all(I32S)])), // topic partitions (null: all)
        all(I32),                                   // timeout ms
    ],
};

/// The layout of a request we decode with `kafka-protocol` (all but Produce, which has its own
/// bounded decoder).
pub(crate) fn layout(api_key: ApiKey) -> Option<Layout> {
    Some(match api_key {
        ApiKey::Fetch => FETCH,
        ApiKey::ListOffsets => LIST_OFFSETS,
        ApiKey::Metadata => METADATA,
        ApiKey::OffsetCommit => OFFSET_COMMIT,
        ApiKey::OffsetFetch => OFFSET_FETCH,
        ApiKey::FindCoordinator => FIND_COORDINATOR,
        ApiKey::JoinGroup => JOIN_GROUP,
        ApiKey::SyncGroup => SYNC_GROUP,
        ApiKey::Heartbeat => HEARTBEAT,
        ApiKey::LeaveGroup => LEAVE_GROUP,
        ApiKey::ListGroups => LIST_GROUPS,
        ApiKey::DescribeGroups => DESCRIBE_GROUPS,
        ApiKey::DeleteGroups => DELETE_GROUPS,
        ApiKey::ApiVersions => API_VERSIONS,
        ApiKey::CreateTopics => CREATE_TOPICS,
        ApiKey::DeleteTopics => DELETE_TOPICS,
        ApiKey::CreatePartitions => CREATE_PARTITIONS,
        ApiKey::DescribeConfigs => DESCRIBE_CONFIGS,
        ApiKey::DescribeAcls => DESCRIBE_ACLS,
        ApiKey::CreateAcls => CREATE_ACLS,
        ApiKey::DeleteAcls => DELETE_ACLS,
        ApiKey::AlterConfigs => ALTER_CONFIGS,
        ApiKey::IncrementalAlterConfigs => INCREMENTAL_ALTER_CONFIGS,
        ApiKey::DescribeCluster => DESCRIBE_CLUSTER,
        ApiKey::DeleteRecords => DELETE_RECORDS,
        ApiKey::InitProducerId => INIT_PRODUCER_ID,
        ApiKey::OffsetDelete => OFFSET_DELETE,
        ApiKey::DescribeQuorum => DESCRIBE_QUORUM,
        ApiKey::ElectLeaders => ELECT_LEADERS,
        _ => return None,
    })
}

impl Layout {
    /// Walks `body` at `version`, checking every length against the bytes left.
    pub(crate) fn check(&self, mut body: &[u8], version: i16) -> Result<(), WireError> {
        let flexible = version >= self.flexible_min;
        walk_struct(&mut body, self.fields, version, flexible)
    }

    #[cfg(test)]
    pub(crate) fn is_flexible(&self, version: i16) -> bool {
        version >= self.flexible_min
    }

    #[cfg(test)]
    pub(crate) fn fields(&self) -> &'static [Field] {
        self.fields
    }
}

fn walk_struct(
    buf: &mut &[u8],
    fields: &[Field],
    version: i16,
    flexible: bool,
) -> Result<(), WireError> {
    for field in fields
        .iter()
        .filter(|f| f.tag.is_none() && f.present_in(version))
    {
        walk_kind(buf, field.kind, version, flexible)?;
    }
    if flexible {
        walk_tagged_fields(buf, fields, version)?;
    }
    Ok(())
}

/// A tagged-field section: a tag `kafka-protocol` decodes must fill its size exactly; the
/// others are skipped by their size.
fn walk_tagged_fields(buf: &mut &[u8], fields: &[Field], version: i16) -> Result<(), WireError> {
    let count = wire::read_unsigned_varint(buf)?;
    for _ in 0..count {
        let tag = wire::read_unsigned_varint(buf)?;
        let size_bytes = wire::read_unsigned_varint(buf)? as usize;
        let mut content = *buf;
        wire::skip(buf, size_bytes)?;
        content = &content[..size_bytes];
        let known = fields
            .iter()
            .find(|f| f.tag == Some(tag) && f.present_in(version));
        if let Some(field) = known {
            let size_differs = WireError::TaggedFieldSize { tag, size_bytes };
            match walk_kind(&mut content, field.kind, version, true) {
                Err(WireError::Truncated { .. }) => return Err(size_differs),
                Err(e) => return Err(e),
                Ok(()) if !content.is_empty() => return Err(size_differs),
                Ok(()) => {}
            }
        }
    }
    Ok(())
}

fn walk_kind(buf: &mut &[u8], kind: Kind, version: i16, flexible: bool) -> Result<(), WireError> {
    let count = |buf: &mut &[u8]| {
        wire::read_length(buf, LengthPrefix::sequence(flexible)).map(Option::unwrap_or_default)
    };
    match kind {
        Kind::Fixed(width) => wire::skip(buf, width),
        Kind::Str => skip_sized(buf, LengthPrefix::string(flexible)),
        Kind::Bytes => skip_sized(buf, LengthPrefix::sequence(flexible)),
        Kind::Strs => {
            for _ in 0..count(buf)? {
                skip_sized(buf, LengthPrefix::string(flexible))?;
            }
            Ok(())
        }
        Kind::Fixeds(width) => {
            let n = count(buf)?;
            wire::skip(buf, n.saturating_mul(width))
        }
        Kind::Structs(fields) => {
            for _ in 0..count(buf)? {
                walk_struct(buf, fields, version, flexible)?;
            }
            Ok(())
        }
        Kind::Struct(fields) => walk_struct(buf, fields, version, flexible),
    }
}

fn skip_sized(buf: &mut &[u8], prefix: LengthPrefix) -> Result<(), WireError> {
    let len = wire::read_length(buf, prefix)?.unwrap_or_default();
    wire::skip(buf, len)
}

impl Field {
    pub(crate) fn present_in(&self, version: i16) -> bool {
        (self.min..=self.max).contains(&version)
    }

    #[cfg(test)]
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Request;
    use crate::request::{decode_request, encode_request};
    use crate::versions::SUPPORTED_APIS;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::Encodable;
    use proptest::prelude::*;

    /// A small deterministic generator, so a failing case is reproduced from its seed.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Random bytes following `fields`: what a client could send.
    fn generate(rng: &mut Rng, fields: &[Field], version: i16, flexible: bool, out: &mut BytesMut) {
        for field in fields
            .iter()
            .filter(|f| f.tag.is_none() && f.present_in(version))
        {
            generate_kind(rng, field.kind(), version, flexible, out);
        }
        if flexible {
            out.put_u8(0);
        }
    }

    fn generate_kind(rng: &mut Rng, kind: Kind, version: i16, flexible: bool, out: &mut BytesMut) {
        let put_len = |out: &mut BytesMut, prefix, len| wire::put_length(out, prefix, len).unwrap();
        match kind {
            // 0 or 1, so that booleans survive the round trip.
            Kind::Fixed(1) => out.put_u8(rng.below(2) as u8),
            Kind::Fixed(width) => (0..width).for_each(|_| out.put_u8(rng.below(256) as u8)),
            Kind::Str => {
                let len = rng.below(5) as usize;
                put_len(out, LengthPrefix::string(flexible), len);
                (0..len).for_each(|_| out.put_u8(b'a' + rng.below(26) as u8));
            }
            Kind::Bytes => {
                let len = rng.below(5) as usize;
                put_len(out, LengthPrefix::sequence(flexible), len);
                (0..len).for_each(|_| out.put_u8(rng.below(256) as u8));
            }
            Kind::Strs => {
                let count = rng.below(3) as usize;
                put_len(out, LengthPrefix::sequence(flexible), count);
                (0..count).for_each(|_| generate_kind(rng, Kind::Str, version, flexible, out));
            }
            Kind::Fixeds(width) => {
                let count = rng.below(3) as usize;
                put_len(out, LengthPrefix::sequence(flexible), count);
                (0..count * width).for_each(|_| out.put_u8(rng.below(256) as u8));
            }
            Kind::Structs(fields) => {
                let count = rng.below(3) as usize;
                put_len(out, LengthPrefix::sequence(flexible), count);
                (0..count).for_each(|_| generate(rng, fields, version, flexible, out));
            }
            Kind::Struct(fields) => generate(rng, fields, version, flexible, out),
        }
    }

    fn header_bytes(api_key: ApiKey, version: i16) -> (RequestHeader, BytesMut) {
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(1);
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, api_key.request_header_version(version))
            .unwrap();
        (header, buf)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every layout agrees with kafka-protocol at every version we accept: a body generated
        /// from our layout decodes with kafka-protocol and encodes back to the same bytes.
        #[test]
        fn layouts_match_kafka_protocol(seed in 1u64..) {
            let mut rng = Rng(seed);
            for support in SUPPORTED_APIS.iter().filter(|s| s.api_key != ApiKey::Produce) {
                let layout = layout(support.api_key).unwrap();
                for version in support.min..=support.max {
                    let (header, mut frame) = header_bytes(support.api_key, version);
                    let header_len = frame.len();
                    generate(&mut rng, layout.fields(), version, layout.is_flexible(version), &mut frame);
                    let sent = frame.clone();
                    prop_assert!(layout.check(&sent[header_len..], version).is_ok());
                    let (_, request) = decode_request(frame).map_err(|e| {
                        TestCaseError::fail(format!("{:?} v{version}: {e}", support.api_key))
                    })?;
                    let again = encode_request(&header, &request).unwrap().concat();
                    prop_assert_eq!(&again[4..], &sent[..], "{:?} v{}", support.api_key, version);
                }
            }
        }

        /// Arbitrary bytes after a valid header never panic and never over-allocate.
        #[test]
        fn garbage_bodies_are_errors_not_panics(
            api in 0usize..SUPPORTED_APIS.len(),
            version_pick: u8,
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let support = SUPPORTED_APIS[api];
            let span = (support.max - support.min + 1) as u8;
            let version = support.min + (version_pick % span) as i16;
            let (_, mut frame) = header_bytes(support.api_key, version);
            frame.extend_from_slice(&body);
            let _ = decode_request(frame);
        }
    }

    #[test]
    fn a_huge_array_count_in_a_tiny_body_is_refused() {
        // Metadata v0: topics array announcing 0x033c0c00 entries, five bytes of body.
        let body = [0x03, 0x3c, 0x0c, 0x00, 0xb6];
        assert!(matches!(
            METADATA.check(&body, 0),
            Err(WireError::Truncated { .. })
        ));
        // The same in a flexible version, as a compact array.
        let body = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(METADATA.check(&body, 12).is_err());
    }

    /// Found by the `request` fuzz target: a Fetch v17 frame of 160 bytes that made
    /// `kafka-protocol` reserve room for thousands of forgotten topics (280 KB). A partition's
    /// tagged field 0 (its replica directory id, a UUID) said it was one size and held
    /// another: the walk skipped it by its size, `kafka-protocol` read sixteen bytes, and from
    /// there on it read counts the walk had never checked.
    #[test]
    fn a_known_tagged_field_must_fill_its_size() {
        let found: [u8; 160] = [
            0x00, 0x01, 0x00, 0x11, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x07, 0x72, 0x64, 0x6b, 0x61,
            0x66, 0x6b, 0x61, 0x00, 0x00, 0x00, 0x01, 0xf4, 0x00, 0x00, 0x00, 0x01, 0x03, 0x20,
            0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x02, 0xe2, 0x07,
            0x8d, 0x8f, 0x45, 0x8e, 0x17, 0x00, 0x00, 0x00, 0x01, 0xb4, 0x00, 0x00, 0x00, 0x01,
            0x03, 0x20, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x1f, 0x00, 0xff, 0xff, 0xff, 0x02,
            0xe2, 0x07, 0x8f, 0x45, 0x8e, 0x17, 0x00, 0x00, 0x00, 0x01, 0xb4, 0x00, 0x00, 0x00,
            0x01, 0x03, 0x20, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0xff, 0x00, 0xff, 0xff, 0xff,
            0x02, 0xe2, 0x07, 0x8d, 0x8f, 0x8e, 0x17, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x45, 0xf2, 0xad, 0x70, 0x00, 0x48, 0x00, 0x0f, 0x00, 0x01, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x8e, 0x17, 0x00, 0x00, 0x00, 0x01, 0xb4, 0x00, 0x00, 0x72, 0x64, 0x4b,
            0x61, 0x00, 0x66, 0x00, 0x06, 0xfa,
        ];
        // Key, version, correlation id, client id "rdkafka", no tagged fields.
        let header_len = 10 + usize::from(u16::from_be_bytes([found[8], found[9]])) + 1;
        assert_eq!(&found[..4], &[0, 1, 0, 17], "Fetch v17");
        assert_eq!(found[header_len - 1], 0);
        assert!(matches!(
            FETCH.check(&found[header_len..], 17),
            Err(WireError::TaggedFieldSize { tag: 0, .. })
        ));
        assert!(decode_request(BytesMut::from(&found[..])).is_err());

        // One topic (a UUID) with one partition whose tagged field 0 holds a UUID: refused with
        // any size but sixteen.
        let fetch_v17 = |size: u8| {
            let mut body = vec![0; 4 * 3 + 1 + 4 * 2]; // max wait, min/max bytes, isolation, session
            body.push(2); // one topic
            body.extend([7; 16]); // topic id
            body.push(2); // one partition
            body.extend([0; 4 + 4 + 8 + 4 + 8 + 4]); // partition .. partition max bytes
            body.extend([1, 0, size]); // one tagged field: tag 0, its size
            body.extend([9; 16]); // the replica directory id
            body.push(0); // the topic's tagged fields
            body.extend([1, 1, 0]); // no forgotten topics, rack id "", no tagged fields
            body
        };
        assert!(FETCH.check(&fetch_v17(16), 17).is_ok());
        for size in [0, 1, 15, 17] {
            let body = fetch_v17(size);
            let result = FETCH.check(&body, 17);
            assert!(
                matches!(result, Err(WireError::TaggedFieldSize { tag: 0, .. })),
                "size {size}: {result:?}"
            );
        }
        let (header, mut frame) = header_bytes(ApiKey::Fetch, 17);
        frame.extend_from_slice(&fetch_v17(16));
        let (_, request) = decode_request(frame).unwrap();
        let Request::Fetch(fetch) = request else {
            panic!("{request:?}")
        };
        assert_eq!(header.request_api_version, 17);
        assert_eq!(
            fetch.topics[0].partitions[0].replica_directory_id,
            uuid::Uuid::from_bytes([9; 16])
        );
    }

    #[test]
    fn a_huge_fixed_width_array_is_refused_without_overflow() {
        // CreatePartitions v0: one topic "a", count 1, assignments: one entry whose broker ids
        // array claims i32::MAX ids.
        let mut body = vec![0, 0, 0, 1, 0, 1, b'a', 0, 0, 0, 1, 0, 0, 0, 1];
        body.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(CREATE_PARTITIONS.check(&body, 0).is_err());
    }
}
