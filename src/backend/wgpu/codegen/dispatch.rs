//! One shader for kernels that run in one dispatch (`Kernel::joins`): each member's own source, its names and
//! bindings moved apart, its entry point inlined into a `main` that hands each member its range of workgroups.
//!
//! The members' sources are generated as usual and rewritten as text: WGSL has no namespaces, and every kind's
//! template would otherwise need to learn a prefix for its names. The rewrite renames every identifier a member
//! declares at module scope (bindings, workgroup memory, constants, helpers, `main`) wherever it appears in that
//! member, which is a consistent renaming whatever the member's locals shadow. It takes what the kinds generate
//! today: `enable` directives (hoisted), no `requires` or `diagnostic` directives, no structs (a field named as a
//! module-scope item would be renamed where declared and not where read).

use super::{param_vecs, WORKGROUP_SIZE};
use std::fmt::Write;

/// A member's source taken apart: declarations (renamed, rebound) and its entry point's builtins and body.
struct Member {
    decls: String,
    /// `(builtin, parameter name)` of the entry point, in order.
    builtins: Vec<(String, String)>,
    body: String,
    enables: Vec<String>,
}

/// The group's parameter block: per member the end of its workgroup range, then per member its grid `(x, y)`
/// as its own dispatch would have had it (`dispatch_size`), which its code reads through `num_workgroups`.
pub fn params(grids: &[(u32, u32)]) -> Vec<u32> {
    let mut end = 0;
    let mut words: Vec<u32> = grids
        .iter()
        .map(|&(x, y)| {
            end += x * y;
            end
        })
        .collect();
    words.extend(grids.iter().flat_map(|&(x, y)| [x, y]));
    words
}

/// The source of a dispatch running `sources` (each a whole kernel's shader, as `generate` made it) side by
/// side. Binding 0 is the group's [`params`]; member `i`'s binding `n` is `1 + spans[..i].sum() + n`, where a
/// member's span is its own bindings' range (`Kernel::binding_span`).
pub fn generate(sources: &[String], spans: &[usize]) -> String {
    let members: Vec<Member> = sources.iter().enumerate().map(|(i, s)| split(s, i)).collect();
    let mut out = String::new();
    let mut enables: Vec<&str> = members.iter().flat_map(|m| m.enables.iter().map(String::as_str)).collect();
    enables.sort_unstable();
    enables.dedup();
    for e in enables {
        let _ = writeln!(out, "{e}");
    }
    let words = 3 * members.len();
    let _ = writeln!(out, "@group(0) @binding(0) var<uniform> grp_p: array<vec4<u32>, {}>;", param_vecs(words));
    for m in &members {
        out.push_str(&m.decls);
    }
    // The builtins any member takes, under names of the group's own.
    let mut builtins: Vec<&str> = vec!["local_invocation_id", "workgroup_id", "num_workgroups"];
    for m in &members {
        for (b, _) in &m.builtins {
            if !builtins.contains(&b.as_str()) {
                builtins.push(b);
            }
        }
    }
    let decl: Vec<String> = builtins.iter().map(|b| format!("@builtin({b}) grp_{b}: {}", builtin_type(b))).collect();
    let _ = writeln!(out, "@compute @workgroup_size({WORKGROUP_SIZE})\nfn main({}) {{", decl.join(", "));
    out.push_str("    let grp_g = grp_workgroup_id.x + grp_workgroup_id.y * grp_num_workgroups.x;\n");
    let word = |k: usize| format!("grp_p[{}].{}", k / 4, ["x", "y", "z", "w"][k % 4]);
    let mut runs = String::new();
    for (i, m) in members.iter().enumerate() {
        let (gx, gy) = (word(members.len() + 2 * i), word(members.len() + 2 * i + 1));
        let start = if i == 0 { "0u".to_string() } else { word(i - 1) };
        let _ = writeln!(out, "    {}if (grp_g < {}) {{", if i == 0 { "" } else { "else " }, word(i));
        // Uniform values only (builtins of the workgroup, a uniform buffer): the members' barriers stay in
        // uniform control flow.
        let _ = writeln!(out, "        let grp_l = grp_g - {start};");
        let _ = writeln!(out, "        let grp_w = vec3<u32>(grp_l % {gx}, grp_l / {gx}, 0u);");
        let mut args = Vec::new();
        let mut params = Vec::new();
        for (b, name) in &m.builtins {
            args.push(match b.as_str() {
                "workgroup_id" => "grp_w".to_string(),
                "num_workgroups" => format!("vec3<u32>({gx}, {gy}, 1u)"),
                "global_invocation_id" => {
                    format!("vec3<u32>(grp_w.x * {WORKGROUP_SIZE}u + grp_local_invocation_id.x, grp_w.y, 0u)")
                }
                other => format!("grp_{other}"),
            });
            params.push(format!("{name}: {}", builtin_type(b)));
        }
        // A function of its own, so that the member's `return`s end only its part.
        let _ = writeln!(runs, "fn grp_run{i}({}) {{\n{}\n}}", params.join(", "), m.body);
        let _ = writeln!(out, "        grp_run{i}({});\n    }}", args.join(", "));
    }
    out.push_str("}\n");
    out.push_str(&runs);
    resolve(out, spans)
}

/// The WGSL type of a builtin an entry point may take.
fn builtin_type(b: &str) -> &'static str {
    match b {
        "local_invocation_id" | "workgroup_id" | "num_workgroups" | "global_invocation_id" => "vec3<u32>",
        _ => "u32",
    }
}

/// Member `i`'s source taken apart, its module-scope names prefixed `m{i}_` and its bindings moved past those of
/// the members before it (the caller adds them up: see [`generate`]).
fn split(src: &str, i: usize) -> Member {
    let src = strip_comments(src);
    let mut enables = Vec::new();
    let mut text = String::with_capacity(src.len());
    for line in src.lines() {
        if line.trim_start().starts_with("enable ") {
            enables.push(line.trim().to_string());
        } else {
            text.push_str(line);
            text.push('\n');
        }
    }
    let declared = declared_names(&text);
    let prefix = format!("m{i}_");
    let text = rename(&text, &declared, &prefix);
    // The entry point: `@compute @workgroup_size(N)` then `fn m{i}_main(params) { body }`.
    let at = text.find("@compute").expect("a kernel's source has an entry point");
    let head_end = text[at..].find('{').map(|p| at + p).expect("the entry point has a body");
    let head = &text[at..head_end];
    assert!(
        head.contains(&format!("@workgroup_size({WORKGROUP_SIZE})")),
        "a grouped kernel runs {WORKGROUP_SIZE} threads a workgroup: {head}"
    );
    let open = head.find(&format!("fn {prefix}main(")).expect("fn main");
    let args = &head[open + format!("fn {prefix}main(").len()..head.rfind(')').expect("parameters close")];
    let builtins = args
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| {
            let b = a.strip_prefix("@builtin(").expect("entry point parameters are builtins");
            let (builtin, rest) = b.split_once(')').expect("a builtin's name closes");
            let name = rest.trim().split(':').next().expect("a parameter name").trim();
            (builtin.trim().to_string(), name.to_string())
        })
        .collect();
    let close = matching_brace(&text, head_end);
    let body = text[head_end + 1..close].to_string();
    let mut decls = text[..at].to_string();
    decls.push_str(&text[close + 1..]);
    let decls = rebind(&decls, i);
    Member { decls, builtins, body, enables }
}

/// `src` without `//` and `/* */` comments.
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |p| &r[p..]);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |p| &r[p + 2..]);
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Identifiers and everything else of `src`, in order: `(is_identifier, text)`.
fn tokens(src: &str) -> Vec<(bool, &str)> {
    let mut out = Vec::new();
    let bytes = src.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let start = i;
        if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' {
            while i < bytes.len() && ident(bytes[i]) {
                i += 1;
            }
            out.push((true, &src[start..i]));
        } else if bytes[i].is_ascii_digit() {
            // A number with its suffix (`2u`, `1e-3f`): not an identifier.
            while i < bytes.len() && (ident(bytes[i]) || bytes[i] == b'.') {
                i += 1;
            }
            out.push((false, &src[start..i]));
        } else {
            i += 1;
            out.push((false, &src[start..i]));
        }
    }
    out
}

/// Names declared at module scope: after `fn`, `const`, `override`, `struct`, `alias`, and `var` (past its
/// address space) at brace depth 0.
fn declared_names(src: &str) -> Vec<String> {
    let toks: Vec<(bool, &str)> = tokens(src).into_iter().filter(|t| !t.1.trim().is_empty()).collect();
    let mut names = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < toks.len() {
        match toks[i] {
            (false, "{") => depth += 1,
            (false, "}") => depth -= 1,
            (true, kw @ ("fn" | "const" | "override" | "struct" | "alias" | "var")) if depth == 0 => {
                let mut j = i + 1;
                if kw == "var" && toks.get(j) == Some(&(false, "<")) {
                    while toks.get(j).is_some_and(|t| t.1 != ">") {
                        j += 1;
                    }
                    j += 1;
                }
                if let Some(&(true, name)) = toks.get(j) {
                    names.push(name.to_string());
                }
                i = j;
            }
            _ => {}
        }
        i += 1;
    }
    names.sort_unstable();
    names.dedup();
    names
}

/// `src` with every identifier in `names` (not a field after `.`) prefixed.
fn rename(src: &str, names: &[String], prefix: &str) -> String {
    let mut out = String::with_capacity(src.len() + 1024);
    let mut after_dot = false;
    for (ident, t) in tokens(src) {
        if ident && !after_dot && names.binary_search_by(|n| n.as_str().cmp(t)).is_ok() {
            out.push_str(prefix);
        }
        out.push_str(t);
        if !t.trim().is_empty() {
            after_dot = t == ".";
        }
    }
    out
}

/// Where the `}` closing the `{` at `open` is.
fn matching_brace(src: &str, open: usize) -> usize {
    let mut depth = 0;
    for (p, c) in src[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + p;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces in a kernel's source")
}

/// `decls` with each `@binding(n)` of member `i` renumbered to a placeholder [`resolve`] fills in.
fn rebind(decls: &str, i: usize) -> String {
    let mut out = String::with_capacity(decls.len());
    let mut rest = decls;
    while let Some(p) = rest.find("@binding(") {
        out.push_str(&rest[..p]);
        let after = &rest[p + "@binding(".len()..];
        let close = after.find(')').expect("a binding closes");
        let n: usize = after[..close].trim().parse().expect("a binding number");
        let _ = write!(out, "@binding(BIND{i}_{n})");
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Resolves [`rebind`]'s placeholders: member `i`'s binding `n` is `1 + spans[..i].sum() + n`.
fn resolve(src: String, spans: &[usize]) -> String {
    let mut out = src;
    let mut base = 1;
    for (i, &b) in spans.iter().enumerate() {
        for n in (0..b).rev() {
            out = out.replace(&format!("BIND{i}_{n})"), &format!("{})", base + n));
        }
        base += b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wgpu::codegen::{validate, Target};
    use crate::graph::build::{bin, data, fold, scalar, un};
    use crate::graph::Graph;
    use crate::kernel::{dispatches, WORKGROUP_SIZE};
    use crate::op::{BinaryOp, ReduceOp, UnaryOp};
    use crate::schedule::{plan, Options};

    /// A row fold, a column fold, a map, a transposing (tiled) map and a rows kernel (softmax-like), none
    /// reading another, planned with grouping on.
    fn independent() -> (Graph, Vec<crate::graph::NodeId>) {
        let mut g = Graph::default();
        let (a, b, c, d, e) = (
            data(&mut g, &[300, 257]),
            data(&mut g, &[100, 33]),
            data(&mut g, &[4099]),
            data(&mut g, &[64, 96]),
            data(&mut g, &[70, 513]),
        );
        let rows = fold(&mut g, ReduceOp::Sum, a, 1);
        let cols = fold(&mut g, ReduceOp::Max, b, 0);
        let two = scalar(&mut g, 2.0);
        let map = bin(&mut g, BinaryOp::Mul, c, two);
        let map = un(&mut g, UnaryOp::Exp, map);
        let view = crate::view::View::contiguous(&[64, 96].into()).permute(&[1, 0]);
        let dt = g.add(crate::graph::NodeOp::View(view, d), [96, 64].into(), crate::dtype::DType::F32);
        let tiled = un(&mut g, UnaryOp::Sin, dt);
        let max = fold(&mut g, ReduceOp::Max, e, 1);
        let shifted = bin(&mut g, BinaryOp::Sub, e, max);
        let ex = un(&mut g, UnaryOp::Exp, shifted);
        let sum = fold(&mut g, ReduceOp::Sum, ex, 1);
        let soft = bin(&mut g, BinaryOp::Div, ex, sum);
        (g, vec![rows, cols, map, tiled, soft])
    }

    #[test]
    fn grouped_sources_validate_with_and_without_subgroups() {
        let (g, outs) = independent();
        let p = plan(&g, &outs, &Options { group: true, max_bindings: 16, ..Options::TEST });
        let runs = dispatches(&p.kernels);
        assert!(runs.iter().filter(|r| r.len() == 2).count() >= 2, "pairs joined: {runs:?}");
        for subgroups in [false, true] {
            let target = Target { subgroups, ..Default::default() };
            for run in runs.iter().filter(|r| r.len() > 1) {
                let members = &p.kernels[run.clone()];
                let sources: Vec<String> =
                    members.iter().map(|k| crate::backend::wgpu::codegen::generate(k, &target)).collect();
                let spans: Vec<usize> = members.iter().map(|k| k.binding_span()).collect();
                let src = generate(&sources, &spans);
                validate(&src);
                // One entry point, every member's bindings apart: 0 the group's, then each member's span.
                assert_eq!(src.matches("@compute").count(), 1);
                // No member stores into an input here, so every number of every span is declared once.
                let bindings = 1 + spans.iter().sum::<usize>();
                for n in 0..bindings {
                    assert_eq!(src.matches(&format!("@binding({n})")).count(), 1, "binding {n}");
                }
                assert!(!src.contains(&format!("@binding({bindings})")));
                assert!(src.contains(&format!("@workgroup_size({WORKGROUP_SIZE})")));
            }
        }
    }

    #[test]
    fn members_keep_their_names_apart_and_comments_go() {
        let a = "// a comment with fn main( in it\n@group(0) @binding(0) var<uniform> p: array<vec4<u32>, 1>;\n\
                 @group(0) @binding(1) var<storage, read_write> o0: array<f32>;\nconst K: u32 = 2u;\n\
                 fn helper(x: f32) -> f32 { return x * f32(K); }\n/* block */\n@compute @workgroup_size(256)\n\
                 fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n\
                 let i = gid.x + gid.y * nwg.x * 256u; if (i >= p[0].x) { return; } o0[i] = helper(o0[i]); }\n";
        let src = generate(&[a.to_string(), a.to_string()], &[2, 2]);
        validate(&src);
        assert!(src.contains("fn m0_helper(") && src.contains("fn m1_helper(") && src.contains("m1_K"));
        assert!(src.contains("@binding(3) var<uniform> m1_p") && !src.contains("comment") && !src.contains("block"));
        assert_eq!(params(&[(3, 1), (70000, 2)]), vec![3, 140003, 3, 1, 70000, 2]);
    }
}
