//! The house has floors: the import graph of `src/` has no circle but the tape tie (`autograd` <-> `tensor`).
//!
//! Reads every source file as text, resolves each `crate::`, `super::` and `self::` path (in `use` lines and inline)
//! to the file that defines the item, following `pub use` re-exports, and looks for strongly connected components.
//! Test modules (`#[cfg(test)] mod ...`) are left out: tests may reach anywhere. Run with `--nocapture` to see the
//! floors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its module path (`["schedule", "fuse"]`), its code without comments and test modules.
struct File {
    rel: String,
    module: Vec<String>,
    code: String,
}

fn collect(dir: &Path, root: &Path, out: &mut Vec<File>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            let mut module: Vec<String> = rel.trim_end_matches(".rs").split('/').map(str::to_string).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let code = strip(&std::fs::read_to_string(&p).unwrap());
            out.push(File { rel: format!("src/{rel}"), module, code });
        }
    }
}

/// The code without comments, string contents and `#[cfg(test)]` modules.
fn strip(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let test_module = |n: &str| {
            let n = n.trim_start();
            n.starts_with("mod ") || n.starts_with("pub(crate) mod ") || n.starts_with("pub mod ")
        };
        if t.starts_with("#[cfg(test)]") && lines.peek().is_some_and(|n| test_module(n)) {
            // Skip the module's block by counting braces.
            let mut depth = 0i32;
            let mut opened = false;
            for l in lines.by_ref() {
                depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                opened |= l.contains('{');
                if opened && depth <= 0 || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        // Drop string literals so paths inside messages are not read as imports.
        let mut in_str = false;
        let mut prev = ' ';
        for c in code.chars() {
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                out.push(c);
            }
            prev = c;
        }
        out.push('\n');
    }
    out
}

/// Every path a `use` item names, braces expanded: `a::{b, c::{d, e}}` -> `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else { return vec![tree] };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |x| format!("{prefix}{x}")))
        .collect()
}

/// The `use` items of a file, whole (several lines joined), with whether each is a re-export.
fn uses(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = find_word(rest, "use ") {
        let before = rest[..i].trim_end();
        let public = before.ends_with("pub") || before.ends_with("pub(crate)") || before.ends_with("pub(super)");
        let after = &rest[i + 4..];
        let end = after.find(';').unwrap_or(after.len());
        let item = after[..end].to_string();
        // A use item holds only a path tree; anything else is prose or code that happens to contain the word.
        if item.chars().all(|c| c.is_alphanumeric() || "_:{},* \n".contains(c)) {
            let item = item.split(',').map(|p| p.split(" as ").next().unwrap()).collect::<Vec<_>>().join(",");
            out.push((public, item));
        }
        rest = &after[end..];
    }
    out
}

/// The index of `word` in `s` where it starts a token.
fn find_word(s: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find(word) {
        let at = from + i;
        let ok = at == 0 || !s[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
        if ok {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// Inline paths: every `crate::a::b` or `super::a` in the code outside `use` items.
fn inline_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for root in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = find_word(&code[from..], root) {
            let at = from + i;
            let path: String =
                code[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            out.push(path.trim_end_matches(':').to_string());
            from = at + root.len();
        }
    }
    out
}

struct House {
    files: Vec<File>,
    by_module: BTreeMap<Vec<String>, usize>,
    /// Per file: re-exported name -> absolute path.
    reexports: Vec<BTreeMap<String, Vec<String>>>,
}

impl House {
    fn absolute(&self, from: usize, path: &str) -> Option<Vec<String>> {
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let mut module = self.files[from].module.clone();
        let mut i = 0;
        match segs.first().copied() {
            Some("crate") => {
                module.clear();
                i = 1;
            }
            Some("self") => i = 1,
            Some("super") => {
                while segs.get(i) == Some(&"super") {
                    module.pop()?;
                    i += 1;
                }
            }
            Some(first) => {
                // A relative path names a child module of this one, or an outside crate.
                let mut child = module.clone();
                child.push(first.to_string());
                if !self.by_module.contains_key(&child) {
                    return None;
                }
            }
            None => return None,
        }
        module.extend(segs[i..].iter().map(|s| s.to_string()));
        Some(module)
    }

    /// The file that defines what an absolute path names, following re-exports.
    fn resolve(&self, path: &[String], depth: usize) -> Option<usize> {
        let mut n = path.len();
        while !self.by_module.contains_key(&path[..n]) {
            n = n.checked_sub(1)?;
        }
        let file = self.by_module[&path[..n]];
        if depth < 8 {
            if let Some(name) = path.get(n) {
                if let Some(target) = self.reexports[file].get(name) {
                    let mut full = target.clone();
                    full.extend(path[n + 1..].iter().cloned());
                    if full != path {
                        return self.resolve(&full, depth + 1).or(Some(file));
                    }
                }
            }
        }
        Some(file)
    }
}

fn house() -> (House, Vec<BTreeSet<usize>>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    // Files declared as test modules (`#[cfg(test)] mod tests;`) are tests too.
    let tests: Vec<Vec<String>> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(root.join(f.rel.trim_start_matches("src/"))).unwrap();
            let lines: Vec<String> = text.lines().map(|l| l.trim().to_string()).collect();
            let module = f.module.clone();
            lines
                .windows(2)
                .filter(|w| w[0] == "#[cfg(test)]" && w[1].starts_with("mod ") && w[1].ends_with(';'))
                .map(|w| {
                    let mut m = module.clone();
                    m.push(w[1].trim_start_matches("mod ").trim_end_matches(';').to_string());
                    m
                })
                .collect::<Vec<_>>()
        })
        .collect();
    files.retain(|f| !tests.contains(&f.module));
    let by_module = files.iter().enumerate().map(|(i, f)| (f.module.clone(), i)).collect();
    let mut house = House { files, by_module, reexports: Vec::new() };
    let mut reexports = Vec::new();
    for f in 0..house.files.len() {
        let mut map = BTreeMap::new();
        for (public, item) in uses(&house.files[f].code) {
            if public {
                for p in expand(&item) {
                    if let Some(abs) = house.absolute(f, &p) {
                        if let Some(name) = abs.last() {
                            if name != "*" && name != "self" {
                                map.insert(name.clone(), abs);
                            }
                        }
                    }
                }
            }
        }
        reexports.push(map);
    }
    house.reexports = reexports;
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); house.files.len()];
    for (f, out) in edges.iter_mut().enumerate() {
        // A folder's facade (`pub use child::Item` in its mod.rs) is part of declaring the child, like `mod child;`:
        // not an import.
        let mut paths: Vec<(bool, String)> = uses(&house.files[f].code)
            .into_iter()
            .flat_map(|(public, item)| expand(&item).into_iter().map(move |p| (public, p)))
            .collect();
        paths.extend(inline_paths(&house.files[f].code).into_iter().map(|p| (false, p)));
        for (public, p) in paths {
            let Some(mut abs) = house.absolute(f, &p) else { continue };
            if abs.last().is_some_and(|s| s == "*" || s == "self") {
                abs.pop();
            }
            if let Some(to) = house.resolve(&abs, 0) {
                let facade = public && house.files[to].module.starts_with(&house.files[f].module);
                if to != f && !facade {
                    out.insert(to);
                }
            }
        }
    }
    (house, edges)
}

/// Tarjan's strongly connected components, each of more than one file.
fn circles(edges: &[BTreeSet<usize>]) -> Vec<BTreeSet<usize>> {
    struct T<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<BTreeSet<usize>>,
    }
    fn visit(t: &mut T, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in t.edges[v].iter() {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(i) if t.on[w] => t.low[v] = t.low[v].min(i),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut set = BTreeSet::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on[w] = false;
                set.insert(w);
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                t.out.push(set);
            }
        }
    }
    let n = edges.len();
    let mut t = T {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
}

/// The tape tie: `Tensor` records onto the tape and the tape's rules build `Tensor`s. Nothing else may circle.
fn allowed(rel: &str) -> bool {
    rel.starts_with("src/autograd/") || rel.starts_with("src/tensor/")
}

#[test]
fn no_import_circle_but_the_tape_tie() {
    let (house, edges) = house();
    assert!(house.files.len() > 50, "read only {} files of src/", house.files.len());
    let total: usize = edges.iter().map(BTreeSet::len).sum();
    assert!(total > 100, "found only {total} imports: the parser reads nothing");
    let mut report = String::new();
    let found = circles(&edges);
    let mut tape_ties = 0;
    for c in &found {
        let names: Vec<&str> = c.iter().map(|&i| house.files[i].rel.as_str()).collect();
        if names.iter().all(|n| allowed(n)) {
            tape_ties += 1;
            continue;
        }
        report += &format!("\ncircle of {} files: {}\n", c.len(), names.join(", "));
        for &a in c {
            for &b in &edges[a] {
                if c.contains(&b) {
                    report += &format!("  {} -> {}\n", house.files[a].rel, house.files[b].rel);
                }
            }
        }
    }
    assert!(report.is_empty(), "import circles besides the tape tie:{report}");
    assert!(tape_ties <= 1, "the tape tie split into {tape_ties} circles");
}

/// The folder-level picture: top-level modules (a folder or a root file) and the floors they stand on.
#[test]
fn floors_of_the_top_level_modules() {
    let (house, edges) = house();
    let top = |i: usize| house.files[i].module.first().cloned().unwrap_or_else(|| "lib".to_string());
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, out) in edges.iter().enumerate() {
        deps.entry(top(a)).or_default();
        for &b in out {
            if top(a) != top(b) && top(a) != "lib" {
                deps.entry(top(a)).or_default().insert(top(b));
            }
        }
    }
    let names: Vec<String> = deps.keys().cloned().collect();
    let index: BTreeMap<&String, usize> = names.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let graph: Vec<BTreeSet<usize>> = names.iter().map(|n| deps[n].iter().map(|d| index[d]).collect()).collect();
    for c in circles(&graph) {
        let set: BTreeSet<&str> = c.iter().map(|&i| names[i].as_str()).collect();
        assert_eq!(set, BTreeSet::from(["autograd", "tensor"]), "top-level modules in a circle: {set:?}");
    }
    // Floors: a module stands one above the highest it imports (the tape tie counted once).
    let mut floor: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..names.len() + 1 {
        for n in &names {
            let f = deps[n]
                .iter()
                .filter(|d| !(n == "tensor" && *d == "autograd"))
                .map(|d| floor.get(d.as_str()).copied().unwrap_or(0) + 1)
                .max()
                .unwrap_or(0);
            floor.insert(n, f);
        }
    }
    let mut by_floor: Vec<(usize, &str)> = floor.iter().map(|(n, f)| (*f, *n)).collect();
    by_floor.sort();
    for (f, n) in by_floor.iter().rev() {
        println!("floor {f:2}  {n}  -> {:?}", deps[*n]);
    }
}

/// The floors above the API (autograd, layers, optimizers, checkpoints) name tensors, never what lies under the
/// `Tensor` seam: the graph, the scheduler, the kernel IR, the backends or the orchestrator.
#[test]
fn the_floors_above_the_api_stay_above_the_tensor_seam() {
    let (house, edges) = house();
    let upper = |rel: &str| {
        ["src/autograd/", "src/nn/", "src/optim/"].iter().any(|p| rel.starts_with(p)) || rel == "src/safetensors.rs"
    };
    let under = ["graph", "schedule", "kernel", "backend", "realize", "reference"];
    let mut crossings = Vec::new();
    for (a, out) in edges.iter().enumerate() {
        if !upper(&house.files[a].rel) {
            continue;
        }
        for &b in out {
            if house.files[b].module.first().is_some_and(|m| under.contains(&m.as_str())) {
                crossings.push(format!("{} -> {}", house.files[a].rel, house.files[b].rel));
            }
        }
    }
    assert!(crossings.is_empty(), "imports from under the Tensor seam:\n{}", crossings.join("\n"));
}
