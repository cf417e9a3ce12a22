//! `--offset`: where the console consumer starts in each partition.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The end: only records produced from now on.
    Latest,
    /// An absolute offset.
    At(i64),
    /// This many records before the end.
    BeforeEnd(i64),
}

impl OffsetSpec {
    /// The offset to start at in a partition whose log spans `[start, end)`. Offsets outside
    /// the log are brought to its nearest edge rather than refused.
    pub fn resolve(self, start: i64, end: i64) -> i64 {
        let end = end.max(start);
        match self {
            Self::Earliest => start,
            Self::Latest => end,
            Self::At(offset) => offset.clamp(start, end),
            Self::BeforeEnd(count) => end.saturating_sub(count).max(start),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("offset must be earliest, latest, an offset N or -N (N before the end), not '{0}'")]
pub struct BadOffsetSpec(String);

impl FromStr for OffsetSpec {
    type Err = BadOffsetSpec;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadOffsetSpec(s.to_owned());
        match s {
            "earliest" | "oldest" | "beginning" | "start" => Ok(Self::Earliest),
            "latest" | "newest" | "end" => Ok(Self::Latest),
            _ => {
                let (before_end, digits) = match s.strip_prefix('-') {
                    Some(digits) => (true, digits),
                    None => (false, s),
                };
                // Digits only: no sign games such as "--5" or "+-1".
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let n: i64 = digits.parse().map_err(|_| bad())?;
                Ok(if before_end {
                    Self::BeforeEnd(n)
                } else {
                    Self::At(n)
                })
            }
        }
    }
}

impl fmt::Display for OffsetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Earliest => f.write_str("earliest"),
            Self::Latest => f.write_str("latest"),
            Self::At(offset) => write!(f, "{offset}"),
            Self::BeforeEnd(count) => write!(f, "-{count}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!("earliest".parse(), Ok(OffsetSpec::Earliest));
        assert_eq!("oldest".parse(), Ok(OffsetSpec::Earliest));
        assert_eq!("latest".parse(), Ok(OffsetSpec::Latest));
        assert_eq!("0".parse(), Ok(OffsetSpec::At(0)));
        assert_eq!("1234".parse(), Ok(OffsetSpec::At(1234)));
        assert_eq!("-10".parse(), Ok(OffsetSpec::BeforeEnd(10)));
        for bad in [
            "",
            "-",
            "--1",
            "+5",
            "1e3",
            "ten",
            " 5",
            "99999999999999999999",
        ] {
            assert!(bad.parse::<OffsetSpec>().is_err(), "{bad:?}");
        }
        let error = "x".parse::<OffsetSpec>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "offset must be earliest, latest, an offset N or -N (N before the end), not 'x'"
        );
    }

    #[test]
    fn specs_resolve_inside_the_log() {
        let (start, end) = (100, 200);
        assert_eq!(OffsetSpec::Earliest.resolve(start, end), 100);
        assert_eq!(OffsetSpec::Latest.resolve(start, end), 200);
        assert_eq!(OffsetSpec::At(150).resolve(start, end), 150);
        assert_eq!(OffsetSpec::At(5).resolve(start, end), 100);
        assert_eq!(OffsetSpec::At(500).resolve(start, end), 200);
        assert_eq!(OffsetSpec::BeforeEnd(10).resolve(start, end), 190);
        assert_eq!(OffsetSpec::BeforeEnd(1000).resolve(start, end), 100);
        assert_eq!(OffsetSpec::BeforeEnd(0).resolve(start, end), 200);
    }

    proptest! {
        #[test]
        fn display_parses_back_and_resolution_stays_in_the_log(
            spec in prop_oneof![
                Just(OffsetSpec::Earliest),
                Just(OffsetSpec::Latest),
                (0..i64::MAX).prop_map(OffsetSpec::At),
                (0..i64::MAX).prop_map(OffsetSpec::BeforeEnd),
            ],
            start in 0..1_000_000i64,
            len in 0..1_000_000i64,
        ) {
            prop_assert_eq!(spec.to_string().parse::<OffsetSpec>(), Ok(spec));
            let resolved = spec.resolve(start, start + len);
            prop_assert!((start..=start + len).contains(&resolved));
        }
    }
}
