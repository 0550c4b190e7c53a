//! `docs/ENVIRONMENT.md` lists every `LAZOR_*` knob the code reads, and only those.
//!
//! Reads the sources as text and collects every string literal that is exactly a knob's name (`"LAZOR_..."`: what
//! `std::env::var` is called with; a message that merely mentions a knob is a longer literal and does not count),
//! then compares them with the names in the table of `docs/ENVIRONMENT.md`. Library knobs (`src/`) are checked both
//! ways: each is documented, and each row marked `library` is read in `src/`. Knobs of the tests and benches are
//! checked the same way against their rows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The readers the table's second column may name.
const READERS: [&str; 3] = ["library", "tests", "benches"];

/// Every `.rs` file under `dir`, recursively, sorted.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Knob names written as whole string literals in `text`.
fn literals(text: &str) -> BTreeSet<String> {
    let prefix = concat!("\"", "LAZOR_");
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + 1..];
        let len = after.bytes().take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_').count();
        if len > "LAZOR_".len() && after.as_bytes().get(len) == Some(&b'"') {
            found.insert(after[..len].to_string());
        }
        rest = &rest[i + 1..];
    }
    found
}

/// Each knob read under the given folders of the repository, with the first file that reads it.
fn read_in(folders: &[&str]) -> BTreeMap<String, String> {
    let root = Path::new(ROOT);
    let me = root.join(file!());
    let mut knobs = BTreeMap::new();
    for folder in folders {
        let mut files = Vec::new();
        sources(&root.join(folder), &mut files);
        for file in files.into_iter().filter(|f| *f != me) {
            let text = std::fs::read_to_string(&file).unwrap();
            let rel = file.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            for knob in literals(&text) {
                knobs.entry(knob).or_insert_with(|| rel.clone());
            }
        }
    }
    knobs
}

/// The table's rows: knob name -> reader (`library`, `tests` or `benches`).
fn documented() -> BTreeMap<String, String> {
    let path = Path::new(ROOT).join("docs/ENVIRONMENT.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rows = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `LAZOR_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let knob = cells[1].trim_matches('`').to_string();
        let reader = cells.get(2).copied().unwrap_or("").to_string();
        assert!(
            READERS.contains(&reader.as_str()),
            "docs/ENVIRONMENT.md: the row of {knob} says it is read by {reader:?}, not one of {READERS:?}"
        );
        assert!(rows.insert(knob.clone(), reader).is_none(), "docs/ENVIRONMENT.md has two rows for {knob}");
    }
    assert!(!rows.is_empty(), "docs/ENVIRONMENT.md: no table rows starting with | `LAZOR_");
    rows
}

/// Fails naming every knob of `code` (knob -> a file reading it) without a row in `docs`.
fn assert_documented(code: &BTreeMap<String, String>, docs: &BTreeMap<String, String>, readers: &str) {
    let undocumented: Vec<String> = code
        .iter()
        .filter(|(knob, _)| !docs.contains_key(*knob))
        .map(|(knob, file)| format!("{knob} (read in {file})"))
        .collect();
    assert!(
        undocumented.is_empty(),
        "knobs read by {readers} with no row in docs/ENVIRONMENT.md: {}",
        undocumented.join(", ")
    );
}

#[test]
fn every_knob_the_library_reads_is_documented_and_every_library_row_is_read() {
    let code = read_in(&["src"]);
    let docs = documented();
    assert_documented(&code, &docs, "the library");
    let unread: Vec<&String> = docs
        .iter()
        .filter(|(knob, reader)| *reader == "library" && !code.contains_key(*knob))
        .map(|(k, _)| k)
        .collect();
    assert!(unread.is_empty(), "docs/ENVIRONMENT.md has library rows that nothing in src/ reads: {unread:?}");
}

#[test]
fn every_knob_the_tests_and_benches_read_is_documented_and_every_row_is_read() {
    let code = read_in(&["src", "tests", "benches", "examples"]);
    let docs = documented();
    assert_documented(&code, &docs, "the crate, its tests, benches or examples");
    let unread: Vec<&String> = docs.keys().filter(|knob| !code.contains_key(*knob)).collect();
    assert!(unread.is_empty(), "docs/ENVIRONMENT.md lists knobs that no source file reads: {unread:?}");
}

#[test]
fn the_scanner_takes_whole_literals_only() {
    let text = concat!("var(\"LAZOR_", "ONE\"); eprintln!(\"LAZOR_", "TWO is set\"); var(\"LAZOR_\")");
    let found: Vec<String> = literals(text).into_iter().collect();
    assert_eq!(found, ["LAZOR_ONE"]);
}
