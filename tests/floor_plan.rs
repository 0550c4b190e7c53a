//! `docs/ARCHITECTURE.md` opens with the floor plan, and it matches the tree: every source file is named on it
//! (by its path or, within its folder's row, by its name), and every file it names exists.

use std::path::Path;

fn files(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            files(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The floor plan: the section of docs/ARCHITECTURE.md from its heading to the next.
fn plan() -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md")).unwrap();
    let start = text.find("## Floor plan").expect("docs/ARCHITECTURE.md has a `## Floor plan` section");
    let before_plan = &text[..start];
    assert!(!before_plan.contains("\n## "), "the floor plan is the first section of docs/ARCHITECTURE.md");
    let rest = &text[start + 2..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
}

#[test]
fn every_source_file_is_on_the_floor_plan() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    let plan = plan();
    let missing: Vec<&String> = all
        .iter()
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap();
            let folder = f.rsplit_once('/').map(|(d, _)| format!("`{d}/`"));
            let named = plan.contains(&format!("`{f}`")) || plan.contains(&format!("`{name}`"));
            let folder_row = folder.is_some_and(|d| plan.contains(&d)) && name == "mod.rs";
            !(named || folder_row || *f == "lib.rs")
        })
        .collect();
    assert!(missing.is_empty(), "source files the floor plan does not name: {missing:?}");
}

#[test]
fn every_file_the_floor_plan_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    let plan = plan();
    // Source files of the crate: not the tests' or benches' files the plan mentions.
    let outside = ["tests/", "benches/", "examples/"];
    let named: Vec<&str> = plan
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| t.ends_with(".rs") && !outside.iter().any(|o| t.starts_with(o)))
        .collect();
    assert!(named.len() > 40, "the floor plan names only {} files", named.len());
    let gone: Vec<&&str> = named
        .iter()
        .filter(|t| !all.iter().any(|f| f == *t || f.ends_with(&format!("/{t}")) || f.as_str() == **t))
        .collect();
    assert!(gone.is_empty(), "the floor plan names files that do not exist: {gone:?}");
}
