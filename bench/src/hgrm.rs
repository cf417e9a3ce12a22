//! HdrHistogram's percentile-distribution text format (`outputPercentileDistribution` of the
//! Java library; what HdrHistogram's plotter and most tooling read), values in milliseconds.

use std::fmt::Write;

use hdrhistogram::Histogram;

/// Percentile ticks per half distance to 100%, as the Java library's default.
const TICKS_PER_HALF_DISTANCE: u32 = 5;
/// Histograms hold microseconds; the file shows milliseconds.
const US_PER_MS: f64 = 1000.0;

pub fn percentile_distribution(histogram: &Histogram<u64>) -> String {
    let digits = usize::from(histogram.sigfig());
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total: u64 = 0;
    for step in histogram.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
        total += step.count_since_last_iteration();
        let value = step.value_iterated_to() as f64 / US_PER_MS;
        let quantile = step.quantile_iterated_to();
        if quantile < 1.0 {
            let inverse = 1.0 / (1.0 - quantile);
            let _ = writeln!(
                out,
                "{value:12.digits$} {quantile:2.12} {total:10} {inverse:14.2}"
            );
        } else {
            let _ = writeln!(out, "{value:12.digits$} {quantile:2.12} {total:10}");
        }
    }
    let mean = histogram.mean() / US_PER_MS;
    let stdev = histogram.stdev() / US_PER_MS;
    let max = histogram.max() as f64 / US_PER_MS;
    let _ = writeln!(
        out,
        "#[Mean    = {mean:12.digits$}, StdDeviation   = {stdev:12.digits$}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {max:12.digits$}, Total count    = {:12}]",
        histogram.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        histogram.buckets(),
        histogram.distinct_values()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::new_latency_histogram;

    #[test]
    fn the_distribution_climbs_to_every_sample() {
        let mut histogram = new_latency_histogram();
        for us in 1..=10_000u64 {
            histogram.record(us).unwrap();
        }
        let text = percentile_distribution(&histogram);
        let mut lines = text.lines();
        assert_eq!(
            lines
                .next()
                .map(str::split_whitespace)
                .map(Iterator::collect),
            Some(vec![
                "Value",
                "Percentile",
                "TotalCount",
                "1/(1-Percentile)"
            ])
        );
        let rows: Vec<Vec<f64>> = text
            .lines()
            .skip(2)
            .take_while(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().map(|f| f.parse().unwrap()).collect())
            .collect();
        assert!(rows.len() > 20);
        assert!(
            rows.windows(2)
                .all(|w| w[0][1] <= w[1][1] && w[0][2] <= w[1][2])
        );
        let last = rows.last().unwrap();
        assert_eq!(last.len(), 3, "the 100% row has no 1/(1-p)");
        assert_eq!((last[1], last[2]), (1.0, 10_000.0));
        assert!((last[0] - 10.0).abs() < 0.01, "max is 10 ms: {last:?}");
        // The median row: about 5 ms at about 5,000 samples.
        let median = rows.iter().find(|r| r[1] >= 0.5).unwrap();
        assert!((median[0] - 5.0).abs() < 0.01 && (median[2] - 5000.0).abs() < 10.0);
        assert!(text.contains("#[Max     =       10.007, Total count    =        10000]"));
    }
}
