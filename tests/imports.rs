//! The house has no import circles: within each crate, the modules (one per file) that name
//! each other through `crate::`, `super::` or `self::` paths form no cycle, so each can be read
//! (and moved) after the ones it uses. A module naming its own descendants does not count
//! (declaring them is what a parent does); a cycle fails here, naming the modules in it.
//!
//! How the graph is drawn: each `.rs` file is a module, its path from its place in the crate's
//! folder (`a/b.rs` and `a/b/mod.rs` are `a::b`); every path in its code (not its comments, not
//! a `#[cfg(test)] mod` block) that starts with `crate::`, `super::` or `self::`, `use` trees
//! expanded, names the deepest module it walks through. A name the crate root re-exports
//! (`pub use storage::queue;`, `pub use queue::Lease;`) stands for the module it comes from,
//! so an import through the root is followed to where it leads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every module of the crate whose root folder is `src`, by its file.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, prefix: &Module, out: &mut BTreeMap<Module, PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                let mut inner = prefix.clone();
                inner.push(name);
                if path.join("mod.rs").exists() {
                    out.insert(inner.clone(), path.join("mod.rs"));
                }
                walk(&path, &inner, out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                match (prefix.is_empty(), stem) {
                    (_, "mod") => {}
                    (true, "lib" | "main") => {
                        out.insert(Vec::new(), path.clone());
                    }
                    _ => {
                        let mut module = prefix.clone();
                        module.push(stem.to_string());
                        out.insert(module, path.clone());
                    }
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &Vec::new(), &mut out);
    out
}

/// The code of a file: comments out, and every `#[cfg(test)] mod NAME { ... }` block.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("//") {
        let (code, after) = rest.split_at(at);
        // Not a comment inside a string ("http://..."): a quote left open on this line.
        let line_start = code.rfind('\n').map_or(0, |n| n + 1);
        if code[line_start..].matches('"').count() % 2 == 1 {
            out.push_str(code);
            out.push_str("//");
            rest = &after[2..];
            continue;
        }
        out.push_str(code);
        rest = after.find('\n').map_or("", |n| &after[n..]);
    }
    out.push_str(rest);
    without_test_modules(&out)
}

/// `code` without its `#[cfg(test)] mod NAME { ... }` blocks (braces in strings skipped).
fn without_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        let item = item
            .strip_prefix("pub(crate)")
            .or(item.strip_prefix("pub(super)"));
        let item = item.unwrap_or(after.trim_start()).trim_start();
        let opens_module = item.starts_with("mod ")
            && item
                .find('{')
                .is_some_and(|b| item.find(';').is_none_or(|s| b < s));
        if !opens_module {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        let open = item.find('{').unwrap();
        let body = &item[open..];
        let (mut depth, mut in_string, mut escaped, mut end) = (0, false, false, body.len());
        for (i, c) in body.char_indices() {
            match (in_string, c) {
                (true, _) if escaped => escaped = false,
                (true, '\\') => escaped = true,
                (true, '"') => in_string = false,
                (true, _) => {}
                (false, '"') => in_string = true,
                (false, '{') if !body[..i].ends_with('\'') => depth += 1,
                (false, '}') if !body[..i].ends_with('\'') => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &body[end..];
    }
    out.push_str(rest);
    out
}

/// The paths a `use` tree names, expanded (`crate::{a::B, c}` is `crate::a::B`, `crate::c`).
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let close = tree.rfind('}').unwrap_or(tree.len());
    let (head, inner) = (&tree[..open], &tree[open + 1..close]);
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
        .flat_map(|p| expand(&format!("{head}{p}")))
        .collect()
}

/// Every `crate::`/`super::`/`self::` path in `code`.
fn paths_in(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for statement in code.split("use ").skip(1) {
        let tree = statement.split(';').next().unwrap_or_default();
        if ["crate::", "super::", "self::"]
            .iter()
            .any(|p| tree.starts_with(p))
        {
            paths.extend(expand(tree));
        }
    }
    let bytes = code.as_bytes();
    for start in ["crate::", "super::"] {
        for (at, _) in code.match_indices(start) {
            let word_before =
                at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
            if word_before {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |n| at + n);
            paths.push(code[at..end].to_string());
        }
    }
    paths
}

/// The names the crate root re-exports, each standing for the module it comes from (the
/// module itself when it is one): `pub use storage::{queue, db};`, `pub use queue::Lease;`.
fn root_names(modules: &BTreeMap<Module, PathBuf>) -> BTreeMap<String, Module> {
    let root = code_of(&std::fs::read_to_string(&modules[&Vec::new()]).unwrap());
    let paths: Vec<String> = root
        .split("pub use ")
        .skip(1)
        .map(|statement| statement.split(';').next().unwrap_or_default())
        .filter(|tree| {
            !["crate::", "super::", "self::"]
                .iter()
                .any(|p| tree.starts_with(p))
        })
        .flat_map(expand)
        .collect();
    let mut names: BTreeMap<String, Module> = BTreeMap::new();
    // Twice: a re-export may go through a name re-exported before it.
    for _ in 0..2 {
        for path in &paths {
            let segments: Vec<&str> = path.split("::").collect();
            let (Some(first), Some(last)) = (segments.first(), segments.last()) else {
                continue;
            };
            let mut at: Module = match names.get(*first) {
                Some(module) if !modules.contains_key(&vec![first.to_string()]) => module.clone(),
                _ => vec![first.to_string()],
            };
            if !modules.contains_key(&at) {
                continue;
            }
            for segment in &segments[1..] {
                let mut next = at.clone();
                next.push(segment.split(" as ").next().unwrap_or(segment).to_string());
                if !modules.contains_key(&next) {
                    break;
                }
                at = next;
            }
            let name = last.rsplit(" as ").next().unwrap_or(last);
            names.insert(name.to_string(), at);
        }
    }
    names
}

/// The deepest module of `modules` that `path`, read in module `from`, walks through.
fn target(
    modules: &BTreeMap<Module, PathBuf>,
    names: &BTreeMap<String, Module>,
    from: &Module,
    path: &str,
) -> Module {
    let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut at = match segments.peek() {
        Some(&"crate") => {
            segments.next();
            match segments.peek() {
                Some(name) if !modules.contains_key(&vec![name.to_string()]) => {
                    match names.get(*name) {
                        Some(module) => {
                            segments.next();
                            module.clone()
                        }
                        None => Vec::new(),
                    }
                }
                _ => Vec::new(),
            }
        }
        _ => from.clone(),
    };
    while segments.peek() == Some(&"super") {
        segments.next();
        at.pop();
    }
    if segments.peek() == Some(&"self") {
        segments.next();
    }
    for segment in segments {
        let segment = segment.split(" as ").next().unwrap_or(segment);
        let mut next = at.clone();
        next.push(segment.to_string());
        if !modules.contains_key(&next) {
            break;
        }
        at = next;
    }
    at
}

/// Each module's edges to the modules it names (not its own descendants, not the root).
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let modules = modules(src);
    let names = root_names(&modules);
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let to: BTreeSet<Module> = paths_in(&code)
            .iter()
            .map(|p| target(&modules, &names, module, p))
            .filter(|t| !t.is_empty() && !t.starts_with(module))
            .collect();
        edges.insert(module.clone(), to);
    }
    edges
}

/// The strongly connected components of more than one module (Tarjan's).
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.join("::"));
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in ["engine/src", "actors/src", "src", "bench/src"] {
        let edges = graph(&root.join(src));
        assert!(edges.len() > 5, "{src}: the modules were found");
        let found = cycles(&edges);
        assert!(
            found.is_empty(),
            "{src} has import circles (each list names each other): {found:?}"
        );
    }
}

/// The checker finds a circle through `super::` paths, `use` trees and a name the crate root
/// re-exports, and ignores one in a comment or a test module.
#[test]
fn the_import_checker_finds_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).unwrap();
    let lib = "pub mod a;\npub mod b;\npub mod d;\npub use d::Z;\n";
    std::fs::write(src.join("lib.rs"), lib).unwrap();
    let a = "pub mod c;\npub fn y() {}\nuse crate::{b::X, a::c};\n";
    std::fs::write(src.join("a/mod.rs"), a).unwrap();
    std::fs::write(src.join("a/c.rs"), "// use crate::b;\nfn f() {}\n").unwrap();
    std::fs::write(src.join("d.rs"), "pub struct Z;\n").unwrap();
    let b = |body: &str| std::fs::write(src.join("b.rs"), format!("pub struct X;\n{body}\n"));
    b("fn g() { super::a::y() }").unwrap();
    let found = cycles(&graph(src));
    assert_eq!(found, vec![vec!["a".to_string(), "b".to_string()]]);
    b("// super::a::y()").unwrap();
    assert!(cycles(&graph(src)).is_empty(), "a comment is not a use");
    b("#[cfg(test)]\nmod tests {\n    fn t() { let _ = \"}\"; crate::a::y() }\n}").unwrap();
    assert!(cycles(&graph(src)).is_empty(), "a test module is not a use");
    // d names a through the root's name for it... and a names d by that name.
    std::fs::write(
        src.join("d.rs"),
        "pub struct Z;\nfn h() { crate::a::y() }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a/mod.rs"),
        "pub mod c;\npub fn y() {}\nuse crate::Z;\n",
    )
    .unwrap();
    let found = cycles(&graph(src));
    assert_eq!(
        found,
        vec![vec!["a".to_string(), "d".to_string()]],
        "through the root"
    );
}

/// The actors and the binary reach the database only through the engine's flows and its
/// door: no module of theirs (test modules aside) names `relayq_engine::storage`, where the
/// tables' SQL lives. A table's types a command shows are re-exported by its flow.
#[test]
fn the_actors_and_the_binary_do_not_reach_into_storage() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for src in ["actors/src", "src"] {
        for (module, file) in modules(&root.join(src)) {
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            if code.contains("relayq_engine::storage") {
                found.push(format!("{src}: {}", module.join("::")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "these name relayq_engine::storage; use the flow's re-export instead: {found:?}"
    );
}
