//! The compiler's modules form layers: the top-level modules of `src/` import
//! each other without a circle, and only `commands` (and the crate root and
//! `testing`, which face the library's users) reach into `commands`. Read
//! from the sources: every `crate::module` path outside test code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules above `commands`: the crate root's re-exports and the snapshot
/// helpers built on the `Compile` builder.
const ABOVE_COMMANDS: &[&str] = &["testing"];

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The source without its test code: a `tests.rs` file is all test code, and
/// elsewhere the code from the first `#[cfg(test)]` on (test modules are
/// written last).
fn non_test_code(path: &Path) -> String {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The top-level modules each top-level module imports, with one file that
/// does for each.
fn imports(src: &Path) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module_of = |path: &Path| {
        let first = path.strip_prefix(src).unwrap().components().next().unwrap();
        first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string()
    };
    let modules: BTreeSet<String> = files.iter().map(|p| module_of(p)).filter(|m| m != "lib" && m != "main").collect();
    let mut imports: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for path in &files {
        let from = module_of(path);
        if !modules.contains(&from) {
            continue;
        }
        let code = non_test_code(path);
        let mut named = Vec::new();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                named.extend(group.split(',').map(|item| item.trim().split("::").next().unwrap().to_string()));
            } else {
                named.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
            }
        }
        for to in named {
            if to != from && modules.contains(&to) {
                imports.entry(from.clone()).or_default().entry(to).or_insert_with(|| path.clone());
            }
        }
    }
    imports
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_top_level_modules_import_each_other_without_a_circle() {
    let imports = imports(&src());
    assert!(imports.len() > 10, "too few modules read: {imports:?}");
    // Depth-first search; a module met again while on the path closes a circle.
    fn visit<'a>(
        module: &'a str,
        imports: &'a BTreeMap<String, BTreeMap<String, PathBuf>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(module) {
            return;
        }
        if let Some(at) = path.iter().position(|m| *m == module) {
            let circle: Vec<String> = path[at..]
                .iter()
                .zip(path[at + 1..].iter().chain([&module]))
                .map(|(from, to)| format!("{from} -> {to} ({})", imports[*from][*to].display()))
                .collect();
            panic!("an import circle: {}", circle.join(", "));
        }
        path.push(module);
        for to in imports.get(module).into_iter().flat_map(|m| m.keys()) {
            visit(to, imports, path, done);
        }
        path.pop();
        done.insert(module);
    }
    let mut done = BTreeSet::new();
    for module in imports.keys() {
        visit(module, &imports, &mut Vec::new(), &mut done);
    }
}

#[test]
fn only_the_commands_import_the_commands() {
    let imports = imports(&src());
    assert!(imports["commands"].contains_key("passes"), "commands' imports not read: {:?}", imports["commands"]);
    let below: Vec<String> = imports
        .iter()
        .filter(|(from, to)| !ABOVE_COMMANDS.contains(&from.as_str()) && to.contains_key("commands"))
        .map(|(from, to)| format!("{from} ({})", to["commands"].display()))
        .collect();
    assert!(below.is_empty(), "modules below the commands import them: {below:?}");
}
