//! `--format`: how the console consumer prints a record, in kcat's `-f` notation.
//!
//! | placeholder | prints |
//! |---|---|
//! | `%t` | topic |
//! | `%p` | partition |
//! | `%o` | offset |
//! | `%k` | key (nothing for a null key) |
//! | `%v` | value (nothing for a null value) |
//! | `%T` | timestamp, milliseconds since the epoch |
//! | `%h` | headers as `k=v` pairs joined by `,` (a null value prints as just `k`) |
//! | `%K`, `%S` | key and value length in bytes (-1 for null) |
//! | `%%` | `%` |
//!
//! Escapes `\n`, `\t`, `\r`, `\0` and `\\` stand for their characters. Nothing is added: the
//! default format `%v\n` is what ends each record with a newline. Keys and values are printed
//! as their raw bytes.

use std::str::FromStr;

use net::client::batch::ConsumedRecord;

pub const DEFAULT_FORMAT: &str = r"%v\n";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Key,
    Value,
    Timestamp,
    Headers,
    KeyLength,
    ValueLength,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format(Vec<Piece>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadFormat {
    #[error("unknown placeholder %{0} (known: %t %p %o %k %v %T %h %K %S %%)")]
    Placeholder(char),
    #[error("unknown escape \\{0} (known: \\n \\t \\r \\0 \\\\)")]
    Escape(char),
    #[error("the format ends in a lone {0}")]
    Dangling(char),
}

impl FromStr for Format {
    type Err = BadFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            let placeholder = match c {
                '%' => match chars.next().ok_or(BadFormat::Dangling('%'))? {
                    '%' => None,
                    't' => Some(Piece::Topic),
                    'p' => Some(Piece::Partition),
                    'o' => Some(Piece::Offset),
                    'k' => Some(Piece::Key),
                    'v' => Some(Piece::Value),
                    'T' => Some(Piece::Timestamp),
                    'h' => Some(Piece::Headers),
                    'K' => Some(Piece::KeyLength),
                    'S' => Some(Piece::ValueLength),
                    other => return Err(BadFormat::Placeholder(other)),
                },
                _ => None,
            };
            if let Some(piece) = placeholder {
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal).into_bytes()));
                }
                pieces.push(piece);
                continue;
            }
            literal.push(match c {
                '\\' => match chars.next().ok_or(BadFormat::Dangling('\\'))? {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '0' => '\0',
                    '\\' => '\\',
                    other => return Err(BadFormat::Escape(other)),
                },
                // Only "%%" gets here with '%'.
                other => other,
            });
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal.into_bytes()));
        }
        Ok(Self(pieces))
    }
}

impl Format {
    /// Appends the record as the format says.
    pub fn render(&self, topic: &str, partition: i32, record: &ConsumedRecord, out: &mut Vec<u8>) {
        let length = |b: &Option<bytes::Bytes>| b.as_ref().map_or(-1, |b| b.len() as i64);
        for piece in &self.0 {
            match piece {
                Piece::Literal(bytes) => out.extend_from_slice(bytes),
                Piece::Topic => out.extend_from_slice(topic.as_bytes()),
                Piece::Partition => out.extend_from_slice(partition.to_string().as_bytes()),
                Piece::Offset => out.extend_from_slice(record.offset.to_string().as_bytes()),
                Piece::Key => out.extend_from_slice(record.key.as_deref().unwrap_or_default()),
                Piece::Value => out.extend_from_slice(record.value.as_deref().unwrap_or_default()),
                Piece::Timestamp => {
                    out.extend_from_slice(record.timestamp_ms.to_string().as_bytes());
                }
                Piece::Headers => {
                    for (i, (key, value)) in record.headers.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(key.as_bytes());
                        if let Some(value) = value {
                            out.push(b'=');
                            out.extend_from_slice(value);
                        }
                    }
                }
                Piece::KeyLength => {
                    out.extend_from_slice(length(&record.key).to_string().as_bytes())
                }
                Piece::ValueLength => {
                    out.extend_from_slice(length(&record.value).to_string().as_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn record() -> ConsumedRecord {
        ConsumedRecord {
            offset: 42,
            timestamp_ms: 1_700_000_000_123,
            key: Some(Bytes::from_static(b"user-7")),
            value: Some(Bytes::from_static(b"hello")),
            headers: vec![
                ("trace".to_owned(), Some(Bytes::from_static(b"abc"))),
                ("flag".to_owned(), None),
            ],
        }
    }

    fn render(format: &str, record: &ConsumedRecord) -> String {
        let mut out = Vec::new();
        format
            .parse::<Format>()
            .unwrap()
            .render("orders", 3, record, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_placeholder_renders() {
        let r = record();
        assert_eq!(render(DEFAULT_FORMAT, &r), "hello\n");
        assert_eq!(render("%p %o %k %v", &r), "3 42 user-7 hello");
        assert_eq!(render("%t/%p@%o", &r), "orders/3@42");
        assert_eq!(render("%T", &r), "1700000000123");
        assert_eq!(render("[%h]", &r), "[trace=abc,flag]");
        assert_eq!(render("%K %S", &r), "6 5");
        assert_eq!(render(r"100%% %v\t\\\r\0", &r), "100% hello\t\\\r\0");
    }

    #[test]
    fn nulls_print_as_nothing_and_length_minus_one() {
        let r = ConsumedRecord {
            key: None,
            value: None,
            headers: Vec::new(),
            ..record()
        };
        assert_eq!(render("<%k|%v|%h> %K %S", &r), "<||> -1 -1");
    }

    #[test]
    fn binary_values_pass_through_untouched() {
        let r = ConsumedRecord {
            value: Some(Bytes::from_static(&[0xff, 0x00, b'\n'])),
            ..record()
        };
        let mut out = Vec::new();
        "%v".parse::<Format>().unwrap().render("t", 0, &r, &mut out);
        assert_eq!(out, [0xff, 0x00, b'\n']);
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!("%x".parse::<Format>(), Err(BadFormat::Placeholder('x')));
        assert_eq!(r"\q".parse::<Format>(), Err(BadFormat::Escape('q')));
        assert_eq!("%v%".parse::<Format>(), Err(BadFormat::Dangling('%')));
        assert_eq!(r"%v\".parse::<Format>(), Err(BadFormat::Dangling('\\')));
    }
}
