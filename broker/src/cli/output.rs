//! Results for people (aligned tables) or for scripts (JSON with stable keys), written to
//! stdout. A closed stdout (`spindle topic list | head -1`) ends the output quietly.

use std::io::{self, Write};

use clap::ValueEnum;
use serde::Serialize;

use super::error::CliError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns.
    Table,
    /// One JSON document (the console consumer and producer: one object per line).
    Json,
}

impl Output {
    /// Prints `value` as JSON, or for people as the text `text` makes of it.
    pub fn emit<T: Serialize>(
        self,
        value: &T,
        text: impl FnOnce(&T) -> String,
    ) -> Result<(), CliError> {
        match self {
            Self::Json => emit_json(value),
            Self::Table => emit(&text(value)),
        }
    }
}

/// Columns of text, each as wide as its widest cell, two spaces apart.
#[derive(Debug)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// A table of one row per item, rendered.
    pub fn of<T>(headers: &[&'static str], items: &[T], row: impl Fn(&T) -> Vec<String>) -> String {
        let mut table = Self::new(headers);
        for item in items {
            table.row(row(item));
        }
        table.render()
    }

    /// Adds a row; an empty cell shows as `-`, so every row splits into as many words as the
    /// header (a group with no protocol type, say, would otherwise shift the columns after it).
    pub fn row(&mut self, cells: Vec<String>) {
        let cells = cells
            .into_iter()
            .map(|c| if c.is_empty() { "-".to_owned() } else { c })
            .collect();
        self.rows.push(cells);
    }

    /// The header line (if there are headers), then the rows.
    pub fn render(&self) -> String {
        let header: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        let header = (!header.is_empty()).then_some(&header);
        let lines: Vec<&Vec<String>> = header.into_iter().chain(&self.rows).collect();
        let columns = lines.iter().map(|l| l.len()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                let width = |l: &&Vec<String>| l.get(c).map_or(0, |s| s.chars().count());
                lines.iter().map(width).max().unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for line in lines {
            let mut text = String::new();
            for (c, cell) in line.iter().enumerate() {
                if c > 0 {
                    text.push_str("  ");
                }
                text.push_str(cell);
                let pad = widths[c].saturating_sub(cell.chars().count());
                text.extend(std::iter::repeat_n(' ', pad));
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `name value` lines, for one thing's summary above its tables.
pub fn summary(pairs: &[(&'static str, String)]) -> String {
    let mut table = Table::new(&[]);
    for (name, value) in pairs {
        table.row(vec![(*name).to_owned(), value.clone()]);
    }
    table.render()
}

/// Writes text to stdout.
pub fn emit(text: &str) -> Result<(), CliError> {
    write_stdout(text.as_bytes())
}

/// Writes a value as pretty JSON to stdout.
pub fn emit_json<T: Serialize>(value: &T) -> Result<(), CliError> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Usage(format!("rendering JSON: {e}")))?;
    text.push('\n');
    emit(&text)
}

/// Writes a value as one line of JSON to stdout, for streams of objects.
pub fn emit_json_line<T: Serialize>(value: &T) -> Result<(), CliError> {
    emit(&json_line(value)?)
}

/// A value as one line of JSON, newline included.
pub fn json_line<T: Serialize>(value: &T) -> Result<String, CliError> {
    let mut text = serde_json::to_string(value)
        .map_err(|e| CliError::Usage(format!("rendering JSON: {e}")))?;
    text.push('\n');
    Ok(text)
}

/// Writes and flushes; a reader that went away is not an error.
pub fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(CliError::io("writing to stdout")(e))
        }
        _ => Ok(()),
    }
}

/// A list of numbers as people write them: `0, 1, 2`.
pub fn list<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell_without_trailing_spaces() {
        let mut table = Table::new(&["NAME", "PARTITIONS"]);
        table.row(vec!["orders".to_owned(), "3".to_owned()]);
        table.row(vec!["a".to_owned(), "12".to_owned()]);
        assert_eq!(
            table.render(),
            "NAME    PARTITIONS\norders  3\na       12\n"
        );
    }

    #[test]
    fn empty_cells_show_as_a_dash() {
        let mut table = Table::new(&["GROUP", "STATE", "TYPE"]);
        table.row(vec!["g".to_owned(), "Empty".to_owned(), String::new()]);
        assert_eq!(table.render(), "GROUP  STATE  TYPE\ng      Empty  -\n");
    }

    #[test]
    fn summaries_are_two_aligned_columns() {
        let text = summary(&[("NAME", "t".to_owned()), ("PARTITIONS", "3".to_owned())]);
        assert_eq!(text, "NAME        t\nPARTITIONS  3\n");
    }

    #[test]
    fn lists_are_comma_separated() {
        assert_eq!(list(&[0, 1, 2]), "0, 1, 2");
        assert_eq!(list::<i32>(&[]), "");
    }
}
