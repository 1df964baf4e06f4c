//! Keeps the layers honest: every module's `crate::` paths must point at a
//! layer listed before its own (or at its own folder), no subcommand may
//! import another, and files within one folder must not import each other
//! in a cycle. A file's unit tests (`#[cfg(test)] mod tests`, at its end)
//! may reach anywhere.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

/// The layers in import order. Layers of equal rank may not import each other.
const LAYERS: [(&str, u8); 12] = [
    ("text", 0),
    ("model", 1),
    ("host", 2),
    ("runtime", 3),
    ("kernel", 4),
    ("cgroup", 4),
    ("analysis", 5),
    ("render", 6),
    ("stream", 7),
    ("scenario", 8),
    ("cli", 9),
    ("commands", 10),
];

fn rank(layer: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == layer)
        .map(|(_, r)| *r)
}

/// Every `crate::a::b` path in `source` outside its tests, as segment lists;
/// `use crate::{a::b, c::{d, e}}` gives [a, b] and [c, d] and [c, e].
fn crate_paths(source: &str) -> Vec<Vec<String>> {
    let code = outside_tests(source);
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let end = path_end(rest);
        expand(&rest[..end], &mut Vec::new(), &mut paths);
        rest = &rest[end..];
    }
    paths
}

/// The file up to its `mod tests`; any other `#[cfg(test)]` item (a test
/// helper module declared mid-file) hides nothing after it.
fn outside_tests(source: &str) -> &str {
    source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default()
}

/// Where a path starting at `text` ends: after its closing brace, or at the
/// first character that cannot be part of a path.
fn path_end(text: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            c if depth > 0 || c.is_alphanumeric() || c == '_' || c == ':' => {}
            _ => return i,
        }
    }
    text.len()
}

fn expand(path: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let path: String = path.chars().filter(|c| !c.is_whitespace()).collect();
    match path.find('{') {
        None => {
            let mut full = prefix.clone();
            full.extend(path.split("::").filter(|s| !s.is_empty()).map(String::from));
            if !full.is_empty() {
                out.push(full);
            }
        }
        Some(open) => {
            let head = &path[..open];
            let body = &path[open + 1..path.rfind('}').unwrap_or(path.len())];
            let before = prefix.len();
            prefix.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
            for item in split_top_level(body) {
                expand(item, prefix, out);
            }
            prefix.truncate(before);
        }
    }
}

fn split_top_level(body: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&body[start..]);
    items.into_iter().filter(|s| !s.trim().is_empty()).collect()
}

/// Module files by (layer, file stem), read from src/.
fn modules() -> BTreeMap<(String, String), String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeMap::new();
    for entry in fs::read_dir(&src).expect("read src/") {
        let path = entry.expect("entry of src/").path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            read_layer(&name, &path, "", &mut found);
        } else if !["lib", "main", "layers"].contains(&name.as_str()) {
            let text = fs::read_to_string(&path).expect("read module");
            found.insert((name.clone(), name), text);
        }
    }
    found
}

/// The files of a layer's folder and of the folders within it, keyed by
/// their path inside the layer without ".rs" ("diagnose/causes/stale_major").
fn read_layer(
    layer: &str,
    dir: &Path,
    prefix: &str,
    found: &mut BTreeMap<(String, String), String>,
) {
    for entry in fs::read_dir(dir).expect("read a layer's folder") {
        let path = entry.expect("entry of a layer").path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let inside = format!("{prefix}{stem}");
        if path.is_dir() {
            read_layer(layer, &path, &format!("{inside}/"), found);
        } else {
            let text = fs::read_to_string(&path).expect("read module");
            found.insert((layer.to_string(), inside), text);
        }
    }
}

/// The module of the layer a file belongs to: itself, or the folder it
/// lies in ("diagnose" for "diagnose/causes/stale_major").
fn unit_of(file: &str) -> &str {
    file.split('/').next().unwrap_or(file)
}

/// Every import that breaks the order, as "layer/file -> crate::path".
fn violations(modules: &BTreeMap<(String, String), String>) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut within: BTreeMap<(String, String), BTreeSet<(String, String)>> = BTreeMap::new();
    for ((layer, file), text) in modules {
        // Files in a folder of a layer are one module to the layer: they may
        // import each other, and the folder as a whole must not be in a cycle.
        let unit = unit_of(file);
        let own = rank(layer).unwrap_or_else(|| panic!("src/{layer} is in no layer of LAYERS"));
        for path in crate_paths(text) {
            let target = &path[0];
            let shown = format!("{layer}/{file} -> crate::{}", path.join("::"));
            match rank(target) {
                None => wrong.push(format!("{shown}: not a layer")),
                Some(_) if target == layer => {
                    if let Some(other) = path.get(1).filter(|o| *o != unit) {
                        within
                            .entry((layer.clone(), unit.to_string()))
                            .or_default()
                            .insert((layer.clone(), other.clone()));
                    }
                }
                Some(r) if r >= own => wrong.push(format!("{shown}: against the layer order")),
                Some(_) => {}
            }
        }
        let code = outside_tests(text);
        if layer == "commands" && file != "mod" && code.contains("super::") {
            wrong.push(format!("{layer}/{file}: a subcommand imports a sibling"));
        }
    }
    for (from, targets) in &within {
        if from.0 == "commands" && from.1 != "mod" {
            wrong.push(format!("commands/{} imports another subcommand", from.1));
        }
        for target in targets {
            if reaches(&within, target, from, &mut BTreeSet::new()) {
                wrong.push(format!(
                    "{}/{} <-> {}/{}: a cycle",
                    from.0, from.1, target.0, target.1
                ));
            }
        }
    }
    wrong
}

fn reaches(
    graph: &BTreeMap<(String, String), BTreeSet<(String, String)>>,
    from: &(String, String),
    to: &(String, String),
    seen: &mut BTreeSet<(String, String)>,
) -> bool {
    if from == to {
        return true;
    }
    if !seen.insert(from.clone()) {
        return false;
    }
    graph
        .get(from)
        .is_some_and(|next| next.iter().any(|n| reaches(graph, n, to, seen)))
}

#[test]
fn imports_follow_the_layer_order() {
    let modules = modules();
    assert!(modules.len() > 30, "found only {} modules", modules.len());
    let wrong = violations(&modules);
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_catches_a_wrong_import_and_a_cycle() {
    let module = |layer: &str, file: &str, text: &str| {
        ((layer.to_string(), file.to_string()), text.to_string())
    };
    let modules = BTreeMap::from([
        module("model", "record", "use crate::{analysis::enrich::Enricher, model::node::X};"),
        module("model", "node", "fn f() { crate::model::record::Record::new() }"),
        module("kernel", "tracer", "use crate::cgroup::resolver::CgroupResolver;"),
        module("commands", "run", "use crate::commands::watch::announce;"),
        module("analysis", "enrich", "use crate::{host::clock::BootClock, model::{access::A, node::N}};\n#[cfg(test)]\nmod tests {\n    use crate::commands::x;\n}"),
        module("analysis", "mod", "#[cfg(test)]\nmod test_support;\nuse crate::render::output::Format;"),
        module("analysis", "diagnose/causes/x", "use crate::analysis::{attribute::A, diagnose::facts::F};"),
        module("analysis", "attribute", "use crate::analysis::diagnose::Diagnoser;"),
    ]);
    let wrong = violations(&modules);
    assert_eq!(
        wrong,
        [
            "analysis/mod -> crate::render::output::Format: against the layer order",
            "kernel/tracer -> crate::cgroup::resolver::CgroupResolver: against the layer order",
            "model/record -> crate::analysis::enrich::Enricher: against the layer order",
            "analysis/attribute <-> analysis/diagnose: a cycle",
            "analysis/diagnose <-> analysis/attribute: a cycle",
            "commands/run imports another subcommand",
            "model/node <-> model/record: a cycle",
            "model/record <-> model/node: a cycle",
        ]
    );
}
