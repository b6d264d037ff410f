//! The tables every lab command prints: borderless, as kubectl's read, with columns that
//! wrap to fit the terminal (or `COLUMNS`, when a shell exports it) and never cut a
//! value. Piped into a file, a table keeps every row on one line, so `grep` and `awk`
//! see whole rows. Nothing is coloured.

use comfy_table::{CellAlignment, ContentArrangement, Table};

/// A table with `header`, its columns listed in `right` aligned to the right (numbers).
pub fn new(header: &[&str], right: &[usize]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    if let Some(width) = columns_variable() {
        table.set_width(width);
    }
    for (index, column) in table.column_iter_mut().enumerate() {
        // Two spaces between columns, none before the first.
        column.set_padding((0, 2));
        if right.contains(&index) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// The table's lines, each without trailing blanks, ending in a newline.
pub fn render(table: &Table) -> String {
    let mut out = table.trim_fmt();
    out.push('\n');
    out
}

/// `COLUMNS` as a width, when it is set to one.
fn columns_variable() -> Option<u16> {
    std::env::var("COLUMNS")
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|w| *w > 0)
}

/// `1 node`, `2 nodes`, `0 nodes`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrow_table_wraps_its_long_values_and_cuts_none() {
        let long = "a-pod-name-much-longer-than-its-column-would-like";
        let mut table = new(&["POD", "NODE", "FRAMES"], &[2]);
        table.add_row(vec![long, "node-a", "12"]);
        table.set_width(30);
        let text = render(&table);
        assert!(text.lines().all(|l| l.chars().count() <= 30), "{text}");
        // The first column's pieces, line after line, are the whole name.
        let first: String = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(first, long, "{text}");
        // Wide: one line per row.
        table.set_width(200);
        assert_eq!(render(&table).lines().count(), 2);
    }

    #[test]
    fn counts_say_one_thing_or_many() {
        assert_eq!(count(1, "wire"), "1 wire");
        assert_eq!(count(0, "wire"), "0 wires");
        assert_eq!(count(3, "node"), "3 nodes");
    }
}
